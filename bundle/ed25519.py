"""Ed25519 signatures (RFC 8032, section 5.1), in pure Python so the bundle needs no crypto dependency.

Only public data goes through verify(); sign() runs on the build machine. Neither is constant-time:
signing happens offline, once per bundle, on a machine the signer controls.
Points are kept in extended coordinates (X, Y, Z, T) with x = X/Z, y = Y/Z, x*y = T/Z, so adding
needs no inversion until a point is encoded.
"""

from __future__ import annotations

import hashlib

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493  # order of the base point
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)

Point = tuple[int, int, int, int]


class BadSignature(ValueError):
    """A key or signature that is not a valid encoding (as opposed to one that simply does not match)."""


def _add(p: Point, q: Point) -> Point:
    # RFC 8032 5.1.4: the unified addition formula, valid for doubling too.
    a = (p[1] - p[0]) * (q[1] - q[0]) % P
    b = (p[1] + p[0]) * (q[1] + q[0]) % P
    c = 2 * p[3] * q[3] * D % P
    d = 2 * p[2] * q[2] % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % P, g * h % P, f * g % P, e * h % P


def _mul(s: int, p: Point) -> Point:
    q: Point = (0, 1, 1, 0)  # the neutral element
    while s > 0:
        if s & 1:
            q = _add(q, p)
        p = _add(p, p)
        s >>= 1
    return q


def _equal(p: Point, q: Point) -> bool:
    # Compare x1/z1 == x2/z2 and y1/z1 == y2/z2 without inverting.
    return (p[0] * q[2] - q[0] * p[2]) % P == 0 and (p[1] * q[2] - q[1] * p[2]) % P == 0


def _recover_x(y: int, sign: int) -> int | None:
    # RFC 8032 5.1.3: x^2 = (y^2 - 1) / (d y^2 + 1); None when y is not on the curve.
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P:
        return None
    if x & 1 != sign:
        x = P - x
    return x


_GY = 4 * pow(5, P - 2, P) % P
_GX = _recover_x(_GY, 0) or 0
G: Point = (_GX, _GY, 1, _GX * _GY % P)


def _encode(p: Point) -> bytes:
    zinv = pow(p[2], P - 2, P)
    x, y = p[0] * zinv % P, p[1] * zinv % P
    return int.to_bytes(y | ((x & 1) << 255), 32, "little")


def _decode(data: bytes) -> Point | None:
    if len(data) != 32:
        return None
    y = int.from_bytes(data, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    x = _recover_x(y, sign)
    if x is None:
        return None
    return x, y, 1, x * y % P


def _sha512_int(*parts: bytes) -> int:
    return int.from_bytes(hashlib.sha512(b"".join(parts)).digest(), "little")


def _expand(seed: bytes) -> tuple[int, bytes]:
    # RFC 8032 5.1.5: the secret scalar (clamped) and the prefix that makes nonces deterministic.
    if len(seed) != 32:
        raise ValueError(f"an Ed25519 secret seed is 32 bytes, not {len(seed)}")
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a, h[32:]


def public_key(seed: bytes) -> bytes:
    """The 32-byte public key of a 32-byte secret seed."""
    return _encode(_mul(_expand(seed)[0], G))


def sign(seed: bytes, message: bytes) -> bytes:
    """The 64-byte signature R || S of `message` (RFC 8032 5.1.6)."""
    a, prefix = _expand(seed)
    pub = _encode(_mul(a, G))
    r = _sha512_int(prefix, message) % L
    big_r = _encode(_mul(r, G))
    s = (r + _sha512_int(big_r, pub, message) * a) % L
    return big_r + int.to_bytes(s, 32, "little")


def verify(public: bytes, message: bytes, signature: bytes) -> bool:
    """True when `signature` is a valid signature of `message` by `public` (RFC 8032 5.1.7).

    Anything malformed (wrong length, a point off the curve, S >= L) is simply not valid: False.
    """
    if len(public) != 32 or len(signature) != 64:
        return False
    a = _decode(public)
    r = _decode(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if a is None or r is None or s >= L:
        return False
    k = _sha512_int(signature[:32], public, message) % L
    # The cofactorless check [S]B = R + [k]A, as OpenSSL and libsodium do.
    return _equal(_mul(s, G), _add(r, _mul(k, a)))
