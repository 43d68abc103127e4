"""The conversation an agent holds: rebuilt from the event log, sized for the context window.

`rebuild` turns a session's events back into the messages the model saw, so `abhed resume` (and
recovery from Ctrl-C) continues a conversation that matches what happened: user prompts and model
replies come from MessageEvents, tool results from ObservationEvents (matched to the reply's calls
by `tool_call_id`), and a CompactionEvent replaces what came before it with its text plus the
messages it kept. A call the log shows no result for (the process died, or was interrupted, while
it ran or before it started) gets a result saying so, since every call in a reply needs one.

`Gauge` says how full the context is: the server's token count at the last reply plus an estimate
of what was added since, in characters per token calibrated by those counts.
"""

from __future__ import annotations

from collections.abc import Iterable

from abhed.session.events import ActionEvent, AnyEvent, CompactionEvent, MessageEvent, ObservationEvent
from abhed.model.wire import Msg, ToolCall, Usage
from abhed.tools.base import head_tail

INTERRUPTED_RUNNING = ("[no result: the session stopped while this call was running, so it may or may not have taken "
                       "effect. Check the state (read the file, list the directory) before repeating it.]")
INTERRUPTED_BEFORE = "[not run: the session stopped before this call started.]"


def observation_cap(context_window: int) -> int:
    """The most characters one tool result may take in the conversation: about a quarter of the
    window at a pessimistic 3 characters a token. A fixed rule, so a rebuild cuts exactly as the
    live loop did."""
    return max(4000, context_window * 3 // 4)


def fit_observation(content: str, cap: int) -> str:
    if len(content) <= cap:
        return content
    kept, cut = head_tail(content, cap - 200)
    return (kept + f"\n[this result was {len(content)} characters; {cut} were cut from the middle to fit the model's "
            "context window. Narrow the request (offset and limit, a tighter pattern or path) to see that part.]")


def message_event(msg: Msg, session_id: str, agent_id: str, parent_id: str | None, *, origin: str,
                  reasoning: str | None = None, usage: Usage | None = None,
                  finish_reason: str | None = None, forms: tuple[str, ...] = ()) -> MessageEvent:
    """`forms`: for a reply, the text forms its calls were read from (Reading.forms)."""
    assert msg.role in ("user", "assistant")
    return MessageEvent(session_id=session_id, agent_id=agent_id, parent_id=parent_id, role=msg.role,
                        content=msg.content, origin=origin, reasoning=reasoning or None, images=msg.images,
                        tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in msg.tool_calls],
                        forms=list(forms) if msg.tool_calls else [],
                        usage={"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
                        if usage else None, finish_reason=finish_reason)


def rebuild(events: Iterable[AnyEvent], agent_id: str, cap: int) -> list[Msg]:
    """The conversation of agent `agent_id` (without the system prompt) as the log records it."""
    messages: list[Msg] = []
    calls: list[ToolCall] = []  # the calls of the last reply, in the order the model made them
    results: dict[str, Msg] = {}  # their results so far (parallel calls may finish in any order)
    started: set[str] = set()  # tool_call_ids whose ActionEvent is in the log
    actions: dict[str, str | None] = {}  # action id -> tool_call_id

    def close() -> None:
        for call in calls:
            text = INTERRUPTED_RUNNING if call.id in started else INTERRUPTED_BEFORE
            messages.append(results.get(call.id) or Msg("tool", text, tool_call_id=call.id, name=call.name))
        calls.clear()
        results.clear()
        started.clear()  # only the calls of the reply being read need them: the log's earlier calls are
        actions.clear()  # not held (a resume reads the log through, holding what the conversation keeps)

    for event in events:
        if event.agent_id != agent_id:
            continue
        if isinstance(event, MessageEvent):
            close()
            made = [ToolCall(c["id"], c["name"], c["arguments"]) for c in event.tool_calls]
            messages.append(Msg(event.role, event.content, made, event_id=event.id, images=event.images))
            if event.role == "assistant":
                calls.extend(made)
        elif isinstance(event, ActionEvent):
            actions[event.id] = event.tool_call_id
            if event.tool_call_id:
                started.add(event.tool_call_id)
        elif isinstance(event, ObservationEvent):
            call_id = actions.get(event.action_id)
            if call_id is not None and call_id not in results and any(c.id == call_id for c in calls):
                results[call_id] = Msg("tool", fit_observation(event.content, cap), tool_call_id=call_id,
                                       name=event.tool, images=event.images)
        elif isinstance(event, CompactionEvent):
            close()
            kept = next((i for i, m in enumerate(messages) if event.keep_from and m.event_id == event.keep_from), None)
            messages = [Msg("user", event.content, event_id=event.id)] + (messages[kept:] if kept is not None else [])
    close()
    return messages


# What an image costs in the window, in characters at the gauge's 3 a token: vision encoders spend
# from a few hundred to about 1600 tokens on an image at the profiles' pixel limits.
IMAGE_CHARS = 4800


def chars(msg: Msg) -> int:
    return (len(msg.content) + sum(len(c.name) + len(c.arguments) + 16 for c in msg.tool_calls) + 8
            + IMAGE_CHARS * len(msg.images))


class Gauge:
    """How many tokens the conversation takes: measured by the server when it can be, else estimated."""

    def __init__(self, chars_per_token: float = 3.0) -> None:
        self.chars_per_token = chars_per_token  # pessimistic for code until the server's counts say otherwise
        self.measured_tokens = 0
        self.measured_messages = 0  # how many messages (system prompt included) the measurement covers

    def estimate(self, messages: list[Msg], fixed_chars: int = 0) -> int:
        """Tokens for `messages` (system prompt first) plus `fixed_chars` sent with every request (the tools)."""
        if self.measured_messages and self.measured_messages <= len(messages):
            added = sum(chars(m) for m in messages[self.measured_messages:])
            return self.measured_tokens + int(added / self.chars_per_token)
        return int((sum(chars(m) for m in messages) + fixed_chars) / self.chars_per_token)

    def measure(self, usage: Usage, messages: list[Msg], fixed_chars: int) -> None:
        """The server counted `usage.prompt_tokens` for `messages` minus the reply (the last one)."""
        sent = sum(chars(m) for m in messages[:-1]) + fixed_chars
        if usage.prompt_tokens > 0:
            self.chars_per_token = min(6.0, max(2.0, sent / usage.prompt_tokens))
        self.measured_tokens = usage.total_tokens
        self.measured_messages = len(messages)

    def forget(self) -> None:
        """The conversation was rewritten (compaction): estimate from scratch until the next reply."""
        self.measured_tokens = self.measured_messages = 0
