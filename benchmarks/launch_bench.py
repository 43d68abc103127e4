#!/usr/bin/env python3
"""How long Abhed takes to start, beside `python3 -c pass` (issue 18: a start-up that feels instant).

    .venv/bin/python benchmarks/launch_bench.py                     # the venv install (.venv/bin/abhed)
    .venv/bin/python benchmarks/launch_bench.py --binary dist/abhed # and the one-file binary
    .venv/bin/python benchmarks/launch_bench.py --runs 30 --importtime
    .venv/bin/python benchmarks/launch_bench.py --before /work/main/.venv/bin/abhed  # another tree's, same loop

Four commands, each run --runs times, alternating the runners so all see the same machine load:
`--version`, `--help`, one `tool read` of a 200-line file, and `chat` until its prompt is on the
terminal (a pseudo-terminal; the model is a replay server on 127.0.0.1, so connecting to it is part
of the figure, as it is for a user). Each line gives the median wall-clock time and the median CPU
time (user + system of the child: what the command itself costs, much less disturbed than the wall
clock by other jobs on a shared machine), and both as a ratio to `python3 -c pass` run in the same
loop; the venv's own `python -c pass` is shown too (its site and the editable install's import hook
are a floor the venv install pays before any of Abhed, the binary does not). Goals (issue 18), for the wall clock on a quiet machine: --version and --help under 100 ms,
tool read under 250 ms, chat ready under 400 ms. --importtime adds, per command, the modules that
cost most (`python -X importtime`, cumulative). The script never asserts times.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import resource
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from abhed.model.replay import ReplayServer, Turn  # noqa: E402

GOALS_MS = {"--version": 100, "--help": 100, "tool read": 250, "chat ready": 400}
# The chat's banner ("... ends the session."), then its input prompt painted and the cursor shown.
READY = re.compile(rb"ends the.*?>.*?\x1b\[\?25h", re.S)


class Failed(Exception):
    """A run that did not succeed (e.g. an older binary without the command): its runner is left out."""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU milliseconds of one run to its exit."""
    cpu, start = _cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise Failed(f"exit {proc.returncode}: {proc.stderr.decode(errors='replace').strip()[:300]}")
    return wall * 1000, (_cpu() - cpu) * 1000


def chat_once(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall milliseconds until the chat's prompt is on the terminal; CPU milliseconds of the whole
    run (it is ended with Ctrl-D right after: the exit is a small part)."""
    cpu, start = _cpu(), time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec the command on the terminal
        os.chdir(cwd)
        os.execve(cmd[0], cmd, env)
    seen, ready = b"", None
    try:
        while ready is None:
            if not select.select([fd], [], [], 30)[0]:
                raise Failed(f"no prompt after 30 s; the terminal shows: {seen[-500:]!r}")
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                raise Failed(f"chat ended before its prompt; the terminal shows: {seen[-500:]!r}")
            seen += chunk
            if b"\x1b[6n" in chunk:  # prompt_toolkit asks where the cursor is: answer as a terminal would
                os.write(fd, b"\x1b[1;1R")
            if READY.search(seen):
                ready = time.perf_counter() - start
        os.write(fd, b"\x04")  # Ctrl-D ends the session
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and select.select([fd], [], [], 1)[0]:
            try:
                if not os.read(fd, 65536):
                    break
            except OSError:
                break
    finally:
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    return ready * 1000, (_cpu() - cpu) * 1000


def importtime(python: Path, args: list[str], env: dict[str, str], cwd: Path, top: int = 8) -> list[str]:
    """The `top` modules with the largest cumulative import time (nested ones included)."""
    proc = subprocess.run([str(python), "-X", "importtime", "-m", "abhed", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    rows = []
    for line in proc.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", line)
        if match and len(match.group(2)) <= 3:  # top-level imports only, not their parts again
            rows.append((int(match.group(1)), match.group(3)))
    rows.sort(reverse=True)
    return [f"{us / 1000:6.1f} ms {name}" for us, name in rows[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--binary", type=Path, help="also time this one-file binary (e.g. dist/abhed)")
    parser.add_argument("--before", type=Path, help="also time this other install's abhed (e.g. the main tree's "
                        ".venv/bin/abhed), interleaved with this one: a change's before and after")
    parser.add_argument("--importtime", action="store_true", help="show the costliest imports of each command")
    parser.add_argument("--only", action="append", choices=sorted(GOALS_MS), help="time only this command (repeatable)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="abhed-startup-")).resolve()
    workspace = work / "workspace"  # the session store (ABHED_HOME) must lie outside it
    workspace.mkdir()
    target = workspace / "file.py"
    target.write_text("".join(f"line_{i} = {i}\n" for i in range(200)))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "ABHED_HOME": str(work / "abhed-home"),
           "ABHED_CONFIG": "", "LANG": "C.UTF-8", "TERM": "xterm", "COLUMNS": "120", "LINES": "40"}
    # Two floors: the system's python3 (the yardstick), and the venv's own interpreter, whose
    # start-up (site, the editable install's import hook) the venv install pays before any of Abhed.
    floors = {"python3 -c pass": ["/usr/bin/python3", "-c", "pass"],
              "venv python -c pass": [str(REPO / ".venv/bin/python"), "-c", "pass"]}
    runners = {"venv": [str(REPO / ".venv/bin/abhed")]}
    if args.before:
        runners = {"before": [str(args.before.absolute())], **runners}
    if args.binary:
        runners["binary"] = [str(args.binary.resolve())]
    with ReplayServer([Turn(text="unused")]) as server:
        commands = {"--version": ["--version"], "--help": ["--help"],
                    "tool read": ["tool", "read", json.dumps({"path": str(target)}), "--workspace",
                                  str(workspace), "--session", "bench"],
                    "chat ready": ["chat", "--endpoint", server.url, "--workspace", str(workspace)]}
        commands = {name: cmd_args for name, cmd_args in commands.items() if not args.only or name in args.only}
        print(f"start-up, median of {args.runs} runs: wall ms / CPU ms (x python3 -c pass, wall/CPU; same loop)")
        print(f"{'command':<11} " + " ".join(f"{k:>20}" for k in floors) + " "
              + " ".join(f"{k:>26}" for k in runners) + "   goal (wall)")
        for name, cmd_args in commands.items():
            once = chat_once if name == "chat ready" else run_once
            active = {}
            for label, runner in runners.items():  # warm-up: page cache, the binary's unpack folder
                try:
                    once([*runner, *cmd_args], env, work)
                    active[label] = runner
                except Failed as exc:
                    print(f"{name}: {label} left out: {exc}")
            samples: dict[str, list[tuple[float, float]]] = {k: [] for k in [*floors, *active]}
            for _ in range(args.runs):
                for label, floor in floors.items():
                    samples[label].append(run_once(floor, env, work))
                for label, runner in active.items():
                    samples[label].append(once([*runner, *cmd_args], env, work))
            wall = {k: statistics.median(s[0] for s in v) for k, v in samples.items()}
            cpu = {k: statistics.median(s[1] for s in v) for k, v in samples.items()}
            base_wall, base_cpu = wall["python3 -c pass"], cpu["python3 -c pass"]
            cells = [f"{wall[k]:6.0f}/{cpu[k]:4.0f} ({wall[k] / base_wall:4.1f}x/{cpu[k] / base_cpu:4.1f}x)"
                     if k in wall else "n/a" for k in runners]
            verdicts = " ".join(f"{k}: {'met' if wall[k] < GOALS_MS[name] else 'missed'}" for k in runners if k in wall)
            print(f"{name:<11} " + " ".join(f"{f'{wall[k]:.0f}/{cpu[k]:.0f}':>20}" for k in floors) + " "
                  + " ".join(f"{c:>26}" for c in cells) + f"   < {GOALS_MS[name]} ms: {verdicts}")
        if args.importtime:
            for name, cmd_args in commands.items():
                if name == "chat ready":  # on a pipe the chat reads plain lines: stdin is empty, it ends
                    continue
                print(f"\n{name}: costliest imports (python -X importtime, cumulative)")
                for row in importtime(REPO / ".venv/bin/python", cmd_args, env, work):
                    print(f"  {row}")


if __name__ == "__main__":
    main()
