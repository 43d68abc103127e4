"""The public, re-shaped API: compile() -> Pattern, whose methods return Match objects.

Matching is over UTF-8 bytes.  For str subjects the text is encoded once and byte offsets are
mapped back to character offsets.  Engine choice per call (see Pattern._find):
  1. the literal prefilter rejects texts that cannot match without running any automaton;
  2. the lazy DFA finds where the leftmost match ends (forward) and starts (reverse);
  3. the Pike VM runs only on that span, and only when capture groups are wanted.
"""
from __future__ import annotations

import threading

from . import dfa as dfa_mod
from . import flatten
from . import pikevm
from . import prefilter
from .lines import to_line_mode
from .parser import FLAG_I, FLAG_M, FLAG_S, FLAG_U, parse
from .prog import compile_tree

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, Literal

    from .prefilter import Prefilter
    from .prog import Prog
    from .syntax import Node

    Subject = str | bytes | bytearray | memoryview
    Slots = tuple[int, ...] | list[int]  # capture slots: byte offsets, start and end per group

IGNORECASE = I = FLAG_I
MULTILINE = M = FLAG_M
DOTALL = S = FLAG_S
UNGREEDY = U = FLAG_U
LONGEST = 16          # leftmost-longest semantics (RE2's longest_match option)
LINES = 32            # grep line mode (see lines.py): matches never span \n, anchors at lines

_PARSE_FLAGS = FLAG_I | FLAG_M | FLAG_S | FLAG_U


class _Text:
    """A subject as bytes plus the offset mapping back to the caller's type."""

    __slots__ = ("orig", "data", "is_str", "_char_of")

    def __init__(self, subject: Subject) -> None:
        self.orig: Any = subject  # sliced by spans: str, or the bytes-like it was
        if isinstance(subject, str):
            self.is_str = True
            self.data = subject.encode("utf-8", "surrogatepass")
            # ASCII text needs no mapping; otherwise build it lazily on first use.
            self._char_of: list[int] | Literal[False] | None = None if len(self.data) == len(subject) else False
        elif isinstance(subject, (bytes, bytearray, memoryview)):
            self.is_str = False
            self.data = bytes(subject)
            self._char_of = None
        else:
            raise TypeError(f"expected str or bytes to search, got {type(subject).__name__}")

    def to_orig(self, off: int) -> int:
        if off < 0 or self._char_of is None:
            return off
        char_of = self._char_of
        if char_of is False:
            char_of = self._char_of = _char_offsets(self.data)
        return char_of[off]

    def to_bytes(self, off: int) -> int:
        if not self.is_str or self._char_of is None:
            return off
        return len(self.orig[:off].encode("utf-8", "surrogatepass"))


def _char_offsets(data: bytes) -> list[int]:
    """char_of[b] = index of the character containing (or starting at) byte offset b."""
    out = []
    count = -1
    for b in data:
        if b & 0xC0 != 0x80:
            count += 1
        out.append(count)
    out.append(count + 1)
    # A byte offset inside a character maps to that character's index; starts map exactly.
    return out


class Pattern:
    """A compiled RE2 pattern. Safe to share between threads; its DFA caches are per thread and
    bounded (dfa.MAX_STATES states each)."""

    def __init__(self, pattern: str | bytes, flags: int = 0) -> None:
        if not isinstance(pattern, (str, bytes)):
            raise TypeError(f"pattern must be str or bytes, got {type(pattern).__name__}")
        self.pattern = pattern
        self.flags = flags
        parsed = parse(pattern, flags & _PARSE_FLAGS)
        if flags & LINES:
            parsed.tree = to_line_mode(parsed.tree, pattern)
        self.tree = parsed.tree
        self.groups = parsed.ncap
        self.groupindex = dict(parsed.names)
        self.longest = bool(flags & LONGEST)
        self.prog = flatten.compile_forward(parsed.tree, parsed.ncap, pattern=pattern)
        self.prefilter = prefilter.build(parsed.tree, exact_ok=bool(flags & LINES))
        # Lazy DFAs are caches that grow while searching: one set per thread, so a Pattern (and
        # the module-level compile cache that shares it) is safe to use from several threads.
        self._local = threading.local()
        self._rprog: Prog | None = None

    def __repr__(self) -> str:
        return f"fallback_grep.compile({self.pattern!r})"

    # ---- engines ---------------------------------------------------------------------------
    def _dfa(self, kind: str) -> dfa_mod.DFA:
        """kind: 'fwd' (unanchored), 'anchored', 'anchored_end' (both ends), 'rev'."""
        dfas = getattr(self._local, "dfas", None)
        if dfas is None:
            dfas = self._local.dfas = {}
        d = dfas.get(kind)
        if d is None:
            if kind == "rev":
                if self._rprog is None:  # immutable once built; a race only builds it twice
                    self._rprog = compile_tree(self.tree, 0, reverse=True, pattern=self.pattern)
                d = dfa_mod.DFA(self._rprog, anchored=True, longest=True)
            elif kind == "anchored_end":
                # Only the end position matters, so no thread may be cut by an earlier match.
                d = dfa_mod.DFA(self.prog, anchored=True, longest=True)
            else:
                d = dfa_mod.DFA(self.prog, anchored=(kind == "anchored"), longest=self.longest)
            dfas[kind] = d
        return d

    def _find(self, data: bytes, pos: int, endpos: int, anchored: bool, anchor_end: bool) -> Slots | None:
        """Capture slots (byte offsets) of the leftmost match in data[pos:endpos], or None."""
        pf = self.prefilter
        if not anchored and pf is not None and not pf.may_match(data, pos, endpos):
            return None
        if self.longest and not anchored:
            # A forward DFA cannot tell which thread started leftmost; the VM can.
            return pikevm.search(self.prog, data, pos, endpos, longest=True)
        span = self._dfa_span(data, pos, endpos, anchored, anchor_end)
        if span is None:
            return None
        if span is dfa_mod.GAVE_UP:
            return pikevm.search(self.prog, data, pos, endpos, anchored=anchored,
                                 anchor_end=anchor_end, longest=self.longest)
        s, e = span
        if not self.groups:
            return (s, e)
        # The leftmost-first match from s ends at e, so it is also the best match of [s, e].
        return pikevm.search(self.prog, data, s, e, anchored=True, anchor_end=True,
                             longest=self.longest)

    def _dfa_span(self, data: bytes, pos: int, endpos: int, anchored: bool,
                  anchor_end: bool) -> tuple[int, int] | dfa_mod.GaveUp | None:
        """(start, end) of the leftmost match via forward + reverse DFA, None, or GAVE_UP."""
        if anchor_end:
            end = self._dfa("anchored_end").search(data, pos, endpos, anchor_end=True)
        else:
            end = self._dfa("anchored" if anchored else "fwd").search(data, pos, endpos)
        if end is None or end is dfa_mod.GAVE_UP:
            return end
        if anchored:
            return (pos, end)
        start = self._dfa("rev").search_reverse(data, pos, end)
        if start is dfa_mod.GAVE_UP:
            return start
        assert start is not None  # a match ends at `end`, so the reverse program finds where it starts
        return (start, end)

    # ---- re-like methods ---------------------------------------------------------------------
    def _run(self, subject: Subject, pos: int, endpos: int | None, anchored: bool, anchor_end: bool) -> Match | None:
        text = _Text(subject)
        self._check_type(text)
        n = len(text.orig)
        pos = min(max(pos, 0), n)
        endpos = n if endpos is None else min(max(endpos, 0), n)
        bpos, bend = text.to_bytes(pos), text.to_bytes(endpos)
        if bpos > bend:
            return None
        slots = self._find(text.data, bpos, bend, anchored, anchor_end)
        if slots is None:
            return None
        return Match(self, text, slots, pos, endpos)

    def _check_type(self, text: _Text) -> None:
        if isinstance(self.pattern, str) != text.is_str:
            kind = "str" if isinstance(self.pattern, str) else "bytes"
            raise TypeError(f"cannot use a {kind} pattern on a "
                            f"{'str' if text.is_str else 'bytes-like'} object; compile the "
                            "pattern as the same type as the text")

    def search(self, string: Subject, pos: int = 0, endpos: int | None = None) -> Match | None:
        return self._run(string, pos, endpos, False, False)

    def match(self, string: Subject, pos: int = 0, endpos: int | None = None) -> Match | None:
        return self._run(string, pos, endpos, True, False)

    def fullmatch(self, string: Subject, pos: int = 0, endpos: int | None = None) -> Match | None:
        return self._run(string, pos, endpos, True, True)

    def finditer(self, string: Subject, pos: int = 0, endpos: int | None = None) -> Iterator[Match]:
        text = _Text(string)
        self._check_type(text)
        n = len(text.orig)
        pos = min(max(pos, 0), n)
        endpos = n if endpos is None else min(max(endpos, 0), n)
        data = text.data
        bpos, bend = text.to_bytes(pos), text.to_bytes(endpos)
        while bpos <= bend:
            slots = self._find(data, bpos, bend, False, False)
            if slots is None:
                return
            s, e = slots[0], slots[1]
            yield Match(self, text, slots, pos, endpos)
            # As google-re2 and Python's re: after an empty match step one character (str) or
            # byte (bytes); an empty match right after a non-empty one is allowed.
            bpos = e if e > s else _next_pos(data, e, text.is_str)

    def findall(self, string: Subject, pos: int = 0, endpos: int | None = None) -> list[Any]:
        out: list[Any] = []
        for m in self.finditer(string, pos, endpos):
            if self.groups == 0:
                out.append(m.group(0))
            elif self.groups == 1:
                out.append(m.group(1) if m.group(1) is not None else m.string[:0])
            else:
                out.append(tuple(g if g is not None else m.string[:0] for g in m.groups()))
        return out


def _next_pos(data: bytes, i: int, is_str: bool) -> int:
    i += 1
    if is_str:
        while i < len(data) and data[i] & 0xC0 == 0x80:
            i += 1
    return i


class Match:
    """One match: spans are in characters for str subjects and bytes for bytes subjects."""

    def __init__(self, pattern: Pattern, text: _Text, slots: Slots, pos: int, endpos: int) -> None:
        self.re = pattern
        self.string = text.orig
        self.pos = pos
        self.endpos = endpos
        self.regs = tuple((text.to_orig(slots[2 * g]), text.to_orig(slots[2 * g + 1]))
                          for g in range(pattern.groups + 1))

    def _index(self, g: int | str) -> int:
        if isinstance(g, str):
            if g not in self.re.groupindex:
                raise IndexError(f"no such group {g!r}; named groups are "
                                 f"{sorted(self.re.groupindex)}")
            return self.re.groupindex[g]
        if not 0 <= g <= self.re.groups:
            raise IndexError(f"no such group {g}; the pattern has {self.re.groups} groups")
        return g

    def span(self, g: int | str = 0) -> tuple[int, int]:
        return self.regs[self._index(g)]

    def start(self, g: int | str = 0) -> int:
        return self.span(g)[0]

    def end(self, g: int | str = 0) -> int:
        return self.span(g)[1]

    def group(self, *gs: int | str) -> Any:
        """The text of one group (None when it took no part), or a tuple of several."""
        if not gs:
            gs = (0,)
        vals: list[Any] = []
        for g in gs:
            s, e = self.span(g)
            vals.append(None if s < 0 else self.string[s:e])
        return vals[0] if len(vals) == 1 else tuple(vals)

    def __getitem__(self, g: int | str) -> Any:
        return self.group(g)

    def groups(self, default: Any = None) -> tuple[Any, ...]:
        out: list[Any] = []
        for g in range(1, self.re.groups + 1):
            v = self.group(g)
            out.append(default if v is None else v)
        return tuple(out)

    def groupdict(self, default: Any = None) -> dict[str, Any]:
        return {name: (self.group(i) if self.group(i) is not None else default)
                for name, i in self.re.groupindex.items()}

    def __repr__(self) -> str:
        return f"<fallback_grep.Match span={self.span()} match={self.group(0)!r}>"
