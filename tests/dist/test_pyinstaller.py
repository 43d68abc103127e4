"""`./build.sh --pyinstaller`, the fallback build: it must work like the Nuitka binary, and its
bootloader's LD_LIBRARY_PATH (pointing at its own libraries) must not reach rg, bwrap or the
sandboxed shell. Builds into a temp dir (ABHED_DIST), so dist/abhed stays the Nuitka build."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from abhed import __version__

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pyinstaller_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pyinstaller-dist")
    proc = subprocess.run([str(REPO / "build.sh"), "--pyinstaller"], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "ABHED_DIST": str(out)}, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "abhed"


@pytest.mark.slow
def test_the_pyinstaller_binary_runs_the_tools_with_the_users_environment(pyinstaller_binary, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("def handler():\n    return 1\n")
    config = tmp_path / "abhed.toml"
    config.write_text('[sandbox]\nenv_passthrough = ["LD_LIBRARY_PATH"]\n')
    env = {"PATH": "/nonexistent", "HOME": str(tmp_path), "LANG": "C.UTF-8", "ABHED_HOME": str(tmp_path / "home"),
           "ABHED_CONFIG": str(config), "LD_LIBRARY_PATH": "/opt/the-users-libs"}

    def run(*args: str) -> dict:
        proc = subprocess.run([str(pyinstaller_binary), *args, "--workspace", str(ws), "--json"], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    version = subprocess.run([str(pyinstaller_binary), "--version"], env=env, capture_output=True, text=True)
    assert version.stdout.strip() == f"abhed, version {__version__}", version.stderr
    grep = run("tool", "grep", json.dumps({"pattern": r"def \w+", "path": str(ws), "output_mode": "content"}))
    assert not grep["is_error"] and "1:def handler" in grep["content"], grep
    bash = run("tool", "bash", json.dumps({"command": "env", "description": "show the environment"}), "--mode", "auto")
    assert not bash["is_error"], bash["content"]
    assert "LD_LIBRARY_PATH=/opt/the-users-libs" in bash["content"]
    assert "_MEI" not in bash["content"]
