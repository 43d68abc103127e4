"""A process killed mid-write leaves the target old or new, never partial (spec §3: atomic writes)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

from abhed_testing import REPO, abhed

CHILD = r"""
import sys, time
from pathlib import Path
from abhed.files.atomic import replace_file
target, size = Path(sys.argv[1]), int(sys.argv[2])
data = b"N" * size
print("ready", flush=True)
start = time.perf_counter()
replace_file(target, data, mode=0o644)
print(f"done {time.perf_counter() - start:.4f}", flush=True)
"""

SIZE = 64 * 1024 * 1024
OLD = b"O" * 1000


def _run_child(target, kill_after: float | None):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(target), str(SIZE)], stdout=subprocess.PIPE,
                            text=True, cwd=REPO)
    assert proc.stdout.readline().strip() == "ready"
    if kill_after is None:
        out = proc.stdout.read()
        proc.wait()
        return float(out.split()[1])
    time.sleep(kill_after)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return None


def test_sigkill_at_any_moment_leaves_old_or_new(tmp_path):
    target = tmp_path / "target.txt"
    target.write_bytes(OLD)
    duration = _run_child(target, None)  # one full write: how long the window is on this machine
    rng = random.Random(7)
    outcomes = {"old": 0, "new": 0}
    interrupted = 0
    for _ in range(12):
        target.write_bytes(OLD)
        _run_child(target, rng.uniform(0, duration * 1.2))
        data = target.read_bytes()
        assert data == OLD or (len(data) == SIZE and data.count(b"N") == SIZE), "partial target"
        outcomes["old" if data == OLD else "new"] += 1
        leftovers = [p for p in tmp_path.iterdir() if ".abhed-tmp-" in p.name]
        interrupted += bool(leftovers)
        for p in leftovers:
            p.unlink()
    assert interrupted >= 1, f"no kill landed mid-write; outcomes {outcomes}"


def test_killed_write_through_the_cli_keeps_the_original(tmp_path, home):
    ws = tmp_path / "w"
    ws.mkdir()
    target = ws / "f.txt"
    target.write_text("original\n")
    env = {**os.environ, "ABHED_HOME": str(home)}
    abhed("tool", "read", json.dumps({"path": str(target)}), "--workspace", str(ws), "--session", "k", env=env)
    # 3.6 MB: under the 4 MiB bound on one call's arguments (agent.max_argument_bytes).
    content = "new " * 900_000
    payload = json.dumps({"path": str(target), "content": content})
    for delay in (0.2, 0.5, 0.8):
        proc = subprocess.Popen([sys.executable, "-m", "abhed", "tool", "write", "-", "--workspace", str(ws),
                                 "--session", "k"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env, cwd=REPO)
        proc.stdin.write(payload.encode())
        proc.stdin.close()
        time.sleep(delay)
        proc.kill()
        proc.wait()
        data = target.read_bytes()
        assert data in (b"original\n", content.encode())
        if data != b"original\n":
            break
