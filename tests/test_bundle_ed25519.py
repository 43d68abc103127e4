"""bundle.ed25519 (pyca cryptography underneath) against RFC 8032's test vectors and, both ways, against the
openssl CLI; and the rule that no other command loads `cryptography`."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import ed25519
from bundle_testing import need, run

# RFC 8032 section 7.1: (secret seed, public key, message, signature), all hex.
RFC8032 = [
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
     "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
    # TEST SHA(abc): the message is SHA-512 of "abc".
    ("833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
     "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
     hashlib.sha512(b"abc").hexdigest(),
     "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704"),
]
ORDER = 2**252 + 27742317777372353535851937790883648493  # L, the order of the base point
SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")  # DER SubjectPublicKeyInfo for a raw Ed25519 key
PKCS8_PREFIX = bytes.fromhex("302e020100300506032b657004220420")  # DER PrivateKeyInfo for a raw Ed25519 seed


@pytest.mark.parametrize("seed,public,message,signature", RFC8032)
def test_rfc8032_vectors(seed: str, public: str, message: str, signature: str):
    seed_b, msg = bytes.fromhex(seed), bytes.fromhex(message)
    assert ed25519.public_key(seed_b).hex() == public
    assert ed25519.sign(seed_b, msg).hex() == signature
    assert ed25519.verify(bytes.fromhex(public), msg, bytes.fromhex(signature))


def test_verify_rejects_any_change():
    seed, public, message, signature = (bytes.fromhex(v) for v in RFC8032[2])
    assert not ed25519.verify(public, message + b"x", signature)
    assert not ed25519.verify(public, message, signature[:-1] + bytes([signature[-1] ^ 1]))
    assert not ed25519.verify(bytes.fromhex(RFC8032[0][1]), message, signature)
    for i in (0, 31, 32, 63):  # every part: R and S
        bad = bytearray(signature)
        bad[i] ^= 0x80
        assert not ed25519.verify(public, message, bytes(bad))


def test_malformed_inputs_are_false_not_exceptions():
    _, public, message, signature = (bytes.fromhex(v) for v in RFC8032[1])
    assert not ed25519.verify(public[:31], message, signature)
    assert not ed25519.verify(public, message, signature[:63])
    assert not ed25519.verify(b"\xff" * 32, message, signature)  # y >= p: not a point
    big_s = signature[:32] + (ORDER + int.from_bytes(signature[32:], "little")).to_bytes(32, "little")
    assert not ed25519.verify(public, message, big_s)  # S >= L is refused (malleability)
    with pytest.raises(ValueError):
        ed25519.sign(b"short", message)


def _openssl_keys(tmp_path: Path, seed: bytes) -> tuple[Path, Path]:
    private, public = tmp_path / "key.der", tmp_path / "pub.der"
    private.write_bytes(PKCS8_PREFIX + seed)
    public.write_bytes(SPKI_PREFIX + ed25519.public_key(seed))
    return private, public


def test_openssl_verifies_our_signature(tmp_path: Path):
    need("openssl")
    seed = os.urandom(32)
    private, public = _openssl_keys(tmp_path, seed)
    message = hashlib.blake2b(b"SHA256SUMS contents").digest()  # what minisign's ED algorithm signs
    (tmp_path / "msg").write_bytes(message)
    (tmp_path / "sig").write_bytes(ed25519.sign(seed, message))
    ok = run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(public), "-keyform", "DER", "-rawin",
              "-in", str(tmp_path / "msg"), "-sigfile", str(tmp_path / "sig")])
    assert ok.returncode == 0 and "Signature Verified Successfully" in ok.stdout
    flip = bytearray(message)
    flip[0] ^= 1
    (tmp_path / "msg").write_bytes(bytes(flip))
    bad = run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(public), "-keyform", "DER", "-rawin",
               "-in", str(tmp_path / "msg"), "-sigfile", str(tmp_path / "sig")])
    assert bad.returncode != 0


def test_we_verify_an_openssl_signature(tmp_path: Path):
    need("openssl")
    seed = os.urandom(32)
    private, _ = _openssl_keys(tmp_path, seed)
    message = os.urandom(200)
    (tmp_path / "msg").write_bytes(message)
    proc = run(["openssl", "pkeyutl", "-sign", "-inkey", str(private), "-keyform", "DER", "-rawin",
                "-in", str(tmp_path / "msg"), "-out", str(tmp_path / "sig")])
    assert proc.returncode == 0, proc.stderr
    signature = (tmp_path / "sig").read_bytes()
    assert ed25519.verify(ed25519.public_key(seed), message, signature)
    assert signature == ed25519.sign(seed, message)  # Ed25519 is deterministic: the same bytes


def _imported(*args: str, cwd: Path) -> set[str]:
    """The top-level modules a real `abhed ...` child process imported (python -X importtime)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "abhed", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "ABHED_HOME": str(cwd / "home"), "ABHED_CONFIG": ""})
    return {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}


def test_only_the_bundle_commands_load_cryptography(tmp_path: Path):
    (tmp_path / "f.txt").write_text("hi\n")
    assert "cryptography" not in _imported("--version", cwd=tmp_path)
    assert "cryptography" not in _imported("tool", "read", '{"path": "%s"}' % (tmp_path / "f.txt"),
                                           "--workspace", str(tmp_path), cwd=tmp_path)
    assert "cryptography" in _imported("bundle", "verify", str(tmp_path / "none"), cwd=tmp_path)  # the probe works
