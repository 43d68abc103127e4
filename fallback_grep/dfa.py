"""Lazy DFA over bytes: builds deterministic states on demand from the program, with a bounded cache.

A DFA state is the ordered list of program threads alive between two bytes (the "kernel", in
priority order), plus what is known about the byte just consumed (needed by ^ $ \\b).  Empty-width
assertions are resolved when the *next* byte is known, so a transition on byte c first closes the
kernel under the assertions that hold between the previous byte and c, notes whether a Match
instruction was reached (a match ends before c), then steps over c.  This is the scheme RE2 and
Rust's regex-automata use; matches are therefore reported one byte late, and the end of the text
is an extra pseudo-byte (END).

Leftmost-first: closing stops at the first Match (lower-priority threads are cut), and the search
runs until the state is dead, remembering the last match position.  That end, plus a reverse DFA
run (anchored at the end, leftmost-longest) to find the start, gives the leftmost-first span
without captures.  The unanchored prefix `.*?` is a pseudo-thread LOOP (pc -1) so that a match
cuts it just like any other lower-priority thread.

The cache is bounded (MAX_STATES).  When full it is flushed; if flushes come too often for the
amount of input consumed, search() returns GAVE_UP and the caller uses the Pike VM instead.
"""
from __future__ import annotations

import enum

from .prog import (ASSERT, BYTE, FAIL, LOOK_BOL, LOOK_BOT, LOOK_EOL, LOOK_EOT, LOOK_NOT_WORD,
                   LOOK_WORD, MATCH, NOP, SAVE, SPLIT, WORD_BYTES)

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Final

    from .prog import Prog

    # A state's threads: program counters, LOOP (the unanchored start), and while a closure runs
    # the marker ("loop",) for "consume a byte and loop".
    Kernel = tuple[int, ...]
    Bytes = bytes | bytearray | memoryview


END = 256            # pseudo-byte: end of text
STRIDE = 257         # transition row: bytes 0..255 plus END
LOOP = -1            # the unanchored `.*?` pseudo-thread

# What the state remembers about the byte before it (look-behind).
LB_START = 1         # at the beginning of the text
LB_NL = 2            # previous byte was \n
LB_WORD = 4          # previous byte was an ASCII word byte

UNKNOWN = -(1 << 62)  # transition not computed yet
MAX_STATES = 4000
MIN_BYTES_PER_STATE = 10  # fewer bytes per new state than this after a flush -> give up


class GaveUp(enum.Enum):
    """What a search returns when the DFA stopped (its cache thrashed): run the Pike VM instead. An
    enum's single member, so that the type checker narrows `x is GAVE_UP` (enum: loaded by re already)."""
    GAVE_UP = "GAVE_UP"

    def __repr__(self) -> str:
        return "GAVE_UP"


GAVE_UP: Final = GaveUp.GAVE_UP


def _look(lb: int, c: int) -> int:
    """LOOK_* bits holding between a byte described by lb and the next byte c (or END)."""
    flags = 0
    if lb & LB_START:
        flags |= LOOK_BOT | LOOK_BOL
    elif lb & LB_NL:
        flags |= LOOK_BOL
    if c == END:
        flags |= LOOK_EOT | LOOK_EOL
    elif c == 10:
        flags |= LOOK_EOL
    if bool(lb & LB_WORD) != (c in WORD_BYTES):
        flags |= LOOK_WORD
    else:
        flags |= LOOK_NOT_WORD
    return flags


def _lb_after(c: int) -> int:
    if c == END:
        return 0
    return (LB_NL if c == 10 else 0) | (LB_WORD if c in WORD_BYTES else 0)


class _State:
    __slots__ = ("kernel", "lb", "matched", "dead")

    def __init__(self, kernel: Kernel, lb: int, matched: bool) -> None:
        self.kernel = kernel
        self.lb = lb
        self.matched = matched     # a match ended just before the byte that led here
        self.dead = not kernel     # no thread left: nothing more can match


class DFA:
    """A lazily built DFA for one program and one match kind. Not shared across threads."""

    def __init__(self, prog: Prog, anchored: bool, longest: bool) -> None:
        self.prog = prog
        self.anchored = anchored
        self.longest = longest
        self.lb_mask = self._relevant_lookbehind(prog.uses_look)
        self.classes = self._byte_classes(prog)
        self.flushes = 0
        self.scanned = 0          # input bytes consumed since the last flush (all calls)
        self._mark = 0            # where the current call started, or the last flush inside it
        self.reset()

    @staticmethod
    def _relevant_lookbehind(uses: int) -> int:
        mask = 0
        if uses & (LOOK_BOL | LOOK_BOT):
            mask |= LB_START | LB_NL
        if uses & (LOOK_WORD | LOOK_NOT_WORD):
            mask |= LB_WORD
        return mask

    @staticmethod
    def _byte_classes(prog: Prog) -> list[list[int]]:
        """Bytes that no instruction tells apart share one class: one closure per class."""
        sig: list[list[bool]] = [[] for _ in range(256)]
        for pc, op in enumerate(prog.op):
            if op == BYTE:
                mask = prog.arg[pc]
                for b in range(256):
                    sig[b].append(mask[b])
        groups: dict[tuple[tuple[bool, ...], bool, bool], list[int]] = {}
        for b in range(256):
            key = (tuple(sig[b]), b == 10, b in WORD_BYTES)
            groups.setdefault(key, []).append(b)
        classes = list(groups.values())
        classes.append([END])
        return classes

    def reset(self) -> None:
        self.start_cache: dict[int, int] = {}     # look-behind bits -> start state offset
        self.lb_of_byte = [_lb_after(b) & self.lb_mask for b in range(256)]
        self.trans: list[int] = []           # flat: state_offset + byte -> code
        self.states: list[_State] = []       # index -> _State
        self.index: dict[tuple[Kernel, int, bool], int] = {}  # (kernel, lb, matched) -> state offset
        self.class_of: dict[int, list[int]] = {}
        for cls in self.classes:
            for b in cls:
                self.class_of[b] = cls

    # ---- state construction ------------------------------------------------------------------
    def _state(self, kernel: Kernel, lb: int, matched: bool) -> int:
        key = (kernel, lb, matched)
        off = self.index.get(key)
        if off is None:
            off = len(self.states) * STRIDE
            self.states.append(_State(kernel, lb, matched))
            self.trans.extend([UNKNOWN] * STRIDE)
            self.index[key] = off
        return off

    def _code(self, off: int) -> int:
        """Transition code: the state offset, negated (minus one) when the state is special."""
        st = self.states[off // STRIDE]
        return -off - 1 if (st.matched or st.dead) else off

    def start(self, data: Bytes, pos: int) -> int:
        lb = LB_START if pos == 0 else self.lb_of_byte[data[pos - 1]]
        off = self.start_cache.get(lb)
        if off is None:
            kernel = (self.prog.start,) if self.anchored else (LOOP,)
            off = self.start_cache[lb] = self._state(kernel, lb, False)
        return off

    def _step(self, off: int, c: int) -> int:
        """Compute the transition from state at off on byte c, fill its class, return the code."""
        st = self.states[off // STRIDE]
        look = _look(st.lb, c)
        prog = self.prog
        op, arg, out, out1 = prog.op, prog.arg, prog.out, prog.out1
        seen: set[int | tuple[str]] = set()
        nxt: list[int] = []
        matched = False
        cut = False
        for k in st.kernel:
            stack: list[int | tuple[str]] = [k]
            while stack:
                pc = stack.pop()
                if pc in seen:
                    continue
                seen.add(pc)
                if pc == LOOP:
                    # `.*?`: prefer starting the pattern here, else consume a byte and loop.
                    stack.append(("loop",))
                    stack.append(prog.start)
                    continue
                if isinstance(pc, tuple):
                    if c != END and not (self.longest and matched):
                        nxt.append(LOOP)
                    continue
                o = op[pc]
                if o == SPLIT:
                    stack.append(out1[pc])
                    stack.append(out[pc])
                elif o == SAVE or o == NOP:
                    stack.append(out[pc])
                elif o == ASSERT:
                    if look & arg[pc] == arg[pc]:
                        stack.append(out[pc])
                elif o == BYTE:
                    if c != END and arg[pc][c]:
                        nxt.append(out[pc])
                elif o == MATCH:
                    matched = True
                    if not self.longest:
                        cut = True
                        break
            if cut:
                break
        if self.longest and matched and LOOP in nxt:
            nxt.remove(LOOP)  # leftmost: no new starts once a match is known
        kernel = tuple(dict.fromkeys(nxt))
        lb = _lb_after(c) & self.lb_mask
        target = self._state(kernel, lb, matched)
        code = self._code(target)
        base = off
        trans = self.trans
        for b in self.class_of[c]:
            trans[base + b] = code
        return code

    def _flush(self, data: Bytes | None, i: int, cur_off: int) -> int:
        """Cache full: drop every state and rebuild the current one (RE2 does the same)."""
        self.flushes += 1
        st = self.states[cur_off // STRIDE]
        self.reset()
        return self._state(st.kernel, st.lb, st.matched)

    # ---- searches ----------------------------------------------------------------------------
    def search(self, data: Bytes, pos: int, endpos: int, anchor_end: bool = False,
               earliest: bool = False) -> int | GaveUp | None:
        """End offset of the leftmost match in data[pos:endpos] (None if none, or GAVE_UP).

        anchor_end: only a match ending exactly at endpos counts.  earliest: return as soon as
        any match end is seen (enough to know *that* a match exists, used by grep).
        """
        self._mark = pos
        result, stop = self._forward(data, pos, endpos, anchor_end, earliest)
        self.scanned += abs(stop - self._mark)
        return result

    def _room(self, i: int) -> bool:
        """The cache is full at input position i: may we flush it (True), or is it thrashing?

        Thrashing means fewer than MIN_BYTES_PER_STATE input bytes per state built since the
        last flush, counted across calls (grep verifies many short lines with one DFA).
        """
        if self.scanned + abs(i - self._mark) < MIN_BYTES_PER_STATE * MAX_STATES:
            return False
        self.scanned = 0
        self._mark = i
        return True

    def _forward(self, data: Bytes, pos: int, endpos: int, anchor_end: bool,
                 earliest: bool) -> tuple[int | GaveUp | None, int]:
        trans = self.trans
        off = self.start(data, pos)
        last = None
        n = len(data)
        i = pos
        while i < endpos:
            code = trans[off + data[i]]
            if code >= 0:
                off = code
                i += 1
                continue
            if code == UNKNOWN:
                if len(self.states) >= MAX_STATES:
                    if not self._room(i):
                        return GAVE_UP, i
                    off = self._flush(data, i, off)
                    trans = self.trans
                code = self._step(off, data[i])
                continue
            off = -code - 1
            st = self.states[off // STRIDE]
            if st.matched and not anchor_end:
                last = i
                if earliest:
                    return i, i
            if st.dead:
                return last, i
            i += 1
        # Past the last byte: one more closure to see whether a match ends at endpos.
        final = data[endpos] if endpos < n else END
        if self._final_match(off, final):
            return endpos, i
        return last, i

    def _final_match(self, off: int, final: int) -> bool:
        """Does a match end right before `final` (the byte after the range, or END)?"""
        code = self.trans[off + final]
        if code == UNKNOWN:
            if len(self.states) >= MAX_STATES:
                off = self._flush(None, 0, off)
            code = self._step(off, final)
        return code < 0 and self.states[(-code - 1) // STRIDE].matched

    def search_reverse(self, data: Bytes, pos: int, end: int) -> int | GaveUp | None:
        """Smallest s >= pos such that the (reverse, anchored, longest) program matches data[s:end]."""
        self._mark = end
        result, stop = self._backward(data, pos, end)
        self.scanned += abs(stop - self._mark)
        return result

    def _backward(self, data: Bytes, pos: int, end: int) -> tuple[int | GaveUp | None, int]:
        trans = self.trans
        # Reversed text: the byte after `end` plays the role of the previous byte.
        if end == len(data):
            lb = LB_START
        else:
            lb = _lb_after(data[end])
        off = self._state((self.prog.start,), lb & self.lb_mask, False)
        last = None
        i = end - 1
        while i >= pos:
            code = trans[off + data[i]]
            if code >= 0:
                off = code
                i -= 1
                continue
            if code == UNKNOWN:
                if len(self.states) >= MAX_STATES:
                    if not self._room(i):
                        return GAVE_UP, i
                    off = self._flush(data, i, off)
                    trans = self.trans
                code = self._step(off, data[i])
                continue
            off = -code - 1
            st = self.states[off // STRIDE]
            if st.matched:
                last = i + 1
            if st.dead:
                return last, i
            i -= 1
        final = data[pos - 1] if pos > 0 else END
        if self._final_match(off, final):
            return pos, i
        return last, i
