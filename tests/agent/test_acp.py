"""`abhed acp` end to end: the ACP SDK's client side spawns `abhed acp` as an editor would, against
the replay server (a scripted model over real HTTP/SSE), and judges by the files on disk, the
permission requests it was sent and the session's log."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    RequestPermissionResponse,
)

from abhed.model.replay import ReplayServer, Turn
from abhed.session.events import MessageEvent, ModeEvent, ObservationEvent, RunEvent
from abhed.session.store import SessionStore
from agent_helpers import REPO


class Editor:
    """The client side: what the agent sent, and scripted answers to its permission requests
    (option kinds, in order; "cancelled" answers the request as cancelled)."""

    def __init__(self, answers: list[str] | None = None) -> None:
        self.answers = list(answers or [])
        self.asked: list[Any] = []  # (tool_call, options)
        self.updates: list[Any] = []
        self.seen = asyncio.Event()
        self.released = asyncio.Event()
        self.watch: Any = None  # a predicate on updates that sets `seen`

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kw: Any) -> Any:
        self.asked.append((tool_call, options))
        kind = self.answers.pop(0)
        if kind == "hold":  # the human has not answered yet: the test cancels the turn meanwhile
            self.seen.set()
            await self.released.wait()
            kind = "cancelled"
        chosen = next((o for o in options if o.kind == kind), None)
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates.append(update)
        if self.watch is not None and self.watch(update):
            self.seen.set()

    def on_connect(self, conn: Any) -> None:
        pass

    def kinds(self, name: str) -> list[Any]:
        return [u for u in self.updates if u.session_update == name]

    def said(self) -> str:
        return "".join(u.content.text for u in self.kinds("agent_message_chunk"))


def environment(home: Path) -> dict[str, str]:
    return {**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": "", "PYTHONPATH": str(REPO)}


async def session(editor: Editor, home: Path, ws: Path, url: str, *flags: str, work: Any) -> tuple[Any, bytes]:
    """Spawn `abhed acp`, initialize, and run `work(conn)`; its result and abhed's stderr."""
    async with spawn_agent_process(editor, sys.executable, "-m", "abhed", "acp", "--endpoint", url, *flags,
                                   env=environment(home), cwd=ws, transport_kwargs={"stderr": subprocess.PIPE}
                                   ) as (conn, process):
        ready = await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities())
        assert ready.protocol_version == PROTOCOL_VERSION and ready.agent_capabilities.load_session
        try:
            result = await asyncio.wait_for(work(conn), 60)
        except BaseException:
            process.stdin.close()
            sys.stderr.write((await asyncio.wait_for(process.stderr.read(), 30)).decode())
            raise
        process.stdin.close()
        err = await asyncio.wait_for(process.stderr.read(), 30)
        await asyncio.wait_for(process.wait(), 30)
    return result, err


@pytest.mark.slow  # spawns abhed and its sandbox: a few seconds on a busy machine
def test_a_turn_with_one_edit_approved_and_one_declined(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    (ws / "b.py").write_text("y = 1\n")
    turns = [Turn(calls=[("read", {"path": str(ws / "a.py")}), ("read", {"path": str(ws / "b.py")})]),
             Turn(text="Editing.", calls=[("edit", {"path": str(ws / "a.py"), "old_string": "x = 1",
                                                    "new_string": "x = 2"})]),
             Turn(calls=[("edit", {"path": str(ws / "b.py"), "old_string": "y = 1", "new_string": "y = 2"})]),
             Turn(text="a.py is changed; b.py was declined.")]
    editor = Editor(["allow_once", "reject_once"])

    async def work(conn: Any) -> Any:
        new = await conn.new_session(cwd=str(ws), mcp_servers=[])
        done = await conn.prompt(session_id=new.session_id, prompt=[text_block("set x and y to 2")])
        assert done.usage.output_tokens > 0 and done.usage.total_tokens > done.usage.input_tokens > 0
        return new.session_id, done.stop_reason

    with ReplayServer(turns) as server:
        (session_id, stop), err = asyncio.run(session(editor, home, ws, server.url, "--mode", "ask", work=work))
    assert stop == "end_turn", err.decode()
    assert (ws / "a.py").read_text() == "x = 2\n" and (ws / "b.py").read_text() == "y = 1\n"
    # Two questions, each with the file's diff as the tool computes it and the chat's answers.
    assert len(editor.asked) == 2
    for (call, options), (name, old, new) in zip(editor.asked, [("a.py", "x = 1\n", "x = 2\n"),
                                                                 ("b.py", "y = 1\n", "y = 2\n")]):
        diff = next(c for c in call.content if c.type == "diff")
        assert (diff.path, diff.old_text, diff.new_text) == (str(ws / name), old, new)
        kinds = [o.kind for o in options]
        assert kinds[0] == "allow_once" and "reject_once" in kinds and "allow_always" in kinds
    # The tool calls' progress: started, then completed with the diff, or failed as declined.
    ends = {u.tool_call_id: u for u in editor.kinds("tool_call_update") if u.status in ("completed", "failed")}
    starts = editor.kinds("tool_call")
    assert [s.kind for s in starts] == ["read", "read", "edit", "edit"]
    starts = starts[2:]
    first, second = (ends[s.tool_call_id] for s in starts)
    assert first.status == "completed" and first.content[0].type == "diff" and first.content[0].new_text == "x = 2\n"
    undo = "checkpoint 1 (`abhed undo --to 1` takes this call and the later ones back)"
    assert undo in first.content[-1].content.text
    assert second.status == "failed" and "declined" in second.content[-1].content.text
    assert editor.said() == "Editing.a.py is changed; b.py was declined."
    # The model read the human's decline, as in the chat; the session's log holds the turn.
    assert "A human at the terminal declined this call" in server.requests[3]["messages"][-1]["content"]
    events = SessionStore(home).open(session_id).log.load().events
    observed = [e for e in events if isinstance(e, ObservationEvent)]
    assert [(e.tool, e.is_error) for e in observed] == [("read", False), ("read", False), ("edit", False),
                                                        ("edit", True)]
    assert [e.status for e in events if isinstance(e, RunEvent)] == ["started", "done"]
    assert b"Traceback" not in err


@pytest.mark.slow  # spawns abhed and its sandbox: a few seconds on a busy machine
def sleeping(token: str) -> list[str]:
    """The processes on the host whose command line holds `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if token in line and "pytest" not in line:
            found.append(line)
    return found


def test_cancel_kills_the_running_command_and_records_the_interrupt(ws, home):
    token = f"sleep 3{os.getpid() % 1000}.25"  # a command line no other test runs
    turns = [Turn(calls=[("bash", {"command": f"{token}; touch {ws}/late", "description": "wait"})]),
             Turn(text="unused")]
    editor = Editor()
    editor.watch = lambda u: u.session_update == "tool_call" and u.kind == "execute"

    async def running() -> None:
        while not sleeping(token):
            await asyncio.sleep(0.05)

    async def work(conn: Any) -> Any:
        new = await conn.new_session(cwd=str(ws), mcp_servers=[])
        turn = asyncio.ensure_future(conn.prompt(session_id=new.session_id, prompt=[text_block("wait")]))
        await asyncio.wait_for(editor.seen.wait(), 30)
        await asyncio.wait_for(running(), 30)  # the command runs in the sandbox
        await conn.cancel(session_id=new.session_id)
        done = await turn
        return new.session_id, done.stop_reason, sleeping(token)

    with ReplayServer(turns) as server:
        (session_id, stop, left), err = asyncio.run(session(editor, home, ws, server.url, "--mode", "auto",
                                                            work=work))
    assert stop == "cancelled", err.decode()
    assert left == []  # killed as the turn ended, not left to finish
    assert len(server.requests) == 1  # nothing more was asked of the model
    events = SessionStore(home).open(session_id).log.load().events
    assert [e.status for e in events if isinstance(e, RunEvent)] == ["started", "interrupted"]
    assert any(isinstance(e, MessageEvent) and e.origin == "interrupt" for e in events)
    assert not (ws / "late").exists()


@pytest.mark.slow  # spawns abhed: a few seconds on a busy machine
def test_cancel_while_the_editor_asks_ends_the_turn_and_runs_nothing(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    turns = [Turn(calls=[("read", {"path": str(ws / "a.py")})]),
             Turn(calls=[("edit", {"path": str(ws / "a.py"), "old_string": "x = 1", "new_string": "x = 2"})]),
             Turn(text="unused")]
    editor = Editor(["hold"])

    async def work(conn: Any) -> Any:
        new = await conn.new_session(cwd=str(ws), mcp_servers=[])
        turn = asyncio.ensure_future(conn.prompt(session_id=new.session_id, prompt=[text_block("set x")]))
        await asyncio.wait_for(editor.seen.wait(), 30)
        await conn.cancel(session_id=new.session_id)
        editor.released.set()  # ACP: the client answers its open requests "cancelled" after a cancel
        done = await turn
        await conn.close_session(session_id=new.session_id)  # the session's lock is released for others
        with SessionStore(home).use(new.session_id, ws, wait_s=0):
            pass
        await conn.load_session(cwd=str(ws), session_id=new.session_id, mcp_servers=[])
        assert "cut short: send an empty prompt" in editor.updates[-1].content.text
        again = await conn.prompt(session_id=new.session_id, prompt=[])  # the chat's Enter: carry on
        return new.session_id, done.stop_reason, again.stop_reason

    with ReplayServer(turns) as server:
        (session_id, stop, again), err = asyncio.run(session(editor, home, ws, server.url, "--mode", "ask",
                                                             work=work))
    assert stop == "cancelled" and again == "end_turn", err.decode()
    assert (ws / "a.py").read_text() == "x = 1\n" and len(server.requests) == 3
    events = SessionStore(home).open(session_id).log.load().events
    assert [e.status for e in events if isinstance(e, RunEvent)] == ["started", "interrupted", "started", "done"]
    assert [e.origin for e in events if isinstance(e, MessageEvent) and e.role == "user"] == ["user", "interrupt",
                                                                                           "resume"]


@pytest.mark.slow  # spawns abhed twice: a few seconds on a busy machine
def test_load_replays_a_recorded_session_and_continues_it(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    first = [Turn(text="Reading.", calls=[("read", {"path": str(ws / "a.py")})]), Turn(text="x is 1.")]
    with ReplayServer(first) as server:
        made = subprocess.run([sys.executable, "-m", "abhed", "run", "what is x?", "--endpoint", server.url,
                               "--json"], env=environment(home), cwd=ws, capture_output=True, text=True, timeout=120)
    session_id = json.loads(made.stdout)["session"]
    editor = Editor()

    async def work(conn: Any) -> Any:
        from acp import RequestError
        listed = await conn.list_sessions(cwd=str(ws))
        assert [(s.session_id, s.cwd, s.title) for s in listed.sessions] == [(session_id, str(ws), "what is x?")]
        assert (await conn.list_sessions(cwd=str(ws.parent / "elsewhere"))).sessions == []
        loaded = await conn.load_session(cwd=str(ws), session_id=session_id, mcp_servers=[])
        assert loaded.modes.current_mode_id == "ask"
        assert [m.id for m in loaded.modes.available_modes] == ["ask", "plan", "accept-edits", "auto"]
        replayed = list(editor.updates)
        await conn.set_session_mode(session_id=session_id, mode_id="plan")  # the chat's /mode
        with pytest.raises(RequestError) as wrong:
            await conn.set_session_mode(session_id=session_id, mode_id="yolo")
        assert "Unknown approval mode 'yolo'" in str(wrong.value)
        done = await conn.prompt(session_id=session_id, prompt=[text_block("and now?")])
        return replayed, done.stop_reason

    todo = {"items": [{"content": "Check x", "status": "in_progress"}, {"content": "Report it"}]}
    with ReplayServer([Turn(calls=[("todo", todo)]), Turn(text="Still 1.")]) as server:
        (replayed, stop), err = asyncio.run(session(editor, home, ws, server.url, work=work))
    assert stop == "end_turn", err.decode()
    kinds = [u.session_update for u in replayed]
    assert kinds == ["user_message_chunk", "agent_message_chunk", "tool_call", "tool_call_update",
                     "agent_message_chunk"]
    assert replayed[0].content.text == "what is x?" and replayed[4].content.text == "x is 1."
    assert replayed[3].status == "completed"
    plans = editor.kinds("plan")  # the todo list, as the editor's plan
    assert [(e.content, e.status) for e in plans[-1].entries] == [("Check x", "in_progress"), ("Report it", "pending")]
    said = json.dumps(server.requests[0]["messages"])
    assert "what is x?" in said and "x is 1." in said and "and now?" in said  # the same conversation, continued
    events = SessionStore(home).open(session_id).log.load().events
    assert [r.status for r in events if isinstance(r, RunEvent)] == ["started", "done", "started", "done"]
    assert [(e.previous, e.mode) for e in events if isinstance(e, ModeEvent)] == [("ask", "plan")]
    assert SessionStore(home).open(session_id).state.options["mode"] == "plan"  # a resume starts in it


@pytest.mark.slow  # spawns abhed: a few seconds on a busy machine
def test_malformed_frames_get_json_rpc_errors_and_stdout_holds_only_frames(ws, home):
    lines = [b"this is not json\n", b"[1, 2]\n", b'{"jsonrpc": "2.0", "id": [1], "method": "initialize"}\n',
             b'{"jsonrpc": "2.0", "id": 7, "method": 5}\n',
             b'{"jsonrpc": "2.0", "id": 8, "method": "session/prompt", "params": {"sessionId": "nope"}}\n',
             b'{"jsonrpc": "2.0", "id": 9, "method": "no/such"}\n',
             b'{"jsonrpc": "2.0", "id": 10, "method": "session/prompt", "params": {"sessionId": "nope", '
             b'"prompt": [{"type": "text", "text": "hi"}]}}\n',
             b'{"jsonrpc": "2.0", "id": 11, "method": "initialize", "params": {"protocolVersion": 1}}\n',
             # work the main thread does, asked for just before the end of input: still answered
             b'{"jsonrpc": "2.0", "id": 12, "method": "session/list", "params": {}}\n',
             b'{"jsonrpc": "2.0", "id": 13, "method": "session/new", "params": {"cwd": "%s", "mcpServers": []}}\n'
             % str(ws).encode()]
    proc = subprocess.run([sys.executable, "-m", "abhed", "acp", "--endpoint", "http://127.0.0.1:9/v1"],
                          input=b"".join(lines), env=environment(home), cwd=ws, capture_output=True, timeout=60)
    assert proc.returncode == 0
    frames = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    by_id = {f.get("id"): f for f in frames}
    codes = [f["error"]["code"] for f in frames if f.get("id") is None]
    assert codes == [-32700, -32600, -32600]
    assert by_id[7]["error"]["code"] == -32600 and by_id[8]["error"]["code"] == -32602
    assert by_id[9]["error"]["code"] == -32601
    assert "No session 'nope' is open" in by_id[10]["error"]["message"]
    assert by_id[11]["result"]["protocolVersion"] == PROTOCOL_VERSION
    assert by_id[12]["result"] == {"sessions": []}
    assert by_id[13]["error"]["code"] == -32603  # the model server is down: its message, whole
    assert by_id[13]["error"]["message"].startswith("Cannot connect to the model server at http://127.0.0.1:9/v1")
    assert b"Traceback" not in proc.stderr


@pytest.mark.slow  # spawns abhed: a few seconds on a busy machine
def test_sessions_the_chat_would_refuse_are_refused_with_the_reason(ws, home):
    editor = Editor()

    async def work(conn: Any) -> Any:
        from acp import RequestError
        with pytest.raises(RequestError) as caught:
            await conn.new_session(cwd="relative/dir", mcp_servers=[])
        with pytest.raises(RequestError) as missing:
            await conn.load_session(cwd=str(ws), session_id="no-such-session", mcp_servers=[])
        with pytest.raises(RequestError) as traversal:
            await conn.load_session(cwd=str(ws), session_id="../../etc", mcp_servers=[])
        with pytest.raises(RequestError) as store_inside:  # the session store inside the workspace
            await conn.new_session(cwd=str(home.parent), mcp_servers=[])
        new = await conn.new_session(cwd=str(ws), mcp_servers=[])
        with pytest.raises(RequestError) as empty:
            await conn.prompt(session_id=new.session_id, prompt=[text_block("  ")])
        await conn.close_session(session_id=new.session_id)
        with pytest.raises(RequestError) as closed:
            await conn.prompt(session_id=new.session_id, prompt=[text_block("hi")])
        return [str(e.value) for e in (caught, missing, traversal, store_inside, empty, closed)]

    with ReplayServer([]) as server:
        (relative, missing, traversal, inside, empty, closed), err = asyncio.run(session(editor, home, ws, server.url,
                                                                                         work=work))
    assert "is not an absolute path" in relative
    assert "No session 'no-such-session'" in missing and "abhed sessions list" in missing
    assert "Invalid session id '../../etc'" in traversal
    assert "session store (ABHED_HOME)" in inside and "lies inside" in inside
    assert "The prompt is empty: say what to do" in empty
    assert "is open on this connection" in closed and "session/load" in closed
    assert len(SessionStore(home).ids()) == 1 and server.requests == []  # the one session; the model never asked


@pytest.mark.slow  # spawns abhed: a few seconds on a busy machine
def test_stdin_that_is_not_a_pipe_is_refused_with_the_reason(ws, home, tmp_path):
    frames = tmp_path / "frames.jsonl"
    frames.write_text('{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}\n')
    with frames.open("rb") as given:
        proc = subprocess.run([sys.executable, "-m", "abhed", "acp"], stdin=given, env=environment(home), cwd=ws,
                              capture_output=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == b""
    assert b"stdin and stdout must be pipes, as an editor starts `abhed acp`" in proc.stderr


@pytest.mark.slow  # spawns abhed and a subagent: a few seconds on a busy machine
def test_a_subagents_calls_and_questions_reach_the_editor_labelled(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    prompt = f"In the file {ws}/a.py, change the line `x = 1` to `x = 2`, then say in one line what you changed."
    turns = [Turn(calls=[("task", {"prompt": prompt, "description": "Set x"})]),
             Turn(calls=[("read", {"path": str(ws / "a.py")})]),
             Turn(calls=[("edit", {"path": str(ws / "a.py"), "old_string": "x = 1", "new_string": "x = 2"})]),
             Turn(text="Changed x = 1 to x = 2."),
             Turn(text="The subagent set x to 2.")]
    editor = Editor(["allow_once"])

    async def work(conn: Any) -> Any:
        new = await conn.new_session(cwd=str(ws), mcp_servers=[])
        done = await conn.prompt(session_id=new.session_id, prompt=[text_block("set x")])
        return done.stop_reason

    with ReplayServer(turns) as server:
        stop, err = asyncio.run(session(editor, home, ws, server.url, "--mode", "ask", work=work))
    assert stop == "end_turn", err.decode()
    assert (ws / "a.py").read_text() == "x = 2\n"
    starts = {u.tool_call_id: u for u in editor.kinds("tool_call")}
    [(asked, _)] = editor.asked
    assert "/" in asked.tool_call_id and starts[asked.tool_call_id].title.startswith("[")  # the subagent's, labelled
    assert next(c for c in asked.content if c.type == "diff").new_text == "x = 2\n"
    assert [u.kind for u in starts.values()] == ["other", "read", "edit"]  # task, then the subagent's two
    assert editor.said() == "The subagent set x to 2."  # a subagent's text stays its own, as in the chat
