"""The two grep backends behind one interface: ripgrep, and the pure-Python fallback_grep.

The grep tool chooses the files (filewalk) and formats the answer; a backend only searches the
files it is given and reports, per file, what matched. Both backends see the pattern as our RE2
parser resolved it, skip the same binary files (a NUL byte in the first 64 KiB, ripgrep's window) and count lines
the same way, so the tool's output does not depend on which one ran (tests/test_grep_parity.py).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from fallback_grep import bounded
from fallback_grep.filesearch import BINARY_SNIFF, FileReader, Matcher, check, is_binary, search_bytes
from fallback_grep.parallel import default_workers, fork_map
from fallback_grep.syntax import Node

from abhed.files import beneath

OUTPUT_MODES = ("content", "files_with_matches", "count")
Opener = Callable[[str], int]  # path -> a read descriptor of that regular file (raises OSError)
BATCHES_PER_WORKER = 8
# fallback_grep forks workers from this many bytes to search. Forking two workers and collecting
# their results costs ~12 ms of CPU (measured in a process with the tools loaded, at load 7) and
# one process searches ~1.6 ms/MB: below ~16 MB the second core saves less than the forks cost.
# benchmarks/grep_tool_bench.py --only-threshold shows the crossing on a quiet machine.
PARALLEL_MIN_BYTES = 16 << 20
# The most one grep call spends preparing its pattern (parse, translation for rg, and for
# fallback_grep its program and prefilter): each of those is linear in the pattern's length and
# takes well under a second for the longest pattern grep takes (grep.MAX_PATTERN_BYTES,
# benchmarks/pattern_prep_bench.py); past this the call fails with fallback_grep's "too complex"
# error, which says how to simplify. grep runs unasked in every mode: a pattern must not be able to
# hold Abhed's process for long.
PREPARE_SECONDS = 5.0


def search_workers(files: int, size: int) -> int:
    """How many processes fallback_grep should search `files` files of `size` bytes in all with:
    1 below PARALLEL_MIN_BYTES, else one per half of it (each worker's share repays its fork), at
    most one per core and one per file."""
    if files < 2 or size < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(default_workers(), files, size // max(1, PARALLEL_MIN_BYTES // 2)))


@dataclass(frozen=True)
class Query:
    pattern: str
    mode: str = "files_with_matches"
    case_insensitive: bool = False
    multiline: bool = False
    context: int = 0
    per_file: int | None = None  # content mode: matching lines wanted per file (None: all)

    def check(self) -> Node:
        """Our RE2 parser's verdict on the pattern, without building a matcher (all that rg
        needs): the parse tree, or fallback_grep.error if RE2 rejects the pattern or it cannot match
        a line, or if that took more than PREPARE_SECONDS."""
        with bounded.deadline(PREPARE_SECONDS, self.pattern):
            return check(self.pattern, case_insensitive=self.case_insensitive, multiline=self.multiline)

    def matcher(self) -> Matcher:
        """fallback_grep's matcher for the pattern; raises fallback_grep.error as check() does, or
        when the pattern's program is too large, or building it took more than PREPARE_SECONDS."""
        with bounded.deadline(PREPARE_SECONDS, self.pattern):
            return Matcher(self.pattern, case_insensitive=self.case_insensitive, multiline=self.multiline)


@dataclass
class FileHits:
    """What one file contributed. Only files with a match (or a problem) are reported."""

    path: str
    count: int = 0  # matching lines (multiline mode: matches)
    lines: list[tuple[int, str, bool]] = field(default_factory=list)  # content: (number, text, is_match)
    binary: bool = False  # a binary file that matched: skipped, reported only as a count
    error: str | None = None  # unreadable: why


def open_plain(path: str) -> int:
    """A read descriptor of the regular file `path` (the default opener: tests, benchmarks)."""
    return check_regular(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))


def check_regular(fd: int) -> int:
    """`fd` if it is a regular file; else it is closed and OSError raised (a FIFO or device
    swapped in after the listing must not be read)."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file any more")
    return fd


def why_unreadable(exc: OSError) -> str:
    if exc.errno in beneath.ESCAPES:
        return "a component of its path became a symbolic link during the search; links are not followed"
    return exc.strerror or str(exc)


def python_search(files: list[str], query: Query, opener: Opener = open_plain,
                  workers: int = 1,  # pragma: no mutate (0 is equivalent: workers <= 1 is one process)
                  matcher: Matcher | None = None) -> Iterator[FileHits]:
    """Search each file, read through `opener` (PathPolicy-checked descriptors in the grep tool),
    with `matcher` (built from query when not given: a caller searching twice builds it once).

    With `workers` > 1 the files are searched by that many forked processes (fallback_grep's
    fork_map), each opening its files through the same `opener`, which it inherits; the hits come
    back in the same order as from one process.
    """
    matcher = query.matcher() if matcher is None else matcher
    if workers <= 1 or len(files) < 2:
        yield from _search_files(files, matcher, query, opener)
        return
    # Several batches per worker, dealt round-robin, so that one directory of big files does not
    # leave the other workers idle.
    size = -(-len(files) // (workers * BATCHES_PER_WORKER))
    batches = [files[i:i + size] for i in range(0, len(files), size)]
    for hits in fork_map(lambda batch: list(_search_files(batch, matcher, query, opener)), batches, workers):
        yield from hits


def _search_files(files: list[str], matcher: Matcher, query: Query, opener: Opener) -> Iterator[FileHits]:
    # One reused buffer, and files the literal prefilter rules out leave it uncopied: most files of
    # a search hold no match (fallback_grep.filesearch.search_paths does the same).
    reader = FileReader()
    prefilter = matcher.prefilter
    for path in files:
        try:
            fd = opener(path)
            try:
                n = reader.read_fd(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            yield FileHits(path, error=why_unreadable(exc))
            continue
        if prefilter is not None and prefilter.quick_reject(reader.buf, n):
            continue  # no match: nothing to report, binary or not
        data = reader.bytes(n)
        if is_binary(data):
            if search_bytes(matcher, data, "files_with_matches").matched:
                yield FileHits(path, binary=True)  # reported as a count, never as lines
            continue
        found = search_bytes(matcher, data, query.mode, query.context, query.context, query.per_file)
        if found.matched:
            yield FileHits(path, found.count, [(ln.number, ln.text, ln.is_match) for ln in found.lines])


def head_is_binary(fd: int) -> bool:
    try:
        return is_binary(os.pread(fd, BINARY_SNIFF, 0))
    except OSError:
        return False
