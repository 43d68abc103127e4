"""Ed25519 on raw bytes (RFC 8032), through pyca `cryptography` (OpenSSL's audited, constant-time code).

The three operations minisign's formats need, on the raw 32-byte seeds, 32-byte public keys and
64-byte signatures those formats store. No curve arithmetic is written here: a signing key must not
go through code nobody audited. Only the bundle commands import this module, so `cryptography` is
never loaded at the start-up of other commands.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SEED_BYTES = 32
PUBLIC_BYTES = 32
SIGNATURE_BYTES = 64


def _private(seed: bytes) -> Ed25519PrivateKey:
    if len(seed) != SEED_BYTES:
        raise ValueError(f"an Ed25519 secret seed is {SEED_BYTES} bytes, not {len(seed)}")
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_key(seed: bytes) -> bytes:
    """The 32-byte public key of a 32-byte secret seed."""
    return _private(seed).public_key().public_bytes_raw()


def sign(seed: bytes, message: bytes) -> bytes:
    """The 64-byte signature R || S of `message` (deterministic: the same inputs give the same bytes)."""
    return _private(seed).sign(message)


def verify(public: bytes, message: bytes, signature: bytes) -> bool:
    """True when `signature` is a valid signature of `message` by `public`.

    Anything malformed (wrong length, a point off the curve, S >= L) is simply not valid: False.
    """
    if len(public) != PUBLIC_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True
