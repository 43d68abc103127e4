"""Setting up an agent for the command line: settings with flags, the model, the session, the gate.

Shared by `abhed run`, `chat`, `resume` and `demo`, so each command only says what differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from abhed.session import config
from abhed.agent.loop import Agent, Budget, Limits
from abhed.gate.approval import Gate, Policy, Verdict
from abhed.agent.display import Display
from abhed.model.connect import Model, connect
from abhed.files.paths import PathPolicy
from abhed.session.store import SessionError, SessionStore
from abhed.tools.base import ToolContext


class LaunchError(Exception):
    """The agent cannot start; the message says why and what to do (exit status 2)."""


def settings(*, endpoint: str | None = None, model: str | None = None, profile: str | None = None,
             tool_format: str | None = None, mode: str | None = None, max_turns: int | None = None,
             max_tokens: int | None = None, max_time: float | None = None,
             allowed_roots: list[Path] | None = None) -> config.Settings:
    """The operator's settings with the command-line flags on top (flags left unset change nothing)."""
    def given(**values: Any) -> dict[str, Any]:
        return {key: value for key, value in values.items() if value is not None}

    flags: dict[str, Any] = {"model": given(endpoint=endpoint, model=model, profile=profile, tool_format=tool_format),
                             "agent": given(max_turns=max_turns, max_tokens=max_tokens, max_seconds=max_time),
                             "approval": given(mode=mode)}
    if allowed_roots is not None:
        flags["allowed_roots"] = [str(root) for root in allowed_roots]
    try:
        return config.load(flags)
    except config.ConfigError as exc:
        raise LaunchError(str(exc)) from None


def open_model(settings: config.Settings, display: Display) -> Model:
    """Connect to the configured model server (ModelError, ProfileError when it cannot be used)."""
    m = settings.model
    return connect(m.endpoint, api_key=m.api_key, model=m.model, profile=m.profile, tool_format=m.tool_format,
                   stream=m.stream, timeout_s=m.timeout_s, attempts=m.attempts, stall_s=m.stall_s,
                   max_request_s=m.max_request_s, profiles_dir=m.profiles_dir,
                   on_retry=lambda exc, n, wait: display.notice(f"{exc.message} Retrying in {wait:g} s."))


def budget(settings: config.Settings) -> Budget:
    a = settings.agent
    return Budget(Limits(turns=a.max_turns, tokens=a.max_tokens, seconds=a.max_seconds))


def locate(settings: config.Settings, workspace: Path, session_id: str | None, must_exist: bool = False) -> Path:
    """The workspace to work in: an existing session's own, else `workspace`; checked before anything
    connects or starts (LaunchError says what is wrong)."""
    store = SessionStore(settings.home)
    if session_id is not None and (store.root / session_id / "state.json").exists():
        try:
            workspace = Path(store.open(session_id).state.workspace)
        except SessionError as exc:
            raise LaunchError(str(exc)) from None
    elif must_exist:
        raise LaunchError(f"No session {session_id!r} in {store.root}. List them with `abhed sessions list`.")
    if not workspace.is_dir():
        raise LaunchError(f"The workspace {workspace} does not exist or is not a directory.")
    return workspace.resolve()


@contextmanager
def agent_in_session(settings: config.Settings, workspace: Path, session_id: str | None, model: Model,
                     display: Display, ask_human: Callable[[str, Any, Verdict], bool] | None = None
                     ) -> Iterator[tuple[Agent, bool]]:
    """An Agent on the session (new, or continued from its log) holding the session's lock, and
    whether the session's last run was left unfinished. `workspace` comes from `locate`."""
    try:
        config.refuse_workspace_control(settings, workspace)
    except config.ConfigError as exc:
        raise LaunchError(str(exc)) from None
    store = SessionStore(settings.home)
    paths = PathPolicy.create(workspace, settings.allowed_roots)
    rules = settings.approval
    gate = Gate(Policy.create(rules.mode, rules.allow, rules.deny, workspace), ask_human=ask_human)
    try:
        with store.use(session_id, workspace, wait_s=settings.agent.session_wait_s) as session:
            for problem in session.log.load().problems:
                display.notice(f"warning: {problem}")
            ctx = ToolContext(session, settings, paths)
            try:
                yield Agent.restore(ctx, model, gate, budget(settings), config=settings.agent, display=display)
            finally:
                ctx.close()  # the bash tool's sandbox and background jobs end with the session's process
    except SessionError as exc:
        raise LaunchError(str(exc)) from None
