"""Grep line mode: rewrite a tree so that searching a whole buffer behaves like ripgrep's
line-by-line search (without --multiline).

ripgrep matches each line on its own: a match never contains the line terminator, and every
anchor (^ $ \\A \\z) holds at line boundaries.  Searching the whole buffer with the rewritten tree
gives the same set of matching lines, and lets prefilters and the DFA run over the buffer once:
  * \\n is removed from every class ([^a], \\s, (?s:.), \\C ...), so no match can cross a line end;
  * ^ and \\A become BOL, $ and \\z become EOL;
  * a pattern that can only match by consuming \\n (a literal \\n) is rejected, as ripgrep does.
"""
from __future__ import annotations

from . import bounded
from . import charclass as cc
from . import syntax as sx
from .errors import error, invalid

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from .bounded import Walk

_NL = [(10, 10)]


def to_line_mode(tree: sx.Node, pattern: str | bytes) -> sx.Node:
    # memo: a class node shared by many places of the tree (the parser builds a class written
    # again only once) is rewritten once, and stays shared.
    return bounded.run(_rewrite(tree, pattern, {}))


def _rewrite(node: sx.Node, pattern: str | bytes, memo: dict[int, tuple[sx.Node, sx.Node]]) -> Walk[sx.Node]:
    op = node.op
    if op == sx.LITERAL and node.rune == 10:
        raise _newline(pattern)
    if op == sx.CLASS:
        hit = memo.get(id(node))
        if hit is None or hit[0] is not node:
            if list(node.ranges) == _NL:
                raise _newline(pattern)
            hit = memo[id(node)] = (node, sx.char_class(cc.subtract(node.ranges, _NL)))
        return hit[1]
    if op == sx.ANY_BYTE:
        # \C: any byte but the line terminator (its .ranges are byte ranges).
        return sx.Node(sx.ANY_BYTE, ranges=((0, 9), (11, 255)))
    if op == sx.ASSERT:
        kind = {sx.BOT: sx.BOL, sx.EOT: sx.EOL}.get(node.kind, node.kind)
        return sx.Node(sx.ASSERT, kind=kind)
    if node.subs:
        subs: list[sx.Node] = []
        for sub in node.subs:
            subs.append((yield _rewrite(sub, pattern, memo)))
        return node.replace(subs=subs)
    return node


def _newline(pattern: str | bytes) -> error:
    return invalid(
        "newline in pattern", "the pattern contains a literal newline (`\\n`), but the "
        "search is line by line, so it can never match", pattern, _find_newline(pattern),
        "set multiline=true (--multiline) to match across lines, or use `$` / `^` to anchor "
        "at a line end or start")


def _find_newline(pattern: str | bytes) -> int | None:
    text = pattern.decode("utf-8", "replace") if isinstance(pattern, bytes) else pattern
    for needle in ("\\n", "\\x0a", "\\x0A", "\\x{a}", "\\x{A}", "\\x{0a}", "\\012", "\n"):
        i = text.find(needle)
        if i >= 0:
            return i
    return None
