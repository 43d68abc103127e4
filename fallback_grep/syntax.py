"""The regular-expression syntax tree (the parser's output, the compiler's input).

Like Go's regexp/syntax, case folding is resolved while parsing: a literal under (?i) becomes a
character class of its fold orbit, so later stages never see flags except the few that change
the meaning of an operator (greediness is stored on the repeat node, (?m) picks BOL vs BOT).
"""
from __future__ import annotations

from . import bounded
from .record import Record

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from .bounded import Walk

# Node kinds.
NO_MATCH = "no_match"      # matches nothing (e.g. an empty class [^\x00-\x{10FFFF}])
EMPTY = "empty"            # matches the empty string
LITERAL = "literal"        # one code point: .rune
CLASS = "class"            # a set of code points: .ranges, sorted disjoint (lo, hi) pairs
ANY_BYTE = "any_byte"      # \C: any single byte (.ranges: byte ranges, empty = all 256)
ASSERT = "assert"          # an empty-width assertion: .kind, one of the constants below
CAPTURE = "capture"        # .index (1-based), .name or None, .subs[0]
REPEAT = "repeat"          # .min, .max (-1 = unbounded), .greedy, .subs[0]; .counted, .flags (below)
CONCAT = "concat"          # .subs
ALTERNATE = "alternate"    # .subs, in priority order

# Assertion kinds.
BOL = "bol"      # ^ under (?m): beginning of line
EOL = "eol"      # $ under (?m): end of line
BOT = "bot"      # \A, or ^ without (?m)
EOT = "eot"      # \z, or $ without (?m)
WORD = "word"    # \b (ASCII)
NOT_WORD = "not_word"  # \B (ASCII)

MAX_RUNE = 0x10FFFF


class Node(Record):
    _fields = ("op", "subs", "rune", "ranges", "kind", "index", "name", "min", "max", "greedy",
               "counted", "flags")

    def __init__(self, op: str, subs: list[Node] | None = None, rune: int = 0,
                 ranges: Sequence[tuple[int, int]] = (), kind: str = "", index: int = 0, name: str | None = None,
                 min: int = 0, max: int = 0, greedy: bool = True, counted: bool = False,  # noqa: A002
                 flags: int = 0) -> None:
        self.op = op
        self.subs = [] if subs is None else subs
        self.rune = rune
        self.ranges = ranges
        self.kind = kind
        self.index = index
        self.name = name
        self.min = min
        self.max = max
        self.greedy = greedy
        # Only RE2's program shape (flatten.py) reads these two: RE2 squashes nested repeats only
        # when both were written as * + ? (not {n,m}) under the same i/m/s flags.
        self.counted = counted   # written {n,m}, not * + ?
        self.flags = flags       # the parser's i/m/s flags where the operator was written

    def __repr__(self) -> str:
        return dump(self)


def literal(r: int) -> Node:
    return Node(LITERAL, rune=r)


def char_class(ranges: Iterable[tuple[int, int]]) -> Node:
    return Node(CLASS, ranges=tuple(ranges)) if ranges else Node(NO_MATCH)


def concat(subs: Iterable[Node]) -> Node:
    subs = [s for s in subs if s.op != EMPTY]
    if not subs:
        return Node(EMPTY)
    if len(subs) == 1:
        return subs[0]
    return Node(CONCAT, subs=subs)


def alternate(subs: list[Node]) -> Node:
    if len(subs) == 1:
        return subs[0]
    return Node(ALTERNATE, subs=subs)


def node_ranges(node: Node) -> Sequence[tuple[int, int]] | None:
    """The code point ranges a one-character node matches, or None if it is not one."""
    if node.op == LITERAL:
        return ((node.rune, node.rune),)
    if node.op == CLASS:
        return node.ranges
    return None


def dump(node: Node) -> str:
    """A compact, deterministic rendering for tests and debugging."""
    return bounded.run(_dump(node))


def _dump(node: Node) -> Walk[str]:
    op = node.op
    if op == LITERAL:
        return f"lit{{{chr(node.rune)!r}}}"
    if op == CLASS:
        parts = [f"{lo:x}" if lo == hi else f"{lo:x}-{hi:x}" for lo, hi in node.ranges]
        return "cc{" + " ".join(parts) + "}"
    if op == ASSERT:
        return node.kind
    if op == CAPTURE:
        name = f"<{node.name}>" if node.name else ""
        return f"cap{node.index}{name}{{{(yield _dump(node.subs[0]))}}}"
    if op == REPEAT:
        mx = "" if node.max < 0 else node.max
        lazy = "" if node.greedy else "?"
        return f"rep{{{node.min},{mx}}}{lazy}{{{(yield _dump(node.subs[0]))}}}"
    if op in (CONCAT, ALTERNATE):
        subparts: list[str] = []
        for sub in node.subs:
            subparts.append((yield _dump(sub)))
        return f"{op[:3]}{{" + " ".join(subparts) + "}"
    return op


def nullable(node: Node, memo: dict[int, tuple[Node, bool]] | None = None) -> bool:
    """Can node match the empty string (ignoring whether its assertions hold)?

    memo: {id(node): (node, answer)}, for a caller asking about many nodes of one tree (every
    loop of nested loops asks about the loops below it)."""
    return bounded.run(_nullable(node, {} if memo is None else memo))


def _nullable(node: Node, memo: dict[int, tuple[Node, bool]]) -> Walk[bool]:
    hit = memo.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    op = node.op
    if op in (EMPTY, ASSERT):
        answer = True
    elif op in (LITERAL, CLASS, ANY_BYTE, NO_MATCH):
        answer = False
    elif op == CONCAT:
        answer = True
        for sub in node.subs:
            if not (yield _nullable(sub, memo)):
                answer = False
                break
    elif op == ALTERNATE:
        answer = False
        for sub in node.subs:
            if (yield _nullable(sub, memo)):
                answer = True
                break
    elif op == REPEAT:
        answer = node.min == 0 or (yield _nullable(node.subs[0], memo))
    else:
        answer = yield _nullable(node.subs[0], memo)   # CAPTURE
    memo[id(node)] = (node, answer)   # the node kept with it: its id is not reused meanwhile
    return answer


def walk(node: Node) -> Iterator[Node]:
    """All nodes, pre-order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.subs))
