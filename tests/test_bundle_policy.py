"""Issue 37 item 1: a USB bundle made with `--policy FILE` carries the site policy, and install.sh places it
at /etc/abhed/policy.toml (root:root 0644) when run as root, refusing an ordinary user before installing
anything. Root's install runs in a private mount namespace whose /etc is an overlay, so the machine's own
/etc never changes; what landed is read from the overlay's upper layer."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from bundle_testing import copy_bundle, fake_wheelhouse, install_sh, keys, make_bundle, need, run  # noqa: F401
from users import ensure_user

POLICY = '[settings]\nsandbox.backend = "bwrap"\ncheckpoints.enabled = true\n'


@pytest.fixture(scope="module")
def policy_bundle(tmp_path_factory, keys):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("policy-bundle")
    policy = base / "site-policy.toml"
    policy.write_text(POLICY)
    return make_bundle(base / "out", keys[0], fake_wheelhouse(base / "wheels"), policy=policy)


def test_the_policy_is_signed_with_the_bundle(policy_bundle):
    assert (policy_bundle / "policy" / "policy.toml").read_text() == POLICY
    assert "  policy/policy.toml\n" in (policy_bundle / "SHA256SUMS").read_text()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_root_s_install_places_it_root_owned_0644(policy_bundle, keys, tmp_path):
    if not shutil.which("minisign"):
        need("openssl")
    upper, work = tmp_path / "upper", tmp_path / "work"
    upper.mkdir()
    work.mkdir()
    script = 'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"'
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(upper), str(work),
           str(policy_bundle / "install.sh"), "--prefix", str(tmp_path / "prefix"), "--pubkey", str(keys[1])]
    proc = run(cmd, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8"})
    assert proc.returncode == 0, proc.stderr
    assert "install.sh: placed the site policy /etc/abhed/policy.toml (root:root 0644)" in proc.stdout
    placed = upper / "abhed" / "policy.toml"
    st = placed.stat()
    assert placed.read_text() == POLICY and st.st_uid == 0 and st.st_gid == 0 and stat.S_IMODE(st.st_mode) == 0o644
    directory = (upper / "abhed").stat()
    assert directory.st_uid == 0 and stat.S_IMODE(directory.st_mode) == 0o755
    assert [p.name for p in (upper / "abhed").iterdir()] == ["policy.toml"]  # no staged leftovers
    assert (tmp_path / "prefix" / "bin" / "abhed").is_file()
    assert not os.path.exists("/etc/abhed/policy.toml")  # the machine's /etc: untouched


def test_an_ordinary_user_is_refused_and_nothing_is_installed(policy_bundle, keys):
    user = ensure_user("abhed-policy")
    shared = Path(tempfile.mkdtemp(prefix="abhed-policy-bundle-"))
    try:
        shared.chmod(0o755)
        bundle = copy_bundle(policy_bundle, shared)
        pub = shared / "site.pub"
        pub.write_text(keys[1].read_text())
        for path in [shared, *shared.rglob("*")]:
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
        prefix = shared / "prefix"
        prefix.mkdir()
        os.chown(prefix, user.pw_uid, user.pw_gid)
        proc = install_sh(bundle, "--prefix", str(prefix), "--pubkey", str(pub), home=shared, user=user.pw_name)
        assert proc.returncode == 1
        assert ("install.sh: this bundle carries a site policy (policy/policy.toml) for /etc/abhed/policy.toml, "
                "which must be root's so that no user can change it: run install.sh as root (sudo ./install.sh "
                "...). Nothing was installed.") in proc.stderr
        assert list(prefix.iterdir()) == []
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.parametrize("text, fact", [("[settings\n", "not TOML"),
                                        ("[rules]\n", "unknown table(s) rules; a site policy has [settings] and [allowed]")])
def test_make_refuses_a_file_that_is_no_policy(tmp_path, keys, text, fact):
    policy = tmp_path / "p.toml"
    policy.write_text(text)
    binary = tmp_path / "abhed"
    binary.write_text("#!/bin/sh\n")
    proc = run([sys.executable, "-m", "bundle.make", "--binary", str(binary), "--secret-key", str(keys[0]),
                "--out", str(tmp_path / "out"), "--wheelhouse-from", str(fake_wheelhouse(tmp_path / "w")),
                "--policy", str(policy)])
    assert proc.returncode == 1 and f"bundle.make: --policy {policy}: {fact}" in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
