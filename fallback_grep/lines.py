"""Grep line mode: rewrite a tree so that searching a whole buffer behaves like ripgrep's
line-by-line search (without --multiline).

ripgrep matches each line on its own: a match never contains the line terminator, and every
anchor (^ $ \\A \\z) holds at line boundaries.  Searching the whole buffer with the rewritten tree
gives the same set of matching lines, and lets prefilters and the DFA run over the buffer once:
  * \\n is removed from every class ([^a], \\s, (?s:.), \\C ...), so no match can cross a line end;
  * ^ and \\A become BOL, $ and \\z become EOL;
  * a pattern that can only match by consuming \\n (a literal \\n) is rejected, as ripgrep does.
"""
from . import charclass as cc
from . import syntax as sx
from .errors import invalid

_NL = [(10, 10)]


def to_line_mode(tree, pattern):
    return _rewrite(tree, pattern)


def _rewrite(node, pattern):
    op = node.op
    if op == sx.LITERAL and node.rune == 10 or op == sx.CLASS and list(node.ranges) == _NL:
        raise invalid(
            "newline in pattern", "the pattern contains a literal newline (`\\n`), but the "
            "search is line by line, so it can never match", pattern, _find_newline(pattern),
            "set multiline=true (--multiline) to match across lines, or use `$` / `^` to anchor "
            "at a line end or start")
    if op == sx.CLASS:
        ranges = cc.subtract(node.ranges, _NL)
        return sx.char_class(ranges)
    if op == sx.ANY_BYTE:
        # \C: any byte but the line terminator (its .ranges are byte ranges).
        return sx.Node(sx.ANY_BYTE, ranges=((0, 9), (11, 255)))
    if op == sx.ASSERT:
        kind = {sx.BOT: sx.BOL, sx.EOT: sx.EOL}.get(node.kind, node.kind)
        return sx.Node(sx.ASSERT, kind=kind)
    if node.subs:
        return node.replace(subs=[_rewrite(s, pattern) for s in node.subs])
    return node


def _find_newline(pattern):
    text = pattern.decode("utf-8", "replace") if isinstance(pattern, bytes) else pattern
    for needle in ("\\n", "\\x0a", "\\x0A", "\\x{a}", "\\x{A}", "\\x{0a}", "\\012", "\n"):
        i = text.find(needle)
        if i >= 0:
            return i
    return None
