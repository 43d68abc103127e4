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
"""
from . import syntax as sx
from .parser import FLAG_I, FLAG_M, FLAG_S, FLAG_U, parse

_ASSERT = {sx.BOL: "(?m:^)", sx.EOL: "(?m:$)", sx.BOT: r"\A", sx.EOT: r"\z",
           sx.WORD: r"(?-u:\b)", sx.NOT_WORD: r"(?-u:\B)"}


def rust_pattern(pattern, case_insensitive=False, multiline=False):
    """Translate an RE2 pattern (str) for `rg`. Raises fallback_grep.error like compile().

    case_insensitive / multiline: the grep tool's options; multiline makes `.` match newline
    (run rg with -U but without --multiline-dotall).  ^ and $ always match at line boundaries,
    as rg's own line handling requires.
    """
    flags = FLAG_M
    if case_insensitive:
        flags |= FLAG_I
    if multiline:
        flags |= FLAG_S
    parsed = parse(pattern, flags & (FLAG_I | FLAG_M | FLAG_S | FLAG_U))
    return _emit(parsed.tree)


def _emit(node):
    op = node.op
    if op in (sx.LITERAL, sx.CLASS):
        return _class(sx.node_ranges(node))
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
        return f"({_emit(node.subs[0])})"
    if op == sx.CONCAT:
        return "".join(_emit(s) for s in node.subs)
    if op == sx.ALTERNATE:
        return "(?:" + "|".join(_emit(s) for s in node.subs) + ")"
    if op == sx.REPEAT:
        sub = f"(?:{_emit(node.subs[0])})"
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
        return sub + q + ("" if node.greedy else "?")
    raise AssertionError(op)


def _char(cp):
    if cp < 128 and chr(cp).isalnum():
        return chr(cp)
    return f"\\x{{{cp:X}}}"


def _class(ranges):
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
