"""A tampered bundle is refused, by install.sh (checking with minisign, and with openssl alone) and by
`abhed bundle verify`, with a message naming the file that failed and what to do; nothing is installed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bundle import minisign
from bundle_testing import (abhed_verify, copy_bundle, fresh, flip_byte, install_sh, keys, microvm_bundle,  # noqa: F401
                            need, resign_blob, signed_bundle, tool_path)

DO_NOT_INSTALL = "Do not install it"


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("paths")
    return {"minisign": os.environ["PATH"],
            "openssl": tool_path(base / "openssl-only", {"minisign"}),
            "neither": tool_path(base / "neither", {"minisign", "openssl"})}


VERIFIERS = ["install.sh+minisign", "install.sh+openssl", "abhed"]


def verify_with(verifier: str, bundle: Path, paths: dict[str, str], prefix: Path, *args: str):  # type: ignore[no-untyped-def]
    if verifier == "abhed":
        return abhed_verify(bundle, *args, prefix=prefix)
    tool = verifier.split("+")[1]
    need(tool)
    return install_sh(bundle, "--prefix", str(prefix), *args, path=paths[tool])


def _flip_signature(bundle: Path) -> None:
    resign_blob(bundle / "SHA256SUMS.minisig", lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:])


def _alter_comment(bundle: Path) -> None:
    sig = bundle / "SHA256SUMS.minisig"
    sig.write_text(sig.read_text().replace("trusted comment: timestamp:", "trusted comment: timestamp:9"))


def _edit_sums(bundle: Path) -> None:
    sums = bundle / "SHA256SUMS"
    sums.write_text(sums.read_text().replace("  abhed\n", "  abhed-renamed\n"))


def _replace_pubkey(bundle: Path) -> None:
    (bundle / "abhed.pub").write_text(minisign.generate().public().dumps())


# (what is changed, the change, the facts its message must carry)
TAMPERING: list[tuple[str, Callable[[Path], None], list[str]]] = [
    ("binary one byte", lambda b: flip_byte(b / "abhed", 5), ["abhed: checksum mismatch"]),
    ("a wheel one byte", lambda b: flip_byte(next((b / "wheelhouse").glob("abhed-*.whl")), 10),
     ["wheelhouse/abhed-", ": checksum mismatch"]),
    ("SHA256SUMS", _edit_sums, ["SHA256SUMS: signature does not verify with key {id}"]),
    ("signature bytes", _flip_signature, ["SHA256SUMS: signature does not verify with key {id}"]),
    ("trusted comment", _alter_comment, ["SHA256SUMS.minisig: the trusted comment's signature does not verify "
                                         "with key {id}"]),
    ("signature garbage", lambda b: (b / "SHA256SUMS.minisig").write_text("not a signature\n"),
     ["SHA256SUMS.minisig: not a minisign signature"]),
    ("signature missing", lambda b: (b / "SHA256SUMS.minisig").unlink(), ["SHA256SUMS.minisig: missing from the bundle"]),
    ("pub key", _replace_pubkey, ["abhed.pub: checksum mismatch"]),
    ("an extra file", lambda b: (b / "offline_models" / "extra.toml").write_text("x = 1\n"),
     ["offline_models/extra.toml: in the bundle but not listed in SHA256SUMS"]),
    ("a missing file", lambda b: (b / "offline_models" / "generic.toml").unlink(),
     ["offline_models/generic.toml: listed in SHA256SUMS but missing from the bundle"]),
    ("a hidden file", lambda b: (b / ".autorun").write_text("x\n"),
     [".autorun: in the bundle but not listed in SHA256SUMS"]),
    ("a symlink", lambda b: (b / "wheelhouse" / "link.whl").symlink_to("/etc/passwd"),
     ["wheelhouse/link.whl: not a regular file"]),
    ("a symlinked directory", lambda b: (b / "more").symlink_to("/etc"), ["more: not a regular file"]),
]


@pytest.mark.parametrize("verifier", VERIFIERS)
@pytest.mark.parametrize("what,change,facts", TAMPERING, ids=[t[0] for t in TAMPERING])
def test_tampering_is_refused_naming_the_file(verifier, what, change, facts, fresh, keys, paths, tmp_path):
    change(fresh)
    prefix = tmp_path / "prefix"
    proc = verify_with(verifier, fresh, paths, prefix, "--pubkey", str(keys[1]))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for fact in facts:
        assert fact.format(id=keys[2].id_text) in proc.stderr
    assert DO_NOT_INSTALL in proc.stderr and "Traceback" not in proc.stderr
    assert not prefix.exists()  # verification comes before copying anything


@pytest.mark.parametrize("verifier", VERIFIERS)
def test_an_untampered_bundle_verifies(verifier, fresh, keys, paths, tmp_path):
    proc = verify_with(verifier, fresh, paths, tmp_path / "p", "--pubkey", str(keys[1]),
                       *(["--verify-only"] if verifier != "abhed" else []))
    assert proc.returncode == 0, proc.stderr
    count = len((fresh / "SHA256SUMS").read_text().splitlines())
    assert f"verified {count} files, signed by key ID {keys[2].id_text} (--pubkey {keys[1]}" in proc.stdout
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("verifier", ["install.sh+minisign", "abhed"])
def test_no_trusted_key_is_refused_with_the_bundle_key_id_and_the_options(verifier, fresh, keys, paths, tmp_path):
    proc = verify_with(verifier, fresh, paths, tmp_path / "p")
    assert proc.returncode == 1
    key_id = keys[2].id_text
    assert f"no trusted key: the bundle is signed by key ID {key_id}" in proc.stderr
    assert "--pubkey FILE" in proc.stderr and f"--key-id {key_id}" in proc.stderr


@pytest.mark.parametrize("verifier", ["install.sh+minisign", "abhed"])
def test_key_id_confirms_the_bundle_key_and_a_wrong_one_is_refused(verifier, fresh, keys, paths, tmp_path):
    ok = verify_with(verifier, fresh, paths, tmp_path / "p", "--key-id", keys[2].id_text.lower(),
                     *(["--verify-only"] if verifier != "abhed" else []))
    assert ok.returncode == 0 and "the bundle's abhed.pub, confirmed with --key-id" in ok.stdout
    wrong = "0123456789ABCDEF"
    bad = verify_with(verifier, fresh, paths, tmp_path / "p", "--key-id", wrong)
    assert bad.returncode == 1
    assert f"abhed.pub: the bundle's key has ID {keys[2].id_text}, not the ID {wrong} you were given" in bad.stderr
    assert "Do not install" in bad.stderr
    junk = verify_with(verifier, fresh, paths, tmp_path / "p", "--key-id", "xyz")
    assert junk.returncode == 1 and "--key-id: key ID 'xyz' is not 16 hexadecimal digits" in junk.stderr


@pytest.mark.parametrize("verifier", ["install.sh+minisign", "install.sh+openssl", "abhed"])
def test_a_bundle_resigned_by_an_attacker_is_refused(verifier, fresh, keys, paths, tmp_path):
    """Replace the binary, recompute SHA256SUMS, sign it with another key and ship that key as abhed.pub."""
    from bundle import sums
    attacker = minisign.generate()
    (fresh / "abhed").write_text("#!/bin/sh\necho evil\n")
    (fresh / "abhed.pub").write_text(attacker.public().dumps())
    (fresh / "SHA256SUMS").write_text(sums.dumps(fresh, sums.bundle_files(fresh)))
    (fresh / "SHA256SUMS.minisig").write_text(minisign.sign_file(attacker, fresh / "SHA256SUMS").dumps())
    proc = verify_with(verifier, fresh, paths, tmp_path / "p", "--pubkey", str(keys[1]))
    assert proc.returncode == 1
    assert (f"SHA256SUMS: signed by key ID {attacker.public().id_text}, but the trusted key is {keys[2].id_text}"
            in proc.stderr)
    assert "--pubkey FILE" in proc.stderr


def test_garbage_pubkey_is_a_clear_error(fresh, paths, tmp_path):
    bad = tmp_path / "site.pub"
    bad.write_text("untrusted comment: x\nnot base64 at all!\n")
    for verifier in ("install.sh+minisign", "abhed"):
        proc = verify_with(verifier, fresh, paths, tmp_path / "p", "--pubkey", str(bad))
        assert proc.returncode == 1 and f"{bad}: not a minisign public key: line 2 is not base64" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_abhed_verify_trusts_a_pinned_key(fresh, keys, tmp_path):
    prefix = tmp_path / "prefix"
    (prefix / "share" / "abhed").mkdir(parents=True)
    (prefix / "share" / "abhed" / "abhed.pub").write_text(keys[1].read_text())
    proc = abhed_verify(fresh, prefix=prefix)
    assert proc.returncode == 0 and f"pinned by a previous install at {prefix}/share/abhed/abhed.pub" in proc.stdout


def test_abhed_verify_of_a_directory_that_is_not_a_bundle(tmp_path):
    proc = abhed_verify(tmp_path / "nowhere", "--key-id", "0123456789ABCDEF", prefix=tmp_path)
    assert proc.returncode == 1 and "not a directory" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = abhed_verify(empty, "--key-id", "0123456789ABCDEF", prefix=tmp_path)
    assert proc.returncode == 1 and "abhed.pub: missing from the bundle" in proc.stderr


def test_pinned_key_is_found_beside_the_running_abhed(tmp_path):
    from bundle import verify
    prefix = tmp_path / "opt"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "abhed").write_text("")
    assert verify.pinned_key(tmp_path / "given", str(prefix / "bin" / "abhed")) == tmp_path / "given/share/abhed/abhed.pub"
    (prefix / "share" / "abhed").mkdir(parents=True)
    (prefix / "share" / "abhed" / "abhed.pub").write_text("key")
    assert verify.pinned_key(None, str(prefix / "bin" / "abhed")) == prefix / "share/abhed/abhed.pub"


_garbage_lines = st.lists(st.one_of(
    st.sampled_from(["untrusted comment: x", "trusted comment: timestamp:1", "RUQ=", "RWQ", "====", "", "\r",
                     "RUQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)),
    max_size=6)


@settings(max_examples=int(os.environ.get('FUZZ_EXAMPLES', 20)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=_garbage_lines, which=st.sampled_from(["SHA256SUMS.minisig", "abhed.pub"]))
@example(lines=["\x0c"], which="abhed.pub")  # Python's strip() once ate it: "holds 0 bytes" against "is not base64"
@example(lines=["untrusted comment: x", " RWQ= "], which="abhed.pub")
def test_fuzz_garbage_signature_or_key_files_are_refused_with_a_message(lines, which, signed_bundle, keys,
                                                                         tmp_path):
    """Both verifiers, on a bundle whose signature or key file is garbage: exit 1, one clear message, no traceback."""
    need("minisign")
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    bundle = copy_bundle(signed_bundle, work)
    (bundle / which).write_text("\n".join(lines))
    trust = ["--key-id", keys[2].id_text]  # trusting the bundle's own key, so a garbage abhed.pub is parsed
    messages = []
    for proc in (abhed_verify(bundle, *trust, prefix=work / "p"),
                 install_sh(bundle, "--prefix", str(work / "p"), *trust)):
        assert proc.returncode == 1, proc.stdout
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith(("abhed: ", "install.sh: ")) and "Traceback" not in proc.stderr
        assert last.split(": ", 1)[1].startswith(which)
        messages.append(last.split(": ", 1)[1])
    assert messages[0] == messages[1]  # the two verifiers say the same thing
    assert not (work / "p").exists()


@pytest.mark.parametrize("what,change,facts", TAMPERING, ids=[t[0] for t in TAMPERING])
def test_all_verifiers_give_the_same_message(what, change, facts, fresh, keys, paths, tmp_path):
    change(fresh)
    said = set()
    for verifier in VERIFIERS:
        proc = verify_with(verifier, fresh, paths, tmp_path / "p", "--pubkey", str(keys[1]))
        said.add(proc.stderr.strip().splitlines()[-1].split(": ", 1)[1])
    assert len(said) == 1, said


@pytest.mark.parametrize("verifier", VERIFIERS)
@pytest.mark.parametrize("name", ["vmlinux", "initramfs.img", "manifest.json"])
def test_a_tampered_microvm_image_is_refused(verifier, name, microvm_bundle, keys, paths, tmp_path):
    bundle = copy_bundle(microvm_bundle, tmp_path)
    flip_byte(bundle / "microvm" / name, 3)
    prefix = tmp_path / "prefix"
    proc = verify_with(verifier, bundle, paths, prefix, "--pubkey", str(keys[1]))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"microvm/{name}: checksum mismatch" in proc.stderr and DO_NOT_INSTALL in proc.stderr
    assert not prefix.exists()
