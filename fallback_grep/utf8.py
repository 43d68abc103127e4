"""Code point ranges -> sequences of UTF-8 byte ranges.

A code point range such as [U+0080, U+10FFFF] is not one byte pattern: it has to be split so that
each piece is a fixed-length sequence of byte ranges (e.g. [C2-DF][80-BF]).  The splitting rule
(the same idea as Go's utf8 range tables and Rust's Utf8Sequences): split at the encoding-length
boundaries, then split again wherever a range does not cover whole blocks of continuation bytes.
Surrogates (U+D800-U+DFFF) are left out: they have no valid UTF-8 encoding.
"""
from __future__ import annotations

_LENGTH_LIMITS = ((0x7F, 1), (0x7FF, 2), (0xFFFF, 3), (0x10FFFF, 4))


def encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8", "surrogatepass")


def sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Yield lists of (byte_lo, byte_hi) whose union of byte strings encodes exactly [lo, hi]."""
    out: list[list[tuple[int, int]]] = []
    for a, b in _without_surrogates(lo, hi):
        _split_lengths(a, b, out)
    return out


def _without_surrogates(lo: int, hi: int) -> list[tuple[int, int]]:
    if hi < 0xD800 or lo > 0xDFFF:
        return [(lo, hi)]
    parts = []
    if lo < 0xD800:
        parts.append((lo, 0xD7FF))
    if hi > 0xDFFF:
        parts.append((0xE000, hi))
    return parts


def _split_lengths(lo: int, hi: int, out: list[list[tuple[int, int]]]) -> None:
    start = 0
    for limit, _ in _LENGTH_LIMITS:
        if lo <= limit and hi >= start:
            _split_blocks(max(lo, start), min(hi, limit), out)
        start = limit + 1


def _split_blocks(lo: int, hi: int, out: list[list[tuple[int, int]]]) -> None:
    """lo and hi have the same encoded length here."""
    n = len(encode(lo))
    for i in range(1, n):
        mask = (1 << (6 * i)) - 1
        if lo & ~mask != hi & ~mask:
            if lo & mask:
                _split_blocks(lo, lo | mask, out)
                _split_blocks((lo | mask) + 1, hi, out)
                return
            if hi & mask != mask:
                _split_blocks(lo, (hi & ~mask) - 1, out)
                _split_blocks(hi & ~mask, hi, out)
                return
    a, b = encode(lo), encode(hi)
    out.append([(a[k], b[k]) for k in range(n)])
