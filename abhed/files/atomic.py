"""Atomic file replacement: the target is the old content or the new, never a mix (spec §3).

The data goes to a temporary file in the target's own directory (so the final rename cannot cross a
filesystem), gets the intended owner and mode, is fsync'd, and is renamed over the target; the
directory is fsync'd so the rename itself survives a power cut.

Everything happens relative to a descriptor of the directory (`replace_at`): the temporary file is
created there with O_EXCL|O_NOFOLLOW and renamed there, so a directory swapped for a symlink after
the caller checked it cannot redirect the write elsewhere.

A temporary file is named `.NAME.abhed-tmp-PID-RANDOM`. One left by a killed writer (its PID gone)
is removed the next time any writer touches that directory; listings never show them (`is_temp`).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import time
from pathlib import Path

from abhed.files.namelimits import NAME_MAX

TEMP_MARK = ".abhed-tmp-"
TEMP_NAME = re.compile(r"\..+\.abhed-tmp-(\d+)-[0-9a-f]{8}")
STALE_SECONDS = 24 * 3600  # a temp file this old is stale even if its PID was reused


class Conflict(Exception):
    """The target changed between the caller's read and the rename; nothing was written."""


def is_temp(name: str) -> bool:
    return TEMP_MARK in name and TEMP_NAME.fullmatch(name) is not None


def temp_name(name: str) -> str:
    """`.NAME.abhed-tmp-PID-RANDOM`, NAME shortened as needed to keep it within NAME_MAX bytes: a
    file may be named with up to 255 bytes, and its temporary name must exist too (issue 33 #5)."""
    tail = f"{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
    room = NAME_MAX - 1 - len(tail)
    while len(os.fsencode(name)) > room:
        name = name[:-1]  # by characters, so a multi-byte one is never split
    return f".{name}{tail}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process (we may not signal it): alive
    return True


def clean_stale(dirfd: int) -> list[str]:
    """Remove temporary files whose writer is gone (killed mid-write); return their names."""
    removed = []
    with os.scandir(dirfd) as entries:
        names = [e.name for e in entries if TEMP_MARK in e.name]
    for name in names:
        match = TEMP_NAME.fullmatch(name)
        if match is None:
            continue
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        old = time.time() - st.st_mtime > STALE_SECONDS  # pragma: no mutate  (> or >= differ only at one float instant)
        if int(match.group(1)) != os.getpid() and (old or not _alive(int(match.group(1)))):
            try:
                os.unlink(name, dir_fd=dirfd)
                removed.append(name)
            except FileNotFoundError:
                pass
    return removed


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data`: a short write (a disk filling up) is continued, and the next write raises."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def current_digest(dirfd: int, name: str) -> str | None:
    """sha256 of what `name` holds now (None: it does not exist), read without following a symlink."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
    except FileNotFoundError:
        return None
    try:
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    finally:
        os.close(fd)


def replace_at(dirfd: int, name: str, data: bytes, *, mode: int, owner: tuple[int, int] | None = None,
               expect: str | None | bool = False) -> None:
    """Atomically make the entry `name` of the directory `dirfd` hold exactly `data`, with `mode`.

    `owner` (uid, gid) is restored when the process may do so (root rewriting a user's file must not
    hand it to root); it is set before the mode, because a chown clears set-gid. `expect`: the
    sha256 the target must still have right before the rename (None: it must not exist; False:
    no check); otherwise `Conflict` is raised and nothing changes. On any failure the temporary file
    is removed and the exception propagates; the target is untouched.
    """
    clean_stale(dirfd)
    temp = temp_name(name)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dirfd)
    try:
        try:
            write_all(fd, data)
            if owner is not None:
                try:
                    os.fchown(fd, *owner)
                except PermissionError:
                    pass
            os.fchmod(fd, mode & 0o7777)
            os.fsync(fd)
        finally:
            os.close(fd)
        if expect is not False and current_digest(dirfd, name) != expect:
            raise Conflict(name)
        os.replace(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dirfd)
        except FileNotFoundError:
            pass
        raise
    os.fsync(dirfd)


def replace_unsynced(target: Path, data: bytes) -> None:
    """Replace `target`, a file of Abhed's own store rewritten after every event (events.head, the
    list summary), by a rename and without fsync: a reader sees the old or the new, and a power cut
    may keep an older one. On any failure the temporary file is removed and the error propagates."""
    temp = target.with_name(temp_name(target.name))
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)  # pragma: no mutate (equivalent: it exists whenever this runs)
        raise


def replace_file(target: Path, data: bytes, *, mode: int, owner: tuple[int, int] | None = None) -> None:
    """`replace_at` for a path Abhed owns (its session store, reports): not under the model's control."""
    dirfd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:  # a name like ".." is refused by the rename itself (EISDIR/ENOTEMPTY)
        replace_at(dirfd, target.name, data, mode=mode, owner=owner)
    finally:
        os.close(dirfd)
