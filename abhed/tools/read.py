"""read (spec §2): numbered lines, bounded, tracked in the read-set for edit/write safety."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from io import BufferedIOBase
from pathlib import Path

from pydantic import Field

from abhed.files import textfile
from abhed.common.traits import Traits
from abhed.common.errors import ToolError, explain_oserror
from abhed.files.lines import LineIndex, LineIndexCache, LineScanner
from abhed.session.store import HASH_LIMIT
from abhed.tools.base import LINE_CHARS, LINE_CUT_NOTE, Tool, ToolContext, ToolInput, ToolResult, ok

DEFAULT_LIMIT = 2000
# A line is cut at LINE_CHARS characters; a UTF-8 character is at most 4 bytes, and a few more
# bytes guarantee that an incomplete character at the cut lies past the kept characters.
LINE_BYTES = 4 * LINE_CHARS + 4
NOTES_RESERVE = 1000  # room kept in the output budget for the notes after the lines


class ReadInput(ToolInput):
    path: str = Field(description="Absolute path to the file.")
    offset: int | None = Field(None, ge=1, description="1-indexed line to start from. Use with limit for large files.")
    limit: int | None = Field(None, ge=1, description="Max lines to return. Default 2000.")


@dataclass
class Window:
    """The lines shown and the facts about the file the notes report."""

    first: int
    lines: list[str] = field(default_factory=list)
    total: int = 0
    invalid_utf8: bool = False
    crlf: int = 0
    bom: bool = False

    @property
    def last(self) -> int:
        return self.first + len(self.lines) - 1


def _decode(raw: bytes, cut: bool, window: Window) -> str:
    if raw.endswith(b"\r") and not cut:
        raw = raw[:-1]
        window.crlf += 1
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if cut and exc.start >= len(raw) - 3 and exc.reason == "unexpected end of data":
            text = raw[: exc.start].decode("utf-8", "replace")  # a character split by the byte cap
        else:
            text = raw.decode("utf-8", "replace")
        window.invalid_utf8 = window.invalid_utf8 or "\ufffd" in text[:LINE_CHARS]
    if cut or len(text) > LINE_CHARS:
        text = text[:LINE_CHARS] + LINE_CUT_NOTE
    return text


def scan_window(scanner: LineScanner, offset: int, limit: int, budget: int, total: int | None = None) -> Window:
    """Skip to `offset`, collect up to `limit` lines within `budget` characters, count the rest.

    `total`, when already known (from a line index), saves counting the rest of the file.
    """
    window = Window(first=offset)
    skipped = scanner.skip(offset - 1)
    used, pending = 0, 0  # pending: a line taken but left out by the budget, still to be counted
    while len(window.lines) < limit:
        taken = scanner.take(LINE_BYTES)
        if taken is None:
            break
        text = _decode(*taken, window)
        if offset == 1 and not window.lines and text.startswith("\ufeff"):
            text, window.bom = text[1:], True
        used += len(text) + max(6, len(str(offset + len(window.lines)))) + 2  # number, tab, newline
        if used > budget and window.lines:
            pending = 1
            break
        window.lines.append(text)
    window.total = total if total is not None else skipped + len(window.lines) + pending + scanner.count_rest()
    return window


def scan_file(handle: BufferedIOBase, path: Path, st: os.stat_result, offset: int, limit: int, budget: int,
              cache: LineIndexCache) -> tuple[Window, bytes | None]:
    """The window, and the whole content when the file is small enough to hash."""
    if st.st_size <= HASH_LIMIT:
        data = handle.read()
        return scan_window(LineScanner(data), offset, limit, budget), data
    index = cache.load(path, st)
    if index is None:
        marks: list[tuple[int, int]] = []
        window = scan_window(LineScanner(handle, marks=marks), offset, limit, budget)
        cache.save(path, st, LineIndex(window.total, marks))
        return window, None
    if offset > index.total:
        return Window(first=offset, total=index.total), None
    start, before = index.mark_before(offset)
    handle.seek(start)
    window = scan_window(LineScanner(handle), offset - before, limit, budget, index.total - before)
    window.first, window.total = offset, index.total
    return window, None


def render(window: Window) -> str:
    out = [f"{window.first + i:>6}\t{line}" for i, line in enumerate(window.lines)]
    if window.bom:
        out.append("[the file starts with a UTF-8 byte-order mark, not shown above; edit and write keep it]")
    if window.crlf:
        scope = "uses" if window.crlf == len(window.lines) else f"has {window.crlf} shown lines with"
        out.append(f"[this file {scope} CRLF (\\r\\n) line endings; the \\r is not shown. In edit, old_string "
                   "and new_string must use \\r\\n where the file does]")
    if window.invalid_utf8:
        out.append("[this file is not valid UTF-8: invalid bytes are shown as U+FFFD (\ufffd); edit cannot match "
                   "text that contains them]")
    if window.first > 1 or window.last < window.total:
        out.append(f"[truncated: showing lines {window.first}-{window.last} of {window.total}. "
                   "Use offset/limit to read more.]")
    return "\n".join(out)


class Read(Tool):
    name = "read"
    description = ("Read a file from the filesystem. Returns numbered lines. Prefer this over `cat` via bash "
                   "— output is bounded, numbered, and the read is tracked for edit safety. A PDF is returned "
                   "as its text page by page: for a PDF, offset and limit count pages, not lines. An image "
                   "(PNG, JPEG, GIF, WebP) is shown to you when this model can see images.")
    Input = ReadInput
    traits = Traits(reads_only=True, parallel=True)
    example = {"path": "WORKSPACE/src/main.py", "offset": 1, "limit": 200}

    def run(self, args: ReadInput, ctx: ToolContext) -> ToolResult:
        path = ctx.resolve(args.path)
        fd, st = textfile.open_existing(ctx.paths, path, "reading")
        offset, limit = args.offset or 1, args.limit or DEFAULT_LIMIT
        try:
            with open(fd, "rb") as handle:
                kind = textfile.sniff_file(handle)
                budget = ctx.settings.files.max_output_chars - NOTES_RESERVE
                if kind.family == "pdf":
                    from abhed.tools import media  # here: PDFs and images cost start-up (issue 18)
                    return media.read_pdf(ctx, path, handle, st, args.offset or 1, args.limit or DEFAULT_LIMIT,
                                          budget)
                if kind.family == "image" and ctx.vision is not None:
                    from abhed.tools import media
                    return media.read_image(ctx, path, handle, st, kind)
                if kind.family != "text":
                    raise textfile.refuse_non_text(path, kind, st.st_size)
                cache = LineIndexCache(ctx.settings.home / "cache" / "line-index")
                window, data = scan_file(handle, path, st, offset, limit, budget, cache)
        except OSError as exc:
            raise explain_oserror(exc, path, "reading") from None
        if 0 < window.total < offset:
            raise ToolError(
                f"offset {offset} is past the end of {path}: it has {window.total} lines. Use an offset from 1 to "
                f"{window.total}, or omit offset to read from the start.",
                total_lines=window.total,
            )
        # Only now has the model seen the file (an offset past the end showed it nothing).
        ctx.session.remember(path, data, st.st_size, st.st_mtime_ns)
        facts = {"path": str(path), "total_lines": window.total, "size": st.st_size}
        if window.total == 0:
            return ok("[file exists but is empty]", **facts, lines_shown=0)
        return ok(render(window), **facts, first_line=window.first, last_line=window.last,
                  lines_shown=len(window.lines))
