"""One writer at a time per directory, across every process on the host (issues 14 and 33).

Two sessions may edit the same file, each after its own read; without a lock between the
"changed since you read it?" check and the rename (files/atomic.py), both succeed and one edit
vanishes. The lock is an `flock` on the descriptor of the target's directory itself, the one the
writer already holds (opened below its root, through no symlink): it belongs to the directory's
inode, so every process that writes there meets it, whatever path names the directory and
whatever its ABHED_HOME or user (flock needs only the read descriptor a writer has anyway). Two
files of one directory take turns; nothing else. flock locks belong to the open file description,
so two threads of one process, each with its own descriptor, exclude each other too.

Anyone who can open the directory can take the lock, a sandboxed command included (the workspace
is mounted into the sandbox), and hold it for ever. So the lock is only ever waited for until a
deadline, then `Busy` names the holders (from /proc/locks) and the caller says what to do.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FIRST_PAUSE_S = 0.001  # polls start fast (a write holds the lock for milliseconds) ...
LONGEST_PAUSE_S = 0.02  # ... and stay frequent, so a waiter is not starved by a busy neighbour
PROC_LOCKS = Path("/proc/locks")
WAIT_S = 10.0  # for Abhed's own files (config, pins); the tools wait files.lock_wait_s


class Busy(Exception):
    """The directory stayed locked by another holder past the deadline; nothing was done."""

    def __init__(self, waited_s: float, holders: list[str]) -> None:
        super().__init__(f"locked by {', '.join(holders) or 'an unknown process'} for {waited_s:g} s")
        self.waited_s = waited_s
        self.holders = holders


def _try(dirfd: int) -> bool:
    try:
        fcntl.flock(dirfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def acquire(dirfd: int, wait_s: float) -> None:
    """Take the lock of the directory `dirfd` within `wait_s` seconds, or raise `Busy`.

    Polled rather than blocking: a blocking flock cannot be given a deadline from a thread.
    Other OSErrors (ENOLCK, or EBADF where a filesystem cannot lock a read descriptor) propagate:
    the caller refuses the write rather than write unlocked.
    """
    deadline = time.monotonic() + wait_s
    pause = FIRST_PAUSE_S
    while not _try(dirfd):
        left = deadline - time.monotonic()
        if left <= 0:  # pragma: no mutate  (< and <= differ only at one float instant)
            raise Busy(wait_s, holders(dirfd))
        time.sleep(min(pause, left))
        pause = min(pause * 2, LONGEST_PAUSE_S)  # pragma: no mutate  (tuning: any pause up to the longest is correct)


@contextmanager
def locked(dirfd: int, wait_s: float) -> Iterator[None]:
    """Hold the lock of the directory `dirfd` for the duration of the block (see `acquire`)."""
    acquire(dirfd, wait_s)
    try:
        yield
    finally:
        fcntl.flock(dirfd, fcntl.LOCK_UN)


def _lock_key(dirfd: int) -> str:
    """How /proc/locks names the directory: MAJOR:MINOR:INODE, the device numbers in hex."""
    st = os.fstat(dirfd)
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"


def _describe(pid: str) -> str:
    try:
        name = Path(f"/proc/{pid}/comm").read_text(errors="replace").strip()
    except OSError:  # gone meanwhile, or hidden from us
        return f"PID {pid}"
    return f"PID {pid} ({name})"


def holders(dirfd: int) -> list[str]:
    """Who holds a lock on the directory now, as "PID n (command)"; [] when /proc cannot say."""
    key = _lock_key(dirfd)
    try:
        lines = PROC_LOCKS.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF". A waiter's line has "->" after the number,
        # which shifts its key out of this column: waiters are not holders.
        if fields[5:6] == [key]:
            found.append(_describe(fields[4]))
    return list(dict.fromkeys(found))

