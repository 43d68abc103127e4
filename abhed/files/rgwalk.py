"""rg walking by itself in the read-only view of the root (rgjail): one bwrap start, rg's own
parallel walk, no walk and no size read in Abhed's process.

The files searched are those filewalk lists: rg gets the flags that make its walk filewalk's rules
(`--hidden`, `--no-require-git`, no .ignore/.rgignore or global excludes, links not followed, the
operator's exclusions as `--glob '!name'`, the size limit as `--max-filesize`), and the call falls
back to the Python walk (`Fallback`) wherever the two could differ or rg cannot say what the notes
need:
- rules above the allowed root (a parent's .gitignore, .git/info/exclude): the view shows only the
  root, and binding them would put a file outside the roots within reach of a swapped name;
- a nested repository's .git/info/exclude (rg reads one in every directory, filewalk at the root
  and its parents only);
- an operator exclusion that is not a plain name, and any glob (rg's `--glob` overrides beat
  .gitignore; as a file type, rg logs every file it leaves out, which costs more than it saves);
- a root whose last walk logged many left-out entries (a built tree: see NOISY_ENTRIES);
- anything rg says on its standard error besides its debug log (a file or directory it could not
  read), a debug line it does not end where expected (a name with a newline), a name it could not
  print (not UTF-8);
- a run that stalls (a FIFO swapped in: rgjail.Watch) or a bwrap that fails.

What the notes need comes from rg itself (pinned by tests/test_grep_rgwalk.py): `--stats` ("N
files searched", after the results), and `--debug`'s log of the walk: `ignoring PATH: N bytes`
for a file over --max-filesize, `ignoring PATH: Ignore(IgnoreMatch(Gitignore|Override(...)))` for
an entry the rules leave out. Whether a
left-out entry is a directory or a file is read here, beneath the root, one open per entry (as
filewalk's listing tells them apart: no link followed; links and other kinds are neither).

Files from ripgrep.MMAP_FROM bytes up to the limit are left out of the walk's run too (its
--max-filesize is below them) and searched by name, mapped, as before. The hits' binary check
reopens each hit beneath the root (ripgrep._sniffed), as on every path.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from abhed.common import hostproc
from abhed.common.errors import ToolError
from abhed.files import atomic, filewalk, rgjail, ripgrep
from abhed.files.grepsearch import FileHits, Opener, Query
from abhed.files.rgjail import Jail

# The debug log's lines: "rg: DEBUG|module|file:line: message".
DEBUG = "rg: DEBUG|"
WALK_LOG = "ignore::walk"   # the walk's own lines (rg::haystack's name links and other kinds it skips)
SIZE_LINE = re.compile(r"ignoring \./(.*): ([0-9]+) bytes")
RULE_LINE = re.compile(r"ignoring \./(.*?): Ignore\(IgnoreMatch\((Gitignore|Override)\(")
# --stats, printed after the results (a newline before it ends the listing in -l --null mode).
STATS = re.compile(rb"\n?([0-9]+) matches\n[0-9]+ matched lines\n[0-9]+ files contained matches\n"
                   rb"([0-9]+) files searched\n(?:[^\n]*\n){4}\Z")
PLAIN_NAME = re.compile(r"[A-Za-z0-9._+-]+")        # an exclusion rg matches as filewalk does
# A walk whose log held more left-out entries than this (a built tree: every object file ignored)
# cost rg more than the Python walk would (see usable): that root goes to the Python walk for a while.
NOISY_ENTRIES = 3000
NOISY_FOR_S = 600.0
_noisy_roots: dict[Path, float] = {}


class Fallback(Exception):
    """rg's own walk cannot give this call's answer exactly: the Python walk lists the files."""


class TooLong(Exception):
    """walk(max_output=...): rg printed more than that (a content search with many matching files);
    it was stopped. A files_with_matches walk, then lines from the first files, costs less."""


@dataclass
class Walked:
    """One walk of rg: its hits (binary ones marked), and what the notes need."""

    hits: list[FileHits] = field(default_factory=list)
    searched: int = 0                                          # files searched (rg's and the mapped ones)
    big: list[tuple[str, int]] = field(default_factory=list)   # (path, size) over the limit
    large: list[str] = field(default_factory=list)             # searched mapped (ripgrep.MMAP_FROM)
    hidden_dirs: list[str] = field(default_factory=list)
    hidden_files: int = 0


def usable(workspace_root: Path, excludes: list[str], glob: str | None) -> list[str] | None:
    """rg's flags for the walk's rules when its walk lists what filewalk lists and its log stays
    short, else None. A glob: rg's --glob overrides .gitignore, and as a file type (names only) rg
    logs every file it leaves out, each line a few writes to its unbuffered stderr (80 us a line:
    7.5 s instead of 1.1 s for `*.h` on the kernel tree); the Python walk is cheaper there."""
    if glob or _noisy(workspace_root):
        return None
    if ".git" not in excludes or not all(PLAIN_NAME.fullmatch(name) for name in excludes):
        return None
    if filewalk.Rules._parents(str(workspace_root)):   # rules above the root: not in the view
        return None
    flags = ["--hidden", "--no-require-git", "--no-ignore-dot", "--no-ignore-global", "--no-follow",
             *(f"--glob=!{name}" for name in excludes)]
    return flags


def walk(rg: Path, jail: Jail, regex: str, cwd: str, query: Query, opener: Opener, open_any: Callable[[str], int],
         flags: list[str], limit: int, max_output: int | None = None) -> Walked:
    """Search below `cwd` with rg walking by itself in `jail`. `opener` opens a file to search
    (beneath the root, regular files only), `open_any` an entry's directory (to tell a directory
    from a file). Raises Fallback, TooLong (past `max_output` bytes of results), ripgrep.RgRejected,
    ToolError (timeout)."""
    cap = min(limit, ripgrep.MMAP_FROM - 1)
    options = [*ripgrep._argv(rg, query, regex, mmap=False)[1:], *flags, f"--max-filesize={cap}",
               "--stats", "--debug", "--", "./"]
    try:
        # (its --debug log to a file read after: a pipe woke this process for each of its unbuffered writes)
        proc = hostproc.run(jail.argv(options, Path(cwd)), timeout=ripgrep.RG_TIMEOUT_S, watch=rgjail.Watch(),
                            max_output=max_output, stderr_after=True)
    except hostproc.TooMuch:
        raise TooLong() from None
    except hostproc.Stuck:
        raise Fallback("rg stalled (a FIFO?)") from None
    except hostproc.Timeout:
        raise ToolError(f"The search did not finish within {ripgrep.RG_TIMEOUT_S:g} s and was stopped (rg, "
                        f"walking {cwd}). Search fewer files (a path or glob), or a pattern that is simpler or "
                        "more specific.") from None
    if rgjail.failed(proc.stderr):
        raise Fallback("bwrap failed")
    found = STATS.search(proc.stdout, max(0, len(proc.stdout) - 4096))
    if found is None:   # rg searched nothing: its regex engine's limits (it reports them and stops)
        raise ripgrep.RgRejected(ripgrep._reason(proc.stderr, proc.returncode))
    walked = Walked()
    if _read_log(proc.stderr, cwd, limit, walked, open_any) > NOISY_ENTRIES:
        _noisy_roots[jail.root] = time.monotonic()
    walked.searched = int(found.group(2)) + len(walked.large)
    parse = ripgrep._parse_lines if query.mode == "content" else ripgrep._parse_listing
    prefix = cwd.rstrip("/") + "/"
    for hits, name in parse(proc.stdout[:found.start()], query):
        if not name.startswith("./") or atomic.is_temp(os.path.basename(name)):
            continue   # (Abhed's own write in progress: filewalk never lists one)
        hits.path = prefix + name[2:]
        walked.hits.append(ripgrep._sniffed(hits, opener))   # (the same check as every path's)
    if walked.large:
        walked.hits += ripgrep.rg_search(rg, cwd, walked.large, query, opener, regex, jail, frozenset(walked.large))
    return walked


def _noisy(root: Path) -> bool:
    """Whether a recent walk of `root` logged too many left-out entries (NOISY_ENTRIES)."""
    since = _noisy_roots.get(root)
    return since is not None and time.monotonic() - since < NOISY_FOR_S


def _read_log(stderr: bytes, cwd: str, limit: int, walked: Walked, open_any: Callable[[str], int]) -> int:
    """The sizes and left-out entries of rg's debug log into `walked`; Fallback on anything else.
    Returns how many entries it logged as left out."""
    prefix = cwd.rstrip("/") + "/"
    entries = 0
    for line in stderr.decode("utf-8", "replace").splitlines():
        if not line.startswith(DEBUG):
            raise Fallback(f"rg said: {line[:200]}")   # an unreadable entry, or a name with a newline
        _, module, said = line.split("|", 2)
        message = said.partition(": ")[2]
        if module != WALK_LOG or not message.startswith("ignoring ./"):
            continue
        entries += 1
        sized, ruled = SIZE_LINE.fullmatch(message), RULE_LINE.match(message)
        name = sized.group(1) if sized else ruled.group(1) if ruled else None
        if name is None or "\ufffd" in name:
            raise Fallback(f"rg's log line not understood: {message[:200]}")
        if atomic.is_temp(os.path.basename(name)):
            continue
        path = prefix + name
        if sized:
            size = int(sized.group(2))
            (walked.big.append((path, size)) if size > limit else walked.large.append(path))
        else:
            if "/" in name and name.endswith("/.git") and _has_rules(path + "/info/exclude", open_any):
                raise Fallback(f"a nested repository's exclude file: {path}")
            _hidden(path, walked, open_any)
    return entries


def _has_rules(path: str, open_any: Callable[[str], int]) -> bool:
    """Whether the file `path` (opened beneath the root) holds gitignore rules."""
    try:
        fd = open_any(path)
    except OSError:
        return False
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return False
        lines = handle.read(1 << 20).decode("utf-8", "surrogateescape").splitlines()
    return filewalk.IgnoreFile(os.path.dirname(path), lines).has_rules


def _hidden(path: str, walked: Walked, open_any: Callable[[str], int]) -> None:
    """An entry the rules left out: a directory or a file, read beneath the root, no link
    followed (filewalk counts nothing else: links, FIFOs, sockets)."""
    try:   # (its directory opened, not the entry itself: the host opens no FIFO or device here)
        fd = open_any(os.path.dirname(path) + "/.")   # ("/.": the root itself is not below the root)
    except OSError:
        return
    try:
        mode = os.stat(os.path.basename(path), dir_fd=fd, follow_symlinks=False).st_mode
    except OSError:
        return   # gone since, or its directory swapped for something else
    finally:
        os.close(fd)
    if stat.S_ISDIR(mode):
        walked.hidden_dirs.append(path)
    elif stat.S_ISREG(mode):
        walked.hidden_files += 1
