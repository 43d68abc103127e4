"""Atomic file replacement: the target is the old content or the new, never a mix (spec §3).

The data goes to a temporary file in the target's own directory (so the final rename cannot cross a
filesystem), is fsync'd, gets the intended mode (and, best effort, the old owner), and is renamed
over the target; the directory is fsync'd so the rename itself survives a power cut.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TEMP_MARK = ".abhed-tmp-"


def _temp_name(target: Path) -> Path:
    return target.with_name(f".{target.name}{TEMP_MARK}{secrets.token_hex(4)}")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def replace_file(target: Path, data: bytes, *, mode: int, owner: tuple[int, int] | None = None) -> None:
    """Atomically make `target` hold exactly `data`, with permission bits `mode`.

    `owner` (uid, gid) is restored when the process may do so (root rewriting a user's file must not
    hand it to root); otherwise the rename leaves the writer as owner, as any editor would.
    On failure the temporary file is removed and the exception propagates; `target` is untouched.
    """
    temp = _temp_name(target)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
            os.fchmod(fd, mode)
            if owner is not None:
                try:
                    os.fchown(fd, *owner)
                except PermissionError:
                    pass
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(target.parent)
