"""Glob patterns as the glob tool reads them: `**`, `*`, `?`, `[...]`, `{a,b}`, relative to a root.

`*` and `?` never cross `/`; `**` as a whole component crosses any number of directories; dotfiles
are matched like any other name (models look for `.github/**/*.yml`). Patterns compile to one
Python regex, which is safe here: the subjects are file paths, short and bounded, and the number
of wildcards a pattern may hold is capped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import methodcaller

from abhed.common.errors import ToolError

MAX_ALTERNATIVES = 256
MAX_WILDCARDS = 32


class GlobError(ToolError):
    """The pattern is not a glob this tool can use; the message says how to write it."""


def expand_braces(pattern: str) -> list[str]:
    """`src/{a,b}/*.{ts,tsx}` -> four patterns. Nested braces work; `\\{` is a literal brace."""
    depth, start = 0, -1
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            if depth == 0:
                start = i
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                head, tail = pattern[:start], pattern[i + 1 :]
                out = []
                for option in _split_top(pattern[start + 1 : i]):
                    out.extend(expand_braces(head + option + tail))
                    if len(out) > MAX_ALTERNATIVES:
                        raise GlobError(f"The braces in {pattern!r} expand to over {MAX_ALTERNATIVES} patterns. "
                                        "Use fewer alternatives, or several glob calls.")
                return out
        i += 1
    if depth:
        raise GlobError(f"Unbalanced '{{' at position {start} in {pattern!r}: close it with '}}', or write \\{{ "
                        "for a literal brace.")
    return [pattern]


def _split_top(body: str) -> list[str]:
    parts, depth, current, i = [], 0, "", 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            current += body[i : i + 2]
            i += 2
            continue
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            depth += (char == "{") - (char == "}")
            current += char
        i += 1
    return [*parts, current]


def _class(pattern: str, i: int) -> tuple[str, int]:
    """Translate the `[...]` starting at i; return the regex class and the index after it."""
    j = i + 1
    if j < len(pattern) and pattern[j] in "!^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    if j >= len(pattern):
        raise GlobError(f"Unclosed '[' at position {i} in {pattern!r}: close the character class with ']', or "
                        "write [[] for a literal bracket.")
    body = pattern[i + 1 : j]
    negate = body[:1] in ("!", "^")
    body = body[1:] if negate else body
    escaped = body.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
    return ("[^/" if negate else "[") + escaped + "]", j + 1


def translate(pattern: str) -> str:
    """One brace-free glob -> a regex over paths relative to the root (no anchors)."""
    out, i, wildcards = [], 0, 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i) and (i == 0 or pattern[i - 1] == "/") and (
                i + 2 == len(pattern) or pattern[i + 2] == "/"):
            last = i + 2 == len(pattern)
            out.append(".*" if last else "(?:.*/)?")
            i += 2 if last else 3
            wildcards += 1
        elif char == "*":
            out.append("[^/]*")
            i += 1
            while i < len(pattern) and pattern[i] == "*":
                i += 1  # `a**b` inside a component is just `*`
            wildcards += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            cls, i = _class(pattern, i)
            out.append(cls)
        elif char == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(char))
            i += 1
    if wildcards > MAX_WILDCARDS:
        raise GlobError(f"{pattern!r} has {wildcards} wildcards; at most {MAX_WILDCARDS} are allowed. Simplify it.")
    return "".join(out)


def literal_prefix(pattern: str) -> str:
    """The directories a pattern is fixed to before its first wildcard, e.g. "src/app/" for src/app/**/*.ts."""
    cut = min((pattern.find(c) for c in "*?[{\\" if c in pattern), default=len(pattern))
    head = pattern[:cut]
    return head[: head.rfind("/") + 1]


def compile_glob(pattern: str, root: str) -> tuple[re.Pattern[str], list[str]]:
    """The regex matching paths relative to `root`, and the brace-expanded patterns it stands for."""
    if not pattern.strip():
        raise GlobError('The pattern is empty. Give a glob such as "**/*.py" or "src/**/*.test.js".')
    if pattern.startswith("/"):
        if pattern.startswith(root.rstrip("/") + "/"):
            pattern = pattern[len(root.rstrip("/")) + 1 :]
        else:
            raise GlobError(f"The pattern {pattern!r} is an absolute path outside the search path {root}. Patterns "
                            f"are relative to path: set path to the directory and pattern to the rest.")
    if pattern.startswith("./"):
        pattern = pattern[2:]
    if ".." in pattern.split("/"):
        raise GlobError(f"The pattern {pattern!r} contains '..'. Patterns match below path; to search elsewhere, "
                        "set path to that directory.")
    expanded = expand_braces(pattern)
    regex = "|".join(f"(?:{translate(p)})" for p in expanded)
    # DOTALL: `**` crosses a directory whose name holds a newline like any other, or a hostile
    # repository could hide files from glob and from approval rules' paths.
    try:
        return re.compile(regex, re.DOTALL), expanded
    except re.error as exc:  # a class whose range runs backwards ([z-a], [,-*]) is the one way left
        raise GlobError(f"{pattern!r} is not a usable glob: {exc.msg}. A range in [...] must run upwards "
                        "([a-z], not [z-a]); to match '-' itself, put it first or last: [-az] or [az-].") from None


WILDCARDS = frozenset("*?[\\")


def path_test(regex: re.Pattern[str], expanded: list[str]) -> Callable[[str], object]:
    """A test of a relative file path equal to `regex.fullmatch` (what compile_glob returned for
    `expanded`), cheaper for the commonest globs.

    `**/*SUFFIX` (**/*.py, **/*.{ts,tsx}, **/*) holds exactly for the paths whose name ends with
    SUFFIX: one str.endswith instead of a regex run per file (over the Linux tree's 78k files
    8 ms instead of 33, of the glob tool's ~500).
    """
    suffixes = []
    for pattern in expanded:
        tail = pattern[4:]
        if not pattern.startswith("**/*") or "/" in tail or WILDCARDS.intersection(tail):
            return regex.fullmatch
        suffixes.append(tail)
    return methodcaller("endswith", tuple(suffixes))  # (no Python frame per file: the walk maps it in C)
