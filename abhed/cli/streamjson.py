"""`abhed run --output-format stream-json`: the run's events as JSON lines on stdout, as they happen.

One JSON object a line, flushed per line, each carrying `schema_version` (STREAM_VERSION), `type` and
`seq` (the line's number in the stream, from 1). The lines are read off the same reports the terminal
shows (agent/display.py's Display: text deltas, calls and their results, usage, notices), so the stream
is a view of the run, not a second record of it: the session's event log stays the record. The human's
progress lines still go to stderr (Progress), unchanged; stdout holds the stream and nothing else.

The schema is docs/stream-json.md and docs/stream-json.schema.json; STREAM_VERSION is bumped when a
field is removed or changes meaning (adding a field or a line type does not bump it: consumers ignore
what they do not know).

Strings are written with ensure_ascii: every control character (an ESC a hostile model or command put
in its output) arrives as a JSON escape (\\u001b), never raw on a consumer's terminal.
"""

from __future__ import annotations

import json
import threading
from typing import Any, TextIO

from abhed.agent.display import Display
from abhed.cli.display import PREVIEW_PARSE_LIMIT
from abhed.gate.approval import APPROVED, CONFIRMED, HOOK_BLOCKED, decided_by
from abhed.model.wire import ToolCall
from abhed.session.hashing import Hashing
from abhed.session.store import Plan, TodoItem
from abhed.tools.base import ToolResult

STREAM_VERSION = 1
OUTPUT_CAP = 16 * 1024  # characters of a result's output (or error) a line carries; the rest is cut, and said


class Stream:
    """The writer: numbered JSON lines on `out`, one whole line at a time (subagents report from their
    threads). Lines reported before the run's `start` (notices while the session opens) wait for it,
    so `start` is always the first line. A consumer that went away (a closed pipe) ends the stream,
    never the run: the session's log still records all of it."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.seq = 0
        self.lock = threading.Lock()
        self.closed = False
        self.held: list[tuple[str, dict[str, Any]]] | None = []  # None once `start` is written
        self.session = ""  # the session `start` named (for the undo command a checkpoint line gives)

    def emit(self, kind: str, **fields: Any) -> None:
        with self.lock:
            if self.held is None:
                self._write(kind, fields)
            elif kind == "start":
                held, self.held, self.session = self.held, None, str(fields.get("session") or "")
                self._write(kind, fields)
                for earlier, said in held:
                    self._write(earlier, said)
            elif kind == "end":  # the run never began (no start): what was held, then the end
                held, self.held = self.held, None
                for earlier, said in held:
                    self._write(earlier, said)
                self._write(kind, fields)
            else:
                self.held.append((kind, fields))

    def _write(self, kind: str, fields: dict[str, Any]) -> None:
        if self.closed:
            return
        self.seq += 1
        line = json.dumps({"schema_version": STREAM_VERSION, "type": kind, "seq": self.seq, **fields},
                          ensure_ascii=True, default=str)
        try:
            self.out.write(line + "\n")
            self.out.flush()
        except (OSError, ValueError):  # EPIPE, or stdout closed: the consumer is gone
            self.closed = True


def bounded(text: str, cap: int = OUTPUT_CAP) -> tuple[str, bool]:
    """`text` cut to `cap` characters with a note saying how much was left out, and whether it was cut."""
    if len(text) <= cap:
        return text, False
    return text[:cap] + f"\n[abhed stream: output truncated: {cap} of {len(text)} characters shown; the session log " \
                        "holds it whole: abhed sessions show]", True


def arguments(call: ToolCall) -> dict[str, Any]:
    """A call's arguments: parsed (`arguments`) when they are JSON, else the text the model sent,
    bounded (`arguments_text`), with `arguments` null."""
    if len(call.arguments) <= PREVIEW_PARSE_LIMIT:
        try:
            return {"arguments": json.loads(call.arguments) if call.arguments.strip() else {}}
        except (ValueError, RecursionError):
            pass
    text, _ = bounded(call.arguments)
    return {"arguments": None, "arguments_text": text}


class StreamDisplay(Display):
    """The agent's reports as stream lines, and as Progress's lines on stderr for the human."""

    def __init__(self, stream: Stream, progress: Display | None = None, agent_id: str = "main") -> None:
        self.stream, self.agent = stream, agent_id
        self.progress = progress if progress is not None else Display()

    def text(self, delta: str) -> None:
        self.progress.text(delta)
        self.stream.emit("text", agent=self.agent, delta=delta)

    def reasoning(self, delta: str) -> None:
        self.progress.reasoning(delta)
        self.stream.emit("reasoning", agent=self.agent, delta=delta)

    def reply_done(self, final: bool) -> None:
        self.progress.reply_done(final)
        self.stream.emit("reply_end", agent=self.agent, final=final, discarded=False)

    def retrying(self, notice: str) -> None:
        self.progress.retrying(notice)  # Progress's own reply_done and notice: not streamed twice
        self.stream.emit("reply_end", agent=self.agent, final=False, discarded=True)
        self.stream.emit("notice", agent=self.agent, message=notice)

    def tool_started(self, call: ToolCall) -> None:
        self.progress.tool_started(call)
        self.stream.emit("tool_call", agent=self.agent, call_id=call.id, name=call.name, **arguments(call))

    def command_output(self, text: str) -> None:
        self.progress.command_output(text)  # the whole output comes with the result, bounded

    def tool_finished(self, call: ToolCall, result: ToolResult) -> None:
        self.progress.tool_finished(call, result)
        facts = result.metadata
        approval = facts.get("approval")
        if facts.get("error_kind") == HOOK_BLOCKED:
            approval = {"decision": "deny", "rule": "hook: pre_tool", "reason": result.content}
        if isinstance(approval, dict):
            self._approval(call, approval, decided_by(approval, facts.get("error_kind")))
        checkpoint = facts.get("checkpoint")
        if isinstance(checkpoint, dict):
            self._checkpoint(call, checkpoint)
        output, cut = bounded(result.content)
        self.stream.emit("tool_result", agent=self.agent, call_id=call.id, name=call.name,
                         status="error" if result.is_error else "ok", error_kind=facts.get("error_kind"),
                         output="" if result.is_error else output, error=output if result.is_error else None,
                         truncated=cut, chars=len(result.content))

    def _approval(self, call: ToolCall, approval: dict[str, Any], who: str) -> None:
        decision = "allow" if approval.get("decision") == "allow" else "deny"
        if who in ("human", "nobody"):  # the policy asked for a human before anything was decided
            self.stream.emit("approval_request", agent=self.agent, call_id=call.id, tool=call.name,
                             reason=_asked(str(approval.get("reason") or "")), rule=approval.get("rule") or None)
        self.stream.emit("approval", agent=self.agent, call_id=call.id, tool=call.name, decision=decision,
                         decided_by=who, rule=approval.get("rule") or None, reason=str(approval.get("reason") or ""))

    def _checkpoint(self, call: ToolCall, facts: dict[str, Any]) -> None:
        number = facts.get("number")
        self.stream.emit("checkpoint", agent=self.agent, call_id=call.id, tool=call.name, number=number,
                         commit=facts.get("before"), not_covered=facts.get("not_covered", 0),
                         after_error=facts.get("after_error"), failed=facts.get("failed"),
                         undo=f"abhed undo --to {number} {self.stream.session}".rstrip() if isinstance(number, int) else None)

    def todos(self, items: list[TodoItem]) -> None:
        self.progress.todos(items)
        self.stream.emit("todos", agent=self.agent, items=[item.model_dump() for item in items])

    def plan(self, plan: Plan) -> None:
        self.progress.plan(plan)
        self.stream.emit("plan", agent=self.agent, goal=plan.goal, steps=plan.steps, notes=plan.notes,
                         version=plan.version)

    def notice(self, message: str) -> None:
        self.progress.notice(message)
        self.stream.emit("notice", agent=self.agent, message=message)

    def hashing(self, progress: Hashing) -> None:
        self.progress.hashing(progress)

    def usage(self, tokens_in: int, tokens_out: int, context_used: int, context_max: int) -> None:
        self.progress.usage(tokens_in, tokens_out, context_used, context_max)
        self.stream.emit("usage", agent=self.agent, tokens_in=tokens_in, tokens_out=tokens_out,
                         context_used=context_used, context_max=context_max)

    def subagent(self, agent_id: str, label: str) -> Display:
        return StreamDisplay(self.stream, self.progress.subagent(agent_id, label), agent_id)


def _asked(reason: str) -> str:
    """The policy's reason for asking, without what the human (if any) then answered."""
    for said in (f"{APPROVED}; ", f"{CONFIRMED}; "):
        if reason.startswith(said):
            return reason[len(said):]
    return reason
