"""The agent loop: ask the model, run the calls it makes, give it the results, until it answers.

    run(prompt)                                   RunEvent started, the prompt as a MessageEvent
      until done:
        a budget exhausted?                    -> "budget": a summary of where it stopped
        context filling? compact                  (compaction.py; plan, todos, files read re-injected)
        reply = the model's next reply            (context overflow: compact harder, retry once)
        the reply as a MessageEvent               (its calls, and the text forms they were read from)
        no calls?                              -> "done": the reply is the answer
        each call through dispatch.call           (read-only ones in parallel; events + approval there)
        a failing call repeated? a firmer hint    (loop guard)
      RunEvent with the outcome

Everything the loop knows lives in the Agent's fields and in the session's event log, which can
rebuild the conversation at any point (`restore`, used by `abhed resume` and after Ctrl-C).

Subagents (the task tool, tools/task.py) run this same loop: `spawn` builds an Agent with a fresh
conversation (its own system prompt with its profile's role, and ABHED.md), `agent_id`
"<parent>.<n>", `parent_id` set, a branch of the session (the same log, a read-set of its own:
session.Session.branch) and a child Budget whose spend counts against every ancestor's limits.
The task calls of one reply run side by side, at most `max_parallel_subagents` at once; each
subagent reports on a display of its own, and the budget above them all is the one that stops
them (an ancestor's limit reached, or the user's Ctrl-C).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal, NamedTuple, TypedDict

from abhed.agent import compaction, dispatch, repomap
from abhed.agent import notes as notefiles
from abhed.common.traits import Traits
from abhed.gate.approval import Gate
from abhed.session.config import AgentConfig
from abhed.agent.conversation import Gauge, chars, fit_observation, message_event, observation_cap, rebuild
from abhed.agent.display import Display
from abhed.session.events import AnyEvent, CompactionEvent, EndpointEvent, ModeEvent, RepoMapEvent, RunEvent, new_id, who
from abhed.files.images import ImageLimits
from abhed.model.adapters import adapter_for
from abhed.model.textcalls import VisibleStream, prose
from abhed.model.client import Retry
from abhed.model.connect import Model
from abhed.model.errors import ContextOverflow, ModelError, ToolsUnsupported
from abhed.model.profiles import Vision
from abhed.model.wire import Msg, Reply, ToolCall, call_id
from abhed.agent.gitstatus import git_summary
from abhed.agent.prompt import project_notes, system_prompt
from abhed.session.store import Session, SessionState, replay
from abhed.session.storefail import StoreError
from abhed.tools import BY_NAME, all_tools
from abhed.tools.base import Tool, ToolContext, ToolResult
from abhed.tools.bash import stop_running_commands
from abhed.tools.task import BudgetLimitReached
from abhed.tools.todo import render_todos

GUARD_AFTER = 3  # the same failing call this many times gets the loop guard's hint
REPEATED_NOTE = ("\n[Abhed: this reply came twice with tool-call markup that cannot run (see the errors before it); "
                 "it is delivered as the answer, as written. Nothing in it was run.]")
EMPTY_REPLIES = 3  # replies with neither text nor calls in a row before the run is given up
Status = Literal["done", "failed", "budget", "interrupted"]
CLEARED = ("[Abhed: the user cleared the conversation; earlier turns are not shown. Start afresh from the next "
           "message.]")
EXIT_CODES: dict[str, int] = {"done": 0, "failed": 1, "budget": 3, "interrupted": 130}
STORE_STOPPED = "the run stopped because the session store failed (no call runs that the log does not record)"
RESUME_NOTE = ("[Abhed: this session stopped before the task was finished and is resuming now. Continue where you "
               "stopped; check the state of any file you were changing before you rely on it.]")


class _CallIds(TypedDict):
    """Whose call it is, as dispatch.call and dispatch.reject take it (keyword arguments)."""

    tool_call_id: str | None
    agent_id: str
    parent_id: str | None
    durable: bool


def batches(calls: Sequence[ToolCall], traits_of: Callable[[str], Traits | None]) -> list[list[ToolCall]]:
    """The calls of one reply in the groups that run side by side, in order: neighbouring calls of
    tools that declare `parallel` (they touch nothing but the read-set), or neighbouring calls of
    tools that `spawn` a subagent (each in a session branch of its own); every other call alone."""
    def group(call: ToolCall) -> str | None:
        traits = traits_of(call.name)
        if traits is None:
            return None
        return "parallel" if traits.parallel else "spawns" if traits.spawns else None

    out: list[list[ToolCall]] = []
    for call in calls:
        kind = group(call)
        if out and kind is not None and group(out[-1][0]) == kind:
            out[-1].append(call)
        else:
            out.append([call])
    return out


@dataclass(frozen=True)
class RunLimits:
    """How far a run may go (None: no bound): the budget's turns, tokens and wall-clock seconds.
    (The sandbox's per-command resource limits are sandbox.Limits.)"""

    turns: int | None = None
    tokens: int | None = None
    seconds: float | None = None


Limits = RunLimits  # the old name, kept only because tests import it (tests/agent, tests/task, test_where_changes_go.py)


class Budget:
    """Turns, tokens and wall time of a run. Hierarchical: a child's spend is charged to every
    ancestor too, and a child is exhausted when any ancestor is."""

    def __init__(self, limits: RunLimits, parent: Budget | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits, self.parent, self.clock = limits, parent, clock
        self.turns = self.tokens = 0
        self.started = clock()
        # One lock for the whole tree: subagents running side by side charge the same ancestors, and
        # take_turn checks and charges every level in one step.
        self._lock: threading.Lock = parent._lock if parent is not None else threading.Lock()
        self._stopped: str | None = None

    def child(self, limits: RunLimits) -> Budget:
        return Budget(limits, self, self.clock)

    def charge(self, *, turns: int = 0, tokens: int = 0) -> None:
        with self._lock:
            self._add(turns, tokens)

    def take_turn(self) -> str | None:
        """Charge one model reply here and above, unless a budget is exhausted: then why, and
        nothing is charged. Atomic, so subagents side by side never overshoot a turn limit."""
        with self._lock:
            reason = self.exhausted()
            if reason is None:
                self._add(1, 0)
            return reason

    def _add(self, turns: int, tokens: int) -> None:
        budget: Budget | None = self
        while budget is not None:
            budget.turns += turns
            budget.tokens += tokens
            budget = budget.parent

    def stop(self, reason: str) -> None:
        """Spend nothing more here or in any budget below (the subagents drawing on it)."""
        self._stopped = reason

    def stopped(self) -> str | None:
        """Why this budget or one above it was stopped (an interrupt), or None; limits reached aside."""
        return self._stopped or (self.parent.stopped() if self.parent is not None else None)

    def exhausted(self) -> str | None:
        """Why no more may be spent, or None."""
        if self._stopped:
            return self._stopped
        limits, seconds = self.limits, self.clock() - self.started
        if limits.turns is not None and self.turns >= limits.turns:
            return f"the turn budget is exhausted ({self.turns} of {limits.turns} model replies)"
        if limits.tokens is not None and self.tokens >= limits.tokens:
            return f"the token budget is exhausted ({self.tokens} of {limits.tokens} tokens)"
        if limits.seconds is not None and seconds >= limits.seconds:
            return f"the time budget is exhausted ({seconds:.0f} of {limits.seconds:g} seconds)"
        return self.parent.exhausted() if self.parent is not None else None

    def spent(self) -> str:
        return f"{self.turns} replies, {self.tokens} tokens, {self.clock() - self.started:.0f} s"


@dataclass
class Outcome:
    status: Status
    answer: str  # the final answer; for a stop, where it stopped
    detail: str = ""  # why it stopped, for the human (stderr)
    agent_id: str = "main"
    turns: int = 0  # model replies in this run, its subagents' included
    tool_calls: int = 0  # calls this agent made in this run
    changed: list[str] = field(default_factory=list)  # files it wrote or edited in this run
    ancestor_budget: bool = False  # status "budget" because a budget above its own ran out (spawn sets it)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]


def image_limits(vision: Vision | None) -> ImageLimits | None:
    """The model's image limits as the tools take them."""
    if vision is None:
        return None
    return ImageLimits(max_images=vision.max_images, max_pixels=vision.max_pixels, max_bytes=vision.max_bytes)


class Agent:
    def __init__(self, ctx: ToolContext, model: Model, gate: Gate, budget: Budget, *,
                 config: AgentConfig | None = None, display: Display | None = None, agent_id: str = "main",
                 parent_id: str | None = None, tools: Sequence[Tool] | None = None,
                 conversation: list[Msg] | None = None, role: str | None = None) -> None:
        self.ctx, self.model, self.gate, self.budget = ctx, model, gate, budget
        # The tools see what the model can see: read shows images only to a model that takes them.
        ctx.vision = image_limits(model.vision)
        if parent_id is None:  # a long snapshot shows on this display; subagents' contexts are copies of this one
            ctx.progress = display.hashing if display is not None else None
        self.config = config or AgentConfig()
        self.display = display or Display()
        # a command's output as it arrives, on this agent's own display (a subagent's context is a copy: its own)
        ctx.output = self.display.command_output if display is not None else None
        self.agent_id, self.parent_id = agent_id, parent_id
        self.role = role  # a subagent's profile, added to its system prompt
        self.tools = list(tools if tools is not None else all_tools())
        self.definitions = [tool.definition() for tool in self.tools]
        self.notes = project_notes(ctx.paths.workspace)
        # the top-level agent's only: a subagent starts after commands ran (see gitstatus)
        self.git = git_summary(ctx.paths.workspace) if parent_id is None else None
        self.repomap = repomap.for_session(ctx.paths.workspace, ctx.paths.open_dir, ctx.settings.search.exclude,
                                           ctx.settings.home, ctx.settings.repomap,
                                           model.context_window) if parent_id is None else None
        self._map_told = False  # the map's event and notice come with the first run
        self.cap = observation_cap(model.context_window)
        self.messages: list[Msg] = list(conversation or [])
        self.gauge = Gauge()
        self.failures: Counter[str] = Counter()
        self.changed: list[str] = []  # files this agent wrote or edited
        self.tool_calls = 0
        self._children = itertools.count(1)
        self._use_format(model.tool_format)
        self._shown = VisibleStream()
        self._said, self._changed_from = "", 0  # this run's last visible words, and where its changes start
        self._tool_names = {tool.name for tool in self.tools}
        self._refused_text: str | None = None  # the last reply whose calls could not run (_repeated_refusal)
        self.stoppable = False  # inside the loop, where a KeyboardInterrupt is taken as the user's interrupt

    # -- one run ------------------------------------------------------------------------------------

    def run(self, prompt: str | None, images: list[dict[str, str]] | None = None) -> Outcome:
        """Work on `prompt` until the model answers (None: carry on where an unfinished run stopped).
        `images`: the user's attachments ({"url", "label"}, cli/attachments.py), sent with the prompt."""
        user, host = who()
        turns, calls, changed = self.budget.turns, self.tool_calls, len(self.changed)
        self._said, self._changed_from = "", changed  # what where_it_stopped reports is this run's
        store_failed = False
        try:  # the store failing anywhere in the run ends it: nothing runs that the log does not hold
            self._record(RunEvent(status="started", prompt=prompt, model=self.model.id, user=user, host=host,
                                  **self._ids()), sync=False)  # the prompt's fsync
            self._tell_map()
            if prompt is not None:
                self._add(Msg("user", prompt, images=list(images or [])), origin="user")
            else:
                self._add(Msg("user", RESUME_NOTE), origin="resume")
            try:
                self.stoppable = True  # from here an interrupt ends the run cleanly (chat's Esc asks: cli/escwatch.py)
                outcome = self._loop()
            except KeyboardInterrupt:
                self.stoppable = False
                stop_running_commands()  # commands of parallel calls run in worker threads: the interrupt missed them
                outcome = self._interrupted()
            finally:
                self.stoppable = False
        except StoreError as exc:
            outcome, store_failed = self._store_failed(exc), True
        self._end_run(outcome, store_failed)
        if self.parent_id is None and self.ctx.hooks is not None and not store_failed:
            self.ctx.hooks.fire("turn_end", status=outcome.status, detail=outcome.detail)
        outcome.agent_id, outcome.turns = self.agent_id, self.budget.turns - turns
        outcome.tool_calls, outcome.changed = self.tool_calls - calls, list(dict.fromkeys(self.changed[changed:]))
        return outcome

    def _end_run(self, outcome: Outcome, store_failed: bool) -> None:
        """Record how the run ended, and save state.json (a cache of the log, once a run: dispatch.call's
        durable=False). A store that fails only now leaves the answer standing, told as not recorded."""
        try:
            self._record(RunEvent(status=outcome.status, detail=outcome.detail, **self._ids()))
            self.ctx.session.save()
        except StoreError as exc:
            if not store_failed:  # else it was told already
                outcome.status = "failed"
                outcome.detail = f"{STORE_STOPPED}: the end of the run is not recorded: {exc.message}"

    def _store_failed(self, exc: StoreError) -> Outcome:
        """The store could not record an event: the run stops (docs/security.md, the session store). The
        conversation is rebuilt from the log, which holds exactly what was recorded, so chat can go on
        once the store is fixed."""
        self.display.reply_done(final=True)
        self.messages = rebuild(self.ctx.session.log.load().events, self.agent_id, self.cap)
        self.gauge.forget()
        return Outcome("failed", self.where_it_stopped("the session store failed"), f"{STORE_STOPPED}: {exc.message}")

    def _loop(self) -> Outcome:
        empty = 0
        while True:
            reason = self.budget.take_turn()
            if reason:
                return Outcome("budget", self.where_it_stopped(reason), f"stopped: {reason}")
            try:
                reply = self._ask()
            except ModelError as exc:
                return Outcome("failed", self.where_it_stopped("the model server failed"), exc.message)
            reading = self.adapter.read(reply)
            calls = self._unique(reading.calls)
            rest = self._shown.finish(reading.prose)  # text after the calls, or markup that was prose
            if rest.strip():
                self.display.text(rest)
            if calls and self._repeated_refusal(calls, reply.text):
                self._add(Msg("assistant", reply.text), origin="model", reply=reply)
                self.display.reply_done(final=True)
                return Outcome("done", reply.text.strip() + REPEATED_NOTE)
            self._add(Msg("assistant", reply.text, calls), origin="model", reply=reply, forms=reading.forms)
            self.display.reply_done(final=not calls)
            if calls:
                self._run_calls(calls, reply)
                continue
            answer = reading.prose.strip()
            if answer:
                cut = reply.finish_reason == "length"
                return Outcome("done", answer + ("\n[this answer was cut off at the output limit]" if cut else ""))
            empty += 1
            if empty >= EMPTY_REPLIES:
                return Outcome("failed", self.where_it_stopped("the model kept replying with nothing"),
                               f"the model sent {empty} empty replies in a row")
            self._add(Msg("user", "[Abhed: your reply was empty. Continue the task with a tool call, or give your "
                                  "final answer.]"), origin="hint")

    def _repeated_refusal(self, calls: list[ToolCall], text: str) -> bool:
        """Whether this reply is the same as the last one and, like it, holds only calls that cannot
        run (markup that does not parse, tools that do not exist). The first time the model is told
        why (dispatch's errors); the second time the markup is taken as meant: the answer, never a loop."""
        refused = all(call.error is not None or call.name not in self._tool_names for call in calls)
        repeated = refused and text == self._refused_text
        self._refused_text = text if refused else None
        return repeated

    # -- asking the model ---------------------------------------------------------------------------

    def _ask(self) -> Reply:
        self._maybe_compact()
        overflowed = False
        while True:
            self._shown = VisibleStream()
            self.display.waiting()
            try:
                reply = self.model.client.chat(self._body(), stream=self.model.stream, on_text=self._on_text,
                                               on_reasoning=self.display.reasoning, on_retry=self._on_retry)
            except ContextOverflow as exc:
                if exc.limit and exc.limit < self.model.context_window:  # the server knows its window best
                    self.model.context_window = exc.limit
                    self.model.max_output = max(256, min(self.model.max_output, exc.limit // 4))
                    self.cap = observation_cap(exc.limit)
                if overflowed or not self._compact(aggressive=True):
                    raise ModelError(f"{exc.message} Compaction could not make the conversation fit. Start a new "
                                     "session with a shorter prompt, or serve the model with a larger "
                                     "--max-model-len.") from None
                overflowed = True
                continue
            except ToolsUnsupported:
                if not self.model.fallback_format:
                    raise
                self._fall_back_to_text_protocol(self.model.fallback_format)
                continue
            spent = reply.usage.total_tokens if reply.usage else self._estimate() + len(reply.text) // 3
            self.budget.charge(tokens=spent)  # the turn was taken before asking (_loop)
            sent = reply.usage.prompt_tokens if reply.usage else self._estimate()
            made = reply.usage.completion_tokens if reply.usage else len(reply.text) // 3
            self.display.usage(sent, made, sent + made, self.model.context_window)
            return reply

    def _body(self) -> dict[str, Any]:
        conversation = [self._system, *self.messages]
        room = self.model.context_window - self.gauge.estimate(conversation, self._fixed) - 64
        return {"model": self.model.id, "messages": self.adapter.encode(conversation),
                "max_tokens": max(256, min(self.model.max_output, room)),
                **self.model.profile.sampling.fields(), **self.adapter.request_fields()}

    def _estimate(self) -> int:
        return self.gauge.estimate([self._system, *self.messages], self._fixed)

    def _on_text(self, delta: str) -> None:
        shown = self._shown.feed(delta)  # text protocols: the call markup is not for the human
        if shown:
            self.display.text(shown)

    def _on_retry(self, retry: Retry) -> None:
        self.display.retrying(retry.notice())  # what streamed before the fault is discarded
        self._shown = VisibleStream()
        if retry.switched_to is not None:
            self._moved(retry.endpoint, retry.switched_to, retry.notice())

    def _moved(self, previous: str, endpoint: str, reason: str) -> None:
        """model.endpoints: the session goes on at another server; logged, and kept in its options so
        that `abhed resume` asks that one first (its prefix cache is warm from here on)."""
        self._record(EndpointEvent(endpoint=endpoint, previous=previous, reason=reason, **self._ids()))
        with self.ctx.session.lock:
            self.ctx.session.state.options = {**self.ctx.session.state.options, "endpoint": endpoint}
        self.ctx.session.save()

    def _use_format(self, tool_format: str) -> None:
        self.adapter = adapter_for(tool_format, self.definitions, self.model.vision)
        self._fixed = len(json.dumps(self.adapter.request_fields().get("tools", [])))
        self._build_system()

    def _build_system(self) -> None:
        """The system prompt for the tools, the format and the mode in force (a /mode included)."""
        addendum = "\n\n".join(part for part in (self.role, self.adapter.system_addendum()) if part)
        self.system = system_prompt(self.ctx.paths.workspace, [t.name for t in self.tools],
                                    self.gate.effective().mode, addendum, self.notes, git=self.git,
                                    repomap=self.repomap.text if self.repomap else None)
        self._system = Msg("system", self.system)  # one object, so its encoding is reused turn after turn
        self.gauge.forget()

    def set_mode(self, mode: str) -> None:
        """Chat's /mode: the gate decides in `mode` from now on and the model is told so by its system
        prompt from the next request; the change is logged (ModeEvent) and kept in the session's
        options, which `abhed resume` and `abhed chat --session` start from. ValueError for an
        unknown mode, before anything changed."""
        previous = self.gate.effective().mode
        self.gate.set_mode(mode)
        user, host = who()
        try:
            self._record(ModeEvent(mode=mode, previous=previous, user=user, host=host, **self._ids()))
        except StoreError:
            self.gate.set_mode(previous)  # a change the log does not hold is not made
            raise
        with self.ctx.session.lock:
            self.ctx.session.state.options = {**self.ctx.session.state.options, "mode": mode}
        self.ctx.session.save()
        self._build_system()

    def reload_notes(self) -> None:
        """Read the notes for the system prompt again (after chat's /init wrote AGENTS.md)."""
        self.notes = project_notes(self.ctx.paths.workspace)
        self._build_system()

    def use_model(self, model: Model) -> None:
        """Chat's /model: `model` answers from the next request on, with its own window, output cap,
        tool-call format and image limits (the system prompt and the observation cap follow)."""
        self.model = model
        self.ctx.vision = image_limits(model.vision)
        self.cap = observation_cap(model.context_window)
        self._use_format(model.tool_format)

    def _fall_back_to_text_protocol(self, fmt: str) -> None:
        """`fmt`: the text format the connection chose to fall back to (model.fallback_format)."""
        self.display.notice(f"the model server at {self.model.client.endpoint} has no tool-call parser, so the tools "
                            f"are described in the prompt instead ({fmt} format). For native tool calls serve the "
                            f"model as its profile says: {self.model.profile.vllm_serve}")
        self.model.tool_format, self.model.fallback_format = fmt, None
        self._use_format(fmt)

    # -- compaction ---------------------------------------------------------------------------------

    def _maybe_compact(self) -> None:
        limit = self.model.context_window - self.model.max_output
        if self._estimate() > self.config.compact_at * limit:
            self._compact(aggressive=False)

    def _compact(self, aggressive: bool, asked: bool = False) -> bool:
        """Replace the older turns by a summary; False when there is nothing older to replace.
        `asked`: by the human (/compact), who means every turn before the latest, though they fit."""
        before = self._estimate()
        limit = self.model.context_window - self.model.max_output
        ratio = self.gauge.chars_per_token
        # After the server refused a request our estimate said would fit, trust the estimate less.
        keep = int(min(0.1 * limit, 0.25 * before) if aggressive else 0.3 * limit)
        start = compaction.split(self.messages, keep, lambda m: int(chars(m) / ratio))
        if asked:
            start = max(start, compaction.last_turn(self.messages))
        old, tail = self.messages[:start], self.messages[start:]
        if not any(m.role == "assistant" for m in old):
            return False
        summary, method = self._summarise(old)
        content = compaction.block(summary, compaction.user_requests(old), self.ctx.session.state)
        event_id = new_id()
        self.messages = [Msg("user", content, event_id=event_id), *tail]
        self.gauge.forget()
        after = self._estimate()
        self._record(CompactionEvent(id=event_id, content=content, keep_from=tail[0].event_id if tail else None,
                                     method=method, tokens_before=before, tokens_after=after, **self._ids()))
        self.display.notice(f"compacted the conversation to fit the context window: about {before} -> {after} "
                            f"tokens ({method} summary; plan, todos and files read kept)")
        return True

    def compact(self) -> bool:
        """Compact now (chat's /compact); False when there is nothing older to summarise."""
        return self._compact(aggressive=False, asked=True)

    def clear(self) -> None:
        """A new conversation in the same session (chat's /clear): logged as a compaction that keeps
        nothing, so a resume starts from here too. The plan and todos stay in the session's state."""
        before = self._estimate()
        content = CLEARED
        event_id = new_id()
        self.messages = [Msg("user", content, event_id=event_id)]
        self.gauge.forget()
        self._record(CompactionEvent(id=event_id, content=content, keep_from=None, method="mechanical",
                                     tokens_before=before, tokens_after=self._estimate(), **self._ids()))

    def _summarise(self, old: list[Msg]) -> tuple[str, Literal["model", "mechanical"]]:
        room = int((self.model.context_window - 2600) * self.gauge.chars_per_token * 0.8)
        body = {"model": self.model.id, "messages": compaction.summary_messages(old, max(2000, room)),
                "max_tokens": min(2048, self.model.max_output), **self.model.profile.sampling.fields()}
        try:
            reply = self.model.client.chat(body, stream=self.model.stream, on_retry=self._on_retry)
        except ModelError as exc:
            self.display.notice(f"the model could not write the summary ({exc.message[:200]}); keeping a list of "
                                "what was done instead")
            return compaction.mechanical_summary(old), "mechanical"
        if reply.usage:
            self.budget.charge(tokens=reply.usage.total_tokens)
        text = prose(reply.text).strip()
        return (text, "model") if text else (compaction.mechanical_summary(old), "mechanical")

    # -- running calls ------------------------------------------------------------------------------

    def _traits(self, name: str) -> Traits | None:
        """What the tool a call names declares (None: no such tool; dispatch says so)."""
        tool = dispatch.find(self.ctx, name)
        return tool.traits if tool is not None else None

    def _run_calls(self, calls: list[ToolCall], reply: Reply) -> None:
        hints: list[str] = []
        for batch in batches(calls, self._traits):
            first = self._traits(batch[0].name)
            results = (self._run_tasks if first is not None and first.spawns else self._run_batch)(batch)
            for call, result in zip(batch, results):
                hint = self._take(call, result)
                if hint:
                    hints.append(hint)
            failed = next((r.metadata["store_error"] for r in results if r.metadata.get("store_error")), None)
            if failed:  # the calls after it are not run
                raise StoreError(failed, self.ctx.session.log.path, None)
        if reply.finish_reason == "length":
            hints.append(f"[Abhed: your last reply was cut off at the output limit ({self.model.max_output} tokens), "
                         "so its last call may be incomplete. Make calls smaller: write a large file in parts (write "
                         "the start, then add the rest with edit).]")
        loaded = self._nested_notes(calls)
        if loaded or hints:  # synced: the results with it
            self._add(Msg("user", "\n\n".join([*loaded, "\n".join(hints)] if hints else loaded)),
                      origin="notes" if loaded else "loop_guard")
        else:
            self.ctx.session.log.sync()  # the results are durable before the model sees them

    def _nested_notes(self, calls: list[ToolCall]) -> list[str]:
        """The notes (AGENTS.md, ABHED.md) of the subdirectories these calls worked in that the
        conversation does not hold yet (agent/notes.py), each told to the human."""
        directories = []
        for call in calls:
            try:
                arguments = json.loads(call.arguments)
            except (ValueError, RecursionError):
                continue
            tool = dispatch.find(self.ctx, call.name)
            if tool is None or not isinstance(arguments, dict):
                continue
            directory = notefiles.touched(arguments, self.ctx.cwd, runs_code=tool.traits.runs_code,
                                          takes_path=tool.traits.known and "path" in tool.Input.model_fields)
            if directory is not None:
                directories.append(directory)
        said = [m.content for m in self.messages if m.role == "user" and isinstance(m.content, str)]
        found = notefiles.due(self.ctx.paths.workspace, directories, said)
        for _, line in found:
            self.display.notice(line)
        return [text for text, _ in found]

    def _run_batch(self, batch: list[ToolCall]) -> list[ToolResult]:
        for call in batch:
            self.display.tool_started(call)
        if len(batch) == 1:
            return [self._call(batch[0])]
        pool = ThreadPoolExecutor(max_workers=min(8, len(batch)), thread_name_prefix="abhed-tool")
        try:
            return list(pool.map(self._call, batch))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _run_tasks(self, batch: list[ToolCall]) -> list[ToolResult]:
        """Task calls of one reply, side by side (at most max_parallel_subagents at once). Their
        subagents draw on one budget below this agent's, so stopping it stops them all."""
        for call in batch:
            self.display.tool_started(call)
        group = self.budget.child(RunLimits())
        ctx = replace(self.ctx, spawn=partial(self._spawn_task, under=group))
        pool = ThreadPoolExecutor(max_workers=min(self.config.max_parallel_subagents, len(batch)),
                                  thread_name_prefix="abhed-task")
        futures = [pool.submit(self._call, call, ctx) for call in batch]
        try:
            return [future.result() for future in futures]
        except BaseException:  # Ctrl-C: every subagent stops before its next step, its commands at once
            group.stop("the agent that started this subagent was interrupted")
            stop_running_commands()
            running = sum(not future.done() for future in futures)
            if running:
                self.display.notice(f"stopping {running} subagent{'s' * (running != 1)} at their next step (Ctrl-C "
                                    "again to stop waiting)")
            try:
                pool.shutdown(wait=True, cancel_futures=True)  # nothing of theirs runs after the interrupt
            except KeyboardInterrupt:
                pass
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _call(self, call: ToolCall, ctx: ToolContext | None = None) -> ToolResult:
        ctx = ctx or self.ctx
        ids: _CallIds = {"tool_call_id": call.id, "agent_id": self.agent_id, "parent_id": self.parent_id, "durable": False}
        if call.error:
            return dispatch.reject(ctx, call.name or "(unparsed)", call.arguments, call.error, **ids)
        if call.name in BY_NAME and call.name not in {tool.name for tool in self.tools}:  # e.g. task in a subagent
            return dispatch.reject(ctx, call.name, call.arguments, self._unavailable(call.name), **ids)
        return dispatch.call(ctx, call.name, call.arguments, self.gate, **ids)

    def _unavailable(self, name: str) -> str:
        mine = ", ".join(t.name for t in self.tools)
        traits = self._traits(name)
        if traits is not None and traits.spawns and self.parent_id is not None:
            return (f"`{name}` is not available to a subagent: subagents cannot start subagents of their own "
                    f"(agent.max_subagent_depth is {self.config.max_subagent_depth}). Do the work with your own "
                    f"tools: {mine}.")
        return f"`{name}` is not available to this agent. Its tools are: {mine}."

    def _take(self, call: ToolCall, result: ToolResult) -> str | None:
        """Put a result into the conversation; the loop guard's hint if this call keeps failing."""
        self.display.tool_finished(call, result)
        self.tool_calls += 1
        self.messages.append(Msg("tool", fit_observation(result.content, self.cap), tool_call_id=call.id,
                                 name=call.name, images=result.images))
        state, traits = self.ctx.session.state, self._traits(call.name)
        if not result.is_error:
            if call.name == "todo" and result.metadata.get("changed"):
                self.display.todos(state.todos)
            elif call.name == "plan" and result.metadata.get("changed") and state.plan:
                self.display.plan(state.plan)
            elif traits is not None and traits.edits_files and result.metadata.get("path"):
                self.changed.append(result.metadata["path"])
        if traits is not None and traits.spawns:
            self.changed.extend(result.metadata.get("changed") or [])  # what its subagent changed
        return self._guard(call, result)

    def _guard(self, call: ToolCall, result: ToolResult) -> str | None:
        try:
            canonical = json.dumps(json.loads(call.arguments), sort_keys=True)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to parse (dispatch refused it)
            canonical = call.arguments
        key = f"{call.name}\0{canonical}"
        if not result.is_error:
            self.failures.pop(key, None)
            return None
        self.failures[key] += 1
        count = self.failures[key]
        if count < GUARD_AFTER:
            return None
        self.display.notice(f"loop guard: the same failing {call.name} call, {count} times")
        return (f"[Abhed loop guard: you have now made this exact {call.name} call {count} times and it failed every "
                "time. Repeating it will fail again. Read the error message: change the arguments, use another tool "
                "(for an edit, read the file again and copy the exact text), or stop and tell the user what blocks "
                "you.]")

    # -- the record ---------------------------------------------------------------------------------

    def _ids(self) -> dict[str, Any]:
        return {"session_id": self.ctx.session.id, "agent_id": self.agent_id, "parent_id": self.parent_id}

    def tell(self, text: str, origin: str) -> None:
        """Add a note from Abhed (not the model, not the human's prompt) to the conversation and the
        log, e.g. that the human undid changes (chat's /undo)."""
        self._add(Msg("user", text), origin=origin)

    def _tell_map(self) -> None:
        """The repository map in the system prompt: logged (its text and size) and told, once."""
        made = self.repomap
        if made is None or self._map_told:
            return
        self._map_told = True
        self._record(RepoMapEvent(content=made.text, tokens=made.tokens, budget=made.budget, files_shown=made.shown,
                                  files_found=made.files, parsed=made.parsed, cached=made.cached,
                                  seconds=round(made.seconds, 3), **self._ids()), sync=False)
        self.display.notice(f"repository map in the first request: {made.shown} of {made.files} source files, "
                            f"{made.tokens} tokens (budget {made.budget}; {made.cached} outlines from the cache)")

    def _record(self, event: AnyEvent, *, sync: bool = True) -> None:
        self.ctx.session.record(event, sync=sync)

    def _add(self, msg: Msg, *, origin: str, reply: Reply | None = None, forms: tuple[str, ...] = ()) -> None:
        event = message_event(msg, self.ctx.session.id, self.agent_id, self.parent_id, origin=origin,
                              reasoning=reply.reasoning if reply else None, usage=reply.usage if reply else None,
                              finish_reason=reply.finish_reason if reply else None, forms=forms)
        msg.event_id = event.id
        said = prose(msg.content).strip() if msg.role == "assistant" else ""
        if said:
            self._said = said
        self._record(event, sync=not msg.tool_calls)  # a reply's calls follow at once: their fsync covers it
        self.messages.append(msg)
        if reply is not None and reply.usage is not None:
            self.gauge.measure(reply.usage, [self._system, *self.messages], self._fixed)

    @staticmethod
    def _unique(calls: list[ToolCall]) -> list[ToolCall]:
        """Every call needs its own id: its result is matched to it (a server may repeat or omit ids)."""
        seen: set[str] = set()
        for call in calls:
            if not call.id or call.id in seen:
                call.id = call_id()
            seen.add(call.id)
        return calls

    def _interrupted(self) -> Outcome:
        """Ctrl-C: the turn ends here; the conversation is rebuilt from the log, which holds exactly
        what happened (calls that did not finish get results saying so)."""
        self.display.reply_done(final=True)
        self._add(Msg("user", "[Abhed: the user interrupted this turn.]"), origin="interrupt")
        self.messages = rebuild(self.ctx.session.log.load().events, self.agent_id, self.cap)
        self.gauge.forget()
        return Outcome("interrupted", "", "interrupted by the user")

    def where_it_stopped(self, reason: str) -> str:
        lines = [f"Stopped before finishing: {reason}."]
        if self._said:  # this run's: an earlier run's last words would describe another task
            lines.append(f"Last step: {self._said[:500]}")
        todos = self.ctx.session.state.todos
        if todos:
            lines.append(render_todos(todos))
        if self.changed[self._changed_from:]:
            lines.append("Files changed: " + ", ".join(dict.fromkeys(self.changed[self._changed_from:])))
        resume = f". Continue with: abhed resume {self.ctx.session.id}" if self.parent_id is None else ""
        lines.append(f"Spent: {self.budget.spent()}{resume}")
        return "\n".join(lines)

    # -- subagents and resume -------------------------------------------------------------------------

    def spawn(self, prompt: str, *, max_turns: int | None = None, tools: Sequence[Tool] | None = None,
              display: Display | None = None, role: str | None = None, label: str | None = None,
              under: Budget | None = None) -> Outcome:
        """Run `prompt` in a subagent: a fresh conversation, a branch of the session (the same log, a
        read-set and cwd of its own), the same tools (without task) and approval, a budget drawn
        from `under` (default: this agent's). Its events carry agent_id "<this id>.<n>" and
        parent_id this agent's id; a sandbox it had to open for itself is closed when it ends."""
        under = under or self.budget
        agent_id = f"{self.agent_id}.{next(self._children)}"
        display = display or self.display.subagent(agent_id, label or prompt)
        ctx = replace(self.ctx, session=self.ctx.session.branch(), spawn=None)
        budget = under.child(RunLimits(turns=max_turns))
        child = Agent(ctx, self.model, self.gate.labelled(agent_id, label, budget.stopped), budget, config=self.config,
                      display=display, agent_id=agent_id, parent_id=self.agent_id,
                      tools=tools if tools is not None else [t for t in self.tools if not t.traits.spawns], role=role)
        try:
            outcome = child.run(prompt)
        finally:
            if ctx.shell is not None and ctx.shell is not self.ctx.shell:
                ctx.close()
        outcome.ancestor_budget = outcome.status == "budget" and under.exhausted() is not None
        return outcome

    def _spawn_task(self, prompt: str, *, max_turns: int | None, tools: Sequence[str] | None, role: str,
                    label: str, under: Budget) -> Outcome:
        """The task tool's `Spawn` (tools/task.py): a subagent with the profile's tools, never more
        than this agent's own, and task only while nesting is allowed."""
        reason = under.exhausted()
        if reason:
            raise BudgetLimitReached(reason)
        nested = self.agent_id.count(".") + 1 < self.config.max_subagent_depth
        mine = [t for t in self.tools if not t.traits.spawns or nested]
        chosen = mine if tools is None else [t for t in mine if t.name in tools]
        return self.spawn(prompt, max_turns=max_turns or self.config.subagent_max_turns, tools=chosen, role=role,
                          label=label, under=under)

    @classmethod
    def restore(cls, ctx: ToolContext, model: Model, gate: Gate, budget: Budget, **kwargs: Any) -> tuple[Agent, bool]:
        """An agent continuing the session's conversation from its log, and whether its last run was
        left unfinished (a crash, a kill, an interrupt, a budget or a failure)."""
        problems = kwargs.pop("problems", [])  # lines of the log skipped, for the caller to tell
        agent_id = kwargs.get("agent_id", "main")
        found = resumed(ctx.session, agent_id, observation_cap(model.context_window))
        problems.extend(found.problems)
        with ctx.session.lock:
            ctx.session.state = found.state
        ctx.session.save()
        return cls(ctx, model, gate, budget, conversation=found.conversation, **kwargs), found.unfinished


class Resumed(NamedTuple):
    state: SessionState
    conversation: list[Msg]
    unfinished: bool  # the agent's last run did not end "done"
    problems: list[str]


def resumed(session: Session, agent_id: str, cap: int) -> Resumed:
    """What the session's log adds up to for agent `agent_id`, read in one pass that holds one event
    at a time: its state (state.json brought up to date), its conversation, whether its last run was
    left unfinished, the lines skipped. Memory follows what is kept, not the length of the log."""
    state = session.state.model_copy(deep=True)
    problems: list[str] = []
    last_run: list[str] = []

    def own() -> Iterator[AnyEvent]:
        for event in session.log.stream(problems):
            if event.agent_id != agent_id:  # a subagent's reads, cwd and runs were its own
                continue
            replay(state, event)
            if isinstance(event, RunEvent):
                last_run[:] = [event.status]
            yield event
    conversation = rebuild(own(), agent_id, cap)
    return Resumed(state, conversation, bool(last_run) and last_run[0] != "done", problems)

