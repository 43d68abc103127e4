"""Building agents against the replay server, in process, for the loop's tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from abhed.session import config
from abhed.agent.loop import Agent, Budget, Limits
from abhed.gate.approval import Gate, Policy
from abhed.session.config import AgentConfig
from abhed.agent.display import Display
from abhed.session.events import MessageEvent
from abhed.model.connect import connect
from abhed.model.replay import ReplayServer
from abhed.files.paths import PathPolicy
from abhed.session.store import SessionStore
from abhed.tools.base import ToolContext

REPO = Path(__file__).resolve().parents[2]


class Recorder(Display):
    """A display that remembers what it was told."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.notices: list[str] = []
        self.tools: list[tuple[str, bool]] = []
        self.todo_updates = 0

    def text(self, delta: str) -> None:
        self.texts.append(delta)

    def tool_finished(self, call, result) -> None:  # type: ignore[no-untyped-def]
        self.tools.append((call.name, result.is_error))

    def todos(self, items) -> None:  # type: ignore[no-untyped-def]
        self.todo_updates += 1

    def notice(self, message: str) -> None:
        self.notices.append(message)


def make_agent(ws: Path, home: Path, server: ReplayServer, *, mode: str = "accept-edits", tool_format: str = "auto",
               limits: Limits | None = None, agent_config: AgentConfig | None = None, session_id: str | None = None,
               profile: str = "generic", **kwargs: Any) -> Agent:
    settings = config.load({}, env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
    model = connect(server.url, backoff_s=0, tool_format=tool_format, profile=profile)
    store = SessionStore(home)
    session = store.open(session_id) if session_id else store.create(ws)
    ctx = ToolContext(session, settings, PathPolicy.create(ws))
    gate = Gate(Policy.create(mode, [], [], ws))
    return Agent(ctx, model, gate, Budget(limits or Limits(turns=50)), config=agent_config,
                 display=kwargs.pop("display", Recorder()), **kwargs)


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


def kinds(agent: Agent) -> list[str]:
    out = []
    for event in agent.ctx.session.log.load().events:
        out.append(f"{event.kind}:{event.role}" if isinstance(event, MessageEvent) else event.kind)
    return out


def args(request: dict[str, Any]) -> str:
    return json.dumps(request["messages"])
