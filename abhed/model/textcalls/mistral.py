"""Mistral / Devstral calls after the `[TOOL_CALLS]` token, in both tokenizer generations.

| fact | source |
| --- | --- |
| tokenizers before v11 (Mistral 7B v0.3, Nemo, Small 24.09): `[TOOL_CALLS]` then a JSON array of {"name", "arguments"} (items may carry "id"); blanks may come first | mistral_common `_decode_tool_calls_v2_up_to_v7`; vLLM mistral parser |
| v11 and later (Small 3.1/3.2, Devstral, Magistral): `[TOOL_CALLS]name[ARGS]{json}`, once per call; v11 may put `[CALL_ID]id` before `[ARGS]`; v13 never does | mistral_common `InstructTokenizerV11/V13`, `_decode_tool_call_v11*` |
| a name: 1 to 64 of A-Z a-z 0-9 _ - | mistral_common validator |
| what arrives: vLLM's Mistral tokenizer keeps `[TOOL_CALLS]` (and [THINK]) when it skips special tokens but drops `[ARGS]` and `[CALL_ID]`, so v11+ calls read `[TOOL_CALLS]read{"path": ...}`; an HF tokenizer with special tokens kept shows `[ARGS]` too; one that skips them drops `[TOOL_CALLS]` as well (then only a bare JSON array is left, read by llama_json.py) | vLLM MistralTokenizer.convert_ids_to_tokens; vLLM mistral parser |
| vLLM: text before the first token is content; pre-v11 takes the first JSON value and ignores what trails it, and refuses a second `[TOOL_CALLS]`; v11+ takes the name up to the first "{" and the arguments from there to the next token, passing them on even when they do not parse | vLLM mistral parser |

Placement: "anywhere": `[TOOL_CALLS]` is a control token that prose does not write.
"""

from __future__ import annotations

import re

from abhed.model.textcalls.base import Found, Span, json_error
from abhed.model.textcalls.scan import calls_in, decode_at, named_in, named_of, rstrip_at, skip, teach

NAME = "mistral"
TOKEN, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
EXAMPLE = '[TOOL_CALLS]read{"path": "/abs/path/file.py"}'
LISTED = '[TOOL_CALLS][{"name": "read", "arguments": {"path": "/abs/path/file.py"}}]'
RULE = "Write [TOOL_CALLS], the tool's name, then its arguments as one JSON object, once per call"
LIST_RULE = 'Write [TOOL_CALLS] then a JSON array of {"name": ..., "arguments": {...}} objects'
_TOOL = re.compile(r"[A-Za-z0-9_-]{1,64}")


class _Mistral:
    name = NAME
    openers = (TOKEN,)
    leads = ()

    def find(self, text: str) -> list[Span]:
        spans: list[Span] = []
        at = text.find(TOKEN)
        while at >= 0:
            spans.append(_one(text, at))
            at = text.find(TOKEN, spans[-1].end)
        return spans


FORM = _Mistral()


def _one(text: str, at: int) -> Span:
    after = at + len(TOKEN)
    following = text.find(TOKEN, after)
    bound = following if following >= 0 else len(text)  # where a call that does not parse ends
    first = skip(text, after)
    if text[first:first + 1] in ("[", "{") and not text.startswith((ARGS, CALL_ID), first):
        return _listed(text, at, first, bound)
    return _named(text, at, after, bound)


def _listed(text: str, at: int, pos: int, bound: int) -> Span:
    """Before v11: a JSON array of call objects (one object alone is read too)."""
    try:
        value, end = decode_at(text, pos)
    except ValueError as exc:
        problem = f"The JSON after your [TOOL_CALLS] does not parse ({json_error(exc)})"
        return _error(text, at, bound, problem, named_in(text[pos:bound]), LIST_RULE, LISTED)
    calls = calls_in([value])
    if calls:
        return Span(at, end, NAME, calls=calls, placement="anywhere")
    problem = 'The JSON after your [TOOL_CALLS] is not a list of calls: each needs "name" and "arguments" (an object)'
    return _error(text, at, max(end, bound), problem, named_of([value]), LIST_RULE, LISTED)


def _named(text: str, at: int, pos: int, bound: int) -> Span:
    """v11 and later: NAME, an optional [CALL_ID]id, an optional [ARGS], then the JSON object."""
    tool = _TOOL.match(text, pos)
    name = tool.group() if tool else ""
    pos = tool.end() if tool else pos
    if text.startswith(CALL_ID, pos):
        args = text.find(ARGS, pos, bound)
        pos = args if args >= 0 else bound
    if text.startswith(ARGS, pos):
        pos += len(ARGS)
    pos = skip(text, pos)
    if not name:
        return _error(text, at, bound, "Your [TOOL_CALLS] is not followed by a tool's name", "", RULE, EXAMPLE)
    if pos >= len(text) or text[pos] != "{":
        cut = "is cut off before its arguments" if pos >= len(text) else "is not followed by a JSON object"
        return _error(text, at, bound, f"Your call of {name} {cut}", name, RULE, EXAMPLE)
    try:
        value, end = decode_at(text, pos)
    except ValueError as exc:
        problem = f"The arguments of your call of {name} do not parse ({json_error(exc)})"
        return _error(text, at, bound, problem, name, RULE, EXAMPLE)
    return Span(at, end, NAME, calls=[Found(name, value)], placement="anywhere")


def _error(text: str, at: int, end: int, problem: str, named: str, rule: str, example: str) -> Span:
    end = rstrip_at(text, end, at)  # the blanks before the next token are not the call's
    return Span(at, max(end, at + len(TOKEN)), NAME, error=teach(problem, rule, example), named=named,
                placement="anywhere")
