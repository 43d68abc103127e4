"""An existing file as the file tools meet it: found or not, a regular file or not, text or not.

read, write and edit share these checks so the same situation always gets the same instruction.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from abhed.errors import ToolError, explain_oserror
from abhed.filetype import SNIFF_BYTES, Kind, sniff
from abhed.suggest import glob_hint, similar_paths

BOM = b"\xef\xbb\xbf"


def human_size(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


def not_found(path: Path, workspace: Path) -> ToolError:
    hints = similar_paths(path, within=workspace)
    if hints:
        also = " or ".join(str(h) for h in hints)
        advice = f"Did you mean {also}? {glob_hint(path)}"
    else:
        advice = f"Nothing with a similar name exists near {path.parent}. {glob_hint(path)}"
    return ToolError(f"File not found: {path}. {advice}", suggestions=[str(h) for h in hints])


def stat_existing(path: Path, workspace: Path, action: str) -> os.stat_result:
    """stat() of an existing regular file, or the instruction for why it can't be used."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise not_found(path, workspace) from None
    except OSError as exc:
        raise explain_oserror(exc, path, action) from None
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
    return st


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


def load(path: Path, workspace: Path, max_bytes: int, action: str) -> tuple[bytes, os.stat_result]:
    """The whole content of an existing text file, for tools that must rewrite it."""
    st = stat_existing(path, workspace, action)
    if st.st_size > max_bytes:
        raise ToolError(
            f"{path} is {human_size(st.st_size)}, over the {human_size(max_bytes)} limit for {action} a file "
            "in memory. Change it with bash (e.g. sed -i or a small script), or ask the operator to raise "
            "files.edit_max_bytes."
        )
    try:
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            data = handle.read()
    except OSError as exc:
        raise explain_oserror(exc, path, action) from None
    kind = sniff(data[:SNIFF_BYTES])
    if kind.family != "text":
        raise refuse_non_text(path, kind, len(data))
    return data, st
