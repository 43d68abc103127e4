"""The difference between a file's content before and after a change, as a human reads it: hunks
with line numbers and CONTEXT lines around each change, the changed words of a changed line
marked, and notes for what a plain line diff would hide (a new file, CRLF line endings, a missing
final newline, binary or undecodable content, a diff cut short).

Pure: bytes in, a FileDiff out; the display (cli/diffview.py) colours it and makes its text
printable. Bounded: each side is compared only up to MAX_BYTES and the diff holds at most
MAX_LINES lines, each cut to MAX_LINE_CHARS, with a note of what was left out.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from abhed.files.filetype import SNIFF_BYTES, sniff

CONTEXT = 3
MAX_BYTES = 1024 * 1024  # per side: a bigger file is not compared (difflib is quadratic at worst)
MAX_LINES = 5000  # lines of diff kept (the pager shows them all, the panel the first few)
MAX_LINE_CHARS = 2000
MAX_WORD_LINE = 500  # longer lines are marked whole, not word by word (SequenceMatcher's cost)
WORDS = re.compile(r"\w+|\s+|[^\w\s]", re.U)
NO_NEWLINE = "\\ No newline at end of file"


@dataclass(frozen=True)
class Line:
    """One line of the diff. kind: " " context, "-" removed, "+" added, "@" a hunk header, "\\"
    a remark on the line above (no final newline). old/new: its numbers on each side (None where it
    has none); marks: (start, end) character spans of `text` that changed (word highlights)."""

    kind: str
    text: str
    old: int | None = None
    new: int | None = None
    marks: tuple[tuple[int, int], ...] = ()


@dataclass
class FileDiff:
    lines: list[Line] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    added: int = 0
    removed: int = 0
    new_file: bool = False
    cut: int = 0  # diff lines left out over MAX_LINES

    @property
    def unchanged(self) -> bool:
        return not self.added and not self.removed and not self.lines


def compare(before: bytes | None, after: bytes) -> FileDiff:
    """The diff of `before` (None: the file does not exist yet) and `after`."""
    diff = FileDiff(new_file=before is None)
    old = before or b""
    if diff.new_file:
        diff.notes.append(f"new file: {len(after)} bytes, {_count(after)} lines")
    if before == after:
        return diff  # the same bytes, whatever they hold: no change
    for name, data in (("before", old), ("after", after)):
        why = _not_text(data)
        if why:
            diff.notes.append(f"{why} ({name}: {len(data)} bytes); no line diff shown")
            return diff
    big = [f"{name} {len(data)} bytes" for name, data in (("before", old), ("after", after)) if len(data) > MAX_BYTES]
    if big:
        diff.notes.append(f"too large to compare ({', '.join(big)}; the limit is {MAX_BYTES} bytes); no line diff shown")
        return diff
    a, b = _split(old.decode("utf-8")), _split(after.decode("utf-8"))
    diff.notes.extend(_endings(a, b, diff.new_file))
    _hunks(diff, a, b, bool(a or b) and all(_crlf(side) or not side for side in (a, b)))
    return diff


def _count(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _not_text(data: bytes) -> str | None:
    kind = sniff(data[:SNIFF_BYTES])
    if kind.family != "text":
        return f"not text: {kind.name}"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text: an undecodable byte at offset {exc.start}"
    return None


def _split(text: str) -> list[str]:
    """Lines with their endings ("\\n", "\\r\\n", or none for a last line without one), split at
    "\\n" only: a lone "\\r", a form feed or U+2028 stays inside its line (shown escaped), as the
    file's tools number its lines."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    return lines + [parts[-1]] if parts[-1] else lines


def _crlf(lines: list[str]) -> bool:
    """Every line ends with CRLF (but a last one with no ending at all)."""
    last = len(lines) - 1
    return bool(lines) and all(line.endswith("\r\n") or (k == last and not line.endswith("\n"))
                               for k, line in enumerate(lines))


def _endings(a: list[str], b: list[str], new_file: bool) -> list[str]:
    """What the line endings are, said once, where a diff of lines alone would not show it."""
    notes = []
    before, after = _crlf(a), _crlf(b)
    if after and (before or new_file):
        notes.append("CRLF (\\r\\n) line endings")
    elif before and not after and b:
        notes.append("line endings change from CRLF (\\r\\n) to LF (\\n)")
    elif after and not before and a:
        notes.append("line endings change from LF (\\n) to CRLF (\\r\\n)")
    return notes


def _shown(line: str, strip_cr: bool) -> str:
    text = line.removesuffix("\n")
    if strip_cr:
        text = text.removesuffix("\r")
    return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + f" [... {len(text) - MAX_LINE_CHARS} more characters]"


def _range(start: int, length: int) -> str:
    """A hunk header's range, as unified diff writes it (start is 0-based here)."""
    first = start + 1 if length else start
    return f"{first}" if length == 1 else f"{first},{length}"


def _hunks(diff: FileDiff, a: list[str], b: list[str], strip_cr: bool) -> None:
    out: list[Line] = []
    matcher = difflib.SequenceMatcher(None, a, b)  # autojunk: blank lines repeated thousands of times stay cheap
    for group in matcher.get_grouped_opcodes(CONTEXT):
        (_, i1, _, j1, _), (_, _, i2, _, j2) = group[0], group[-1]
        out.append(Line("@", f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@"))
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                for k in range(a2 - a1):
                    _add(out, a, a1 + k, Line(" ", _shown(a[a1 + k], strip_cr), a1 + k + 1, b1 + k + 1))
                continue
            old = [_shown(a[i], strip_cr) for i in range(a1, a2)]
            new = [_shown(b[j], strip_cr) for j in range(b1, b2)]
            pairs = min(len(old), len(new)) if tag == "replace" else 0
            room = MAX_LINES - len(out)  # words compared only for lines that are kept (the cost is per pair)
            marks = [words(old[k], new[k]) if k < room else ((), ()) for k in range(pairs)]
            diff.removed += len(old)
            diff.added += len(new)
            for k, text in enumerate(old):
                _add(out, a, a1 + k, Line("-", text, old=a1 + k + 1, marks=marks[k][0] if k < pairs else ()))
            for k, text in enumerate(new):
                _add(out, b, b1 + k, Line("+", text, new=b1 + k + 1, marks=marks[k][1] if k < pairs else ()))
    if len(out) > MAX_LINES:
        diff.cut = len(out) - MAX_LINES
        out = out[:MAX_LINES]
    diff.lines = out


def _add(out: list[Line], side: list[str], index: int, line: Line) -> None:
    out.append(line)
    if index == len(side) - 1 and not side[index].endswith("\n"):
        out.append(Line("\\", NO_NEWLINE))


Spans = tuple[tuple[int, int], ...]


def words(old: str, new: str) -> tuple[Spans, Spans]:
    """The character spans of `old` and `new` that differ, word by word (a word, a run of spaces,
    or one punctuation character); a line too long to compare so is marked whole."""
    if max(len(old), len(new)) > MAX_WORD_LINE:
        return ((0, len(old)),) if old else (), ((0, len(new)),) if new else ()
    a, b = WORDS.findall(old), WORDS.findall(new)
    at_a, at_b = _offsets(a), _offsets(b)
    spans_a: list[tuple[int, int]] = []
    spans_b: list[tuple[int, int]] = []
    for tag, a1, a2, b1, b2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if a2 > a1:
            spans_a.append((at_a[a1], at_a[a2]))
        if b2 > b1:
            spans_b.append((at_b[b1], at_b[b2]))
    return tuple(spans_a), tuple(spans_b)


def _offsets(tokens: list[str]) -> list[int]:
    offsets = [0]
    for token in tokens:
        offsets.append(offsets[-1] + len(token))
    return offsets
