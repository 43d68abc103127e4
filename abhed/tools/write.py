"""write (spec §3): create a file or replace it whole, atomically, never over content unseen."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import Field

from abhed.files import beneath, filelock, namelimits, textfile
from abhed.gate import protected
from abhed.files.atomic import Conflict, replace_at
from abhed.common.traits import Traits
from abhed.common.errors import ToolError, explain_oserror
from abhed.files.filetype import SNIFF_BYTES, sniff
from abhed.session.store import HASH_LIMIT, ReadRecord, changed_since, digest
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


def _missing_dirs(path: Path) -> tuple[list[Path], Path]:
    """The missing ancestors of `path` (shallowest first) and the deepest existing one."""
    missing, existing = [], path.parent
    while not os.path.lexists(existing):
        missing.append(existing)
        existing = existing.parent
    return missing[::-1], existing


def open_parent(path: Path, ctx: ToolContext, *, may_create: bool) -> tuple[int, list[str]]:
    """A descriptor of the directory that holds `path`, opened below its root through no symlink,
    and the directories created to get it (only when `may_create`: a new file is being written).

    Raises FileNotFoundError when the directory is missing and may not be created.
    """
    try:
        return ctx.paths.open_dir(path.parent), []
    except FileNotFoundError:
        if not may_create:
            raise
    except NotADirectoryError:
        blocker = next((p for p in path.parents if os.path.lexists(p) and not os.path.isdir(p)), path.parent)
        raise ToolError(f"Cannot create {path}: {blocker} is a file, not a directory. Choose another path.") from None
    except OSError as exc:
        raise textfile.open_failed(exc, path.parent, ctx.paths.workspace, "writing") from None
    missing, existing = _missing_dirs(path)
    refuse_control([*((d, "directory") for d in missing), (path, "file")])  # before any directory is made
    if not ctx.settings.files.create_parents:
        raise ToolError(
            f"The parent directory {path.parent} does not exist, and creating directories is disabled by the operator "
            f"(files.create_parents = false). Create it first with bash (mkdir -p {path.parent}), or write into an "
            "existing directory.",
            reason="parent_missing",
        )
    try:
        fd = ctx.paths.open_dir(existing)
    except OSError as exc:
        raise textfile.open_failed(exc, existing, ctx.paths.workspace, "creating") from None
    try:
        for directory in missing:
            try:
                os.mkdir(directory.name, 0o755, dir_fd=fd)
            except FileExistsError:
                pass  # made meanwhile by someone else: opened below like any directory
            below = beneath.open_entry(fd, directory.name, os.O_RDONLY | os.O_DIRECTORY)
            os.close(fd)
            fd = below
    except OSError as exc:
        os.close(fd)
        raise textfile.open_failed(exc, path, ctx.paths.workspace, "creating") from None
    return fd, [str(d) for d in missing]


@contextmanager
def held(path: Path, ctx: ToolContext, *, may_create: bool) -> Iterator[tuple[int, list[str]]]:
    """The parent directory's descriptor (see `open_parent`), with that directory's write lock held
    (files/filelock.py): no other Abhed process, of any home or user, writes there until the block ends."""
    dirfd, made = open_parent(path, ctx, may_create=may_create)
    try:
        lock(dirfd, path, ctx.settings.files.lock_wait_s)
        yield dirfd, made
    finally:
        os.close(dirfd)  # releases the lock


def lock(dirfd: int, path: Path, wait_s: float) -> None:
    """Take the lock of `path`'s directory `dirfd` (filelock.acquire), or the instruction why not."""
    try:
        filelock.acquire(dirfd, wait_s)
    except filelock.Busy as exc:
        raise busy_error(path, exc) from None
    except OSError as exc:
        raise lock_failed(path, exc) from None


def busy_error(path: Path, exc: filelock.Busy) -> ToolError:
    who = ", ".join(exc.holders) or "a process Abhed cannot see"
    return ToolError(
        f"Nothing was written to {path}: its directory {path.parent} has been locked for {exc.waited_s:g} s by {who}. "
        "Abhed writes a file only under that lock, so that no other writer changes it at the same moment. If a "
        "command of yours holds it (e.g. `flock` in a background bash job), stop that command; if another Abhed "
        "session is writing there, wait for it; then retry. (The wait is files.lock_wait_s.)",
        reason="locked", holders=exc.holders)


def lock_failed(path: Path, exc: OSError) -> ToolError:
    return ToolError(
        f"Nothing was written to {path}: its directory {path.parent} could not be locked ({exc.strerror}, errno "
        f"{exc.errno}), and Abhed does not write without that lock, since another writer could change the file at the "
        "same moment and one change would be lost. The filesystem may not support locks (e.g. some network mounts): "
        "work on a copy on a local filesystem, or ask the user.", reason="lock_failed", errno=exc.errno)


def exists_in(dirfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def refuse_protected(raw: str, path: Path, ctx: ToolContext) -> None:
    workspace = ctx.paths.workspace
    why = (protected.operator_entry(raw, path, ctx.cwd, workspace, ctx.settings.sandbox.protected_paths)
           or protected.through_link(raw, path, ctx.cwd, workspace))
    if why:
        raise ToolError(why, reason="protected")


def changed_error(path: Path, record: ReadRecord | None, tool: str) -> ToolError:
    when = f" (read at {record.at:%H:%M:%S} UTC)" if record is not None else ""
    return ToolError(
        f"{path} changed on disk since you read it{when}: another process wrote it while this {tool} was being "
        f"prepared, and {tool} would discard that change. Nothing was written. Read it again, then retry.",
        reason="changed")


def replace(dirfd: int, path: Path, data: bytes, *, mode: int, owner: tuple[int, int] | None, expect: str | None | bool,
            record: ReadRecord | None, tool: str, action: str) -> os.stat_result:
    """Write through the directory descriptor; a lost race becomes the "changed since you read it" error."""
    try:
        replace_at(dirfd, path.name, data, mode=mode, owner=owner, expect=expect)
        return os.stat(path.name, dir_fd=dirfd, follow_symlinks=False)
    except Conflict:
        raise changed_error(path, record, tool) from None
    except OSError as exc:
        raise explain_oserror(exc, path, action, unchanged=action != "creating") from None


def refuse_control(new: list[tuple[Path, str]]) -> None:
    """Refuse to make a file or directory whose name holds a line break or another control character."""
    for path, what in new:
        error = namelimits.control_error(str(path), path.name, what)
        if error is not None:
            raise error


def kept_bom(old: bytes, data: bytes) -> tuple[bytes, list[str]]:
    """What a write over `old` writes: `data`, with the file's UTF-8 byte-order mark kept (and a
    note saying so). Also what the approval prompt's diff shows (tools/preview.py)."""
    if old.startswith(textfile.BOM) and not data.startswith(textfile.BOM):
        return textfile.BOM + data, ["Kept the file's UTF-8 byte-order mark."]
    return data, []


def create(path: Path, data: bytes, ctx: ToolContext, dirfd: int, made: list[str], tool: str) -> ToolResult:
    """Create `path` (absent: checked under the lock), in the directory `dirfd`."""
    refuse_control([(path, "file")])
    st = replace(dirfd, path, data, mode=ctx.settings.files.new_file_mode, owner=None, expect=None, record=None,
                 tool=tool, action="creating")
    ctx.session.remember(path, data if len(data) <= HASH_LIMIT else None, st.st_size, st.st_mtime_ns)
    dirs = f" Created the directories {', '.join(made)}." if made else ""
    return ok(f"Created {path}: wrote {len(data)} bytes, {count_lines(data)} lines.{dirs}", path=str(path),
              action="created", bytes_written=len(data), created_dirs=made)


class Write(Tool):
    name = "write"
    description = ("Write content to a file, creating it or overwriting it entirely. For modifying part of an "
                   "existing file, use `edit` instead — it is safer and cheaper.")
    Input = WriteInput
    traits = Traits(mutates=True, checkpoint=True)
    example = {"path": "WORKSPACE/notes.txt", "content": "first line\nsecond line\n"}

    def run(self, args: WriteInput, ctx: ToolContext) -> ToolResult:
        path = ctx.resolve(args.path)
        refuse_protected(args.path, path, ctx)
        data = encode(args.content, "content")
        with held(path, ctx, may_create=True) as (dirfd, made):
            if not exists_in(dirfd, path.name):
                return create(path, data, ctx, dirfd, made, self.name)
            return self._overwrite(path, data, ctx, dirfd)

    def _overwrite(self, path: Path, data: bytes, ctx: ToolContext, dirfd: int) -> ToolResult:
        fd, st = textfile.open_entry(dirfd, path.name, path, ctx.paths.workspace, "writing")
        record = ctx.session.last_read(path)
        try:
            with open(fd, "rb") as handle:
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
        data, notes = kept_bom(old, data)
        if whole is not None and b"\r\n" in whole and b"\n" in data and b"\r\n" not in data:
            notes.append("Note: the file used CRLF (\\r\\n) line endings; the new content uses LF (\\n).")
        if whole == data:
            return ok(f"Unchanged: {path} already has exactly this content ({len(data)} bytes); nothing was written.",
                      path=str(path), action="unchanged", bytes_written=0)
        # Over HASH_LIMIT there is no hash to re-check: the lock (and the size/mtime check) must do.
        expect = digest(whole) if whole is not None else False
        new_st = replace(dirfd, path, data, mode=st.st_mode, owner=(st.st_uid, st.st_gid), expect=expect,
                         record=record, tool=self.name, action="writing")
        ctx.session.remember(path, data if len(data) <= HASH_LIMIT else None, new_st.st_size, new_st.st_mtime_ns)
        text = f"Overwrote {path}: wrote {len(data)} bytes, {count_lines(data)} lines (was {st.st_size} bytes)."
        return ok(" ".join([text, *notes]), path=str(path), action="overwritten", bytes_written=len(data),
                  previous_bytes=st.st_size)
