"""The pieces subagents stand on: session branches, the shared write lock, labelled and serialised
approval questions, subagent displays, and a resume that keeps subagents' state out of the parent's."""

from __future__ import annotations

import io
import threading

from rich.console import Console

from abhed.agent.loop import Agent, Budget, Limits
from abhed.gate.approval import Answer, Gate, Policy, Verdict
from abhed.agent.display import Display
from abhed.cli.display import Chat, Progress
from abhed.model.replay import ReplayServer, Turn
from abhed.model.wire import ToolCall
from abhed.session.store import SessionStore
from abhed.tools.base import ToolResult
from subagent_helpers import Script, make_agent, task


def test_a_branch_shares_the_log_and_write_lock_but_not_the_state(ws, home):
    session = SessionStore(home).create(ws)
    session.state.cwd = str(ws / "sub")
    session.remember(ws / "a.py", b"x", 1, 1)
    branch = session.branch()
    assert branch.dir == session.dir and branch.writes is session.writes and branch.id == session.id
    assert branch.state.reads == {} and branch.state.cwd == str(ws / "sub") and branch.state.todos == []
    branch.remember(ws / "b.py", b"y", 1, 1)
    branch.state.cwd = str(ws)
    assert str(ws / "b.py") not in session.state.reads and session.state.cwd == str(ws / "sub")
    before = (session.dir / "state.json").read_bytes()
    branch.save()  # a subagent's state is never saved over the session's
    assert (session.dir / "state.json").read_bytes() == before


def test_labelled_gates_say_who_asks_and_ask_one_at_a_time(ws):
    inside, peak, asked = [0], [0], []
    lock = threading.Lock()

    def ask(tool, args, verdict):  # type: ignore[no-untyped-def]
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        asked.append(verdict.reason)
        with lock:
            inside[0] -= 1
        return True

    gate = Gate(Policy.create("ask", [], [], ws), ask_human=ask)
    children = [gate.labelled(f"main.{n}", f"Edit part {n}") for n in range(8)]
    assert all(child.asking is gate.asking for child in children)
    threads = [threading.Thread(target=child.review, args=("write", None)) for child in children for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak[0] == 1 and len(asked) == 40
    assert "[asked by subagent main.3 (Edit part 3)]" in "\n".join(asked)
    assert Gate(Policy.create("ask", [], [], ws)).labelled("main.1", "x").ask_human is None


def test_subagent_lines_in_abhed_run_are_labelled_and_indented():
    out = io.StringIO()
    progress = Progress(out)
    child = progress.subagent("main.2", "Find the config loader")
    grandchild = child.subagent("main.2.1", "a very long label that goes on and on and on beyond forty chars")
    call = ToolCall("c1", "grep", '{"pattern": "load_config"}')
    child.tool_started(call)
    child.tool_finished(call, ToolResult(content="/w/a.py"))
    grandchild.notice("compacted")
    child.text("streamed text is not shown")
    assert out.getvalue().splitlines() == [
        "   [main.2 Find the config loader] -> grep load_config",
        "   [main.2 Find the config loader]    ok: /w/a.py",
        "      [main.2.1 a very long label that goes on and on an...] abhed: compacted",
    ]
    assert isinstance(Display().subagent("main.1", "x"), Display)


def test_subagent_lines_in_chat_are_labelled():
    console = Console(file=io.StringIO(), width=100, color_system=None)
    child = Chat(console).subagent("main.1", "Run the tests")
    call = ToolCall("c1", "bash", '{"command": "make test", "description": "Run the tests"}')
    child.tool_started(call)
    child.tool_finished(call, ToolResult(content="ok", metadata={"exit_code": 0}))
    text = console.file.getvalue()
    assert "  [main.1 Run the tests] bash Run the tests" in text and "[main.1 Run the tests]   ok exit 0" in text


def test_progress_lines_from_many_threads_stay_whole():
    out = io.StringIO()
    progress = Progress(out)
    children = [progress.subagent(f"main.{n}", "x") for n in range(10)]
    threads = [threading.Thread(target=lambda c=c: [c.notice("y" * 200) for _ in range(50)]) for c in children]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(line.endswith("y" * 200) for line in out.getvalue().splitlines())


def test_resume_rebuilds_the_parents_state_without_its_subagents_reads(ws, home):
    (ws / "mine.txt").write_text("parent\n")
    (ws / "theirs.txt").write_text("child\n")
    script = Script({"top task": lambda seen: Turn(calls=[("read", {"path": str(ws / "mine.txt")}),
                                                          task(f"Read {ws}/theirs.txt and report it.", "Read theirs")])
                     if seen.step == 0 else Turn(text="ok"),
                     "theirs.txt": lambda seen: Turn(calls=[("read", {"path": str(ws / "theirs.txt")})])
                     if seen.step == 0 else Turn(text="child")})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        agent.run("top task")
        session = agent.ctx.session
        (session.dir / "state.json").unlink()  # as if the process died before saving it
        fresh = SessionStore(home).create(ws, session.id)
        ctx = agent.ctx.__class__(fresh, agent.ctx.settings, agent.ctx.paths)
        restored, _ = Agent.restore(ctx, agent.model, agent.gate, Budget(Limits()))
    assert set(restored.ctx.session.state.reads) == {str(ws / "mine.txt")}


def test_a_yes_given_after_ctrl_c_stopped_the_subagent_runs_nothing_and_grants_nothing(ws, home):
    """The subagent asks from a worker thread; Ctrl-C (a real SIGINT) reaches the main thread, which
    stops the subagents and waits for them; the human then answers yes to the waiting question."""
    import signal
    import time

    class Notices(Display):
        def __init__(self) -> None:
            self.notices: list[str] = []

        def notice(self, message: str) -> None:
            self.notices.append(message)

    display = Notices()

    def human(tool, args, verdict):  # type: ignore[no-untyped-def]
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # the human presses Ctrl-C...
        deadline = time.monotonic() + 60  # a guard against hanging, not a timing assertion
        while not any("stopping 1 subagent" in n for n in display.notices):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return Answer(True, ("bash(touch late)",))  # ...then answers the question still on the screen: yes

    script = Script({"go": lambda seen: Turn(calls=[task("wait, then touch")]),
                     "wait, then touch": lambda seen: Turn(calls=[("bash", {"command": "touch late",
                                                                             "description": "touch"})])})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server, mode="ask", display=display)
        agent.gate = Gate(Policy.create("ask", [], [], ws), ask_human=human)
        outcome = agent.run("go")
    assert outcome.status == "interrupted"
    assert not (ws / "late").exists() and agent.gate.granted.allow == []
    observations = [e for e in agent.ctx.session.log.load().events
                    if getattr(e, "tool", None) == "bash" and getattr(e, "kind", "") == "observation"]
    assert len(observations) == 1 and observations[0].is_error
    assert "not run, the subagent was stopped (the agent that started this subagent was interrupted)" in \
        observations[0].content
