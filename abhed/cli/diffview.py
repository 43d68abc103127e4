"""Coloured diffs of what edit and write change, for the terminal.

The approval panel and the tool line after the call show the diff of the file itself (`file_diff`,
`render_file`): the file before and after, as the tool computes it (tools/preview.py), in hunks with
line numbers, context and the changed words marked (files/textdiff.py). /diff, which has only the
logged calls, shows their arguments (`render`). Bounded (MAX_LINES inline, with a note of what was
left out and how to see it); every line goes through printable()."""

from __future__ import annotations

import difflib
from typing import Any

from rich.text import Text

from abhed.common.terminal import printable
from abhed.files.textdiff import FileDiff, Line, compare
from abhed.tools import native_traits
from abhed.tools.base import ToolContext
from abhed.tools.preview import Preview, preview

MAX_LINES = 40
STYLES = {"+": "green", "-": "red", "@": "cyan"}
LINE_STYLES = {"+": "green", "-": "red", "@": "cyan", "\\": "dim", " ": ""}
MARK_STYLES = {"+": "bold reverse green", "-": "bold reverse red"}  # the changed words of a changed line


def shown(tool: str) -> bool:
    """Whether a call of `tool` is shown as a diff: a native tool that changes the file its path
    names (its traits: edits_files)."""
    traits = native_traits(tool)
    return traits is not None and traits.edits_files


def change_lines(tool: str, args: Any) -> list[str]:
    """The unified diff lines of an edit (old_string -> new_string), or a write's content as added lines."""
    if tool == "edit":
        old, new = str(getattr(args, "old_string", "") or ""), str(getattr(args, "new_string", "") or "")
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=2)
        return [line for line in diff if not line.startswith(("---", "+++"))]
    if tool == "write":
        return ["+" + line for line in str(getattr(args, "content", "") or "").splitlines()]
    return []


def render(tool: str, args: Any, max_lines: int = MAX_LINES) -> Text:
    """The change as coloured text, with its size, at most `max_lines` lines (the rest counted)."""
    lines = change_lines(tool, args)
    text = Text()
    if tool == "write":
        size = len(str(getattr(args, "content", "") or "").encode("utf-8", "surrogatepass"))
        text.append(f"{size} bytes, {len(lines)} lines\n", style="dim")
    elif tool == "edit":
        added = sum(line.startswith("+") for line in lines)
        removed = sum(line.startswith("-") for line in lines)
        every = " (every occurrence)" if getattr(args, "replace_all", False) else ""
        text.append(f"+{added} -{removed} lines{every}\n", style="dim")
    for line in lines[:max_lines]:
        text.append(printable(line) + "\n", style=STYLES.get(line[:1], "dim"))
    if len(lines) > max_lines:
        text.append(f"... {len(lines) - max_lines} more lines not shown\n", style="dim")
    text.rstrip()
    return text


def file_diff(tool: str, args: Any, ctx: ToolContext | None) -> tuple[Preview | None, FileDiff | None]:
    """What the call would do to its file, and the diff of it; (None, None) where nothing can say
    (not an edit or a write, no session yet)."""
    if ctx is None or not shown(tool) or args is None:
        return None, None
    change = preview(tool, args, ctx)
    if change is None or change.after is None:
        return change, None
    return change, compare(change.before, change.after)


def render_file(change: Preview | None, diff: FileDiff | None, max_lines: int | None = MAX_LINES,
                more: str = "") -> Text:
    """The diff with its summary line and notes, at most `max_lines` diff lines (None: all), the
    rest counted (`more`: how to see them, said after the count)."""
    text = Text()
    if change is not None and change.note:
        text.append(printable(change.note) + "\n", style="yellow")
    if diff is None:
        text.rstrip()
        return text
    if diff.unchanged and not diff.notes:
        text.append("no change: the file already has exactly this content\n", style="dim")
    elif not diff.unchanged:
        text.append(f"+{diff.added} -{diff.removed} lines\n", style="dim")
    for note in diff.notes:
        text.append(printable(note) + "\n", style="dim")
    lines = diff.lines if max_lines is None else diff.lines[:max_lines]
    width = _number_width(diff.lines)
    for line in lines:
        text.append_text(render_line(line, width))
    hidden = len(diff.lines) - len(lines) + diff.cut
    if hidden:
        where = more if len(diff.lines) > len(lines) else ""
        text.append(f"... {hidden} more diff lines not shown{where}\n", style="dim")
    text.rstrip()
    return text


def render_line(line: Line, width: int) -> Text:
    """One diff line: its old and new numbers, its sign, its text with the changed words marked."""
    out = Text()
    if line.kind in "@\\":
        out.append(printable(line.text) + "\n", style=LINE_STYLES[line.kind])
        return out
    numbers = f"{'' if line.old is None else line.old:>{width}} {'' if line.new is None else line.new:>{width}} "
    out.append(numbers, style="dim")
    style = LINE_STYLES[line.kind]
    out.append(f"{line.kind} ", style=style)
    at = 0
    for start, end in line.marks:
        out.append(printable(line.text[at:start]), style=style)
        out.append(printable(line.text[start:end]), style=MARK_STYLES.get(line.kind, style))
        at = end
    out.append(printable(line.text[at:]) + "\n", style=style)
    return out


def _number_width(lines: list[Line]) -> int:
    biggest = max((n for line in lines for n in (line.old, line.new) if n is not None), default=0)
    return max(3, len(str(biggest)))


def line_count(diff: FileDiff | None) -> int:
    return len(diff.lines) if diff is not None else 0
