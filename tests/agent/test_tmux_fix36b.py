"""Issue 36, items 8 and 9 (and setup), as a user meets them in a real terminal (tmux) against the
scripted model server: `abhed "prompt"`, `abhed chat "prompt"`, `abhed resume` reopening the chat,
a failed call's whole error, a declined call's reason reaching the model as the human's, an image
named by a relative path attached, /compact after a few turns. Judged by the screen and by what
the model was sent."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from abhed.model.replay import ReplayServer, Turn
from abhed.session.store import SessionStore
from agent_helpers import REPO
from tmux_chat import TmuxChat

pytestmark = pytest.mark.slow


class Abhed(TmuxChat):
    """TmuxChat running `abhed ARGV` (any command, not only chat) in `cwd`."""

    def __init__(self, home: Path, *argv: str, cwd: Path = REPO) -> None:  # noqa: D107 (TmuxChat's, its command ours)
        import uuid
        self.socket = f"abhed-test-{uuid.uuid4().hex[:12]}"
        env = {"ABHED_HOME": str(home), "ABHED_CONFIG": "", "TERM": "xterm-256color", "PYTHONPATH": str(REPO)}
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        command = (f"env -u COLUMNS -u LINES {exports} {shlex.quote(sys.executable)} -m abhed {shlex.join(argv)}; "
                   "echo CHAT-EXITED $?; sleep 600")
        self._tmux("new-session", "-d", "-x", "160", "-y", "50", "-s", "chat", "-c", str(cwd), command)
        self._tmux("set-option", "-t", "chat", "history-limit", "5000")


@pytest.fixture
def term(home):  # type: ignore[no-untyped-def]
    sessions: list[Abhed] = []

    def start(*argv: str, cwd: Path = REPO) -> Abhed:
        chat = Abhed(home, *argv, cwd=cwd)
        sessions.append(chat)
        return chat
    yield start
    for chat in sessions:
        chat.close()


def first_prompt(server: ReplayServer) -> str:
    return server.requests[0]["messages"][1]["content"]


# -- item 8: the prompt on the command line, and resume -------------------------------------------

@pytest.mark.parametrize("command", [(), ("chat",)], ids=["abhed PROMPT", "abhed chat PROMPT"])
def test_a_prompt_on_the_command_line_opens_the_chat_with_it_as_the_first_message(ws, term, command):
    with ReplayServer([Turn(text="Looking at the test."), Turn(text="Still here.")]) as server:
        chat = term(*command, "fix the test", "--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("Looking at the test.")
        screen = chat.wait_prompt()  # the chat goes on
        assert "> fix the test" in screen and "No such command" not in screen
        chat.type("and then?")
        chat.wait_for("Still here.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert first_prompt(server) == "fix the test"
    assert server.requests[1]["messages"][-1]["content"] == "and then?"


def test_a_command_name_stays_the_command_and_chat_sends_it_as_a_prompt(ws, home, term):
    from test_cli_agent import abhed
    typo = abhed("doctr", home=home)
    assert typo.returncode == 2 and "did you mean `abhed doctor`" in typo.stderr
    assert "abhed chat doctr" in typo.stderr
    assert abhed("sessions", "list", home=home).returncode == 0  # a command is still the command
    with ReplayServer([Turn(text="You said run.")]) as server:
        chat = term("chat", "run", "--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("You said run.")
        chat.wait_prompt()
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert first_prompt(server) == "run"


def test_resume_in_a_terminal_reopens_the_chat_on_the_session(ws, home, term):
    from test_cli_agent import abhed
    turns = [Turn(text="First answer."), Turn(text="Second answer."), Turn(text="Third answer.")]
    with ReplayServer(turns) as server:
        started = abhed("run", "first question", "--endpoint", server.url, "--workspace", str(ws), home=home)
        assert started.returncode == 0, started.stderr
        [session_id] = SessionStore(home).ids()
        chat = term("resume", session_id, "second question", "--endpoint", server.url)
        chat.wait_for("Second answer.")
        screen = chat.wait_prompt()  # not exited after one turn: the chat is open
        assert "CHAT-EXITED" not in screen and session_id in screen
        chat.type("third question")
        chat.wait_for("Third answer.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert SessionStore(home).ids() == [session_id]  # the same session, not a new one
    said = [m["content"] for m in server.requests[2]["messages"] if m["role"] == "user"]
    assert said == ["first question", "second question", "third question"]


def test_resume_once_still_runs_one_turn_and_exits_in_a_terminal(ws, home, term):
    from test_cli_agent import abhed
    with ReplayServer([Turn(text="First answer."), Turn(text="Once more.")]) as server:
        assert abhed("run", "first", "--endpoint", server.url, "--workspace", str(ws), home=home).returncode == 0
        [session_id] = SessionStore(home).ids()
        chat = term("resume", session_id, "again", "--once", "--endpoint", server.url)
        screen = chat.wait_for("CHAT-EXITED 0")
    assert "Once more." in screen


# -- item 9 -----------------------------------------------------------------------------------------

def test_a_failed_call_shows_its_whole_error_not_only_its_first_line(ws, term):
    turns = [Turn(calls=[("task", {"prompt": 3})]), Turn(text="Fixed my call.")]
    with ReplayServer(turns) as server:
        chat = term("chat", "--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("delegate it")
        screen = chat.wait_for("Fixed my call.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    [error] = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    first, *rest = error.split("\n")
    assert first == "Invalid arguments for `task`:" and len(rest) >= 2
    for line in rest:  # every line the model read, the human sees
        assert line[:100] in screen, line


def test_a_decline_with_a_reason_reaches_the_model_as_the_humans_not_the_configurations(ws, term):
    turns = [Turn(calls=[("bash", {"command": "touch built", "description": "Build"})]), Turn(text="Using make.")]
    with ReplayServer(turns) as server:
        chat = term("chat", "--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("build it")
        chat.wait_for("Allow? [y/a/p/n/r]")
        chat.type("r")
        chat.wait_for("Why not (the model reads this)?")
        chat.type("use the Makefile")
        chat.wait_for("Using make.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    [declined] = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert "the human declined it: use the Makefile" in declined
    assert "A human at the terminal declined this call" in declined and "do what it says" in declined
    assert "The operator's configuration decides this" not in declined
    assert not (ws / "built").exists()


def test_an_image_named_by_a_relative_path_is_attached(ws, term):
    from media_testing import image
    (ws / "sub").mkdir()
    (ws / "sub" / "shot.png").write_bytes(image("PNG", 120, 80))
    (ws / "spec.pdf").write_bytes(b"not looked at")  # a word that is no such file is left as text
    with ReplayServer([Turn(text="A button.")], images=4) as server:
        chat = term("chat", "--endpoint", server.url, "--profile", "qwen2.5-vl", cwd=ws / "sub")
        chat.wait_for("ends the session.")
        chat.type("what is in shot.png?")
        screen = chat.wait_for("A button.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert f"[attached image: {ws / 'sub' / 'shot.png'}, PNG 120x80" in screen
    text, picture = server.requests[0]["messages"][1]["content"]
    assert text["text"].startswith("what is in shot.png?\n\n[attached image: ")
    assert picture["image_url"]["url"].startswith("data:image/png;base64,")


def test_compact_after_a_few_turns_summarises_the_older_ones(ws, term):
    turns = [Turn(text="One."), Turn(text="Two."), Turn(text="The user asked twice; both answered."),
             Turn(text="Three.")]
    with ReplayServer(turns) as server:
        chat = term("chat", "--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("first")
        chat.wait_for("One.")
        chat.type("second")
        chat.wait_for("Two.")
        chat.type("/compact")
        screen = chat.wait_for("compacted the conversation")
        assert "nothing to compact" not in screen
        chat.type("third")
        chat.wait_for("Three.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    last = server.requests[-1]["messages"]
    assert "The user asked twice; both answered." in last[1]["content"]  # the summary replaced turn one
    assert [m["content"] for m in last[2:]] == ["Two.", "third"]


# -- scripts/setup and the demo's last line: how to run abhed ---------------------------------------

def _clone_for_setup(into: Path) -> Path:
    """What scripts/setup installs from (the packages, pyproject.toml, README.md) and the script."""
    import shutil
    clone = into / "clone"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("abhed", "fallback_grep", "sandbox", "bundle", "offline_models", "scripts"):
        shutil.copytree(REPO / part, clone / part, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, clone / name)
    return clone


def test_setup_is_quiet_and_ends_saying_how_to_run_abhed(tmp_path):
    """The real scripts/setup on a copy of the project, its own fresh .venv. PIP_NO_DEPS leaves the
    dependencies (minutes to fetch) out of it: the warning came from building Abhed's own editable
    wheel, which this does for real (setuptools from the index, in pip's build isolation)."""
    import os
    import subprocess
    clone = _clone_for_setup(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_NO_DEPS="1", HOME=str(tmp_path))
    proc = subprocess.run([str(clone / "scripts" / "setup")], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = (proc.stdout + proc.stderr).splitlines()
    # This machine's own pip configuration may name an index folder that is missing; not setup's.
    warnings = [line for line in said if re.search(r"warning", line, re.I) and "is ignored: it is neither a file" not in line]
    assert warnings == [] and "Editable installation" not in proc.stderr, proc.stderr
    abhed = clone / ".venv" / "bin" / "abhed"
    assert said[-1].startswith(f"setup: done. Run Abhed as {abhed} (e.g. {abhed} demo)"), said[-1]
    assert os.access(abhed, os.X_OK)


def test_setup_link_puts_abhed_on_path_only_when_asked_and_never_over_another(tmp_path):
    """--link is setup's last step (scripts/setup-launcher), run here on its own: the install before
    it is the test above."""
    import os
    import subprocess
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    (clone / "scripts" / "setup-launcher").write_bytes((REPO / "scripts" / "setup-launcher").read_bytes())
    (clone / "scripts" / "setup-launcher").chmod(0o755)
    abhed = clone / ".venv" / "bin" / "abhed"
    abhed.parent.mkdir(parents=True)
    abhed.write_text("#!/bin/sh\necho this abhed\n")
    abhed.chmod(0o755)
    links, elsewhere = tmp_path / "bin", tmp_path / "elsewhere"
    env = {**os.environ, "HOME": str(tmp_path), "PATH": f"{links}:/usr/bin:/bin"}

    def launcher(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(clone / "scripts" / "setup-launcher"), *args], capture_output=True, text=True,
                              env=env, timeout=60)
    assert launcher().stdout.startswith(f"setup: done. Run Abhed as {abhed} (e.g. {abhed} demo)")
    assert not links.exists()  # not asked: nothing written outside the clone
    linked = launcher("--link", str(links))
    assert linked.stdout == f"setup: done. {links}/abhed links to {abhed}: run `abhed` (e.g. abhed demo).\n"
    assert subprocess.run(["abhed"], capture_output=True, text=True, env=env).stdout == "this abhed\n"
    assert launcher("--link", str(links)).returncode == 0  # again: the same link
    off_path = launcher("--link", str(elsewhere))
    assert f"but {elsewhere} is not on your PATH" in off_path.stdout and (elsewhere / "abhed").is_symlink()
    (links / "abhed").unlink()
    (links / "abhed").write_text("the operator's own\n")
    refused = launcher("--link", str(links))
    assert refused.returncode == 1 and "exists and is not a link to" in refused.stderr
    assert (links / "abhed").read_text() == "the operator's own\n"
    assert launcher("--bogus").returncode == 2


def test_the_demo_ends_with_a_command_that_runs_here(home, tmp_path):
    """Bare `abhed` only when PATH finds this one; else its path (as after scripts/setup)."""
    import os
    import subprocess
    program = REPO / ".venv" / "bin" / "abhed"
    base = {**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": "", "PYTHONPATH": str(REPO)}
    bare = {**base, "PATH": "/usr/bin:/bin"}
    last = subprocess.run([str(program), "demo", "--fast"], capture_output=True, text=True, env=bare,
                          timeout=300).stdout.splitlines()[-1]
    assert last == (f"With a real model server: {program} doctor --endpoint http://HOST:8000/v1, then {program} in "
                    "your project.")
    links = tmp_path / "bin"
    links.mkdir()
    (links / "abhed").symlink_to(program)
    on_path = {**base, "PATH": f"{links}:/usr/bin:/bin"}
    last = subprocess.run(["abhed", "demo", "--fast"], capture_output=True, text=True, env=on_path,
                          timeout=300).stdout.splitlines()[-1]
    assert last == "With a real model server: abhed doctor --endpoint http://HOST:8000/v1, then abhed in your project."
