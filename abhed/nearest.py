"""The nearest partial match for an edit's old_string, and what exactly differs (spec §4).

An edit that does not match changes nothing; this module turns that dead end into a recoverable
turn by finding where the model most likely meant, and naming the difference precisely: CRLF line
endings, tabs vs spaces, trailing whitespace, indentation, typographic quotes, an extra or missing
line, or the first differing column.

Finding it must stay cheap on large files: the most distinctive lines of old_string are looked up
among the file's lines first (rapidfuzz, in C), and only windows anchored on those hits are scored
as a whole.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass

from rapidfuzz import fuzz, process

MIN_SCORE = 50.0  # below this the "nearest match" would mislead more than help
ANCHOR_LINES = 3  # distinctive lines of old_string used to find candidate places
HITS_PER_ANCHOR = 12
SHOWN_DIFFERENCES = 6

_TYPOGRAPHIC = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " ",
                              "\u2013": "-", "\u2014": "-", "\u2026": "...", "\u200b": ""})


@dataclass(frozen=True)
class Near:
    first_line: int  # 1-based, inclusive
    last_line: int
    text: str  # the text of the file that old_string most resembles
    score: float  # 0-100


def _show(s: str, limit: int = 120) -> str:
    shown = json.dumps(s, ensure_ascii=False)  # makes \t, \r and trailing spaces visible
    return shown if len(shown) <= limit else shown[: limit - 4] + '..."'


def nearest(text: str, needle: str) -> Near | None:
    lines = text.split("\n")
    wanted = needle.split("\n")
    if len(wanted) == 1:
        return _nearest_in_line(lines, needle)
    starts = _candidate_starts(lines, wanted)
    best: Near | None = None
    size = len(wanted)
    for start in starts:
        for length in {size - 1, size, size + 1}:
            if length < 1 or start + length > len(lines):
                continue
            window = "\n".join(lines[start : start + length])
            score = fuzz.ratio(needle, window)
            if best is None or score > best.score:
                best = Near(start + 1, start + length, window, score)
    return best if best and best.score >= MIN_SCORE else None


def _nearest_in_line(lines: list[str], needle: str) -> Near | None:
    hit = process.extractOne(needle, lines, scorer=fuzz.partial_ratio, score_cutoff=MIN_SCORE)
    if hit is None:
        return None
    line, _, index = hit
    align = fuzz.partial_ratio_alignment(needle, line)
    part = line[align.dest_start : align.dest_end] if align else line
    return Near(index + 1, index + 1, part, fuzz.ratio(needle, part))


def _candidate_starts(lines: list[str], wanted: list[str]) -> list[int]:
    stripped = [line.strip() for line in lines]
    keyed = sorted(((len(w.strip()), j) for j, w in enumerate(wanted) if w.strip()), reverse=True)
    starts: set[int] = set()
    for _, j in keyed[:ANCHOR_LINES]:
        hits = process.extract(wanted[j].strip(), stripped, scorer=fuzz.ratio, limit=HITS_PER_ANCHOR,
                               score_cutoff=MIN_SCORE)
        for _, _, index in hits:
            for start in (index - j - 1, index - j, index - j + 1):
                if 0 <= start < len(lines):
                    starts.add(start)
    if not starts and len(lines) * len(wanted) <= 200_000:
        starts = set(range(len(lines)))  # no distinctive line: affordable to try every place
    return sorted(starts)


# -- describing the difference -------------------------------------------------------------------


def whole_file_hints(text: str, needle: str) -> list[str]:
    """Mistakes visible without a nearest match: line-ending style, double escaping."""
    hints = []
    if "\r\n" in text and "\r\n" not in needle and "\n" in needle and needle.replace("\n", "\r\n") in text:
        hints.append("The file uses CRLF (\\r\\n) line endings and your old_string uses \\n. Send old_string and "
                     "new_string with \\r\\n line breaks; the text otherwise matches.")
    if "\r\n" in needle and "\r\n" not in text and needle.replace("\r\n", "\n") in text:
        hints.append("Your old_string uses \\r\\n line breaks but the file uses \\n. Send it with \\n; the text "
                     "otherwise matches.")
    unescaped = _unescape(needle)
    if unescaped != needle and unescaped in text:
        hints.append("Your old_string contains literal backslash sequences (such as \\n or \\t typed as two "
                     "characters) where the file has real newlines/tabs: it was escaped twice. Send the "
                     "real characters.")
    return hints


def _unescape(s: str) -> str:
    return s.replace("\\r\\n", "\r\n").replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"')


def differences(needle: str, near: Near) -> list[str]:
    """Plain statements of how old_string differs from the file text at `near`."""
    mine, theirs = needle, near.text
    if mine.replace("\r\n", "\n") == theirs.replace("\r\n", "\n"):
        uses = "CRLF (\\r\\n)" if "\r\n" in theirs else "LF (\\n)"
        return [f"Only line endings differ: the file uses {uses} line breaks here. Use the same in old_string."]
    if mine.translate(_TYPOGRAPHIC) == theirs.translate(_TYPOGRAPHIC):
        return _typographic(mine, theirs, near.first_line)
    return _line_differences(mine.split("\n"), theirs.split("\n"), near.first_line)


def _typographic(mine: str, theirs: str, first: int) -> list[str]:
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            line = first + theirs.count("\n", 0, i)
            return [f"Line {line}: the file has {_show(b)} (U+{ord(b):04X}) where old_string has {_show(a)} "
                    f"(U+{ord(a):04X}). Copy the file's character exactly."]
    return []


def _line_differences(mine: list[str], theirs: list[str], first: int) -> list[str]:
    notes: list[str] = []
    matcher = difflib.SequenceMatcher(a=mine, b=theirs, autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            continue
        if op == "replace" and a1 - a0 == b1 - b0:
            notes.extend(_pair(mine[a0 + k], theirs[b0 + k], first + b0 + k) for k in range(a1 - a0))
        if op in ("delete", "replace") and a1 - a0 != b1 - b0:
            notes.extend(f"old_string has the line {_show(line)}, which is not in the file near line {first + b0}."
                         for line in mine[a0:a1])
        if op in ("insert", "replace") and a1 - a0 != b1 - b0:
            notes.extend(f"The file has line {first + b0 + k}: {_show(line)}, which old_string lacks."
                         for k, line in enumerate(theirs[b0:b1]))
    if len(notes) > SHOWN_DIFFERENCES:
        notes = notes[:SHOWN_DIFFERENCES] + [f"... and {len(notes) - SHOWN_DIFFERENCES} more differing lines."]
    return notes


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _describe_indent(ws: str) -> str:
    if not ws:
        return "no indentation"
    tabs, spaces = ws.count("\t"), ws.count(" ")
    parts = [f"{tabs} tab{'s' * (tabs != 1)}" if tabs else "", f"{spaces} space{'s' * (spaces != 1)}" if spaces else ""]
    return " and ".join(p for p in parts if p)


def _pair(mine: str, theirs: str, line: int) -> str:
    """How one line of old_string differs from line `line` of the file."""
    body_m, body_t = mine.strip(" \t\r"), theirs.strip(" \t\r")
    if body_m == body_t:
        ind_m, ind_t = _indent(mine), _indent(theirs)
        if ind_m != ind_t:
            tabs = " (tabs vs spaces)" if ("\t" in ind_m) != ("\t" in ind_t) else ""
            return (f"Line {line}: indentation differs{tabs}: the file has {_describe_indent(ind_t)}, old_string has "
                    f"{_describe_indent(ind_m)}.")
        return (f"Line {line}: trailing whitespace differs: the file line is {_show(theirs)}, old_string has "
                f"{_show(mine)}.")
    if re.sub(r"\s+", " ", body_m) == re.sub(r"\s+", " ", body_t):
        return f"Line {line}: whitespace inside the line differs: the file has {_show(theirs)}, old_string has {_show(mine)}."
    col = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
    return (f"Line {line} differs from column {col + 1}: the file has {_show(theirs)}, old_string has "
            f"{_show(mine)}.")
