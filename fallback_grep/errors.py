"""The one exception type, and the messages that teach.

Every message is read by an AI model driving a grep tool, so each says what failed, where (0-based
offset plus the pattern with a caret under it), why, and what to do instead.
"""
from __future__ import annotations


class error(ValueError):  # noqa: N801 - named like re.error on purpose
    """A pattern RE2 rejects (unsupported construct or invalid syntax).

    Attributes: pattern (the pattern as given), pos (0-based offset into it, or None),
    construct (short name of the offending construct, e.g. "lookahead"), hint (the fix).
    """

    def __init__(self, what: str, pattern: str | bytes, pos: int | None, construct: str, hint: str) -> None:
        self.what = what
        self.pattern = pattern
        self.pos = pos
        self.construct = construct
        self.hint = hint
        super().__init__(format_message(what, pattern, pos, hint))


def _text(pattern: str | bytes) -> str:
    if isinstance(pattern, bytes):
        return pattern.decode("utf-8", "backslashreplace")
    return pattern


def format_message(what: str, pattern: str | bytes, pos: int | None, hint: str) -> str:
    text = _text(pattern)
    lines = [f"invalid RE2 pattern: {what}"]
    if pos is not None and "\n" not in text and len(text) <= 200:
        lines.append(f"  at offset {pos}:")
        lines.append(f"    {text}")
        lines.append("    " + " " * len(text[:pos]) + "^")
    elif pos is not None:
        lo = max(0, pos - 20)
        lines.append(f"  at offset {pos}, near {text[lo:pos + 20]!r}")
    if hint:
        lines.append(f"  fix: {hint}")
    return "\n".join(lines)


# Hints for constructs RE2 marks NOT SUPPORTED. Phrased for a model calling a grep tool.
UNSUPPORTED = {
    "lookahead": (
        "RE2 has no lookahead (?=...) / (?!...): it guarantees linear time and cannot look "
        "ahead without consuming",
        "match the text you were looking ahead for as part of the pattern (e.g. `foo(?=bar)` -> "
        "`foobar`) and read the lines with output_mode content; for a negative lookahead grep "
        "for the positive pattern, then grep again for the exclusion and compare",
    ),
    "lookbehind": (
        "RE2 has no lookbehind (?<=...) / (?<!...)",
        "include the preceding text in the match (e.g. `(?<=def )name` -> `def name`) and use "
        "output_mode content; for a negative lookbehind grep twice and compare the results",
    ),
    "backreference": (
        "RE2 has no backreferences (\\1, \\k<name>, (?P=name), \\g1): they need backtracking",
        "spell out the repeated text literally (e.g. `(foo) \\1` -> `foo foo`), or grep for "
        "candidates with a looser pattern such as `(\\w+) \\w+` and check the lines with "
        "output_mode content",
    ),
    "possessive quantifier": (
        "RE2 has no possessive quantifiers (*+, ++, ?+, {n,m}+); RE2 never backtracks, so the "
        "ordinary quantifier already runs in linear time",
        "drop the trailing `+` (e.g. `a*+` -> `a*`)",
    ),
    "atomic group": (
        "RE2 has no atomic groups (?>...); RE2 never backtracks, so a plain group is enough",
        "use a non-capturing group instead: `(?>re)` -> `(?:re)`",
    ),
    "conditional": (
        "RE2 has no conditionals (?(cond)yes|no)",
        "write the alternatives out as an alternation `(?:yes1|yes2)`, or grep once per case",
    ),
    "recursion": (
        "RE2 has no recursion or subroutine calls ((?R), (?1), (?&name), (?P>name), \\g<name>)",
        "regular expressions cannot match nested structure; grep for the opening token and "
        "read the surrounding lines with output_mode content and context",
    ),
    "comment group": (
        "RE2 has no comment groups (?#...)",
        "delete the comment from the pattern",
    ),
    "backtracking verb": (
        "RE2 has no PCRE backtracking/newline verbs such as (*FAIL), (*SKIP), (*CRLF)",
        "delete the verb; RE2 always treats \\n as the only line terminator",
    ),
    "callout": ("RE2 has no PCRE callouts (?C)", "delete the callout"),
    "embedded code": ("RE2 cannot run embedded code (?{...})", "delete the code block"),
    "branch reset": (
        "RE2 has no branch reset groups (?|...)",
        "use a non-capturing group `(?:...)` and number the captures as they appear",
    ),
    "quoted group name": (
        "RE2 does not accept (?'name'...) for named groups",
        "write `(?P<name>...)` or `(?<name>...)`",
    ),
    "\\Z": (
        "RE2 does not support \\Z (end of text or before a final newline)",
        "use `$` (end of line in a grep tool, which searches line by line) or `\\z` for the "
        "very end of the text",
    ),
    "\\G": ("RE2 does not support \\G (end of previous match)", "anchor with `^` instead"),
    "\\K": (
        "RE2 does not support \\K (reset start of match)",
        "match the whole text (`foo\\Kbar` -> `foobar`) and read the lines with output_mode "
        "content, or use a capture group `foo(bar)`",
    ),
    "\\R": (
        "RE2 does not support \\R (any line break)",
        "use `\\r?\\n` with multiline, or `$` to anchor at a line end",
    ),
    "\\X": (
        "RE2 does not support \\X (extended grapheme cluster)",
        "use `\\PM\\pM*` (a non-mark followed by marks) or `.`",
    ),
    "\\h": ("RE2 does not support \\h (horizontal space)", "use `[\\t ]` or `[[:blank:]]`"),
    "\\H": ("RE2 does not support \\H (not horizontal space)", "use `[^\\t ]`"),
    "\\V": ("RE2 does not support \\V (not vertical space)", "use `[^\\n\\v\\f\\r]`"),
    "\\N": (
        "RE2 does not support \\N{name} (named Unicode character)",
        "write the character itself or `\\x{HHHH}` with its code point",
    ),
    "\\c": ("RE2 does not support \\cX (control character)", "use an octal or hex escape like `\\x0B`"),
    "\\e": ("RE2 does not support \\e (escape character)", "use `\\x1B` or `\\033`"),
    "\\b in class": (
        "RE2 does not support \\b (backspace) inside a character class",
        "use `\\x08` or `\\010` for a backspace",
    ),
    "case conversion": (
        "RE2 does not support \\l, \\u, \\L, \\U (case conversion)",
        "use (?i) for case-insensitive matching or write the case you want",
    ),
    "vim": ("this is vim regex syntax, not RE2", "rewrite the pattern in RE2 (Perl-like) syntax"),
}


def unsupported(construct: str, pattern: str | bytes, pos: int | None, shown: str | None = None) -> error:
    why, hint = UNSUPPORTED[construct]
    if shown and shown != construct:
        what = f"{construct} `{shown}` is not supported: {why}"
    else:
        what = f"`{construct}` is not supported: {why}"
    return error(what, pattern, pos, construct, hint)


def invalid(construct: str, what: str, pattern: str | bytes, pos: int | None, hint: str) -> error:
    return error(what, pattern, pos, construct, hint)
