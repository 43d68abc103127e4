"""A pager inside the chat: long text shown a screenful at a time, each page after an Enter, `q`
back to where it was asked from (the approval question). No external program (`less` runs
commands of its own and may be missing on an air-gapped host); the pages stay in the terminal's
scrollback. The text is already printable (diffview made it so)."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.text import Text

MIN_PAGE = 5


def page(text: Text, console: Console, read: Callable[[str], str]) -> None:
    """Show `text` a page at a time; Enter for the next page, q (or Ctrl-D, Ctrl-C) to stop."""
    lines = text.split("\n", allow_blank=True)
    size = max(MIN_PAGE, console.height - 2)  # room for the prompt line below the page
    at = 0
    while at < len(lines):
        end = min(len(lines), at + size)
        for line in lines[at:end]:
            console.print(line)  # a long line wraps: nothing of it is hidden
        if end == len(lines):
            console.print(Text(f"-- end of the diff ({len(lines)} lines); back to the question --", style="dim"))
            return
        try:
            answer = read(f"-- lines {at + 1}-{end} of {len(lines)}: Enter for more, q to go back to the question -- ")
        except (EOFError, KeyboardInterrupt):
            answer = "q"
        if answer.strip().lower() in ("q", "quit"):
            return
        at = end
