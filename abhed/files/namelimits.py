"""What no file name or path can be, said before anything touches the disk (issue 33 #5).

The kernel refuses a path component over NAME_MAX bytes and a path of PATH_MAX bytes or more
(ENAMETOOLONG); a tool that met that error deep in a write used to end in a traceback. So the
path boundary (paths.PathPolicy.resolve) checks both on the path as given and as resolved, and says
which component is too long, by how much, and what to send instead. The checks count bytes (UTF-8),
as the kernel does: 100 CJK characters are 300 bytes.

Line breaks and other control characters are legal in Linux names, and existing files so named
stay usable; but a *new* name holding one is refused (`control_error`): glob and grep list one path
per line, so the name would read as two paths, and such a path is almost always a copy that took
the end of its line with it.
"""

from __future__ import annotations

import os
import re

from abhed.common.errors import ToolError

NAME_MAX = 255  # bytes in one name (ext4, xfs, btrfs, tmpfs, overlayfs); a smaller limit surfaces as ENAMETOOLONG
PATH_MAX = 4096  # bytes the kernel takes in one path, its terminating NUL included
SHOWN = 40  # characters of an overlong name (or path) shown in a message
SHOWN_WHERE = 200  # characters of the directory holding it
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _size(text: str) -> int:
    return len(os.fsencode(text))


def _cut(text: str, limit: int = SHOWN) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."


def too_long(path: str, field: str = "path") -> ToolError | None:
    """The instruction for a path over a system limit (None: within them). `path` is absolute."""
    for position, name in enumerate(path.split("/")):
        size = _size(name)
        if size > NAME_MAX:
            where = "/".join(path.split("/")[:position]) or "/"
            return ToolError(
                f"`{field}` holds a name of {size} bytes ({_cut(name)!r}, in {_cut(where, SHOWN_WHERE)}), but a file or directory "
                f"name may have at most {NAME_MAX} bytes, so no file can have that path; nothing was read or written. "
                f"Use a shorter name (at most {NAME_MAX} bytes), or split it into directories.",
                reason="name_too_long", bytes=size, limit=NAME_MAX)
    size = _size(path)
    if size >= PATH_MAX:
        return ToolError(
            f"`{field}` is {size} bytes long ({_cut(path)!r}), but a path may have at most {PATH_MAX - 1} bytes, so "
            "the system cannot open it; nothing was read or written. Use a shorter path: fewer or shorter "
            "directories.", reason="path_too_long", bytes=size, limit=PATH_MAX - 1)
    return None  # pragma: no mutate  (deleted, the function returns None all the same)


def control_error(path: str, name: str, what: str = "file") -> ToolError | None:
    """The instruction for a new `name` (in `path`) holding a line break or another control character."""
    found = CONTROL.search(name)
    if found is None:
        return None
    clean = name[:found.start()]
    guess = f" Did you mean {os.path.join(os.path.dirname(path), clean)}?" if clean else ""
    return ToolError(
        f"Refused to create the {what} {path!r}: its name {name!r} holds the control character {found.group()!r} "
        f"at position {found.start()}; listings show one path per line, so the name would be ambiguous, and such a "
        f"path is usually a copy that took the end of its line with it. Nothing was written.{guess} Send the path "
        "without control characters.", reason="control_character")
