"""Git repositories the session creates in the workspace are neutralised before git on the host sees them.

The rule: after any sequence of sandboxed commands, running ``git`` on the host anywhere in
the workspace runs nothing the session wrote. Mounts (sandbox.protect) keep the existing
repositories' ``config``, ``hooks/``, ``info/``, ``modules/`` and ``commondir`` read-only;
what they cannot do is stop the command from *creating* a repository: ``git init sub`` with
``core.fsmonitor`` in ``sub/.git/config``, a ``.git`` file pointing anywhere, a bare
repository (``HEAD`` + ``objects/`` + ``refs/``) that git discovers as the current directory,
or a ``commondir`` that redirects an existing repository to a copied one with a hostile
config. So the guard looks at the workspace after every command:

- at session start it records every git directory there (they are the operator's; their
  sensitive files get protection mounts, see ``nested_protected_entries``);
- after each command, a new git directory is *quarantined*: a ``.git`` (directory, file or
  symlink) is renamed to ``.git.abhed-quarantined-N``; any other new git directory (bare
  shape, or a ``worktrees/x``-style one with ``commondir``) has its ``HEAD`` renamed, which
  makes git stop recognising it; a ``commondir`` new in a recorded git directory is renamed.
  The observation says what was moved and how to undo it after review.

What is a git directory is sandbox.gitshape's decision (git's own test, symlinks counted as git
counts them), the one the file tools make too. The listings record entry *names* only, so they
cannot tell: they name the candidates (HEAD, and objects + refs or a commondir, of any type),
and each check asks gitshape about every candidate that is not one of the operator's, through
a descriptor of the directory. That also covers what changes without an entry event: HEAD's
contents rewritten in place, the target of an ``objects`` symlink appearing elsewhere. The
quarantine asks it again after renaming HEAD, and says so if the directory still is one.

The listings also note each directory's FIFOs, sockets and devices; every change set carries them
with the directories listed, so that checkpoints name what they cannot hold without a walk of
their own. The first walk, at the sandbox's start, also lstat's each file into the census
(sandbox.census), from which the hard-link survey and the first checkpoint take their stats.

Cost: the first scan lists every directory (0.6 s for 100,000 files in 11,000 directories
on a loaded 2-core machine) and puts an inotify watch on each. inotify reports changes made
through any mount of the same inode, so also those made inside the sandbox. A later check
reads the events and re-lists only the directories that gained or lost entries (and walks
directories that appeared): nothing changed costs well under a millisecond. Watches are charged
to the user's host-wide ``fs.inotify.max_user_watches`` (shared with the user's editors, IDEs and
build watchers), so the guards of one Abhed process hold at most ``1/WATCH_SHARE`` of it together
(``WatchBudget``). When the kernel's event queue overflowed, or a watch cannot be added (that
share, or the user's limit, is used up), the guard falls back to a full walk that re-lists only directories whose (device, inode,
ctime) changed -- creating, removing or renaming an entry changes its directory's ctime,
and ctime cannot be set from user space -- and opens and fstats every other directory
(about 20 microseconds each). Directories changed within the last ``RECENT_NS`` are never
trusted from that cache (a change in the same clock tick keeps the old ctime). Walks open
each directory relative to its parent with O_NOFOLLOW, so a background job swapping a
directory for a symlink cannot send the walk (or a rename) outside the workspace.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Protocol

from sandbox import gitexec, gitshape

_native_listdir: Callable[..., tuple[list[str], list[tuple[str, bool]], list[tuple[str, int]], list[str]]] | None
try:  # the native listing (sandbox/_listdir.c), built by setup.py when a C compiler was at hand
    from sandbox._listdir import listdir as _native_listdir
except ImportError:  # pragma: no cover (CI builds it: tests/sandbox/test_listdir.py says when it is missing)
    _native_listdir = None


def native_listing() -> bool:
    """Whether the walk lists through sandbox/_listdir.c (else in Python: the same, slower)."""
    return _native_listdir is not None


# A file's lstat as the start's walk notes it (sandbox.census): its record (bytes, `record`) where one
# holds it, else the os.stat_result.
Lstat = os.stat_result | bytes
_RECORD = struct.Struct(">11L")
_U32 = 1 << 32


def record(st: os.stat_result) -> bytes | None:
    """The census's record of a file with this lstat: the 40 bytes of git's index entry for it (ctime
    s, ns, mtime s, ns, dev, ino, git's mode, uid, gid, size, each to 32 bits), then st_mode; None for
    anything but a file or symlink with one link whose times and size git's 32 bits hold exactly.
    sandbox/_listdir.c makes the same record natively."""
    mode = st.st_mode
    if st.st_nlink != 1 or not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)) or not 0 <= st.st_size < _U32:
        return None
    ctime_s, ctime_ns = divmod(st.st_ctime_ns, 1_000_000_000)
    mtime_s, mtime_ns = divmod(st.st_mtime_ns, 1_000_000_000)
    if not (0 <= ctime_s < _U32 and 0 <= mtime_s < _U32):
        return None
    git_mode = 0o120000 if stat.S_ISLNK(mode) else 0o100755 if mode & stat.S_IXUSR else 0o100644
    return _RECORD.pack(ctime_s, ctime_ns, mtime_s, mtime_ns, st.st_dev & 0xFFFFFFFF, st.st_ino & 0xFFFFFFFF, git_mode,
                        st.st_uid & 0xFFFFFFFF, st.st_gid & 0xFFFFFFFF, st.st_size, mode)

# Entry names that make a directory a git directory, or a .git pointer.
_WATCHED = frozenset({".git", "HEAD", "objects", "refs", "commondir"})
RECENT_NS = 200_000_000  # 0.2 s: well above any filesystem timestamp granularity
QUARANTINE_SUFFIX = ".abhed-quarantined"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# The share of the user's inotify watches (fs.inotify.max_user_watches, counted per user over every
# process of the host) the guards of one Abhed process may hold together: a quarter, so that a workspace
# of very many directories leaves the rest to the user's other watchers (an IDE, a build's --watch);
# beyond it the guard walks instead (slower checks, same results).
WATCH_SHARE = 4
# What the share is taken of when the kernel's limit cannot be read (the kernel's default is 8192 on
# small machines; newer kernels scale it with memory).
DEFAULT_MAX_USER_WATCHES = 8192


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to a listing; frozen documents it)
class _Listing:
    signature: tuple[int, int, int]  # (st_dev, st_ino, st_ctime_ns) when listed
    subdirs: frozenset[str]
    watched: tuple[tuple[str, bool], ...]  # watched names present (any type), and whether each is a real directory
    specials: tuple[tuple[str, int], ...] = ()  # FIFOs, sockets, devices: (name, S_IFMT of its lstat, 0 if gone)


@dataclass
class Changes:
    """What inotify saw change between two GitGuard.take_changes() calls (the `number`-th interval):
    `paths` named by an event (an entry created, deleted, moved, written, its mode changed, closed after
    writing), `dirs` whose entries changed, `new_dirs` that appeared (each walked whole: what was made in
    them before their watch was placed is in no event). Not `complete` when something was missed."""

    number: int
    complete: bool = True
    paths: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)
    new_dirs: set[str] = field(default_factory=set)
    # When taken: the directories the guard had listed, and the FIFOs, sockets and devices in them
    # (directory -> (name, S_IFMT)), as their last listing found them (checkpoints name them as not covered).
    listed: frozenset[str] = frozenset()
    specials: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    # The sandbox start's lstat of each file (directory -> name -> lstat), on the interval it was taken in
    # when nothing was missed since (sandbox.census: a file named here, or below a name here, may differ now).
    census: dict[str, dict[str, Lstat]] | None = None


class FileNotes(Protocol):
    """Where the start's walk notes each directory's files (sandbox.census.Census)."""

    def directory(self, rel: str) -> dict[str, Lstat] | None:
        """The dict for the directory `rel`'s files (name -> lstat), or None: note nothing more."""


def may_be_git_dir(names: dict[str, bool] | frozenset[str] | set[str]) -> bool:
    """Whether a directory holding these entry names (of any type: files, directories, symlinks)
    can pass git's test at all: HEAD, and objects + refs or a commondir. Every git directory
    sandbox.gitshape finds is one of these; which of them are is gitshape's answer."""
    return "HEAD" in names and ("commondir" in names or ("objects" in names and "refs" in names))


class GitGuard:
    """Tracks the git directories in one workspace; see the module docstring."""

    def __init__(self, workspace: Path, *, use_inotify: bool = True, watches: WatchBudget | None = None) -> None:  # pragma: no mutate (start() always passes use_inotify)
        self.workspace = workspace
        self._budget = watches or process_watch_budget()
        self._listings: dict[str, _Listing] = {}
        self._interesting: set[str] = set()  # directories with a watched name in them
        self._special: set[str] = set()  # directories with a FIFO, socket or device in them
        self._numbers = count(1)
        self.unreadable: set[str] = set()  # directories the last walk could not list
        self._notify = _Inotify.open(self._budget) if use_inotify else None
        self._wd_rel: dict[int, str] = {}
        self._full_walk_needed = True
        self._walks = 0  # full walks so far: after the first, each one means events were missed
        self._changes = Changes(0, complete=False)  # what changed since the last take_changes(), for checkpoints
        self.baseline_git_dirs: frozenset[str] = frozenset()  # workspace-relative ("" is the workspace itself)
        self.baseline_pointers: frozenset[str] = frozenset()  # relative paths of .git files and symlinks
        self.baseline_commondirs: frozenset[str] = frozenset()  # git dirs that had a commondir at the start
        self._census: FileNotes | None = None  # during the start's walk: where each file's lstat is noted

    @classmethod
    def start(cls, workspace: Path, *, use_inotify: bool = True, watches: WatchBudget | None = None,
              census: FileNotes | None = None) -> GitGuard:
        """``watches``: the inotify watches the guard may hold (default: this process's share, process_watch_budget).
        ``census``: given the lstat of each regular file, symlink and `.git` as the first walk lists it,
        each after its directory's watch is in place (sandbox.census)."""
        guard = cls(workspace, use_inotify=use_inotify, watches=watches)
        guard._census = census
        try:
            guard._refresh()
        finally:
            guard._census = None  # pragma: no mutate (memory: a later walk is a recovery, after which Census.holds_for gives nobody the census)
        git_dirs, pointers, commondirs = guard._state()
        guard.baseline_git_dirs = frozenset(git_dirs)
        guard.baseline_pointers = frozenset(pointers)
        guard.baseline_commondirs = frozenset(commondirs)
        return guard

    @property
    def mode(self) -> str:
        return "inotify" if self._notify is not None else "walk"

    def close(self) -> None:
        if self._notify is not None:
            self._notify.close()
            self._notify = None

    def nested_protected_entries(self) -> tuple[str, ...]:
        """Protected-path entries for the repositories found at the start, beyond the workspace's own .git."""
        entries: list[str] = []
        for rel in sorted(self.baseline_git_dirs):
            if rel == ".git":  # the workspace's own: DEFAULT_PROTECTED_PATHS covers the rest
                if rel in self.baseline_commondirs:
                    entries.append(_join(rel, "commondir"))
                continue
            entries += [_join(rel, "config"), _join(rel, "hooks/"), _join(rel, "info/"), _join(rel, "modules/")]
            if rel in self.baseline_commondirs:
                entries.append(_join(rel, "commondir"))
        entries += sorted(p for p in self.baseline_pointers if p != ".git")
        return tuple(entries)

    def run_by_git_entries(self) -> tuple[str, ...]:
        """Protected-path entries for the work-tree files the configs of the repositories found at
        the start (and of one enclosing the workspace) make host git run (sandbox.gitexec)."""
        repos = list(gitexec.enclosing(self.workspace))
        for rel in sorted(self.baseline_git_dirs):
            path = self.workspace / rel
            repo = gitexec.repository_of(path) if path.name == ".git" else gitexec.repository_at(path)
            if repo is not None:
                repos.append(repo)
        repos += [r for r in map(gitexec.repository_of, (self.workspace / p for p in sorted(self.baseline_pointers))) if r]
        return tuple(entry.path for entry in gitexec.entries(self.workspace, dict.fromkeys(repos)))

    def check(self) -> list[str]:
        """Quarantine what appeared since the start; one sentence per action, for the observation."""
        self._refresh()
        git_dirs, pointers, commondirs = self._state()
        notes: list[str] = []
        for rel in sorted(pointers - self.baseline_pointers):
            notes.append(self._quarantine(rel, "a .git file or symlink (it points git at another repository)"))
        for rel in sorted(git_dirs - self.baseline_git_dirs):
            notes.append(self._quarantine_git_dir(rel))
        for rel in sorted((commondirs & self.baseline_git_dirs) - self.baseline_commondirs):
            notes.append(self._quarantine(_join(rel, "commondir"), "a commondir (it redirects an existing repository)"))
        if any(notes):
            self._refresh()  # take in our own renames
        for rel in sorted(self.unreadable):
            notes.append(
                f"the directory {self.workspace / rel} cannot be read by Abhed, so it could not be checked for git "
                "repositories the sandbox created; make it readable (chmod u+rx) or remove it before running git there."
            )
        return [n for n in notes if n]

    def _state(self) -> tuple[set[str], set[str], set[str]]:
        git_dirs: set[str] = set()
        pointers: set[str] = set()
        commondirs: set[str] = set()
        for rel in self._interesting:
            watched = dict(self._listings[rel].watched)
            # The operator's stay theirs whatever they hold now: only the others are asked again.
            if may_be_git_dir(watched) and (rel in self.baseline_git_dirs or self._is_git_dir(rel)):
                git_dirs.add(rel)
                if "commondir" in watched:
                    commondirs.add(rel)
            if ".git" in watched and not watched[".git"]:
                pointers.add(_join(rel, ".git"))
        return git_dirs, pointers, commondirs

    def _is_git_dir(self, rel: str) -> bool:
        """sandbox.gitshape's answer for workspace/rel, opened without following a symlink."""
        try:
            fd = _open_beneath(self.workspace, rel)
        except PermissionError:
            self.unreadable.add(rel)  # made unreadable since it was listed: reported (fail closed)
            return False
        except OSError:
            return False  # gone, or swapped for a symlink or a file: its parent's listing changes too
        try:
            return gitshape.is_git_directory(fd)
        finally:
            os.close(fd)

    # -- keeping the listings current ---------------------------------------------------------

    def _refresh(self) -> None:
        if self._notify is not None and not self._full_walk_needed:
            if self._apply_events():
                return
        self._full_walk()

    def take_changes(self) -> Changes:
        """What changed in the workspace since the previous call (sandbox.Sandbox.take_changes): the paths
        inotify named and the directories whose entries changed. `complete` only when inotify saw
        the whole interval (no overflow, no watch missing, nothing unreadable) since that call;
        the numbers chain the intervals, so a caller can tell that none was taken by someone else."""
        self._refresh()
        taken = self._changes
        if self._notify is None or self.unreadable:
            taken.complete = False
        taken.listed = frozenset(self._listings)
        taken.specials = {rel: self._listings[rel].specials for rel in self._special}
        self._changes = Changes(taken.number + 1, complete=self._notify is not None)
        return taken

    def interval(self) -> tuple[int, int]:
        """The number of the interval of changes now open (the next take_changes returns it), and how
        many full walks the guard has made: while both stay, every change since is in that interval."""
        return self._changes.number, self._walks

    def _full_walk(self) -> None:
        self._walks += 1
        self._changes.complete = False  # a walk learns names, not what changed: the interval is not known
        if self._notify is not None:
            self._notify.close()
            self._notify = _Inotify.open(self._budget)
            self._wd_rel = {}
        old = self._listings  # reused only where the walk's ctime cache vouches for it (_cache_ok)
        self._listings, self._interesting, self._special, self.unreadable = {}, set(), set(), set()
        try:
            root = os.open(self.workspace, _DIR_FLAGS)
        except OSError:
            self.unreadable.add("")
            return
        self._walk(root, "", old)
        self._full_walk_needed = False
        if self._notify is None:  # keep only listings old enough to trust their ctime next time
            now = time.time_ns()
            self._cache_ok = {rel for rel, listing in self._listings.items() if listing.signature[2] < now - RECENT_NS}

    def _walk(self, root_fd: int, root_rel: str, cache: dict[str, _Listing]) -> None:
        """List root_fd's tree (closing every fd), watching each directory when inotify is on."""
        cache_ok: set[str] = getattr(self, "_cache_ok", set())
        stack: list[tuple[int, str]] = [(root_fd, root_rel)]
        while stack:
            fd, rel = stack.pop()
            try:
                if self._notify is not None:
                    wd = self._notify.watch(fd)
                    if wd is None:  # no more watches (our share, or the user's limit): walk from now on
                        self._notify.close()
                        self._notify = None
                        self._wd_rel = {}
                    else:
                        self._wd_rel[wd] = rel
                cached = cache.get(rel)
                st = os.fstat(fd)
                signature = (st.st_dev, st.st_ino, st.st_ctime_ns)
                if cached is not None and cached.signature == signature and rel in cache_ok:
                    listing = cached
                else:
                    listing = _list(fd, signature, self._census.directory(rel) if self._census is not None else None)
            except OSError:
                self.unreadable.add(rel)
                os.close(fd)
                continue
            self._set(rel, listing)
            for name in listing.subdirs:
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except PermissionError:
                    self.unreadable.add(_join(rel, name))
                    continue
                except OSError:
                    continue  # gone, or swapped for a non-directory since it was listed
                stack.append((child, _join(rel, name)))
            os.close(fd)

    def _set(self, rel: str, listing: _Listing) -> None:
        self._listings[rel] = listing
        if listing.watched:
            self._interesting.add(rel)
        else:
            self._interesting.discard(rel)
        if listing.specials:
            self._special.add(rel)
        else:
            self._special.discard(rel)

    def _drop_tree(self, rel: str) -> None:
        prefix = f"{rel}/"
        for key in [k for k in self._listings if k == rel or k.startswith(prefix)]:
            del self._listings[key]
            self._interesting.discard(key)
            self._special.discard(key)
        for wd in [w for w, r in self._wd_rel.items() if r == rel or r.startswith(prefix)]:
            del self._wd_rel[wd]

    def _apply_events(self) -> bool:
        """Bring the listings up to date from inotify events; False when a full walk is needed."""
        assert self._notify is not None
        dirty: set[str] = set()
        for wd, mask, *named in self._notify.read():  # (a test's stand-in may give no name)
            name = named[0] if named else ""
            if mask & _IN_Q_OVERFLOW:
                return False
            rel = self._wd_rel.get(wd)
            if rel is None:
                continue
            # (no name: the directory itself, its mode changed, say: whatever lies below it is named)
            self._changes.paths.add(_join(rel, name) if name else rel)
            if mask & _CHANGED:
                self._changes.dirs.add(rel)
            if mask & _IN_IGNORED:
                del self._wd_rel[wd]  # pragma: no mutate (equivalent: the parent's event makes _drop_tree drop it too)
                if rel == "":
                    return False  # the workspace itself went away (or was unmounted): look again
            elif mask & _CHANGED:
                dirty.add(rel)
        if self.unreadable:
            return False  # try again from the top until everything could be listed (fail closed)
        for rel in sorted(dirty, key=lambda r: r.count("/")):
            old = self._listings.get(rel)
            if old is None:
                continue  # dropped with an ancestor, or never listed
            try:
                fd = _open_beneath(self.workspace, rel)
            except PermissionError:
                # Made unreadable after it changed (chmod is no event): what it holds now is
                # unknown, so it is reported, and the next check walks from the top (fail closed).
                self.unreadable.add(rel)
                continue
            except OSError:
                continue  # gone: its parent's event drops it
            try:
                st = os.fstat(fd)
                try:
                    listing = _list(fd, (st.st_dev, st.st_ino, st.st_ctime_ns))
                except OSError:
                    self.unreadable.add(rel)
                    continue
                self._set(rel, listing)
                for name in old.subdirs - listing.subdirs:
                    self._drop_tree(_join(rel, name))
                for name in sorted(listing.subdirs - old.subdirs):
                    try:
                        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    except PermissionError:  # made and chmod'ed 000 before this check: report it
                        self.unreadable.add(_join(rel, name))
                        continue
                    except OSError:
                        continue
                    self._walk(child, _join(rel, name), {})
                    self._changes.new_dirs.add(_join(rel, name))  # and all below it: checkpoints list them whole
            finally:
                os.close(fd)
        return self._notify is not None

    # -- quarantine --------------------------------------------------------------------------

    def _quarantine_git_dir(self, rel: str) -> str:
        # HEAD first: a renamed .git directory is still a git directory to a git run inside it.
        note = self._quarantine(_join(rel, "HEAD"), f"a git directory at {self.workspace / rel}")
        if self._is_git_dir(rel):  # a HEAD made again meanwhile (a background job), or the rename failed
            return (
                f"the sandbox created a git directory at {self.workspace / rel}, and it still is one after "
                f"its HEAD was moved aside ({note or 'HEAD was gone'}): do not run git on the host in "
                f"{self.workspace / rel} or below it until a human has removed it."
            )
        if rel.rsplit("/", 1)[-1] == ".git":
            note = self._quarantine(rel, "a git repository (its HEAD is renamed too)")
        return note

    def _quarantine(self, rel: str, what: str) -> str:
        parent_rel, _, name = rel.rpartition("/")
        try:
            parent = _open_beneath(self.workspace, parent_rel)
        except OSError as exc:
            return f"could not open {self.workspace / parent_rel} to quarantine {what} at {self.workspace / rel}: {exc.strerror}"
        try:
            while True:
                target = f"{name}{QUARANTINE_SUFFIX}-{next(self._numbers)}"
                try:
                    os.stat(target, dir_fd=parent, follow_symlinks=False)
                except FileNotFoundError:
                    break
            try:
                os.rename(name, target, src_dir_fd=parent, dst_dir_fd=parent)
            except FileNotFoundError:
                return ""  # already gone
            except OSError as exc:
                return (
                    f"the sandbox created {what}, and moving {self.workspace / rel} aside failed ({exc.strerror}): "
                    "do not run git on the host in that directory until a human has removed it."
                )
        finally:
            os.close(parent)
        return (
            f"the sandbox created {what}: {self.workspace / rel} was renamed to {self.workspace / parent_rel / target} "
            "so that git on the host cannot run hooks or settings the sandbox wrote. Repositories cannot be created "
            "from the sandbox; if one is needed, a human can review it and rename it back."
        )


def _list(fd: int, signature: tuple[int, int, int], files: dict[str, Lstat] | None = None) -> _Listing:
    """The directory open as `fd`; `files`: given, gets the lstat of each regular file, symlink and `.git`
    (natively: a record where one holds it, sandbox/_listdir.c)."""
    if _native_listdir is None:
        return _list_python(fd, signature, files)
    subdirs, watched, specials, restat = _native_listdir(fd, _WATCHED, files)
    for name in restat:  # no record holds it (record() says when): the os.stat_result, as _note keeps it
        assert files is not None
        try:
            files[name] = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            del files[name]  # gone since it was listed
    return _Listing(signature, frozenset(subdirs), tuple(sorted(watched)), tuple(sorted(specials)))


def _list_python(fd: int, signature: tuple[int, int, int], files: dict[str, Lstat] | None = None) -> _Listing:
    """_list without the native listing (the same listing and records, slower)."""
    subdirs: list[str] = []
    watched: list[tuple[str, bool]] = []
    specials: list[tuple[str, int]] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            name = entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if is_dir:
                subdirs.append(name)
            elif not entry.is_file(follow_symlinks=False) and not entry.is_symlink():
                specials.append((name, _kind(entry)))
            elif files is not None:
                _note(files, entry)
            if name in _WATCHED:
                watched.append((name, is_dir))
                if files is not None and name == ".git" and name not in files:
                    _note(files, entry)  # a directory or a FIFO: a nested repository's, below which nothing is taken
    return _Listing(signature, frozenset(subdirs), tuple(sorted(watched)), tuple(sorted(specials)))


def _note(files: dict[str, Lstat], entry: os.DirEntry) -> None:
    try:
        st = entry.stat(follow_symlinks=False)  # fstatat below the directory's descriptor
    except OSError:
        return  # gone since it was listed
    files[entry.name] = record(st) or st


def _kind(entry: os.DirEntry) -> int:
    """S_IFMT of an entry that is no directory, file or symlink (its lstat; 0 when it is gone)."""
    try:
        return stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode)
    except OSError:
        return 0


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _open_beneath(workspace: Path, rel: str) -> int:
    """An fd of workspace/rel, opened component by component without following a symlink."""
    fd = os.open(workspace, _DIR_FLAGS)
    for part in [p for p in rel.split("/") if p]:
        try:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


# -- inotify, through libc (linux/inotify.h) ---------------------------------------------------------

_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
# For checkpoints (Changes): a file written, its mode or times changed, or closed after being open for
# writing -- the last also comes when a shared writable mapping of it goes away (munmap, exit), so a write
# through mmap, which makes no IN_MODIFY, is named once its writer is done.
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_CONTENT = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE
_IN_Q_OVERFLOW = 0x4000  # pragma: no mutate (0x4001 is equivalent: bit 0x1, IN_ACCESS, is never watched)
_IN_ONLYDIR = 0x01000000  # pragma: no mutate (+1 adds IN_ACCESS to the mask: extra events, all ignored)
_IN_IGNORED = 0x8000  # pragma: no mutate (0x8001 is equivalent: bit 0x1, IN_ACCESS, is never watched)
_CHANGED = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


class WatchBudget:
    """How many inotify watches some guards may hold together (thread-safe); see WATCH_SHARE."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def give(self, count: int) -> None:
        with self._lock:
            self.used -= count


def user_watch_share(max_user_watches: str = "/proc/sys/fs/inotify/max_user_watches") -> int:
    """1/WATCH_SHARE of the user's inotify watches (the kernel's limit, read now)."""
    try:
        with open(max_user_watches, encoding="ascii") as f:
            limit = int(f.read())
    except (OSError, ValueError):
        limit = DEFAULT_MAX_USER_WATCHES
    return limit // WATCH_SHARE


_process_budget: WatchBudget | None = None
_process_budget_lock = threading.Lock()


def process_watch_budget() -> WatchBudget:
    """The budget every guard of this process shares (a Sandbox's, each MCP server's), made at first use."""
    global _process_budget
    with _process_budget_lock:
        if _process_budget is None:
            _process_budget = WatchBudget(user_watch_share())
        return _process_budget


class _Inotify:
    """One inotify instance watching directories for entries created, deleted or moved, within a budget."""

    def __init__(self, fd: int, libc: ctypes.CDLL, budget: WatchBudget) -> None:
        self.fd = fd
        self._libc = libc
        self._budget = budget
        self._wds: set[int] = set()  # the watches the kernel holds for us (each counted once in the budget)

    @classmethod
    def open(cls, budget: WatchBudget) -> _Inotify | None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        return cls(fd, libc, budget) if fd >= 0 else None  # pragma: no mutate (> 0: fd 0 only when stdin is closed)

    def watch(self, dir_fd: int) -> int | None:
        """Watch the directory open as ``dir_fd`` (by its inode: no path is resolved again); None when
        the budget or the kernel has no watch left."""
        if not self._budget.take():
            return None
        wd = self._libc.inotify_add_watch(self.fd, f"/proc/self/fd/{dir_fd}".encode(), _CHANGED | _CONTENT | _IN_ONLYDIR)
        if wd < 0:  # pragma: no mutate (<= 0 is equivalent: inotify numbers watches from 1)
            self._budget.give(1)
            if ctypes.get_errno() in (errno.ENOSPC, errno.ENOMEM):
                return None
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        if wd in self._wds:
            self._budget.give(1)  # an inode watched already (a directory moved): the kernel gave the same watch
        else:
            self._wds.add(wd)
        return wd

    def read(self) -> list[tuple[int, int, str]]:
        """The events queued: (watch, mask, the entry's name or "" for the directory itself)."""
        events: list[tuple[int, int, str]] = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return events
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                if mask & _IN_IGNORED and wd in self._wds:  # the kernel dropped the watch (its directory is gone)
                    self._wds.discard(wd)
                    self._budget.give(1)
                name = data[offset + _EVENT.size:offset + _EVENT.size + length].split(b"\0", 1)[0]
                events.append((wd, mask, os.fsdecode(name)))
                offset += _EVENT.size + length

    def close(self) -> None:
        """Close the instance (the kernel drops its watches) and give its watches back, once."""
        if self.fd >= 0:  # pragma: no mutate (> 0 is equivalent: fd 0 only when stdin is closed)
            os.close(self.fd)
            self.fd = -1
            self._budget.give(len(self._wds))
