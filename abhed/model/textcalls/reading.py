"""Which markup in a reply is a call: the one decision every text form shares.

Each form (hermes.py, qwen3_xml.py, ...) finds its markup; here every form's markup is judged the
same way:

1. Markup is a call only where a call can stand (Span.placement). "line" markup stands where its
   opener begins a line, or ends the reply (only other calls after it) when it parses or names a
   known tool; never inside a ``` fenced block (unless that block is the whole reply) or `inline
   code`. There it is an example in an answer about tool calls, and the answer is delivered.
2. Standing markup that parses is a call (an unknown tool included: dispatch names the tools).
3. Standing markup that does not parse is a broken call: the model is told what is wrong and how
   to write it (a ToolCall with `error`); the loop makes sure this is asked once, not in a loop.
4. Everything else is prose: the text before, between and after the calls, shown to the human.

vLLM's parsers take markup wherever it stands; rule 1 is a deliberate difference, so a final answer
that explains a tool-call format can be delivered.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from typing import Any

from abhed.model.textcalls import values
from abhed.model.textcalls.base import Form, Span
from abhed.model.wire import ToolCall, call_id

_FENCE = re.compile(r"^ {0,3}(```|~~~)", re.M)
_NONBLANK = re.compile(r"\S")


@dataclass
class Reading:
    calls: list[ToolCall]
    prose: str  # the reply without its calls: text before them kept as it came, later pieces joined
    forms: tuple[str, ...]  # the forms the calls were written in


def spans(text: str, forms: tuple[Form, ...]) -> list[Span]:
    """Every form's markup in `text`, in order. Where two overlap, one that parses beats one that
    does not (a fence another form cannot read around a Hermes block); then the one that starts
    first wins, and for the same start the longer."""
    found = sorted((span for form in forms for span in form.find(text)), key=lambda s: (s.start, -s.end))
    kept: list[Span] = []  # disjoint, in order of start
    for span in [s for s in found if s.error is None] + [s for s in found if s.error is not None]:
        at = bisect.bisect_left(kept, span.start, key=lambda other: other.start)
        if (at == 0 or kept[at - 1].end <= span.start) and (at == len(kept) or span.end <= kept[at].start):
            kept.insert(at, span)
    return kept


def read(text: str, schemas: dict[str, dict[str, Any]], forms: tuple[Form, ...]) -> Reading:
    """The calls `text` holds and the prose around them."""
    layout = _Layout(text)
    standing: list[Span] = []  # from the end: "ends the reply" depends on what stands after
    for span in reversed(spans(text, forms)):
        tail = standing[-1].start if standing else len(text)
        if _stands(layout, span, ends=layout.blank(span.end, tail), schemas=schemas):
            standing.append(span)
    standing.reverse()
    calls = [call for span in standing for call in _calls(text, span, schemas)]
    return Reading(calls, _prose(text, standing), tuple(dict.fromkeys(span.form for span in standing)))


def _stands(layout: _Layout, span: Span, ends: bool, schemas: dict[str, Any]) -> bool:
    if span.placement == "anywhere":
        return True
    if span.placement == "whole":
        return layout.blank(0, span.start) and layout.blank(span.end, len(layout.text))
    if layout.fenced(span.start) or layout.in_code(span.start):
        return False
    if layout.blank(layout.line_start(span.start), span.start):
        return True
    names = [call.name for call in span.calls] if span.error is None else [span.named]
    return ends and all(name in schemas for name in names)  # mid-line: only a call to a tool we have


class _Layout:
    """Where the reply's lines, fences and backticks are, found once: each span is then judged in
    logarithmic time, so a reply of many markers is read in linear time."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._newlines = [m.start() for m in re.finditer("\n", text)]
        self._ticks = [m.start() for m in re.finditer("`", text)]
        self._fences = _fences(text)
        self._fence_starts = [start for start, _ in self._fences]

    def blank(self, start: int, end: int) -> bool:
        return _NONBLANK.search(self.text, start, end) is None

    def line_start(self, at: int) -> int:
        before = bisect.bisect_left(self._newlines, at)
        return self._newlines[before - 1] + 1 if before else 0  # pragma: no mutate (+ 0: the newline is blank)

    def in_code(self, at: int) -> bool:
        """Inside `inline code`: an odd number of backticks before `at` on its line."""
        start = bisect.bisect_left(self._ticks, self.line_start(at))
        return (bisect.bisect_left(self._ticks, at) - start) % 2 == 1  # pragma: no mutate (+: the same parity)

    def fenced(self, at: int) -> bool:
        index = bisect.bisect_right(self._fence_starts, at) - 1
        return index >= 0 and at < self._fences[index][1]  # pragma: no mutate (<=: no opener starts a fence line)


def _fences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each ``` fenced block; a block that is the whole reply is not one (a model
    that fences its only call still made it)."""
    marks = [m.start() for m in _FENCE.finditer(text)]
    blocks = [(marks[i], marks[i + 1] if i + 1 < len(marks) else len(text)) for i in range(0, len(marks), 2)]
    if len(blocks) == 1 and not text[:blocks[0][0]].strip():
        close = blocks[0][1]
        after = text.find("\n", close)
        if not text[after if after >= 0 else len(text):].strip():  # pragma: no mutate (> 0, >= 1: a fence starts it)
            return []
    return blocks


def _calls(text: str, span: Span, schemas: dict[str, dict[str, Any]]) -> list[ToolCall]:
    if span.error is not None:  # the markup as the arguments: the event log shows what was refused
        return [ToolCall(call_id(), span.named, text[span.start:span.end], error=span.error)]
    out = []
    for found in span.calls:
        if isinstance(found.arguments, str):
            arguments = values.convert_json(found.arguments, schemas.get(found.name, {}))
            out.append(ToolCall(call_id(), found.name, arguments))
            continue
        args = values.convert(found.arguments, schemas.get(found.name, {}), found.texts)
        arguments = json.dumps(args, ensure_ascii=False)  # pragma: no mutate (True: the same JSON, escaped)
        out.append(ToolCall(call_id(), found.name, arguments))
    return out


def _prose(text: str, standing: list[Span]) -> str:
    if not standing:
        return text
    pieces = [text[a.end:b.start].strip() for a, b in zip(standing, standing[1:])] + [text[standing[-1].end:].strip()]
    later = "\n\n".join(piece for piece in pieces if piece)
    before = text[:standing[0].start]
    if not later:
        return before
    gap = "" if not before.strip() else "\n" if before.endswith("\n") else "\n\n"
    return before + gap + later
