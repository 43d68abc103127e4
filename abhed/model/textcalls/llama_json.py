"""Llama 3.x JSON calls: a reply that is nothing but {"name": ..., "parameters": {...}} objects, or
JSON after the `<|python_tag|>` token.

| fact | source |
| --- | --- |
| the call: {"name": NAME, "parameters": {...}}; "arguments" read too ("parameters" is what the prompt asks for) | examples/tool_chat_template_llama3.1_json.jinja; vLLM llama3_json parser |
| several calls: objects separated by "; " (the streaming parser steps over exactly two characters) | vLLM llama3_json parser |
| `<|python_tag|>` may come first; it is a special token, so skip_special_tokens (vLLM's default; the parser does not turn it off) strips it and the JSON arrives bare | vLLM llama3_json parser |
| vLLM reads every top-level {...} anywhere in the reply and drops the text around (content None); one object without "name" and "arguments"/"parameters" makes the whole reply content | vLLM llama3_json parser |
| a bare JSON array of calls arrives from Mistral pre-v11 models when the HF tokenizer strips [TOOL_CALLS], and from Qwen2.5-Coder (vLLM issue 32926, "plain JSON") | mistral_common decoding; vLLM issue 32926 |

Placement: the bare JSON is "whole" (found only when it is the entire reply: JSON in prose is an
example, not a call); after `<|python_tag|>` it is "anywhere", no prose holds that token.
"""

from __future__ import annotations

from typing import Any

from abhed.model.textcalls.base import Span, json_error
from abhed.model.textcalls.scan import calls_in, closing, decode_at, meant, named_in, named_of, rstrip_at, skip, teach

NAME = "llama_json"
TAG = "<|python_tag|>"
EXAMPLE = '{"name": "read", "parameters": {"path": "/abs/path/file.py"}}'
RULE = ('Reply with only JSON objects {"name": NAME, "parameters": {ARGUMENTS}}, several separated by "; "'
        ' and nothing else in the reply')


class _LlamaJson:
    name = NAME
    openers = (TAG,)
    leads = ("{", "[")  # the bare form is the whole reply

    def find(self, text: str) -> list[Span]:
        head = skip(text, 0)
        whole = _whole(text, head) if text[head:head + 1] in ("{", "[") else None
        if whole:  # read first: a string in its arguments may hold the tag
            return [whole]
        return _tagged(text) if TAG in text else []


FORM = _LlamaJson()


def _sequence(text: str, pos: int) -> tuple[list[Any], int, str | None]:
    """JSON values from `pos`, separated by blanks and semicolons, up to the first thing that is not
    one; where the last one ends; what is wrong (None: nothing)."""
    values: list[Any] = []
    end = pos
    while True:
        pos = skip(text, end, " \t\r\n;")
        if pos >= len(text) or text[pos] not in "{[":
            return values, end, None
        try:
            value, end = decode_at(text, pos)
        except ValueError as exc:
            return values, end, f"Your JSON call does not parse ({json_error(exc)})"
        values.append(value)


def _whole(text: str, head: int) -> Span | None:
    values, end, problem = _sequence(text, head)
    tail = rstrip_at(text, len(text), head)
    if problem is None and skip(text, end, " \t\r\n;") < len(text):
        return None  # text after the JSON: a reply that shows JSON, not a call
    calls = calls_in(values) if problem is None else None
    if calls:
        return Span(head, tail, NAME, calls=calls, placement="whole")
    if problem is None and meant(values):
        problem = 'Your JSON reply is not a call: each object needs "name" (a string) and "parameters" (an object)'
    elif problem is None or not _meant_text(text[head:]) or 0 <= closing(text, head) < tail:
        return None  # JSON, or broken JSON, that never meant to call, or that prose follows
    named = named_of(values) if meant(values) else named_in(text[head:])
    return Span(head, tail, NAME, error=teach(problem, RULE, EXAMPLE), named=named, placement="whole")


def _meant_text(text: str) -> bool:
    """Broken JSON that still shows a call's keys: the model meant a call."""
    return bool(named_in(text)) and ('"parameters"' in text or '"arguments"' in text)


def _tagged(text: str) -> list[Span]:
    spans: list[Span] = []
    at = text.find(TAG)
    while at >= 0:
        spans.append(_after_tag(text, at))
        at = text.find(TAG, spans[-1].end)
    return spans


def _after_tag(text: str, at: int) -> Span:
    values, end, problem = _sequence(text, at + len(TAG))
    calls = calls_in(values) if problem is None else None
    if calls:
        return Span(at, end, NAME, calls=calls, placement="anywhere")
    following = text.find(TAG, at + len(TAG))
    stop = following if following >= 0 else len(text)
    if problem is None:
        problem = ("Your <|python_tag|> is not followed by JSON calls" if not values
                   else 'Your JSON after <|python_tag|> is not a call: each object needs "name" and "parameters"')
    named = named_of(values) if values else named_in(text[at:stop])
    return Span(at, max(stop, end), NAME, error=teach(problem, "Write JSON after <|python_tag|>", TAG + EXAMPLE),
                named=named, placement="anywhere")
