"""A failure of the session store ($ABHED_HOME/sessions), told as an instruction.

The disk holding the store can fill up (ENOSPC, EDQUOT), go read-only (EROFS), fail (EIO) or refuse
this user (EACCES, EPERM). Every write path of the store (events.py, store.py) turns such an OSError
into a StoreError whose message names the store's path, what failed and what to free or fix; the
caller says whether the tool call's effect happened (dispatch.py). The rule that follows from it
(docs/security.md, "The session store"): no tool runs unless its action is in the log, and a run
whose store failed stops.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# What to do about each kind of failure; anything else is a disk or filesystem fault.
_FULL = (errno.ENOSPC, errno.EDQUOT)
_DENIED = (errno.EACCES, errno.EPERM)


class StoreError(Exception):
    """A write to the session store failed; `message` says where, why and what to do."""

    def __init__(self, message: str, path: Path, code: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.errno = code


def store_error(exc: OSError, path: Path, doing: str) -> StoreError:
    """`exc`, raised while `doing` (e.g. "append an event to") `path`, as an instruction."""
    code = exc.errno
    reason = exc.strerror or type(exc).__name__
    return StoreError(f"the session store could not {doing} {path} ({reason}); {advice(code, path)}", path, code)


def advice(code: int | None, path: Path) -> str:
    """What the human can do about a failure `code` at `path` of the store."""
    if code in _FULL:
        return (f"its filesystem is full{_free(path)}: free space there (old sessions are in {_sessions(path)}), "
                "or point ABHED_HOME to a larger disk")
    if code == errno.EROFS:
        return "its filesystem is read-only: remount it read-write, or point ABHED_HOME to a writable directory"
    if code in _DENIED:
        return (f"user {_user()} may not write there: give that user write access to {_sessions(path)} (chown or "
                "chmod), or point ABHED_HOME to a directory the user owns")
    return "the disk or filesystem failed: check it (dmesg, fsck), or point ABHED_HOME to another disk"


def _free(path: Path) -> str:
    for place in (path, *path.parents):  # the file may not exist: its nearest directory that does
        try:
            st = os.statvfs(place)
        except OSError:
            continue
        return f" ({st.f_bavail * st.f_frsize:,} bytes free)"
    return ""  # pragma: no mutate (unreachable: "/" always answers statvfs)


def _sessions(path: Path) -> Path:
    """The store's directory of sessions (…/sessions), from a path inside it."""
    for place in (path, *path.parents):
        if place.name == "sessions":
            return place
    return path.parent


def _user() -> str:
    import pwd  # only a refused write needs the name
    try:
        return f"{pwd.getpwuid(os.getuid()).pw_name} (uid {os.getuid()})"
    except KeyError:
        return f"uid {os.getuid()}"
