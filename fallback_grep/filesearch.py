"""File search on top of the regex engine: what a grep tool needs, with ripgrep's line semantics.
(Named filesearch, not search, so importing it cannot shadow the fallback_grep.search function.)

Layers, each usable alone:
  Matcher          compiled pattern + options; finds matching lines (or multiline regions) in a
                   bytes buffer.
  search_bytes     one buffer -> FileResult for an output mode (content / files_with_matches /
                   count), with before/after context lines.
  search_file      reads a file with one read() into a reused buffer, skips binaries the way
                   ripgrep does (see BINARY_SNIFF), reports unreadable files instead of raising.
  walk / search_paths
                   deterministic directory walk with a caller-supplied filter, then per-file
                   results.

Speed: the whole file is one bytes object; the prefilter (bytes.find or a bounded sre pattern,
see prefilter.py) jumps to candidate positions at C speed, lines are only split around hits,
and only candidate lines reach the Python-level DFA.
"""
from __future__ import annotations

import operator
import os

from . import dfa as dfa_mod
from . import syntax as sx
from . import pikevm
from .lines import to_line_mode
from .parser import parse
from .prefilter import LINE_SRE_MAX
from .record import Record
from .regex import DOTALL, IGNORECASE, LINES, MULTILINE, Pattern

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence
    from typing import Any, Protocol

    from .syntax import Node

    Keep = Callable[[str, bool], bool]   # keep(path, is_dir): walk into / search it?
    # (directory descriptor or None, name, path); a root that is a file comes as it was given
    Entry = tuple[int | None, str | os.PathLike[str], str | os.PathLike[str]]

    class Entries(Protocol):
        """What search_paths opens files of: a Walk, or a worker's share of one (parallel._Run)."""

        def entries(self) -> Iterator[Entry]: ...

OUTPUT_MODES = ("content", "files_with_matches", "count")
# ripgrep (15.x, recursive search) reads 64 KiB first and skips the file if that holds a NUL; a
# later NUL stops the search there (rg -n / -l report what came before it, rg -c skips the file).
BINARY_SNIFF = 1 << 16
READ_CHUNK = 1 << 20


class Line(Record):
    _fields = ("number", "text", "is_match")

    def __init__(self, number: int, text: str, is_match: bool) -> None:
        self.number = number      # 1-based line number
        self.text = text          # the line without its terminator, decoded as UTF-8 (invalid -> U+FFFD)
        self.is_match = is_match  # False for a context line


class FileResult(Record):
    _fields = ("path", "matched", "count", "lines", "binary", "stopped_at", "error", "truncated")
    path: str = ""
    matched = False
    count = 0                      # matching lines; multiline mode counts like `rg -U -c`:
    #                                matches if the pattern can match \n, else matching lines
    lines: Sequence[Line] = ()     # content mode: Line objects in file order (a list once set)
    binary = False                 # skipped: looks binary (a NUL in the first 64 KiB, or
    #                                count mode and a NUL anywhere), as rg does
    stopped_at: int | None = None  # a later NUL: only the lines before it were searched
    error: str | None = None       # unreadable: why (the file was skipped)
    truncated = False              # stopped after max_count matching lines

    def __init__(self, path: str, **given: Any) -> None:
        # Most files of a search do not match: their result sets only the path and reads every
        # other field from the class defaults (setting all eight cost about a
        # microsecond per file, a tenth of a literal search's per-file budget).
        self.path = path
        if given:
            unknown = given.keys() - _RESULT_FIELDS
            if unknown:
                raise TypeError(f"FileResult has no field {', '.join(sorted(unknown))}")
            self.__dict__.update(given)


_RESULT_FIELDS = frozenset(FileResult._fields)


class Matcher:
    """A pattern compiled for file search.

    Without multiline, matching follows ripgrep: each line is matched on its own, a match never
    includes the newline, and ^ $ \\A \\z hold at line boundaries.  With multiline, `.` also
    matches newline and a match may span lines; ^ and $ still match at every line boundary (rg
    -U --multiline-dotall) while \\A and \\z mean the start and end of the file.
    Raises fallback_grep.error (with a teaching message) if RE2 rejects the pattern, or if it
    holds a literal newline without multiline (as rg does).  Safe to share between threads.
    """

    def __init__(self, pattern: str | bytes, case_insensitive: bool = False, multiline: bool = False) -> None:
        self.multiline = multiline
        self.pattern = Pattern(pattern, _flags(case_insensitive, multiline))
        self.can_match_newline = _can_match_newline(self.pattern.tree)
        self.prefilter = self.pattern.prefilter

    # ---- line mode -----------------------------------------------------------------------------
    def _verify(self, data: bytes, start: int, end: int) -> bool:
        """Is there a match inside data[start:end] (one line)?"""
        got = self.pattern._dfa("fwd").search(data, start, end, earliest=True)
        if got is dfa_mod.GAVE_UP:
            return pikevm.search(self.pattern.prog, data, start, end) is not None
        return got is not None

    def _next_match_pos(self, data: bytes, pos: int, n: int) -> int:
        """Some position inside the first matching line at or after pos, or -1."""
        got = self.pattern._dfa("fwd").search(data, pos, n, earliest=True)
        if got is dfa_mod.GAVE_UP:
            slots = pikevm.search(self.pattern.prog, data, pos, n)
            return -1 if slots is None else slots[0]
        return -1 if got is None else got

    def iter_line_matches(self, data: bytes) -> Iterator[tuple[int, int]]:
        """Yield (line_start, line_end) byte offsets of each matching line, in order.

        With a prefilter, jump from candidate to candidate (bytes.find / sre at C speed) and
        verify only the candidate's line; without one, let the DFA scan for the next match.
        """
        n = len(data)
        pf = self.prefilter
        scanner = pf.scanner(data) if pf is not None else None
        if scanner is not None and scanner.mode == "none":
            scanner = None
        trusted = scanner is not None and scanner.hit_is_match
        pos = 0
        while pos < n:
            if scanner is not None:
                hit = scanner.find(pos, n)
            else:
                hit = self._next_match_pos(data, pos, n)
            if hit < 0:
                return
            if hit >= n and n > 0 and data[n - 1] == 10:
                return  # an empty match after the final newline is not a line
            start = data.rfind(b"\n", 0, hit) + 1
            end = data.find(b"\n", hit)
            if end < 0:
                end = n
            if scanner is None or trusted or self._confirm(data, start, end):
                yield start, end
            pos = end + 1

    def _confirm(self, data: bytes, start: int, end: int) -> bool:
        pf = self.prefilter
        assert pf is not None  # only a prefilter's candidates are confirmed
        if pf.exact:
            return pf.confirm(data, start, end)
        if pf.line_regex is not None and end - start <= LINE_SRE_MAX:
            return pf.line_regex.search(data, start, end) is not None
        return self._verify(data, start, end)

    # ---- multiline mode ------------------------------------------------------------------------
    def iter_regions(self, data: bytes) -> Iterator[tuple[int, int]]:
        """Yield (start, end) byte spans of successive matches (multiline mode)."""
        n = len(data)
        pos = 0
        while pos <= n:
            slots = self.pattern._find(data, pos, n, False, False)
            if slots is None:
                return
            s, e = slots[0], slots[1]
            if s >= n and n > 0 and data[n - 1] == 10:
                return
            yield s, e
            pos = e if e > s else e + 1


def _flags(case_insensitive: bool, multiline: bool) -> int:
    flags = MULTILINE | (IGNORECASE if case_insensitive else 0)
    return flags | (DOTALL if multiline else LINES)


def check(pattern: str | bytes, case_insensitive: bool = False, multiline: bool = False) -> Node:
    """Raise fallback_grep.error where Matcher() would for the pattern as written, without
    building a matcher (for a caller that searches with rg): RE2's syntax and, without
    multiline, the line rule (a literal newline can never match a line). Returns the parse
    tree, which translate.rust_tree() writes for rg. Linear in the pattern's length; what
    only Matcher() refuses is a program past prog.MAX_INSTRUCTIONS, a limit of this engine."""
    tree = parse(pattern, _flags(case_insensitive, multiline) & (IGNORECASE | MULTILINE | DOTALL)).tree
    if not multiline:
        to_line_mode(tree, pattern)
    return tree


def _can_match_newline(tree: Node) -> bool:
    for node in sx.walk(tree):
        if node.op == sx.ANY_BYTE:
            return True
        ranges = sx.node_ranges(node)
        if ranges is not None and any(lo <= 10 <= hi for lo, hi in ranges):
            return True
    return False


def _line_text(data: bytes, start: int, end: int) -> str:
    return data[start:end].decode("utf-8", "replace")


def search_bytes(matcher: Matcher, data: bytes, output_mode: str = "files_with_matches", before: int = 0,
                 after: int = 0, max_count: int | None = None, path: str = "") -> FileResult:
    """Search one buffer. content mode fills lines (with context), count mode fills count."""
    if output_mode not in OUTPUT_MODES:
        raise ValueError(f"output_mode must be one of {', '.join(OUTPUT_MODES)}; got {output_mode!r}")
    res = FileResult(path)
    if matcher.multiline:
        spans = _multiline_line_spans(matcher, data, res, output_mode, max_count)
    else:
        spans = []
        for span in matcher.iter_line_matches(data):
            res.matched = True
            res.count += 1
            if output_mode == "files_with_matches":
                return res
            if output_mode == "content":
                spans.append(span)
            if max_count is not None and res.count >= max_count:
                res.truncated = True
                break
    if output_mode == "content" and spans:
        res.lines = _with_context(data, spans, before, after)
    return res


def _multiline_line_spans(matcher: Matcher, data: bytes, res: FileResult, output_mode: str,
                          max_count: int | None) -> list[tuple[int, int]]:
    """Multiline: each match covers whole lines; returns merged (line_start, line_end) spans.

    Counting follows `rg -U -c`: a pattern that can match a newline counts matches; one that
    cannot (so every match sits inside one line) counts matching lines, as without -U.
    """
    spans: list[tuple[int, int]] = []
    per_line = not matcher.can_match_newline
    counted_line = -1
    for s, e in matcher.iter_regions(data):
        res.matched = True
        if per_line:
            line_start = data.rfind(b"\n", 0, s) + 1
            if line_start == counted_line:
                continue
            counted_line = line_start
        res.count += 1
        if output_mode == "files_with_matches":
            return []
        if output_mode == "content":
            last = e - 1 if e > s else s
            start = data.rfind(b"\n", 0, s) + 1
            end = data.find(b"\n", max(last, s))
            end = len(data) if end < 0 else end
            if spans and start <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
            else:
                spans.append((start, end))
        if max_count is not None and res.count >= max_count:
            res.truncated = True
            break
    return spans


def _with_context(data: bytes, spans: list[tuple[int, int]], before: int, after: int) -> list[Line]:
    """Lines for content mode: every line inside a matching span, plus context, deduplicated."""
    out: dict[int, Line] = {}
    lineno = 1
    counted_to = 0
    n = len(data)
    for start, end in spans:
        lineno += data.count(b"\n", counted_to, start)
        counted_to = start
        # Lines of the span itself (several in multiline mode).
        s, num = start, lineno
        while True:
            e = data.find(b"\n", s, end)
            e = end if e < 0 else e
            out[num] = Line(num, _line_text(data, s, e), True)
            if e >= end:
                break
            s, num = e + 1, num + 1
        last_num, last_end = num, end
        # Before context: walk back line by line.
        s, num = start, lineno
        for _ in range(before):
            if s == 0:
                break
            ps = data.rfind(b"\n", 0, s - 1) + 1
            num -= 1
            if num not in out:
                out[num] = Line(num, _line_text(data, ps, s - 1), False)
            s = ps
        # After context.
        e, num = last_end, last_num
        for _ in range(after):
            if e >= n or e + 1 >= n and data[e] == 10:
                break
            ne = data.find(b"\n", e + 1)
            ne = n if ne < 0 else ne
            num += 1
            if num not in out:
                out[num] = Line(num, _line_text(data, e + 1, ne), False)
            e = ne
    return [out[k] for k in sorted(out)]


def is_binary(head: bytes) -> bool:
    """Does this start of a file mark it as binary (ripgrep's rule)?"""
    return b"\x00" in head[:BINARY_SNIFF]


def _searchable_length(buf: bytearray, n: int, output_mode: str) -> int:
    """How much of buf[:n] to search: -1 = binary (skip), else a length (maybe cut at a NUL)."""
    if buf.find(b"\x00", 0, BINARY_SNIFF if n > BINARY_SNIFF else n) >= 0:
        return -1
    if n <= BINARY_SNIFF:
        return n
    nul = buf.find(b"\x00", BINARY_SNIFF, n)
    if nul < 0:
        return n
    if output_mode == "count":
        return -1
    return buf.rfind(b"\n", 0, nul) + 1


class FileReader:
    """Reads files into one reused buffer.

    A fresh bytes object per file costs an allocation (and, for large files, page faults) that
    is as expensive as searching it; most files are rejected by the prefilter straight from
    this buffer and never copied.  One reader per thread: it is mutable state.
    """

    def __init__(self, size: int = 1 << 20) -> None:
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)

    def read(self, path: str | os.PathLike[str]) -> int:
        """Read path into the buffer; return its length. Larger files grow the buffer."""
        fd = os.open(path, os.O_RDONLY)
        try:
            return self.read_fd(fd)
        finally:
            os.close(fd)

    def read_fd(self, fd: int) -> int:
        """Read everything from the descriptor fd (left open) into the buffer; return its length."""
        n = os.readv(fd, [self.view])
        while n == len(self.buf):
            # Possibly more: grow to the file's size (plus one byte, so that a full buffer
            # keeps meaning "maybe more") and continue reading after what we have.
            size = max(2 * len(self.buf), os.fstat(fd).st_size + 1)
            bigger = bytearray(size)
            bigger[:n] = self.view[:n]
            self.view.release()
            # Two statements, not a tuple assignment: Nuitka 4.3.3 fails to compile the latter.
            self.buf = bigger
            self.view = memoryview(bigger)
            got = os.readv(fd, [self.view[n:]])
            if got == 0:
                break
            n += got
        return n

    def bytes(self, n: int) -> bytes:
        return bytes(self.view[:n])


def search_file(matcher: Matcher, path: str | os.PathLike[str], output_mode: str = "files_with_matches",
                before: int = 0, after: int = 0, max_count: int | None = None,
                reader: FileReader | None = None) -> FileResult:
    """Read path in one go and search it. Never raises for I/O problems: see FileResult.error.

    reader: a FileReader to reuse across calls (search_paths passes one); None reads afresh.
    """
    spath = str(path)
    if reader is None:
        reader = FileReader(1 << 16)
    try:
        n = reader.read(path)
    except OSError as e:
        return FileResult(spath, error=f"cannot read {path}: {e.strerror or e}")
    return _search_read(matcher, reader, n, spath, output_mode, before, after, max_count)


def _search_read(matcher: Matcher, reader: FileReader, n: int, spath: str, output_mode: str, before: int,
                 after: int, max_count: int | None) -> FileResult:
    """Search a file already read into reader.buf[:n]."""
    buf = reader.buf
    m = _searchable_length(buf, n, output_mode)
    if m < 0:
        return FileResult(spath, binary=True)
    stopped = None if m == n else buf.find(b"\x00", m, n)
    pf = matcher.prefilter
    if pf is not None and pf.quick_reject(buf, m):
        return FileResult(spath, stopped_at=stopped)
    res = search_bytes(matcher, reader.bytes(m), output_mode, before, after, max_count, spath)
    res.stopped_at = stopped
    return res


def walk(root: str | os.PathLike[str], keep: Keep | None = None) -> Walk:
    """File paths under root in sorted, deterministic order; symlinks are not followed.

    keep(path, is_dir) -> bool lets the caller prune directories and drop files (ignore rules,
    globs).  A root that is a file is yielded as is.  Iterate it for paths; search_paths also
    uses its entries(), which opens each file relative to its directory's descriptor.
    """
    return Walk(root, keep)


class Walk:
    """The files walk() lists: an iterable of paths, and of (dir_fd, name, path) by entries().

    Each directory is opened once; its files are then opened by name relative to that
    descriptor (openat), which spares the kernel a lookup of every component of every path:
    over the Linux tree that was a tenth of a literal search's system time.
    Order: a directory's files in name order, then its subdirectories, each in name order.
    """

    def __init__(self, root: str | os.PathLike[str], keep: Keep | None = None) -> None:
        self.root = root
        self.keep = keep

    def __iter__(self) -> Iterator[str | os.PathLike[str]]:
        for _, _, path in self.entries():
            yield path

    def entries(self) -> Iterator[Entry]:
        """Yield (dir_fd, name, path) per file; dir_fd stays open until the next item is asked
        for (None for a root that is not a directory: then name is the root itself)."""
        if not os.path.isdir(self.root):
            yield None, self.root, self.root
            return
        for _, dfd, prefix, names in self._listed(keep_open=True):
            assert dfd is not None  # kept open: keep_open
            yield from in_directory(dfd, prefix, names)

    def directories(self) -> Iterator[tuple[str, list[str]]]:
        """Yield (directory, file names) in walk order, each directory's descriptor closed
        again (what parallel.search_paths hands to its workers). A root that is not a directory
        gives nothing."""
        if os.path.isdir(self.root):
            for d, _, _, names in self._listed(keep_open=False):
                yield d, names

    def _listed(self, keep_open: bool) -> Iterator[tuple[str, int | None, str, list[str]]]:
        keep = self.keep
        stack = [os.fspath(self.root)]
        while stack:
            d = stack.pop()
            try:
                fd = os.open(d, _DIR_FLAGS)
            except OSError:
                continue
            try:
                prefix, names, subdirs = _list_directory(d, fd, keep)
            except BaseException:
                os.close(fd)
                raise
            dfd: int | None = fd
            if not keep_open:
                os.close(fd)
                dfd = None
            stack.extend(reversed(subdirs))
            yield d, dfd, prefix, names


def dir_prefix(directory: str) -> str:
    """What a directory's path is joined to its entries' names with."""
    return directory if directory.endswith("/") else directory + "/"


def in_directory(dfd: int, prefix: str, names: list[str]) -> Iterator[Entry]:
    """Yield (dfd, name, path) for the files `names` of one open directory; closes dfd when done
    (or when the consumer stops early)."""
    try:
        for name in names:
            yield dfd, name, prefix + name
    finally:
        os.close(dfd)


def _list_directory(d: str, dfd: int, keep: Keep | None) -> tuple[str, list[str], list[str]]:
    """(prefix, sorted file names, sorted subdirectory paths) of one directory, keep applied."""
    prefix = dir_prefix(d)
    try:
        with os.scandir(dfd) as scan:
            entries = sorted(scan, key=_entry_name)
    except OSError:
        return prefix, [], []
    names: list[str] = []
    subdirs: list[str] = []
    for entry in entries:
        try:
            # A file first: most entries are files, so most take one d_type test.
            if entry.is_file(follow_symlinks=False):
                is_dir = False
            elif entry.is_dir(follow_symlinks=False):
                is_dir = True
            else:
                continue  # symlinks, sockets, fifos, devices
        except OSError:
            continue
        path = prefix + entry.name
        if keep is not None and not keep(path, is_dir):
            continue
        if is_dir:
            subdirs.append(path)
        else:
            names.append(entry.name)
    return prefix, names, subdirs


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_entry_name = operator.attrgetter("name")


def search_paths(matcher: Matcher, paths: Entries | Iterable[str], output_mode: str = "files_with_matches", before: int = 0,
                 after: int = 0, max_count: int | None = None, every_file: bool = True) -> Iterator[FileResult]:
    """Search each path; yields a FileResult per file (binary and unreadable ones included).
    every_file=False leaves out the files the literal prefilter rules out (most files of a
    search, none of them a match): a caller that shows only matches and problems, like the
    command line, then makes no object per such file.

    paths: walk()'s result (its files are opened relative to their directory; so are those of
    any object with the same entries() method) or any iterable of paths.  Equivalent to calling search_file on each path with one shared FileReader, but
    with the per-file fast path (read, binary sniff, literal rejection) inlined: over the Linux
    tree that overhead was a fifth of the total time.
    """
    reader = FileReader()
    pf = matcher.prefilter
    nd = pf.needles if pf is not None else None
    single = nd.literals[0] if nd is not None and len(nd.literals) == 1 and \
        len(nd.literals[0]) != 2 else None
    finders = nd.finders if nd is not None and nd.literals and single is None else None
    folded = nd if nd is not None and not nd.literals and nd.folded is not None else None
    entries = paths.entries() if hasattr(paths, "entries") else ((None, p, p) for p in paths)
    o_open, o_readv, o_close, rdonly = os.open, os.readv, os.close, os.O_RDONLY
    for dfd, name, path in entries:
        try:
            fd = o_open(name, rdonly, dir_fd=dfd)
            try:
                n = o_readv(fd, [reader.view])
            finally:
                o_close(fd)
        except OSError as e:
            yield FileResult(str(path), error=f"cannot read {path}: {e.strerror or e}")
            continue
        buf = reader.buf
        if n == len(buf):
            # The buffer was too small: let the general path grow it and read the whole file.
            yield search_file(matcher, path, output_mode, before, after, max_count, reader)
            continue
        if n > BINARY_SNIFF or buf.find(b"\x00", 0, n) >= 0:
            # Big or binary files: the general path knows the NUL rules.
            yield _search_read(matcher, reader, n, str(path), output_mode, before, after,
                               max_count)
            continue
        if single is not None:
            if buf.find(single, 0, n) < 0:
                if every_file:
                    yield FileResult(str(path))
                continue
        elif finders is not None:
            for find in finders:
                if find(buf, 0, n) >= 0:
                    break
            else:
                if every_file:
                    yield FileResult(str(path))
                continue
        elif folded is not None:
            # (?i)literal: reject from the lowered copy here rather than through search_bytes'
            # scanner, whose set-up per file cost as much as the search itself.
            data = reader.bytes(n)
            if not folded.may_occur(data):
                if every_file:
                    yield FileResult(str(path))
                continue
            yield search_bytes(matcher, data, output_mode, before, after, max_count, str(path))
            continue
        yield search_bytes(matcher, reader.bytes(n), output_mode, before, after, max_count,
                           str(path))
