"""The two grep backends behind one interface: ripgrep, and the pure-Python fallback_grep.

The grep tool chooses the files (filewalk) and formats the answer; a backend only searches the
files it is given and reports, per file, what matched. Both backends see the pattern as our RE2
parser resolved it, skip the same binary files (a NUL byte in the first 64 KiB, ripgrep's window) and count lines
the same way, so the tool's output does not depend on which one ran (tests/test_grep_parity.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from fallback_grep.filesearch import BINARY_SNIFF, Matcher, is_binary, read_file, search_bytes

OUTPUT_MODES = ("content", "files_with_matches", "count")


@dataclass(frozen=True)
class Query:
    pattern: str
    mode: str = "files_with_matches"
    case_insensitive: bool = False
    multiline: bool = False
    context: int = 0
    per_file: int | None = None  # content mode: matching lines wanted per file (None: all)

    def matcher(self) -> Matcher:
        """Our RE2 parser's reading of the pattern; raises fallback_grep.error if RE2 rejects it."""
        return Matcher(self.pattern, case_insensitive=self.case_insensitive, multiline=self.multiline)


@dataclass
class FileHits:
    """What one file contributed. Only files with a match (or a problem) are reported."""

    path: str
    count: int = 0  # matching lines (multiline mode: matches)
    lines: list[tuple[int, str, bool]] = field(default_factory=list)  # content: (number, text, is_match)
    binary: bool = False  # a binary file that matched: skipped, reported only as a count
    error: str | None = None  # unreadable: why


def python_search(files: list[str], query: Query) -> Iterator[FileHits]:
    matcher = query.matcher()
    for path in files:
        try:
            data = read_file(path)
        except OSError as exc:
            yield FileHits(path, error=exc.strerror or str(exc))
            continue
        if is_binary(data):
            if search_bytes(matcher, data, "files_with_matches").matched:
                yield FileHits(path, binary=True)  # reported as a count, never as lines
            continue
        found = search_bytes(matcher, data, query.mode, query.context, query.context, query.per_file)
        if found.matched:
            yield FileHits(path, found.count, [(ln.number, ln.text, ln.is_match) for ln in found.lines])


def head_is_binary(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return is_binary(handle.read(BINARY_SNIFF))
    except OSError:
        return False
