"""benchmarks/endpoints_bench.py runs end to end at a small scale (2 sessions, 2 servers), so the script
cannot rot unnoticed; it is run by hand at 32 sessions to measure issue 37's item 5. Only that it runs,
every session succeeds and every row has its figures is checked: timings are the script's to print."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "endpoints_bench.py"
ROWS = ("CPU per turn", "CPU per session (start included)", "added latency per request, p50",
        "added latency per request, p99")


@pytest.mark.slow
def test_the_load_benchmark_runs_sessions_and_the_bare_client_and_prints_the_ratios(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, str(SCRIPT), "--sessions", "2", "--endpoints", "2", "--turns", "1"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "2 concurrent `abhed run` sessions, 2 replay servers" in out and "load average" in out
    assert "sessions that changed server: 0; failed runs: 0" in out and "bare clients failed" not in out
    table = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [line.split(" | ")[0][2:] for line in table] == list(ROWS)
    for line in table:
        assert len(re.findall(r"\d+\.\d ms", line)) == 2 and re.search(r"\d+\.\dx \|$", line), line
    assert not list(tmp_path.glob("abhed-endpoints-bench-*"))  # its workspaces and home are gone
