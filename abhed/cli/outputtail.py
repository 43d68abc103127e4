"""The last lines of a running command's output, shown beneath the status line while it runs.

Bounded whatever the command prints: a few lines, each cut to a width, and the line still being
written cut too (a megabyte without a newline keeps only its start). A carriage return starts the
line over, as a terminal would show it (progress bars redraw their line with `\\r`). What is
shown goes through printable(): an escape sequence in the output is shown, never acted on. The
lines before the last ones are counted, so the view says what it leaves out.
"""

from __future__ import annotations

from collections import deque

from abhed.common.terminal import printable

LINES = 5  # shown beneath the status line  # pragma: no mutate  (a choice; the tests pass their own)
LINE_CHARS = 500  # kept of a line (the terminal crops it further)  # pragma: no mutate  (as above)


def _shown(line: str) -> str:
    """What a terminal would show of a line redrawn with carriage returns: its last version."""
    versions = [part for part in line.split("\r") if part]
    return versions[-1] if versions else ""


class OutputTail:
    def __init__(self, lines: int = LINES, line_chars: int = LINE_CHARS) -> None:
        self.limit, self.line_chars = lines, line_chars
        self._lines: deque[str] = deque(maxlen=lines)
        self._partial = ""  # the line still being written (bounded: _bounded)
        self.total = 0  # complete lines seen

    def feed(self, text: str) -> None:
        text = self._partial + text
        end = text.rfind("\n")
        if end >= 0:  # only the last `limit` complete lines are split out: `seq 1 3000000` costs a count
            self.total += text.count("\n")
            start = end
            for _ in range(self.limit):
                start = text.rfind("\n", 0, start)  # pragma: no mutate  (from 1: the last try finds no 0 either)
                if start < 0:
                    break
            for line in text[start + 1:end].split("\n"):
                self._lines.append(self._cut(_shown(line)))
        self._partial = self._bounded(text[end + 1:])

    def _bounded(self, partial: str) -> str:
        """The line being written, reduced to what decides how it shows: its last version, cut just past
        line_chars, and a carriage return it ends with (the next piece starts the line over)."""
        restart = "\r" if partial.endswith("\r") else ""
        return _shown(partial)[: self.line_chars + 1] + restart

    def _cut(self, line: str) -> str:
        return line if len(line) <= self.line_chars else line[: self.line_chars] + "..."

    def lines(self) -> list[str]:
        """The lines to show, oldest first, escaped: a note on the ones left out first, the line still
        being written last."""
        partial = self._cut(_shown(self._partial))
        shown = [*self._lines, *([partial] if partial else [])][-self.limit:]
        earlier = self.total + bool(partial) - len(shown)
        note = [f"... {earlier} earlier line{'s' * (earlier != 1)}"] if earlier > 0 else []
        return note + [printable(line) for line in shown]

    def clear(self) -> None:
        self._lines.clear()
        self._partial = ""
        self.total = 0
