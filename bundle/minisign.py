"""minisign's file formats (https://jedisct1.github.io/minisign/): public key, unencrypted secret key, signature.

Every parse error is a FormatError whose message names the file and says what is wrong, because
these files arrive on USB sticks and by e-mail, and a truncated or re-wrapped one is the usual case.
The signature algorithm is always the prehashed "ED": Ed25519 over BLAKE2b-512 of the file, so a
large file need not be held in memory twice.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from bundle import ed25519

PUBKEY_ALG = b"Ed"
SIG_ALG_HASHED = b"ED"
SIG_ALG_LEGACY = b"Ed"
KDF_NONE = b"\x00\x00"
KDF_SCRYPT = b"Sc"
CHK_ALG = b"B2"
UNTRUSTED = "untrusted comment: "
TRUSTED = "trusted comment: "


class FormatError(ValueError):
    """A minisign file that cannot be read; the message names the file and the fault."""


def key_id_text(key_id: bytes) -> str:
    """The ID as minisign prints it: the 8 bytes read as a little-endian number, in upper-case hex."""
    return f"{int.from_bytes(key_id, 'little'):016X}"


def parse_key_id(text: str) -> bytes:
    """The 8 key-ID bytes from the 16 hex digits an operator types (any case, spaces ignored)."""
    digits = text.replace(" ", "").strip()
    if len(digits) != 16 or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise FormatError(f"key ID {text!r} is not 16 hexadecimal digits (e.g. {key_id_text(bytes(range(8)))}).")
    return int(digits, 16).to_bytes(8, "little")


@dataclass(frozen=True)
class PublicKey:
    key_id: bytes
    key: bytes

    @property
    def id_text(self) -> str:
        return key_id_text(self.key_id)

    def dumps(self) -> str:
        blob = base64.b64encode(PUBKEY_ALG + self.key_id + self.key).decode()
        return f"{UNTRUSTED}minisign public key {self.id_text}\n{blob}\n"


@dataclass(frozen=True)
class SecretKey:
    key_id: bytes
    seed: bytes  # the 32-byte Ed25519 seed; minisign stores seed || public key

    def public(self) -> PublicKey:
        return PublicKey(self.key_id, ed25519.public_key(self.seed))

    def dumps(self) -> str:
        # Unencrypted layout, as `minisign -G -W` writes it: no KDF, zero salt and limits, and a
        # zero checksum (minisign only fills the checksum in when it encrypts).
        keynum = self.key_id + self.seed + ed25519.public_key(self.seed) + bytes(32)
        blob = PUBKEY_ALG + KDF_NONE + CHK_ALG + bytes(32 + 8 + 8) + keynum
        return f"{UNTRUSTED}minisign encrypted secret key\n{base64.b64encode(blob).decode()}\n"


@dataclass(frozen=True)
class Signature:
    algorithm: bytes
    key_id: bytes
    signature: bytes
    trusted_comment: str
    global_signature: bytes
    untrusted_comment: str = "signature from minisign secret key"

    def dumps(self) -> str:
        blob = base64.b64encode(self.algorithm + self.key_id + self.signature).decode()
        return (f"{UNTRUSTED}{self.untrusted_comment}\n{blob}\n{TRUSTED}{self.trusted_comment}\n"
                f"{base64.b64encode(self.global_signature).decode()}\n")


def generate() -> SecretKey:
    return SecretKey(os.urandom(8), os.urandom(32))


def _lines(text: str, name: str, what: str, count: int) -> list[str]:
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < count:
        raise FormatError(f"{name}: not a minisign {what}: it has fewer than {count} lines (is the file truncated?).")
    if not lines[0].startswith(UNTRUSTED):
        raise FormatError(f"{name}: not a minisign {what}: the first line should begin with {UNTRUSTED.strip()!r}.")
    return lines


def _b64(line: str, name: str, what: str, size: int, number: int = 2) -> bytes:
    # Only line ends are dropped (as install.sh's `tr -d '\r'` and line reads do): any other character,
    # a space or a form feed, makes the line not base64 on both sides, so the two refuse in one wording.
    try:
        blob = base64.b64decode(line.replace("\r", "").replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(f"{name}: not a minisign {what}: line {number} is not base64.") from None
    if len(blob) != size:
        raise FormatError(f"{name}: not a minisign {what}: line {number} holds {len(blob)} bytes, not {size}.")
    return blob


def _text(data: bytes | str, name: str, what: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{name}: not a minisign {what}: it is not text.") from None


def loads_public(data: bytes | str, name: str = "public key") -> PublicKey:
    what = "public key"
    text = _text(data, name, what)
    lines = text.replace("\r\n", "\n").split("\n")
    # Accept the bare base64 line too (what `minisign -P` takes), as operators paste it that way.
    number = 2 if lines[0].startswith(UNTRUSTED) else 1
    blob = _b64(lines[number - 1] if len(lines) >= number else "", name, what, 42, number)
    if blob[:2] != PUBKEY_ALG:
        raise FormatError(f"{name}: not a minisign {what}: algorithm {blob[:2]!r}, expected {PUBKEY_ALG!r} (Ed25519).")
    return PublicKey(blob[2:10], blob[10:])


def loads_secret(data: bytes | str, name: str = "secret key") -> SecretKey:
    what = "secret key"
    blob = _b64(_lines(_text(data, name, what), name, what, 2)[1], name, what, 158)
    if blob[:2] != PUBKEY_ALG or blob[4:6] != CHK_ALG:
        raise FormatError(f"{name}: not a minisign {what}: unknown algorithms {blob[:2]!r}/{blob[4:6]!r}.")
    if blob[2:4] == KDF_SCRYPT:
        raise FormatError(f"{name}: this minisign secret key is encrypted with a password, which bundle.make cannot "
                          f"unlock. Use an unencrypted key (python -m bundle.keygen, or minisign -G -W).")
    if blob[2:4] != KDF_NONE:
        raise FormatError(f"{name}: not a minisign {what}: unknown key derivation {blob[2:4]!r}.")
    key_id, seed, pub, chk = blob[54:62], blob[62:94], blob[94:126], blob[126:158]
    if chk != bytes(32) and chk != hashlib.blake2b(blob[:2] + key_id + seed + pub, digest_size=32).digest():
        raise FormatError(f"{name}: the secret key's checksum does not match: the file is damaged.")
    if ed25519.public_key(seed) != pub:
        raise FormatError(f"{name}: the secret key does not match the public key stored inside it: the file is damaged.")
    return SecretKey(key_id, seed)


def loads_signature(data: bytes | str, name: str = "signature") -> Signature:
    what = "signature"
    lines = _lines(_text(data, name, what), name, what, 4)
    blob = _b64(lines[1], name, what, 74)
    if blob[:2] not in (SIG_ALG_HASHED, SIG_ALG_LEGACY):
        raise FormatError(f"{name}: not a minisign {what}: unknown algorithm {blob[:2]!r}.")
    if not lines[2].startswith(TRUSTED):
        raise FormatError(f"{name}: not a minisign {what}: line 3 should begin with {TRUSTED.strip()!r}.")
    global_sig = _b64(lines[3], name, what, 64, 4)
    return Signature(blob[:2], blob[2:10], blob[10:], lines[2][len(TRUSTED):], global_sig,
                     lines[0][len(UNTRUSTED):])


def file_digest(path: Path) -> bytes:
    """BLAKE2b-512 of a file, read in chunks: the message that an "ED" signature signs."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "blake2b").digest()


def sign_file(secret: SecretKey, path: Path, trusted_comment: str | None = None) -> Signature:
    if trusted_comment is None:
        # minisign's own default; SOURCE_DATE_EPOCH makes a rebuilt bundle byte-identical.
        stamp = int(os.environ.get("SOURCE_DATE_EPOCH") or time.time())
        trusted_comment = f"timestamp:{stamp}\tfile:{path.name}\thashed"
    if "\n" in trusted_comment or "\r" in trusted_comment:
        raise ValueError("a trusted comment is one line")
    sig = ed25519.sign(secret.seed, file_digest(path))
    global_sig = ed25519.sign(secret.seed, sig + trusted_comment.encode())
    return Signature(SIG_ALG_HASHED, secret.key_id, sig, trusted_comment, global_sig)


class VerifyError(ValueError):
    """The signature does not verify; the message names the signed file and the key."""


def verify_file(public: PublicKey, path: Path, sig: Signature, sig_name: str) -> None:
    """Raise VerifyError unless `sig` is `public`'s valid signature of `path`, trusted comment included."""
    name = path.name
    if sig.key_id != public.key_id:
        raise VerifyError(f"{name}: signed by key {key_id_text(sig.key_id)}, not by the trusted key {public.id_text}.")
    if sig.algorithm != SIG_ALG_HASHED:
        raise VerifyError(f"{sig_name}: uses minisign's legacy (non-prehashed) algorithm; Abhed bundles are signed "
                          f"with the prehashed one. Re-sign with `minisign -S` (0.11 or later) or bundle.make.")
    if not ed25519.verify(public.key, file_digest(path), sig.signature):
        raise VerifyError(f"{name}: signature does not verify with key {public.id_text}.")
    if not ed25519.verify(public.key, sig.signature + sig.trusted_comment.encode(), sig.global_signature):
        raise VerifyError(f"{sig_name}: the trusted comment's signature does not verify with key {public.id_text} "
                          f"(the comment was altered).")
