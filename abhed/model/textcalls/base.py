"""What every text form of tool calls shares: the stretch of a reply that holds calls (a Span), and
the calls read from it (Found).

A form (hermes.py, qwen3_xml.py, ...) only finds its own markup and reads it; whether that markup
is a call or prose that mentions one is decided once, for every form, in reading.py, from where
the markup stands (`Span.placement`) and whether it parses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# Where markup of a form can stand as a call:
#   "line"      its opening marker begins a line (only blanks before it on the line), outside a
#               ``` fenced block: mid-sentence or in a code sample it is prose about calls;
#   "anywhere"  special tokens no prose holds ([TOOL_CALLS], DeepSeek's, gpt-oss's): a call wherever;
#   "whole"     only as the whole reply (bare JSON, a pythonic list), which an answer seldom is.
Placement = Literal["line", "anywhere", "whole"]


@dataclass(frozen=True)
class Found:
    """One call read from markup."""

    name: str
    arguments: dict[str, Any] | str  # str: the model gave its arguments as a JSON string; passed on as is
    texts: bool = False  # the values arrived as text (XML parameters): the tool's schema converts them


@dataclass
class Span:
    """Markup of one form at text[start:end]: the calls it holds, or why it does not parse."""

    start: int
    end: int
    form: str
    calls: list[Found] = field(default_factory=list)
    error: str | None = None  # the form's markup, not a call: the message that teaches the fix
    named: str = ""  # the tool the markup names, even when it does not parse ("" when none)
    placement: Placement = "line"


class Form(Protocol):
    """One way of writing tool calls in text."""

    # Read-only (properties): each form sets them as plain class attributes, whose narrower inferred
    # types (`leads = ()`) a read-only member accepts.
    @property
    def name(self) -> str: ...

    @property
    def openers(self) -> tuple[str, ...]:
        """What starts this form's markup anywhere (a stream holds back text from one)."""
        ...

    @property
    def leads(self) -> tuple[str, ...]:
        """What a reply that is one call as a whole starts with (held back at the start)."""
        ...

    def find(self, text: str) -> list[Span]:
        """Every stretch of `text` written in this form, in order, none overlapping."""
        ...


def json_call(value: Any) -> Found | None:
    """{"name": ..., "arguments" | "parameters": {...}} as a call; None when it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    args = value.get("arguments", value.get("parameters", {}))
    if args is None:
        args = {}
    if not isinstance(args, (dict, str)):
        return None
    return Found(value["name"], args)


def loads(text: str) -> Any:
    """json.loads that raises ValueError for every failure (RecursionError: nested too deep)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("it is nested too deeply") from None


def json_error(exc: Exception) -> str:
    """What is wrong with the JSON, where: "Expecting ',' delimiter at line 1 column 9"."""
    if isinstance(exc, json.JSONDecodeError):  # some messages end "starting at": no second "at"
        return f"{exc.msg.removesuffix(' at')} at line {exc.lineno} column {exc.colno}"
    return str(exc)
