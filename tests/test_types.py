"""The type checker over the package and its three libraries (pyproject.toml [tool.mypy]).

Run like the import contracts in tests/test_architecture.py: mypy at the version the dev extras pin,
on the files and with the strictness pyproject.toml names, and any error fails the suite with mypy's
own listing (file:line: message [code]). Its cache lives in pytest's git-ignored cache, so a re-run
checks only what changed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider (scripts/mutate.py)
    return cache.mkdir("mypy") if cache is not None else tmp_path_factory.mktemp("mypy")


def test_the_package_type_checks(cache_dir: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(cache_dir), "--no-color-output", "--no-error-summary"],
                          cwd=ROOT, capture_output=True, text=True)
    errors = [line for line in proc.stdout.splitlines() if ": error: " in line]
    assert proc.returncode == 0 and not errors, (
        f"mypy finds {len(errors)} type error(s) (pyproject.toml [tool.mypy]). Fix the annotation or narrow the "
        "value; a `# type: ignore[code]` must say why in a comment:\n" + proc.stdout + proc.stderr)


def test_the_checker_sees_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x: int) -> str:\n    return x\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--config-file", "/dev/null", str(bad)],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1 and "[return-value]" in proc.stdout, proc.stdout + proc.stderr
