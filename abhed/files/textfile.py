"""An existing file as the file tools meet it: found or not, a regular file or not, text or not.

read, write and edit share these checks so the same situation always gets the same instruction.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from abhed.files import beneath, namelimits
from abhed.common.errors import ToolError, explain_oserror
from abhed.files.filetype import SNIFF_BYTES, Kind, sniff
from abhed.files.paths import PathPolicy, swapped_error
from abhed.files.suggest import glob_hint, similar_paths

BOM = b"\xef\xbb\xbf"


def human_size(size: int) -> str:
    scaled: float = size
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if scaled < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "bytes" else f"{scaled:.1f} {unit}"
        scaled /= 1024
    return ""


def not_found(path: Path, workspace: Path) -> ToolError:
    control = namelimits.CONTROL.search(str(path))
    if control is not None:  # a path copied with the end of its line, most likely
        clean = str(path)[:control.start()].rstrip("/") or "/"
        return ToolError(f"File not found: {str(path)!r}: the path holds the control character {control.group()!r} "
                         f"at position {control.start()}, which file names seldom do. Did you mean {clean}? Send the "
                         "path without it.", suggestions=[clean])
    hints = similar_paths(path, within=workspace)
    if hints:
        also = " or ".join(str(h) for h in hints)
        advice = f"Did you mean {also}? {glob_hint(path)}"
    else:
        advice = f"Nothing with a similar name exists near {path.parent}. {glob_hint(path)}"
    return ToolError(f"File not found: {path}. {advice}", suggestions=[str(h) for h in hints])


def check_regular(path: Path, st: os.stat_result) -> None:
    """The instruction for why a file that is not a regular file cannot be used, if it is not."""
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(
            f"{path} is a directory, not a file. Use glob with path {path} (e.g. pattern \"*\") to list "
            "its files, then read the one you need."
        )
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(
            f"{path} is not a regular file (it is a {_special_kind(st.st_mode)}); reading it could block "
            "or never end. Only regular files can be used with the file tools."
        )


def open_failed(exc: OSError, path: Path, workspace: Path, action: str) -> ToolError:
    if isinstance(exc, FileNotFoundError):
        return not_found(path, workspace)
    if exc.errno in beneath.ESCAPES:
        return swapped_error(path, action)
    return explain_oserror(exc, path, action)


def open_existing(paths: PathPolicy, path: Path, action: str) -> tuple[int, os.stat_result]:
    """A read descriptor of the existing regular file `path` (opened below its root, through no
    symlink) and its stat, or the instruction for why it can't be used. The caller closes it."""
    try:
        fd = paths.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: a FIFO must not hang the open
    except OSError as exc:
        raise open_failed(exc, path, paths.workspace, action) from None
    return _regular(fd, path)


def open_entry(dirfd: int, name: str, path: Path, workspace: Path, action: str) -> tuple[int, os.stat_result]:
    """`open_existing` for the entry `name` of the directory `dirfd` (writers hold the directory)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    except OSError as exc:
        raise open_failed(exc, path, workspace, action) from None
    return _regular(fd, path)


def _regular(fd: int, path: Path) -> tuple[int, os.stat_result]:
    """`fd` and its stat when it is a regular file; else it is closed and the instruction raised."""
    try:
        st = os.fstat(fd)
        check_regular(path, st)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "named pipe"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def refuse_non_text(path: Path, kind: Kind, size: int) -> ToolError:
    """The instruction for a file whose bytes must not be shown as text."""
    detail = f", {kind.detail}" if kind.detail else ""
    what = f"{path} is a {kind.name}{detail}, {human_size(size)}."
    if kind.family == "image":
        todo = ("This model endpoint takes text only, so Abhed cannot show the image. If you need facts about "
                "it, use bash (e.g. `file` or `identify`), or ask the user to describe it.")
    elif kind.family == "pdf":
        todo = ("This model endpoint takes text only, so Abhed cannot show the PDF. If `pdftotext` is installed, "
                f"extract its text with bash: pdftotext {path} - | head -200.")
    elif kind.family == "utf16":
        todo = (f"The file tools read UTF-8 only. Convert a copy with bash: iconv -f UTF-16 -t UTF-8 {path} "
                "> /tmp/copy.txt, then read the copy.")
    else:
        todo = ("Binary content is not shown: it would be noise to you. Inspect it with bash "
                f"(e.g. `file {path}`, `xxd {path} | head`), or find the source file it was built from.")
    return ToolError(f"{what} {todo}", file_type=kind.name)


def sniff_file(handle) -> Kind:
    head = os.pread(handle.fileno(), SNIFF_BYTES, 0)
    return sniff(head)


def load(fd: int, st: os.stat_result, path: Path, max_bytes: int, action: str) -> bytes:
    """The whole content of an open text file, for tools that must rewrite it."""
    try:
        data = beneath.read_fd(fd, max_bytes + 1) if st.st_size <= max_bytes else b""
    except OSError as exc:
        raise explain_oserror(exc, path, action) from None
    if st.st_size > max_bytes or len(data) > max_bytes:  # len: it grew after the stat
        raise ToolError(
            f"{path} is {human_size(max(st.st_size, len(data)))}, over the {human_size(max_bytes)} limit for {action} "
            "a file in memory. Change it with bash (e.g. sed -i or a small script), or ask the operator to raise "
            "files.edit_max_bytes."
        )
    kind = sniff(data[:SNIFF_BYTES])
    if kind.family != "text":
        raise refuse_non_text(path, kind, len(data))
    return data
