"""A reply streamed as markdown, one finished block at a time.

A block (a paragraph, a list, a heading, a fenced code block) is printed once it is complete: a
blank line outside a fence, or the closing fence. Rich lays it out at the terminal's width, so no
word is broken mid-line, and code is highlighted. All text goes through printable() first.
Until then `pending` holds the block being written: the chat's status line shows it raw
(cli/activity.py), so a long paragraph is read as it streams.
"""

from __future__ import annotations

from functools import cache

from rich.console import Console
from rich.text import Text

from abhed.common.terminal import printable


@cache
def _markdown() -> type | None:
    """rich's Markdown, loaded with the first reply rather than at start-up (it brings markdown-it:
    issue 18); None without pygments (rich.markdown needs it for code; the one-file binary leaves
    it out), and replies are then printed as plain wrapped text."""
    try:
        from rich.markdown import Markdown
    except ImportError:  # pragma: no cover
        return None
    return Markdown


class MarkdownStream:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.pending = ""

    def feed(self, delta: str) -> None:
        self.pending += delta
        while True:
            end = self._block_end()
            if end is None:
                return
            block, self.pending = self.pending[:end], self.pending[end:]
            self._show(block)

    def flush(self) -> None:
        block, self.pending = self.pending, ""
        self._show(block)

    def _block_end(self) -> int | None:
        """Where the first complete block ends in `pending` (after its blank line or closing fence)."""
        inside = False
        offset = 0
        for line in self.pending.splitlines(keepends=True):
            offset += len(line)
            if not line.endswith("\n"):
                return None
            if line.lstrip().startswith("```"):
                if inside:
                    return offset
                inside = True
            elif not line.strip() and not inside and offset > len(line):
                return offset
        return None

    def _show(self, block: str) -> None:
        if not block.strip():
            return
        text = printable(block.strip("\n"))
        markdown = _markdown()
        if markdown is None:
            self.console.print(Text(text))
        else:
            self.console.print(markdown(text, code_theme="ansi_dark"))
