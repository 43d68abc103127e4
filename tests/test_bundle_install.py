"""install.sh end to end: the installed layout, root and non-root defaults, key pinning, idempotence,
upgrades, and refusal when nothing can check the signature."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from bundle import minisign
from bundle_testing import (VERSION, copy_bundle, fake_wheelhouse, fresh, install_sh, keys, make_bundle,  # noqa: F401
                            need, run, signed_bundle, tool_path)

INSTALLED_SHARE = {"abhed.pub", "README-OFFLINE.md", "offline_models", "sbom"}


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("paths")
    return {"openssl": tool_path(base / "openssl-only", {"minisign"}),
            "minisign": tool_path(base / "minisign-only", {"openssl"}),
            "neither": tool_path(base / "neither", {"minisign", "openssl"})}


def _check_installed(prefix: Path, bundle: Path, key: Path) -> None:
    binary = prefix / "bin" / "abhed"
    assert binary.read_bytes() == (bundle / "abhed").read_bytes() and os.access(binary, os.X_OK)
    share = prefix / "share" / "abhed"
    assert {p.name for p in share.iterdir()} == INSTALLED_SHARE
    assert (share / "abhed.pub").read_text() == key.read_text()
    assert sorted(p.name for p in (share / "offline_models").iterdir()) == \
        sorted(p.name for p in (bundle / "offline_models").iterdir())
    assert (share / "sbom" / "abhed.cdx.json").read_bytes() == (bundle / "sbom" / "abhed.cdx.json").read_bytes()
    leftovers = [p.name for d in (prefix / "bin", prefix / "share") for p in d.iterdir() if p.name.startswith(".abhed")]
    assert leftovers == []  # the temporary names were all renamed or removed


@pytest.mark.parametrize("tool", ["openssl", "minisign"])
def test_install_with_only_one_checking_tool(tool, fresh, keys, paths, tmp_path):
    need(tool)
    prefix = tmp_path / "prefix"
    proc = install_sh(fresh, "--prefix", str(prefix), "--pubkey", str(keys[1]), path=paths[tool])
    assert proc.returncode == 0, proc.stderr
    assert f"checked with {tool}" in proc.stdout and f"installed Abhed {VERSION}" in proc.stdout
    _check_installed(prefix, fresh, keys[1])


def test_without_minisign_or_openssl_it_refuses_and_installs_nothing(fresh, keys, paths, tmp_path):
    prefix = tmp_path / "prefix"
    proc = install_sh(fresh, "--prefix", str(prefix), "--pubkey", str(keys[1]), path=paths["neither"])
    assert proc.returncode == 1
    assert "neither minisign nor openssl is installed" in proc.stderr
    assert "apt-get install minisign" in proc.stderr and "Nothing was installed" in proc.stderr
    assert not prefix.exists()


def test_reinstall_is_idempotent_and_trusts_the_pinned_key(fresh, keys, tmp_path):
    prefix = tmp_path / "prefix"
    first = install_sh(fresh, "--prefix", str(prefix), "--key-id", keys[2].id_text)
    assert first.returncode == 0, first.stderr
    snapshot = {p.relative_to(prefix): p.read_bytes() for p in prefix.rglob("*") if p.is_file()}
    again = install_sh(fresh, "--prefix", str(prefix))  # no key option: the pinned key is trusted
    assert again.returncode == 0, again.stderr
    assert f"pinned by a previous install at {prefix}/share/abhed/abhed.pub" in again.stdout
    assert {p.relative_to(prefix): p.read_bytes() for p in prefix.rglob("*") if p.is_file()} == snapshot
    _check_installed(prefix, fresh, keys[1])


def test_a_bundle_from_another_key_is_refused_over_a_pinned_install(fresh, keys, tmp_path):
    prefix = tmp_path / "prefix"
    assert install_sh(fresh, "--prefix", str(prefix), "--pubkey", str(keys[1])).returncode == 0
    other_secret, other_pub, other = _other_keys(tmp_path)
    other_bundle = make_bundle(tmp_path / "other-out", other_secret, fake_wheelhouse(tmp_path / "wheels"),
                               binary_text="#!/bin/sh\necho other\n")
    refused = install_sh(other_bundle, "--prefix", str(prefix), "--key-id", other.id_text)
    assert refused.returncode == 1
    assert f"--key-id {other.id_text} does not match the trusted key {keys[2].id_text} (pinned by a previous " \
           f"install at {prefix}/share/abhed/abhed.pub)" in refused.stderr
    refused = install_sh(other_bundle, "--prefix", str(prefix))
    assert refused.returncode == 1
    assert f"SHA256SUMS: signed by key ID {other.id_text}, but the trusted key is {keys[2].id_text}" in refused.stderr
    assert (prefix / "bin" / "abhed").read_bytes() == (fresh / "abhed").read_bytes()  # untouched
    # A site that really rotated its key says so with --pubkey; the new key is pinned from then on.
    rotated = install_sh(other_bundle, "--prefix", str(prefix), "--pubkey", str(other_pub))
    assert rotated.returncode == 0, rotated.stderr
    assert (prefix / "share" / "abhed" / "abhed.pub").read_text() == other_pub.read_text()
    assert (prefix / "bin" / "abhed").read_text() == "#!/bin/sh\necho other\n"


def _other_keys(tmp_path: Path) -> tuple[Path, Path, minisign.PublicKey]:
    from bundle_testing import make_keys
    return make_keys(tmp_path / "other-keys")


def test_upgrade_replaces_files_that_a_newer_bundle_dropped(fresh, keys, tmp_path):
    prefix = tmp_path / "prefix"
    stale = prefix / "share" / "abhed" / "offline_models" / "retired.toml"
    stale.parent.mkdir(parents=True)
    stale.write_text("old = true\n")
    proc = install_sh(fresh, "--prefix", str(prefix), "--pubkey", str(keys[1]))
    assert proc.returncode == 0, proc.stderr
    assert not stale.exists()
    _check_installed(prefix, fresh, keys[1])


def test_root_installs_to_usr_local_by_default(fresh, keys):
    """Only the message: the default prefix is checked by --verify-only, so the machine is not touched."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    proc = install_sh(fresh, "--pubkey", str(keys[1]), "--verify-only")
    assert proc.returncode == 0 and "verified" in proc.stdout
    help_text = install_sh(fresh, "--help")
    assert "default: /usr/local as root, else ~/.local" in help_text.stdout


def test_an_unwritable_prefix_is_an_instruction(fresh, keys, tmp_path):
    prefix = tmp_path / "ro"
    prefix.mkdir()
    prefix.chmod(0o555)
    # Drop root's power to ignore permissions, so the refusal is real.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    proc = run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all",
                str(fresh / "install.sh"), "--prefix", str(prefix / "sub"), "--pubkey", str(keys[1])], env=env)
    assert proc.returncode == 1
    assert f"cannot write to {prefix}/sub" in proc.stderr and "--prefix ~/.local" in proc.stderr


def test_unknown_argument_shows_usage(fresh):
    proc = install_sh(fresh, "--frobnicate")
    assert proc.returncode == 1 and "unknown argument '--frobnicate'" in proc.stderr and "Usage:" in proc.stderr


@pytest.fixture
def unprivileged_user():  # type: ignore[no-untyped-def]
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"):
        pytest.skip("needs root, useradd and setpriv to create and become an ordinary user")
    name = f"abhedt{os.getpid() % 100000}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True)


def test_an_ordinary_user_installs_into_their_home(signed_bundle, keys, unprivileged_user):
    user = unprivileged_user
    # Somewhere the user can read: pytest's own temporary directories are private to root.
    shared = Path(tempfile.mkdtemp(prefix="abhed-bundle-test-"))
    try:
        shared.chmod(0o755)
        bundle = copy_bundle(signed_bundle, shared)
        pub = shared / "site.pub"
        pub.write_text(keys[1].read_text())
        for path in [shared, *shared.rglob("*")]:
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
        home = Path(user.pw_dir)
        proc = install_sh(bundle, "--pubkey", str(pub), home=home, user=user.pw_name)
        assert proc.returncode == 0, proc.stderr
        assert f"{home}/.local/bin is not on your PATH" in proc.stdout
        _check_installed(home / ".local", bundle, pub)
        binary = home / ".local" / "bin" / "abhed"
        assert binary.stat().st_uid == user.pw_uid
        again = install_sh(bundle, home=home, user=user.pw_name)  # pinned in the user's own prefix
        assert again.returncode == 0 and f"pinned by a previous install at {home}/.local/share/abhed" in again.stdout
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_run_with_sh_it_re_executes_itself_with_bash(fresh, keys, tmp_path):
    proc = run(["sh", str(fresh / "install.sh"), "--verify-only", "--pubkey", str(keys[1])])
    assert proc.returncode == 0 and "verified" in proc.stdout, proc.stderr


def test_uninstall_removes_what_install_put_there(fresh, keys, tmp_path):
    prefix = tmp_path / "prefix"
    nothing = install_sh(fresh, "--uninstall", "--prefix", str(prefix))
    assert nothing.returncode == 1 and f"no Abhed installed by install.sh in {prefix}" in nothing.stderr
    assert install_sh(fresh, "--prefix", str(prefix), "--pubkey", str(keys[1])).returncode == 0
    (prefix / "bin" / "other-tool").write_text("keep me\n")
    gone = install_sh(fresh, "--uninstall", "--prefix", str(prefix))
    assert gone.returncode == 0 and f"removed {prefix}/bin/abhed" in gone.stdout
    assert not (prefix / "bin" / "abhed").exists() and not (prefix / "share" / "abhed").exists()
    assert (prefix / "bin" / "other-tool").read_text() == "keep me\n"


def test_a_bare_base64_pubkey_is_accepted_and_pinned_in_minisign_format(fresh, keys, tmp_path):
    bare = tmp_path / "bare.pub"
    bare.write_text(keys[1].read_text().split("\n")[1] + "\n")  # what `minisign -P` takes
    prefix = tmp_path / "prefix"
    proc = install_sh(fresh, "--prefix", str(prefix), "--pubkey", str(bare))
    assert proc.returncode == 0, proc.stderr
    assert (prefix / "share" / "abhed" / "abhed.pub").read_text() == keys[1].read_text()
