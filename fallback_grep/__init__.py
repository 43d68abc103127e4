"""fallback_grep: a pure-Python, linear-time RE2 engine and file search.

Regex API (shaped like `re`, RE2 semantics):
    compile(pattern, flags=0) -> Pattern      pattern: str, or bytes holding UTF-8
    Pattern.search / match / fullmatch(string, pos=0, endpos=None) -> Match | None
    Pattern.finditer(...) -> iterator of Match;  Pattern.findall(...) -> list
    Pattern.groups, Pattern.groupindex, Pattern.pattern
    Match.span/start/end(g=0), group(*gs), groups(default=None), groupdict(), m[g]
    module-level search/match/fullmatch/finditer/findall(pattern, string, flags=0), escape(text)
    flags: I/IGNORECASE, M/MULTILINE, S/DOTALL, U/UNGREEDY, LONGEST (leftmost-longest)
    error: ValueError subclass with .pattern, .pos (0-based), .construct, .hint and a message
           that says what is wrong, where, and what to write instead.

File search for a grep tool: fallback_grep.filesearch (Matcher, search_paths, search_file,
search_bytes, walk, FileResult, Line); the same pattern for rg: fallback_grep.translate.rust_pattern.
Command line: python -m fallback_grep --help.

Pipeline (after Go's regexp/syntax + regexp): parser.py -> syntax.py tree -> prog.py byte
program -> dfa.py (lazy DFA) / pikevm.py (captures), with prefilter.py in front and lines.py
for grep's line semantics.  Standard library only; nothing from abhed.
"""
from __future__ import annotations

from .errors import error
from .regex import (DOTALL, I, IGNORECASE, LONGEST, M, MULTILINE, DOTALL as S, U, UNGREEDY,
                    Match, Pattern)

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, TypeVar

    from .regex import Subject

    Text = TypeVar("Text", str, bytes)

__all__ = ["compile", "escape", "search", "match", "fullmatch", "finditer", "findall", "error", "Pattern",
           "Match", "I", "IGNORECASE", "M", "MULTILINE", "S", "DOTALL", "U", "UNGREEDY", "LONGEST"]

_CACHE_MAX = 64
_cache: dict[tuple[type, str | bytes, int], Pattern] = {}


def compile(pattern: str | bytes | Pattern, flags: int = 0) -> Pattern:  # noqa: A001 - mirrors re.compile
    """Compile an RE2 pattern (str or UTF-8 bytes). Raises fallback_grep.error if RE2 rejects it."""
    if isinstance(pattern, Pattern):
        return pattern
    key = (type(pattern), pattern, flags)
    p = _cache.get(key)
    if p is None:
        p = Pattern(pattern, flags)
        if len(_cache) >= _CACHE_MAX:  # bounded: drop the oldest entry
            _cache.pop(next(iter(_cache)))
        _cache[key] = p
    return p


def escape(text: Text) -> Text:
    """Quote text so that it matches itself as an RE2 pattern (RE2's QuoteMeta).

    ASCII letters, digits and `_` stay; other ASCII bytes get a backslash; NUL becomes \\x00;
    non-ASCII characters stay as they are (RE2 matches them literally).
    """
    if isinstance(text, bytes):
        return escape(text.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    out = []
    for ch in text:
        if ch == "\x00":
            out.append("\\x00")
        elif ch.isascii() and not (ch.isalnum() or ch == "_"):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def search(pattern: str | bytes | Pattern, string: Subject, flags: int = 0) -> Match | None:
    return compile(pattern, flags).search(string)


def match(pattern: str | bytes | Pattern, string: Subject, flags: int = 0) -> Match | None:
    return compile(pattern, flags).match(string)


def fullmatch(pattern: str | bytes | Pattern, string: Subject, flags: int = 0) -> Match | None:
    return compile(pattern, flags).fullmatch(string)


def finditer(pattern: str | bytes | Pattern, string: Subject, flags: int = 0) -> Iterator[Match]:
    return compile(pattern, flags).finditer(string)


def findall(pattern: str | bytes | Pattern, string: Subject, flags: int = 0) -> list[Any]:
    return compile(pattern, flags).findall(string)
