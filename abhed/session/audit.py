"""The session record as evidence: `abhed sessions verify` and `abhed sessions export` (issue 16).

Every event carries its place in the log (`seq`, counting readable lines from 1) and the sha256 of
the line before it (`prev`), set by EventLog.append under a lock, so subagents' events are in the
same chain. `events.head` beside the log names the last durable event and its hash. Verifying
recomputes the chain and names the first line that breaks it:

- changed: a line's hash is not what the next line links to (or, for the last one, not what
  events.head holds);
- removed: the numbers jump (event 7 follows event 5), or the log ends before the event
  events.head names (cut at the end);
- reordered: an event comes before one with a lower number;
- torn by a crash, not tampering: an unreadable final line without a newline, or an unreadable
  line that the next event's link skips over (EventLog.append starts a fresh line after one).

Logs written before the chain existed (events without `seq`) still load and verify: those lines
are counted and reported as unchained (nothing can be said about them), and a chain that starts
after them links to the last of them. An unchained line after a chained one is an insertion.

This detects edits by anyone who does not recompute the chain; someone able to rewrite the whole
log and events.head can forge both. Against that, ship the export off the machine as it is made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abhed.session.events import (ActionEvent, CheckpointEvent, MessageEvent, ModeEvent, ObservationEvent, RunEvent,
                                  line_hash)
from abhed.session.store import Session


@dataclass
class Verdict:
    ok: bool
    events: int  # readable lines checked
    chained: int  # of which carry a link
    problem: str = ""  # the first break, named by line and event number
    notes: list[str] = field(default_factory=list)  # torn lines from crashes, unchained old lines

    def summary(self, path: Path) -> str:
        if self.ok:
            head = f"OK: {path}: {self.events} events, the chain of {self.chained} intact"
        else:
            head = f"TAMPERED: {path}: {self.problem}"
        return "\n".join([head, *(f"note: {n}" for n in self.notes)])


@dataclass
class _Line:
    number: int  # line in the file, from 1
    raw: bytes
    value: dict[str, Any] | None  # None: not a JSON object


def verify(log: Path) -> Verdict:
    """Recompute the hash chain of the log at `log`; name the first break."""
    try:
        data = log.read_bytes()
    except FileNotFoundError:
        return Verdict(False, 0, 0, f"the log {log} does not exist")
    parts = data.split(b"\n")
    torn_end = parts[-1] != b""
    lines = [_Line(i, raw, _object(raw)) for i, raw in enumerate(parts[:-1], start=1) if raw.strip()]
    result = Verdict(True, 0, 0)
    if torn_end:
        result.notes.append(f"line {len(parts)} is torn ({len(parts[-1])} bytes, no newline): a crash cut the last "
                            "write; it is not part of the record")
    expected, last_hash, chained_seen, unreadable = 1, "", False, []
    for line in lines:
        if line.value is None:
            unreadable.append(line)
            continue
        seq, prev = line.value.get("seq"), line.value.get("prev")
        if seq is None or prev is None:
            if chained_seen:
                return _broken(result, f"line {line.number} has no link to the line before it although earlier "
                                       "ones do: it was inserted or rewritten")
            expected, last_hash = expected + 1, line_hash(line.raw)
            result.events += 1
            unreadable = _forgive(result, unreadable)
            continue
        chained_seen = True
        if unreadable and (seq != expected or prev != last_hash):
            return _broken(result, f"line {unreadable[0].number} was changed (it is no longer readable, and event "
                                   f"{seq} on line {line.number} does not follow on from the line before it)")
        if seq != expected:
            return _broken(result, _misplaced(line, seq, expected, lines))
        if prev != last_hash:
            where = f"event {seq - 1}, the line before line {line.number}" if seq > 1 else "the line before it"
            return _broken(result, f"{where} was changed: event {seq} (line {line.number}) links to a line with "
                                   "another hash")
        unreadable = _forgive(result, unreadable)
        expected, last_hash = expected + 1, line_hash(line.raw)
        result.events += 1
        result.chained += 1
    if unreadable:
        return _broken(result, f"line {unreadable[0].number} is unreadable and no event follows it: it was changed")
    if result.events > result.chained:
        result.notes.append(f"{result.events - result.chained} events were written before the chain existed (older "
                            "Abhed): they are counted, not verifiable")
    return _check_head(result, log.parent / "events.head", expected - 1, last_hash, lines, torn_end)


def _misplaced(line: _Line, seq: Any, expected: int, lines: list[_Line]) -> str:
    """Why event `seq` is where event `expected` belongs: removed events, or reordered lines."""
    later = [other.number for other in lines if other.number > line.number and other.value is not None
             and other.value.get("seq") == expected]
    if later:
        return (f"line {line.number} holds event {seq} where event {expected} belongs (it is on line {later[0]}): the "
                "lines were reordered")
    if isinstance(seq, int) and seq > expected:
        missing = f"event {expected} was" if seq == expected + 1 else f"events {expected} to {seq - 1} were"
        return f"{missing} removed: line {line.number} holds event {seq} right after event {expected - 1}"
    return (f"line {line.number} holds event {seq} after event {expected - 1}: the lines were reordered or the "
            "event's number was changed")


def _forgive(result: Verdict, unreadable: list[_Line]) -> list[_Line]:
    """Unreadable lines the chain skips over: lines torn by a crash (the next event links past them)."""
    for line in unreadable:
        result.notes.append(f"line {line.number} is torn ({len(line.raw)} bytes): a crash cut that write; the next "
                            "event starts a fresh line and links past it")
    return []


def _check_head(result: Verdict, head: Path, last_seq: int, last_hash: str, lines: list[_Line],
                torn_end: bool) -> Verdict:
    try:
        anchor = json.loads(head.read_bytes())
        seq, digest = int(anchor["seq"]), str(anchor["hash"])
    except FileNotFoundError:
        if result.chained:
            result.notes.append(f"{head} is missing: a cut at the end of the log cannot be detected")
        return result
    except (OSError, ValueError, KeyError, TypeError):
        return _broken(result, f"{head} is unreadable: it was changed")
    if seq > last_seq:
        how = " (its last line is torn, but a crash cannot remove whole events that were on disk)" if torn_end else ""
        return _broken(result, f"the log was cut: it ends at event {last_seq}, but event {seq} had been written"
                               f"{how}")
    chained = [line for line in lines if line.value is not None]
    if seq >= 1 and line_hash(chained[seq - 1].raw) != digest:
        return _broken(result, f"event {seq} (line {chained[seq - 1].number}) was changed: its hash is not the one "
                               "recorded when it was written")
    return result


def _broken(result: Verdict, problem: str) -> Verdict:
    result.ok, result.problem = False, problem
    return result


def _object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


# -- export -----------------------------------------------------------------------------------------


def export(session: Session) -> list[dict[str, Any]]:
    """The session as audit records, one a line: the session, each run (who, where, which model),
    each call with its approval decision and who approved it, each change of approval mode, each
    checkpoint and undo, and the chain's verdict."""
    loaded = session.log.load()
    verdict = verify(session.log.path)
    state = session.state
    records: list[dict[str, Any]] = [{"type": "session", "session": state.id, "workspace": state.workspace,
                                      "created_at": state.created_at.isoformat(), "chain_ok": verdict.ok,
                                      "chain": verdict.problem or f"{verdict.chained} events intact"}]
    results = {e.action_id: e for e in loaded.events if isinstance(e, ObservationEvent)}
    runner: dict[str, Any] = {}
    for event in loaded.events:
        base = {"at": event.at.isoformat(), "seq": event.seq, "agent": event.agent_id}
        if isinstance(event, RunEvent):
            if event.status == "started":
                runner = {"user": event.user, "host": event.host, "model": event.model}
            records.append({"type": "run", **base, "status": event.status, **runner,
                            **({"prompt": event.prompt} if event.prompt is not None else {}),
                            **({"detail": event.detail} if event.detail else {})})
        elif isinstance(event, ActionEvent):
            records.append(_call(event, results.get(event.id), base, runner))
        elif isinstance(event, CheckpointEvent):
            records.append({"type": "undo" if event.undo_to else "checkpoint", **base, "number": event.number,
                            "commit": event.commit, "call_id": event.action_id, "tool": event.tool,
                            **({"restored_to_before": event.undo_to} if event.undo_to else {}),
                            "not_covered": event.not_covered_count})
        elif isinstance(event, ModeEvent):
            records.append({"type": "mode", **base, "mode": event.mode, "previous": event.previous,
                            "user": event.user, "host": event.host})
        elif isinstance(event, MessageEvent) and event.role == "user" and event.origin == "user":
            records.append({"type": "prompt", **base, **runner, "text": event.content})
    return records


def _call(action: ActionEvent, result: ObservationEvent | None, base: dict[str, Any],
          runner: dict[str, Any]) -> dict[str, Any]:
    approval = (result.metadata.get("approval") if result else None) or {}
    record = {"type": "call", **base, "call_id": action.id, "tool": action.tool, "input": action.input,
              "user": action.user or runner.get("user"), "host": action.host or runner.get("host"),
              "model": runner.get("model"),
              "decision": approval.get("decision", "not reached (refused before approval)" if result else "unknown"),
              "approved_by": approved_by(approval), "rule": approval.get("rule"), "reason": approval.get("reason")}
    if result is not None:
        record.update(is_error=result.is_error, error_kind=result.metadata.get("error_kind"),
                      duration_ms=result.duration_ms, checkpoint=(result.metadata.get("checkpoint") or {}).get("number"))
    else:
        record["outcome"] = "no result recorded (the process ended during the call)"
    return record


def approved_by(approval: dict[str, Any]) -> str | None:
    """Who let the call run: the human (at a prompt, by typing it, or confirming), an operator's
    rule, the mode, or nobody (refused)."""
    if not approval:
        return None
    if approval.get("decision") != "allow":
        return "nobody (refused)"
    reason, rule = str(approval.get("reason", "")), str(approval.get("rule", ""))
    if "human" in reason:
        return "human"
    if rule.startswith("allow:"):
        return f"operator rule ({rule[len('allow:'):].strip()})"
    if rule.startswith("mode:"):
        return f"mode {rule[len('mode:'):].strip()}"
    return rule or "policy"


def export_lines(session: Session) -> list[str]:
    return [json.dumps(record, ensure_ascii=True, default=str) for record in export(session)]
