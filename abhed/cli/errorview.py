"""A failed call's whole error for the human, under the one line that announces it.

The result line (display.outcome) holds an error's first line only, and many errors say what went
wrong on the lines after it ("Invalid arguments for `task`:" then one line per bad field, a
command's refusal then what to do instead). These are the lines after the first, bounded (a line
and the whole count) with an explicit note of what was left out, each made printable: the model's
arguments are quoted in them.
"""

from __future__ import annotations

from abhed.common.terminal import printable

MAX_LINES = 12
LINE_CHARS = 400  # a line longer than this is cut, with a note; the terminal wraps the rest


def rest(content: str, first_shown: str = "") -> list[str]:
    """The error's lines after its first, printable and bounded. `first_shown`: what the result line
    showed of the first line; when it had to be cut, the whole first line comes first here."""
    lines = content.strip().split("\n")
    first, after = lines[0], [line.rstrip() for line in lines[1:]]
    while after and not after[-1]:
        after.pop()
    if first_shown.endswith("...") and printable(first) != first_shown:
        after.insert(0, first)
    shown = [_cut(line) for line in after[:MAX_LINES]]
    if len(after) > MAX_LINES:
        shown.append(f"... {len(after) - MAX_LINES} more lines (the model reads the whole error)")
    return shown


def _cut(line: str) -> str:
    if len(line) <= LINE_CHARS:
        return printable(line)
    return printable(line[:LINE_CHARS]) + f"... ({len(line) - LINE_CHARS} more characters)"
