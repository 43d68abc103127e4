"""Every file's lstat as the sandbox's start found it, handed to the workspace's first checkpoint (issue 34).

The sandbox's start walks the whole workspace once: the git guard's first walk (sandbox.gitguard)
watches each directory, lists it, and lstat's each file in it into the census. The hard-link
survey (sandbox.hardlinks) counts links from it instead of walking again, and the workspace's first
checkpoint, which must know which tracked files its repository's index still describes
(abhed/session/seed.py), takes each file's lstat from it instead of a second one (on the Linux
tree: two walks of 5,000 directories and 78,000 system calls with their Python, a quarter of a
second).

Why a stat taken earlier can stand in for one taken later: each directory's inotify watch is in
place before its files are stat'ed, so whatever changes a file after its census stat is named by
an event in the guard's interval of changes that was open then. That
interval is the one the first checkpoint takes: Sandbox.take_changes attaches the census to it
(and to no later one), and a consumer trusts a file's census stat only while neither the file nor
a directory above it is named there. What inotify does not name, the census cannot vouch for:

- a file with more than one name: a write through one name is named, the others are not (their
  stats are kept, and the consumer stats such a file again);
- a write through a shared writable mapping (the consumer reads mapped files again, as every
  snapshot does: abhed/session/mapped.py), or on a filesystem where inotify does not see every
  writer (the consumer asks mapped.trusted_filesystem, and uses no census there);
- anything after the guard lost events: an overflow of its queue, a watch it could not add, a
  directory it could not list. Each makes it walk again or walk without inotify, and then the
  census is given to nobody (``holds_for``).

Nothing is read through the census: it spares stat calls, so one that is dropped costs time, never
correctness.

How a file's lstat is kept (gitguard.record): packed as the 40 bytes git's index entry would hold
for the file, then its st_mode. The first checkpoint compares those bytes with the index's own, and
the native listing (sandbox/_listdir.c) never makes the Python os.stat_result of some twenty objects
(a third of the start's walk on the Linux tree). A file with more than one link, or a time or size
beyond git's 32 bits, is kept as an os.stat_result instead, so a record always stands for a file
with one name whose every field the index can hold exactly. Without the native listing (no C
compiler when Abhed was installed) the walk makes the same records in Python, slower.
"""

from __future__ import annotations

from sandbox.gitguard import Changes, GitGuard, Lstat

# Above this many files the census is dropped (some 200 bytes each while held): the first checkpoint
# of a larger tree stats its files itself, as without a census.
CENSUS_MAX = 400_000


class Census:
    """Each directory's regular files and symlinks (name -> lstat) as the start's walk found them, and
    its `.git` of any kind (a nested repository's: the consumer takes nothing below it), the
    directories that walk could not read, and the guard's interval it was taken in."""

    def __init__(self) -> None:
        self.dirs: dict[str, dict[str, Lstat]] | None = {}
        self.unreadable: tuple[str, ...] = ()
        self.number, self.walks = -1, -1  # (taken: the guard's interval once its start walk is over)
        self._count = 0
        self._last: dict[str, Lstat] = {}

    def directory(self, rel: str) -> dict[str, Lstat] | None:
        """Where the walk notes the files of the directory `rel` (workspace-relative), or None once
        the census holds too many and was dropped."""
        if self.dirs is None:
            return None
        self._count += len(self._last)  # the directory before, filled by now
        if self._count > CENSUS_MAX:
            self.dirs = None
            return None
        self._last = self.dirs[rel] = {}
        return self._last

    def taken(self, guard: GitGuard) -> Census:
        """The start walk is over: the interval it was taken in, and what it could not read."""
        self.number, self.walks = guard.interval()
        self.unreadable = tuple(sorted(guard.unreadable))
        return self

    def holds_for(self, changes: Changes, guard: GitGuard) -> bool:
        """Whether `changes` names every change made since the census was taken: it is the interval the
        census was taken in, and the guard has not walked since (it walks at every look when it has no
        inotify, or a directory it could not list, and after its event queue overflowed)."""
        return self.dirs is not None and changes.number == self.number and guard.interval()[1] == self.walks
