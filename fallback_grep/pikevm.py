"""Pike VM: simulate the program's NFA in lock step, carrying capture positions per thread.

Time is O(len(text) * len(prog)): each instruction is visited at most once per input position,
which is what makes it safe for every pattern.  It reports spans and capture groups; the lazy DFA
(dfa.py) is faster when only the match bounds are needed.

Semantics: leftmost-first (Perl/RE2 default: thread priority decides) or leftmost-longest
(POSIX-style overall match; RE2's longest_match option).
"""
from __future__ import annotations

from .prog import (ASSERT, BYTE, FAIL, LOOK_BOL, LOOK_BOT, LOOK_EOL, LOOK_EOT, LOOK_NOT_WORD,
                   LOOK_WORD, MATCH, NOP, SAVE, SPLIT, WORD_BYTES)

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from typing import Any

    from .prog import Prog


def look_at(text: bytes, i: int) -> int:
    """The set of LOOK_* conditions that hold at position i of text (a bytes object)."""
    n = len(text)
    flags = 0
    before = text[i - 1] if i > 0 else None
    after = text[i] if i < n else None
    if i == 0:
        flags |= LOOK_BOT | LOOK_BOL
    elif before == 10:
        flags |= LOOK_BOL
    if i == n:
        flags |= LOOK_EOT | LOOK_EOL
    elif after == 10:
        flags |= LOOK_EOL
    if (before in WORD_BYTES) != (after in WORD_BYTES):
        flags |= LOOK_WORD
    else:
        flags |= LOOK_NOT_WORD
    return flags


class StepCounter:
    """Counts thread steps; tests use it to show work grows linearly with input size."""

    def __init__(self) -> None:
        self.steps = 0


def search(prog: Prog, text: bytes, pos: int = 0, endpos: int | None = None, anchored: bool = False,
           anchor_end: bool = False, longest: bool = False, counter: StepCounter | None = None) -> tuple[int, ...] | None:
    """Return the capture slot tuple (2 * (ncap + 1) entries, -1 = unset) or None.

    text is bytes; pos/endpos bound the search, but assertions look at the whole text so that
    `^` and `\\b` see the real neighbours (as in Python's re with pos).
    """
    if endpos is None or endpos > len(text):
        endpos = len(text)
    nslots = 2 * (prog.ncap + 1)
    op, arg, out, out1 = prog.op, prog.arg, prog.out, prog.out1
    seen = [-1] * len(op)
    empty_caps = (-1,) * nslots
    clist: list[tuple[int, tuple[int, ...]]] = []   # (pc, capture slots) per thread, in priority order
    nlist: list[tuple[int, tuple[int, ...]]] = []
    matched: tuple[int, ...] | None = None
    uses_look = prog.uses_look
    steps = 0

    def add(threads: list[tuple[int, tuple[int, ...]]], pc0: int, i: int, caps0: tuple[int, ...], look: int) -> None:
        # Depth-first in priority order: out is explored before out1.
        stack = [(pc0, caps0)]
        while stack:
            pc, caps = stack.pop()
            if seen[pc] == i:
                continue
            seen[pc] = i
            o = op[pc]
            if o == SPLIT:
                stack.append((out1[pc], caps))
                stack.append((out[pc], caps))
            elif o == SAVE:
                k = arg[pc]
                if k < nslots:
                    caps = caps[:k] + (i,) + caps[k + 1:]
                stack.append((out[pc], caps))
            elif o == ASSERT:
                if look & arg[pc] == arg[pc]:
                    stack.append((out[pc], caps))
            elif o == NOP:
                stack.append((out[pc], caps))
            elif o != FAIL:
                threads.append((pc, caps))

    i = pos
    while True:
        look = look_at(text, i) if uses_look else 0
        if matched is None and (not anchored or i == pos):
            add(clist, prog.start, i, empty_caps, look)
        if not clist:
            if matched is not None or anchored or i >= endpos:
                break
            i += 1
            continue
        steps += len(clist)
        byte = text[i] if i < endpos else -1
        nlook = look_at(text, i + 1) if (uses_look and i < endpos) else 0
        for pc, caps in clist:
            o = op[pc]
            if o == MATCH:
                if anchor_end and i != endpos:
                    continue
                if longest:
                    if matched is None or caps[0] < matched[0] or (
                            caps[0] == matched[0] and caps[1] > matched[1]):
                        matched = caps
                    continue
                matched = caps
                break  # leftmost-first: lower-priority threads lose
            if byte >= 0 and arg[pc][byte]:
                if longest and matched is not None and caps[0] > matched[0]:
                    continue
                add(nlist, out[pc], i + 1, caps, nlook)
        clist, nlist = nlist, clist
        nlist.clear()
        if i >= endpos:
            break
        i += 1
    if counter is not None:
        counter.steps += steps
    return matched
