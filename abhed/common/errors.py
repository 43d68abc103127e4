"""The one exception tools raise, and plain-language explanations of OS errors.

A tool never lets an exception reach the model: it raises ToolError with a message that says what
failed, why, and what to do instead (rule 1), and the dispatcher turns it into an error observation.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any


class ToolError(Exception):
    """A failure the model can act on. `message` is shown to the model verbatim."""

    def __init__(self, message: str, **metadata: Any) -> None:
        super().__init__(message)
        self.message = message
        self.metadata = metadata


def _mode_and_owner(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return ""
    return f" (mode {st.st_mode & 0o7777:04o}, owner uid {st.st_uid}; Abhed runs as uid {os.geteuid()})"


def explain_oserror(exc: OSError, path: Path, action: str, *, unchanged: bool = False) -> ToolError:
    """Turn an OSError met while `action`-ing `path` into an instruction for the model.

    `unchanged` adds the promise that a failed write left the original file intact, which the
    atomic writer guarantees and which the model needs to know before retrying.
    """
    intact = f" The original {path} is unchanged." if unchanged else ""
    code = exc.errno
    if code in (errno.EACCES, errno.EPERM):
        why = f"Permission denied {action} {path}{_mode_and_owner(path)}."
        todo = "Choose a path Abhed may write, or ask the user to change the permissions."
    elif code == errno.EROFS:
        why = f"Cannot {action.removesuffix('ing')} {path}: it is on a read-only filesystem."
        todo = "Work on a copy under the workspace instead."
    elif code in (errno.ENOSPC, errno.EDQUOT):
        why = f"No space left on the device while {action} {path}."
        todo = "Ask the user to free disk space (check with `df -h` via bash), then retry."
    elif code == errno.EFBIG:
        why = f"The file is too large for the file-size limit while {action} {path}."
        todo = "Write less, or split the content over several files."
    elif code == errno.ENAMETOOLONG:
        shown = str(path) if len(str(path)) <= 120 else f"{str(path)[:120]}..."
        why = f"A name in {shown}, or the whole path, is too long for its filesystem (errno {code}) while {action} it."
        todo = "Use a shorter file name or path."
    elif code == errno.ENOTDIR:
        why = f"A component of {path} is a file, not a directory."
        todo = "Check the path with glob; a parent of this path is a regular file."
    elif code == errno.EISDIR:
        why = f"{path} is a directory."
        todo = "Give the path of a file inside it; use glob to list its files."
    else:
        why = f"{exc.strerror or type(exc).__name__} (errno {code}) while {action} {path}."
        todo = "Check the path with glob, then retry once; if it fails again, tell the user."
    return ToolError(f"{why}{intact} {todo}", errno=code)
