"""RE2's program shape and its Prog::Flatten, for patterns with a loop that can iterate on empty.

Why this exists: when a loop's body can match the empty string (`(?:a*)*`, `(?:\\b|x)+`), the
epsilon closure has cycles, and which thread wins then depends on how the closure is cut, not only
on the pattern's priority order. RE2 cuts it its own way: it compiles the pattern to a program of
Alt/ByteRange/Capture/EmptyWidth/Nop/Match instructions, then flattens it (re2/prog.cc) into
"lists", one per "root" instruction, each expanded in priority order with a visited set of its own;
at match time a list is entered at most once per position. Roots are the start, every successor of
a byte, capture or assertion instruction, and the loop heads that MarkDominator adds while walking
the roots in descending instruction order. So RE2 answers (0, 0) for `(?:(?:(?:ab)*)*?)*` on "ab"
but (0, 2) for `x?` or `(...)` around the same repeat: which loop head becomes a root depends on
what precedes it. A plain Pike VM (prog.py) cannot reproduce that, so for these patterns this
module rebuilds RE2's program step by step and converts the flattened lists into an ordinary
fallback_grep Prog (a list becomes a chain of SPLITs), which the Pike VM and the DFA then run
unchanged. Without such a loop the closure is acyclic, every cut gives the same answer, and
prog.py's compiler is used as before.

The steps, each named after the RE2 function it follows:
  parse_shape   what RE2's parser builds: nested concatenations and alternations spliced,
                `(?:x*)*`-style repeats squashed (PushRepeatOp);
  required_prefix  `^literal...`: RE2 compiles only the rest and checks the literal itself;
  simplify      SimplifyWalker: counted repeats expanded (`x{2,3}` -> `xx(?:x)?`), repeats of
                empty removed, and repeats of repeats squashed (Regexp::Star/Plus/Quest);
  strip_anchors IsAnchorStart/IsAnchorEnd: a leading `^` / trailing `$` is removed from the tree
                (the program is marked anchored instead);
  _Re2Compiler  Compiler::Cat/Alt/Star/Plus/Quest/Capture with RE2's instruction numbering
                (post-order allocation; a nullable `x*` is `(x+)?`);
  optimize      Prog::Optimize's Nop elimination;
  flatten       MarkSuccessors, MarkDominator, EmitList.
A character class stays one instruction here: what matters is where it sits in the numbering, and
its inner byte-range tree has no epsilon cycles (prog.py compiles it when the lists are emitted).
"""
from __future__ import annotations

from . import bounded
from . import charclass as cc
from . import syntax as sx
from .prog import (ASSERT, FAIL, MATCH, MAX_INSTRUCTIONS, NOP, SAVE, SPLIT, Prog, _Compiler,
                   _LOOK_OF, compile_tree, too_large)

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Sequence
    from typing import Any

    from .bounded import Walk

    Keys = dict[int, tuple[sx.Node, Hashable]]   # id(node) -> (node, its round-2 key)
    Leading = Callable[[sx.Node, Keys], Hashable]
    Item = tuple[str, int]                        # ("leaf", instruction) or ("root", another list's root)
    Lists = list[tuple[int, list[Item]]]          # (root, its items) in RE2's list order

_STAR, _PLUS, _QUEST = (0, -1), (1, -1), (0, 1)


def has_empty_loop(tree: sx.Node) -> bool:
    """Does the pattern hold an unbounded repeat whose body can match empty (an epsilon cycle)?"""
    memo: dict[int, tuple[sx.Node, bool]] = {}   # nested loops: each asks about the loops below it
    return any(n.op == sx.REPEAT and n.max == -1 and sx.nullable(n.subs[0], memo) for n in sx.walk(tree))


# ---- RE2's tree ---------------------------------------------------------------------------------

def _spq(node: sx.Node) -> bool:
    """Is node a `*`, `+` or `?` (RE2's Star/Plus/Quest, as opposed to a counted Repeat)?"""
    return node.op == sx.REPEAT and not node.counted


def _rep(sub: sx.Node, kind: tuple[int, int], greedy: bool, flags: int) -> sx.Node:
    return sx.Node(sx.REPEAT, subs=[sub], min=kind[0], max=kind[1], greedy=greedy, flags=flags)


def _star_plus_quest(kind: tuple[int, int], sub: sx.Node, greedy: bool, flags: int) -> sx.Node:
    """Regexp::StarPlusOrQuest (and the parser's PushRepeatOp): `**` is `*`, and any two of
    * + ? written under the same flags and greediness are `*`."""
    if _spq(sub) and sub.greedy == greedy and sub.flags == flags:
        if (sub.min, sub.max) in (kind, _STAR):
            return sub
        return _rep(sub.subs[0], _STAR, greedy, flags)
    return _rep(sub, kind, greedy, flags)


def parse_shape(node: sx.Node) -> sx.Node:
    return bounded.run(_parse_shape(node))


def _parse_shape(node: sx.Node) -> Walk[sx.Node]:
    op = node.op
    if op in (sx.CONCAT, sx.ALTERNATE):
        subs: list[sx.Node] = []
        for s in node.subs:
            s = yield _parse_shape(s)
            subs.extend(s.subs if s.op == op else [s])   # DoCollapse splices same-op children
        if op == sx.ALTERNATE:
            subs = _factor(subs)
            if len(subs) == 1:
                return subs[0]
        return sx.Node(op, subs=subs)
    if op == sx.CAPTURE:
        return sx.Node(op, subs=[(yield _parse_shape(node.subs[0]))], index=node.index, name=node.name)
    if op == sx.REPEAT:
        sub = yield _parse_shape(node.subs[0])
        if node.counted:
            return sx.Node(sx.REPEAT, subs=[sub], min=node.min, max=node.max, greedy=node.greedy,
                           counted=True, flags=node.flags)
        return _star_plus_quest((node.min, node.max), sub, node.greedy, node.flags)
    return node


def _as_literal(node: sx.Node) -> tuple[int, bool] | None:
    """(rune, folded) if RE2's parser makes node a Literal, else None: a one-character class is
    a literal there, and so is a (?i) ASCII letter (other folded characters stay classes)."""
    if node.op == sx.LITERAL:
        return node.rune, False
    if node.op == sx.CLASS and len(node.ranges) == 1 and node.ranges[0][0] == node.ranges[0][1]:
        return node.ranges[0][0], False
    if node.op == sx.CLASS and len(node.ranges) == 2:
        (a, b), (c, d) = node.ranges
        if a == b and c == d and 65 <= a <= 90 and c == a + 32:
            return c, True
    return None


def _literal_run(node: sx.Node) -> bool | None:
    lit = _as_literal(node)
    return None if lit is None else lit[1]


# FactorAlternation (re2/parse.cc), rounds 1 to 3, on a list of alternatives.

def _factor(subs: list[sx.Node]) -> list[sx.Node]:
    """The alternatives `subs` factored; a walk on bounded.run (alternatives sharing a prefix of
    thousands of items nest as deep), over views that drop an item without copying the rest."""
    return bounded.run(_factor_walk([_Alt(s) for s in subs], {}))


def _factor_walk(alts: list[_Alt], keys: Keys) -> Walk[list[sx.Node]]:
    alts = yield from _factor_prefixes(alts, _leading_literal, keys)
    alts = yield from _factor_prefixes(alts, _leading_simple, keys)
    return _merge_classes([a.whole() for a in alts])


class _Alt:
    """An alternative of a factoring: its items with the first `skip` of them factored out, so
    stripping one more copies nothing (copying the rest at every step was quadratic)."""

    __slots__ = ("node", "items", "skip")

    def __init__(self, node: sx.Node, items: list[sx.Node] | None = None, skip: int = 0) -> None:
        self.node = node
        if items is None:
            items = node.subs if node.op == sx.CONCAT else [] if node.op == sx.EMPTY else [node]
        self.items = items
        self.skip = skip

    def first(self) -> sx.Node:
        return self.items[self.skip] if self.skip < len(self.items) else _EMPTY

    def dropped(self) -> _Alt:
        return _Alt(self.node, self.items, self.skip + 1)

    def whole(self) -> sx.Node:
        """The alternative as a node: itself, or what is left of it."""
        if self.skip == 0:
            return self.node
        rest = self.items[self.skip:]
        if len(rest) >= 2:
            return sx.Node(sx.CONCAT, subs=rest)
        return rest[0] if rest else sx.Node(sx.EMPTY)


_EMPTY = sx.Node(sx.EMPTY)


def _factor_prefixes(alts: list[_Alt], leading: Leading, keys: Keys) -> Walk[list[_Alt]]:
    """Rounds 1 and 2: a run of 2+ alternatives that start alike becomes prefix(?:rest|rest...).
    Round 1 strips a common literal string; stripping one character at a time and factoring the
    rests again gives RE2's shape, since concatenation compiles to no instruction of its own."""
    out: list[_Alt] = []
    i = 0
    while i < len(alts):
        key = leading(alts[i].first(), keys)
        j = i + 1
        while key is not None and j < len(alts) and leading(alts[j].first(), keys) == key:
            j += 1
        if j - i < 2:
            out.append(alts[i])
        else:
            rests = yield _factor_walk([a.dropped() for a in alts[i:j]], keys)
            rest = rests[0] if len(rests) == 1 else sx.Node(sx.ALTERNATE, subs=rests)
            out.append(_Alt(sx.Node(sx.CONCAT, subs=[alts[i].first(), rest])))
        i = j
    return out


def _leading_literal(first: sx.Node, keys: Keys) -> Hashable:
    """Round 1's key: the first character of the alternative's leading literal string."""
    return _as_literal(first)


_SIMPLE_LEADING = (sx.ASSERT, sx.CLASS, sx.ANY_BYTE)


def _leading_simple(first: sx.Node, keys: Keys) -> Hashable:
    """Round 2's key: a leading assertion, class (not a literal), \\C, or x{n} of one of those.
    keys: each node's key once (a class's is its whole dump, asked again at every level)."""
    hit = keys.get(id(first))
    if hit is None or hit[0] is not first:
        hit = keys[id(first)] = (first, _simple_key(first))
    return hit[1]


def _simple_key(first: sx.Node) -> Hashable:
    if first.op in _SIMPLE_LEADING and _as_literal(first) is None:
        return sx.dump(first)
    if first.op == sx.REPEAT and first.counted and first.min == first.max and \
            first.subs[0].op in (sx.LITERAL, sx.CLASS, sx.ANY_BYTE):
        return sx.dump(first), first.greedy, first.flags
    return None  # pragma: no mutate (equivalent: falling off the end returns None too)


def _merge_classes(subs: list[sx.Node]) -> list[sx.Node]:
    """Round 3: a run of 2+ literals and classes is one class."""
    out: list[sx.Node] = []
    i = 0
    while i < len(subs):
        j = i
        while j < len(subs) and subs[j].op in (sx.LITERAL, sx.CLASS):
            j += 1
        if j - i >= 2:
            out.append(sx.char_class(cc.normalize([r for s in subs[i:j] for r in sx.node_ranges(s) or ()])))
            i = j
        else:
            out.append(subs[i])
            i += 1
    return out


def required_prefix(tree: sx.Node) -> tuple[list[sx.Node], sx.Node] | None:
    """Regexp::RequiredPrefix: `^+` then a literal string -> (prefix nodes, rest) or None."""
    if tree.op != sx.CONCAT:
        return None
    subs = tree.subs
    i = 0
    while i < len(subs) and subs[i].op == sx.ASSERT and subs[i].kind == sx.BOT:
        i += 1
    if i == 0 or i >= len(subs) or _literal_run(subs[i]) is None:
        return None
    kind = _literal_run(subs[i])
    j = i
    while j < len(subs) and _literal_run(subs[j]) == kind:   # the parser's LiteralString
        j += 1
    rest = subs[j:]
    suffix = rest[0] if len(rest) == 1 else sx.Node(sx.CONCAT, subs=rest) if rest else sx.Node(sx.EMPTY)
    return subs[i:j], suffix


def simplify(node: sx.Node, pattern: str | bytes = "") -> sx.Node:
    """SimplifyWalker; returns node itself when nothing below it changed (RE2 compares pointers).

    Counted repeats become copies (`x{2,5}` -> `xx(?:x(?:x(?:x)?)?)?`): each copy compiles to
    an instruction at least, so past MAX_INSTRUCTIONS copies the pattern is too large, said
    before building them (64 KiB of `(?:a|b){0,1000}` would be millions)."""
    return bounded.run(_simplify(node, [MAX_INSTRUCTIONS, pattern]))


def _simplify(node: sx.Node, copies: list[Any]) -> Walk[sx.Node]:
    # copies: [how many copies may still be made, the pattern for the error]
    op = node.op
    if op in (sx.CONCAT, sx.ALTERNATE, sx.CAPTURE):
        subs = []
        for s in node.subs:
            subs.append((yield _simplify(s, copies)))
        if all(a is b for a, b in zip(subs, node.subs)):
            return node
        return sx.Node(op, subs=subs, index=node.index, name=node.name)
    if op != sx.REPEAT:
        return node
    sub = yield _simplify(node.subs[0], copies)
    if sub.op == sx.EMPTY:
        return sub
    if node.counted:
        copies[0] -= max(node.min, node.max)
        if copies[0] < 0:
            raise too_large(copies[1])
        return _simplify_repeat(sub, node.min, node.max, node.greedy, node.flags)
    if sub is node.subs[0]:
        return node
    if _spq(sub) and (sub.min, sub.max) == (node.min, node.max) and sub.greedy == node.greedy \
            and sub.flags == node.flags:
        return sub
    return _rep(sub, (node.min, node.max), node.greedy, node.flags)


def _simplify_repeat(sub: sx.Node, lo: int, hi: int, greedy: bool, flags: int) -> sx.Node:
    """SimplifyWalker::SimplifyRepeat: x{n,m} as concatenations and nested `?`."""
    if sub.op == sx.ASSERT or (sub.op in (sx.CONCAT, sx.ALTERNATE)
                               and all(s.op == sx.ASSERT for s in sub.subs)):
        lo, hi = min(lo, 1), min(hi, 1)   # an empty-width assertion holds once or always
    if hi == -1:
        if lo <= 1:
            return _star_plus_quest(_STAR if lo == 0 else _PLUS, sub, greedy, flags)
        return _concat([sub] * (lo - 1) + [_star_plus_quest(_PLUS, sub, greedy, flags)])
    if lo == hi == 0:
        return sx.Node(sx.EMPTY)
    if lo == hi == 1:
        return sub
    nre = _concat([sub] * lo) if lo else None
    if hi > lo:
        suf = _star_plus_quest(_QUEST, sub, greedy, flags)
        for _ in range(lo + 1, hi):
            suf = _star_plus_quest(_QUEST, sx.Node(sx.CONCAT, subs=[sub, suf]), greedy, flags)
        nre = suf if nre is None else sx.Node(sx.CONCAT, subs=[nre, suf])
    assert nre is not None  # lo > 0, or hi > lo: x{0,0} returned above
    return nre


def _concat(subs: list[sx.Node]) -> sx.Node:
    return subs[0] if len(subs) == 1 else sx.Node(sx.CONCAT, subs=subs)


def strip_anchor(node: sx.Node, kind: str, depth: int = 0) -> tuple[sx.Node, bool]:
    """IsAnchorStart (kind BOT, first items) / IsAnchorEnd (EOT, last items): (node, stripped)."""
    if depth >= 4:
        return node, False
    if node.op == sx.CONCAT and node.subs:
        k = 0 if kind == sx.BOT else len(node.subs) - 1
        sub, ok = strip_anchor(node.subs[k], kind, depth + 1)
        if ok:
            subs = list(node.subs)
            subs[k] = sub
            return sx.Node(sx.CONCAT, subs=subs), True
    elif node.op == sx.CAPTURE:
        sub, ok = strip_anchor(node.subs[0], kind, depth + 1)
        if ok:
            return sx.Node(sx.CAPTURE, subs=[sub], index=node.index, name=node.name), True
    elif node.op == sx.ASSERT and node.kind == kind:
        return sx.Node(sx.EMPTY), True   # an empty literal string: a Nop
    return node, False


# ---- RE2's compiler -----------------------------------------------------------------------------

# Instruction kinds of the emulated RE2 program (instruction 0 is Fail, as in RE2).
I_FAIL, I_ALT, I_CHAR, I_CAP, I_EMPTY, I_NOP, I_MATCH = range(7)


class _Frag:
    __slots__ = ("begin", "end", "nullable")

    def __init__(self, begin: int, end: list[tuple[int, int]], nullable: bool) -> None:
        self.begin = begin        # 0 = matches nothing
        self.end = end            # [(inst, 0 for out / 1 for out1)] to patch to what follows
        self.nullable = nullable


_NO_MATCH = _Frag(0, [], False)


class _Re2Compiler:
    """Compiler (re2/compile.cc) for the forward program, numbering instructions as RE2 does."""

    def __init__(self, pattern: str | bytes) -> None:
        self.pattern = pattern
        self.op: list[int] = [I_FAIL]
        self.arg: list[Any] = [None]   # I_CHAR: its node; I_CAP: the slot; I_EMPTY: the assertion kind
        self.out: list[int] = [0]
        self.out1: list[int] = [0]

    def alloc(self, op: int, arg: Any = None, out: int = 0, out1: int = 0) -> int:
        if len(self.op) >= MAX_INSTRUCTIONS:
            raise too_large(self.pattern)
        self.op.append(op)
        self.arg.append(arg)
        self.out.append(out)
        self.out1.append(out1)
        return len(self.op) - 1

    def patch(self, end: list[tuple[int, int]], target: int) -> None:
        for pc, which in end:
            (self.out1 if which else self.out)[pc] = target

    def leaf(self, op: int, arg: Any = None) -> _Frag:
        pc = self.alloc(op, arg)
        return _Frag(pc, [(pc, 0)], op != I_CHAR)

    def cat(self, a: _Frag, b: _Frag) -> _Frag:
        if not a.begin or not b.begin:
            return _NO_MATCH
        if self.op[a.begin] == I_NOP and a.end == [(a.begin, 0)] and self.out[a.begin] == 0:
            self.patch(a.end, b.begin)    # a lone leading Nop is elided
            return b
        self.patch(a.end, b.begin)
        return _Frag(a.begin, b.end, a.nullable and b.nullable)

    def alt(self, a: _Frag, b: _Frag) -> _Frag:
        if not a.begin:
            return b
        if not b.begin:
            return a
        pc = self.alloc(I_ALT, out=a.begin, out1=b.begin)
        return _Frag(pc, a.end + b.end, a.nullable or b.nullable)

    def loop_alt(self, body: int, greedy: bool) -> tuple[int, int]:
        """An Alt preferring body (greedy) or the exit; returns (pc, patch list of the exit)."""
        if greedy:
            return self.alloc(I_ALT, out=body), 1
        return self.alloc(I_ALT, out1=body), 0

    def plus(self, a: _Frag, greedy: bool) -> _Frag:
        pc, which = self.loop_alt(a.begin, greedy)
        self.patch(a.end, pc)
        return _Frag(a.begin, [(pc, which)], a.nullable)

    def star(self, a: _Frag, greedy: bool) -> _Frag:
        if a.nullable:   # one Alt cannot keep the priority order of an empty iteration
            return self.quest(self.plus(a, greedy), greedy)
        pc, which = self.loop_alt(a.begin, greedy)
        self.patch(a.end, pc)
        return _Frag(pc, [(pc, which)], True)

    def quest(self, a: _Frag, greedy: bool) -> _Frag:
        if not a.begin:
            return self.leaf(I_NOP)
        pc, which = self.loop_alt(a.begin, greedy)
        return _Frag(pc, [(pc, which)] + a.end, True)

    def capture(self, a: _Frag, index: int) -> _Frag:
        if not a.begin:
            return _NO_MATCH
        pc = self.alloc(I_CAP, 2 * index, out=a.begin)
        end = self.alloc(I_CAP, 2 * index + 1)
        self.patch(a.end, end)
        return _Frag(pc, [(end, 0)], a.nullable)

    def walk(self, node: sx.Node) -> _Frag:
        """Post-order, as Regexp::Walker: children are numbered before their parent."""
        return bounded.run(self._walk(node))

    def _walk(self, node: sx.Node) -> Walk[_Frag]:
        op = node.op
        if op in (sx.LITERAL, sx.CLASS, sx.ANY_BYTE):
            return self.leaf(I_CHAR, node)
        if op == sx.ASSERT:
            return self.leaf(I_EMPTY, node.kind)
        if op == sx.EMPTY:
            return self.leaf(I_NOP)
        if op == sx.NO_MATCH:
            return _NO_MATCH
        frags: list[_Frag] = []
        for s in node.subs:
            frags.append((yield self._walk(s)))
        if op == sx.CONCAT:
            f = frags[0]
            for g in frags[1:]:
                f = self.cat(f, g)
            return f
        if op == sx.ALTERNATE:
            f = frags[0]
            for g in frags[1:]:
                f = self.alt(f, g)
            return f
        if op == sx.CAPTURE:
            return self.capture(frags[0], node.index)
        if op == sx.REPEAT:
            kind = (node.min, node.max)
            build = self.star if kind == _STAR else self.plus if kind == _PLUS else self.quest
            return build(frags[0], node.greedy)
        raise AssertionError(op)

    def compile(self, tree: sx.Node, anchor_start: bool) -> tuple[int, int]:
        """Compiler::Compile: (start, start_unanchored); 0 when nothing can match."""
        f = self.cat(self.walk(tree), _Frag(self.alloc(I_MATCH), [], False))
        start = f.begin
        if anchor_start:
            return start, start
        any_byte = self.leaf(I_CHAR, sx.Node(sx.ANY_BYTE))
        return start, self.cat(self.star(any_byte, greedy=False), f).begin

    def optimize(self, start: int) -> None:
        """Prog::Optimize, first half: route every edge past Nop instructions."""
        if not start:
            return
        queue, seen = [start], {start}
        for pc in queue:
            for outs in ((self.out, self.out1) if self.op[pc] == I_ALT else (self.out,)):
                j = outs[pc]
                while j and self.op[j] == I_NOP:
                    j = self.out[j]
                outs[pc] = j
                if j and j not in seen:
                    seen.add(j)
                    queue.append(j)


# ---- Prog::Flatten ------------------------------------------------------------------------------

def flatten(c: _Re2Compiler, start: int, start_unanchored: int) -> Lists:
    """The lists: [(root, [('leaf', inst) | ('root', other root)])], in RE2's list order."""
    roots: dict[int, int] = {}   # instruction -> list number, in marking order

    def mark(pc: int) -> None:
        roots.setdefault(pc, len(roots))

    mark(0)
    mark(start_unanchored)
    mark(start)
    preds = _mark_successors(c, start_unanchored, mark)
    for root in sorted(roots)[:0:-1]:            # descending, a snapshot, never instruction 0
        bounded.check()
        if root not in (start, start_unanchored):
            _mark_dominator(c, root, roots, preds, mark)
    lists: Lists = []
    for root in roots:
        bounded.check()
        lists.append((root, _emit_list(c, root, roots)))
    return lists


def _closure(c: _Re2Compiler, root: int, roots: dict[int, int], on_leaf: Callable[[str, int], None]) -> list[int]:
    """DFS from root in priority order (out before out1), stopping at leaves and other roots;
    returns the instructions reached, in order."""
    seen: set[int] = set()
    order: list[int] = []
    stack = [root]
    while stack:
        pc = stack.pop()
        while pc not in seen:
            seen.add(pc)
            order.append(pc)
            if pc != root and pc in roots:
                on_leaf("root", pc)
                break
            op = c.op[pc]
            if op == I_ALT:
                stack.append(c.out1[pc])
                pc = c.out[pc]
            elif op == I_NOP:
                pc = c.out[pc]
            else:
                on_leaf("leaf", pc)
                break
    return order


def _mark_successors(c: _Re2Compiler, start_unanchored: int, mark: Callable[[int], None]) -> dict[int, list[int]]:
    """MarkSuccessors: whatever follows a byte, capture or assertion is a root; returns each
    instruction's Alt predecessors."""
    preds: dict[int, list[int]] = {}
    seen: set[int] = set()
    stack = [start_unanchored]
    while stack:
        pc = stack.pop()
        while pc not in seen:
            seen.add(pc)
            op = c.op[pc]
            if op == I_ALT:
                for o in (c.out[pc], c.out1[pc]):
                    preds.setdefault(o, []).append(pc)
                stack.append(c.out1[pc])
                pc = c.out[pc]
            elif op == I_NOP:
                pc = c.out[pc]
            elif op in (I_CHAR, I_CAP, I_EMPTY):
                mark(c.out[pc])
                pc = c.out[pc]
            else:
                break
    return preds


def _mark_dominator(c: _Re2Compiler, root: int, roots: dict[int, int], preds: dict[int, list[int]],
                    mark: Callable[[int], None]) -> None:
    """MarkDominator: an instruction reached from root that also has an Alt predecessor root
    cannot reach is entered from elsewhere too (a loop head): it becomes a root."""
    reached = _closure(c, root, roots, lambda kind, pc: None)
    inside = set(reached)
    for pc in reached:
        if any(p not in inside for p in preds.get(pc, ())):
            mark(pc)


def _emit_list(c: _Re2Compiler, root: int, roots: dict[int, int]) -> list[Item]:
    items: list[Item] = []
    _closure(c, root, roots, lambda kind, pc: items.append((kind, pc)))
    return items


# ---- into a fallback_grep program ---------------------------------------------------------------

def compile_flat(tree: sx.Node, ncap: int, pattern: str | bytes = "") -> Prog:
    """A forward Prog with RE2's flattened priority order (see the module docstring)."""
    shaped = parse_shape(tree)
    split = required_prefix(shaped)
    prefix, shaped = split if split else ([], shaped)
    shaped = simplify(shaped, pattern)
    shaped, anchor_start = strip_anchor(shaped, sx.BOT)
    shaped, anchor_end = strip_anchor(shaped, sx.EOT)
    c = _Re2Compiler(pattern)
    start, start_unanchored = c.compile(shaped, anchor_start)
    c.optimize(start)
    prog = Prog()
    prog.ncap = ncap
    if not start:
        prog.start = prog.emit(FAIL)
        return prog
    return _emit(c, flatten(c, start, start_unanchored), start, prefix,
                 anchor_start or bool(prefix), anchor_end, prog, pattern)


def _emit(c: _Re2Compiler, flat: Lists, start: int, prefix: Sequence[sx.Node], anchor_start: bool, anchor_end: bool,
          prog: Prog, pattern: str | bytes) -> Prog:
    comp = _Compiler(prog, False, pattern)
    end = comp.emit(SAVE, 1, out=comp.emit(MATCH))
    if anchor_end:
        end = _assert(comp, prog, sx.EOT, end)
    lists = _reachable(c, dict(flat), start)
    head = {root: comp.emit(NOP) for root in lists}   # placeholders, skipped below
    leaves: dict[int, int] = {}
    fail: list[int] = []  # one FAIL instruction, made when a leaf first needs it

    def after(pc: int) -> int:
        # What follows may be no reachable list: the leaf leads to instruction 0, RE2's Fail
        # (tests/fallback_grep/test_fg_bounded.py has such patterns), and here to a FAIL of its own.
        if c.out[pc] in head:
            return head[c.out[pc]]
        if not fail:
            fail.append(comp.emit(FAIL))
        return fail[0]

    def leaf(pc: int) -> int:
        if pc not in leaves:
            op = c.op[pc]
            if op == I_CHAR:
                leaves[pc] = comp.c(c.arg[pc], after(pc))
            elif op == I_CAP:
                leaves[pc] = comp.emit(SAVE, c.arg[pc], out=after(pc))
            elif op == I_EMPTY:
                leaves[pc] = _assert(comp, prog, c.arg[pc], after(pc))
            elif op == I_MATCH:
                leaves[pc] = end
            else:
                leaves[pc] = comp.emit(FAIL)
        return leaves[pc]

    for root, items in lists.items():
        pcs = [head[pc] if kind == "root" else leaf(pc) for kind, pc in items]
        entry = pcs[-1]
        for pc in reversed(pcs[:-1]):
            entry = comp.emit(SPLIT, out=pc, out1=entry)
        prog.out[head[root]] = entry
    entry = head[start]
    for node in reversed(prefix):
        entry = comp.c(node, entry)
    if anchor_start:
        entry = _assert(comp, prog, sx.BOT, entry)
    prog.start = comp.emit(SAVE, 0, out=entry)
    _skip_heads(prog, set(head.values()))
    return prog


def _assert(comp: _Compiler, prog: Prog, kind: str, nxt: int) -> int:
    prog.uses_look |= _LOOK_OF[kind]
    return comp.emit(ASSERT, _LOOK_OF[kind], out=nxt)


def _reachable(c: _Re2Compiler, lists: dict[int, list[Item]], start: int) -> dict[int, list[Item]]:
    """The lists the anchored start can reach (RE2 also keeps the unanchored `.*?` list, which
    the matchers here replace by their own loop)."""
    keep: dict[int, list[Item]] = {}
    todo = [start]
    while todo:
        root = todo.pop()
        if root in keep:
            continue
        keep[root] = lists[root]
        for kind, pc in lists[root]:
            if kind == "root":
                todo.append(pc)
            elif c.op[pc] in (I_CHAR, I_CAP, I_EMPTY):
                todo.append(c.out[pc])
    return {root: keep[root] for root in lists if root in keep}


def _skip_heads(prog: Prog, heads: set[int]) -> None:
    """Route every edge past the placeholder Nops. A list that is only a Nop to another list
    chains them; should such lists form a cycle, its Nops stay (the matchers step through Nops)."""
    def target(pc: int) -> int:
        seen: set[int] = set()
        while pc in heads and pc not in seen:
            seen.add(pc)
            pc = prog.out[pc]  # pragma: no mutate (speed only: a head left in place is a Nop the matchers step through)
        return pc

    for pc, op in enumerate(prog.op):
        if pc not in heads:  # pragma: no mutate (speed only: the matchers step through the Nops)
            prog.out[pc] = target(prog.out[pc])
            if op == SPLIT:  # pragma: no mutate (out1 of the other instructions is -1, never a head)
                prog.out1[pc] = target(prog.out1[pc])  # pragma: no mutate (speed only, as above)
    prog.start = target(prog.start)


def compile_forward(tree: sx.Node, ncap: int, pattern: str | bytes = "") -> Prog:
    """The forward program for tree: RE2's flattened program when a loop can iterate on empty
    (where the order of empty-width steps decides the match), else the plain compiler's (where
    any order gives the same answer). A reverse program is only run for the longest match, where
    priority plays no part: it always comes from prog.compile_tree."""
    if has_empty_loop(tree):
        return compile_flat(tree, ncap, pattern)
    return compile_tree(tree, ncap, pattern=pattern)
