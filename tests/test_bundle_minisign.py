"""minisign's formats: our files are accepted by the real minisign and its files by us; garbage
key or signature files give a FormatError that names the file, never a traceback."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundle import minisign
from bundle_testing import need, run


def _signed(tmp_path: Path, secret: minisign.SecretKey, text: str = "hello\n") -> tuple[Path, Path]:
    data = tmp_path / "data.txt"
    data.write_text(text)
    sig = tmp_path / "data.txt.minisig"
    sig.write_text(minisign.sign_file(secret, data).dumps())
    return data, sig


def test_round_trip_of_every_format(tmp_path: Path):
    secret = minisign.generate()
    assert minisign.loads_secret(secret.dumps()) == secret
    public = secret.public()
    assert minisign.loads_public(public.dumps()) == public
    assert minisign.loads_public(public.dumps().split("\n")[1]) == public  # the bare base64 line, as -P takes
    assert public.dumps().startswith(f"untrusted comment: minisign public key {public.id_text}\n")
    data, sig = _signed(tmp_path, secret)
    parsed = minisign.loads_signature(sig.read_text())
    assert parsed.trusted_comment.endswith("\tfile:data.txt\thashed") and parsed.algorithm == b"ED"
    minisign.verify_file(public, data, parsed, sig.name)


def test_key_id_text_is_minisigns_little_endian_hex():
    key_id = bytes.fromhex("6866a8cdb780a7ee")
    assert minisign.key_id_text(key_id) == "EEA780B7CDA86668"
    assert minisign.parse_key_id("eea780b7 cda86668") == key_id
    with pytest.raises(minisign.FormatError, match="not 16 hexadecimal digits"):
        minisign.parse_key_id("EEA780B7")


def test_verify_file_messages_name_the_file_and_the_key(tmp_path: Path):
    secret, other = minisign.generate(), minisign.generate()
    data, sig = _signed(tmp_path, secret)
    parsed = minisign.loads_signature(sig.read_text())
    with pytest.raises(minisign.VerifyError, match=f"data.txt: signed by key {secret.public().id_text}, not by "
                                                   f"the trusted key {other.public().id_text}"):
        minisign.verify_file(other.public(), data, parsed, sig.name)
    data.write_text("hellO\n")
    with pytest.raises(minisign.VerifyError, match=f"data.txt: signature does not verify with key "
                                                   f"{secret.public().id_text}"):
        minisign.verify_file(secret.public(), data, parsed, sig.name)


def test_real_minisign_accepts_our_signature_and_our_key_files(tmp_path: Path):
    need("minisign")
    secret = minisign.generate()
    (tmp_path / "k.pub").write_text(secret.public().dumps())
    (tmp_path / "k.key").write_text(secret.dumps())
    data, sig = _signed(tmp_path, secret)
    ok = run(["minisign", "-V", "-m", str(data), "-x", str(sig), "-p", str(tmp_path / "k.pub")])
    assert ok.returncode == 0 and "Signature and comment signature verified" in ok.stdout + ok.stderr
    # A site can sign with minisign itself using a key bundle.keygen wrote (unencrypted, no password prompt).
    other = tmp_path / "other.txt"
    other.write_text("signed by minisign\n")
    signed = run(["minisign", "-S", "-s", str(tmp_path / "k.key"), "-m", str(other)], input="")
    assert signed.returncode == 0, signed.stderr
    minisign.verify_file(secret.public(), other, minisign.loads_signature((tmp_path / "other.txt.minisig")
                                                                          .read_text()), "other.txt.minisig")


def test_real_minisign_rejects_our_signature_of_changed_data(tmp_path: Path):
    need("minisign")
    secret = minisign.generate()
    (tmp_path / "k.pub").write_text(secret.public().dumps())
    data, sig = _signed(tmp_path, secret)
    data.write_text("changed\n")
    bad = run(["minisign", "-V", "-m", str(data), "-x", str(sig), "-p", str(tmp_path / "k.pub")])
    assert bad.returncode != 0


def test_we_accept_minisigns_own_keys_and_signatures(tmp_path: Path):
    need("minisign")
    gen = run(["minisign", "-G", "-W", "-p", str(tmp_path / "m.pub"), "-s", str(tmp_path / "m.key")])
    assert gen.returncode == 0, gen.stderr
    data = tmp_path / "SHA256SUMS"
    data.write_text("0" * 64 + "  abhed\n")
    assert run(["minisign", "-S", "-s", str(tmp_path / "m.key"), "-m", str(data)], input="").returncode == 0
    public = minisign.loads_public((tmp_path / "m.pub").read_text(), "m.pub")
    secret = minisign.loads_secret((tmp_path / "m.key").read_text(), "m.key")
    assert secret.public() == public and secret.dumps() == (tmp_path / "m.key").read_text()
    sig = minisign.loads_signature((tmp_path / "SHA256SUMS.minisig").read_text())
    minisign.verify_file(public, data, sig, "SHA256SUMS.minisig")
    # And one that minisign signed after the trusted comment was altered is refused, naming the comment.
    text = (tmp_path / "SHA256SUMS.minisig").read_text().replace("timestamp:", "timestamp:1")
    with pytest.raises(minisign.VerifyError, match="SHA256SUMS.minisig: the trusted comment's signature"):
        minisign.verify_file(public, data, minisign.loads_signature(text), "SHA256SUMS.minisig")


def test_encrypted_secret_keys_are_refused_with_the_way_out(tmp_path: Path):
    blob = minisign.generate().dumps().split("\n")
    raw = bytearray(base64.b64decode(blob[1]))
    raw[2:4] = b"Sc"
    text = f"{blob[0]}\n{base64.b64encode(bytes(raw)).decode()}\n"
    with pytest.raises(minisign.FormatError, match=r"site.key: this minisign secret key is encrypted.*minisign -G -W"):
        minisign.loads_secret(text, "site.key")


@pytest.mark.parametrize("text,fact", [
    ("", "it has fewer than 4 lines"),
    ("untrusted comment: x\n", "it has fewer than 4 lines"),
    ("hello\nRWQ=\nx\ny\n", "the first line should begin with 'untrusted comment:'"),
    ("untrusted comment: x\n!!!\ntrusted comment: t\nAAAA\n", "line 2 is not base64"),
    ("untrusted comment: x\nRUQ=\ntrusted comment: t\nAAAA\n", "line 2 holds 2 bytes, not 74"),
    ("untrusted comment: x\nRUQ" + "A" * 96 + "=\ntrusted comment: t\nAAAA\n", "line 4 holds 3 bytes, not 64"),
])
def test_garbage_signature_files_say_what_is_wrong(text: str, fact: str):
    with pytest.raises(minisign.FormatError) as err:
        minisign.loads_signature(text, "SHA256SUMS.minisig")
    assert str(err.value).startswith("SHA256SUMS.minisig: not a minisign signature") and fact in str(err.value)


def test_a_binary_public_key_file_is_a_clear_error():
    with pytest.raises(minisign.FormatError, match="site.pub: not a minisign public key: it is not text"):
        minisign.loads_public(b"\xff\xfe\x00garbage", "site.pub")


_texty = st.one_of(
    st.binary(max_size=300),
    st.lists(st.sampled_from(["untrusted comment: x", "trusted comment: y", "RWQ", "RUQ", "AAAA", "====", "",
                              minisign.generate().public().dumps().split("\n")[1]]), max_size=6)
    .map(lambda lines: "\n".join(lines).encode()),
)


@settings(max_examples=300, deadline=None)
@given(_texty)
def test_fuzz_parsers_fail_only_with_a_format_error_naming_the_file(data: bytes):
    for parse in (minisign.loads_public, minisign.loads_secret, minisign.loads_signature):
        try:
            parse(data, "the-file")
        except minisign.FormatError as exc:
            assert str(exc).startswith("the-file: ")
