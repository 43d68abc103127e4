"""Qwen2.5-Coder's text calls: `<tools>` blocks of JSON, and a reply that is all ```json fences.

Qwen2.5-Coder was not trained on Hermes `<tool_call>` tags (those are hermes.py's): it writes what
its prompt's examples show, and without examples a fenced JSON object.

| fact | source |
| --- | --- |
| `<tools>` and `</tools>` are plain text, not tokens: they survive every decoding | Qwen2.5 vocabulary (no such added token) |
| body: {"name", "arguments"} or a JSON array of them; "parameters" read too; objects one per line or comma-separated also read | vLLM qwen2_5_coder parser (PR 32931) |
| several calls: one block each, or an array in one block | examples/tool_chat_template_qwen2_5_coder.jinja |
| text around: vLLM keeps it as content; an unclosed `<tools>BODY` is read to the end | vLLM qwen2_5_coder parser |
| no format instruction: the whole reply is a ```json block holding {"name","arguments"} (Qwen2.5-Coder-7B, temperature 0: every reply) | vLLM issue 32926 |
| with Hermes examples: 60 % fences, 40 % bare JSON; the bare JSON reply is read by llama_json.py, not here | vLLM issue 32926 |

Placement: a `<tools>` block is "line" (the tag is plain text, and Abhed's own prompt lists tools
in one); the fences are "whole": a fenced call amid prose is a sample, not a call.
"""

from __future__ import annotations

import re
from typing import Any

from abhed.model.textcalls.base import Span, json_error, loads
from abhed.model.textcalls.scan import calls_in, decode_at, meant, named_in, named_of, rstrip_at, skip, teach

NAME = "qwen25"
OPEN, CLOSE = "<tools>", "</tools>"
EXAMPLE = '<tools>\n{"name": "read", "arguments": {"path": "/abs/path/file.py"}}\n</tools>'
FENCED = '```json\n{"name": "read", "arguments": {"path": "/abs/path/file.py"}}\n```'
RULE = 'Write one JSON object with "name" (a string) and "arguments" (an object) per <tools> block'
_FENCE = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.S)
_WHOLE = re.compile(r"```(?:json)?[ \t]*\n(.*)```", re.S)


class _Qwen25:
    name = NAME
    openers = (OPEN,)
    leads = ("```json", "```\n{", "```\n[")  # a reply that is all fences of calls

    def find(self, text: str) -> list[Span]:
        spans = _blocks(text) if OPEN in text else []
        if not spans and text.startswith("```", skip(text, 0)):
            whole = _fences(text)
            spans = [whole] if whole else []
        return spans


FORM = _Qwen25()


def _blocks(text: str) -> list[Span]:
    spans: list[Span] = []
    at = text.find(OPEN)
    while at >= 0:
        spans.append(_block(text, at))
        at = text.find(OPEN, spans[-1].end)
    return spans


def _block(text: str, at: int) -> Span:
    body = at + len(OPEN)
    values, end, problem = _values(text, body)
    calls = calls_in(values) if problem is None else None
    if calls:
        return Span(at, end, NAME, calls=calls, placement="line")
    stop = _bound(text, end)  # from where reading stopped: a string read whole may hold </tools>
    named = named_in(text[body:stop]) if problem else named_of(values)
    if problem is None:
        problem = "Your <tools> block holds JSON that is not a call"
    return Span(at, max(stop, end), NAME, error=teach(problem, RULE, EXAMPLE), named=named, placement="line")


def _values(text: str, pos: int) -> tuple[list[Any], int, str | None]:
    """The JSON values of a block from `pos` (blanks and commas between them, as vLLM reads), where
    the block ends, and what is wrong with it (None: nothing)."""
    values: list[Any] = []
    while True:
        pos = skip(text, pos, " \t\r\n,")
        if text.startswith(CLOSE, pos):
            return values, pos + len(CLOSE), None if values else "Your <tools> block is empty"
        if pos >= len(text):  # the reply ended inside the block: whole values still are calls
            return values, pos, None if values else "Your <tools> block is cut off before its JSON"
        if text[pos] not in "{[":
            return values, pos, ("Your <tools> block does not close with </tools> after its JSON" if values
                                 else "Your <tools> block holds text that is not JSON")
        try:
            value, pos = decode_at(text, pos)
        except ValueError as exc:
            cut = "" if _bound(text, pos) < len(text) or text.endswith(CLOSE) else " and is cut off before </tools>"
            return values, pos, f"The JSON in your <tools> block does not parse ({json_error(exc)}){cut}"
        values.append(value)


def _bound(text: str, body: int) -> int:
    """Where a block that does not parse ends: past its </tools>, or at the next <tools> (a mention
    of the tag must not swallow the block after it), or at the end."""
    reopen = text.find(OPEN, body)
    limit = reopen if reopen >= 0 else len(text)
    close = text.find(CLOSE, body, limit)  # never past the next block: each stretch is searched once
    return close + len(CLOSE) if close >= 0 else limit


def _fences(text: str) -> Span | None:
    """A reply that is nothing but ```json fences of calls; None when it is anything else (a fenced
    JSON answer is not a call)."""
    start = skip(text, 0)
    end = rstrip_at(text, len(text), start)
    whole = _WHOLE.fullmatch(text, start, end)  # one fence, read first: its JSON may hold ``` itself
    tiles = [whole.group(1)] if whole else []
    parsed = _parsed(tiles)
    if not isinstance(parsed, list):  # several fences, then
        tiles = _tiles(text, start, end) or tiles
        parsed = _parsed(tiles)
    if not tiles or parsed is None:  # (parsed is None only when there are no tiles)
        return None
    if isinstance(parsed, Exception):
        return _broken_fence("\n".join(tiles), start, end, parsed)
    calls = calls_in(parsed)
    if calls:
        return Span(start, end, NAME, calls=calls, placement="whole")
    if not meant(parsed):
        return None
    return Span(start, end, NAME, named=named_of(parsed), placement="whole", error=teach(
        "Your fenced JSON is not a call", 'Give "name" (a string) and "arguments" (an object)', FENCED))


def _tiles(text: str, start: int, end: int) -> list[str]:
    """The bodies of the fences that make up text[start:end] with only blanks between; [] if
    anything else stands there."""
    inners, pos = [], start
    for fence in _FENCE.finditer(text, start, end):
        if text[pos:fence.start()].strip():
            return []
        inners.append(fence.group(1))
        pos = fence.end()
    return inners if not text[pos:end].strip() else []


def _parsed(inners: list[str]) -> list[Any] | Exception | None:
    """Each body's JSON value; the first error when one does not parse; None when there are none."""
    if not inners:
        return None
    values = []
    for inner in inners:
        try:
            values.append(loads(inner))
        except ValueError as exc:
            return exc
    return values


def _broken_fence(inner: str, start: int, end: int, exc: Exception) -> Span | None:
    named = named_in(inner)
    if not named or ('"arguments"' not in inner and '"parameters"' not in inner):
        return None  # broken JSON that never meant to be a call
    return Span(start, end, NAME, named=named, placement="whole", error=teach(
        f"The JSON in your fenced call does not parse ({json_error(exc)})",
        'Write one JSON object with "name" (a string) and "arguments" (an object) in a ```json fence', FENCED))
