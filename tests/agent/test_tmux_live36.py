"""Issue 36, seeing the work as it happens, in a real terminal (tmux) against the scripted model:
an approved command keeps its status line and streams its last output lines beneath it (in the
chat, and on `abhed run`'s stderr when that is a terminal); a long paragraph shows as it is
written, with the token count moving; keys typed during a turn are not echoed onto the screen."""

from __future__ import annotations

import re
import shlex
import sys
import time

import pytest

from abhed.model.replay import ReplayServer, Turn
from agent_helpers import REPO
from tmux_chat import GUARD_S, TmuxChat

pytestmark = pytest.mark.slow

TICKS = "for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done; touch counted"


def run(command: str) -> tuple[str, dict]:
    return ("bash", {"command": command, "description": "Count to six"})


class TmuxRun(TmuxChat):
    """`abhed run` in a tmux pane: stderr (its progress) is the pane; stdout (the answer) too."""

    def __init__(self, home, *args: str) -> None:  # type: ignore[no-untyped-def]
        import uuid
        self.socket = f"abhed-test-{uuid.uuid4().hex[:12]}"
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in {
            "ABHED_HOME": str(home), "ABHED_CONFIG": "", "TERM": "xterm-256color", "PYTHONPATH": str(REPO)}.items())
        command = (f"env -u COLUMNS -u LINES {exports} {shlex.quote(sys.executable)} -m abhed run {shlex.join(args)}; "
                   "echo RUN-EXITED $?; sleep 600")
        self._tmux("new-session", "-d", "-x", "120", "-y", "40", "-s", "chat", "-c", str(REPO), command)


@pytest.fixture
def panes():  # type: ignore[no-untyped-def]
    opened: list[TmuxChat] = []
    yield opened
    for pane in opened:
        pane.close()


def wait_until(pane: TmuxChat, test, what: str) -> str:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + GUARD_S
    while True:
        screen = pane.screen()
        if test(screen):
            return screen
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never came; the screen:\n{screen}")
        time.sleep(0.05)


def test_an_approved_command_shows_its_status_line_and_output_while_it_runs(ws, term):
    with ReplayServer([Turn(calls=[run(TICKS)]), Turn(text="Counted.")]) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("count")
        chat.wait_for("Allow? [")
        chat.type("y")
        screen = chat.wait_for("tick 2")
        assert not (ws / "counted").exists(), "the command had ended: nothing was shown while it ran"
        assert re.search(r"running bash \d+s", screen), screen
        chat.wait_for("Counted.")
    assert (ws / "counted").exists()


def test_keys_typed_during_a_turn_are_not_echoed_and_wait_for_the_prompt(ws, term):
    with ReplayServer([Turn(calls=[run(TICKS)]), Turn(text="Counted.")]) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("count")
        chat.wait_for("Allow? [")
        chat.type("y")
        chat.wait_for("tick 1")
        chat.keys("typedahead")
        screen = chat.wait_for("tick 3")
        assert "typedahead" not in screen, screen
        chat.wait_for("Counted.")
        screen = chat.wait_for("> typedahead")  # the keys were kept for the next message
        assert screen.count("typedahead") == 1, screen


def test_a_long_paragraph_shows_as_it_streams_with_the_token_count_moving(ws, term):
    words = " ".join(f"word{n}" for n in range(400))
    paragraph = f"Alpha bravo {words} zulu end."
    with ReplayServer([Turn(text=paragraph)], chunk_chars=12, delay_s=0.01) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("talk")
        early = wait_until(chat, lambda s: "Alpha bravo" in s, "the paragraph's first words")
        assert "zulu end" not in early, "the paragraph showed only once it had ended"
        counting = wait_until(chat, lambda s: re.search(r"out ~?[1-9]", s) or "zulu end" in s, "a token count")
        assert "zulu end" not in counting, "the token count did not move while the paragraph streamed"
        screen = chat.wait_for("zulu end.")
        chat.wait_prompt()
    screen = chat.screen()
    assert screen.count("Alpha bravo") == 1, screen  # the draft was replaced by the rendered paragraph


def test_abhed_run_streams_a_commands_output_on_a_terminal(ws, home, panes):
    with ReplayServer([Turn(calls=[run(TICKS)]), Turn(text="Counted.")]) as server:
        pane = TmuxRun(home, "--endpoint", server.url, "--workspace", str(ws), "--mode", "auto", "count")
        panes.append(pane)
        screen = pane.wait_for("tick 2")
        assert not (ws / "counted").exists(), "the command had ended: nothing was shown while it ran"
        assert re.search(r"running bash \d+s", screen), screen
        screen = pane.wait_for("RUN-EXITED 0")
    assert "Counted." in screen
    assert "running bash" not in screen  # the status line leaves nothing behind
