"""Helpers shared by the sandbox test modules (imported as a plain module: no tests/__init__.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import sandbox


@dataclass
class Outcome:
    exit_code: int | None
    timed_out: bool
    output: str
    omitted_chars: int
    final_cwd: str | None
    backend: str
    sandboxed: bool
    notes: tuple[str, ...] = ()


def config_from(data: dict | None) -> sandbox.SandboxConfig:
    data = dict(data or {})
    if "limits" in data:
        data["limits"] = sandbox.Limits(**data["limits"])
    return sandbox.SandboxConfig(**data)


def outcome_of(result: sandbox.Result) -> Outcome:
    return Outcome(
        result.exit_code,
        result.timed_out,
        result.output,
        result.omitted_chars,
        None if result.final_cwd is None else str(result.final_cwd),
        result.backend,
        result.sandboxed,
        tuple(result.notes),
    )


class DriverError(AssertionError):
    def __init__(self, answer: dict) -> None:
        super().__init__(f"{answer['error_type']}: {answer['error']}\n{answer.get('traceback', '')}")
        self.error_type = answer["error_type"]
        self.error = answer["error"]


def host_pids_with(marker: str) -> list[int]:
    """Host processes whose command line contains ``marker`` (we run as root: we see all)."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def vmm_pids(ancestor: int) -> list[int]:
    """The qemu processes under ``ancestor`` (qemu runs under bwrap: not a direct child)."""
    found, stack = [], [ancestor]
    while stack:
        pid = stack.pop()
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
            if pid != ancestor and Path(f"/proc/{pid}/comm").read_text().startswith("qemu"):
                found.append(pid)
        except OSError:
            continue  # it ended meanwhile
    return found


def wait_until(predicate, timeout_s: float = 60.0, interval_s: float = 0.05) -> bool:
    """Poll until ``predicate()`` is true; False if it never was within the (generous) bound."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def unique_marker() -> str:
    """A sleep duration no other process on the host uses, to find ours in /proc."""
    return f"{4000 + uuid.uuid4().int % 5000}.{uuid.uuid4().int % 10**6:06d}"


def chown_to(path: Path, runner) -> None:
    """Give ``path`` (recursively) to the runner's user, so files the test prepares are its own."""
    if os.geteuid() != 0 or runner.uid == 0:
        return
    for p in [path, *path.rglob("*")] if path.is_dir() and not path.is_symlink() else [path]:
        os.lchown(p, runner.uid, runner.gid)


def fds_in_a_fresh_process(body: str, workspace: Path) -> dict:
    """Run ``body`` (Python, with ``sandbox``, ``os`` and ``workspace`` in scope) in a new interpreter
    and return the dict it leaves in ``out``.

    For descriptor counts: this test process carries threads from earlier tests (a shared
    microVM's reader, egress proxies) that open and close descriptors at any moment, so a
    listing of its /proc/self/fd is not the command's alone.
    """
    script = f"import json, os, sys\nimport sandbox\nworkspace = sys.argv[1]\nout = {{}}\n{body}\nprint(json.dumps(out))\n"
    repo = Path(__file__).resolve().parents[2]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo), "LANG": "C.UTF-8", "HOME": os.environ.get("HOME", "/")}
    done = subprocess.run([sys.executable, "-c", script, str(workspace)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])
