"""What an edit or a write would make of its file, without changing anything: the file's bytes
now and the bytes the tool would write, for the diff a human approves (cli/diffview.py).

The result is computed by the tools' own code (edit.replaced, write.kept_bom, write.encode), so the
diff shown is the change made, not a reimplementation that may disagree. The file is read like the
tools read it: through a descriptor of its directory opened below the workspace root (no symlink
followed), the file itself with O_NOFOLLOW, at most READ_LIMIT bytes. Nothing is locked or
written. A call the tool would refuse gets a note saying so instead of a diff.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abhed.common.errors import ToolError
from abhed.files import beneath, textdiff, textfile
from abhed.tools.base import ToolContext
from abhed.tools.edit import find_all, replaced
from abhed.tools.write import encode, exists_in, kept_bom

READ_LIMIT = textdiff.MAX_BYTES  # a bigger file is not compared anyway


@dataclass(frozen=True)
class Preview:
    """before: the file now (None: it does not exist); after: what the call would write (None: it
    would fail or could not be worked out, and `note` says why)."""

    path: Path | None
    before: bytes | None
    after: bytes | None
    note: str | None = None


class _TooLarge(Exception):
    pass


def preview(tool: str, args: Any, ctx: ToolContext) -> Preview | None:
    """The change a call of edit or write would make; None for any other tool."""
    work = {"edit": _edit, "write": _write}.get(tool)
    if work is None:
        return None
    try:
        raw = getattr(args, "path", None)
        if not isinstance(raw, str):
            return None
        path = ctx.resolve(raw)
    except ToolError as exc:
        return Preview(None, None, None, f"the call will fail: {exc.message}")
    try:
        return work(path, args, ctx)
    except ToolError as exc:
        return Preview(path, None, None, f"the call will fail: {exc.message}")
    except _TooLarge as exc:
        return Preview(path, None, None, str(exc))
    except OSError as exc:  # a read that failed half-way (EIO): no diff, and the question still asked
        return Preview(path, None, None, f"no diff: {path} could not be read ({exc.strerror or exc})")


def current(path: Path, ctx: ToolContext) -> bytes | None:
    """The file's content now (None: it does not exist), read below the workspace root."""
    try:
        dirfd = ctx.paths.open_dir(path.parent)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise textfile.open_failed(exc, path.parent, ctx.paths.workspace, "reading") from None
    try:
        if not exists_in(dirfd, path.name):
            return None
        fd, st = textfile.open_entry(dirfd, path.name, path, ctx.paths.workspace, "reading")
    finally:
        os.close(dirfd)
    try:
        if st.st_size > READ_LIMIT:
            raise _TooLarge(f"{path} is {st.st_size} bytes, over the {READ_LIMIT} bytes a diff is shown for")
        data = beneath.read_fd(fd, READ_LIMIT + 1)
    finally:
        os.close(fd)
    if len(data) > READ_LIMIT:  # it grew after the stat
        raise _TooLarge(f"{path} is over the {READ_LIMIT} bytes a diff is shown for")
    return data


def _edit(path: Path, args: Any, ctx: ToolContext) -> Preview:
    old, new = getattr(args, "old_string", None), getattr(args, "new_string", None)
    if not isinstance(old, str) or not isinstance(new, str):
        return Preview(path, None, None, "the edit will fail: old_string and new_string must both be text")
    before = current(path, ctx)
    if before is None:
        if old == "":
            return Preview(path, None, encode(new, "new_string"))
        return Preview(path, None, None, f"the edit will fail: {path} does not exist")
    if old == "":
        return Preview(path, before, None, f"the edit will fail: old_string is empty but {path} exists")
    if old == new:
        return Preview(path, before, None, "the edit will fail: old_string and new_string are identical")
    text = before.decode("utf-8", "surrogateescape")
    matches = len(find_all(text, old, 1, 2))  # pragma: no mutate  (any bound over 1 tells once from more)
    if matches == 0:
        return Preview(path, before, None, "the edit will fail: old_string is not in the file as it is now")
    replace_all = bool(getattr(args, "replace_all", False))
    if matches > 1 and not replace_all:
        return Preview(path, before, None, "the edit will fail: old_string matches more than once (replace_all is "
                                           "not set)")
    result, _ = replaced(text, old, new, replace_all)
    return Preview(path, before, encode(result, "new_string"))


def _write(path: Path, args: Any, ctx: ToolContext) -> Preview:
    content = getattr(args, "content", None)
    if not isinstance(content, str):
        return Preview(path, None, None, "the write will fail: content must be text")
    data = encode(content, "content")
    before = current(path, ctx)
    if before is None:
        return Preview(path, None, data)
    return Preview(path, before, kept_bom(before, data)[0])
