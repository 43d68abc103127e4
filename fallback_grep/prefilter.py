"""Prefilters: find where a match could be at C speed before any Python-level automaton runs.

Everything here is a *necessary condition* found with C-speed primitives, plus, where it can be
proven cheap, an sre (Python `re`) pattern that decides a whole line at once:

* needles: plain literals every match contains, found with bytes.find (~2.5 GB/s); a
  case-folded literal found in bytes.lower() (ASCII only, so non-ASCII fold variants such as
  U+017F for `s` switch the file to the sre path); literal alternations (one find per literal).
* class needles: a run of ASCII classes (\\s\\w{5}\\s) becomes a plain needle after
  bytes.translate maps every byte to its class.
* exact: the whole pattern as sre when it is a *finite* language with few paths.  A backtracking
  engine explores each path through a finite regex at most once per start position, so the work
  per start position is at most paths * length, a constant of the pattern: total time stays
  linear.  Only constructs whose sre meaning equals RE2's on bytes are translated: code point
  classes become UTF-8 byte tries, \\b and \\B are ASCII in sre's bytes mode as in RE2, and
  ^/$ appear only as (?m:^)/(?m:$), exactly RE2's BOL/EOL.  Text anchors (\\A, \\z) are not
  translated because sre anchors them at pos/endpos, not at the real text bounds.
* factor: a finite piece every match must contain (`[A-Z]+_RESUME` needs `[A-Z]_RESUME`),
  scanned with sre when nothing faster exists; a hit only proposes a candidate line.
* line_regex: an sre verifier for short candidate lines (see line_regex()).
* needs_non_ascii: a pattern like \\p{Greek} cannot match a text for which bytes.isascii()
  holds (most source files), checked at ~12 GB/s.

Planning is linear in the pattern's size (the grep tool plans every pattern it is given, up to
64 KiB, in Abhed's own process): every walk runs on bounded.run (no recursion), a translation
stops growing at its bounds (paths, bytes, sre source size and nesting) instead of being built
whole and thrown away, the best factor is found in one sliding window over the concatenation
(the window only moves right, as all its bounds are monotone), and a class repeated thousands of
times is translated once (`memo`, by node identity, shared by every walk of one plan).
"""
from __future__ import annotations

import re
from functools import lru_cache

from . import bounded
from . import syntax as sx
from . import utf8

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

    from .bounded import Walk

    Memo = dict[int, tuple[sx.Node, "Finite | None"]]  # id(leaf) -> (leaf, its translation)
    Unit = tuple[Any, ...]   # ("lit", bytes) | ("fold", lowered bytes, non-ASCII variants)
    # (score, first part, index after it, end index, right edge or None)
    Candidate = tuple[int, "Finite", int, int, "Finite | None"]
    Finder = Callable[[bytes | bytearray, int, int], int]
    Text = bytes | bytearray

MAX_PATHS = 2000        # alternatives a finite translation may contain
MAX_LENGTH = 1000       # longest byte length of a finite translation
MAX_UNIT_BRANCHES = 600  # UTF-8 trie size for one class (\pL is ~ 500)
MAX_SRC = 1 << 16       # longest sre source of a translation: sre compiles ~1.5 us a character
MAX_NEST = 100          # deepest (?:...) nesting of a translation: sre's parser recurses per level
CLASS_NEST = 3          # a class's UTF-8 trie nests (?:...) at most this deep (four byte levels)
MIN_FACTOR_SCORE = 2    # a factor must pin down at least this many near-literal characters


class Finite:
    """A finite regex fragment: sre source, number of paths, max byte length, selectivity, and
    how deep its source nests groups."""

    __slots__ = ("src", "paths", "length", "score", "nest")

    def __init__(self, src: str, paths: int, length: int, score: int, nest: int = 0) -> None:
        self.src = src
        self.paths = paths
        self.length = length
        self.score = score          # how many characters are nearly literal (selectivity)
        self.nest = nest


def _within(paths: int, length: int, size: int, nest: int) -> bool:
    """Are these a translation's numbers within every bound?"""
    return paths <= MAX_PATHS and length <= MAX_LENGTH and size <= MAX_SRC and nest <= MAX_NEST


def _byte_class(ranges: Sequence[tuple[int, int]]) -> str:
    parts: list[str] = []
    for lo, hi in ranges:
        if lo == hi:
            parts.append(re.escape(bytes([lo])).decode("latin-1"))
        else:
            parts.append(re.escape(bytes([lo])).decode("latin-1") + "-" +
                         re.escape(bytes([hi])).decode("latin-1"))
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return parts[0]
    return "[" + "".join(parts) + "]"


@lru_cache(maxsize=256)  # pragma: no mutate (any size: a cache)
def _class_regex(ranges: tuple[tuple[int, int], ...]) -> str | None:
    """sre source matching exactly the UTF-8 encoding of one code point in ranges, or None.
    (Cached: the same class recurs in patterns and in the walks of one plan.)"""
    trie: dict[tuple[int, int], Any] = {}   # a byte range -> its sub-trie, or None at a leaf
    count = 0
    for lo, hi in ranges:
        for seq in utf8.sequences(lo, hi):
            node = trie
            for rng in seq[:-1]:
                node = node.setdefault(rng, {})
            node.setdefault(seq[-1], None)
            count += 1
            if count > MAX_UNIT_BRANCHES:
                return None
    return _trie_regex(trie)


def _trie_regex(trie: dict[tuple[int, int], Any]) -> str:
    # Leaves (last byte of a sequence) merge into one class; inner edges become alternatives.
    # Sibling ranges of a UTF-8 trie are disjoint, so at most one alternative can succeed.
    leaves = sorted(r for r, child in trie.items() if child is None)
    alts: list[str] = []
    if leaves:
        alts.append(_byte_class(leaves))
    for rng, child in sorted((r, c) for r, c in trie.items() if c is not None):
        alts.append(_byte_class([rng]) + _trie_regex(child))
    if len(alts) == 1:
        return alts[0]
    return "(?:" + "|".join(alts) + ")"


_CHARACTERS = (sx.LITERAL, sx.CLASS)
_SRE_ASSERT = {sx.BOL: "(?m:^)", sx.EOL: "(?m:$)", sx.WORD: "\\b", sx.NOT_WORD: "\\B"}


def finite(node: sx.Node, allow_assertions: bool, memo: Memo | None = None) -> Finite | None:
    """Translate node into a Finite, or None if it is unbounded, too big or not translatable.

    memo: {id(leaf): (leaf, Finite)}, shared by the walks of one plan, so that a class that
    occurs thousands of times is translated (and its size counted) once."""
    memo = {} if memo is None else memo
    if node.op in _CHARACTERS:
        return _leaf(node, memo)
    return bounded.run(_finite(node, allow_assertions, memo))


def _finite(node: sx.Node, allow: bool, memo: Memo) -> Walk[Finite | None]:
    op = node.op
    if op in _CHARACTERS:
        return _leaf(node, memo)
    if op == sx.EMPTY:
        return Finite("", 1, 0, 0)
    if op == sx.NO_MATCH:
        return Finite("(?!)", 1, 0, 0)
    if op == sx.ANY_BYTE:
        return Finite(_byte_class(list(node.ranges or [(0, 255)])), 1, 1, 0)
    if op == sx.CAPTURE:
        return (yield _finite(node.subs[0], allow, memo))
    if op == sx.ASSERT:
        src = _SRE_ASSERT.get(node.kind)
        if src is None or not allow:
            return None
        return Finite(src, 1, 0, 0)
    if op == sx.CONCAT:
        return (yield from _finite_concat(node.subs, allow, memo))
    if op == sx.ALTERNATE:
        return (yield from _finite_alternate(node.subs, allow, memo))
    if op == sx.REPEAT:  # pragma: no mutate (equivalent: REPEAT is the only kind left here)
        return (yield from _finite_repeat(node, allow, memo))
    raise AssertionError(op)  # pragma: no mutate (unreachable: every kind is handled above)


def _leaf(node: sx.Node, memo: Memo) -> Finite | None:
    """A literal's or class's translation, once per rune or class node (never changed after)."""
    if node.op == sx.LITERAL:
        return _rune_finite(node.rune)
    hit = memo.get(id(node))
    if hit is None or hit[0] is not node:
        hit = memo[id(node)] = (node, _class_finite(node.ranges))   # the node kept alive with it:
    return hit[1]                                                    # its id stays its own


@lru_cache(maxsize=512)  # pragma: no mutate (any size: a cache)
def _rune_finite(rune: int) -> Finite | None:
    return _class_finite(((rune, rune),))


def _class_finite(ranges: Sequence[tuple[int, int]]) -> Finite | None:
    src = _class_regex(tuple(ranges))
    if src is None:
        return None
    size = sum(hi - lo + 1 for lo, hi in ranges)
    return Finite(src, 1, 4, 1 if size <= 4 else 0, CLASS_NEST if "(?:" in src else 0)


def _finite_concat(subs: list[sx.Node], allow: bool, memo: Memo) -> Walk[Finite | None]:
    # Stops at the first item past a bound: a concatenation of 64 KiB of literals costs as much
    # as its first MAX_LENGTH bytes.
    parts: list[Finite] = []
    paths, length, size, nest = 1, 0, 0, 0
    for sub in subs:
        part = _leaf(sub, memo) if sub.op in _CHARACTERS else (yield _finite(sub, allow, memo))
        if part is None:
            return None
        paths, length = paths * part.paths, length + part.length
        size, nest = size + len(part.src), max(nest, part.nest)
        if not _within(paths, length, size, nest):
            return None
        parts.append(part)
    return Finite("".join(p.src for p in parts), paths, length, sum(p.score for p in parts), nest)


def _finite_alternate(subs: list[sx.Node], allow: bool, memo: Memo) -> Walk[Finite | None]:
    # size: the source's length so far, "(?:" and ")" around the parts and a bar before each but
    # the first; past a bound, no need to translate the other alternatives.
    parts: list[Finite] = []
    paths, size = 0, 3
    for sub in subs:
        part = yield _finite(sub, allow, memo)
        if part is None:
            return None
        paths, size = paths + part.paths, size + len(part.src) + 1
        if paths > MAX_PATHS or size > MAX_SRC:
            return None
        parts.append(part)
    nest = max(p.nest for p in parts) + 1
    if nest > MAX_NEST:
        return None
    return Finite("(?:" + "|".join(p.src for p in parts) + ")", paths, max(p.length for p in parts),
                  min(p.score for p in parts), nest)


def _finite_repeat(node: sx.Node, allow: bool, memo: Memo) -> Walk[Finite | None]:
    if node.max < 0:
        return None
    sub = yield _finite(node.subs[0], allow, memo)
    if sub is None:
        return None
    paths = _repeat_paths(sub.paths, node.min, node.max)
    if paths is None:
        return None
    lazy = "" if node.greedy else "?"  # pragma: no mutate (equivalent: only where a match starts is used)
    counts = f"{{{node.min}}}" if node.min == node.max else f"{{{node.min},{node.max}}}"
    src = f"(?:{sub.src}){counts}{lazy}"
    length = sub.length * node.max
    if not _within(paths, length, len(src), sub.nest + 1):
        return None
    return Finite(src, paths, length, sub.score * node.min, sub.nest + 1)


def _repeat_paths(paths: int, lo: int, hi: int) -> int | None:
    """sum(paths ** k for k in lo..hi), or None past MAX_PATHS, found without the big powers
    (`(?:a|b){1000}` would take a 1000-bit one)."""
    if paths == 1:  # pragma: no mutate (speed only: the loop below sums the same ones, in hi steps)
        return hi - lo + 1 if hi - lo + 1 <= MAX_PATHS else None  # pragma: no mutate (as above)
    total, power = 0, 1
    for k in range(hi + 1):
        if power > MAX_PATHS:  # pragma: no mutate (speed only: the sum ends None below all the same)
            return None  # pragma: no mutate (as above; paths ** max(k, lo), a term, is past the bound)
        if k >= lo:
            total += power
        power *= paths
    return total if total <= MAX_PATHS else None


def _concat(given: Sequence[Finite | None]) -> Finite | None:
    parts = [p for p in given if p is not None]
    if len(parts) < len(given):
        return None
    paths, length, score, size, nest = 1, 0, 0, 0, 0
    for p in parts:
        paths *= p.paths
        length += p.length
        score += p.score
        size += len(p.src)
        nest = max(nest, p.nest)
    if not _within(paths, length, size, nest):
        return None
    return Finite("".join(p.src for p in parts), paths, length, score, nest)


def _edge(node: sx.Node, memo: Memo) -> Finite | None:
    """The finite part of a concat item when it sits at the edge of a factor, or None.

    x{n,} (n >= 1) at the left edge of a factor contributes its last n iterations (they touch
    the next item); at the right edge its first n.  Either way: x{n}.
    """
    while node.op == sx.CAPTURE:
        node = node.subs[0]
    if node.op != sx.REPEAT or node.max != -1 or node.min < 1:
        return None
    return finite(sx.Node(sx.REPEAT, subs=node.subs, min=node.min, max=node.min), False, memo)


class _Window:
    """Consecutive translations side by side: their paths multiply, their lengths, scores and
    sre sizes add up (nesting does not grow: a concatenation adds no group)."""

    def __init__(self) -> None:
        self.paths, self.length, self.score, self.size = 1, 0, 0, 0

    def fits(self, part: Finite | None) -> bool:
        return (part is not None and self.paths * part.paths <= MAX_PATHS
                and self.length + part.length <= MAX_LENGTH and self.size + len(part.src) <= MAX_SRC)

    def add(self, part: Finite) -> None:
        self.paths *= part.paths
        self.length += part.length
        self.score += part.score
        self.size += len(part.src)

    def drop(self, part: Finite) -> None:
        self.paths //= part.paths    # exact: the product holds part.paths as a factor
        self.length -= part.length
        self.score -= part.score
        self.size -= len(part.src)


def best_factor(tree: sx.Node, memo: Memo | None = None) -> Finite | None:
    """The most selective finite fragment every match must contain, or None.

    A candidate starts at each item of the top-level concatenation that has a translation (or,
    for x{n,}, an edge x{n}) and takes the translations after it for as long as they are within
    the bounds, ending with the edge of the first item that has none: the longest prefix of that
    list that fits. The first candidate of the highest score wins. Since every bound is
    monotone, the end of the candidates of one run of translations only moves right: one sliding
    window finds them all in linear time (the old way built each candidate and cut it back one
    item at a time: cubic, an hour for 64 KiB)."""
    memo = {} if memo is None else memo
    while tree.op == sx.CAPTURE:
        tree = tree.subs[0]
    items = tree.subs if tree.op == sx.CONCAT else [tree]
    trans = [finite(it, False, memo) for it in items]
    edges: dict[int, Finite | None] = {}

    def edge(j: int) -> Finite | None:
        if j not in edges:  # pragma: no mutate (speed only: an edge computed again is the same)
            edges[j] = _edge(items[j], memo)
        return edges[j]

    best: Candidate | None = None
    n, i = len(items), 0
    while i < n:
        bounded.check()
        if trans[i] is None:
            left = edge(i)
            if left is not None:
                best = _better(best, _from_edge(left, i + 1, trans, edge))
            i += 1
            continue
        end = i
        while end < n and trans[end] is not None:
            end += 1
        best = _slide(best, i, end, trans, edge)
        i = end
    if best is None or best[0] < MIN_FACTOR_SCORE:
        return None
    _, first, lo, hi, right = best
    return _concat([first, *trans[lo:hi]] + ([right] if right is not None else []))


def _better(best: Candidate | None, cand: Candidate) -> Candidate:
    return cand if best is None or cand[0] > best[0] else best


def _from_edge(left: Finite, start: int, trans: list[Finite | None], edge: Callable[[int], Finite | None]) -> Candidate:
    """The candidate that starts with an item's edge copy `left` and goes on at `start`."""
    win = _Window()
    win.add(left)
    r = start
    while r < len(trans) and (part := trans[r]) is not None and win.fits(part):
        win.add(part)
        r += 1
    return _with_right_edge((win.score, left, start, r), win, r, trans, edge)


def _slide(best: Candidate | None, lo: int, end: int, trans: list[Finite | None],
           edge: Callable[[int], Finite | None]) -> Candidate | None:
    """The candidates starting at each item of the run of translations trans[lo:end]."""
    win, r = _Window(), lo
    for i in range(lo, end):
        # (When the window is empty, r == i: trans[i] alone always fits, so it enters here.)
        while r < end and (part := trans[r]) is not None and win.fits(part):  # (trans[lo:end]: no None)
            win.add(part)
            r += 1
        first = trans[i]
        assert first is not None  # trans[lo:end] is a run of translations
        best = _better(best, _with_right_edge((win.score, first, i + 1, r), win, r, trans, edge))
        win.drop(first)
    return best


def _with_right_edge(cand: tuple[int, Finite, int, int], win: _Window, r: int, trans: list[Finite | None],
                     edge: Callable[[int], Finite | None]) -> Candidate:
    """cand = (score, first part, start, end); the edge copy of the item that ends the run is
    added when the window reached it and it fits."""
    score, first, start, end = cand
    if r < len(trans) and trans[r] is None:
        right = edge(r)
        if right is not None and win.fits(right):
            return score + right.score, first, start, end, right
    return score, first, start, end, None


# ---- needles: required plain literals found with bytes.find ---------------------------------

def _flatten(node: sx.Node) -> list[sx.Node]:
    """Top-level items of a concatenation, looking through captures and nested concats."""
    out: list[sx.Node] = []
    stack = [node]
    while stack:
        node = stack.pop()
        if node.op == sx.CAPTURE:
            stack.append(node.subs[0])
        elif node.op == sx.CONCAT:
            stack.extend(reversed(node.subs))
        else:
            out.append(node)
    return out


def _unit(node: sx.Node) -> Unit | None:
    """One code point position: ('lit', bytes) | ('fold', lowered bytes, variants) | None."""
    if node.op == sx.LITERAL:  # pragma: no mutate (speed only: the ranges below give the same)
        return ("lit", chr(node.rune).encode("utf-8", "surrogatepass"))  # pragma: no mutate (as above)
    ranges = sx.node_ranges(node)
    if ranges is None:
        return None
    cps: list[int] = []
    for lo, hi in ranges:
        if len(cps) + hi - lo + 1 > 4:   # at most four code points (checked before listing them)
            return None
        cps.extend(range(lo, hi + 1))
    if len(cps) == 1:
        return ("lit", chr(cps[0]).encode("utf-8", "surrogatepass"))
    ascii_cps = {c for c in cps if c < 128}
    if not ascii_cps:
        return None
    # The ASCII members must be one character in both its cases (what bytes.lower() merges).
    low = chr(min(ascii_cps)).lower()
    if {ord(low), ord(low.upper())} != ascii_cps:
        return None
    variants = tuple(chr(c).encode("utf-8") for c in cps if c >= 128)
    return ("fold", low.encode(), variants)


def _runs(items: list[sx.Node]) -> list[list[Unit]]:
    """Maximal runs of consecutive near-literal units (x{n} of a unit counts n times)."""
    runs: list[list[Unit]] = []
    cur: list[Unit] = []
    for item in items:
        reps = 1
        if item.op == sx.REPEAT and item.min == item.max and item.min <= 16:
            reps, item = item.min, item.subs[0]
        unit = _unit(item)
        if unit is None:
            if cur:
                runs.append(cur)
            cur = []
            # x+ / x{n,}: its first iteration still touches what follows, so a run may start
            # right after it; nothing else to do here.
            continue
        cur.extend([unit] * reps)
    if cur:
        runs.append(cur)
    return runs


class Needles:
    """Required literals: every match contains one of `literals`, or (folded) every match,
    ASCII-lowered, contains `folded` unless the text holds one of the non-ASCII `variants`."""

    def __init__(self, literals: Iterable[bytes] = (), folded: bytes | None = None, variants: Iterable[bytes] = (),
                 whole: bool = False) -> None:
        self.literals = tuple(literals)
        self.folded = folded
        self.variants = tuple(sorted(set(variants)))
        self.whole = whole        # a literal hit is itself a complete match
        # bytes.find is slow for 2-byte needles (~1.1 GB/s here: its skip table barely skips),
        # while sre's literal search runs memchr on the first byte (~2.4 GB/s).
        self.finders = tuple(_finder(lit) for lit in self.literals)

    def may_occur(self, data: bytes) -> bool:
        """For a folded needle: False if no match can be in data (bytes) at all. A text holding a
        non-ASCII fold variant (U+017F for s) cannot be decided by ASCII lowering: True."""
        if not data.isascii() and any(v in data for v in self.variants):
            return True
        return self.folded is not None and self.folded in data.lower()  # (asked of a folded needle only)


def _finder(lit: bytes) -> Finder:
    """find(haystack, pos, endpos) -> index or -1, fastest for this needle length."""
    if len(lit) == 2:
        search = re.compile(re.escape(lit)).search

        def find(hay: Text, pos: int, endpos: int) -> int:
            m = search(hay, pos, endpos)
            return -1 if m is None else m.start()
        return find
    return lambda hay, pos, endpos: hay.find(lit, pos, endpos)


def needles_for(tree: sx.Node) -> Needles | None:
    return bounded.run(_needles(tree))


def _needles(tree: sx.Node) -> Walk[Needles | None]:
    while tree.op == sx.CAPTURE:
        tree = tree.subs[0]
    if tree.op != sx.ALTERNATE:
        return _concat_needles(tree)
    # Every match contains a required literal of the alternative it came from, so the union of
    # those literals is a valid needle set (`foo|bar\\d+` -> foo, bar).
    lits: dict[bytes, None] = {}   # (a dict: each literal once, in order)
    whole = True
    for alt in tree.subs:
        nd = yield _needles(alt)
        if nd is None or not nd.literals:
            return None
        lits.update(dict.fromkeys(nd.literals))
        if len(lits) > 16:
            return None        # no need to look at the other alternatives
        whole = whole and nd.whole
    return Needles(lits, whole=whole)


def _concat_needles(tree: sx.Node) -> Needles | None:
    items = _flatten(tree)
    best_len = 0
    best_lit: tuple[list[Unit], int, int] | None = None
    best_fold: tuple[bytes, list[bytes]] | None = None
    for run in _runs(items):
        # Longest all-literal stretch inside the run: its bounds, joined once at the end.
        start, cur_len = 0, 0
        for k, u in enumerate(run):
            if u[0] == "lit":
                cur_len += len(u[1])
                if cur_len > best_len:
                    best_len, best_lit = cur_len, (run, start, k + 1)
            else:
                start, cur_len = k + 1, 0
        # (A folded unit's bytes are an ASCII letter; a non-ASCII literal cannot be lowered.)
        if any(u[0] == "fold" for u in run) and all(u[1].isascii() for u in run):
            folded = b"".join(u[1].lower() for u in run)
            variants = [v for u in run if u[0] == "fold" for v in u[2]]
            if best_fold is None or len(folded) > len(best_fold[0]):
                best_fold = (folded, variants)
    lit = b"" if best_lit is None else b"".join(u[1] for u in best_lit[0][best_lit[1]:best_lit[2]])
    whole = all(u is not None and u[0] == "lit" for u in map(_unit, items))
    fold, variants = best_fold or (b"", [])
    if len(lit) >= 3 or lit and len(fold) <= len(lit):
        return Needles([lit], whole=whole)
    return Needles(folded=fold, variants=variants) if len(fold) >= 3 else None


def _ascii_unit(node: sx.Node) -> frozenset[int] | None:
    """The byte set of a one-character node whose members are all ASCII, else None."""
    ranges = sx.node_ranges(node)
    if ranges is None or any(hi >= 0x80 for _, hi in ranges):
        return None
    return frozenset(b for lo, hi in ranges for b in range(lo, hi + 1))


class ClassNeedle:
    """A required run of ASCII classes found with bytes.translate + bytes.find.

    Every byte is mapped to a symbol naming the class it belongs to, so the run of classes
    becomes a plain byte string (\\s\\w{5}\\s -> b" wwwww "): one C-speed translate and find
    replace an sre scan that is ten times slower.  Works when the classes of the run are pairwise
    equal or disjoint, so that each byte has one symbol.
    """

    def __init__(self, sets: list[frozenset[int]]) -> None:
        symbols: dict[frozenset[int], int] = {}
        table = bytearray(b"\xff" * 256)
        for bs in sets:
            if bs not in symbols:
                sym = len(symbols) + 1
                symbols[bs] = sym
                for b in bs:
                    table[b] = sym
        self.table = bytes(table)
        self.needle = bytes(symbols[bs] for bs in sets)


def class_needle(tree: sx.Node, min_len: int = 3) -> ClassNeedle | None:
    best: list[frozenset[int]] = []
    run: list[frozenset[int]] = []
    items: list[sx.Node | None] = [*_flatten(tree), None]
    for item in items:
        sets: list[frozenset[int]] | None = None
        if item is not None:
            unit, reps = item, 1
            if item.op == sx.REPEAT and (item.min == item.max or item.max == -1) and item.min <= 16:
                unit, reps = item.subs[0], item.min
            bs = _ascii_unit(unit)
            if bs is not None:
                sets = [bs] * reps
        if sets is None or item is not None and item.op == sx.REPEAT and item.max < 0:
            # An unbounded x{n,} ends a run (its first n copies still belong to it) and starts
            # the next one (its last n copies touch what follows).
            if sets:
                run.extend(sets)
            if len(run) > len(best) and _compatible(run):
                best = run
            run = list(sets) if sets else []
            continue
        run.extend(sets)
    return ClassNeedle(best) if len(best) >= min_len else None


def _compatible(sets: list[frozenset[int]]) -> bool:
    """Are the classes pairwise equal or disjoint? Each byte may belong to one distinct class:
    linear, where comparing every pair was quadratic in the classes of a long run."""
    owner: dict[int, frozenset[int]] = {}
    for bs in set(sets):
        for b in bs:
            if owner.setdefault(b, bs) is not bs:
                return False
    return True


class Scanner:
    """Finds candidate positions in one buffer; keeps per-buffer state (lowered copy, next hits)."""

    def __init__(self, pf: Prefilter, data: bytes) -> None:
        self.pf = pf
        self.data = data
        self.mode = "regex"
        nd = pf.needles
        if nd is not None and nd.literals:
            self.mode = "literals"
            # The cached next hit per literal; -2 = unknown (as would be any value under -1).
            self.next_at = [-2] * len(nd.literals)  # pragma: no mutate (-2 -> -3 is the same)
        elif nd is not None and nd.folded is not None:
            # isascii() runs ~5x faster than a search; only non-ASCII texts need the check for
            # non-ASCII fold variants (like ſ for s), which lowering would miss.
            if data.isascii() or not any(v in data for v in nd.variants):
                self.mode = "folded"
                self.lowered = data.lower()   # bytes.lower() folds ASCII only, offsets unchanged
                self.folded = nd.folded
        if self.mode == "regex" and pf.class_needle is not None:
            self.mode = "classes"
            self.translated = data.translate(pf.class_needle.table)
            self.class_symbols = pf.class_needle.needle
        if self.mode == "regex" and pf.regex is None:
            self.mode = "none"
        if pf.needs_non_ascii and data.isascii():
            self.mode = "reject"

    @property
    def hit_is_match(self) -> bool:
        """True when every candidate is already a match (no verification needed)."""
        nd = self.pf.needles
        if self.mode == "literals":
            return nd is not None and nd.whole  # (literals mode: there are needles)
        return self.mode == "regex" and self.pf.exact

    def find(self, pos: int, endpos: int) -> int:
        """Next candidate position in [pos, endpos), or -1; mode 'none' cannot filter."""
        if self.mode == "reject":
            return -1
        nd = self.pf.needles
        if self.mode == "literals" and nd is not None:  # (literals mode: there are needles)
            best = -1
            lits = nd.literals
            for k, lit in enumerate(lits):
                at = self.next_at[k]
                if at == -1 or at >= pos:
                    pass
                else:
                    at = nd.finders[k](self.data, pos, endpos)
                    # "No more hits" (-1) is final only when the search reached the data's end.
                    self.next_at[k] = at if at >= 0 or endpos >= len(self.data) else -2
                if at >= 0 and at + len(lit) <= endpos:
                    best = at if best < 0 else min(best, at)
            return best
        if self.mode == "folded":
            return self.lowered.find(self.folded, pos, endpos)
        if self.mode == "classes":
            return self.translated.find(self.class_symbols, pos, endpos)
        regex = self.pf.regex
        assert regex is not None  # regex mode ("none" has no scanner: see filesearch.Matcher)
        m = regex.search(self.data, pos, endpos)
        return -1 if m is None else m.start()


class Prefilter:
    """Compiled prefilter for one pattern.

    regex: sre pattern (the whole pattern when `exact`, else a required factor) or None.
    needles: plain literals to jump to with bytes.find, or None.
    """

    def __init__(self, src: str | None, exact: bool, needles: Needles | None) -> None:
        self.src = src
        self.exact = exact
        self.needles = needles
        self.regex = None if src is None else re.compile(src.encode("latin-1"), re.DOTALL)

    needs_non_ascii: bool = False    # set by build(): no match can consist of ASCII bytes only
    line_regex: re.Pattern[bytes] | None = None  # set by build(): sre verifier for short lines (line_regex())
    class_needle: ClassNeedle | None = None      # set by build(): ClassNeedle when there is no plain literal

    def quick_reject(self, buf: Text, n: int) -> bool:
        """True if buf[:n] certainly holds no match; works on a reused bytearray. Plain-literal
        needles answer without a copy; a folded one lowers a copy."""
        nd = self.needles
        if nd is not None and nd.literals:
            for find in nd.finders:
                if find(buf, 0, n) >= 0:
                    return False
            return True
        if nd is not None and nd.folded is not None:
            # One copy (bytes(buf[:n]) made two: the slice, then the bytes); lower() needs one.
            with memoryview(buf) as view:
                return not nd.may_occur(view[:n].tobytes())
        return False

    def scanner(self, data: bytes) -> Scanner:
        return Scanner(self, data)

    def confirm(self, data: bytes, start: int, end: int) -> bool:
        """For an exact prefilter: does data[start:end] (one whole line) contain a match?"""
        assert self.regex is not None, "confirm() is for exact prefilters, which have a regex"
        return self.regex.search(data, start, end) is not None

    def may_match(self, data: bytes, pos: int, endpos: int) -> bool:
        """Cheap rejection for one API call. Avoids the folded mode: lowering the whole text on
        every call would make finditer quadratic."""
        nd = self.needles
        if self.needs_non_ascii and data.isascii():
            return False
        if nd is not None and nd.literals:
            return any(data.find(lit, pos, endpos) >= 0 for lit in nd.literals)
        if self.regex is not None and not self.exact:
            # (An exact regex may hold \\b or (?m:^), which sre evaluates as if the text began
            # at pos; only line starts make that safe, and an API call may start anywhere.)
            return self.regex.search(data, pos, endpos) is not None
        return True


# ---- line verification with sre -------------------------------------------------------------

LINE_SRE_MAX = 256   # longest line verified with sre; longer lines go to the DFA


def _first_bytes(node: sx.Node) -> set[int] | None:
    """Bytes that can start a non-empty match of node, or None if unknown / node is nullable."""
    return bounded.run(_first(node))


def _first(node: sx.Node) -> Walk[set[int] | None]:
    ranges = sx.node_ranges(node)
    if ranges is not None:
        out: set[int] = set()
        for lo, hi in ranges:
            for seq in utf8.sequences(lo, hi):
                out.update(range(seq[0][0], seq[0][1] + 1))
        return out
    if node.op == sx.CAPTURE:
        return (yield _first(node.subs[0]))
    if node.op == sx.CONCAT and node.subs:
        # A nullable first item answers None itself (every nullable node does).
        return (yield _first(node.subs[0]))
    if node.op == sx.ALTERNATE:
        out = set()
        for sub in node.subs:
            f = yield _first(sub)
            if f is None:
                return None
            out |= f
        return out
    if node.op == sx.REPEAT and node.min > 0:
        return (yield _first(node.subs[0]))
    return None  # pragma: no mutate (equivalent: falling off the end returns None too)


def line_regex(tree: sx.Node, memo: Memo | None = None) -> re.Pattern[bytes] | None:
    """An sre pattern with the same *matching lines* as tree (line mode), whose backtracking work
    per start position is O(line length), or None.

    Allowed: a concatenation of finite fragments (bounded paths) and unbounded repeats C{m,} of a
    single-character class C.  Such a repeat must be followed by an item that cannot be empty and
    cannot start with a byte C matches (so only the longest run can continue: sre's back-off
    fails at once for every shorter run), or only by assertions.  A leading or trailing C{m,}
    becomes C{m}: a line contains a match of C{m,}X iff it contains one of C{m}X.  With lines of
    at most LINE_SRE_MAX bytes this bounds the work per line by a constant times its length.
    The whole translation keeps to MAX_SRC and MAX_NEST, as a finite one does.
    """
    memo = {} if memo is None else memo
    items = _flatten(tree)
    if not any(it.op == sx.REPEAT and it.max < 0 for it in items):
        return None  # finite patterns are handled by the exact prefilter already
    follower = _followers(items)
    parts: list[str] = []
    size = 0
    for j, item in enumerate(items):
        part = _line_part(items, j, follower[j], memo)
        if part is None:
            return None
        size += len(part)
        if size > MAX_SRC:
            return None
        parts.append(part)
    return re.compile("".join(parts).encode("latin-1"), re.DOTALL)


def _followers(items: list[sx.Node]) -> list[int | None]:
    """For each item, the index of the next item that is not an assertion (None at the end)."""
    out: list[int | None] = [None] * len(items)
    nxt: int | None = None
    for j in range(len(items) - 1, -1, -1):
        out[j] = nxt
        if items[j].op != sx.ASSERT:
            nxt = j
    return out


def _line_part(items: list[sx.Node], j: int, follower: int | None, memo: Memo) -> str | None:
    """line_regex's sre source for items[j], or None when the item rules the verifier out."""
    item = items[j]
    fin = finite(item, True, memo)
    if fin is not None:
        return fin.src
    # Not finite, so a repeat here is unbounded unless its body is untranslatable.
    ranges = sx.node_ranges(item.subs[0]) if item.op == sx.REPEAT else None
    unit = None if ranges is None else _class_regex(tuple(ranges))
    if unit is None or item.max != -1:
        return None
    if j == 0 or j == len(items) - 1:
        return f"(?:{unit}){{{item.min}}}"
    if follower is not None:
        follow = _first_bytes(items[follower])
        if follow is None or follow & (_first_bytes(item.subs[0]) or set()):  # (a class: never None)
            return None
    return f"(?:{unit}){{{item.min},}}"


def needs_non_ascii(node: sx.Node) -> bool:
    """True if every match must contain a byte >= 0x80 (e.g. \\p{Greek}): then a text for
    which bytes.isascii() holds (most source files; checked at C speed) cannot match."""
    return bounded.run(_non_ascii(node))


def _non_ascii(node: sx.Node) -> Walk[bool]:
    op = node.op
    if op in (sx.LITERAL, sx.CLASS):
        return all(lo >= 0x80 for lo, _ in sx.node_ranges(node) or ())
    if op == sx.CONCAT:
        for sub in node.subs:
            if (yield _non_ascii(sub)):
                return True
        return False
    if op == sx.ALTERNATE:
        for sub in node.subs:
            if not (yield _non_ascii(sub)):
                return False
        return True
    if op == sx.REPEAT:
        return node.min > 0 and (yield _non_ascii(node.subs[0]))
    if op == sx.CAPTURE:
        return (yield _non_ascii(node.subs[0]))
    return False


def build(tree: sx.Node, exact_ok: bool = False) -> Prefilter | None:
    """Prefilter for a tree. exact_ok: the tree is in grep line mode (anchors are BOL/EOL and no
    class contains \\n), so a finite translation can stand in for the whole matcher."""
    return _build(tree, exact_ok)


def _bare() -> Prefilter:
    """A prefilter with no regex and no needles yet, for the parts _build() adds later."""
    return Prefilter(None, False, None)


def _build(tree: sx.Node, exact_ok: bool) -> Prefilter | None:
    memo: Memo = {}     # the leaves' translations, shared by the walks below
    needles = needles_for(tree)
    pf = None
    if exact_ok:
        whole = finite(tree, True, memo)
        if whole is not None:
            pf = Prefilter(whole.src, True, needles)
    if pf is None:
        factor = best_factor(tree, memo)
        if factor is not None or needles is not None:
            pf = Prefilter(None if factor is None else factor.src, False, needles)
    if exact_ok and (pf is None or not pf.exact):
        lr = line_regex(tree, memo)
        if lr is not None:
            pf = pf or _bare()
            pf.line_regex = lr
    weak = needles is None or (len(needles.literals) == 1 and len(needles.literals[0]) < 3
                               and not needles.whole)
    if weak:
        cn = class_needle(tree)
        if cn is not None:
            # A run of three or more classes pins down more than a one- or two-byte literal.
            pf = pf or _bare()
            pf.needles = None
            pf.class_needle = cn
    if needs_non_ascii(tree):
        pf = pf or _bare()
        pf.needs_non_ascii = True
    return pf
