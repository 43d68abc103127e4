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
from collections.abc import Sequence
from dataclasses import dataclass

from rapidfuzz import fuzz, process

MIN_SCORE = 50.0  # below this the "nearest match" would mislead more than help
TYPO_SCORE = 60.0  # a line this similar to the file's line is that line mistyped
MAX_HOLDING = 200  # lines holding a one-line old_string that are compared (a short one is everywhere)
MAX_MAPPED_LINE = 4000  # longer lines are shown whole rather than mapped character by character
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


# -- finding the place ---------------------------------------------------------------------------
# A place that equals old_string up to whitespace, quote style and line endings is what the model
# meant, however similar some other place looks character by character ("    return 2" against a
# file holding "\treturn 2" and "    return 1"). So the search compares lines by a key that erases
# exactly those differences, first for the same number of lines, then for one line missing or
# extra, and only when no key matches falls back to fuzzy scoring.

_QUOTES = str.maketrans({'"': "'", "`": "'", "\r": " "})


def _key(line: str) -> str:
    """The line with whitespace runs collapsed, ends stripped, typographic and straight quotes unified."""
    if not line.isascii():  # str.translate costs a dict lookup per character: only where it can matter
        line = line.translate(_TYPOGRAPHIC)
    if '"' in line or "`" in line:
        line = line.replace('"', "'").replace("`", "'")
    return " ".join(line.split())


def _keyed(raw: str) -> tuple[str, list[int], list[int]]:
    """_key(raw), plus for each key character the raw span [start, end) it stands for."""
    mapped = [(c, i) for i, ch in enumerate(raw) for c in ch.translate(_TYPOGRAPHIC).translate(_QUOTES)]
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    gap = -1  # where a whitespace run after some text began
    for c, i in mapped:
        if c.isspace():
            gap = i if chars and gap < 0 else gap
            continue
        if gap >= 0:
            chars.append(" ")
            starts.append(gap)
            ends.append(i)
            gap = -1
        chars.append(c)
        starts.append(i)
        ends.append(i + 1)
    return "".join(chars), starts, ends


def _raw_part(raw: str, key: str, at_end: bool) -> str:
    """The part of `raw` whose key is `key`, taken from the end (a suffix) or the start (a prefix)."""
    if len(raw) > MAX_MAPPED_LINE:
        return raw
    full, starts, ends = _keyed(raw)
    if not key or len(full) <= len(key):
        return raw if key else ""
    return raw[starts[len(full) - len(key)] :] if at_end else raw[: ends[len(key) - 1]]


def nearest(text: str, needle: str) -> Near | None:
    lines = text.split("\n")
    wanted = needle.split("\n")
    if len(wanted) == 1:
        return _same_line(lines, needle) or _best([_similar_line(lines, needle), _nearest_in_line(lines, needle)])
    keys = [_key(line) for line in lines]
    wanted_keys = [_key(w) for w in wanted]
    offsets = _anchor_offsets(keys, wanted_keys)
    # A line missing (or extra) inside old_string is likelier than a typo; at its first or last line,
    # a typo in that line is likelier than a line dropped there.
    return (_same_window(lines, keys, wanted_keys, offsets, needle)
            or _one_line_apart(lines, keys, wanted_keys, offsets, needle, at_edges=False)
            or _all_but_one_line(lines, keys, wanted_keys, offsets, needle)
            or _one_line_apart(lines, keys, wanted_keys, offsets, needle, at_edges=True)
            or _fuzzy_window(lines, wanted, needle))


def _near(lines: list[str], start: int, length: int, needle: str, wanted_keys: list[str]) -> Near:
    """The window lines[start:start+length], its first and last line cut to old_string's ends when
    old_string starts or ends inside a line."""
    window = lines[start : start + length]
    window[0] = _raw_part(window[0], wanted_keys[0], at_end=True) if _key(window[0]) != wanted_keys[0] else window[0]
    window[-1] = _raw_part(window[-1], wanted_keys[-1], at_end=False) if _key(window[-1]) != wanted_keys[-1] else window[-1]
    text = "\n".join(window)
    return Near(start + 1, start + length, text, fuzz.ratio(needle, text))


def _line_fits(key: str, want: str, first: bool, last: bool) -> bool:
    """old_string may start inside its first line (a suffix) and end inside its last (a prefix)."""
    if first and last:
        return want in key
    if first:
        return key.endswith(want)
    if last:
        return key.startswith(want)
    return key == want


def _fits(keys: list[str], wanted_keys: list[str]) -> bool:
    n = len(wanted_keys)
    return len(keys) == n and all(_line_fits(k, w, i == 0, i == n - 1) for i, (k, w) in enumerate(zip(keys, wanted_keys)))


def _anchors(wanted_keys: list[str]) -> list[int]:
    """Indexes of old_string's two most distinctive (longest) lines."""
    ranked = sorted(range(len(wanted_keys)), key=lambda j: (-len(wanted_keys[j]), j))
    return [j for j in ranked[:2] if wanted_keys[j]] or [0]


def _anchor_offsets(keys: list[str], wanted_keys: list[str]) -> list[int]:
    """Window starts at which one of old_string's anchor lines sits on a line with the same key."""
    last = len(wanted_keys) - 1
    found: set[int] = set()
    for j in _anchors(wanted_keys):
        want = wanted_keys[j]
        if 0 < j < last:
            found.update(i - j for i, key in enumerate(keys) if key == want)
        else:  # old_string may start or end inside this line
            fits = str.endswith if j == 0 else str.startswith
            found.update(i - j for i, key in enumerate(keys) if want in key and fits(key, want))
    return sorted(found)


def _starts(offsets: list[int], count: int, slack: int) -> list[int]:
    """The anchored window starts, each shifted by up to `slack` lines, within the file's `count` lines."""
    return sorted({o + d for o in offsets for d in range(-slack, slack + 1) if 0 <= o + d < count})


def _best(candidates: Sequence[Near | None], needle: str = "") -> Near | None:
    """The most similar candidate; the first in the file among equals.

    Among places that all equal old_string up to whitespace, the one whose indentation is as deep
    once tabs are expanded wins (old_string with tabs where the file has spaces, or the reverse).
    """
    def rank(n: Near) -> tuple[float, float, int]:
        expanded = max(fuzz.ratio(needle.expandtabs(w), n.text.expandtabs(w)) for w in (4, 8)) if needle else 0
        return expanded, n.score, -n.first_line

    return max((c for c in candidates if c), key=rank, default=None)


def _same_window(lines, keys, wanted_keys, offsets, needle) -> Near | None:
    size = len(wanted_keys)
    return _best([_near(lines, s, size, needle, wanted_keys) for s in _starts(offsets, len(keys), 0)
                  if _fits(keys[s : s + size], wanted_keys)], needle)


def _drop_one_fits(file_keys: list[str], wanted_keys: list[str], at_edges: bool) -> bool:
    """Whether dropping one line from the longer side (the file's window or old_string) makes them fit."""
    def drop(seq: list[str]) -> list[list[str]]:
        at = (0, len(seq) - 1) if at_edges else range(1, len(seq) - 1)
        return [seq[:k] + seq[k + 1 :] for k in at]

    if len(file_keys) > len(wanted_keys):
        return any(_fits(shorter, wanted_keys) for shorter in drop(file_keys))
    return any(_fits(file_keys, shorter) for shorter in drop(wanted_keys))


def _one_line_apart(lines, keys, wanted_keys, offsets, needle, at_edges: bool) -> Near | None:
    """A window that has one line old_string lacks, or lacks one line old_string has."""
    size = len(wanted_keys)
    found = []
    for s in _starts(offsets, len(keys), 1):
        more, fewer = keys[s : s + size + 1], keys[s : s + size - 1]
        if len(more) == size + 1 and _drop_one_fits(more, wanted_keys, at_edges):
            found.append(_near(lines, s, size + 1, needle, [_key(lines[s]), _key(lines[s + size])]))
        elif size > 2 and len(fewer) == size - 1 and _drop_one_fits(fewer, wanted_keys, at_edges):
            found.append(_near(lines, s, size - 1, needle, [_key(lines[s]), _key(lines[s + size - 2])]))
    return _best(found)


def _all_but_one_line(lines, keys, wanted_keys, offsets, needle) -> Near | None:
    """A window of old_string's height where every line but one fits (a typo in that line)."""
    size = len(wanted_keys)
    found = []
    for s in _starts(offsets, len(keys), 0):
        window = keys[s : s + size]
        if len(window) != size:
            continue
        differ = [(k, w) for i, (k, w) in enumerate(zip(window, wanted_keys))
                  if not _line_fits(k, w, i == 0, i == size - 1)]
        # The one differing line must still resemble the file's: a typo, not another line.
        if len(differ) <= 1 and all(fuzz.ratio(k, w) >= TYPO_SCORE for k, w in differ):
            cut = [wanted_keys[0] if _line_fits(window[0], wanted_keys[0], True, False) else window[0],
                   wanted_keys[-1] if _line_fits(window[-1], wanted_keys[-1], False, True) else window[-1]]
            found.append(_near(lines, s, size, needle, cut))
    return _best(found)


def _similar_line(lines: list[str], needle: str) -> Near | None:
    """The whole line most like a one-line old_string (a typo in a whole line)."""
    hit = process.extractOne(needle, lines, scorer=fuzz.ratio, score_cutoff=MIN_SCORE)
    return Near(hit[2] + 1, hit[2] + 1, hit[0], hit[1]) if hit else None


def _same_line(lines: list[str], needle: str) -> Near | None:
    """A line equal to the one-line old_string up to whitespace and quotes, or holding it."""
    want = _key(needle)
    if not want:
        return None
    keys = [_key(line) for line in lines]
    whole = [Near(i + 1, i + 1, lines[i], fuzz.ratio(needle, lines[i])) for i, key in enumerate(keys) if key == want]
    if whole:
        return _best(whole, needle)
    holding = [i for i, key in enumerate(keys) if want in key][:MAX_HOLDING]
    return _best([_part_of_line(lines[i], i, want, needle) for i in holding], needle)


def _part_of_line(line: str, index: int, want: str, needle: str) -> Near:
    """The part of the line whose key is `want` (the whole line if it is too long to map cheaply)."""
    part = line
    if len(line) <= MAX_MAPPED_LINE:
        full, starts, ends = _keyed(line)
        at = full.find(want)
        if at >= 0:
            part = line[starts[at] : ends[at + len(want) - 1]]
    return Near(index + 1, index + 1, part, fuzz.ratio(needle, part))


def _fuzzy_window(lines: list[str], wanted: list[str], needle: str) -> Near | None:
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
    score = fuzz.ratio(needle, part)
    # The score shown is the aligned part's own similarity; a weak one would mislead ("3% similar").
    return Near(index + 1, index + 1, part, score) if score >= MIN_SCORE else None


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


def _where(text: str, found: str) -> str:
    first = text.count("\n", 0, text.find(found)) + 1
    last = first + found.count("\n")
    return f"line {first}" if first == last else f"lines {first}-{last}"


def whole_file_hints(text: str, needle: str) -> list[str]:
    """Mistakes visible without a nearest match: line-ending style, double escaping. Each names the
    lines where the corrected old_string does match."""
    hints = []
    as_crlf, as_lf = needle.replace("\n", "\r\n"), needle.replace("\r\n", "\n")
    if "\r\n" in text and "\r\n" not in needle and "\n" in needle and as_crlf in text:
        hints.append("The file uses CRLF (\\r\\n) line endings and your old_string uses \\n. Send old_string and "
                     "new_string with \\r\\n line breaks; the text otherwise matches at "
                     f"{_where(text, as_crlf)}.")
    if "\r\n" in needle and "\r\n" not in text and as_lf in text:
        hints.append("Your old_string uses \\r\\n line breaks but the file uses \\n. Send it with \\n; the text "
                     f"otherwise matches at {_where(text, as_lf)}.")
    unescaped = _unescape(needle)
    if unescaped != needle and unescaped in text:
        hints.append("Your old_string contains literal backslash sequences (such as \\n or \\t typed as two "
                     "characters) where the file has real newlines/tabs: it was escaped twice. Send the "
                     f"real characters; the text otherwise matches at {_where(text, unescaped)}.")
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
    # Lines are aligned by their keys, so a line that differs only in whitespace or quotes is
    # described as such, even beside a missing or extra line.
    matcher = difflib.SequenceMatcher(a=[_key(m) for m in mine], b=[_key(t) for t in theirs], autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal" or (op == "replace" and a1 - a0 == b1 - b0):
            notes.extend(_pair(mine[a0 + k], theirs[b0 + k], first + b0 + k) for k in range(a1 - a0)
                         if mine[a0 + k] != theirs[b0 + k])
            continue
        if op in ("delete", "replace"):
            notes.extend(f"old_string has the line {_show(line)}, which is not in the file near line {first + b0}."
                         for line in mine[a0:a1])
        if op in ("insert", "replace"):
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
    if _key(mine) == _key(theirs) and col < min(len(mine), len(theirs)):
        # The same text with other quote characters (' for ", or a typographic quote).
        return (f"Line {line}: quotes differ: the file has {_show(theirs[col])} (U+{ord(theirs[col]):04X}) at column "
                f"{col + 1} where old_string has {_show(mine[col])} (U+{ord(mine[col]):04X}): the file line is "
                f"{_show(theirs)}. Copy the file's quote characters exactly.")
    return (f"Line {line} differs from column {col + 1}: the file has {_show(theirs)}, old_string has "
            f"{_show(mine)}.")
