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

Cost: the first scan lists every directory. Later scans re-list only directories whose
(device, inode, ctime) changed -- creating, removing or renaming an entry changes its
directory's ctime, and ctime cannot be set from user space (``touch -d`` sets mtime and
bumps ctime) -- and otherwise open and fstat each directory once. Directories changed
within the last ``RECENT_NS`` are never trusted from the cache (a change in the same clock
tick as the scan would keep the old ctime). The walk opens each directory relative to its
parent with O_NOFOLLOW, so a background job swapping a directory for a symlink cannot send
it (or a rename) outside the workspace.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

# Entry names that make a directory a git directory, or a .git pointer.
_WATCHED = frozenset({".git", "HEAD", "objects", "refs", "commondir"})
RECENT_NS = 200_000_000  # 0.2 s: well above any filesystem timestamp granularity
QUARANTINE_SUFFIX = ".abhed-quarantined"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class _Listing:
    signature: tuple[int, int, int]
    subdirs: tuple[str, ...]
    watched: dict[str, bool]  # watched name present -> is it a real directory


def is_git_dir(watched: dict[str, bool]) -> bool:
    """git's own test (setup.c is_git_directory): HEAD, and objects/ + refs/ or a commondir."""
    return "HEAD" in watched and ("commondir" in watched or (watched.get("objects", False) and watched.get("refs", False)))


@dataclass
class GitGuard:
    workspace: Path
    baseline_git_dirs: frozenset[str] = frozenset()  # workspace-relative ("" is the workspace itself)
    baseline_pointers: frozenset[str] = frozenset()  # relative paths of .git files and symlinks
    baseline_commondirs: frozenset[str] = frozenset()  # git dirs that had a commondir at the start
    _cache: dict[str, _Listing] = field(default_factory=dict)
    _numbers: count = field(default_factory=lambda: count(1))
    unreadable: set[str] = field(default_factory=set)  # directories the last scan could not list

    @classmethod
    def start(cls, workspace: Path) -> GitGuard:
        guard = cls(workspace)
        git_dirs, pointers, commondirs = guard._survey()
        guard.baseline_git_dirs = frozenset(git_dirs)
        guard.baseline_pointers = frozenset(pointers)
        guard.baseline_commondirs = frozenset(commondirs)
        return guard

    def nested_protected_entries(self) -> tuple[str, ...]:
        """Protected-path entries for the repositories found at the start, beyond the workspace's own .git."""
        entries: list[str] = []
        for rel in sorted(self.baseline_git_dirs):
            if rel in ("", ".git"):
                if rel in self.baseline_commondirs:
                    entries.append(_join(rel, "commondir"))
                continue
            entries += [_join(rel, "config"), _join(rel, "hooks/"), _join(rel, "info/"), _join(rel, "modules/")]
            if rel in self.baseline_commondirs:
                entries.append(_join(rel, "commondir"))
        entries += sorted(p for p in self.baseline_pointers if p != ".git")
        return tuple(entries)

    def check(self) -> list[str]:
        """Quarantine what appeared since the start; one sentence per action, for the observation."""
        git_dirs, pointers, commondirs = self._survey()
        notes: list[str] = []
        for rel in sorted(pointers - self.baseline_pointers):
            notes.append(self._quarantine(rel, "a .git file or symlink (it points git at another repository)"))
        for rel in sorted(git_dirs - self.baseline_git_dirs):
            # HEAD first: a renamed .git directory is still a git directory to a git run inside it.
            note = self._quarantine(_join(rel, "HEAD"), f"a git directory at {self.workspace / rel}")
            if rel.rsplit("/", 1)[-1] == ".git":
                note = self._quarantine(rel, "a git repository (its HEAD is renamed too)")
            notes.append(note)
        for rel in sorted((commondirs & self.baseline_git_dirs) - self.baseline_commondirs):
            notes.append(self._quarantine(_join(rel, "commondir"), "a commondir (it redirects an existing repository)"))
        if notes:
            self._cache.clear()  # what we renamed changed directories we listed
        for rel in sorted(self.unreadable):
            notes.append(
                f"the directory {self.workspace / rel} cannot be read by Abhed, so it could not be checked for git "
                "repositories the sandbox created; make it readable (chmod u+rx) or remove it before running git there."
            )
        return [n for n in notes if n]

    # -- the walk ----------------------------------------------------------------------------

    def _survey(self) -> tuple[set[str], set[str], set[str]]:
        git_dirs: set[str] = set()
        pointers: set[str] = set()
        commondirs: set[str] = set()
        seen: dict[str, _Listing] = {}
        self.unreadable = set()
        now = time.time_ns()
        try:
            root = os.open(self.workspace, _DIR_FLAGS)
        except OSError:
            return git_dirs, pointers, commondirs
        stack: list[tuple[int, str]] = [(root, "")]
        while stack:
            fd, rel = stack.pop()
            try:
                listing = self._listing(fd, rel)
            except OSError:
                os.close(fd)
                self.unreadable.add(rel)
                continue
            seen[rel] = listing
            if is_git_dir(listing.watched):
                git_dirs.add(rel)
                if "commondir" in listing.watched:
                    commondirs.add(rel)
            if ".git" in listing.watched and not listing.watched[".git"]:
                pointers.add(_join(rel, ".git"))
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
        self._cache = {rel: listing for rel, listing in seen.items() if listing.signature[2] < now - RECENT_NS}
        return git_dirs, pointers, commondirs

    def _listing(self, fd: int, rel: str) -> _Listing:
        st = os.fstat(fd)
        signature = (st.st_dev, st.st_ino, st.st_ctime_ns)
        cached = self._cache.get(rel)
        if cached is not None and cached.signature == signature:
            return cached
        subdirs: list[str] = []
        watched: dict[str, bool] = {}
        with os.scandir(fd) as entries:
            for entry in entries:
                is_dir = entry.is_dir(follow_symlinks=False)
                if is_dir:
                    subdirs.append(entry.name)
                if entry.name in _WATCHED:
                    watched[entry.name] = is_dir
        return _Listing(signature, tuple(subdirs), watched)

    # -- quarantine --------------------------------------------------------------------------

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
