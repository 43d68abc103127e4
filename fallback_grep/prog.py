"""Compile a syntax tree into a byte-level instruction program (Thompson construction).

The program works on UTF-8 bytes like RE2's, so bytes input is searched directly and a str is
searched as its UTF-8 encoding.  It is built back to front: compiling a node takes the pc of what
follows it and returns the node's entry pc, which needs no patch lists.

Instructions are stored column-wise (parallel lists) because the matchers index them in tight
Python loops, where attribute access on instruction objects would dominate.
"""
from __future__ import annotations

from functools import lru_cache

from . import bounded
from . import syntax as sx
from . import utf8
from .errors import error, invalid

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from .bounded import Walk

    Trie = dict[tuple[int, int], Any]  # a byte range -> its sub-trie (the same shape), or None at a leaf

# Opcodes.
BYTE = 0     # arg: 256-byte mask (1 = byte accepted); out
SPLIT = 1    # out (preferred), out1
SAVE = 2     # arg: capture slot; out
ASSERT = 3   # arg: bit set of LOOK_* conditions that must all hold; out
MATCH = 4
FAIL = 5
NOP = 6      # out

# Empty-width conditions as bits, so a state can carry "which of these hold here".
LOOK_BOL = 1
LOOK_EOL = 2
LOOK_BOT = 4
LOOK_EOT = 8
LOOK_WORD = 16
LOOK_NOT_WORD = 32

_LOOK_OF = {sx.BOL: LOOK_BOL, sx.EOL: LOOK_EOL, sx.BOT: LOOK_BOT, sx.EOT: LOOK_EOT,
            sx.WORD: LOOK_WORD, sx.NOT_WORD: LOOK_NOT_WORD}
# Running a program over reversed text swaps "before" and "after".
_REVERSED_LOOK = {sx.BOL: sx.EOL, sx.EOL: sx.BOL, sx.BOT: sx.EOT, sx.EOT: sx.BOT}

MAX_INSTRUCTIONS = 250_000

WORD_BYTES = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz")


class Prog:
    """Parallel lists per instruction: its op, argument (a byte mask, slot, LOOK_* bits or None), out, out1."""

    def __init__(self) -> None:
        self.op: list[int] = []
        self.arg: list[Any] = []
        self.out: list[int] = []
        self.out1: list[int] = []
        self.start = 0
        self.ncap = 0            # capture groups, not counting group 0
        self.uses_look = 0       # union of LOOK_* bits used anywhere
        self.reverse = False

    def emit(self, op: int, arg: Any = None, out: int = -1, out1: int = -1) -> int:
        self.op.append(op)
        self.arg.append(arg)
        self.out.append(out)
        self.out1.append(out1)
        return len(self.op) - 1

    def __len__(self) -> int:
        return len(self.op)

    def dump(self) -> str:
        names = {BYTE: "byte", SPLIT: "split", SAVE: "save", ASSERT: "assert", MATCH: "match",
                 FAIL: "fail", NOP: "nop"}
        lines: list[str] = []
        for pc, op in enumerate(self.op):
            arg = self.arg[pc]
            if op == BYTE:
                arg = _mask_text(arg)
            lines.append(f"{pc}: {names[op]} {'' if arg is None else arg} -> {self.out[pc]}"
                         + (f", {self.out1[pc]}" if op == SPLIT else ""))
        return "\n".join(lines) + f"\nstart {self.start}"


def _mask_text(mask: bytes) -> str:
    parts: list[str] = []
    b = 0
    while b < 256:
        if mask[b]:
            e = b
            while e + 1 < 256 and mask[e + 1]:
                e += 1
            parts.append(f"{b:02x}" if b == e else f"{b:02x}-{e:02x}")
            b = e + 1
        else:
            b += 1
    return "[" + " ".join(parts) + "]"


_CHARACTERS = (sx.LITERAL, sx.CLASS)


@lru_cache(maxsize=512)
def _ascii_mask(ranges: tuple[tuple[int, int], ...]) -> bytes:
    return _mask(ranges)


def _mask(ranges: Sequence[tuple[int, int]]) -> bytes:
    m = bytearray(256)
    for lo, hi in ranges:
        m[lo:hi + 1] = b"\x01" * (hi - lo + 1)
    return bytes(m)


def too_large(pattern: str | bytes) -> error:
    return invalid(
        "pattern too large", "pattern too large: it compiles to more than "
        f"{MAX_INSTRUCTIONS} instructions", pattern, None,
        "shrink counted repetitions of large classes (e.g. `\\pL{500}` -> `\\pL+`), or "
        "split the search into several simpler patterns")


class _Compiler:
    """Compiles trees into one program. The walk over the tree runs on bounded.run (a tree nests
    as deep as its pattern); the answers that many nodes ask about the same subtree (is it
    nullable, the UTF-8 trie of a class) are kept per compiler."""

    def __init__(self, prog: Prog, reverse: bool, pattern: str | bytes) -> None:
        self.p = prog
        self.reverse = reverse
        self.pattern = pattern
        self.nullable: dict[int, tuple[sx.Node, bool]] = {}   # sx.nullable's memo: nested loops ask about the loops below them
        # id(ranges) -> (ranges, trie): a class repeated is split once
        self.tries: dict[int, tuple[Sequence[tuple[int, int]], Trie]] = {}

    def emit(self, *a: Any, **k: Any) -> int:
        n = len(self.p.op)
        if n >= MAX_INSTRUCTIONS:
            raise too_large(self.pattern)
        if n % 1024 == 0:
            bounded.check()
        return self.p.emit(*a, **k)

    def c(self, node: sx.Node, nxt: int) -> int:
        if node.op in _CHARACTERS:
            return self.char_class(sx.node_ranges(node) or (), nxt)
        return bounded.run(self._c(node, nxt))

    def _c(self, node: sx.Node, nxt: int) -> Walk[int]:
        op = node.op
        if op in _CHARACTERS:
            return self.char_class(sx.node_ranges(node) or (), nxt)
        if op == sx.CONCAT:
            # Back to front: the last item compiles first. A reverse program matches the
            # reversed text, so there the first item is the one compiled first.
            for sub in (node.subs if self.reverse else reversed(node.subs)):
                if sub.op in _CHARACTERS:   # the common case, without a walk of its own
                    nxt = self.char_class(sx.node_ranges(sub) or (), nxt)
                else:
                    nxt = yield self._c(sub, nxt)
            return nxt
        if op == sx.ALTERNATE:
            starts: list[int] = []
            for sub in node.subs:
                starts.append((yield self._c(sub, nxt)))
            pc = starts[-1]
            for s in reversed(starts[:-1]):
                pc = self.emit(SPLIT, out=s, out1=pc)
            return pc
        if op == sx.REPEAT:
            return (yield from self.repeat(node, nxt))
        if op == sx.CAPTURE:
            if self.reverse:
                return (yield self._c(node.subs[0], nxt))
            end = self.emit(SAVE, 2 * node.index + 1, out=nxt)
            body = yield self._c(node.subs[0], end)
            return self.emit(SAVE, 2 * node.index, out=body)
        if op == sx.ASSERT:
            kind = _REVERSED_LOOK.get(node.kind, node.kind) if self.reverse else node.kind
            bit = _LOOK_OF[kind]
            self.p.uses_look |= bit
            return self.emit(ASSERT, bit, out=nxt)
        if op == sx.ANY_BYTE:
            return self.emit(BYTE, _mask(node.ranges or [(0, 255)]), out=nxt)
        if op == sx.EMPTY:
            return nxt
        if op == sx.NO_MATCH:
            return self.emit(FAIL)
        raise AssertionError(op)

    def repeat(self, node: sx.Node, nxt: int) -> Walk[int]:
        sub, lo, hi, greedy = node.subs[0], node.min, node.max, node.greedy
        if sub.op == sx.EMPTY:
            return nxt   # copies of nothing are nothing (and `(?:){1000}` must not cost 1000 steps)
        if hi == -1 and lo == 0 and sx.nullable(sub, self.nullable):
            # x* with an x that can match empty compiles as (x+)?, as RE2 does: otherwise the
            # empty iteration dies at the already-visited loop head and a lower-priority
            # non-empty branch wins, e.g. (|a)* would match "aaa" where RE2 matches "".
            plus = yield from self.repeat(sx.Node(sx.REPEAT, subs=[sub], min=1, max=-1, greedy=greedy), nxt)
            pc = self.emit(SPLIT)
            self.set_split(pc, plus, nxt, greedy)
            return pc
        if hi == -1:
            loop = self.emit(SPLIT)
            body = yield self._c(sub, loop)
            self.set_split(loop, body, nxt, greedy)
            cur = body if lo > 0 else loop
            copies = lo - 1 if lo > 0 else 0
        else:
            cur = nxt
            for _ in range(hi - lo):
                body = yield self._c(sub, cur)
                cur = self.emit(SPLIT)
                self.set_split(cur, body, nxt, greedy)
            copies = lo
        for _ in range(copies):
            cur = yield self._c(sub, cur)
        return cur

    def set_split(self, pc: int, take: int, skip: int, greedy: bool) -> None:
        self.p.out[pc], self.p.out1[pc] = (take, skip) if greedy else (skip, take)

    def char_class(self, ranges: Sequence[tuple[int, int]], nxt: int) -> int:
        """A class as a trie of byte-range instructions ending at nxt."""
        if ranges[-1][1] < 0x80:
            # ASCII only: the trie would be one byte mask of all the ranges (either direction).
            return self.emit(BYTE, _ascii_mask(tuple(ranges)), out=nxt)
        return self.trie(self.class_trie(ranges), nxt, {})

    def class_trie(self, ranges: Sequence[tuple[int, int]]) -> Trie:
        """The class's UTF-8 sequences as a trie of byte ranges (reversed in a reverse program)."""
        hit = self.tries.get(id(ranges))
        if hit is not None and hit[0] is ranges:
            return hit[1]
        trie: Trie = {}
        for lo, hi in ranges:
            for seq in utf8.sequences(lo, hi):
                if self.reverse:
                    seq = seq[::-1]
                node = trie
                for rng in seq[:-1]:
                    node = node.setdefault(rng, {})
                node.setdefault(seq[-1], None)
        self.tries[id(ranges)] = (ranges, trie)   # the ranges kept with it: their id stays theirs
        return trie

    def trie(self, trie: Trie, nxt: int, memo: dict[tuple[Any, ...], int]) -> int:
        # Group sibling ranges that lead to the same continuation into one byte-mask
        # instruction; identical sub-tries (common [80-BF] suffixes) are shared through memo.
        by_target: dict[int, list[tuple[int, int]]] = {}
        for rng, child in trie.items():
            target = nxt if child is None else self.subtrie(child, nxt, memo)
            by_target.setdefault(target, []).append(rng)
        pcs: list[int] = []
        for target, rngs in by_target.items():
            key = (tuple(sorted(rngs)), target)
            if key not in memo:
                memo[key] = self.emit(BYTE, _mask(rngs), out=target)
            pcs.append(memo[key])
        if not pcs:
            return self.emit(FAIL)
        pc = pcs[-1]
        for s in reversed(pcs[:-1]):
            pc = self.emit(SPLIT, out=s, out1=pc)
        return pc

    def subtrie(self, child: Trie, nxt: int, memo: dict[tuple[Any, ...], int]) -> int:
        key = ("t", _freeze(child), nxt)
        if key not in memo:
            memo[key] = self.trie(child, nxt, memo)
        return memo[key]


def _freeze(trie: Trie) -> tuple[Any, ...]:
    return tuple(sorted((k, None if v is None else _freeze(v)) for k, v in trie.items()))


def compile_tree(tree: sx.Node, ncap: int, reverse: bool = False, pattern: str | bytes = "") -> Prog:
    """Program for tree. Forward programs record group 0 in slots 0/1; reverse ones record none.

    A forward program for a pattern with a loop that can iterate on empty must come from
    flatten.compile_forward instead (it builds on this module), so that it picks RE2's match."""
    prog = Prog()
    prog.reverse = reverse
    prog.ncap = ncap
    comp = _Compiler(prog, reverse, pattern)
    match = prog.emit(MATCH)
    if reverse:
        prog.start = comp.c(tree, match)
    else:
        end = prog.emit(SAVE, 1, out=match)
        body = comp.c(tree, end)
        prog.start = prog.emit(SAVE, 0, out=body)
    return prog
