"""fallback_grep: a pure-Python, linear-time RE2 engine and file search.

Public API (shaped like `re`): compile(), search(), match(), fullmatch(), finditer(), findall(),
the flags I/M/S/U/LONGEST, Pattern, Match and `error`.  File search lives in
fallback_grep.search.  Imports nothing outside the standard library.
"""
from .errors import error
from .regex import (DOTALL, I, IGNORECASE, LONGEST, M, MULTILINE, DOTALL as S, U, UNGREEDY,
                    Match, Pattern)

__all__ = ["compile", "search", "match", "fullmatch", "finditer", "findall", "error", "Pattern",
           "Match", "I", "IGNORECASE", "M", "MULTILINE", "S", "DOTALL", "U", "UNGREEDY", "LONGEST"]

_CACHE_MAX = 64
_cache = {}


def compile(pattern, flags=0):  # noqa: A001 - mirrors re.compile
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


def search(pattern, string, flags=0):
    return compile(pattern, flags).search(string)


def match(pattern, string, flags=0):
    return compile(pattern, flags).match(string)


def fullmatch(pattern, string, flags=0):
    return compile(pattern, flags).fullmatch(string)


def finditer(pattern, string, flags=0):
    return compile(pattern, flags).finditer(string)


def findall(pattern, string, flags=0):
    return compile(pattern, flags).findall(string)
