"""What an editor sees and answers while the agent works under `abhed acp`: the agent's Display
(agent/display.py) as ACP session updates, and the gate's questions as ACP permission requests.

It is a display and an approver like the chat's (cli/display.py Chat), nothing more: what the
agent reports goes out as `session/update` notifications (message and thought chunks, tool calls
and their updates, the plan), and the one thing that comes back is the human's answer to an
approval, mapped onto the chat's own choices (cli/approvals.py). The editor never reaches a tool.

The agent runs in the main thread (and its tool and subagent threads), the connection in an
asyncio loop of its own thread (cli/acp_cmd.py); `Link` carries each report across and waits for
it to be written, so updates arrive in the order they were made and before the turn's answer.
Diffs are the tools' own (tools/preview.py, via cli/diffview.py): the file now and what the call
would write, sent as ACP diff content when the call starts, in the permission request, and again
when it has run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from acp import helpers
from acp.schema import (
    AllowedOutcome,
    PermissionOption,
    PermissionOptionKind,
    PlanEntry,
    PlanEntryStatus,
    ToolCallLocation,
    ToolKind,
    ToolCallUpdate,
)

from abhed.agent.display import Display
from abhed.cli import approvals, diffview
from abhed.cli.display import call_arguments, checkpoint_note, preview
from abhed.common.terminal import printable
from abhed.gate.approval import Answer, Gate, Verdict
from abhed.model.wire import ToolCall
from abhed.session.store import Plan, TodoItem
from abhed.tools.base import ToolContext, ToolResult

SEND_S = 30.0  # an editor that takes no frame for this long is not reading: the report is dropped, and logged
MAX_SHOWN = 20_000  # characters of a result shown in the editor (the model's own copy is bounded by the tool)
OUTPUT_EVERY_S = 0.5  # a running command's output, at most this often
OUTPUT_TAIL = 4_000  # characters of it

TODO_STATUS: dict[str, PlanEntryStatus] = {"pending": "pending", "in_progress": "in_progress", "done": "completed"}
# The chat's approval keys (cli/approvals.py) an editor can give: the ones that need typing (a reason,
# a scope to save to the config) or a pager have no ACP counterpart.
OPTION_KINDS: dict[str, PermissionOptionKind] = {"y": "allow_once", "a": "allow_always", "p": "allow_always",
                                                 "n": "reject_once"}


def kind_of(tool: str) -> ToolKind:
    """The ACP kind of a call (the icon an editor shows), from what the tool declares (its traits),
    never a list of names: a file edit, a command, a search (a read-only tool taking a pattern), a
    read, a note to itself (read-only and not among the parallel file readers: plan, todo), else other
    (a subagent, an MCP tool)."""
    from abhed.tools import BY_NAME, native_traits
    traits = native_traits(tool)
    if traits is None or traits.spawns:
        return "other"
    if traits.edits_files:
        return "edit"
    if traits.runs_code:
        return "execute"
    if traits.reads_only and traits.parallel:
        return "search" if "pattern" in BY_NAME[tool].Input.model_fields else "read"
    return "think" if traits.reads_only else "other"


class Link:
    """The way from the agent's threads to the editor: one session's updates and questions."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conn: Any) -> None:
        self.loop, self.conn = loop, conn
        self.session_id: str | None = None  # set once the session exists: nothing is sent before

    def update(self, update: Any) -> None:
        if self.session_id is None:
            return
        self._wait(self.conn.session_update(session_id=self.session_id, update=update), SEND_S)

    def ask(self, tool_call: ToolCallUpdate, options: list[PermissionOption]) -> Any:
        """The editor's answer (None when the editor is gone); no deadline: a human answers."""
        if self.session_id is None:
            return None
        return self._wait(self.conn.request_permission(session_id=self.session_id, tool_call=tool_call,
                                                       options=options), None)

    def _wait(self, coroutine: Any, timeout: float | None) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            logging.warning("the editor took no frame for %.0f s: an update was dropped", SEND_S)
        except Exception as exc:  # the editor went away or refused the frame: the agent works on
            logging.warning("could not send to the editor: %s", exc)
        return None


def answer_of(response: Any, offered: dict[str, Answer]) -> Answer:
    """The approval a permission response gives: the chosen option's answer; anything else (the
    request cancelled, an option that was not offered, no response at all) is a no."""
    outcome = getattr(response, "outcome", None)
    if isinstance(outcome, AllowedOutcome) and outcome.option_id in offered:
        return offered[outcome.option_id]
    return Answer(False)


def permission_options(tool: str, args: Any, verdict: Verdict, gate: Gate | None
                       ) -> tuple[list[PermissionOption], dict[str, Answer]]:
    """The chat's choices for this call that an editor can give, as ACP options, and what each answers.
    Rules are offered only where the chat offers them (never for a destructive or opaque call)."""
    policy = gate.effective() if gate is not None else None
    options: list[PermissionOption] = []
    offered: dict[str, Answer] = {}
    for choice in approvals.choices(tool, args, verdict, policy, can_save=False):
        kind = OPTION_KINDS.get(choice.key)
        if kind is None:
            continue
        option_id = f"{choice.key}:{len(options)}"
        options.append(PermissionOption(option_id=option_id, name=choice.label, kind=kind))
        offered[option_id] = choice.answer
    return options, offered


def plan_entries(plan: Plan | None, todos: list[TodoItem]) -> list[PlanEntry]:
    """ACP's plan is one list of entries with a status each: the todo list when there is one, else
    the plan's steps (the plan tool gives them no status: pending)."""
    if todos:
        return [helpers.plan_entry(printable(item.content), status=TODO_STATUS[item.status])
                for item in todos]
    if plan is not None:
        return [helpers.plan_entry(printable(step)) for step in plan.steps]
    return []


def checkpoint_line(result: ToolResult) -> str | None:
    """The chat's line under a checkpointed call, with the command that takes it back from a terminal
    (the editor has no /undo: `abhed undo` runs once the editor has closed the session)."""
    facts = result.metadata.get("checkpoint")
    note = checkpoint_note(result)
    if note is None or not isinstance(facts, dict):
        return None
    return note.replace("(/undo takes this call back)", f"(`abhed undo --to {facts.get('number')}` takes this call "
                                                         "and the later ones back)")


def literal_block(text: str) -> str:
    """`text` as a fenced code block an editor's markdown shows verbatim: the fence is longer than any
    run of backticks inside, and the text is made printable (no control character reaches the editor)."""
    text = printable(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def shown_text(content: str) -> str:
    if len(content) <= MAX_SHOWN:
        return content
    return content[:MAX_SHOWN] + f"\n[... {len(content) - MAX_SHOWN} more characters not shown here ...]"


def _decoded(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


@dataclass
class _Started:
    name: str
    arguments: Any  # the parsed arguments, or None
    diff: Any = None  # the ACP diff content of an edit or write, worked out as it started
    output: str = ""
    sent_at: float = 0.0


class _Calls:
    """The calls started and not finished in one session (its subagents' too), for the questions
    the gate asks without saying which call asks (matched by tool and arguments)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, _Started] = {}
        self.asked: set[str] = set()

    def which(self, tool: str, args: Any) -> str | None:
        given = args.model_dump() if hasattr(args, "model_dump") else {}
        with self.lock:
            candidates = [cid for cid, s in self.running.items() if s.name == tool and cid not in self.asked]
            exact = [cid for cid in candidates if isinstance(self.running[cid].arguments, dict)
                     and all(given.get(k) == v for k, v in self.running[cid].arguments.items())]
            if not (exact or candidates):
                return None
            found = (exact or candidates)[0]
            self.asked.add(found)
            return found


class AcpDisplay(Display):
    """The main agent's reports, as the editor's session updates."""

    def __init__(self, link: Link, calls: _Calls | None = None, agent_id: str = "main", label: str = "") -> None:
        self.link = link
        self.calls = calls or _Calls()
        self.agent_id, self.label = agent_id, label
        self.gate: Gate | None = None
        self.tool_ctx: ToolContext | None = None
        # Whether a cancel is due here and now (cli/acp_server.py `due`): one that came before the loop
        # could take its signal is raised where the loop next reports, as a Ctrl-C there would be.
        self.interrupted: Callable[[], bool] = lambda: False
        self.spent = [0, 0]  # this turn's prompt and completion tokens (the prompt's answer reports them)

    def _stop_if_cancelled(self) -> None:
        if self.interrupted():
            raise KeyboardInterrupt

    def attach(self, gate: Gate, tool_ctx: ToolContext) -> None:
        self.gate, self.tool_ctx = gate, tool_ctx

    # -- what the model writes ------------------------------------------------------------------------

    def waiting(self) -> None:
        self._stop_if_cancelled()

    def usage(self, tokens_in: int, tokens_out: int, context_used: int, context_max: int) -> None:
        self.spent = [self.spent[0] + tokens_in, self.spent[1] + tokens_out]

    def text(self, delta: str) -> None:
        self._stop_if_cancelled()
        self.link.update(helpers.update_agent_message_text(delta))

    def reasoning(self, delta: str) -> None:
        self.link.update(helpers.update_agent_thought_text(delta))

    def notice(self, message: str) -> None:
        logging.warning("%s", printable(message))
        self.link.update(helpers.update_agent_thought_text(f"\nabhed: {printable(message)}\n"))

    def todos(self, items: list[TodoItem]) -> None:
        state = self.tool_ctx.session.state if self.tool_ctx is not None else None
        self.link.update(helpers.update_plan(plan_entries(state.plan if state else None, items)))

    def plan(self, plan: Plan) -> None:
        todos = self.tool_ctx.session.state.todos if self.tool_ctx is not None else []
        self.link.update(helpers.update_plan(plan_entries(plan, todos)))

    def subagent(self, agent_id: str, label: str) -> Display:
        sub = _SubagentDisplay(self.link, self.calls, agent_id, label)
        sub.gate, sub.tool_ctx = self.gate, self.tool_ctx
        return sub

    # -- tool calls -----------------------------------------------------------------------------------

    def _id(self, call: ToolCall) -> str:
        return call.id if self.agent_id == "main" else f"{self.agent_id}/{call.id}"

    def _title(self, call: ToolCall) -> str:
        what = preview(call)
        title = f"{call.name} {what}".strip()
        return title if self.agent_id == "main" else f"[{self.agent_id}] {title}"

    def tool_started(self, call: ToolCall) -> None:
        self._stop_if_cancelled()
        args = call_arguments(call)
        started = _Started(call.name, vars(args) if args is not None else None)
        started.diff = self._diff(call.name, args)
        with self.calls.lock:
            self.calls.running[self._id(call)] = started
        path = getattr(args, "path", None)
        locations = [ToolCallLocation(path=path)] if isinstance(path, str) and path.startswith("/") else None
        self.link.update(helpers.start_tool_call(
            self._id(call), self._title(call), kind=kind_of(call.name),
            status="in_progress", content=[started.diff] if started.diff is not None else None,
            locations=locations, raw_input=started.arguments if started.arguments is not None else call.arguments))

    def _diff(self, tool: str, args: Any) -> Any:
        """The call's change to its file as ACP diff content (the tools' own preview), or None."""
        change, _ = diffview.file_diff(tool, args, self.tool_ctx)
        if change is None or change.after is None or change.path is None:
            return None
        return helpers.tool_diff_content(str(change.path), _decoded(change.after) or "", _decoded(change.before))

    def command_output(self, text: str) -> None:
        """A running command's output: its tail, at most every OUTPUT_EVERY_S (the result has it whole)."""
        with self.calls.lock:
            running = [(cid, s) for cid, s in self.calls.running.items() if s.name == "bash"]
            if len(running) != 1:  # which of several commands wrote this is not known here
                return
            call_id, started = running[0]
            started.output = (started.output + text)[-OUTPUT_TAIL:]
            now = time.monotonic()
            if now - started.sent_at < OUTPUT_EVERY_S:
                return
            started.sent_at, tail = now, started.output
        self.link.update(helpers.update_tool_call(call_id, content=[helpers.tool_content(
            helpers.text_block(printable(tail)))]))

    def tool_finished(self, call: ToolCall, result: ToolResult) -> None:
        call_id = self._id(call)
        with self.calls.lock:
            started = self.calls.running.pop(call_id, None)
            self.calls.asked.discard(call_id)
        diff = started.diff if started is not None and not result.is_error else None
        content = [diff] if diff is not None else []
        content.append(helpers.tool_content(helpers.text_block(shown_text(result.content))))
        note = checkpoint_line(result)
        if note:
            content.append(helpers.tool_content(helpers.text_block(note)))
        self.link.update(helpers.update_tool_call(call_id, status="failed" if result.is_error else "completed",
                                                  content=content, raw_output=result.metadata or None))

    # -- approvals ------------------------------------------------------------------------------------

    def ask(self, tool: str, args: Any, verdict: Verdict) -> Answer:
        """The gate's question as an ACP permission request: the call (its diff, why it is asked)
        and the chat's answers an editor can give. No answer, or any other, is a no."""
        call_id = self.calls.which(tool, args)
        options, offered = permission_options(tool, args, verdict, self.gate)
        content = []
        with self.calls.lock:
            started = self.calls.running.get(call_id) if call_id is not None else None
        diff = started.diff if started is not None else self._diff(tool, args)
        if diff is not None:
            content.append(diff)
        literal = getattr(args, "command", None) or getattr(args, "path", None) or ""
        description = getattr(args, "description", None)
        said = ["DESTRUCTIVE - confirm" if verdict.destructive else "", str(description or "")]
        if literal:  # whole and literal, fenced: markdown in it (a comment, a link) cannot hide what runs
            said.append(f"{tool}:\n{literal_block(str(literal))}")
        said.append(f"why asked: {printable(verdict.reason)}")
        content.append(helpers.tool_content(helpers.text_block("\n\n".join(part for part in said if part))))
        asked = ToolCallUpdate(tool_call_id=call_id or f"ask-{tool}-{time.monotonic_ns()}",
                               title=f"approve {tool}?", status="pending", content=content)
        answer = answer_of(self.link.ask(asked, options), offered)
        if call_id is not None and answer.approved:
            self.link.update(helpers.update_tool_call(call_id, status="in_progress"))
        return answer


class _SubagentDisplay(AcpDisplay):
    """A subagent's tool calls (labelled with its id) and notices; never its streamed text, as in the chat."""

    def text(self, delta: str) -> None:
        pass

    def reasoning(self, delta: str) -> None:
        pass

    def todos(self, items: list[TodoItem]) -> None:
        pass

    def plan(self, plan: Plan) -> None:
        pass

    def notice(self, message: str) -> None:
        super().notice(f"[{self.agent_id}] {message}")
