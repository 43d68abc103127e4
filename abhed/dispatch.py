"""One tool call, start to finish: ActionEvent -> validate -> approval -> tool -> ObservationEvent (rule 7).

Everything the model can get wrong (bad JSON, an unknown tool, arguments that fail the schema) and
everything a tool can hit (a ToolError, an OS error, a bug) ends as an error observation that says
what to do next. Nothing here raises to the caller except a KeyboardInterrupt.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from pydantic import ValidationError
from rapidfuzz import process

from abhed.approval import Gate, refusal
from abhed.errors import ToolError
from abhed.events import ActionEvent, ObservationEvent
from abhed.tools import BY_NAME
from abhed.tools.base import Tool, ToolContext, ToolResult, cap_text, explain_invalid, fail

# error_kind values a caller may act on (the CLI exits 2 on the first two: a bad invocation).
UNKNOWN_TOOL, BAD_JSON, INVALID_INPUT, NOT_APPROVED, TOOL_ERROR, INTERNAL = (
    "unknown_tool", "bad_json", "invalid_input", "not_approved", "tool_error", "internal")
MALFORMED = "malformed_call"  # the model's tool-call markup itself did not parse (text protocols)
# Tools that check the read-set and then replace a file: one at a time per session (Session.writes),
# so agents running side by side cannot both pass the check and overwrite each other.
READ_SET_WRITERS = frozenset({"write", "edit"})


def parse_arguments(arguments: Any) -> tuple[Any, str | None]:
    """The arguments as a Python value, or the reason they are not valid JSON."""
    if not isinstance(arguments, str):
        return arguments, None
    if not arguments.strip():
        return {}, None  # some servers send "" for a call with no arguments
    try:
        return json.loads(arguments), None
    except json.JSONDecodeError as exc:
        return arguments, f"{exc.msg} at line {exc.lineno} column {exc.colno} (character {exc.pos})"


def unknown_tool(name: str) -> ToolResult:
    known = ", ".join(BY_NAME)
    close = process.extractOne(name, list(BY_NAME), score_cutoff=60)
    hint = f" Did you mean `{close[0]}`?" if close else ""
    return fail(f"There is no tool named `{name}`.{hint} The tools are: {known}. Call one of them by its exact name.",
                error_kind=UNKNOWN_TOOL)


def execute(ctx: ToolContext, name: str, arguments: Any, gate: Gate) -> ToolResult:
    tool = BY_NAME.get(name)
    if tool is None:
        return unknown_tool(name)
    value, bad_json = parse_arguments(arguments)
    if bad_json:
        example = json.dumps(tool.example).replace("WORKSPACE", str(ctx.paths.workspace))
        return fail(f"The arguments for `{name}` are not valid JSON: {bad_json}. Send one JSON object, e.g. "
                    f"{example}", error_kind=BAD_JSON)
    try:
        args = tool.Input.model_validate(value)
    except ValidationError as exc:
        return fail(explain_invalid(tool, exc, ctx.paths.workspace), error_kind=INVALID_INPUT)
    verdict = gate.review(name, args)
    approval = {"decision": verdict.decision, "rule": verdict.rule, "reason": verdict.reason}
    if verdict.decision != "allow":
        return fail(refusal(name, verdict, args), error_kind=NOT_APPROVED, approval=approval)
    result = _run(tool, args, ctx)
    result.metadata["approval"] = approval
    return result


def _run(tool: Tool, args: Any, ctx: ToolContext) -> ToolResult:
    name = tool.name
    try:
        with ctx.session.writes if name in READ_SET_WRITERS else nullcontext():
            return tool.run(args, ctx)
    except ToolError as exc:
        return fail(exc.message, error_kind=TOOL_ERROR, **exc.metadata)
    except Exception as exc:  # a bug in Abhed: the model must still get an instruction, not a traceback
        trace = traceback.format_exc()
        print(trace, file=sys.stderr)
        return fail(
            f"Internal error in `{name}` ({type(exc).__name__}: {str(exc)[:200]}). This is a bug in Abhed, not in "
            "your call; no file was left half-written (writes are atomic). Try another way, or tell the user.",
            error_kind=INTERNAL, traceback=trace)


def call(ctx: ToolContext, name: str, arguments: Any, gate: Gate, *, tool_call_id: str | None = None,
         agent_id: str = "main", parent_id: str | None = None, durable: bool = True) -> ToolResult:
    """Run one call and persist it as an ActionEvent and an ObservationEvent.

    The ActionEvent is always fsync'd before the tool runs, so a crash mid-call is known. With
    `durable=False` (the agent loop) the observation waits for the next synced event or the
    caller's `log.sync()`, and state.json is not saved: the caller saves it, and until then the
    log, which records every state change, is ahead of it (session.rebuild_state).
    """
    return _persisted(ctx, name, arguments, lambda: execute(ctx, name, arguments, gate), tool_call_id, agent_id,
                      parent_id, durable)


def reject(ctx: ToolContext, name: str, arguments: Any, message: str, *, tool_call_id: str | None = None,
           agent_id: str = "main", parent_id: str | None = None, durable: bool = True) -> ToolResult:
    """A call the model wrote but that cannot be run as written (its markup did not parse): persisted
    like any call, answered with `message`, which says how to write it."""
    return _persisted(ctx, name, arguments, lambda: fail(message, error_kind=MALFORMED), tool_call_id, agent_id,
                      parent_id, durable)


def _persisted(ctx: ToolContext, name: str, arguments: Any, run: Callable[[], ToolResult], tool_call_id: str | None,
               agent_id: str, parent_id: str | None, durable: bool) -> ToolResult:
    session = ctx.session
    value, _ = parse_arguments(arguments)
    action = ActionEvent(session_id=session.id, agent_id=agent_id, parent_id=parent_id, tool=name,
                         tool_call_id=tool_call_id, input=value)
    session.record(action)
    mark = session.mark()
    started = time.perf_counter()
    result = run()
    result.content = cap_text(result.content, ctx.settings.files.max_output_chars)
    changes = session.changes_since(mark)
    if changes:  # the log alone can rebuild the state (session.rebuild_state)
        result.metadata["state"] = changes
    session.record(ObservationEvent(
        session_id=session.id, agent_id=agent_id, parent_id=parent_id, action_id=action.id, tool=name,
        content=result.content, is_error=result.is_error, metadata=result.metadata,
        duration_ms=round((time.perf_counter() - started) * 1000, 3)), sync=durable)
    if durable:
        session.save()
    return result
