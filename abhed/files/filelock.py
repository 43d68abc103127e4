"""One writer at a time per target file, across every Abhed process on the machine (issue 14).

Two sessions may edit the same file, each after its own read; without a lock between the
"changed since you read it?" check and the rename, both succeed and one edit vanishes. The lock is
an `flock` on one of a fixed set of lock files in $ABHED_HOME/locks, chosen by the identity of the
target (its directory's device and inode, and its name), so it follows the file whatever path
names it, and the set stays bounded however many files are edited. Two files that share a slot
only take turns; nothing else.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SLOTS = 256


def slot(dirfd: int, name: str) -> int:
    st = os.fstat(dirfd)
    key = f"{st.st_dev}:{st.st_ino}:".encode() + os.fsencode(name)
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") % SLOTS


@contextmanager
def locked(home: Path, dirfd: int, name: str) -> Iterator[None]:
    """Hold the lock of the entry `name` in the directory `dirfd` for the duration of the block."""
    directory = home / "locks"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(directory / f"{slot(dirfd, name):03d}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
