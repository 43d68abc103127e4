"""Reading JSON where a text form puts it, shared by the forms whose calls are JSON (qwen25,
llama_json, mistral, deepseek, harmony).

A value is decoded where the markup puts it, to its own end, never cut at the next closing marker
first: a string in the arguments may hold any marker (a file about tool calls), and JSON's own
syntax says where it ends.
"""

from __future__ import annotations

import json
import re
from typing import Any

from abhed.model.textcalls.base import Found, json_call

_DECODER = json.JSONDecoder()
_NAME = re.compile(r'"name"\s*:\s*"([^"\\\n]{1,200})"')
BLANKS = " \t\r\n"


def skip_space(text: str, pos: int) -> int:
    """The first index at or after `pos` that is not whitespace (any Unicode space, as str.isspace)."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def skip(text: str, pos: int, chars: str = BLANKS) -> int:
    """The first index at or after `pos` whose character is not one of `chars`."""
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def decode_at(text: str, pos: int) -> tuple[Any, int]:
    """The JSON value that starts at text[pos] (blanks skipped) and the index just past it.
    ValueError when none starts there; a value nested too deeply to decode is one too.

    The value is decoded in a window that grows while the window's end is what stops it, so a
    failure costs what the value spans, not what precedes it (JSONDecodeError counts lines from its
    document's start), and an error's line and column count from the value's own start."""
    pos = skip(text, pos)
    size = _WINDOW
    while True:
        window = text[pos:pos + size]
        whole = pos + size >= len(text)
        try:
            value, end = _DECODER.raw_decode(window)
        except json.JSONDecodeError as exc:
            if whole or not _cut_by(exc, window):
                raise
        except RecursionError:
            raise ValueError("it is nested too deeply") from None
        else:
            if whole or end < len(window):  # a value that ends at the window's edge may go on past it
                return value, pos + end
        size *= 4


_WINDOW = 4096


def _cut_by(exc: json.JSONDecodeError, window: str) -> bool:
    """The decoder stopped at the window's end (or in a string running to it), not at an error."""
    return exc.msg.startswith("Unterminated string") or exc.pos >= len(window) - 6


def closing(text: str, pos: int, quotes: str = '"') -> int:
    """Just past the bracket that closes the one at text[pos]; -1 when none does (cut off, or
    unbalanced). Brackets inside strings (opened by one of `quotes`) do not count: where broken
    markup would have ended, to tell a cut-off call from an example with prose after it."""
    depth, quote = 0, ""
    while pos < len(text):
        char = text[pos]
        if quote:
            pos += char == "\\"  # the escaped character is skipped with it
            quote = "" if char == quote else quote
        elif char in quotes:
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return pos + 1
        pos += 1
    return -1


def rstrip_at(text: str, end: int, floor: int = 0) -> int:
    """`end` moved back over blanks, not below `floor` (text[:end].rstrip() without the copy)."""
    while end > floor and text[end - 1] in BLANKS:
        end -= 1
    return end


def named_in(text: str) -> str:
    """The first "name": "..." in markup whose JSON does not parse: the tool the model meant."""
    found = _NAME.search(text)
    return found.group(1).strip() if found else ""


def named_of(values: list[Any]) -> str:
    """The tool JSON that parses but is no call names at its top level ("" when none): a name deeper
    down (a tool listing's) is not one the model called."""
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                return item["name"].strip()
    return ""


def shaped(value: Any) -> bool:
    """A JSON object that means to be a call: a "name" and its "arguments" (or "parameters")."""
    return isinstance(value, dict) and "name" in value and ("arguments" in value or "parameters" in value)


def meant(values: list[Any]) -> bool:
    """Some value (or an item of an array value) is shaped as a call: JSON that meant to call."""
    return any(shaped(item) for value in values for item in (value if isinstance(value, list) else [value]))


def calls_in(values: list[Any]) -> list[Found] | None:
    """The calls the values hold, each a call object or an array of them; None unless every one is."""
    calls: list[Found] = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            found = json_call(item)
            if found is None:
                return None
            calls.append(found)
    return calls or None


def teach(problem: str, rule: str, example: str) -> str:
    """The message an error call carries back to the model: what is wrong, that nothing ran, and
    the form written right."""
    return f"{problem}; nothing was run. {rule}, e.g.\n{example}"
