"""RE2 pattern -> an equivalent pattern for ripgrep's Rust regex engine.

The grep tool validates every pattern with our parser and may then run `rg`.  Rust's regex and
RE2 disagree on details (Rust's \\w \\d \\s \\b are Unicode-aware, it rejects \\Q..\\E and (?<n>)
in older versions, its Unicode tables may be another version, its case folding is applied by
rg's -i).  Emitting the pattern from our own syntax tree removes every such difference: case
folding is already expanded into classes, each class is written as explicit code point ranges
from our tables, and each assertion in its ASCII form.  The result is meant for rg *without* -i
and without --multiline-dotall (dot-all is already expanded); rg still applies its own line
semantics, which equal ours (lines.py).

    rust_pattern(r"(?i)\\w+\\b")  ->  '(?:[\\x{30}-\\x{39}...])+(?-u:\\b)'

The translation is written piece by piece from an explicit stack (a pattern nests up to 1000
groups deep, past Python's recursion limit; returning strings up the tree also copied the inner
text once per level), each class's text once per class node, and it stops at `limit` bytes: a
class expands to explicit ranges (`\\pL` is 10 KB of them), so 64 KiB of pattern could become
hundreds of MB.
"""
from __future__ import annotations

from . import bounded
from . import syntax as sx
from .parser import FLAG_I, FLAG_M, FLAG_S, FLAG_U, parse

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .syntax import Node

_ASSERT = {sx.BOL: "(?m:^)", sx.EOL: "(?m:$)", sx.BOT: r"\A", sx.EOT: r"\z",
           sx.WORD: r"(?-u:\b)", sx.NOT_WORD: r"(?-u:\B)"}


def rust_pattern(pattern: str, case_insensitive: bool = False, multiline: bool = False,
                 limit: int | None = None) -> str | None:
    """Translate an RE2 pattern (str) for `rg`. Raises fallback_grep.error like compile().

    case_insensitive / multiline: the grep tool's options; multiline makes `.` match newline
    (run rg with -U but without --multiline-dotall).  ^ and $ always match at line boundaries,
    as rg's own line handling requires.  limit: the longest translation wanted, in bytes (it is ASCII);
    None is returned past it.
    """
    flags = FLAG_M
    if case_insensitive:
        flags |= FLAG_I
    if multiline:
        flags |= FLAG_S
    parsed = parse(pattern, flags & (FLAG_I | FLAG_M | FLAG_S | FLAG_U))
    return rust_tree(parsed.tree, limit)


def rust_tree(tree: Node, limit: int | None = None) -> str | None:
    """The Rust text of a tree parsed as rust_pattern() parses (filesearch.check() returns one),
    or None once it would be longer than limit bytes."""
    out: list[str] = []
    size = 0
    classes: dict[int, tuple[Node, str]] = {}  # id(node) -> (node, its text)
    stack: list[Node | str] = [tree]            # nodes to write, and text to write between them
    while stack:
        if len(out) % bounded.CHECK_EVERY == 0:
            bounded.check()
        node = stack.pop()
        if isinstance(node, str):
            text = node
        else:
            text = _open(node, stack, classes)
        out.append(text)
        size += len(text)
        if limit is not None and size > limit:
            return None
    return "".join(out)


def _open(node: Node, stack: list[Node | str], classes: dict[int, tuple[Node, str]]) -> str:
    """The text that starts node; what follows it (its children, the text after them) is pushed."""
    op = node.op
    if op in (sx.LITERAL, sx.CLASS):
        if op == sx.LITERAL:
            return _class(((node.rune, node.rune),))
        hit = classes.get(id(node))      # the parser shares a class node written again
        if hit is None or hit[0] is not node:
            hit = classes[id(node)] = (node, _class(node.ranges))
        return hit[1]
    if op == sx.EMPTY:
        return "(?:)"
    if op == sx.NO_MATCH:
        return r"[^\x00-\x{10FFFF}]"
    if op == sx.ANY_BYTE:
        return r"(?-u:[\x00-\xFF])"
    if op == sx.ASSERT:
        return _ASSERT[node.kind]
    if op == sx.CAPTURE:
        # Names do not change what matches, and RE2 accepts duplicate names that Rust rejects.
        stack += [")", node.subs[0]]
        return "("
    if op == sx.CONCAT:
        stack.extend(reversed(node.subs))
        return ""
    if op == sx.ALTERNATE:
        stack.append(")")
        for k in range(len(node.subs) - 1, -1, -1):
            stack.append(node.subs[k])
            if k:
                stack.append("|")
        return "(?:"
    if op == sx.REPEAT:
        stack += [")" + _quantifier(node), node.subs[0]]
        return "(?:"
    raise AssertionError(op)


def _quantifier(node: Node) -> str:
    lo, hi = node.min, node.max
    if (lo, hi) == (0, -1):
        q = "*"
    elif (lo, hi) == (1, -1):
        q = "+"
    elif (lo, hi) == (0, 1):
        q = "?"
    elif hi == -1:
        q = f"{{{lo},}}"
    elif lo == hi:
        q = f"{{{lo}}}"
    else:
        q = f"{{{lo},{hi}}}"
    return q + ("" if node.greedy else "?")


def _char(cp: int) -> str:
    if cp < 128 and chr(cp).isalnum():
        return chr(cp)
    return f"\\x{{{cp:X}}}"


def _class(ranges: Sequence[tuple[int, int]]) -> str:
    """Explicit ranges; surrogates are cut out (Rust rejects them, and UTF-8 cannot hold them)."""
    parts = []
    for lo, hi in ranges:
        for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)):
            if a > b:
                continue
            parts.append(_char(a) if a == b else f"{_char(a)}-{_char(b)}")
    if not parts:
        return r"[^\x00-\x{10FFFF}]"
    if len(parts) == 1 and "-" not in parts[0]:
        return parts[0]
    return "[" + "".join(parts) + "]"
