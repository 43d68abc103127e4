"""Coloured diffs of what edit and write change, for the terminal: the approval panel, the tool
line after the call, and /diff. Bounded (MAX_LINES, with a note of what was left out); every line
goes through printable()."""

from __future__ import annotations

import difflib
from typing import Any

from rich.text import Text

from abhed.common.terminal import printable
from abhed.tools import native_traits

MAX_LINES = 40
STYLES = {"+": "green", "-": "red", "@": "cyan"}


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
