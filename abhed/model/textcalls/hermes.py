"""Hermes (Qwen2.5, Qwen3, Hermes, many fine-tunes): one JSON object per <tool_call> block.

    <tool_call>
    {"name": "read", "arguments": {"path": "/w/a.py"}}
    </tool_call>

vLLM's hermes parser cuts each block at the first </tool_call>. Here the JSON is decoded from
the block's opening brace, so a string value that holds "</tool_call>" (a file about tool calls)
stays whole; the block then ends at the first </tool_call> after the JSON. Also read, as models
write them: "parameters" for "arguments", arguments given as a JSON string, a ```json fence inside
the block, a JSON array of calls in one block, and a last block cut off before its closing tag.
A block whose body is XML (<function=...) belongs to the Qwen3-Coder form (qwen3_xml.py).
"""

from __future__ import annotations

import re

from abhed.model.textcalls.base import Span, json_call, json_error
from abhed.model.textcalls.scan import decode_at, named_in, skip_space

OPEN, CLOSE = "<tool_call>", "</tool_call>"
EXAMPLE = '<tool_call>\n{"name": "read", "arguments": {"path": "/abs/path/file.py"}}\n</tool_call>'
_FENCE = re.compile(r"```(?:json)?[ \t]*\n?")


class Hermes:
    name = "hermes"
    openers = (OPEN,)
    leads = ()

    def find(self, text: str) -> list[Span]:
        spans: list[Span] = []
        at = text.find(OPEN)
        while at >= 0:
            span = self._block(text, at)
            if span is not None:
                spans.append(span)
            at = text.find(OPEN, max(at + len(OPEN), span.end if span else 0))  # pragma: no mutate (else 1: the same)
        return spans

    def _block(self, text: str, at: int) -> Span | None:
        body = at + len(OPEN)
        start = skip_space(text, body)
        if text.startswith("<function=", start):
            return None  # Qwen3-Coder's XML in a <tool_call> block
        fence = _FENCE.match(text, start)
        if fence:
            start = skip_space(text, fence.end())
        try:
            value, end = _decode(text, start)
        except ValueError as exc:
            return self._broken(text, at, body, exc)
        end = skip_space(text, end)
        if fence and text.startswith("```", end):
            end = skip_space(text, end + 3)
        if text.startswith(CLOSE, end):
            end += len(CLOSE)
        elif end < len(text) and text.find(CLOSE, end) >= 0:  # pragma: no mutate (<=, > 0: the same outcome)
            # more than one JSON value in the block
            return self._broken(text, at, body, ValueError("text follows the JSON object"))
        calls = [json_call(item) for item in (value if isinstance(value, list) else [value])]
        if not calls or any(call is None for call in calls):
            return Span(at, end, self.name, error=_SHAPE, named=named_in(text[body:end]))
        return Span(at, end, self.name, [call for call in calls if call is not None])

    def _broken(self, text: str, at: int, body: int, exc: Exception) -> Span:
        end = _bound(text, body)
        return Span(at, end, self.name, named=named_in(text[body:end]), error=(
            f"The JSON in your <tool_call> block does not parse ({json_error(exc)}); nothing was run. Write one "
            f"JSON object per block, with the arguments as an object, e.g.\n{EXAMPLE}"))


def _bound(text: str, body: int) -> int:
    """Where a block that does not parse ends: past its </tool_call>, or at the next <tool_call> (a
    mention of the tag must not swallow the block after it), or at the end. Each stretch of the
    reply is searched once, so a reply of many broken blocks is read in linear time."""
    reopened = text.find(OPEN, body)
    limit = reopened if reopened >= 0 else len(text)  # pragma: no mutate (> 0: a block never opens at 0 here)
    close = text.find(CLOSE, body, limit)
    return close + len(CLOSE) if close >= 0 else limit  # pragma: no mutate (> 0: as above)


_SHAPE = ("Your <tool_call> block needs a JSON object with \"name\" (a string) and \"arguments\" (an object); "
          f"nothing was run. For example:\n{EXAMPLE}")


def _decode(text: str, start: int) -> tuple[object, int]:
    """The JSON value at text[start:] and where it ends; ValueError when there is none."""
    if start >= len(text) or text[start] not in "{[":
        raise ValueError("a JSON object must follow <tool_call>")
    return decode_at(text, start)


FORM = Hermes()
