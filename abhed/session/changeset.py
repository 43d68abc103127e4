"""Later snapshots from the git guard's change set instead of walks (issue 34).

The sandbox's git guard watches every directory of the workspace with inotify (sandbox.gitguard):
entries created, deleted or moved, files written, their mode or times changed, files closed after
being open for writing. Between two snapshots of one process it hands over what it saw
(`Changes`), and a snapshot then looks only there (so do an undo's reads of the workspace in the
process that runs the sandbox, chat's /undo: Shadow.current):

- new untracked files: the changed directories' entries not in the shadow index (and every file
  below a directory that appeared), kept when `git check-ignore` passes them -- instead of
  `ls-files -o`'s walk of the whole tree;
- FIFOs, sockets and devices: the changed directories are listed again, the others keep what the
  last snapshot found -- instead of listing every directory;
- the left-out entries (uncovered.py): the tops the change set touches are walked again, the
  others keep what the last survey found -- instead of `ls-files -o -i` and a walk of them all;
- tracked files changed in place: the tracked files the events name, and every covered file some
  process maps shared and writable now (mapped.py) -- instead of `diff-files`' lstat of every file.

What inotify cannot see must not be trusted from it:
- a write through a shared writable mapping makes no event while the mapping lives: only when it
  goes (munmap, exit: the last reference to the open file) does IN_CLOSE_WRITE name the file. Nor
  does the stat always move: the kernel updates mtime on the first write to a clean page only, so
  a second write to a page still dirty is seen by neither `diff-files` nor inotify. So a snapshot
  reads every covered file mapped shared and writable at the time (/proc/*/maps, mapped.py), in
  every process it may read; `diff-files` still runs where inotify does not see every writer (a
  filesystem outside mapped.LOCAL_FILESYSTEMS: NFS, SMB, FUSE, 9p, overlayfs), when mountinfo
  cannot be read, and in an "after" snapshot whenever a sandboxed process may still be alive (a
  background job, a server, a command of another thread, a microVM);
- a file with more than one name: a write through one name is named under that name only. Two
  names in the workspace: an event naming a file whose link count is above one makes the snapshot
  lstat every file. A name outside the workspace (a hard link made outside it, `ln`, `cp -al`) is
  no event at all, nor is the link's making: what is written through it is taken by the next
  snapshot that lstat's every file: every later one in a workspace of up to
  checkpoint.STAT_EVERY_FILE_UP_TO tracked files (see docs/security.md, which says what that leaves);
- an interval not wholly seen gets the full listing of a snapshot without a change set: the
  guard's queue overflowed, a watch could not be added, something could not be listed (the guard
  walks then, and says `complete` False), the guard started after the last snapshot, or another
  process wrote the shadow index since (its checksum is not the one this process left);
- so does what changes git's own listing of the tree: a `.gitignore` touched, the excludes
  changed, a `.git` entry in a changed directory (a repository inside), the workspace directory
  itself, or a nested repository or an unlistable directory named by the last listing touched.
"""

from __future__ import annotations

import os
import stat
from bisect import bisect_left
from dataclasses import dataclass, field

from abhed.session import gitindex, treeio


class Fallback(Exception):
    """The change set cannot answer this snapshot; the message says why (for tests and profiles)."""


@dataclass
class Listing:
    """What a snapshot must read: tracked files that may have changed, untracked ones that may be new
    (not yet passed through the ignore rules), directories that appeared or changed."""

    tracked: set[str] = field(default_factory=set)
    untracked: set[str] = field(default_factory=set)
    untracked_dirs: set[str] = field(default_factory=set)  # entries that are directories, for the survey's tops
    dirs: set[str] = field(default_factory=set)  # every directory listed here (changed, or below a new one)


class Names:
    """The shadow index's paths, sorted as git sorts them (bytes), for lookups by path and by prefix:
    bisected in the index's own entries (a list of them all would cost a pass over a kernel's 78,000)."""

    def __init__(self, entries: list[gitindex.Entry]) -> None:
        self.entries = entries
        self._dirs: list[str] | None = None
        self._mapped: tuple[frozenset[int], list[str]] = (frozenset(), [])
        self._has: dict[str, bool] = {}

    def with_inodes(self, inodes: set[int]) -> list[str]:
        """The paths whose entry has one of `inodes` (the low 32 bits, as the index keeps them): the covered
        files a process maps shared and writable now (mapped.py). One pass over the entries, kept while
        the same inodes are asked for again."""
        wanted = frozenset(inodes)
        if wanted and wanted != self._mapped[0]:
            keys = {i.to_bytes(4, "big") for i in wanted}
            self._mapped = (wanted, [os.fsdecode(e.name) for e in self.entries if e.raw[_INO] in keys])
        return self._mapped[1] if wanted else []

    def dirs(self) -> list[str]:
        """Every directory of a covered file, "" (the root) included, sorted; made once per index. One
        pass over the sorted names: a file's ancestors are looked at only when its directory differs
        from the previous file's, and only up to one already found (its ancestors are found too)."""
        if self._dirs is None:
            found = {b""}
            last = None
            for entry in self.entries:
                parent = entry.name.rpartition(b"/")[0]
                if parent == last:
                    continue
                last = parent
                while parent not in found:
                    found.add(parent)
                    parent = parent.rpartition(b"/")[0]
            self._dirs = sorted(os.fsdecode(d) for d in found)
        return self._dirs

    def _at(self, name: bytes) -> int:
        return bisect_left(self.entries, name, key=_name)

    def has(self, path: str) -> bool:
        known = self._has.get(path)
        if known is None:  # (each snapshot asks again for every top the last survey found: kept per index)
            name = os.fsencode(path)
            i = self._at(name)
            known = self._has[path] = i < len(self.entries) and self.entries[i].name == name
        return known

    def below(self, path: str) -> list[str]:
        """The paths under the directory `path` ("" is the root)."""
        prefix = os.fsencode(path) + b"/" if path else b""
        i = self._at(prefix)
        found = []
        while i < len(self.entries) and self.entries[i].name.startswith(prefix):
            found.append(os.fsdecode(self.entries[i].name))
            i += 1
        return found

    def is_dir(self, path: str) -> bool:
        """Whether `path` is a directory of a covered file."""
        if not path:
            return bool(self.entries)
        prefix = os.fsencode(path) + b"/"
        i = self._at(prefix)
        return i < len(self.entries) and self.entries[i].name.startswith(prefix)


_INO = slice(20, 24)  # an entry's inode in its stat data (ctime, mtime, dev, ino...: gitindex.STAT)


def _name(entry: gitindex.Entry) -> bytes:
    return entry.name


def check_listing_rules(touched_paths: set[str], carried: list[str]) -> None:
    """Fallback when the change set touches what decides git's listing itself (see the module docstring);
    `touched_paths`: the paths the events named ("" the workspace directory itself: its mode changed);
    `carried`: the nested repositories and unlistable directories the last full listing named."""
    if "" in touched_paths:
        raise Fallback("the workspace directory itself changed")
    for path in touched_paths:
        if path.rpartition("/")[2] == ".gitignore":
            raise Fallback(f"{path} changed: the ignore rules decide anew what is covered")
    for top in carried:
        if any(p == top or p.startswith(top + "/") or top.startswith(p + "/") for p in touched_paths):
            raise Fallback(f"{top} changed: git's listing names it")


def listing(tree: treeio.Tree, names: Names, paths: set[str], dirs: set[str], new_dirs: set[str],
            tracked_too: bool) -> Listing:
    """The candidates of one snapshot; `tracked_too`: the tracked files the events name (an "after"
    snapshot trusting inotify for in-place writes), else only untracked ones (diff-files does the rest)."""
    found = Listing()
    if tracked_too:
        for path in paths | new_dirs:
            if names.has(path):
                found.tracked.add(path)
            found.tracked.update(names.below(path))  # a directory removed, moved away or made unreadable
    walk = sorted(dirs | new_dirs)
    seen: set[str] = set()
    while walk:
        rel = walk.pop()
        if rel in seen or rel == ".git" or rel.startswith(".git/"):
            continue  # (the workspace's own repository: never part of the tree; repostate.py keeps it)
        seen.add(rel)
        new = any(rel == d or rel.startswith(d + "/") for d in new_dirs)
        for entry in _entries(tree, rel):
            path = f"{rel}/{entry.name}" if rel else entry.name
            if entry.name == ".git":
                if rel:
                    raise Fallback(f"{path} is in a changed directory: git decides whether it is a repository")
                continue  # the workspace's own repository: never a file of the tree (repostate.py keeps it)
            if entry.is_dir(follow_symlinks=False):
                if new or path in new_dirs:
                    found.untracked_dirs.add(path)
                    if not names.is_dir(path):
                        walk.append(path)
                continue
            if (entry.is_file(follow_symlinks=False) or entry.is_symlink()) and not names.has(path):
                found.untracked.add(path)
    found.dirs = seen
    return found


def linked(tree: treeio.Tree, paths: set[str]) -> bool:
    """Whether one of `paths` is a file with more than one name (a hard link): a write through one name
    is named by inotify under that name only, so the snapshot must lstat every tracked file."""
    for path in paths:
        parent, _, name = path.rpartition("/")
        try:
            fd = tree.dir(parent)
            st = os.stat(name, dir_fd=fd, follow_symlinks=False) if fd is not None else None
        except OSError:
            continue  # gone, or its directory cannot be opened: the read names it
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            return True
    return False


def _entries(tree: treeio.Tree, rel: str) -> list[os.DirEntry[str]]:
    try:
        fd = tree.dir(rel)
    except OSError as exc:
        raise Fallback(f"{rel or '.'} cannot be opened ({exc.strerror}): git names it") from None
    if fd is None:
        return []  # gone since the event: its parent's event names what went
    try:
        with os.scandir(fd) as listed:
            return list(listed)
    except OSError as exc:
        raise Fallback(f"{rel or '.'} cannot be listed ({exc.strerror}): git names it") from None


def specials(tree: treeio.Tree, names: Names, before: list[str], dirs: set[str]) -> list[str]:
    """FIFOs, sockets and devices in the covered files' directories: those found before outside the
    changed `dirs` (and still in a covered directory), and those in the changed ones now."""
    kept = [s for s in before if _dir_of(s) not in dirs and names.is_dir(_dir_of(s))]
    return sorted(kept + tree.specials(sorted(d for d in dirs if names.is_dir(d))))


def _dir_of(special: str) -> str:
    """The directory of a specials() line: "a/b/fifo (a FIFO: ...)" -> "a/b"."""
    path = special.rsplit(" (", 1)[0] if " (" in special else special
    return path.rpartition("/")[0]
