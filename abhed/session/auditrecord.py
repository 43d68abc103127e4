"""The central audit's records (schema `abhed.audit/1`), derived from the session's own log.

Every record comes from events of the log and from nothing else, so a sink receives only what
the local, hash-chained record holds (abhed/session/audit.py), and a record can always be sent
again from it. One record:

    {"schema": "abhed.audit/1", "id": "SESSION:SEQ" (":SEQ.1" for a second record of one event),
     "session": SESSION, "seq": SEQ, "time": "2026-12-07T02:36:13.123456+00:00", "kind": KIND,
     "user": USER or null, "host": HOST or null, "agent": "main" (or a subagent's id), "fields": {...}}

`seq` is the event's place in the log (`abhed sessions show`, `abhed sessions verify`). The kinds
and their fields (docs/security.md lists them for the site):

- session.create: workspace, origin, chain (the session's first event);
- session.start, session.end: head (`SEQ:SHA256` of that very event: `abhed sessions verify
  --head` checks the log still holds it), pid of the process;
- run.start: model, prompt; run.end: status, detail;
- approval: call_id, tool, decision (allow, deny, ask: refused with nobody to ask), decided_by
  (gate.approval.decided_by: human, nobody, rule, mode, hook, check), rule, reason;
- command: call_id, command, exit_code, timed_out, is_error, duration_ms (a bash call that ran);
- file.change: call_id, tool, path, action (a write or edit that changed a file); undo: restored_to
  (the checkpoint whose state an undo restored);
- mcp.call: call_id, server, tool, arguments, is_error, duration_ms;
- mode.change: mode, previous; hook: event, command, tool, exit_code, outcome;
- audit.failed: sink, detail (a sink could not be sent to); audit.resumed: sink, detail.

Strings longer than MAX_STRING characters are cut, the cut said in the string itself.
"""

from __future__ import annotations

import json
from typing import Any

from abhed.common import traits
from abhed.gate.approval import HOOK_BLOCKED, decided_by
from abhed.session.events import (ActionEvent, AnyEvent, AuditEvent, CheckpointEvent, HookEvent, ModeEvent,
                                  ObservationEvent, RunEvent, SessionEvent)

SCHEMA = "abhed.audit/1"
MAX_STRING = 4096


def bounded(value: Any, limit: int = MAX_STRING) -> Any:
    """`value` with every string longer than `limit` cut, and the cut said."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"[...{len(value) - limit} characters cut]"
    if isinstance(value, dict):
        return {str(key): bounded(item, limit) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [bounded(item, limit) for item in value]
    return value


class Mapper:
    """Turns a session's events, in log order, into audit records. A call's records come from its
    result (which holds the approval) and its action (which holds what was asked): the actions not
    yet answered are kept, with where their line starts, so delivery can resume from before them."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.actions: dict[str, tuple[int, ActionEvent]] = {}  # id -> (offset of its line, the action)

    def resume_from(self, end: int) -> int:
        """Where a later reading must start to see every action still waiting for its result."""
        return min([offset for offset, _ in self.actions.values()] + [end])

    def records(self, event: AnyEvent, offset: int, head: str | None = None) -> list[dict[str, Any]]:
        """The records of `event` (whose line starts at `offset`; `head` its SEQ:SHA256, for an
        AuditEvent start or end). Most events give none or one; a call that ran gives two."""
        if isinstance(event, ActionEvent):
            self.actions[event.id] = (offset, event)
            return []  # pragma: no mutate (equivalent: _made gives an action no record either)
        if isinstance(event, AuditEvent) and event.what == "start":
            self.actions.clear()  # calls left unanswered by an earlier process will never be answered
        made = self._made(event, head)
        return [self._record(event, kind, who, fields, part) for part, (kind, who, fields) in enumerate(made)]

    def _made(self, event: AnyEvent, head: str | None) -> list[tuple[str, tuple[str | None, str | None], dict[str, Any]]]:
        if isinstance(event, ObservationEvent):
            return self._call(event)
        if isinstance(event, SessionEvent):
            return [("session.create", (event.user, event.host),
                     {"workspace": event.workspace, "origin": event.origin, "chain": event.chain})]
        if isinstance(event, AuditEvent):
            return [_audit(event, head)]
        if isinstance(event, RunEvent):
            if event.status == "started":
                return [("run.start", (event.user, event.host), {"model": event.model, "prompt": event.prompt})]
            return [("run.end", (None, None), {"status": event.status, "detail": event.detail})]
        if isinstance(event, ModeEvent):
            return [("mode.change", (event.user, event.host), {"mode": event.mode, "previous": event.previous})]
        if isinstance(event, HookEvent):
            return [("hook", (None, None), {"event": event.event, "command": event.command, "tool": event.tool,
                                            "exit_code": event.exit_code, "outcome": event.outcome})]
        if isinstance(event, CheckpointEvent) and event.undo_to is not None:
            return [("undo", (None, None), {"restored_to": event.undo_to, "checkpoint": event.number})]
        return []

    def _call(self, result: ObservationEvent) -> list[tuple[str, tuple[str | None, str | None], dict[str, Any]]]:
        _, action = self.actions.pop(result.action_id, (0, None))  # pragma: no mutate (the offset is not read)
        who = (action.user, action.host) if action is not None else (None, None)
        args = action.input if action is not None and isinstance(action.input, dict) else {}
        meta = result.metadata
        approval = meta.get("approval") if isinstance(meta.get("approval"), dict) else None
        kind = meta.get("error_kind")
        out: list[tuple[str, tuple[str | None, str | None], dict[str, Any]]] = []
        if approval is not None or kind == HOOK_BLOCKED:
            # pragma: no mutate (equivalent: without a hook's block, approval is set here)
            decision = "deny" if kind == HOOK_BLOCKED else approval.get("decision") if approval else None  # pragma: no mutate
            out.append(("approval", who, {
                "call_id": result.action_id, "tool": result.tool, "decision": decision,
                "decided_by": decided_by(approval or {}, kind),
                "rule": approval.get("rule") if approval else None,
                "reason": approval.get("reason") if approval else first_line(result.content)}))
        ran = approval is not None and approval.get("decision") == "allow"
        if ran:
            done = _ran(result, args)
            if done is not None:
                out.append((done[0], who, done[1]))
        return out

    def _record(self, event: AnyEvent, kind: str, who: tuple[str | None, str | None], fields: dict[str, Any],
                part: int) -> dict[str, Any]:
        number = f"{event.seq}" if part == 0 else f"{event.seq}.{part}"
        return {"schema": SCHEMA, "id": f"{self.session_id}:{number}", "session": self.session_id, "seq": event.seq,
                "time": event.at.isoformat(), "kind": kind, "user": who[0], "host": who[1], "agent": event.agent_id,
                "fields": bounded(fields)}


def _audit(event: AuditEvent, head: str | None) -> tuple[str, tuple[str | None, str | None], dict[str, Any]]:
    if event.what in ("start", "end"):
        return f"session.{event.what}", (event.user, event.host), {"head": head, "detail": event.detail}
    return f"audit.{event.what}", (None, None), {"sink": event.sink, "detail": event.detail}


def _ran(result: ObservationEvent, args: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """What a call that was allowed to run did, as its tool's traits tell: a command (runs_code), a
    file changed (edits_files), an MCP call; None for the tools that only read or keep notes (their
    approval record says they ran)."""
    meta, common = result.metadata, {"call_id": result.action_id}
    declared = traits.of(result.tool)  # what the tool says it does (the registry, installed with the tools)
    if declared is not None and declared.runs_code and isinstance(args.get("command"), str):
        return "command", {**common, "command": args["command"], "exit_code": meta.get("exit_code"),
                           "timed_out": meta.get("timed_out"), "background": bool(args.get("background")),
                           "is_error": result.is_error, "duration_ms": result.duration_ms}
    if declared is not None and declared.edits_files and not result.is_error and meta.get("action") != "unchanged":
        return "file.change", {**common, "tool": result.tool, "path": meta.get("path", args.get("path")),
                               "action": meta.get("action", result.tool)}
    if result.tool.startswith("mcp__"):
        _, server, tool = (result.tool.split("__", 2) + ["", ""])[:3]  # pragma: no mutate (padding: any 2+ will do)
        return "mcp.call", {**common, "server": server, "tool": tool, "is_error": result.is_error,
                            "arguments": json.dumps(args, ensure_ascii=False, default=str),
                            "duration_ms": result.duration_ms}
    return None


def first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0]
