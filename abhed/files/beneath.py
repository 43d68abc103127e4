"""Opening a path below a root so that no symlink can lead the open out of it, race-free.

The path tools get has been resolved and checked (paths.PathPolicy), but anything in the workspace
can change between that check and the open: a sandboxed command may swap a directory for a symlink
to /root in a loop (renameat2 RENAME_EXCHANGE). So the check is not trusted at open time: the path
is opened relative to a descriptor of its root, refusing every symlink on the way. What is opened
is therefore exactly a file below the root, whatever happened in between.

- Linux >= 5.6: one `openat2(root_fd, rel, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` call (ctypes).
- Otherwise (or where seccomp hides openat2): the path is walked component by component from the
  root's descriptor with `O_NOFOLLOW`, each directory opened from its parent's descriptor.

A refused symlink raises OSError(ELOOP) (a component was a symlink) or OSError(EXDEV) (the
resolution left the root); callers turn them into `SymlinkRace` errors with a message.
Writers work on a directory descriptor from `open_dir` (create the temporary file, rename it,
fsync) so the directory that was checked is the one written.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from contextlib import contextmanager
from collections.abc import Iterator
from pathlib import Path

SYS_OPENAT2 = 437  # the same number on every architecture (asm-generic, Linux 5.6)
RESOLVE_NO_XDEV, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x01, 0x02, 0x04, 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
ESCAPES = (errno.ELOOP, errno.EXDEV)  # what a refused symlink (or an escape) looks like


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        return libc
    except (OSError, AttributeError):
        return None


_libc = _load_libc()
_openat2_works: bool | None = None  # probed on first use


def _openat2(dirfd: int, rel: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, RESOLVE)
    fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd), ctypes.c_char_p(os.fsencode(rel)),
                       ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), rel)
    return fd


def openat2_available() -> bool:
    """Whether the kernel (and any seccomp filter around us) offers openat2."""
    global _openat2_works
    if _openat2_works is None:
        _openat2_works = False
        if _libc is not None:
            root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.close(_openat2(root, ".", os.O_PATH | os.O_DIRECTORY, 0))
                _openat2_works = True
            except OSError as exc:
                _openat2_works = exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL)
            finally:
                os.close(root)
    return _openat2_works


def _parts(root: Path, path: Path) -> list[str]:
    rel = os.path.relpath(path, root)
    if rel == ".":
        return []
    parts = rel.split("/")
    if ".." in parts or os.path.isabs(rel):
        raise OSError(errno.EXDEV, f"{path} is not below {root}", str(path))
    return parts


def _walk(rootfd: int, parts: list[str], flags: int, mode: int) -> int:
    """The fallback: one openat per component, never following a symlink."""
    fd = os.dup(rootfd)
    try:
        for part in parts[:-1]:
            nxt = _open_one(fd, part, os.O_PATH | os.O_DIRECTORY, 0)
            os.close(fd)
            fd = nxt
        return _open_one(fd, parts[-1], flags, mode)
    finally:
        os.close(fd)


def open_entry(dirfd: int, name: str, flags: int, mode: int = 0o600) -> int:
    """Open the entry `name` of the directory `dirfd`, never following it if it is a symlink
    (OSError ELOOP, also when O_DIRECTORY would have said ENOTDIR)."""
    return _open_one(dirfd, name, flags, mode)


def _open_one(dirfd: int, name: str, flags: int, mode: int) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dirfd)
    except NotADirectoryError:  # O_DIRECTORY on a symlink says ENOTDIR: name the real reason
        if stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, "a path component is a symbolic link", name) from None
        raise


def open_at(rootfd: int, root: Path, path: Path, flags: int, mode: int = 0o600, *, force_walk: bool = False) -> int:
    """A descriptor for `path` (below `root`, whose descriptor is `rootfd`), never via a symlink."""
    return open_rel(rootfd, _parts(root, path), flags, mode, force_walk=force_walk)


def open_rel(rootfd: int, parts: list[str], flags: int, mode: int = 0o600, *, force_walk: bool = False) -> int:
    """A descriptor for the path `parts` (components, no "..") below the directory `rootfd`, never via a symlink."""
    if ".." in parts:
        raise OSError(errno.EXDEV, "'..' leads out", "/".join(parts))
    if not parts:
        return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=rootfd)
    if not force_walk and openat2_available():
        return _openat2(rootfd, "/".join(parts), flags, mode)
    return _walk(rootfd, parts, flags, mode)


def open_beneath(root: Path, path: Path, flags: int, mode: int = 0o600, *, force_walk: bool = False) -> int:
    """Open `path`, which must lie below the directory `root`, without following any symlink.

    `flags` are os.open flags (O_NOFOLLOW is implied for the last component). The caller closes
    the descriptor. Raises OSError; ELOOP/EXDEV mean a symlink was met (see `ESCAPES`).
    """
    rootfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_at(rootfd, root, path, flags, mode, force_walk=force_walk)
    finally:
        os.close(rootfd)


@contextmanager
def opened(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def read_fd(fd: int, limit: int | None = None) -> bytes:
    """Everything from `fd`'s current offset (at most `limit` bytes)."""
    chunks, got = [], 0
    while limit is None or got < limit:
        chunk = os.read(fd, 1 << 20 if limit is None else min(1 << 20, limit - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
