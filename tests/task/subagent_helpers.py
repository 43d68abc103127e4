"""Agents with subagents against the replay server: a scripted model that answers each agent by
the task it was given (its first user message), so parent and subagents running side by side each
get their own next step."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from abhed.session import config
from abhed.agent.loop import Agent, Budget, Limits
from abhed.gate.approval import Gate, Policy
from abhed.session.config import AgentConfig
from abhed.agent.display import Display
from abhed.model.connect import connect
from abhed.model.replay import ReplayServer, Turn
from abhed.files.paths import PathPolicy
from abhed.session.store import SessionStore
from abhed.tools.base import ToolContext


class Seen:
    """One agent's conversation as the server receives it: its task and the results so far."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        messages = body["messages"]
        self.system = messages[0]["content"]
        self.prompt = messages[1]["content"]
        self.results = [m["content"] for m in messages if m["role"] == "tool"]
        self.tools = sorted(t["function"]["name"] for t in body.get("tools", []))

    @property
    def step(self) -> int:
        """How many replies this agent has had (its assistant messages so far)."""
        return sum(m["role"] == "assistant" for m in self.body["messages"])


Handler = Callable[[Seen], Turn]


class Script:
    """Routes each request to the handler whose key is in the agent's task prompt."""

    def __init__(self, handlers: dict[str, Handler]) -> None:
        self.handlers = handlers
        self.seen: list[Seen] = []

    def __call__(self, body: dict[str, Any]) -> Turn:
        seen = Seen(body)
        self.seen.append(seen)
        for key, handler in self.handlers.items():
            if key in seen.prompt:
                return handler(seen)
        raise AssertionError(f"no handler for the prompt {seen.prompt[:80]!r}")

    def of(self, key: str) -> list[Seen]:
        return [s for s in self.seen if key in s.prompt]


def task(prompt: str, description: str = "Do a subtask", **more: Any) -> tuple[str, dict[str, Any]]:
    return ("task", {"prompt": prompt, "description": description, **more})


def make_agent(ws: Path, home: Path, server: ReplayServer, *, mode: str = "accept-edits",
               limits: Limits | None = None, agent_config: AgentConfig | None = None,
               display: Display | None = None) -> Agent:
    settings = config.load({}, env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
    model = connect(server.url, backoff_s=0, profile="generic")
    session = SessionStore(home).create(ws)
    ctx = ToolContext(session, settings, PathPolicy.create(ws))
    return Agent(ctx, model, Gate(Policy.create(mode, [], [], ws)), Budget(limits or Limits(turns=60)),
                 config=agent_config, display=display)


def results(agent: Agent, tool: str = "task") -> list[Any]:
    """The observations of `tool` calls in the order the calls were made (calls running side by side
    finish, and are logged, in any order)."""
    events = agent.ctx.session.log.load().events
    made = [c["id"] for e in events if e.kind == "message" for c in e.tool_calls]
    actions = {e.id: e for e in events if e.kind == "action"}
    observed = [e for e in events if e.kind == "observation" and e.tool == tool]
    return sorted(observed, key=lambda e: made.index(actions[e.action_id].tool_call_id))


def arguments(seen: Seen) -> list[dict[str, Any]]:
    """The arguments of every call this agent made so far."""
    return [json.loads(c["function"]["arguments"]) for m in seen.body["messages"] if m["role"] == "assistant"
            for c in m.get("tool_calls") or []]
