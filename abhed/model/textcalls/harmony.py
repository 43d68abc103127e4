"""gpt-oss calls in the harmony format, as they can reach a reply's text.

A call is an assistant message addressed to a function:
    <|start|>assistant<|channel|>commentary to=functions.read <|constrain|>json<|message|>{"path": "/x"}<|call|>

| fact | source |
| --- | --- |
| `<|start|>` `<|channel|>` `<|constrain|>` `<|message|>` `<|end|>` `<|call|>` `<|return|>` are special tokens of o200k_harmony; `<|call|>` ends a call and stops sampling, so a reply holds at most one call, last | openai-harmony format guide |
| the recipient `to=functions.NAME` stands in the channel part of the header or in the role part (`<|start|>assistant to=functions.NAME<|channel|>commentary`); `<|constrain|>json` is optional, and "json" may stand bare after the recipient | openai-harmony format guide; vLLM harmony input rendering (`with_content_type("json")`) |
| gpt-oss-20b sometimes calls on the analysis channel: `analysis to=functions.grep code` | vLLM issue quoted in a serving_chat fix |
| vLLM never puts harmony text in `content`: it parses the token ids with openai_harmony. Without the `openai` tool parser, current vLLM gives the final channel (and commentary preambles) as content and drops a call; vLLM 0.10.1 put the last message's text there, so a call arrived as its bare arguments, `{"path": "/x"}`, its name lost: nothing in it can be read back | vLLM chat_completion harmony utils, harmony_utils.parse_chat_output (both versions) |
| servers that decode gpt-oss as plain text either keep the tokens (llama.cpp without its harmony parser) or strip them with skip_special_tokens, leaving `assistantcommentary to=functions.read json{"path": "/x"}` | the token table above; how skip_special_tokens decodes |

Read here: a message whose header names `to=functions.NAME`, tokens kept ("anywhere"); and the
stripped text `to=functions.NAME [json]{...}` when those JSON arguments end the reply, as a call cut
off by its stop token does ("anywhere": the arguments ending the reply stand in for the tokens).
Messages with no recipient (analysis, final) are not calls; recipients other than functions.* (the
built-in python and browser tools) are taught the functions.NAME form.
"""

from __future__ import annotations

import json
import re

from abhed.model.textcalls.base import Found, Span, json_error
from abhed.model.textcalls.scan import decode_at, rstrip_at, skip, teach

NAME = "harmony"
MESSAGE, PREFIX = "<|message|>", "to=functions."
ENDS = ("<|call|>", "<|end|>", "<|return|>")
NEXT = ("<|start|>", "<|channel|>")  # a message that follows without its predecessor's end token
EXAMPLE = '<|channel|>commentary to=functions.read <|constrain|>json<|message|>{"path": "/abs/path/file.py"}<|call|>'
RULE = "Address the message to=functions.NAME on the commentary channel, with the arguments as one JSON object"
_HEADER = re.compile(r"(?:<\|start\|>(?P<role>[^<]*))?(?:<\|channel\|>(?P<channel>[^<]*))?"
                     r"(?:<\|constrain\|>[^<]*)?<\|message\|>")
_BOUNDARY = re.compile(r"(<\|(?:call|end|return)\|>)|<\|(?:start|channel)\|>")
_RECIPIENT = re.compile(r"\bto=(\S+)")
_STRIPPED = re.compile(r"to=functions\.([A-Za-z0-9_.-]+)[ \t]*(?:json|code)?[ \t]*(?=\{)")
_GLUED = re.compile(r"(?:commentary|analysis|json)$")  # header words a stripped token left on the name
_LEAD = re.compile(r"(?:assistant)?(?:commentary|analysis)?[ \t]*$")  # what a stripped header put before to=


class _Harmony:
    name = NAME
    openers = ("<|start|>", "<|channel|>", MESSAGE, PREFIX)
    leads = ("assistant", "analysis", "commentary")  # a stripped header: what comes before to=functions.

    def find(self, text: str) -> list[Span]:
        if MESSAGE in text:
            return _messages(text)
        return _stripped(text) if PREFIX in text else []


FORM = _Harmony()


def _messages(text: str) -> list[Span]:
    spans: list[Span] = []
    pos = 0
    while (header := _HEADER.search(text, pos)) is not None:
        span = _message(text, header)
        if span is not None:
            spans.append(span)
        pos = span.end if span is not None else header.end()
    return spans


def _message(text: str, header: re.Match[str]) -> Span | None:
    found = _RECIPIENT.search(header.group("channel") or "") or _RECIPIENT.search(header.group("role") or "")
    recipient = found.group(1) if found else ""
    if recipient in ("", "assistant", "user"):
        return None  # reasoning, an answer, or a tool's result: not a call
    if not recipient.startswith("functions.") or recipient == "functions.":
        problem = f"Your message goes to {recipient}, which is not one of the tools"
        return _error(text, header.start(), header.end(), problem, recipient.rsplit(".", 1)[-1])
    name = recipient[len("functions."):]
    return _arguments(text, header.start(), header.end(), name)


def _arguments(text: str, at: int, pos: int, name: str) -> Span:
    try:
        value, end = decode_at(text, pos)
    except ValueError as exc:
        problem = f"The arguments of your call of {name} do not parse ({json_error(exc)})"
        return _error(text, at, pos, problem, name)
    if not isinstance(value, dict):
        return _error(text, at, pos, f"The arguments of your call of {name} are not a JSON object", name)
    close = skip(text, end)
    if text.startswith(ENDS, close):
        end = close + len(next(e for e in ENDS if text.startswith(e, close)))
    elif close < len(text) and not text.startswith(NEXT, close):
        return _error(text, at, pos, f"Your call of {name} has text after its arguments", name)
    return Span(at, end, NAME, calls=[Found(name, value)], placement="anywhere")


def _error(text: str, at: int, pos: int, problem: str, named: str) -> Span:
    """The message from its header through its end token (or up to the next message, or the end)."""
    boundary = _BOUNDARY.search(text, pos)
    if boundary is None:
        end = rstrip_at(text, len(text), pos)
    else:
        end = boundary.end() if boundary.group(1) else boundary.start()  # through an end token, not a next header
    return Span(at, max(end, pos), NAME, error=teach(problem, RULE, EXAMPLE), named=named, placement="anywhere")


def _stripped(text: str) -> list[Span]:
    """`to=functions.NAME json{...}` left by a decoder that dropped the tokens: a call only when its
    JSON ends the reply, as a call stopped by `<|call|>` does; JSON followed by more text is prose
    showing the format."""
    tail = rstrip_at(text, len(text))
    for found in _STRIPPED.finditer(text):
        name = found.group(1)
        glued = _GLUED.search(name)
        name = name[:glued.start()] if glued and glued.start() > 0 else name
        lead = _LEAD.search(text, max(0, found.start() - 40), found.start())
        start = lead.start() if lead else found.start()
        try:
            value, end = decode_at(text, found.end())
        except ValueError as exc:
            if not _cut(exc, found.end(), tail):
                continue
            problem = f"The arguments of your call of {name} are cut off ({json_error(exc)})"
            return [Span(start, tail, NAME, error=teach(problem, RULE, EXAMPLE), named=name, placement="anywhere")]
        if end >= tail:
            return [_arguments(text, start, found.end(), name)]
    return []


def _cut(exc: ValueError, start: int, tail: int) -> bool:
    """JSON (from `start`) that fails only because the reply ended inside it."""
    if not isinstance(exc, json.JSONDecodeError):
        return False
    return exc.msg.startswith("Unterminated string") or start + exc.pos >= tail  # exc.pos counts from the value
