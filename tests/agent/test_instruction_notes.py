"""The notes for agents (agent/notes.py): the user's own AGENTS.md, the root's, a subdirectory's when
the agent first works there. Judged by what the model was sent, and by the host's files."""

from __future__ import annotations

import os
import stat

from abhed.agent import notes
from abhed.agent.loop import resumed
from abhed.agent.prompt import project_notes
from abhed.model.replay import ReplayServer, Turn
from abhed.session.events import MessageEvent
from agent_helpers import Recorder, make_agent


def user_texts(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "user" and isinstance(m["content"], str))


def test_a_subdirectorys_notes_come_once_after_the_call_that_worked_there_recorded_as_a_notes_event(ws, home):
    (ws / "pkg").mkdir()
    (ws / "pkg" / "AGENTS.md").write_text("pkg: keep the public API stable.\n")
    (ws / "pkg" / "ABHED.md").write_text("pkg: abhed-specific note.\n")
    (ws / "pkg" / "a.py").write_text("a = 1\n")
    read = ("read", {"path": str(ws / "pkg" / "a.py")})
    display = Recorder()
    with ReplayServer([Turn(calls=[read]), Turn(calls=[read]), Turn(text="ok")]) as server:
        agent = make_agent(ws, home, server, display=display)
        agent.run("look")
    assert "pkg: keep the public API stable." not in user_texts(server.requests[0])
    second, third = user_texts(server.requests[1]), user_texts(server.requests[2])
    assert second.count(notes.header(ws / "pkg")) == 1
    assert "## ABHED.md\npkg: abhed-specific note." in second and "## AGENTS.md\npkg: keep the public API stable." in second
    assert third.count(notes.header(ws / "pkg")) == 1  # the second read in pkg/ did not bring them again
    assert display.notices == [f"loaded the notes of {ws}/pkg/: {ws}/pkg/ABHED.md, {ws}/pkg/AGENTS.md"]
    events = [e for e in agent.ctx.session.log.load().events if isinstance(e, MessageEvent) and e.origin == "notes"]
    assert len(events) == 1 and notes.header(ws / "pkg") in events[0].content


def test_a_resumed_conversation_holds_the_notes_so_they_are_not_loaded_twice(ws, home):
    (ws / "pkg").mkdir()
    (ws / "pkg" / "AGENTS.md").write_text("pkg rule\n")
    read = ("read", {"path": str(ws / "pkg" / "AGENTS.md")})
    with ReplayServer([Turn(calls=[read]), Turn(text="ok")]) as server:
        first = make_agent(ws, home, server)
        first.run("one")
    with ReplayServer([Turn(calls=[read]), Turn(text="ok")]) as server:
        kept = resumed(first.ctx.session, "main", 100_000).conversation  # as abhed resume rebuilds it
        display = Recorder()
        make_agent(ws, home, server, session_id=first.ctx.session.id, conversation=kept, display=display).run("two")
    assert user_texts(server.requests[-1]).count(notes.header(ws / "pkg")) == 1
    assert display.notices == []  # nothing loaded again: the rebuilt conversation holds them


def test_a_symlinked_agents_md_brings_no_file_from_outside_the_workspace(ws, home, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-BYTES\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "AGENTS.md").write_text("OUTSIDE-DIR-NOTES\n")
    (ws / "AGENTS.md").symlink_to(secret)  # the root's
    (ws / "sub").mkdir()
    (ws / "sub" / "AGENTS.md").symlink_to(secret)  # a subdirectory's
    (ws / "sub" / "x.py").write_text("x\n")
    (ws / "linked").symlink_to(tmp_path / "outside")  # a directory swapped for a link
    calls = [("read", {"path": str(ws / "sub" / "x.py")}), ("glob", {"pattern": "*", "path": str(ws / "linked")})]
    with ReplayServer([Turn(calls=calls), Turn(text="ok")]) as server:
        make_agent(ws, home, server).run("look")
    sent = str(server.requests)
    assert "TOP-SECRET-BYTES" not in sent and "OUTSIDE-DIR-NOTES" not in sent


def test_a_fifo_or_a_device_named_agents_md_is_never_read(ws, tmp_path):
    (ws / "lonely").mkdir()
    os.mkfifo(ws / "lonely" / "AGENTS.md")  # no writer: a blocking open would wait for ever
    os.mkfifo(tmp_path / "mine.md")
    assert notes.due(ws, [ws / "lonely"], []) == [] and notes.user_notes(tmp_path / "mine.md") is None
    if os.geteuid() == 0:  # a repository unpacked by root may hold device nodes
        (ws / "dev").mkdir()
        os.mknod(ws / "dev" / "AGENTS.md", 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
        assert notes.due(ws, [ws / "dev"], []) == []


def test_a_fifo_named_agents_md_is_skipped_and_a_long_one_is_cut_with_a_note(ws):
    (ws / "pipe").mkdir()
    os.mkfifo(ws / "pipe" / "AGENTS.md")  # opened for reading it would block for ever
    held = os.open(ws / "pipe" / "AGENTS.md", os.O_RDWR)  # a writer holding it, with text in it
    os.write(held, b"FIFO-TEXT\n")
    (ws / "big").mkdir()
    (ws / "big" / "AGENTS.md").write_text("head\n" + "x" * 50_000 + "\ntail\n")
    try:
        found = notes.due(ws, [ws / "pipe", ws / "big"], [])
    finally:
        os.close(held)
    assert len(found) == 1
    text = found[0][0]
    assert "head" in text and "tail" in text and "characters were left out here. Read the file for the rest." in text
    assert len(text) < notes.NESTED_CHARS + 500


def test_notes_are_bounded_in_number_and_the_ones_left_out_are_named(ws):
    for n in range(notes.MAX_NESTED + 2):
        (ws / f"d{n}").mkdir()
        (ws / f"d{n}" / "AGENTS.md").write_text(f"rule {n}\n")
    found = notes.due(ws, [ws / f"d{n}" for n in range(notes.MAX_NESTED + 2)], [])
    loaded = [text for text, _ in found if text.startswith(notes.NESTED_PREFIX)]
    assert len(loaded) == notes.MAX_NESTED
    assert [line for _, line in found][-1] == (f"notes not loaded ({notes.MAX_NESTED} directories' already are): "
                                                f"{ws}/d{notes.MAX_NESTED + 1}/AGENTS.md")


def test_the_directory_a_call_works_in(ws):
    (ws / "a" / "b").mkdir(parents=True)
    from abhed.tools import BY_NAME

    def touched(tool: str, arguments: dict, cwd):  # type: ignore[no-untyped-def]
        return notes.touched(arguments, cwd, runs_code=BY_NAME[tool].traits.runs_code,
                             takes_path="path" in BY_NAME[tool].Input.model_fields)
    assert touched("edit", {"path": str(ws / "a" / "f.py")}, ws) == ws / "a"
    assert touched("write", {"path": "b/new.py"}, ws / "a") == ws / "a" / "b"  # relative to the cwd
    assert touched("glob", {"pattern": "*", "path": str(ws / "a" / "b")}, ws) == ws / "a" / "b"
    assert touched("read", {"path": ""}, ws) is None and touched("read", {"path": 3}, ws) is None
    assert touched("read", {"path": str(ws / "a" / "b" / "f.py")}, ws) == ws / "a" / "b"
    assert touched("grep", {"pattern": "x", "path": str(ws / "a")}, ws) == ws / "a"
    assert touched("glob", {"pattern": "*"}, ws) is None
    assert touched("bash", {"command": "cd a"}, ws / "a") == ws / "a"
    assert touched("todo", {"path": str(ws / "a" / "x")}, ws) is None  # its input has no path
    assert notes.below(ws, ws / "a" / "b") == [ws / "a", ws / "a" / "b"]
    assert notes.below(ws, ws) == [] and notes.below(ws, ws.parent / "other") == []
    (ws / "a" / "AGENTS.md").write_text("a rule\n")
    assert len(notes.due(ws, [ws / "a", ws / "a" / "b"], [])) == 1  # two calls in a/ in one reply: once


def test_the_users_own_notes_lead_the_system_prompt_from_xdg_config_home(ws, tmp_path):
    mine = tmp_path / "xdg" / "abhed" / "AGENTS.md"
    mine.parent.mkdir(parents=True)
    mine.write_text("Answer tersely.\n")
    (ws / "AGENTS.md").write_text("Project rule.\n")
    assert notes.user_notes_path({"XDG_CONFIG_HOME": str(tmp_path / "xdg")}) == mine
    assert notes.user_notes_path({"HOME": "/home/u"}) == notes.Path("/home/u/.config/abhed/AGENTS.md")
    text = project_notes(ws, mine)
    assert text is not None and text.index("Answer tersely.") < text.index("Project rule.")
    assert f"## {mine} (the user's own notes, for every project)" in text
    assert project_notes(ws, tmp_path / "none") == "## AGENTS.md\nProject rule."


def test_a_link_to_a_file_inside_the_workspace_is_read_and_one_leading_out_is_not(ws, tmp_path):
    (ws / "CLAUDE.md").write_text("shared notes\n")
    (ws / "AGENTS.md").symlink_to("CLAUDE.md")
    assert notes.root_notes(ws) == "## AGENTS.md\nshared notes"
    (tmp_path / "secret").write_text("SECRET\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "AGENTS.md").symlink_to("../../secret")  # relative, out of the workspace
    (ws / "sub" / "ABHED.md").symlink_to("ABHED.md")  # a loop
    assert notes.directory_notes(ws, ws / "sub", 1000) == (None, [])
    (ws / "two").mkdir()
    (ws / "two" / "AGENTS.md").symlink_to("hop")
    (ws / "two" / "hop").symlink_to("../CLAUDE.md")  # one link is followed, not two
    assert notes.directory_notes(ws, ws / "two", 1000) == (None, [])
