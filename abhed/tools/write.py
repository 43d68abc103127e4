"""write (spec §3): create a file or replace it whole, atomically, never over content unseen."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field

from abhed import textfile
from abhed.atomic import replace_file
from abhed.errors import ToolError, explain_oserror
from abhed.filetype import SNIFF_BYTES, sniff
from abhed.session import HASH_LIMIT, changed_since
from abhed.tools.base import Tool, ToolContext, ToolInput, ToolResult, ok


class WriteInput(ToolInput):
    path: str = Field(description="Absolute path.")
    content: str = Field(description="Complete file content.")


def encode(text: str, field: str) -> bytes:
    """UTF-8 bytes of model-supplied text; surrogateescape keeps undecodable bytes of the file intact."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise ToolError(
            f"`{field}` contains a lone surrogate {text[exc.start]!r} at character {exc.start}, which cannot be "
            "written as UTF-8. Use the real character, or a valid \\uXXXX\\uXXXX surrogate pair in the JSON."
        ) from None


def count_lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def not_read_error(path: Path, tool: str) -> ToolError:
    return ToolError(
        f"You have not read {path} in this session, so {tool} will not change it: it would destroy content you "
        f'never saw. Call read with {{"path": "{path}"}} first, then retry the {tool}.',
        reason="not_read",
    )


def ensure_parent(path: Path, ctx: ToolContext) -> list[str]:
    """Make sure the directory for a new file exists; return the directories created."""
    parent = path.parent
    if parent.is_dir():
        return []
    blocker = next((p for p in [parent, *parent.parents] if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ToolError(f"Cannot create {path}: {blocker} is a file, not a directory. Choose another path.")
    if not ctx.settings.files.create_parents:
        raise ToolError(
            f"The parent directory {parent} does not exist, and creating directories is disabled by the operator "
            f"(files.create_parents = false). Create it first with bash (mkdir -p {parent}), or write into an "
            "existing directory.",
            reason="parent_missing",
        )
    missing = [p for p in [parent, *parent.parents] if not p.exists()][::-1]
    for directory in missing:
        ctx.resolve(str(directory))  # each new directory must itself be inside the roots
        os.mkdir(directory, 0o755)
    return [str(d) for d in missing]


def create(path: Path, data: bytes, ctx: ToolContext) -> ToolResult:
    try:
        made = ensure_parent(path, ctx)
        replace_file(path, data, mode=ctx.settings.files.new_file_mode)
        st = path.stat()
    except OSError as exc:
        raise explain_oserror(exc, path, "creating") from None
    ctx.session.remember(path, data if len(data) <= HASH_LIMIT else None, st.st_size, st.st_mtime_ns)
    dirs = f" Created the directories {', '.join(made)}." if made else ""
    return ok(f"Created {path}: wrote {len(data)} bytes, {count_lines(data)} lines.{dirs}", path=str(path),
              action="created", bytes_written=len(data), created_dirs=made)


class Write(Tool):
    name = "write"
    description = ("Write content to a file, creating it or overwriting it entirely. For modifying part of an "
                   "existing file, use `edit` instead — it is safer and cheaper.")
    Input = WriteInput
    read_only = False
    example = {"path": "WORKSPACE/notes.txt", "content": "first line\nsecond line\n"}

    def run(self, args: WriteInput, ctx: ToolContext) -> ToolResult:
        path = ctx.resolve(args.path)
        data = encode(args.content, "content")
        if not os.path.lexists(path):
            return create(path, data, ctx)
        return self._overwrite(path, data, ctx)

    def _overwrite(self, path: Path, data: bytes, ctx: ToolContext) -> ToolResult:
        st = textfile.stat_existing(path, ctx.paths.workspace, "writing")
        record = ctx.session.last_read(path)
        try:
            with open(path, "rb") as handle:
                old = handle.read() if st.st_size <= HASH_LIMIT else handle.read(SNIFF_BYTES)
        except OSError as exc:
            raise explain_oserror(exc, path, "writing") from None
        if record is None:
            kind = sniff(old[:SNIFF_BYTES])
            if kind.family != "text":
                raise ToolError(f"{path} exists and is a {kind.name}; write only replaces files you have read, and "
                                "binary files cannot be read. If you mean to replace it, delete it with bash first.")
            raise not_read_error(path, self.name)
        whole = old if st.st_size <= HASH_LIMIT else None
        if changed_since(record, whole, st.st_size, st.st_mtime_ns):
            raise ToolError(
                f"{path} changed on disk since you read it (read at {record.at:%H:%M:%S} UTC; now {st.st_size} bytes, "
                f"then {record.size}). Writing would discard those changes. Read it again, then retry the write.",
                reason="changed",
            )
        notes = []
        if old.startswith(textfile.BOM) and not data.startswith(textfile.BOM):
            data = textfile.BOM + data
            notes.append("Kept the file's UTF-8 byte-order mark.")
        if whole is not None and b"\r\n" in whole and b"\n" in data and b"\r\n" not in data:
            notes.append("Note: the file used CRLF (\\r\\n) line endings; the new content uses LF (\\n).")
        if whole == data:
            return ok(f"Unchanged: {path} already has exactly this content ({len(data)} bytes); nothing was written.",
                      path=str(path), action="unchanged", bytes_written=0)
        try:
            replace_file(path, data, mode=st.st_mode & 0o7777, owner=(st.st_uid, st.st_gid))
            new_st = path.stat()
        except OSError as exc:
            raise explain_oserror(exc, path, "writing", unchanged=True) from None
        ctx.session.remember(path, data if len(data) <= HASH_LIMIT else None, new_st.st_size, new_st.st_mtime_ns)
        text = f"Overwrote {path}: wrote {len(data)} bytes, {count_lines(data)} lines (was {st.st_size} bytes)."
        return ok(" ".join([text, *notes]), path=str(path), action="overwritten", bytes_written=len(data),
                  previous_bytes=st.st_size)
