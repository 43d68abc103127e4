"""One tool call, start to finish: ActionEvent -> validate -> approval -> tool -> ObservationEvent (rule 7).

Everything the model can get wrong (bad JSON, an unknown tool, arguments that fail the schema) and
everything a tool can hit (a ToolError, an OS error, a bug) ends as an error observation that says
what to do next. Nothing here raises to the caller except a KeyboardInterrupt.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from hashlib import sha256
from typing import Any, NamedTuple

from pydantic import ValidationError

from abhed.gate.approval import HOOK_BLOCKED, Gate, refusal
from abhed.common.errors import ToolError
from abhed.session.events import ActionEvent, CheckpointEvent, ObservationEvent, who
from abhed.session.storefail import StoreError
from abhed.tools import BY_NAME
from abhed.tools.base import Tool, ToolContext, ToolResult, ToolSource, cap_text, explain_invalid, fail

# error_kind values a caller may act on (the CLI exits 2 on the first two: a bad invocation).
UNKNOWN_TOOL, BAD_JSON, INVALID_INPUT, NOT_APPROVED, TOOL_ERROR, INTERNAL = (
    "unknown_tool", "bad_json", "invalid_input", "not_approved", "tool_error", "internal")
MALFORMED = "malformed_call"  # the model's tool-call markup itself did not parse (text protocols)
TOO_LARGE = "too_large"  # the arguments are over the size or nesting bound: refused before parsing
CHECKPOINT_FAILED = "checkpoint_failed"  # the snapshot before a change failed: the call did not run
STORE_FAILED = "store_failed"  # the session log could not record the call: it did not run
# HOOK_BLOCKED (a pre_tool hook blocked the call) is the gate's: gate.approval.decided_by reads it.


# Defaults of agent.max_argument_bytes / max_argument_depth (session/config.py), for callers without settings.
MAX_BYTES, MAX_DEPTH = 4 * 1024 * 1024, 32
# JSON strings (their brackets do not nest) and the brackets that do: enough to measure nesting
# without parsing, so a 100,000-deep `[[[[...` never reaches json.loads' recursion. The string is
# matched "unrolled" (runs of plain characters, then one escape) with possessive quantifiers: the
# regex engine keeps no backtracking state per character, where `(?:[^"\\]|\\.)*` kept about
# 130 bytes a character (a 30 MB argument took 3.6 GB, issue 33).
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?|[\[\]{}]', re.DOTALL)
# How much of the text is encoded at a time to count its UTF-8 bytes: a bounded copy, not a whole one.
_COUNT_CHUNK = 1 << 20  # pragma: no mutate (any size counts the same; this one bounds the copy)
KEPT_IN_LOG = 4096  # characters of refused arguments the ActionEvent keeps (with their size and hash)


def utf8_chunks(text: str) -> Iterator[bytes]:
    """`text` in UTF-8 (a lone surrogate as 3 bytes), _COUNT_CHUNK characters at a time: no copy of
    the whole text is ever held (a Python character is never split across chunks)."""
    for start in range(0, len(text), _COUNT_CHUNK):
        yield text[start:start + _COUNT_CHUNK].encode("utf-8", "surrogatepass")


def utf8_size(text: str) -> int:
    """How many bytes `text` takes in UTF-8, without encoding it whole."""
    if text.isascii():  # pragma: no mutate (a shortcut: the chunks would count the same)
        return len(text)  # pragma: no mutate (the same shortcut)
    return sum(len(chunk) for chunk in utf8_chunks(text))


def too_deep(text: str, max_depth: int) -> bool:
    """Whether the JSON text nests objects and arrays more than `max_depth` deep, brackets inside
    strings aside. One match per string or bracket, each dropped at once: memory stays constant."""
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = text[match.start()]  # one character: no copy of a matched string
        if token in "[{":
            depth += 1
            if depth > max_depth:
                return True
        elif token in "]}":
            depth -= 1
    return False


def bounds_error(arguments: Any, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> str | None:
    """Why the arguments are too large or too deeply nested to parse, or None when within bounds.

    Checked on the raw text, before json.loads: size by UTF-8 bytes (counted without encoding the
    whole text, utf8_size), nesting by counting brackets outside strings (too_deep).
    """
    if not isinstance(arguments, str):
        arguments = _to_json(arguments)
        if arguments is None:
            return f"they are nested more than {max_depth} levels deep"
    size = len(arguments)
    if size > max_bytes // 4:  # pragma: no mutate (a shortcut: fewer characters cannot reach the limit)
        size = utf8_size(arguments)
    if size > max_bytes:
        return (f"they are {size:,} bytes, over the limit of {max_bytes:,} bytes for one call "
                "(agent.max_argument_bytes)")
    if too_deep(arguments, max_depth):
        return f"they are nested more than {max_depth} levels deep (agent.max_argument_depth)"
    return None  # pragma: no mutate (deleted, the function still returns None)


def _to_json(value: Any) -> str | None:
    """An object some server sent in place of the JSON string, as JSON; None if too deep to encode."""
    try:
        return json.dumps(value)
    except (RecursionError, ValueError, TypeError):
        return None


def too_large(name: str, why: str) -> str:
    return (f"The arguments for `{name}` were not read: {why}. Send smaller, flatter arguments: split a large "
            "file into several calls (write the start, then add the rest with edit), and pass plain values, "
            "not deeply nested structures.")


class Parsed(NamedTuple):
    """A call's arguments read once: the value (the raw text when unparsed), and why not parsed."""
    value: Any
    too_large: str | None = None  # over the bounds (bounds_error): not parsed at all
    bad_json: str | None = None


def read_arguments(arguments: Any, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Parsed:
    why = bounds_error(arguments, max_bytes, max_depth)
    if why:
        return Parsed(arguments, too_large=why)
    if not isinstance(arguments, str):
        return Parsed(arguments)
    if not arguments.strip():
        return Parsed({})  # some servers send "" for a call with no arguments
    try:
        return Parsed(json.loads(arguments))
    except json.JSONDecodeError as exc:
        return Parsed(arguments, bad_json=f"{exc.msg} at line {exc.lineno} column {exc.colno} (character {exc.pos})")
    except ValueError as exc:  # valid JSON Python will not hold, e.g. an integer of 5,000 digits
        return Parsed(arguments, bad_json=str(exc).split(";")[0])


_UNENCODABLE = re.compile("[\0\ud800-\udfff]")


def nul_error(value: Any, where: str = "") -> str | None:
    """Where a string in the arguments holds a NUL character or a lone surrogate, or None. No path,
    command or pattern can hold a NUL (the OS stops at it), and UTF-8 cannot encode a lone surrogate
    (valid in JSON as `\\ud800`, it is half of a character): both are refused before the tool runs."""
    if isinstance(value, str):
        found = _UNENCODABLE.search(value)
        if found is None:
            return None
        what = "a NUL character" if found.group() == "\0" else "a lone surrogate, half of a character,"
        return f"`{where or '(arguments)'}` holds {what} (\\u{ord(found.group()):04x}) at index {found.start()}"
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        path = f"{where}.{key}" if where else str(key)
        problem = nul_error(key, f"the name of {path}") if isinstance(key, str) else None
        problem = problem or nul_error(item, path)
        if problem:
            return problem
    return None


def unknown_tool(name: str, extra: ToolSource | None = None) -> ToolResult:
    why = extra.unavailable(name) if extra is not None else None
    if why:
        return fail(why, error_kind=UNKNOWN_TOOL)
    from rapidfuzz import process  # here: only a wrong name needs the fuzzy matcher
    names = [*BY_NAME, *(extra.names() if extra is not None else [])]
    close = process.extractOne(name, names, score_cutoff=60)
    hint = f" Did you mean `{close[0]}`?" if close else ""
    return fail(f"There is no tool named `{name}`.{hint} The tools are: {', '.join(names)}. Call one of them by its "
                "exact name.", error_kind=UNKNOWN_TOOL)


def _read(ctx: ToolContext, arguments: Any) -> Parsed:
    return read_arguments(arguments, ctx.settings.agent.max_argument_bytes, ctx.settings.agent.max_argument_depth)


def find(ctx: ToolContext, name: str) -> Tool | None:
    """The tool a call names: a native one, or one of the context's other tools (MCP); None if none."""
    return BY_NAME.get(name) or (ctx.extra.tool(name) if ctx.extra is not None else None)


def _execute(ctx: ToolContext, name: str, parsed: Parsed, gate: Gate, action: ActionEvent | None) -> ToolResult:
    tool = find(ctx, name)
    if tool is None:
        return unknown_tool(name, ctx.extra)
    if parsed.too_large:
        return fail(too_large(name, parsed.too_large), error_kind=TOO_LARGE)
    if parsed.bad_json:
        example = json.dumps(tool.example).replace("WORKSPACE", str(ctx.paths.workspace))
        return fail(f"The arguments for `{name}` are not valid JSON: {parsed.bad_json}. Send one JSON object, e.g. "
                    f"{example}", error_kind=BAD_JSON)
    value = parsed.value
    nul = nul_error(value)
    if nul:
        return fail(f"Invalid arguments for `{name}`: {nul}. Arguments cannot contain NUL or lone surrogates (paths "
                    "and commands cannot hold them, nor can UTF-8 text); remove it or send the whole character. "
                    "To put NUL bytes in a file, use bash with printf '\\0'.", error_kind=INVALID_INPUT)
    try:
        args = tool.validate(value)
    except ValidationError as exc:
        return fail(explain_invalid(tool, exc, ctx.paths.workspace), error_kind=INVALID_INPUT)
    except ToolError as exc:  # a tool with a schema of its own (MCP) explains the problem itself
        return fail(exc.message, error_kind=INVALID_INPUT)
    agent_id = action.agent_id if action is not None else "main"
    # The operator's pre_tool hooks judge first (agent/hooks.py): a call one blocks is not even asked about.
    blocked = ctx.hooks.fire("pre_tool", agent_id, name, input=value).blocked if ctx.hooks is not None else None
    if blocked:
        return fail(f"Not run: {blocked}. Nothing was run or changed. Do not retry the same call: do the work "
                    "another way, or tell the user what you need.", error_kind=HOOK_BLOCKED)
    verdict = gate.review(name, args, tool.traits)
    approval = {"decision": verdict.decision, "rule": verdict.rule, "reason": verdict.reason}
    if verdict.decision != "allow":
        return fail(refusal(name, verdict, args), error_kind=NOT_APPROVED, approval=approval)
    result = _checkpointed(ctx, tool, args, action, gate, lambda: _run(tool, args, ctx), undoable=verdict.undoable)
    if ctx.hooks is not None:
        from abhed.agent.hooks import bounded_result
        ctx.hooks.fire("post_tool", agent_id, name, input=value,
                       result={"content": bounded_result(result.content), "is_error": result.is_error})
    number = result.metadata.get("checkpoint", {}).get("number")
    if verdict.undoable and number is not None:  # why it ran unasked, with the checkpoint that undoes it
        approval["reason"] = f"undoable: checkpoint {number} is taken first; {verdict.reason}"
    result.metadata["approval"] = approval
    return result


def changes_workspace(name: str, args: Any, tool: Tool | None = None) -> bool:
    """Whether a call may change the workspace, so a checkpoint must come first: what the tool (the
    native one named `name` when not given) declares for this call (Tool.call_traits: write, edit,
    and every bash line not provably read-only)."""
    tool = tool if tool is not None else BY_NAME.get(name)
    return tool is not None and tool.call_traits(args).checkpoint


def _checkpointed(ctx: ToolContext, tool: Tool, args: Any, action: ActionEvent | None, gate: Gate,
                  run: Callable[[], ToolResult], undoable: bool = False) -> ToolResult:
    """Run the call between a "before" snapshot (a numbered checkpoint, logged) and an "after" one.
    Fails closed: when the snapshot before a change cannot be taken, the change could not be undone, so
    it runs only when a human says so, in every mode; the next call tries to take a snapshot again.
    `undoable`: the call was approved only because it can be undone, so a checkpoint it must have."""
    name, checkpoints = tool.name, ctx.checkpoints
    if not (undoable or changes_workspace(name, args, tool)):
        return run()
    ctx.warmed()  # the first snapshot's work, started as the session opened (tools/warmup.py)
    if checkpoints is None or action is None:
        return _without_checkpoint(name, args, gate, "checkpoints are off, and it was allowed only because one would undo it", run) if undoable else run()
    from abhed.session.checkpoint import CheckpointError  # here: a call that only reads never loads it
    session = ctx.session
    checkpoints.session_started(session.state.created_at.timestamp())
    try:
        before, capture = checkpoints.before(session.id, action.id, name, action.agent_id, changes=changes_of(ctx),
                                              report=ctx.progress)
    except CheckpointError as exc:
        return _without_checkpoint(name, args, gate, str(exc), run)
    try:
        session.record(CheckpointEvent(session_id=session.id, agent_id=action.agent_id, parent_id=action.parent_id,
                                       number=before.number, commit=before.commit, action_id=action.id, tool=name,
                                       not_covered=capture.not_covered[:50],
                                       not_covered_count=len(capture.not_covered), collected=capture.collected))
    except StoreError as exc:  # the checkpoint exists, but the log would not say which call it was for
        return not_recorded(exc)
    result = run()
    facts: dict[str, Any] = {"number": before.number, "before": before.commit}
    try:
        after = checkpoints.after(session.id, before, changes=changes_of(ctx), report=ctx.progress)
        facts["after"] = after.commit
        if after.meta.get("uncovered"):
            from abhed.session.uncovered import note
            facts["uncovered"] = after.meta["uncovered"]
            result.content += f"\n[Abhed: {note(after.meta['uncovered'])}.]"
    except CheckpointError as exc:
        facts["after_error"] = str(exc)
    if capture.not_covered:
        facts["not_covered"] = len(capture.not_covered)
    if capture.collected:
        facts["collected"] = capture.collected
        result.content += f"\n[Abhed: {capture.collected}.]"
    if capture.skipped:  # the call ran all the same; what its checkpoint cannot bring back is said
        from abhed.session.checkpoint import listed
        facts["skipped"] = capture.skipped[:50]
        result.content += (f"\n[Abhed: checkpoint {before.number} does not cover {len(capture.skipped)} "
                           f"path{'s' * (len(capture.skipped) != 1)} it cannot read (undo leaves them as they are):"
                           f"\n{listed(capture.skipped, 10)}]")
    if capture.interrupted:
        facts["interrupted"] = capture.interrupted
        result.content += f"\n[Abhed: {capture.interrupted}]"
    if not capture.first and ctx.warmup is not None:  # the warm-up took the first snapshot: its note, once
        capture.first = ctx.warmup.note()
    if capture.first:  # a first snapshot that read a whole tree: why this call took long, once
        facts["first"] = capture.first
        result.content += f"\n[Abhed: {capture.first}.]"
    result.metadata["checkpoint"] = facts
    return result


def changes_of(ctx: ToolContext) -> Callable[[], Any] | None:
    """Where a snapshot takes what changed since the last one: the bash tool's sandbox watches the
    workspace once its first command has run (session/changeset.py); None before that."""
    shell = ctx.shell
    return getattr(shell, "changes", None)


def _without_checkpoint(name: str, args: Any, gate: Gate, why: str, run: Callable[[], ToolResult]) -> ToolResult:
    """The snapshot before a change failed: ask a human whether to run it all the same."""
    from abhed.gate.approval import Verdict
    reason = (f"the checkpoint that lets this call be undone could not be taken ({why}); run without it, the call's "
              "changes cannot be undone")
    verdict = gate.confirm(name, args, Verdict("ask", reason, rule="checkpoint", destructive=True))
    if verdict.decision != "allow":
        return fail(f"Not run: {reason}. Nothing was changed. A human must confirm running it without a checkpoint: "
                    "in `abhed chat` answer the prompt, in `abhed tool` rerun with --confirm. Tell the user; the "
                    "operator can fix the cause (the next call tries again), or turn checkpoints off "
                    "(checkpoints.enabled = false).", error_kind=CHECKPOINT_FAILED,
                    approval={"decision": verdict.decision, "rule": "checkpoint", "reason": verdict.reason})
    result = run()
    result.content += f"\n[Abhed: this call ran without a checkpoint ({why}): it cannot be undone.]"
    result.metadata["checkpoint"] = {"failed": why}
    return result


def _run(tool: Tool, args: Any, ctx: ToolContext) -> ToolResult:
    name = tool.name
    try:
        # A tool that checks the read-set and then replaces a file runs one at a time per session, so
        # agents side by side cannot both pass the check and overwrite each other.
        with ctx.session.writes if tool.traits.edits_files else nullcontext():
            return tool.run(args, ctx)
    except ToolError as exc:
        return fail(exc.message, error_kind=TOOL_ERROR, **exc.metadata)
    except Exception as exc:  # a bug in Abhed: the model must still get an instruction, not a traceback
        import traceback  # only a bug needs it (start-up, issue 18)
        trace = traceback.format_exc()
        print(trace, file=sys.stderr)
        return fail(
            f"Internal error in `{name}` ({type(exc).__name__}: {str(exc)[:200]}). This is a bug in Abhed, not in "
            "your call; no file was left half-written (writes are atomic). Try another way, or tell the user.",
            error_kind=INTERNAL, traceback=trace)


def call(ctx: ToolContext, name: str, arguments: Any, gate: Gate, *, tool_call_id: str | None = None,
         agent_id: str = "main", parent_id: str | None = None, durable: bool = True) -> ToolResult:
    """Run one call and persist it as an ActionEvent and an ObservationEvent.

    The ActionEvent is fsync'd before a tool that may change anything runs, so a crash mid-call is
    known (a read-only native tool's is made durable with its observation, see _persisted). With
    `durable=False` (the agent loop) the observation waits for the next synced event or the
    caller's `log.sync()`, and state.json is not saved: the caller saves it, and until then the
    log, which records every state change, is ahead of it (session.rebuild_state).
    """
    return _persisted(ctx, name, arguments, lambda action, parsed: _execute(ctx, name, parsed, gate, action),
                      tool_call_id, agent_id, parent_id, durable)


def reject(ctx: ToolContext, name: str, arguments: Any, message: str, *, tool_call_id: str | None = None,
           agent_id: str = "main", parent_id: str | None = None, durable: bool = True) -> ToolResult:
    """A call the model wrote but that cannot be run as written (its markup did not parse): persisted
    like any call, answered with `message`, which says how to write it."""
    return _persisted(ctx, name, arguments, lambda _action, _parsed: fail(message, error_kind=MALFORMED),
                      tool_call_id, agent_id, parent_id, durable)


def _persisted(ctx: ToolContext, name: str, arguments: Any, run: Callable[[ActionEvent, Parsed], ToolResult],
               tool_call_id: str | None,
               agent_id: str, parent_id: str | None, durable: bool) -> ToolResult:
    session = ctx.session
    parsed = _read(ctx, arguments)  # once: the log and the call use the same reading
    user, host = who()
    action = ActionEvent(session_id=session.id, agent_id=agent_id, parent_id=parent_id, tool=name,
                         tool_call_id=tool_call_id, input=_logged_input(arguments, parsed), user=user, host=host)
    # A native tool that changes nothing (read, glob, grep, plan, todo) runs without its action's own
    # fsync: the observation's, or the caller's log.sync() before the model sees the result, makes both
    # durable, and a crash before then loses a call that changed nothing and whose result no one saw.
    native = BY_NAME.get(name)
    try:
        session.record(action, sync=native is None or not native.traits.reads_only)
    except StoreError as exc:  # a call the log does not hold never runs (docs/security.md, the session store)
        return not_recorded(exc)
    mark = session.mark()
    started = time.perf_counter()
    result = run(action, parsed)
    result.content = cap_text(result.content, ctx.settings.files.max_output_chars)
    changes = session.changes_since(mark)
    if changes:  # the log alone can rebuild the state (session.rebuild_state)
        result.metadata["state"] = changes
    observed = False
    try:
        session.record(ObservationEvent(
            session_id=session.id, agent_id=agent_id, parent_id=parent_id, action_id=action.id, tool=name,
            content=result.content, is_error=result.is_error, metadata=result.metadata, images=result.images,
            duration_ms=round((time.perf_counter() - started) * 1000, 3)), sync=durable)
        observed = True
        if durable:
            session.save()
    except StoreError as exc:
        _landed(result, exc, observed)
    return result


def not_recorded(exc: StoreError) -> ToolResult:
    """The call was not run because the log could not record it (or its checkpoint)."""
    return fail(f"Not run: {exc.message}. Nothing was changed. Tell the user: no call runs until the store can record "
                "it.", error_kind=STORE_FAILED, store_error=exc.message)


def _landed(result: ToolResult, exc: StoreError, observed: bool) -> None:
    """The call ran, but its result (or the state after it) is not in the store: the result stands, as
    the call's effect does, and the failure is told beside it."""
    what = "ran and failed as said above" if result.is_error else "ran: its result above stands and its effect is in place"
    lost = ("its result is in the session log, but the session's state after it could not be saved" if observed
            else "the session log does not hold its result")
    result.content += (f"\n[Abhed: this call {what}, but {lost}: {exc.message}. Tell the user: no call runs until the "
                       "store can record it.]")
    result.metadata["store_error"] = exc.message


def _logged_input(arguments: Any, parsed: Parsed) -> Any:
    """What the ActionEvent keeps of the arguments: their parsed value, or the raw text when it is not
    JSON; for arguments over the bounds, their start, size and hash (auditable, never unbounded)."""
    if parsed.too_large is None:
        return parsed.value
    raw = arguments if isinstance(arguments, str) else repr(arguments)[: KEPT_IN_LOG * 2]
    hashed, size = sha256(), 0
    for chunk in utf8_chunks(raw):  # refused for its size: never encoded whole
        hashed.update(chunk)
        size += len(chunk)
    return {"refused_arguments": raw[:KEPT_IN_LOG], "bytes": size, "sha256": hashed.hexdigest()}
