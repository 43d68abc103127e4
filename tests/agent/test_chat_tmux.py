"""`abhed chat` driven in a real terminal (tmux) against the scripted model server: the approval
choices, paste, Ctrl-C during a running command, slash commands. Judged by the screen and by
what changed on the host."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

from abhed.model.replay import ReplayServer, Turn
from agent_helpers import REPO

pytestmark = pytest.mark.slow


def run(command: str) -> tuple[str, dict]:
    return ("bash", {"command": command, "description": f"Run {command}"})


def test_each_approval_choice(ws, term):
    turns = [Turn(calls=[run("touch one")]), Turn(calls=[run("touch two")]),  # a: this command, then...
             Turn(calls=[run("touch one")]),  # ...asked no more
             Turn(calls=[run("touch three")]), Turn(text="Made them."),  # n: declined
             Turn(calls=[run("mkdir d1")]), Turn(text="Listed."),  # p: mkdir:* ... (ls would not ask: it only reads)
             Turn(calls=[run("mkdir -p d2")]), Turn(text="Listed again."),  # ...covers mkdir -p d2
             Turn(calls=[run("touch four")]), Turn(text="Understood."),  # r: no, with a reason
             Turn(calls=[run("touch five")]), Turn(text="Done.")]  # y: once
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("make the files")
        chat.wait_for("Allow? [y/a/p/n/r]")
        chat.type("a")
        chat.wait_for("allowed for the rest of this session: bash(touch one)")
        chat.wait_for("Allow? [y/a/p/n/r]", 2)  # touch two: another command
        chat.type("n")
        chat.wait_for("Allow? [y/a/p/n/r]", 3)  # touch three (touch one was not asked again)
        chat.type("n")
        chat.wait_for("Made them.")
        chat.type("list")
        chat.wait_for("Allow? [y/a/p/n/r]", 4)
        chat.type("p")
        chat.wait_for("allowed for the rest of this session: bash(mkdir:*)")
        chat.wait_for("Listed.")
        chat.type("list long")
        screen = chat.wait_for("Listed again.")
        assert screen.count("Allow? [") == 4
        chat.type("four")
        chat.wait_for("Allow? [y/a/p/n/r]", 5)
        chat.type("r")
        chat.wait_for("Why not (the model reads this)?")
        chat.type("use the Makefile")
        chat.wait_for("Understood.")
        chat.type("five")
        chat.wait_for("Allow? [y/a/p/n/r]", 6)
        chat.type("y")
        chat.wait_for("Done.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert sorted(p.name for p in ws.iterdir() if not p.name.startswith(".")) == ["d1", "d2", "five", "one"]
    declined = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert any("the human declined it: use the Makefile" in c for c in declined)
    assert sum("the human declined it" in c for c in declined) == 3


def test_a_reason_typed_after_the_first_prompt_is_echoed_and_edited_by_the_terminal(ws, term):
    """The chat holds the keys typed while it starts (lineedit.hold_keys: no echo, no line editing
    by the tty); once the first prompt is over the terminal is its own again, so the plain lines an
    approval asks for show what is typed and Backspace erases."""
    turns = [Turn(calls=[run("touch a")]), Turn(text="Understood.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("go")
        chat.wait_for("Allow? [y/a/p/n/r]")
        chat.type("r")
        chat.wait_for("Why not (the model reads this)?")
        chat.keys("use makx", "BSpace")
        chat.wait_for("use mak")
        chat.type("e")
        chat.wait_for("Understood.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    declined = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert any("the human declined it: use make" in c and "makx" not in c for c in declined), declined


def test_saving_a_rule_needs_the_operators_leave_and_writes_the_config(ws, tmp_path, term):
    config = tmp_path / "config.toml"
    config.write_text("# the operator's\n[approval]\nsave_rules = true\n")
    turns = [Turn(calls=[run("touch a")]), Turn(text="ok")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), env={"ABHED_CONFIG": str(config)})
        chat.wait_for("ends the session.")
        chat.type("go")
        chat.wait_for("Allow? [y/a/p/s/n/r]")
        chat.type("s")
        chat.wait_for("Save which? [1/2/n]")  # the scopes: bash(touch a), then bash(touch:*)
        chat.type("2")
        chat.wait_for("saved bash(touch:*) to approval.allow in")
        chat.wait_for("ok")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert config.read_text() == "# the operator's\n[approval]\nallow = [\"bash(touch:*)\"]\nsave_rules = true\n"
    assert (ws / "a").exists()


def processes_running(marker: str) -> list[str]:
    """Every process on the host whose command line holds `marker` (sandboxed ones included)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline and "pytest" not in cmdline:
                found.append(f"{entry}: {cmdline}")
    return found


def test_ctrl_c_kills_the_running_command_and_subagents_commands(ws, term):
    nap = f"30.{os.getpid()}{uuid.uuid4().int % 10**6}"  # a duration no other process on the host uses
    task = {"goal": f"Wait: run exactly `sleep {nap}` with bash and report", "description": "wait"}
    turns = [Turn(calls=[run(f"sleep {nap}"), ("task", task)]),
             Turn(calls=[run(f"sleep {nap}")]),  # the subagent's step (its reply comes second)
             Turn(text="Back."), Turn(text="Back."), Turn(text="Back.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), "--mode", "auto")
        chat.wait_for("ends the session.")
        chat.type("wait")
        deadline = time.monotonic() + 60  # a guard against hanging, not a timing assertion
        while len(processes_running(f"sleep {nap}")) < 2:  # ours and the subagent's
            assert time.monotonic() < deadline, chat.screen()
            time.sleep(0.1)
        chat.keys("C-c")
        chat.wait_for("interrupted by the user")
        assert processes_running(f"sleep {nap}") == []  # gone at once: the turn returned only once they were
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")


def test_slash_commands_stay_local_and_paste_is_one_message(ws, term, home):
    (ws / "a.py").write_text("x = 1\n")
    edit = {"path": str(ws / "a.py"), "old_string": "x = 1", "new_string": "x = 2"}
    turns = [Turn(calls=[("read", {"path": str(ws / "a.py")})]), Turn(calls=[("edit", edit)]), Turn(text="Edited."),
             Turn(text="Got both lines.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), "--mode", "ask")
        chat.wait_for("ends the session.")
        chat.type("/help")
        chat.wait_for("/compact")
        chat.type("/mode accept-edits")
        chat.wait_for("mode accept-edits for the rest of this session")
        chat.type("/mode yolo")
        chat.wait_for("Unknown approval mode 'yolo': use one of ask, plan, accept-edits, auto")
        chat.type("/bogus")
        chat.wait_for("Unknown command /bogus: nothing was sent to the model")
        assert server.requests == []  # no slash command reached the model
        chat.type("set x to 2")  # accept-edits now: no question
        chat.wait_for("Edited.")
        chat.type("/diff")
        screen = chat.wait_for("[1 change to 1 file in this session]")
        assert "-x = 1" in screen and "+x = 2" in screen and "Allow?" not in screen
        chat.paste("first line\nsecond line")
        chat.keys("Enter")
        chat.wait_for("Got both lines.")
        assert server.requests[-1]["messages"][-1] == {"role": "user", "content": "first line\nsecond line"}
        chat.wait_prompt()
        chat.keys("/se", "Tab")
        chat.wait_for("> /sessions")
        chat.keys("Enter")
        chat.wait_for("* this session")
        chat.type("/undo")  # the edit's checkpoint: shows the plan, asks, restores
        chat.wait_for("Undo? [y/N]")
        chat.keys("C-c")  # a no: the session goes on
        chat.wait_for("(no: nothing was undone)")
        assert (ws / "a.py").read_text() == "x = 2\n"
        chat.type("/undo")
        chat.wait_for("Undo? [y/N]", 2)
        chat.type("y")
        chat.wait_for("Undone: the workspace is as it was before checkpoint 1")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert (ws / "a.py").read_text() == "x = 1\n"
    history = next((home / "history").iterdir()).read_text()
    assert "/mode accept-edits" in history and "+first line\n+second line" in history


def test_status_line_shows_elapsed_time_tokens_and_context(ws, term):
    nap = f"3.{uuid.uuid4().int % 10**6}"
    turns = [Turn(calls=[run(f"sleep {nap}")]), Turn(text="Slept.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), "--mode", "auto")
        chat.wait_for("ends the session.")
        chat.type("sleep")
        chat.wait_for("running bash")  # the spinner while the command runs, with its elapsed seconds
        screen = chat.wait_for("Slept.")
        chat.wait_for("context ")
        screen = chat.screen()
        assert "tokens in" in screen and "/32.8k" in screen  # of the replay model's max_model_len
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")


def test_ctrl_r_recalls_a_prompt_from_this_workspaces_history(ws, term, home):
    from prompt_toolkit.history import FileHistory

    from abhed.cli.lineedit import history_path
    path = history_path(home, ws.resolve())
    path.parent.mkdir(parents=True)
    for earlier in ("alpha: count the apples", "beta: peel the bananas"):  # as two earlier sessions left them
        FileHistory(str(path)).store_string(earlier)
    with ReplayServer([Turn(text="Counted.")]) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.wait_prompt()  # the editor has the terminal: before, the tty itself takes Ctrl-R (reprint)
        chat.keys("C-r")
        chat.wait_for("I-search backward:")
        chat.keys("apple")
        chat.wait_for("I-search backward: apple")
        chat.keys("Enter")  # ends the search: the match is in the editor, not sent yet
        chat.wait_gone("I-search backward:")
        chat.wait_for("> alpha: count the apples")
        assert server.requests == []
        chat.keys("Enter")
        chat.wait_for("Counted.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert len(server.requests) == 1  # one prompt sent: the recalled one, not the search text
    assert server.requests[0]["messages"][-1] == {"role": "user", "content": "alpha: count the apples"}


def test_mode_changes_what_the_model_is_told_and_resume_keeps_it(ws, term, home):
    from abhed.session.store import SessionStore
    from test_cli_agent import abhed
    turns = [Turn(text="Asked."), Turn(calls=[run("touch made")]), Turn(text="Made."),  # chat
             Turn(calls=[run("touch again")]), Turn(text="Again.")]  # abhed resume
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), "--mode", "ask")
        chat.wait_for("ends the session.")
        chat.type("hello")
        chat.wait_for("Asked.")
        chat.type("/mode auto")
        chat.wait_for("mode auto for the rest of this session")
        chat.type("make it")
        screen = chat.wait_for("Made.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
        [session_id] = SessionStore(home).ids()
        resumed = abhed("resume", session_id, "again", "--endpoint", server.url, home=home)
        shown = abhed("sessions", "show", session_id, home=home)
    prompts = [r["messages"][0]["content"] for r in server.requests]
    assert "Approval mode: ask (" in prompts[0]
    assert all("Approval mode: auto (" in p and "Approval mode: ask" not in p for p in prompts[1:])
    assert "Allow?" not in screen and (ws / "made").exists()  # the gate too: nobody was asked
    assert resumed.returncode == 0 and resumed.stdout == "Again.\n" and (ws / "again").exists()
    assert "mode auto" in resumed.stderr
    assert "mode auto (was ask), set by " in shown.stdout


def test_the_approval_prompt_names_the_keys_on_a_slip_and_takes_ctrl_c_and_ctrl_d_as_no(ws, term):
    turns = [Turn(calls=[run("touch one")]), Turn(calls=[run("touch two")]), Turn(text="Fine, neither.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("make them")
        chat.wait_for("Allow? [y/a/p/n/r]")
        chat.type("q")
        chat.wait_for("'q' is not an answer here: type one of y/a/p/n/r (the letters above) and Enter")
        chat.wait_for("Allow? [y/a/p/n/r]", 2)  # asked again
        chat.keys("C-c")
        chat.wait_for("(Ctrl-C: no)")
        chat.wait_for("Allow? [y/a/p/n/r]", 3)  # the turn goes on: the model read the no, made another call
        chat.keys("C-d")
        chat.wait_for("(end of input: no)")
        chat.wait_for("Fine, neither.")
        chat.type("/exit")  # the session itself goes on after both
        chat.wait_for("CHAT-EXITED 0")
    assert not (ws / "one").exists() and not (ws / "two").exists()
    declined = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(declined) == 2 and all("the human declined it" in c for c in declined)


def test_mcp_shows_the_servers_admitted_and_withheld_tools_and_refused_connections(tmp_path, ws, home, term):
    """A configured, reviewed MCP server (tests/mcp's hostile one, with allow_hosts): /mcp in the pane
    says how it runs, what is admitted, what is withheld after a change, and what its proxy refused."""
    control, etc = tmp_path / "control", tmp_path / "etc-abhed"
    control.mkdir()
    etc.mkdir(mode=0o700)
    python = os.path.realpath(sys.executable)
    hostile = REPO / "tests" / "mcp" / "hostile_server.py"
    allowed = socket.create_server(("127.0.0.1", 0))
    port = allowed.getsockname()[1]
    config = etc / "config.toml"
    config.write_text("\n".join([
        '[approval]', 'allow = ["mcp__hostile__escape"]', '[mcp.servers.hostile]',
        f"command = {json.dumps([python, str(hostile), str(control)])}",
        f"read_only = {json.dumps([str(hostile.parent), str(os.path.dirname(os.path.dirname(python))), str(control)])}",
        f'allow_hosts = ["127.0.0.1:{port}"]', ""]))
    config.chmod(0o600)
    env = {"ABHED_CONFIG": str(config)}
    review = subprocess.run([sys.executable, "-m", "abhed", "mcp", "review", "hostile", "--yes"], capture_output=True,
                            text=True, cwd=ws, timeout=120, env={**os.environ, "ABHED_HOME": str(home), **env})
    assert review.returncode == 0, review.stdout + review.stderr
    (control / "description").write_text("Echo, changed after review.")  # withheld from the next session
    denied = f"http://127.0.0.1:{port + 1 if port < 65535 else 1}/page"
    turns = [Turn(calls=[("mcp__hostile__escape", {"path": str(tmp_path / "out"), "port": port, "url": denied})]),
             Turn(text="Could not fetch it.")]
    try:
        with ReplayServer(turns) as server:
            chat = term("--endpoint", server.url, "--workspace", str(ws), env=env)
            chat.wait_for("ends the session.")
            chat.type("/mcp")
            screen = chat.wait_for("mcp__hostile__echo WITHHELD")
            flat = " ".join(screen.split())  # rich wraps a long line where the pane ends
            assert (f"hostile: stdio `{python} {hostile} {control}` in the sandbox, no network but a proxy to "
                    f"127.0.0.1:{port}; 9 tool(s) admitted mcp__hostile__huge") in flat
            assert "mcp__hostile__escape mcp__hostile__echo WITHHELD: changed since it was reviewed (its description " \
                   "or input schema differs from the pinned one): a possible rug pull" in flat
            chat.type("fetch the page")
            chat.wait_for("Could not fetch it.")
            chat.type("/mcp")
            flat = " ".join(chat.wait_for("connection(s) refused").split())
            assert (f"network: 1 connection(s) refused, the latest: the sandbox's network proxy refused "
                    f"{denied.removeprefix('http://').removesuffix('/page')}: not in allow_hosts") in flat
            chat.type("/exit")
            chat.wait_for("CHAT-EXITED 0")
    finally:
        allowed.close()
    result = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert "fetch failed: HTTP Error 403" in result and "not in allow_hosts" in result


def test_a_wrong_endpoint_ends_the_prompt_at_once_with_the_connection_error(ws, term, home):
    """The prompt comes before the connection check (issue 18); a check that fails ends the chat at
    once, with the same message and exit status as before the prompt, though nothing was sent."""
    chat = term("--endpoint", "http://127.0.0.1:9/v1", "--workspace", str(ws))
    screen = chat.wait_for("CHAT-EXITED 1")
    assert screen.index("ends the session.") < screen.index("Cannot connect to the model server at http://127.0.0.1:9/v1")
    assert screen.count("Cannot connect to the model server") == 1 and "Traceback" not in screen
    from abhed.session.store import SessionStore
    assert SessionStore(home).ids() == []


def test_a_locked_session_ends_the_prompt_with_what_holds_it(ws, term, home, tmp_path):
    """A session another process holds: the chat's prompt comes first, then the store's explanation
    (exit 2), as `abhed chat --session` told it before the prompt."""
    from abhed.session.store import SessionStore
    config = tmp_path / "config.toml"
    config.write_text("[agent]\nsession_wait_s = 1\n")
    with ReplayServer([Turn(text="unused")]) as server:
        with SessionStore(home).use(None, ws) as held:
            chat = term("--endpoint", server.url, "--workspace", str(ws), "--session", held.id,
                        env={"ABHED_CONFIG": str(config)})
            screen = chat.wait_for("CHAT-EXITED 2")
    flat = " ".join(screen.split())
    told = flat.index(f"abhed: Session '{held.id}' is still in use by")
    assert flat.index("ends the session.") < told and "agent.session_wait_s sets how long to wait" in flat[told:]
    assert "Traceback" not in screen


@pytest.mark.parametrize("when", ["at once", "after the session line"])
def test_ctrl_d_at_an_empty_prompt_ends_the_chat(ws, term, home, when):
    """The prompt is drawn before the session is built (issue 18): Ctrl-D there, whether the build
    is still going or has printed its line above the prompt, ends the chat cleanly, with a session."""
    with ReplayServer([Turn(text="unused")]) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        if when != "at once":
            chat.wait_for(" session ")
        chat.keys("C-d")
        screen = chat.wait_for("CHAT-EXITED 0")
    assert "Traceback" not in screen and server.requests == []
    from abhed.session.store import SessionStore
    assert len(SessionStore(home).ids()) == 1


def test_a_commands_escapes_reach_the_terminal_as_text_and_it_answers_nothing(ws, term):
    """Issue 12 item 8, in a real terminal: a command prints a cursor-position request (ESC [6n,
    which the terminal answers by typing ESC [row;colR into the chat's input) and a window-title
    change. Judged by the terminal itself: its title is unchanged, and the next line typed reaches
    the model exactly as typed, with no answer-back in it."""
    escapes = r"printf 'a\033[6nb\033]0;pwned\007c\n'"
    turns = [Turn(calls=[run(escapes)]), Turn(text="Printed."), Turn(text="Noted.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        title = chat._tmux("display-message", "-p", "-t", "chat", "#{pane_title}").strip()
        chat.type("print them")   # printf runs unasked: it only prints
        screen = chat.wait_for("Printed.")
        assert "a\\x1b[6nb\\x1b]0;pwned\\x07c" in screen   # shown, as text
        chat.wait_prompt()
        time.sleep(0.5)   # time for an answer-back to arrive, were there one
        chat.type("next")
        chat.wait_for("Noted.")
        assert chat._tmux("display-message", "-p", "-t", "chat", "#{pane_title}").strip() == title != "pwned"
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    said = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"]
    assert said[-1] == "next", said


def test_the_approval_panel_shows_separators_and_invisible_characters_as_escapes(ws, term):
    """Issue 31 item 7, in a real terminal: a line separator in a command would start a new line in
    the panel, so `echo ok<U+2028>rm -rf x` showed a line beginning `rm -rf x` that the command does
    not have; a zero-width space makes `ls<U+200B>` look like `ls`, in the rule offered too. Judged
    by the screen: one panel line holds the whole command with the separator named, and the rules
    offered name the invisible character."""
    spoof = "echo ok\u2028rm -rf x; touch made"
    turns = [Turn(calls=[run(spoof)]), Turn(text="First."), Turn(calls=[run("ls\u200b")]), Turn(text="Second.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("go")
        screen = chat.wait_for("Allow? [")
        shown = [line for line in screen.splitlines() if "rm -rf x" in line]  # the tool line, description, command
        assert shown and all("echo ok\\u2028rm -rf x; touch made" in line for line in shown), screen
        assert any("│ bash: echo ok\\u2028rm -rf x; touch made" in line for line in shown), screen
        assert "\u2028" not in screen
        chat.type("n")
        chat.wait_for("First.")
        chat.type("again")
        screen = chat.wait_for("Allow? [", 2)
        assert "bash: ls\\u200b" in screen and "allow bash('ls\\u200b') for this session" in screen, screen
        assert "allow bash('ls\\u200b':*) for this session" in screen and "\u200b" not in screen
        chat.type("n")
        chat.wait_for("Second.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert not (ws / "made").exists()


def test_a_server_that_goes_down_mid_chat_is_waited_for_and_the_wait_is_shown(ws, term):
    """Issue 33, finding 7: a restarting server (503 while its model loads) is waited out, and the
    human sees what Abhed waits for; the chat goes on when it is back."""
    turns = [Turn(text="First."), Turn(fault="status:503"), Turn(fault="status:503"), Turn(text="Back.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("one")
        chat.wait_for("First.")
        chat.type("two")
        shown = " ".join(chat.wait_for("Back.").split())
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert shown.count(f"Waiting for the model server at {server.url} (HTTP 503") == 2
    assert "(model.max_request_s); next try in " in shown and "Ctrl-C stops waiting." in shown
    assert "Traceback" not in shown


def test_chat_start_names_an_undo_killed_mid_way_and_slash_undo_finish_completes_it(ws, term, home, tmp_path):
    """Issue 33, finding 6, in a real terminal: the notice at chat start, then /undo --finish;
    judged by the workspace's bytes and modes."""
    from abhed.session import journal
    from abhed.session.checkpoint import Shadow
    from test_checkpoint import tree_state
    from test_undo_killed import _killed_undo, _session
    t, old, _new = _session(ws, home)
    _killed_undo(ws, home, t, tmp_path / "paused", "undo:3")
    with ReplayServer([Turn(text="unused")]) as server:
        chat = term("--session", t.session.id, "--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        notice = " ".join(chat.wait_for("/undo --rollback.").split())  # shown once the session is loaded
        chat.type("/undo --finish")
        chat.wait_for("Undo? [y/N]")
        chat.type("y")
        chat.wait_for("Finished: the interrupted undo is closed")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert f"An undo was interrupted: undo checkpoint 2 of session {t.session.id}" in notice
    assert "In this chat: /undo --finish or /undo --rollback." in notice
    assert tree_state(ws) == old
    assert journal.read(Shadow(home, ws).dir, journal.UNDO) is None


SLOW_READS = '''
import time
from abhed.session import treeio
_read = treeio.Tree.read
def _slow(self, *args, **kwargs):
    time.sleep(0.002)
    return _read(self, *args, **kwargs)
treeio.Tree.read = _slow
'''


def test_a_first_checkpoint_that_hashes_many_files_shows_its_progress_then_says_so(ws, term, tmp_path):
    """A workspace of 3,000 files without git: the first bash call's snapshot reads every one. While it
    runs the status line counts them; the call's checkpoint line then says why it took long. (Each read
    is slowed by 2 ms, by a sitecustomize of the test's own, so that the line stays up to be seen.)"""
    for d in range(30):
        (ws / f"d{d:02}").mkdir()
        for i in range(100):
            (ws / f"d{d:02}" / f"f{i:03}.c").write_text(f"int f{d}_{i};\n")
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_READS)
    turns = [Turn(calls=[run("touch made")]), Turn(text="Made.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), "--mode", "auto",
                    env={"PYTHONPATH": f"{slow}:{REPO}"})
        chat.wait_for("ends the session.")
        chat.type("make it")
        screen = chat.wait_for("first checkpoint of this workspace: hashing ")
        line = next(s for s in screen.splitlines() if "first checkpoint of this workspace: hashing" in s)
        assert " / 3,000 files (" in line and "later calls only read what changed" in line
        screen = chat.wait_for("Made.")
        assert "checkpoint 1 (/undo takes this call back); the first checkpoint of this workspace read and hashed " \
               "3,000 files in" in " ".join(screen.split())
        assert "the workspace is no git repository" in screen
        assert (ws / "made").exists()
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
