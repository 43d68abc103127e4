"""Helpers for the bundle tests: a small signed bundle made by the real `python -m bundle.make`, copies
of it to tamper with, PATHs that hide minisign or openssl, and runners for install.sh and
`abhed bundle verify` as an operator would run them."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bundle import make, minisign

ROOT = Path(__file__).resolve().parent.parent
VERSION = make.project_version()
BUNDLE_NAME = f"abhed-bundle-{VERSION}"
FAKE_BINARY = "#!/bin/sh\necho 'abhed (test stand-in)'\n"


def need(tool: str) -> str:
    """The tool's path; skip when it is missing on a developer machine, fail under CI (CI installs it)."""
    path = shutil.which(tool)
    if path is None:
        reason = f"`{tool}` is not installed: run scripts/setup-bundle-deps"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must provide it)")
        pytest.skip(f"{reason} (skipped only outside CI)")
    return path


def run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
        **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300, **kw)


def write_wheel(directory: Path, name: str, version: str, metadata: str = "") -> Path:
    """A minimal but real wheel (zip with .dist-info/METADATA), enough for the SBOM and the wheelhouse check."""
    dist = name.replace("-", "_")
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n{metadata}")
        z.writestr(f"{dist}-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    return path


def make_keys(directory: Path) -> tuple[Path, Path, minisign.PublicKey]:
    proc = run([sys.executable, "-m", "bundle.keygen", "--out", str(directory)])
    assert proc.returncode == 0, proc.stderr
    public = minisign.loads_public((directory / "abhed.pub").read_text())
    return directory / "abhed.key", directory / "abhed.pub", public


def make_bundle(out: Path, secret: Path, wheelhouse: Path | None, binary_text: str = FAKE_BINARY,
                microvm: Path | None = None, policy: Path | None = None) -> Path:
    binary = out.parent / f"{out.name}-binary"
    binary.write_text(binary_text)
    cmd = [sys.executable, "-m", "bundle.make", "--binary", str(binary), "--secret-key", str(secret), "--out", str(out)]
    if wheelhouse is not None:
        cmd += ["--wheelhouse-from", str(wheelhouse)]
    if microvm is not None:
        cmd += ["--microvm", str(microvm)]
    if policy is not None:
        cmd += ["--policy", str(policy)]
    proc = run(cmd, cwd=out.parent)
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip())
    assert path == (out / BUNDLE_NAME).resolve()
    return path


def fake_microvm_image(directory: Path) -> Path:
    """A stand-in for scripts/build-microvm's output: small files, with a manifest that matches them
    (so sandbox.microvm.load_image accepts it; it would not boot)."""
    from sandbox import vm_agent

    directory.mkdir()
    files = {"vmlinux": b"kernel stand-in\n", "initramfs.img": b"initramfs stand-in\n"}
    for name, data in files.items():
        (directory / name).write_bytes(data)
    manifest = {"kernel_release": "6.1.0-test-amd64", "agent_protocol": vm_agent.PROTOCOL,
                "files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def fake_wheelhouse(directory: Path) -> Path:
    directory.mkdir()
    write_wheel(directory, "abhed", VERSION, "License-Expression: Apache-2.0\n")
    write_wheel(directory, "demo-dep", "1.2.3", "License: MIT\n")
    return directory


def copy_bundle(bundle: Path, where: Path) -> Path:
    target = where / bundle.name
    shutil.copytree(bundle, target, symlinks=True)
    return target


def tool_path(where: Path, hide: set[str]) -> str:
    """A PATH directory with every command of the system except those in `hide`."""
    where.mkdir(parents=True, exist_ok=True)
    for directory in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        if not Path(directory).is_dir():
            continue
        for entry in Path(directory).iterdir():
            link = where / entry.name
            if entry.name not in hide and not link.exists() and not link.is_symlink():
                link.symlink_to(entry)
    return str(where)


def install_sh(bundle: Path, *args: str, path: str | None = None, home: Path | None = None,
               user: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the bundle's install.sh as an operator would: a plain environment, PATH as given."""
    env = {"PATH": path or os.environ["PATH"], "HOME": str(home or Path.home()), "LANG": "C.UTF-8"}
    cmd = [str(bundle / "install.sh"), *args]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", *cmd]
    return run(cmd, env=env, cwd=bundle.parent)


def abhed_verify(bundle: Path, *args: str, prefix: Path) -> subprocess.CompletedProcess[str]:
    """`abhed bundle verify` with an explicit --prefix, so a key pinned on this machine cannot interfere."""
    return run([sys.executable, "-m", "abhed", "bundle", "verify", str(bundle), "--prefix", str(prefix), *args])


def resign_blob(sig_path: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Rewrite line 2 (algorithm + key ID + signature) of a .minisig with `change(bytes) -> bytes`."""
    lines = sig_path.read_text().split("\n")
    lines[1] = base64.b64encode(change(base64.b64decode(lines[1]))).decode()
    sig_path.write_text("\n".join(lines))


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


# Fixtures, imported by name into each test_bundle_*.py (they are made once per module that uses them).

@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, minisign.PublicKey]:
    return make_keys(tmp_path_factory.mktemp("keys") / "site")


@pytest.fixture(scope="session")
def signed_bundle(tmp_path_factory: pytest.TempPathFactory, keys) -> Path:  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("bundle")
    return make_bundle(base / "out", keys[0], fake_wheelhouse(base / "wheels"))


@pytest.fixture(scope="session")
def microvm_bundle(tmp_path_factory: pytest.TempPathFactory, keys) -> Path:  # type: ignore[no-untyped-def]
    """A signed bundle made with --microvm (a stand-in image, see fake_microvm_image)."""
    base = tmp_path_factory.mktemp("microvm-bundle")
    return make_bundle(base / "out", keys[0], fake_wheelhouse(base / "wheels"), microvm=fake_microvm_image(base / "image"))


@pytest.fixture
def fresh(signed_bundle: Path, tmp_path: Path) -> Path:
    """A private copy of the signed bundle, to tamper with."""
    return copy_bundle(signed_bundle, tmp_path)
