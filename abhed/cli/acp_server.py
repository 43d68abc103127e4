"""`abhed acp`: an editor (Zed, a JetBrains IDE, Neovim, Emacs) drives Abhed over the Agent Client
Protocol on stdin/stdout, with the same sandbox, approvals, checkpoints and session log as the chat.

Two threads. The connection (the `agent-client-protocol` SDK, asyncio) runs in a thread of its
own and only hands work over; every session's work runs in the main thread, one job at a time,
as in `abhed chat`: a turn is the chat's `agent.run`, so a cancel is the chat's Ctrl-C (SIGINT at
the main thread: the loop's KeyboardInterrupt kills running commands, records the interrupt and
rebuilds the conversation from the log). The editor sees the turn through cli/acp_display.py.

ACP methods and what they are here:
- initialize: protocol version 1, loadSession, text and embedded-context prompts.
- session/new: `abhed chat` in the editor's cwd (its workspace is the git root it is in, checked
  as the chat checks it: settings, workspace, the workspace's own config refused).
- session/load: `abhed chat --session ID`, its recorded conversation replayed as updates first;
  session/resume (unstable in ACP): the same without the replay.
- session/list: `abhed sessions list`, the agent sessions of the editor's project.
- session/set_mode: the chat's /mode.
- session/prompt: one turn; session/cancel: Ctrl-C on it.
- session/close (unstable in ACP): the session's end, as the chat's (its lock released: `abhed undo`
  and `abhed chat --session` can take it).
Sessions opened here are held (their lock, sandbox, MCP servers) until closed or the editor disconnects.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import signal
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from acp import PROTOCOL_VERSION, RequestError, helpers
from acp.agent.connection import AgentSideConnection
from acp.schema import (
    AgentCapabilities,
    AuthenticateResponse,
    CloseSessionResponse,
    EmbeddedResourceContentBlock,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionModeResponse,
    TextContentBlock,
    TextResourceContents,
    Usage,
)

from abhed import __version__
from abhed.cli import launch
from abhed.cli.acp_display import AcpDisplay, Link, kind_of, plan_entries, shown_text
from abhed.cli.acp_frames import log_to_stderr, open_frames, take_stdio
from abhed.cli.agent_cmd import settings_of
from abhed.common.terminal import printable

# How a turn's outcome (agent/loop.py Status) ends the ACP prompt.
STOP_REASONS = {"done": "end_turn", "interrupted": "cancelled", "budget": "max_turn_requests", "failed": "end_turn"}
DRAIN_S = 30.0  # at the end of input, how long the answers to requests already made are waited for
LIST_PAGE = 50  # sessions in one session/list answer; the cursor pages on

# The approval modes (gate/modes.py) as an editor's mode picker shows them; session/set_mode is chat's /mode.
MODE_WORDS = {"ask": "asks before every change and every command that is not read-only",
              "plan": "reads and plans; refuses every change",
              "accept-edits": "edits files without asking (each is checkpointed); asks before commands",
              "auto": "runs without asking, in the sandbox; destructive commands still ask"}


class Worker:
    """The main thread's queue of jobs: the connection thread submits, the main thread runs them in order."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None] = queue.Queue()

    def submit(self, job: Callable[[], Any]) -> asyncio.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.jobs.put((job, future))
        return asyncio.wrap_future(future)

    def stop(self) -> None:
        self.jobs.put(None)

    def serve(self) -> None:
        while (item := self.jobs.get()) is not None:
            job, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as exc:  # a stray KeyboardInterrupt too: the editor is answered, the server goes on
                future.set_exception(exc if isinstance(exc, Exception) else RequestError(-32603, "interrupted"))


@dataclass
class Live:
    """A session this connection holds open."""

    agent: Any
    display: AcpDisplay
    settings: Any
    lock: threading.Lock = field(default_factory=threading.Lock)  # running/cancelled, against the cancel
    queued: int = 0  # prompts submitted and not yet finished
    unfinished: bool = False  # the last run was cut short: an empty prompt lets it continue, as in the chat
    running: bool = False
    cancelled: bool = False  # a session/cancel for the prompt running or queued
    signalled: bool = False  # the interrupt was sent
    closed: bool = False  # session/close ended it: a prompt that was already on its way is refused


def _failed(message: str, code: int = -32602) -> RequestError:
    """A JSON-RPC error whose message is the whole explanation (what failed, why, what to do)."""
    return RequestError(code, printable(message))


class AbhedAgent:
    """The ACP agent side: each method hands its work to the main thread and answers with its result."""

    def __init__(self, flags: dict[str, Any], worker: Worker) -> None:
        self.flags, self.worker = flags, worker
        self.conn: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.live: dict[str, Live] = {}
        self.held: dict[str, ExitStack] = {}  # each session's lock, sandbox, model client: closed in the main thread

    def on_connect(self, conn: Any) -> None:
        self.conn = conn
        self.loop = asyncio.get_running_loop()  # the SDK connects inside the connection's loop

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
                         **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(image=False, audio=False, embedded_context=True),
                session_capabilities=SessionCapabilities(resume=SessionResumeCapabilities(),
                                                         list=SessionListCapabilities(),
                                                         close=SessionCloseCapabilities())),
            agent_info=Implementation(name="abhed", title="Abhed", version=__version__),
            auth_methods=[])

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse:
        """Abhed offers no authentication method (its model server and settings are the operator's);
        a client that sends one anyway (an adapter copied from another agent's) is let through."""
        return AuthenticateResponse()

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> NewSessionResponse:
        live = await self.worker.submit(lambda: self._open(cwd, None, mcp_servers))
        return NewSessionResponse(session_id=live.agent.ctx.session.id, modes=modes(live))

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any
                           ) -> LoadSessionResponse:
        live = await self.worker.submit(lambda: _told(self._replay(self._open(cwd, session_id, mcp_servers))))
        return LoadSessionResponse(modes=modes(live))

    async def resume_session(self, session_id: str, cwd: str, mcp_servers: Any = None, **kwargs: Any
                             ) -> ResumeSessionResponse:
        live = await self.worker.submit(lambda: _told(self._open(cwd, session_id, mcp_servers)))
        return ResumeSessionResponse(modes=modes(live))

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
                            ) -> ListSessionsResponse:
        return await self.worker.submit(lambda: self._listed(cwd, cursor))

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse:
        live = self._session(session_id)
        await self.worker.submit(lambda: set_mode(live, mode_id))
        return SetSessionModeResponse()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        live = self._session(session_id)
        text = prompt_text(prompt)
        with live.lock:
            live.queued += 1
        try:
            reason = await self.worker.submit(lambda: self._turn(live, text))
        finally:
            with live.lock:
                live.queued -= 1
                if not live.queued:
                    live.cancelled = False
        spent_in, spent_out = live.display.spent
        return PromptResponse(stop_reason=reason, usage=Usage(input_tokens=spent_in, output_tokens=spent_out,
                                                              total_tokens=spent_in + spent_out))

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        live = self._session(session_id)
        interrupt(live)  # a turn still running ends as by Ctrl-C first
        await self.worker.submit(lambda: self._close(session_id))
        return CloseSessionResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        live = self.live.get(session_id)
        if live is not None:
            interrupt(live)

    def _session(self, session_id: str) -> Live:
        live = self.live.get(session_id)
        if live is None:
            raise _failed(f"No session {session_id!r} is open on this connection: create one with session/new, or "
                          "open a recorded one with session/load.")
        return live

    # -- the main thread's jobs ---------------------------------------------------------------------------

    def _open(self, cwd: str, session_id: str | None, mcp_servers: Any) -> Live:
        """A session as `abhed chat` opens it, in the editor's cwd (a recorded one in its own workspace)."""
        if session_id is not None and session_id in self.live:
            return self.live[session_id]
        if not os.path.isabs(cwd):
            raise _failed(f"cwd {cwd!r} is not an absolute path: ACP gives the project's directory as one.")
        if mcp_servers:
            logging.warning("the editor's MCP servers are not used: Abhed runs only those in the operator's config "
                            "(mcp.servers)")
        start = Path(cwd)
        flags = {**self.flags, "workspace": launch.project_root(start)}
        try:
            settings = settings_of(flags)
            workspace = launch.locate(settings, flags["workspace"], session_id)
            if session_id is not None:
                flags = launch.remembered(flags, launch.stored_options(settings, session_id))
                settings = settings_of(flags)
        except launch.LaunchError as exc:
            raise _failed(str(exc)) from None
        assert self.loop is not None and self.conn is not None  # set by on_connect, before any frame is read
        display = AcpDisplay(Link(self.loop, self.conn))
        held = ExitStack()
        try:
            model = self._model(settings, display, launch.sticky_endpoint(settings, session_id))
            held.callback(model.client.close)
            agent, unfinished = held.enter_context(launch.agent_in_session(
                settings, workspace, session_id, model, display, ask_human=display.ask, options=flags, cwd=start))
        except launch.LaunchError as exc:  # the workspace's own config, a session another process holds, ...
            held.close()
            raise _failed(str(exc)) from None
        except BaseException:
            held.close()
            raise
        self.held[agent.ctx.session.id] = held
        display.attach(agent.gate, agent.ctx)
        live = Live(agent, display, settings, unfinished=unfinished)
        display.interrupted = lambda: due(live)
        display.link.session_id = agent.ctx.session.id
        self.live[agent.ctx.session.id] = live
        logging.warning("session %s; %s; mode %s", agent.ctx.session.id, model.describe(), agent.gate.effective().mode)
        held.callback(_ended, agent)
        return live

    @staticmethod
    def _model(settings: Any, display: AcpDisplay, prefer: str | None) -> Any:
        from abhed.model.errors import ModelError
        from abhed.model.profiles import ProfileError
        try:
            return launch.open_model(settings, display, prefer)  # a loaded session's own server first
        except (ModelError, ProfileError) as exc:  # the server's own words may be in it: printable
            raise _failed(str(exc), -32603) from None

    def _listed(self, cwd: str | None, cursor: str | None) -> ListSessionsResponse:
        """`abhed sessions list` for the editor's history: the agent sessions of the project the editor
        has open (all of them without a cwd), newest first, LIST_PAGE at a time."""
        from abhed.session.listing import listing
        from abhed.session.store import SessionStore
        try:
            settings = settings_of({**self.flags, "workspace": None})
        except launch.LaunchError as exc:
            raise _failed(str(exc)) from None
        workspace = str(launch.project_root(Path(cwd))) if cwd else None
        rows = [row for row in listing(SessionStore(settings.home), show_all=False).rows
                if row["origin"] == "agent" and workspace in (None, row["workspace"])]
        start = int(cursor) if cursor and cursor.isdigit() else 0
        page = rows[start:start + LIST_PAGE]
        return ListSessionsResponse(
            sessions=[SessionInfo(session_id=row["id"], cwd=row["workspace"], updated_at=row["last_used"],
                                  title=printable(" ".join(row["first_prompt"].split()))[:80] or None)
                      for row in page],
            next_cursor=str(start + LIST_PAGE) if start + LIST_PAGE < len(rows) else None)

    def _replay(self, live: Live) -> Live:
        """The recorded conversation as the editor shows a live one: prompts, replies, tool calls
        with their results, then the plan."""
        from abhed.session.events import ActionEvent, MessageEvent, ObservationEvent
        link, calls = live.display.link, {}
        for event in live.agent.ctx.session.log.stream([]):
            if event.agent_id != "main":
                continue
            if isinstance(event, MessageEvent) and event.content.strip():
                if event.role == "user" and event.origin == "user":
                    link.update(helpers.update_user_message_text(event.content))
                elif event.role == "assistant":
                    link.update(helpers.update_agent_message_text(event.content))
            elif isinstance(event, ActionEvent):
                calls[event.id] = event.tool_call_id or event.id
                link.update(helpers.start_tool_call(calls[event.id], event.tool, kind=kind_of(event.tool),
                                                    status="in_progress", raw_input=event.input))
            elif isinstance(event, ObservationEvent) and event.action_id in calls:
                link.update(helpers.update_tool_call(
                    calls[event.action_id], status="failed" if event.is_error else "completed",
                    content=[helpers.tool_content(helpers.text_block(shown_text(event.content)))]))
        state = live.agent.ctx.session.state
        entries = plan_entries(state.plan, state.todos)
        if entries:
            link.update(helpers.update_plan(entries))
        return live

    def _turn(self, live: Live, text: str) -> str:
        """One turn on the editor's prompt, as the chat runs one; the ACP stop reason."""
        if live.closed:
            raise _failed(f"Session {live.agent.ctx.session.id} was closed: open it again with session/load.")
        if not text.strip() and not live.unfinished:
            raise _failed("The prompt is empty: say what to do (an empty prompt only continues a run that was cut "
                          "short).")
        with live.lock:
            if live.cancelled:  # cancelled while it waited for an earlier job
                return "cancelled"
            live.running, live.signalled = True, False
        agent = live.agent
        agent.budget = launch.budget(live.settings)  # the budgets are per prompt, as in the chat
        live.unfinished, live.display.spent = False, [0, 0]
        try:
            outcome = agent.run(text if text.strip() else None)
        except KeyboardInterrupt:  # the interrupt came as the run was ending: it has ended anyway
            return "cancelled"
        finally:
            with live.lock:
                live.running = False
        live.unfinished = outcome.status != "done"  # as a restore would find it: an empty prompt goes on
        if outcome.status not in ("done", "interrupted"):
            said = "\n".join(part for part in (f"abhed: {outcome.detail}", outcome.answer) if part)
            live.display.link.update(helpers.update_agent_message_text(f"\n\n{printable(said)}"))
        return STOP_REASONS[outcome.status]

    def close(self) -> None:
        for session_id in list(self.held):
            self._close(session_id)

    def _close(self, session_id: str) -> None:
        live = self.live.pop(session_id, None)
        if live is not None:
            live.closed = True
        held = self.held.pop(session_id, None)
        if held is not None:
            held.close()


def _told(live: Live) -> Live:
    """A session opened again is told, after its history, when its last run was cut short."""
    if live.unfinished:
        live.display.notice("The last run of this session was cut short: send an empty prompt to let it continue.")
    return live


def _ended(agent: Any) -> None:
    """The chat's last words on a session, on stderr: its log's head, to keep elsewhere."""
    from abhed.session.events import head_token
    session = agent.ctx.session
    logging.warning("session %s ended; head %s (`abhed sessions verify %s --head %s` checks the log against it)",
                    session.id, head_token(session.log.head()), session.id, head_token(session.log.head()))


def modes(live: Live) -> SessionModeState:
    """The editor's mode picker: the modes this session may switch to (a site policy may permit fewer)."""
    gate = live.agent.gate
    return SessionModeState(current_mode_id=gate.effective().mode,
                            available_modes=[SessionMode(id=mode, name=mode, description=words)
                                             for mode, words in MODE_WORDS.items() if gate.permits_mode(mode)])


def set_mode(live: Live, mode: str) -> None:
    """session/set_mode: the chat's /mode (logged, kept for a resume)."""
    from abhed.session.storefail import StoreError
    try:
        live.agent.set_mode(mode)
    except ValueError as exc:
        raise _failed(str(exc)) from None
    except StoreError as exc:
        raise _failed(f"Not recorded: {exc.message}. The mode was not changed.", -32603) from None


def due(live: Live) -> bool:
    """Whether the main thread, where a display call finds itself, should stop the turn now: a cancel
    came that no signal has carried yet (it came before the loop could take one)."""
    with live.lock:
        if live.cancelled and live.running and not live.signalled and live.agent.stoppable \
                and threading.current_thread() is threading.main_thread():
            live.signalled = True
            return True
    return False


def interrupt(live: Live) -> None:
    """session/cancel: Ctrl-C on the session's turn (a SIGINT at the main thread, where the loop
    takes it as the user's interrupt), or on the prompt still waiting for its turn."""
    with live.lock:
        if not (live.running or live.queued):
            return
        live.cancelled = True
        if live.running and not live.signalled and live.agent.stoppable:
            live.signalled = True
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)


def prompt_text(blocks: list[Any]) -> str:
    """The editor's prompt as the model's text: text as is, a linked file by its path (the model
    reads it with its tools, through the same checks), an embedded text resource quoted whole."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            parts.append(f"[file: {_path_of(block.uri)}]")
        elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(block.resource, TextResourceContents):
            parts.append(f"[contents of {_path_of(block.resource.uri)}:]\n{block.resource.text}\n[end of contents]")
        else:
            kind = getattr(block, "type", type(block).__name__)
            raise _failed(f"Abhed takes text, file links and embedded text in a prompt, not {kind} content: "
                          "attach an image as a file link, or name its path in the text.")
    return "\n".join(parts)


def _path_of(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def serve(flags: dict[str, Any]) -> int:
    """Speak ACP on stdin/stdout until the editor closes them: 0 then, 2 when they cannot carry it."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a cancel is a SIGINT, even if the editor ignored it
    proto_in, proto_out = take_stdio()
    log_to_stderr()
    worker = Worker()
    agent = AbhedAgent(flags, worker)
    failed: list[str] = []
    thread = threading.Thread(target=_connection, args=(agent, worker, proto_in, proto_out, failed),
                              name="abhed-acp", daemon=True)
    thread.start()
    try:
        worker.serve()
    except KeyboardInterrupt:  # a SIGINT from outside while no turn ran
        pass
    finally:
        agent.close()
    return 2 if failed else 0


def _connection(agent: AbhedAgent, worker: Worker, proto_in: int, proto_out: int, failed: list[str]) -> None:
    async def run() -> None:
        try:
            frames = await open_frames(proto_in, proto_out)
        except (OSError, ValueError) as exc:  # a regular file, say: asyncio reads only pipes, sockets, terminals
            failed.append(str(exc))
            logging.warning("stdin and stdout must be pipes, as an editor starts `abhed acp` (%s); nothing was "
                            "done", exc)
            worker.stop()
            return
        # The SDK's Agent protocol lists every method; one not defined here is answered "method not found".
        conn = AgentSideConnection(agent, frames, listening=False,  # type: ignore[arg-type]
                                   use_unstable_protocol=True)
        try:
            await conn.listen()
            for live in list(agent.live.values()):  # the editor is gone: its turns end as by Ctrl-C
                interrupt(live)
            await frames.drained(DRAIN_S)  # what it asked for before it went is answered
        finally:
            worker.stop()
            await conn.close()
    try:
        asyncio.run(run())
    except Exception as exc:
        logging.warning("the connection ended: %s", exc)
        worker.stop()
