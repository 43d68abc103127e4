"""One conformance test: a real agent on a real model in a throwaway workspace, and what its log says.

A Trial makes the workspace (its files), a session in the suite's own ABHED_HOME, an agent in mode
`auto` confined to that workspace, and runs one prompt on a turn budget. Everything the test
judges afterwards comes from the files on disk and the session's event log, never from what the
model says it did: `Record.read` turns the log into the calls each agent made, in order, with
their results and the form they came in, and `recoveries` into the errors and whether the model's
next call fixed them. `run` can make the agent ask for a text protocol instead of the model's own
format (the adapter layer's text:FMT cases), as it does when a server has no tool parser.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from abhed.agent import dispatch
from abhed.agent.loop import Agent, Budget, Outcome, RunLimits
from abhed.gate.approval import Gate, Policy
from abhed.session.config import Settings
from abhed.agent.display import Display
from abhed.session.events import ActionEvent, AnyEvent, MessageEvent, ObservationEvent
from abhed.model.connect import Model
from abhed.files.paths import PathPolicy
from abhed.session.store import SessionState, SessionStore
from abhed.tools.base import ToolContext

HARNESS = "conformance"  # agent id of the calls the suite makes itself (reads done "for" the model)
TRIAL_SECONDS = 900.0  # a test that runs this long has lost its way: its budget stops it
NOT_MISTAKES = frozenset({dispatch.NOT_APPROVED})  # refusals by policy are not the model's errors to fix


@dataclass
class Call:
    """One call a model made, as the log records it."""

    agent_id: str
    reply: int  # which of this agent's replies made it (0-based)
    name: str
    arguments: Any  # parsed JSON when it parsed, else the raw text
    is_error: bool = False
    error_kind: str | None = None
    content: str = ""

    @property
    def args(self) -> dict[str, Any]:
        return self.arguments if isinstance(self.arguments, dict) else {}


@dataclass
class Recovery:
    """An error a call got, and whether the agent's next call of that tool (in its next reply) worked."""

    call: Call
    recovered: bool


@dataclass
class Record:
    """What one trial's log says happened."""

    calls: list[Call] = field(default_factory=list)
    replies: int = 0  # model replies, subagents' included
    agents: list[str] = field(default_factory=list)
    # the forms the calls came in, in order of first use: "native" for the server's structured calls,
    # else the text form they were read from (MessageEvent.forms: hermes, qwen3_coder, ...)
    forms: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, events: Iterable[AnyEvent]) -> Record:
        record = cls()
        made: dict[str, Call] = {}  # tool_call_id -> call
        actions: dict[str, Call] = {}  # action id -> call
        replies: dict[str, int] = {}
        for event in events:
            if event.agent_id == HARNESS:
                continue
            if event.agent_id not in record.agents:
                record.agents.append(event.agent_id)
            if isinstance(event, MessageEvent) and event.role == "assistant" and event.origin == "model":
                number = replies.get(event.agent_id, 0)
                replies[event.agent_id] = number + 1
                record.replies += 1
                for form in (event.forms or ["native"]) if event.tool_calls else []:
                    if form not in record.forms:
                        record.forms.append(form)
                for raw in event.tool_calls:
                    call = Call(event.agent_id, number, raw["name"], _parsed(raw["arguments"]))
                    made[raw["id"]] = call
                    record.calls.append(call)
            elif isinstance(event, ActionEvent) and event.tool_call_id in made:
                actions[event.id] = made[event.tool_call_id]
            elif isinstance(event, ObservationEvent) and event.action_id in actions:
                call = actions[event.action_id]
                call.is_error, call.content = event.is_error, event.content
                call.error_kind = event.metadata.get("error_kind") if event.is_error else None
        return record

    def of(self, name: str, agent_id: str | None = None) -> list[Call]:
        return [c for c in self.calls if c.name == name and (agent_id is None or c.agent_id == agent_id)]

    @property
    def errors(self) -> list[Call]:
        return [c for c in self.calls if c.is_error]

    def recoveries(self) -> list[Recovery]:
        """Each error the model made, and whether its very next attempt at the same tool, in the
        reply right after, succeeded: fixed by the error text alone, without another tool's help."""
        out = []
        for call in self.calls:
            if not call.is_error or call.error_kind in NOT_MISTAKES:
                continue
            following = [c for c in self.calls if c.agent_id == call.agent_id and c.reply == call.reply + 1]
            retry = next((c for c in following if c.name == call.name), None)
            out.append(Recovery(call, retry is not None and not retry.is_error))
        return out


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments


@dataclass
class TrialResult:
    """A finished trial: how the run ended, the log's record, and the session's final state."""

    outcome: Outcome
    record: Record
    state: SessionState
    session_id: str
    seconds: float


class Trial:
    """One throwaway workspace under `root`, with its files, for one run of one prompt."""

    def __init__(self, root: Path, home: Path, settings: Settings, model: Model, *,
                 display: Display | None = None) -> None:
        self.workspace = root / "ws"
        self.workspace.mkdir(parents=True)
        self.workspace = self.workspace.resolve()
        self.settings = settings.model_copy(update={"home": home, "allowed_roots": [self.workspace]})
        self.model, self.display = model, display or Display()
        self.session = SessionStore(home).create(self.workspace)
        self.ctx = ToolContext(self.session, self.settings, PathPolicy.create(self.workspace, [self.workspace]))
        self.gate = Gate(Policy.create("auto", [], [], self.workspace))  # no human: destructive calls are refused

    def files(self, files: dict[str, str]) -> None:
        for name, text in files.items():
            path = self.workspace / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    def pre_read(self, names: Iterable[str]) -> None:
        """Read files into the session's read-set, as if the model had: a test may then tempt it to
        edit straight away from text it was shown."""
        for name in names:
            result = dispatch.call(self.ctx, "read", {"path": str(self.workspace / name)}, self.gate,
                                   agent_id=HARNESS)
            assert not result.is_error, result.content

    def run(self, prompt: str, max_turns: int, tool_format: str | None = None) -> TrialResult:
        """`tool_format`: a text protocol for the agent to ask for instead of the model's own format
        (the tools described in the system prompt, as for a server without a tool parser)."""
        model = self.model if tool_format is None else replace(self.model, tool_format=tool_format,
                                                                 fallback_format=None)
        agent = Agent(self.ctx, model, self.gate, Budget(RunLimits(turns=max_turns, seconds=TRIAL_SECONDS)),
                      config=self.settings.agent, display=self.display)
        started = time.monotonic()
        try:
            outcome = agent.run(prompt)
        finally:
            self.ctx.close()
        record = Record.read(self.session.log.load().events)
        return TrialResult(outcome, record, self.session.state, self.session.id, time.monotonic() - started)
