"""Peer features of issue 36 used as a person would, in a real terminal (tmux) against the scripted
model: nested and user-level AGENTS.md, /init, Esc, /model, /export. Judged by the screen, by what
the model was sent and by what changed on the host."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from abhed.model.replay import ReplayServer, Turn
from abhed.session.events import RunEvent
from abhed.session.store import SessionStore
from tmux_chat import TmuxChat
from test_chat_tmux import processes_running, run

pytestmark = pytest.mark.slow


@pytest.fixture
def term(term, tmp_path):  # type: ignore[no-untyped-def]
    """The shared fixture's chats, with a user-level config directory of this test's own."""
    def start(*args: str, **kw) -> TmuxChat:  # type: ignore[no-untyped-def]
        kw["env"] = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), **kw.get("env", {})}
        return term(*args, **kw)
    return start


def user_texts(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user" and isinstance(m["content"], str)]


def test_a_subdirectorys_agents_md_joins_once_when_the_agent_first_works_there_and_the_users_own_always(
        ws, term, tmp_path):
    (tmp_path / "xdg" / "abhed").mkdir(parents=True)
    (tmp_path / "xdg" / "abhed" / "AGENTS.md").write_text("Sign every answer with -- your agent.\n")
    (ws / "AGENTS.md").write_text("Root rule: run make check.\n")
    (ws / "lib" / "core").mkdir(parents=True)
    (ws / "lib" / "AGENTS.md").write_text("In lib/: no new dependencies.\n")
    (ws / "lib" / "core" / "x.py").write_text("x = 1\n")
    (ws / "docs").mkdir()
    (ws / "docs" / "AGENTS.md").write_text("Docs rule: never loaded, nobody goes there.\n")
    read = ("read", {"path": str(ws / "lib" / "core" / "x.py")})
    turns = [Turn(calls=[read]), Turn(calls=[("grep", {"pattern": "x", "path": str(ws / "lib")})]),
             Turn(text="Done -- your agent.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("look at x")
        screen = chat.wait_for("Done -- your agent.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    shown = " ".join(screen.split())  # the line wraps at the pane's width
    assert shown.count(f"loaded the notes of {ws}/lib/: {ws}/lib/AGENTS.md") == 1
    system = server.requests[0]["messages"][0]["content"]
    assert "Sign every answer with -- your agent." in system and "Root rule: run make check." in system
    assert "no new dependencies" not in system
    after_read = user_texts(server.requests[1])
    assert sum("In lib/: no new dependencies." in text for text in after_read) == 1
    last = user_texts(server.requests[2])  # the grep in lib/ did not bring it twice
    assert sum("In lib/: no new dependencies." in text for text in last) == 1
    assert not any("Docs rule" in m["content"] for m in server.requests[2]["messages"] if isinstance(m["content"], str))


def test_init_asks_the_model_to_write_agents_md_through_an_approved_write_and_refuses_when_one_exists(ws, term):
    (ws / "Makefile").write_text("check:\n\tpytest\n")
    write = ("write", {"path": str(ws / "AGENTS.md"), "content": "# Agents\n\nRun `make check`.\n"})
    turns = [Turn(calls=[("read", {"path": str(ws / "Makefile")})]), Turn(calls=[write]),
             Turn(text="Wrote AGENTS.md."), Turn(text="ok")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), "--mode", "ask")
        chat.wait_for("ends the session.")
        chat.type("/init")
        chat.wait_for("Allow? [y/a/p/n/r]")
        assert not (ws / "AGENTS.md").exists()  # nothing before the human said yes
        chat.type("y")
        chat.wait_for("Wrote AGENTS.md.")
        chat.type("/init")
        chat.wait_for("exists already, so /init changed nothing. /init improve asks the model")
        assert len(server.requests) == 3
        chat.type("hello")
        chat.wait_for("ok")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert (ws / "AGENTS.md").read_text() == "# Agents\n\nRun `make check`.\n"
    assert "Survey this repository and write a first AGENTS.md" in user_texts(server.requests[0])[-1]
    assert "Run `make check`." in server.requests[-1]["messages"][0]["content"]  # the next message reads it


def test_esc_stops_a_running_command_and_a_streaming_reply_and_the_next_message_continues(ws, term, home):
    nap = f"30.{uuid.uuid4().int % 10**6}"
    turns = [Turn(calls=[run(f"sleep {nap}")]), Turn(fault="late_start"), Turn(text="Continuing.")]
    with ReplayServer(turns, stall_s=30) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), "--mode", "auto")
        chat.wait_for("ends the session.")
        chat.type("wait")
        deadline = time.monotonic() + 60  # a guard against hanging, not a timing assertion
        while not processes_running(f"sleep {nap}"):
            assert time.monotonic() < deadline, chat.screen()
            time.sleep(0.1)
        chat.keys("Escape")
        chat.wait_for("interrupted by the user")
        assert processes_running(f"sleep {nap}") == []  # the sandboxed command was killed
        chat.wait_prompt()
        chat.type("again")  # the reply starts, then nothing comes: Esc stops the wait for it
        while len(server.requests) < 2:
            assert time.monotonic() < deadline, chat.screen()
            time.sleep(0.1)
        chat.keys("Escape")
        chat.wait_for("interrupted by the user", 2)
        chat.wait_prompt()
        chat.type("go on")
        chat.wait_for("Continuing.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    said = "\n".join(user_texts(server.requests[-1]))  # a rebuilt conversation joins neighbouring user texts
    assert said.count("[Abhed: the user interrupted this turn.]") == 2 and said.endswith("go on")
    tool = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(tool) == 1  # the interrupted call has its result, so the conversation stays well-formed
    (session_id,) = SessionStore(home).ids()
    events = SessionStore(home).open(session_id).log.load().events
    assert [e.status for e in events if isinstance(e, RunEvent) and e.status != "started"] == \
        ["interrupted", "interrupted", "done"]  # the record says so


def test_model_lists_what_the_endpoint_serves_and_switches_for_the_next_message(ws, term):
    turns = [Turn(text="Hello from the second.")]
    with ReplayServer(turns, also_serves=["replay/second"]) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("/model")
        screen = chat.wait_for("switch with /model ID")
        assert "* replay/abhed-demo  (context 32768 tokens)" in screen and "  replay/second" in screen
        chat.type("/model replay/nope")
        chat.wait_for("does not serve 'replay/nope'")
        chat.wait_for("The model in use is still replay/abhed-demo.")
        chat.type("/model replay/second")
        chat.wait_for("now using model replay/second at")
        chat.type("hi")
        chat.wait_for("Hello from the second.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert [r["model"] for r in server.requests] == ["replay/second"]


def test_export_writes_the_session_as_markdown_to_a_new_file_and_never_replaces_one(ws, term):
    turns = [Turn(calls=[run("touch made")]), Turn(text="Made the file.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), "--mode", "ask")
        chat.wait_for("ends the session.")
        chat.type("make a file")
        chat.wait_for("Allow? [y/a/p/n/r]")
        chat.type("y")
        chat.wait_for("Made the file.")
        chat.type("/export notes/session.md")
        chat.wait_for("/export: cannot create")  # notes/ does not exist: said, nothing made
        chat.type("/export")
        chat.wait_for("lines of markdown)")
        chat.type("/export")
        chat.wait_for("exists: the export never replaces a file")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    exported = list(ws.glob("abhed-*.md"))
    assert len(exported) == 1 and not (ws / "notes").exists()
    text = exported[0].read_text()
    for part in ("### User", "make a file", "**bash**", '"command": "touch made"', "approval: allow by human",
                 "### Assistant", "Made the file.", "*run done*"):
        assert part in text, (part, text)
    assert json.dumps(server.requests[0]["model"])  # the model was asked
