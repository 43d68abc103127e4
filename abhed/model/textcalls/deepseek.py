"""DeepSeek V3 and V3.1 calls between DeepSeek's tool tokens: one form, "deepseek", reads both
(the token after `<｜tool▁call▁begin｜>` tells them apart).

The bars are FULLWIDTH VERTICAL LINE (U+FF5C) and the word joins LOWER ONE EIGHTH BLOCK (U+2581):
    <｜tool▁calls▁begin｜> <｜tool▁call▁begin｜> <｜tool▁sep｜> <｜tool▁call▁end｜> <｜tool▁calls▁end｜>

| fact | source |
| --- | --- |
| V3 (and R1-0528): `<｜tool▁calls▁begin｜>` then per call `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` newline ```json newline ARGS newline ``` `<｜tool▁call▁end｜>`, calls separated by a newline, then `<｜tool▁calls▁end｜><｜end▁of▁sentence｜>` | vLLM deepseekv3 parser; examples/tool_chat_template_deepseekv3.jinja |
| V3's template writes past arguments with `tojson` over the arguments string, so the model may echo them as a JSON string holding the object | examples/tool_chat_template_deepseekv3.jinja |
| V3.1: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>`, calls chained with nothing between | vLLM deepseekv31 parser; examples/tool_chat_template_deepseekv31.jinja |
| the tokens survive decoding: neither parser turns skip_special_tokens off, yet both find them in the text | vLLM deepseekv3 / deepseekv31 parsers |
| vLLM: content is the text before `<｜tool▁calls▁begin｜>`; its regexes match within one line (no DOTALL), so arguments over several lines are lost, and V3.1 passes arguments on without parsing them | vLLM deepseekv3 / deepseekv31 parsers |

Placement: "anywhere": prose does not hold these tokens.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from abhed.model.textcalls.base import Found, Span, json_error, loads
from abhed.model.textcalls.scan import decode_at, rstrip_at, skip, teach

NAME = "deepseek"
CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
SEP, EOS = "<｜tool▁sep｜>", "<｜end▁of▁sentence｜>"
EXAMPLE = f'{CALLS_BEGIN}{CALL_BEGIN}read{SEP}{{"path": "/abs/path/file.py"}}{CALL_END}{CALLS_END}'
EXAMPLE_V3 = (f'{CALLS_BEGIN}{CALL_BEGIN}function{SEP}read\n```json\n{{"path": "/abs/path/file.py"}}\n```'
              f'{CALL_END}{CALLS_END}')
RULE = f"Write {CALL_BEGIN}, the tool's name, {SEP}, the arguments as one JSON object, then {CALL_END}"
RULE_V3 = f"Write {CALL_BEGIN}function{SEP}, the tool's name, then the arguments in a ```json fence and {CALL_END}"
_V3_NAME = re.compile(r"[ \t]*([^\s`<｜]+)[ \t]*\r?\n[ \t]*```(?:json)?[ \t]*\r?\n?")
_V3_CLOSE = re.compile(r"\s*```")
_TOOL = re.compile(r"[^\s<｜]+")
_BEGIN = re.compile(re.escape(CALLS_BEGIN) + "|" + re.escape(CALL_BEGIN))
_LEADING = re.compile(r"([A-Za-z0-9_.-]+)(?:\s|\{|$)")  # the name a call without its separator begins with


class _DeepSeek:
    name = NAME
    openers = (CALLS_BEGIN, CALL_BEGIN)
    leads = ()

    def find(self, text: str) -> list[Span]:
        if CALL_BEGIN not in text and CALLS_BEGIN not in text:
            return []
        begins = _Begins(text)
        spans: list[Span] = []
        at = begins.after(0)
        while at < len(text):
            spans.append(_call(text, at, begins))
            at = begins.after(spans[-1].end)
        return spans


FORM = _DeepSeek()


class _Begins:
    """Where each call may begin, found once: looking for the next one never rescans the text."""

    def __init__(self, text: str) -> None:
        self.positions = sorted(m.start() for m in _BEGIN.finditer(text))
        self.end = len(text)

    def after(self, pos: int) -> int:
        """The first begin token at or after `pos`; the text's length when none."""
        index = bisect.bisect_left(self.positions, pos)
        return self.positions[index] if index < len(self.positions) else self.end


def _call(text: str, at: int, begins: _Begins) -> Span:
    pos = at + len(CALL_BEGIN)
    if text.startswith(CALLS_BEGIN, at):
        pos = skip(text, at + len(CALLS_BEGIN))
        if text.startswith(CALL_BEGIN, pos):
            pos += len(CALL_BEGIN)  # else the model left the inner token out: the call starts here
    bound = begins.after(pos)
    sep = text.find(SEP, pos, bound)
    head = text[pos:sep if sep >= 0 else bound].strip()
    if sep < 0:
        named = _LEADING.match(head)
        return _error(text, at, bound, f"Your tool call has no {SEP} after the tool's name",
                      named.group(1) if named else "", head)
    if head == "function" and not text.startswith("{", skip(text, sep + len(SEP))):
        return _v3(text, at, sep + len(SEP), bound)
    if not _TOOL.fullmatch(head):
        return _error(text, at, bound, f"Your tool call does not name a tool before {SEP}", "", head)
    return _arguments(text, at, head, sep + len(SEP), bound, v3=False)


def _v3(text: str, at: int, pos: int, bound: int) -> Span:
    """V3: after `function<｜tool▁sep｜>`, the name on its own line, then the ```json fence."""
    line = _V3_NAME.match(text, pos, bound)
    if not line:
        named = _TOOL.match(text, skip(text, pos, " \t"), bound)
        return _error(text, at, bound, "Your tool call does not give the tool's name and then a ```json fence",
                      named.group() if named else "", "function")
    return _arguments(text, at, line.group(1), line.end(), bound, v3=True)


def _arguments(text: str, at: int, name: str, pos: int, bound: int, v3: bool) -> Span:
    head = "function" if v3 else name
    try:
        value, end = decode_at(text, pos)
    except ValueError as exc:
        problem = f"The arguments of your call of {name} do not parse ({json_error(exc)})"
        return _error(text, at, bound, problem, name, head)
    args = _object(value)
    if args is None:
        return _error(text, at, bound, f"The arguments of your call of {name} are not a JSON object", name, head)
    if v3:
        fence = _V3_CLOSE.match(text, end)
        end = fence.end() if fence else end  # a fence left open is forgiven: the arguments are whole
    close = skip(text, end)
    if text.startswith(CALL_END, close):
        end = close + len(CALL_END)
    elif close < len(text):  # only the end of the reply may stand for the end token
        return _error(text, at, bound, f"Your call of {name} does not end with {CALL_END}", name, head)
    return Span(at, _trailer(text, end), NAME, calls=[Found(name, args)], placement="anywhere")


def _object(value: Any) -> dict[str, Any] | None:
    """The arguments as an object; a JSON string holding one is read too (V3's template shows past
    arguments that way)."""
    if isinstance(value, str):
        try:
            value = loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _trailer(text: str, end: int) -> int:
    """Past `<｜tool▁calls▁end｜>` and `<｜end▁of▁sentence｜>` when they follow the last call."""
    for token in (CALLS_END, EOS):
        pos = skip(text, end)
        if text.startswith(token, pos):
            end = pos + len(token)
    return end


def _error(text: str, at: int, bound: int, problem: str, named: str, head: str) -> Span:
    v3 = head == "function"
    end = rstrip_at(text, bound, at)
    return Span(at, _trailer(text, max(end, at + 1)), NAME, named=named, placement="anywhere",
                error=teach(problem, RULE_V3 if v3 else RULE, EXAMPLE_V3 if v3 else EXAMPLE))
