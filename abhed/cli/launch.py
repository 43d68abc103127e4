"""Setting up an agent for the command line: settings with flags, the model, the session, the gate.

Shared by `abhed run`, `chat`, `resume` and `demo`, so each command only says what differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

from abhed.cli import startup
from abhed.gate.approval import Answer, Gate, Policy, Rule, Verdict
from abhed.session import config, sitepolicy, workspaces
from abhed.session.store import Session, SessionError, SessionStore, not_begun
from abhed.session.storefail import StoreError

# What only a session at work needs (the model client, the agent, every tool) is imported where it
# is used: settings and the workspace are found before chat's prompt, all of this after it (issue 18).
if TYPE_CHECKING:
    from abhed.agent.display import Display
    from abhed.agent.loop import Agent, Budget
    from abhed.model.connect import Model


class LaunchError(Exception):
    """The agent cannot start; the message says why and what to do (exit status 2)."""


def settings(*, endpoint: str | None = None, model: str | None = None, profile: str | None = None,
             tool_format: str | None = None, mode: str | None = None, max_turns: int | None = None,
             max_tokens: int | None = None, max_time: float | None = None,
             allowed_roots: list[Path] | None = None, allow: list[str] | None = None) -> config.Settings:
    """The operator's settings with the command-line flags on top (flags left unset change nothing).
    `allow`: rules added to the operator's approval.allow for this run (--allow)."""
    def given(**values: Any) -> dict[str, Any]:
        return {key: value for key, value in values.items() if value is not None}

    flags: dict[str, Any] = {"model": given(endpoint=endpoint, model=model, profile=profile, tool_format=tool_format),
                             "agent": given(max_turns=max_turns, max_tokens=max_tokens, max_seconds=max_time),
                             "approval": given(mode=mode)}
    if endpoint is not None:  # --endpoint: this one server for this command, whatever model.endpoints lists
        flags["model"]["endpoints"] = []
    if allowed_roots is not None:
        flags["allowed_roots"] = [str(root) for root in allowed_roots]
    try:
        loaded = config.load(flags)
    except config.ConfigError as exc:
        raise LaunchError(str(exc)) from None
    for rule in allow or []:
        try:
            Rule.parse(rule)
        except ValueError as exc:
            raise LaunchError(f"--allow {rule!r} is not a rule: {exc}") from None
    loaded.approval.allow = [*loaded.approval.allow, *(allow or [])]
    return loaded


# The flags a session remembers, so that `abhed resume` runs as the session was started.
REMEMBERED = ("mode", "allow", "max_turns", "max_tokens", "max_time")


def remembered(flags: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """`flags` with what the session was started with filling the ones left unset; --allow rules
    add to the stored ones."""
    out = dict(flags)
    for key in REMEMBERED:
        if key == "allow":
            out[key] = list(dict.fromkeys([*stored.get(key, []), *(flags.get(key) or [])]))
        elif out.get(key) is None and stored.get(key) is not None:
            out[key] = stored[key]
    return out


def stored_options(settings: config.Settings, session_id: str) -> dict[str, Any]:
    try:
        return SessionStore(settings.home).open(session_id).state.options
    except SessionError as exc:
        raise LaunchError(str(exc)) from None


def latest(settings: config.Settings, workspace: Path) -> str:
    """The id of this workspace's most recently used agent session (LaunchError if none)."""
    store = SessionStore(settings.home)
    found = workspaces.latest(store, workspace, ("agent",))
    if found is None:
        raise LaunchError(f"No session of the workspace {workspace} in {store.root}. Start one with `abhed run "
                          "PROMPT` or `abhed chat`; `abhed sessions list` shows every workspace's sessions.")
    return found


def sticky_endpoint(settings: config.Settings, session_id: str | None) -> str | None:
    """The endpoint a session last used (model.endpoints), which it asks first: its prefix is cached there."""
    if session_id is None or not settings.model.endpoints:
        return None
    endpoint = stored_options(settings, session_id).get("endpoint")
    return endpoint if isinstance(endpoint, str) else None


def open_model(settings: config.Settings, display: Display, prefer: str | None = None) -> Model:
    """Connect to the configured model server (ModelError, ProfileError when it cannot be used); with
    model.endpoints, to the one chosen for this session (`prefer`: the one it used before)."""
    from abhed.model.connect import connect
    m = settings.model
    endpoint, pool = m.endpoint, None
    if m.endpoints:  # several servers: this session's (endpoints.py is loaded only then)
        from abhed.model.endpoints import session_endpoint
        endpoint, pool = session_endpoint(m.servers(), prefer, m.api_key, display.notice)
    return connect(endpoint, pool=pool, api_key=m.api_key, model=m.model, profile=m.profile, tool_format=m.tool_format,
                   stream=m.stream, timeout_s=m.timeout_s, attempts=m.attempts, stall_s=m.stall_s,
                   max_request_s=m.max_request_s, max_reply_bytes=m.max_reply_bytes, profiles_dir=m.profiles_dir,
                   images=m.images, image_limits=m.vision_overrides(), probe_attempts=1, connect_s=m.connect_s,
                   probe_connect_s=m.startup_connect_s,
                   on_retry=lambda retry: display.notice(retry.notice()), wait_loading=True)


def budget(settings: config.Settings) -> Budget:
    from abhed.agent.loop import Budget, RunLimits
    a = settings.agent
    return Budget(RunLimits(turns=a.max_turns, tokens=a.max_tokens, seconds=a.max_seconds))


project_root = workspaces.project_root  # the one answer for every command (session/workspaces.py)


def locate(settings: config.Settings, workspace: Path, session_id: str | None) -> Path:
    """The workspace to work in: the session's own (it must exist: an unknown id is a mistake, not a
    new session), else `workspace`; checked before anything connects or starts (LaunchError says
    what is wrong)."""
    if session_id is not None:
        store = SessionStore(settings.home)
        try:
            workspace = Path(store.open(session_id).state.workspace)  # SessionError names how to list them
        except SessionError as exc:
            raise LaunchError(str(exc)) from None
    if not workspace.is_dir():
        raise LaunchError(f"The workspace {workspace} does not exist or is not a directory.")
    return workspace.resolve()


def mcp_gateway(settings: config.Settings, workspace: Path, notice: Callable[[str], None],
                only: set[str] | None = None) -> Any:
    """The MCP gateway with its servers started and their admitted tools, or None when no server is
    configured (nothing of abhed.mcp is imported then)."""
    if not settings.mcp.servers:
        return None
    from abhed.mcp.gateway import Gateway
    try:
        return Gateway(settings, workspace, only=only).start(notice)
    except config.ConfigError as exc:
        raise LaunchError(str(exc)) from None


def _tell_interrupted_undo(checkpoints: Any, display: Display) -> None:
    """Chat start says so when an undo in this workspace was interrupted (session/journal.py)."""
    if checkpoints is None:
        return
    from abhed.session.checkpoint import CheckpointError
    from abhed.session.undo import interrupted
    try:
        notice = interrupted(checkpoints)
    except CheckpointError as exc:
        notice = str(exc)
    if notice:
        display.notice(f"warning: {notice} In this chat: /undo --finish or /undo --rollback.")


@contextmanager
def agent_in_session(settings: config.Settings, workspace: Path, session_id: str | None, model: Model,
                     display: Display, ask_human: Callable[[str, Any, Verdict], bool | Answer] | None = None,
                     options: dict[str, Any] | None = None, cwd: Path | None = None
                     ) -> Iterator[tuple[Agent, bool]]:
    """An Agent on the session (new, or continued from its log) holding the session's lock, and
    whether the session's last run was left unfinished. `workspace` comes from `locate`; `options`
    (the REMEMBERED flags) are saved with the session for `abhed resume`; a new session's commands
    start in `cwd` when it is inside the workspace (where the person started it), else at its root."""
    from abhed.agent.loop import Agent
    from abhed.files.paths import PathPolicy
    from abhed.session.checkpoint import CheckpointError, from_settings
    from abhed.tools import all_tools, warmup
    from abhed.tools.base import ToolContext
    try:
        config.refuse_workspace_control(settings, workspace)
    except config.ConfigError as exc:
        raise LaunchError(str(exc)) from None
    store = SessionStore(settings.home)
    paths = PathPolicy.create(workspace, settings.allowed_roots)
    rules = settings.approval
    try:
        checkpoints = from_settings(settings, workspace)
    except CheckpointError as exc:  # the site's policy requires them, and they cannot be taken here
        raise LaunchError(str(exc)) from None
    gate = Gate(Policy.from_settings(settings, workspace, checkpoints=checkpoints is not None), ask_human=ask_human,
                mode_refused=sitepolicy.mode_refused(settings))
    try:
        with store.use(session_id, workspace, wait_s=settings.agent.session_wait_s) as session:
            _tell_interrupted_undo(checkpoints, display)
            fresh = session.new
            if fresh and cwd is not None and cwd.resolve().is_relative_to(workspace):
                session.state.cwd = str(cwd.resolve())
            if options is not None:
                session.state.options = {**{k: options.get(k) for k in REMEMBERED}, "mode": rules.mode,
                                         "model": model.id, "endpoint": model.client.endpoint}
                _saved(session)
            gateway = mcp_gateway(settings, workspace, display.notice)
            ctx = ToolContext(session, settings, paths, checkpoints=checkpoints, extra=gateway,
                              hooks=session_hooks(settings, session, workspace, display))
            warmup.start(ctx)  # the first checkpoint and the sandbox, while the model takes its first turn
            shipper = None
            try:
                shipper = audit_shipper(settings, session, workspace, display)
                problems: list[str] = []  # the log is read once, by restore: the lines it skipped
                try:
                    agent = Agent.restore(ctx, model, gate, budget(settings), config=settings.agent, display=display,
                                          tools=[*all_tools(), *(gateway.tools if gateway else [])], problems=problems)
                except StoreError as exc:  # restore saves the state it rebuilt
                    raise LaunchError(str(not_begun(session.id, exc))) from None
                for problem in problems:
                    display.notice(f"warning: {problem}")
                startup.end()  # what the session works with is loaded: collect garbage as usual from here
                if ctx.hooks is not None:
                    ctx.hooks.fire("session_start", new=fresh)
                yield agent
            finally:
                if ctx.hooks is not None:
                    ctx.hooks.fire("session_end")
                if shipper is not None:
                    shipper.end()  # the session's end, with its head, sent while the session is still held
                ctx.close()  # the bash tool's sandbox and background jobs end with the session's process
                if gateway is not None:
                    gateway.close()  # and so do the MCP servers
    except SessionError as exc:
        raise LaunchError(str(exc)) from None


def audit_shipper(settings: config.Settings, session: Session, workspace: Path, display: Display) -> Any:
    """The central audit's delivery for this session, started (session/auditship.py), or None when
    `[audit]` names no sink (nothing of it is imported then)."""
    if not settings.audit.sinks:
        return None
    from abhed.session.auditship import Shipper, refuse_writable
    try:
        refuse_writable(settings.audit, [workspace, *settings.allowed_roots])
    except config.ConfigError as exc:
        raise LaunchError(str(exc)) from None
    shipper = Shipper(settings.audit, settings.home, session.dir, session.id, session.record, display.notice)
    try:
        shipper.start()
    except StoreError as exc:
        raise LaunchError(str(not_begun(session.id, exc))) from None
    session.after_record = shipper.notify
    return shipper


def session_hooks(settings: config.Settings, session: Session, workspace: Path, display: Display) -> Any:
    """The operator's hooks for this session (agent/hooks.py), or None when the config sets none."""
    if not any(getattr(settings.hooks, event) for event in config.HOOK_EVENTS):
        return None
    from abhed.agent.hooks import Hooks
    return Hooks(settings.hooks, session.id, workspace, session.record, display.notice)


def _saved(session: Session) -> None:
    try:
        session.save()
    except StoreError as exc:
        raise LaunchError(str(not_begun(session.id, exc))) from None


def refused_for_want_of_a_human(session: Session, settings: config.Settings, workspace: Path) -> list[str]:
    """The calls of the session's last run that needed approval and were refused because nobody was
    there to give it (`abhed run`): each as the --allow rule that would let it through, checked
    against the policy, or "--mode auto" when no simple rule would (a redirect, an assignment)."""
    from pydantic import ValidationError

    from abhed.agent.dispatch import NOT_APPROVED
    from abhed.session.checkpoint import from_settings
    from abhed.session.events import ActionEvent, AnyEvent, ObservationEvent, RunEvent
    from abhed.tools import BY_NAME
    checkpoints = from_settings(settings, workspace) is not None  # as the run had them: the same policy
    recent: list[AnyEvent] = []  # the events of the last run (all of them when none started): one run's held
    for event in session.log.stream([]):
        if isinstance(event, RunEvent) and event.status == "started" and event.agent_id == "main":
            recent = []
        recent.append(event)
    actions = {e.id: e for e in recent if isinstance(e, ActionEvent)}
    rules = settings.approval
    out = []
    for event in recent:
        if not (isinstance(event, ObservationEvent) and event.metadata.get("error_kind") == NOT_APPROVED
                and event.metadata.get("approval", {}).get("decision") == "ask"):
            continue
        action = actions.get(event.action_id)
        if event.tool.startswith("mcp__"):  # no mode allows an MCP tool: only a rule naming it does
            out.append(f"--allow '{event.tool}'")
            continue
        try:
            args = BY_NAME[event.tool].Input.model_validate(action.input if action else None)
        except (KeyError, ValidationError):
            out.append("--mode auto")
            continue
        words = str(getattr(args, "command", "")).split()
        rule = f"bash({words[0]}:*)" if event.tool == "bash" and words else event.tool
        policy = Policy.from_settings(settings, workspace, checkpoints=checkpoints, allow=[*rules.allow, rule])
        out.append(f"--allow '{rule}'" if policy.check(event.tool, args).decision == "allow" else "--mode auto")
    return out


def recent_conversation(session: Session, messages: int = 6, width: int = 200) -> list[str]:
    """The last few prompts and replies of the session, for a person picking it up again."""
    from collections import deque

    from abhed.session.events import MessageEvent
    said: deque[MessageEvent] = deque(maxlen=messages)  # the log is read through, the last few kept
    count = 0
    for event in session.log.stream([]):
        if (isinstance(event, MessageEvent) and event.agent_id == "main" and event.origin in ("user", "model")
                and event.content.strip()):
            said.append(event)
            count += 1
    if not said:
        return []
    lines = [f"-- the last {len(said)} of {count} messages of this session --"]
    for event in said:
        text = " ".join(event.content.split())
        lines.append(f"{'you' if event.role == 'user' else 'abhed'}: {text[:width]}{' ...' if len(text) > width else ''}")
    return lines + ["--"]
