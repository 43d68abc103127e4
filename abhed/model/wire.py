"""The conversation as the loop and the adapters share it, independent of any wire dialect.

`Msg` is one message of the conversation; an adapter turns a list of them into the JSON a server
takes (native OpenAI tool calls, or a text protocol). `Reply` is what one completion produced.
Plain dataclasses: these live inside the process; pydantic stays at the boundaries.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["system", "user", "assistant", "tool"]


def call_id() -> str:
    """A tool-call id for calls the server did not number (text protocols): 9 letters and digits,
    the form Mistral's templates insist on, accepted by every other."""
    return secrets.token_hex(5)[:9]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # the raw text the model sent, valid JSON or not
    error: str | None = None  # set when the call's markup did not parse: the message that teaches the fix


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Reply:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    reasoning: str = ""


@dataclass
class Msg:
    role: Role
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)  # assistant
    tool_call_id: str | None = None  # tool
    name: str | None = None  # tool: which tool answered
    event_id: str | None = None  # the event this message came from (compaction keeps from one)
    # Images beside the text (a read image, a user's attachment): {"url": data URL, "label": the line
    # naming it}. The adapter decides where they go on the wire and drops what a request cannot carry.
    images: list[dict[str, str]] = field(default_factory=list)


class Encoded(list[str]):
    """Messages already encoded as JSON texts, one a message, for the client to splice into the
    request as they are: a long conversation is not encoded again whole for every turn."""
