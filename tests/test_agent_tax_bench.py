"""benchmarks/agent_tax_bench.py runs end to end on a tiny generated tree, so the script cannot rot
unnoticed (it is run by hand, on the kernel tree, to measure issue 34). Only that it runs and prints
every row is checked here: the timings are the script's to print, never a test's to assert."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "agent_tax_bench.py"
ROWS = ("grep files_with_matches, root", "grep content, root", "grep count, root", "grep files_with_matches, drivers/",
        "grep content, drivers/", "grep count, drivers/", "glob **/*.c", "read drivers/",
        "bash `env true`, first call (cold)", "bash `env true`, later calls",
        "bash `true` (read-only: no checkpoint)", "edit (one line)", "write (new 4 KB file)",
        "bash changing 4 files", "undo of that bash call",
        "bash `env true`, first call 3 s after the session opened")  # in another fresh workspace (--turn)


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, str(SCRIPT), "--skip-kernel", "--repeat", "1", "--calls", "1",
                           "--files", "60", *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_the_script_prints_every_call_kind_beside_its_bare_operation(tmp_path: Path) -> None:
    done = run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "generated tree of 60 files" in done.stdout and "load average" in done.stdout
    table = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [next(label for label in ROWS if line.startswith(f"| {label}")) for line in table] == list(ROWS)
    for line in table:  # every row has its figures: Abhed's, the bare operation's, the ratios
        assert len(re.findall(r"\d+\.\d+ m?s", line)) == 5 and len(re.findall(r"\d+\.\dx", line)) == 2, line
    assert not list(tmp_path.glob("abhed-tax-*"))  # the workspaces and homes it made are gone


def test_only_one_kind_runs_that_kind_alone(tmp_path: Path) -> None:
    done = run(tmp_path, "--only", "glob")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 1 and rows[0].startswith("| glob **/*.c | 1 |")


def test_the_generated_tree_is_the_same_every_time(tmp_path: Path) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import agent_tax_bench
    finally:
        sys.path.remove(str(SCRIPT.parent))
    trees = [agent_tax_bench.make_tree(tmp_path / name, 60) for name in ("a", "b")]
    heads = [subprocess.run(["git", "-C", str(t), "rev-parse", "HEAD^{tree}"], capture_output=True, text=True,
                            check=True).stdout for t in trees]
    assert heads[0] == heads[1]
    tracked = subprocess.run(["git", "-C", str(trees[0]), "ls-files"], capture_output=True, text=True).stdout.split()
    assert len(tracked) == 60 and any(path.startswith("drivers/") for path in tracked)
    assert not any(path.startswith("build/") or path.endswith(".log") for path in tracked)  # ignored, yet present
    assert (trees[0] / "build").is_dir()
