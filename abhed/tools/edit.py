"""edit (spec §4): replace an exact string, byte for byte, or fail loudly and say how to fix it."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field

from abhed.files import textfile
from abhed.common.traits import Traits
from abhed.common.errors import ToolError
from abhed.session.store import changed_since, digest
from abhed.files.suggest import glob_hint
from abhed.tools.base import Tool, ToolContext, ToolInput, ToolResult, cut_line, ok
from abhed.tools.write import create, encode, exists_in, held, not_read_error, refuse_protected, replace

CONTEXT_LINES = 3  # around each changed region in the reply
REGION_LINES = 40  # a changed region longer than this is shown cut, with a note
SHOWN_REGIONS = 5  # replace_all: snippets for the first few regions only
SHOWN_LINE_NUMBERS = 50  # in the several-matches error
MAX_POSITIONS = 10_000


class EditInput(ToolInput):
    path: str = Field(description="Absolute path.")
    old_string: str = Field(description="Exact text to replace, including indentation. Must be unique in the file "
                                        "unless replace_all is true.")
    new_string: str = Field(description="Replacement text. Must differ from old_string.")
    replace_all: bool | None = Field(None, description="Replace every occurrence. Default false.")


def find_all(text: str, needle: str, step: int, limit: int = MAX_POSITIONS) -> list[int]:
    """Start offsets of `needle`, at most `limit`; step 1 counts overlapping occurrences (ambiguity),
    len(needle) the ones str.replace would replace."""
    found: list[int] = []
    at = text.find(needle)
    while at >= 0 and len(found) < limit:
        found.append(at)
        at = text.find(needle, at + step)
    return found


def replaced(text: str, old: str, new: str, replace_all: bool) -> tuple[str, int]:
    """The file's text after the edit, and how many replacements made it: str.replace's own count
    (non-overlapping, uncapped). The one place the edit's result is computed: the run writes it, the
    approval prompt shows its diff (tools/preview.py)."""
    count = text.count(old) if replace_all else 1
    return text.replace(old, new, count), count


def line_numbers(text: str, offsets: list[int]) -> list[int]:
    numbers, line, last = [], 1, 0
    for offset in offsets:
        line += text.count("\n", last, offset)
        numbers.append(line)
        last = offset
    return numbers


def _display(line: str) -> str:
    """A line as read shows it: no \\r, undecodable bytes as U+FFFD."""
    return cut_line(line.removesuffix("\r").encode("utf-8", "surrogateescape").decode("utf-8", "replace"))


def split_lines(text: str) -> list[str]:
    """Lines as read numbers them: a final newline ends the last line, it does not start another."""
    lines = text.split("\n")
    return lines[:-1] if len(lines) > 1 and lines[-1] == "" else lines


def _span(first: int, last: int) -> str:
    return f"line {first}" if first == last else f"lines {first}-{last}"


def _times(positions: list[int]) -> str:
    """How many matches `find_all` found, honest about its bound."""
    return f"{len(positions)}" if len(positions) < MAX_POSITIONS else f"at least {MAX_POSITIONS}"


def _lines(n: int) -> str:
    return f"{n} line{'s' * (n != 1)}"


def snippet(lines: list[str], first: int, last: int) -> str:
    """Lines first..last (1-based) with CONTEXT_LINES around, numbered like read, bounded."""
    lo, hi = max(1, first - CONTEXT_LINES), min(len(lines), last + CONTEXT_LINES)
    shown = [f"{n:>6}\t{_display(lines[n - 1])}" for n in range(lo, hi + 1)]
    if len(shown) > REGION_LINES:
        cut = len(shown) - REGION_LINES
        shown = shown[: REGION_LINES // 2] + [f"[... {cut} lines not shown ...]"] + shown[-REGION_LINES // 2 :]
    return "\n".join(shown)


class Edit(Tool):
    name = "edit"
    description = ("Replace an exact string in a file. The old_string must match the file content exactly, "
                   "including whitespace and indentation. Include enough surrounding context to make the match "
                   "unique.")
    Input = EditInput
    traits = Traits(mutates=True, checkpoint=True)
    example = {"path": "WORKSPACE/src/main.py", "old_string": "    return a - b\n", "new_string": "    return a + b\n"}

    def run(self, args: EditInput, ctx: ToolContext) -> ToolResult:
        path = ctx.resolve(args.path)
        old, new = args.old_string, args.new_string
        if old == new:
            raise ToolError("old_string and new_string are identical, so the edit would change nothing. Put the "
                            "changed text in new_string.", reason="identical")
        refuse_protected(args.path, path, ctx)
        try:
            with held(path, ctx, may_create=old == "") as (dirfd, made):
                return self._edit(path, args, ctx, dirfd, made)
        except FileNotFoundError:  # the directory is missing too
            raise self._missing(path, ctx) from None

    def _missing(self, path: Path, ctx: ToolContext) -> ToolError:
        return ToolError(f"{textfile.not_found(path, ctx.paths.workspace).message} To create a new file, use "
                         "write (or edit with an empty old_string).", reason="missing")

    def _edit(self, path: Path, args: EditInput, ctx: ToolContext, dirfd: int, made: list[str]) -> ToolResult:
        old, new = args.old_string, args.new_string
        if not exists_in(dirfd, path.name):
            if old == "":
                return create(path, encode(new, "new_string"), ctx, dirfd, made, self.name)
            raise self._missing(path, ctx)
        fd, st = textfile.open_entry(dirfd, path.name, path, ctx.paths.workspace, "editing")
        try:
            data = textfile.load(fd, st, path, ctx.settings.files.edit_max_bytes, "editing")
        finally:
            os.close(fd)
        text = data.decode("utf-8", "surrogateescape")
        if old == "":
            raise ToolError(
                f"old_string is empty, which is only valid to create a new file, but {path} exists "
                f"({_lines(len(split_lines(text)))}). To insert text, put the neighbouring line(s) in old_string and "
                "repeat them in new_string; to replace the whole file, use write.", reason="empty_old")
        record = ctx.session.last_read(path)
        if record is None:
            raise not_read_error(path, self.name)
        changed = changed_since(record, data, st.st_size, st.st_mtime_ns)
        positions = find_all(text, old, 1)
        if changed and len(positions) != 1:
            raise ToolError(
                f"{path} changed on disk since you read it (at {record.at:%H:%M:%S} UTC), and old_string now matches "
                f"{_times(positions)} times, so nothing was changed. Read the file again, then retry with text from its "
                "current content.", reason="changed", matches=len(positions))
        if not positions:
            raise self._no_match(path, text, old, new)
        if len(positions) > 1 and not args.replace_all:
            raise self._several(path, text, positions)
        return self._apply(path, text, st, old, new, bool(args.replace_all), changed, ctx, dirfd, digest(data))

    def _apply(self, path: Path, text: str, st: os.stat_result, old: str, new: str, replace_all: bool,
               changed: bool, ctx: ToolContext, dirfd: int, expect: str) -> ToolResult:
        result, count = replaced(text, old, new, replace_all)
        spots = find_all(text, old, len(old), SHOWN_LINE_NUMBERS)  # offsets only for what is shown
        data = encode(result, "new_string")
        new_st = replace(dirfd, path, data, mode=st.st_mode, owner=(st.st_uid, st.st_gid), expect=expect,
                         record=ctx.session.last_read(path), tool=self.name, action="editing")
        ctx.session.remember(path, data, new_st.st_size, new_st.st_mtime_ns)
        return ok(self._report(path, result, spots[:count], count, old, new, changed), path=str(path),
                  action="edited", replacements=count, file_had_changed=changed)

    def _report(self, path: Path, result: str, spots: list[int], count: int, old: str, new: str,
                changed: bool) -> str:
        """`count` replacements were made; `spots`: the offsets of the first of them (up to SHOWN_LINE_NUMBERS)."""
        shift = len(new) - len(old)
        starts = [at + i * shift for i, at in enumerate(spots)]  # where each new_string landed
        first_lines = line_numbers(result, starts)
        span = new.count("\n")
        where = ", ".join(map(str, first_lines))
        more = "" if count <= len(spots) else f" and {count - len(spots)} more"
        head = (f"Edited {path}: replaced {count} occurrence{'s' * (count != 1)} at line{'s' * (count != 1)} "
                f"{where}{more} ({_lines(old.count(chr(10)) + 1)} replaced by {_lines(span + 1)}).")
        lines = split_lines(result)
        parts = [snippet(lines, line, line + span) for line in first_lines[:SHOWN_REGIONS]]
        if count > SHOWN_REGIONS:
            parts.append(f"[... {count - SHOWN_REGIONS} more changed regions not shown]")
        if changed:
            head = (f"Note: {path} had changed on disk since you read it; old_string still matched exactly once, so "
                    f"the edit was applied. Read the file to see the other changes.\n{head}")
        return head + "\n" + "\n...\n".join(parts)

    def _several(self, path: Path, text: str, positions: list[int]) -> ToolError:
        lines = line_numbers(text, positions)
        shown = ", ".join(map(str, lines[:SHOWN_LINE_NUMBERS]))
        more = f" and {len(lines) - SHOWN_LINE_NUMBERS} more" if len(lines) > SHOWN_LINE_NUMBERS else ""
        return ToolError(
            f"old_string matches {_times(positions)} times in {path} (at lines {shown}{more}); nothing was changed. Include "
            "more surrounding lines in old_string to make it unique, or set replace_all to true to change every "
            "occurrence.", reason="several", matches=len(positions), lines=lines[:SHOWN_LINE_NUMBERS])

    def _no_match(self, path: Path, text: str, old: str, new: str) -> ToolError:
        from abhed.files import nearest  # here: its fuzzy matcher (rapidfuzz) is needed only on a miss (issue 18)
        head = f"old_string was not found in {path}; nothing was changed."
        if len(new.strip()) >= 8 and text.count(new) == 1:  # long enough not to be a coincidence
            line = line_numbers(text, [text.find(new)])[0]
            head += (f" new_string already appears at line {line}: this edit may already have been applied (a retry?). "
                     "Read the file to check before editing again.")
        hints = nearest.whole_file_hints(text, old)
        if hints:
            return ToolError(" ".join([head, *hints]), reason="no_match")
        near = nearest.nearest(text, old)
        if near is None:
            return ToolError(
                f"{head} No similar text exists in the file ({_lines(len(split_lines(text)))}). Read the file again to "
                f"see its current content. If you meant another file: {glob_hint(path)}", reason="no_match")
        lines = split_lines(text)
        body = [
            f"{head} The nearest partial match is at {_span(near.first_line, near.last_line)} "
            f"({near.score:.0f}% similar):",
            snippet(lines, near.first_line, near.last_line),
            "Differences:",
            *(f"- {d}" for d in nearest.differences(old, near)),
            f"Copy the exact text from the file (read {path} with offset {max(1, near.first_line - 3)} to see it "
            "again) and retry.",
        ]
        return ToolError("\n".join(body), reason="no_match", nearest_lines=[near.first_line, near.last_line])
