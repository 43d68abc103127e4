"""Code point range sets: normalisation, negation, case folding, named classes.

A range set is a list of inclusive (lo, hi) pairs; `normalize` sorts and merges them.
"""
from __future__ import annotations

from bisect import bisect_right

from .syntax import MAX_RUNE

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from types import ModuleType

    Ranges = list[tuple[int, int]]  # sorted, disjoint (lo, hi) code point pairs once normalized

PERL = {
    "d": [(0x30, 0x39)],
    "s": [(0x09, 0x0A), (0x0C, 0x0D), (0x20, 0x20)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
}

POSIX = {
    "alnum": [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)],
    "alpha": [(0x41, 0x5A), (0x61, 0x7A)],
    "ascii": [(0x00, 0x7F)],
    "blank": [(0x09, 0x09), (0x20, 0x20)],
    "cntrl": [(0x00, 0x1F), (0x7F, 0x7F)],
    "digit": [(0x30, 0x39)],
    "graph": [(0x21, 0x7E)],
    "lower": [(0x61, 0x7A)],
    "print": [(0x20, 0x7E)],
    "punct": [(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)],
    "space": [(0x09, 0x0D), (0x20, 0x20)],
    "upper": [(0x41, 0x5A)],
    "word": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "xdigit": [(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)],
}


def normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def negate(ranges: Iterable[tuple[int, int]]) -> Ranges:
    out: Ranges = []
    nxt = 0
    for lo, hi in normalize(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_RUNE:
        out.append((nxt, MAX_RUNE))
    return out


def subtract(ranges: Iterable[tuple[int, int]], remove: Iterable[tuple[int, int]]) -> Ranges:
    """ranges minus remove (both range lists)."""
    keep = negate(remove)
    return intersect(ranges, keep)


def intersect(ranges_a: Iterable[tuple[int, int]], ranges_b: Iterable[tuple[int, int]]) -> Ranges:
    a, b = normalize(ranges_a), normalize(ranges_b)
    out: Ranges = []
    i, j = 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _pairs(flat: Sequence[int]) -> Ranges:
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


def unicode_class(name: str) -> Ranges | None:
    """Ranges for a \\p{name} class, or None if RE2 does not know the name (names are case-sensitive)."""
    if name == "Any":
        return [(0, MAX_RUNE)]
    ut = _tables()
    flat = ut.CATEGORIES.get(name)
    if flat is None:
        flat = ut.SCRIPTS.get(name)
    return None if flat is None else _pairs(flat)


class _FoldIndex:
    """Maps a code point to its simple case-folding orbit. Built once; read-only afterwards."""

    def __init__(self) -> None:
        orbit_of: dict[int, tuple[int, ...]] = {}
        for orbit in _tables().FOLD_ORBITS:
            for cp in orbit:
                orbit_of[cp] = orbit
        self.orbit_of = orbit_of
        self.keys = sorted(orbit_of)

    def add_folded(self, lo: int, hi: int, out: Ranges) -> None:
        """Append to out the fold orbits of every folding code point in [lo, hi]."""
        keys = self.keys
        i = bisect_right(keys, lo - 1)
        while i < len(keys) and keys[i] <= hi:
            for cp in self.orbit_of[keys[i]]:
                out.append((cp, cp))
            i += 1


def _tables() -> ModuleType:
    """The generated Unicode tables, imported on first use: a pattern with no (?i) and no \\p{..}
    never needs them, and compiling them is most of a cold start (`python -m fallback_grep`)."""
    from . import unicode_tables
    return unicode_tables


_FOLD: _FoldIndex | None = None


def _fold() -> _FoldIndex:
    global _FOLD
    if _FOLD is None:  # a race only builds the same read-only index twice
        _FOLD = _FoldIndex()
    return _FOLD


def fold_orbit(cp: int) -> tuple[int, ...]:
    return _fold().orbit_of.get(cp, (cp,))


def add_fold(ranges: Sequence[tuple[int, int]]) -> Ranges:
    """Close a range set under simple case folding, as RE2 does for (?i)."""
    out = list(ranges)
    fold = _fold()
    for lo, hi in ranges:
        fold.add_folded(lo, hi, out)
    return normalize(out)
