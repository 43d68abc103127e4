"""A session's events as `abhed sessions show` prints them: in a tree, one line an event.

`tree` orders the log for reading (each subagent's events under the task call that started it);
`shown_event` writes one event as a line, its text cut to its first line unless asked for whole;
`preview` is that cut, also used for a session's first prompt in `abhed sessions list`. The event
classes are imported inside the functions: the command line imports this module at start-up.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from abhed.session.events import AnyEvent


def preview(text: str, width: int = 100) -> str:
    """The first line of `text`, at most `width` characters, with " ..." when anything was left out."""
    first = text.split("\n", 1)[0]
    more = " ..." if "\n" in text or len(first) > width else ""
    return first[:width] + more


def tree(events: list[AnyEvent]) -> list[tuple[AnyEvent, int]]:
    """The events as (event, depth) in the order to show them: each subagent's events right after
    the task call that started it, one level deeper, rather than interleaved in log order with its
    siblings'. A subagent no task result names (its run was cut short) comes where it started."""
    from abhed.session.events import ActionEvent, ObservationEvent
    own: dict[str, list[tuple[int, AnyEvent]]] = {}
    for index, event in enumerate(events):
        own.setdefault(event.agent_id, []).append((index, event))
    started_by = {e.action_id: e.metadata["agent_id"] for e in events if isinstance(e, ObservationEvent)
                  and e.tool == "task" and isinstance(e.metadata.get("agent_id"), str)
                  and e.metadata["agent_id"] in own}
    linked = set(started_by.values())
    parents = {agent: entries[0][1].parent_id for agent, entries in own.items()}
    loose: dict[str | None, list[str]] = {}  # agents no task result names, by parent (None: top level)
    for agent, parent in parents.items():
        if agent not in linked and (parent is None or parent not in own):
            loose.setdefault(None, []).append(agent)
        elif agent not in linked:
            loose.setdefault(parent, []).append(agent)
    out: list[tuple[AnyEvent, int]] = []

    def walk(agents: list[str], depth: int) -> None:
        entries: list[tuple[int, AnyEvent | str]] = [(i, e) for agent in agents for i, e in own[agent]]
        entries += [(own[child][0][0], child) for agent in agents for child in loose.get(agent, [])]
        for _, item in sorted(entries, key=lambda entry: entry[0]):
            if isinstance(item, str):  # a subagent no task result names, where it started
                walk([item], depth + 1)
                continue
            out.append((item, depth))
            if isinstance(item, ActionEvent) and item.id in started_by:
                walk([started_by[item.id]], depth + 1)

    walk(loose.get(None, []), 0)
    return out


def shown_event(event: AnyEvent, indent: str, full: bool) -> str:
    """One event as a line (an observation's whole text when `full`), behind `indent`."""
    from abhed.session.events import (ActionEvent, AuditEvent, CheckpointEvent, CompactionEvent, EndpointEvent,
                                      HookEvent, MessageEvent, ModeEvent, ObservationEvent, RepoMapEvent,
                                      SessionEvent)
    stamp = event.at.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(event, ActionEvent):
        args = json.dumps(event.input, ensure_ascii=False)
        return f"{indent}{stamp} [{event.agent_id}] {event.tool} {preview(args)}"
    if isinstance(event, ObservationEvent):
        status = "error" if event.is_error else "ok"
        body = event.content if full else preview(event.content)
        return f"{indent}    -> {status} {event.duration_ms:.0f} ms: {body}"
    if isinstance(event, MessageEvent):
        who = event.role if event.origin in ("user", "model") else f"{event.role} ({event.origin})"
        body = event.content if full else preview(event.content)
        written = f" written in the {' and '.join(event.forms)} form" if event.forms else ""
        calls = (f" [{len(event.tool_calls)} call{'s' * (len(event.tool_calls) != 1)}{written}]" if event.tool_calls
                 else "")
        return f"{indent}{stamp} [{event.agent_id}] {who}: {body}{calls}"
    if isinstance(event, CompactionEvent):
        return (f"{indent}{stamp} [{event.agent_id}] compacted ({event.method} summary): about "
                f"{event.tokens_before} -> {event.tokens_after} tokens")
    if isinstance(event, CheckpointEvent):
        what = f"undo to before checkpoint {event.undo_to}" if event.undo_to else f"before {event.tool}"
        missed = f"; {event.not_covered_count} files not covered" if event.not_covered_count else ""
        return f"{indent}{stamp} [{event.agent_id}] checkpoint {event.number} ({what}){missed}"
    if isinstance(event, ModeEvent):
        return f"{indent}{stamp} [{event.agent_id}] mode {event.mode} (was {event.previous}), set by {event.user or 'the human'}"
    if isinstance(event, RepoMapEvent):
        return (f"{indent}{stamp} [{event.agent_id}] repository map: {event.files_shown} of {event.files_found} "
                f"source files, {event.tokens} tokens (budget {event.budget})")
    if isinstance(event, HookEvent):
        status = "no exit status" if event.exit_code is None else f"exit {event.exit_code}"
        on = f" ({event.tool})" if event.tool else ""
        said = f": {preview(event.stderr)}" if event.stderr else ""
        return (f"{indent}{stamp} [{event.agent_id}] hook {event.event}{on} {' '.join(event.command)[:200]}: "
                f"{event.outcome}, {status}{said}")
    if isinstance(event, SessionEvent):
        return (f"{indent}{stamp} [{event.agent_id}] session created by {event.user}@{event.host} in {event.workspace} "
                f"(log hash-chained: {event.chain})")
    if isinstance(event, EndpointEvent):
        return f"{indent}{stamp} [{event.agent_id}] model server {event.endpoint} (was {event.previous}: down)"
    if isinstance(event, AuditEvent):
        on = f" {event.sink}" if event.sink else ""
        said = f": {preview(event.detail)}" if event.detail else ""
        return f"{indent}{stamp} [{event.agent_id}] audit {event.what}{on}{said}"
    detail = f": {preview(event.detail)}" if event.detail else ""
    return f"{indent}{stamp} [{event.agent_id}] run {event.status}{detail}"
