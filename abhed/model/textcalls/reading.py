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

import json
import re
from dataclasses import dataclass
from typing import Any

from abhed.model.textcalls import values
from abhed.model.textcalls.base import Form, Span
from abhed.model.wire import ToolCall, call_id

_FENCE = re.compile(r"^ {0,3}(```|~~~)", re.M)


@dataclass
class Reading:
    calls: list[ToolCall]
    prose: str  # the reply without its calls: text before them kept as it came, later pieces joined
    forms: tuple[str, ...]  # the forms the calls were written in


def spans(text: str, forms: tuple[Form, ...]) -> list[Span]:
    """Every form's markup in `text`, in order; where two overlap the one that starts first wins
    (for the same start, the longer)."""
    found = sorted((span for form in forms if any(o in text for o in form.openers) or not form.openers
                    for span in form.find(text)), key=lambda s: (s.start, -s.end))
    kept: list[Span] = []
    for span in found:
        if not kept or span.start >= kept[-1].end:
            kept.append(span)
    return kept


def read(text: str, schemas: dict[str, dict[str, Any]], forms: tuple[Form, ...]) -> Reading:
    """The calls `text` holds and the prose around them."""
    marked = spans(text, forms)
    fences = _fences(text)
    standing: list[Span] = []
    for span in reversed(marked):  # from the end: "ends the reply" depends on what stands after
        tail = standing[0].start if standing else len(text)
        if _stands(text, span, fences, ends=not text[span.end:tail].strip(), schemas=schemas):
            standing.insert(0, span)
    calls = [call for span in standing for call in _calls(text, span, schemas)]
    return Reading(calls, _prose(text, standing), tuple(dict.fromkeys(span.form for span in standing)))


def _stands(text: str, span: Span, fences: list[tuple[int, int]], ends: bool, schemas: dict[str, Any]) -> bool:
    if span.placement == "anywhere":
        return True
    if span.placement == "whole":
        return not text[:span.start].strip() and not text[span.end:].strip()
    if any(start <= span.start < end for start, end in fences):
        return False
    line = text[text.rfind("\n", 0, span.start) + 1:span.start]
    if line.count("`") % 2:  # inside `inline code`
        return False
    if not line.strip():
        return True
    names = [call.name for call in span.calls] if span.error is None else [span.named]
    return ends and all(name in schemas for name in names)  # mid-line: only a call to a tool we have


def _fences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each ``` fenced block; a block that is the whole reply is not one (a model
    that fences its only call still made it)."""
    marks = [m.start() for m in _FENCE.finditer(text)]
    blocks = [(marks[i], marks[i + 1] if i + 1 < len(marks) else len(text)) for i in range(0, len(marks), 2)]
    if len(blocks) == 1 and not text[:blocks[0][0]].strip():
        close = blocks[0][1]
        after = text.find("\n", close)
        if close == len(text) or not text[after if after >= 0 else len(text):].strip():
            return []
    return blocks


def _calls(text: str, span: Span, schemas: dict[str, dict[str, Any]]) -> list[ToolCall]:
    if span.error is not None:  # the markup as the arguments: the event log shows what was refused
        return [ToolCall(call_id(), span.named, text[span.start:span.end], error=span.error)]
    out = []
    for found in span.calls:
        if isinstance(found.arguments, str):
            out.append(ToolCall(call_id(), found.name, found.arguments))
            continue
        args = values.convert(found.arguments, schemas.get(found.name, {}), found.texts)
        out.append(ToolCall(call_id(), found.name, json.dumps(args, ensure_ascii=False)))
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
