"""scripts/mutate.py, the mutation runner: it must find a survivor, count a kill, and restore the module."""

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mutate.py"

MODULE = textwrap.dedent('''\
    """A tiny module to mutate."""


    def clamp(x, hi):
        if x > hi:
            return hi
        return x


    def unused_flag():
        return True
    ''')

TESTS = textwrap.dedent('''\
    from m import clamp


    def test_clamp():
        assert clamp(5, 3) == 3
        assert clamp(2, 3) == 2
    ''')


def run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tmp_path), "--python", sys.executable,
         "--module", "m.py", "--tests", "test_m.py", *extra],
        capture_output=True, text=True,
    )


def test_kills_reports_survivors_and_restores(tmp_path):
    (tmp_path / "m.py").write_text(MODULE)
    (tmp_path / "test_m.py").write_text(TESTS)
    proc = run(tmp_path)
    # unused_flag's `True -> False` and its deleted return are never noticed: below the 90% goal.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "survived: m.py:11  True -> False" in proc.stdout
    assert "killed   m.py:5  Gt -> GtE" not in proc.stdout  # clamp(3, 3) is not tested: it survives
    assert "SURVIVED m.py:5  Gt -> GtE" in proc.stdout
    assert "killed   m.py:5  condition forced True" in proc.stdout
    assert (tmp_path / "m.py").read_text() == MODULE
    assert not (tmp_path / "m.py.mutate-orig").exists()


def test_refuses_when_tests_fail_first_or_collect_nothing(tmp_path):
    (tmp_path / "m.py").write_text(MODULE)
    (tmp_path / "test_m.py").write_text(TESTS.replace("== 3", "== 4"))
    proc = run(tmp_path)
    assert proc.returncode == 2 and "fail before any mutation" in proc.stderr
    (tmp_path / "test_m.py").write_text("")
    proc = run(tmp_path)
    assert proc.returncode != 0 and "collected no tests" in proc.stderr
    assert (tmp_path / "m.py").read_text() == MODULE


def test_nothing_a_test_started_outlives_its_run(tmp_path):
    """A helper a test leaves behind (a swapper loop whose teardown never ran) is killed with the
    run's process group, judged by the host's process table."""
    marker = f"{tmp_path.name}-left-behind"
    (tmp_path / "m.py").write_text(MODULE)
    (tmp_path / "test_m.py").write_text(TESTS + textwrap.dedent(f'''\


        def test_leaves_a_helper():
            import subprocess, sys
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
        '''))
    run(tmp_path, "--sample", "1", "--seed", "1")
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    for pid in left:
        subprocess.run(["kill", "-9", pid])
    assert left == []
