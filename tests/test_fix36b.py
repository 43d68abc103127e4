"""Issue 36 items 8-9, below the terminal: the prompt on the command line (`abhed PROMPT`), a relative
attachment and the symlink a hostile model may plant for it, a failed call's whole error, the
refusal a human's decline becomes, and what /compact keeps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from abhed.agent import compaction
from abhed.model.wire import Msg
from abhed.cli import errorview
from abhed.cli.attachments import attach, candidates
from abhed.cli.commands import main
from abhed.files.images import ImageLimits
from abhed.gate.approval import Answer, Gate, Policy, Verdict, refusal
from media_testing import image

VISION = ImageLimits(max_images=2, max_pixels=100_000, max_bytes=4 * 1024 * 1024)


# -- abhed PROMPT ----------------------------------------------------------------------------------

def _routed(monkeypatch, *argv: str) -> tuple[str, dict]:
    """Which command `abhed ARGV` runs, and with what, without running it."""
    seen: dict = {}

    def fake(name):
        def callback(**kw):
            seen.update(command=name, **kw)
        return callback
    for name in ("chat", "run", "doctor"):
        monkeypatch.setattr(main.commands[name], "callback", fake(name))
    result = CliRunner().invoke(main, list(argv))
    return result.output, seen


@pytest.mark.parametrize("argv, prompt", [(["fix the test"], "fix the test"), (["chat", "fix it"], "fix it"),
                                          (["--", "run"], "run"), (["chat", "run"], "run"),
                                          (["fix", "--mode", "auto"], "fix")])
def test_words_that_are_no_command_are_chats_prompt(monkeypatch, argv, prompt):
    output, seen = _routed(monkeypatch, *argv)
    assert seen["command"] == "chat" and seen["prompt"] == prompt, output


def test_a_command_stays_a_command_and_a_typo_is_not_sent_to_the_model(monkeypatch):
    assert _routed(monkeypatch, "run", "go")[1]["command"] == "run"
    assert _routed(monkeypatch, "doctor")[1]["command"] == "doctor"
    assert _routed(monkeypatch)[1]["command"] == "chat"  # bare abhed, as before
    output, seen = _routed(monkeypatch, "doctr")
    assert seen == {} and "did you mean `abhed doctor`?" in output and "abhed chat doctr" in output
    assert _routed(monkeypatch, "hello")[1]["prompt"] == "hello"  # no command is near it


def test_help_and_version_are_the_groups(monkeypatch):
    assert "[COMMAND | PROMPT]" in _routed(monkeypatch, "--help")[0]
    assert "abhed, version" in _routed(monkeypatch, "--version")[0]


def test_an_empty_prompt_is_refused():
    result = CliRunner().invoke(main, ["chat", "  "])
    assert result.exit_code == 2 and "The prompt is empty" in result.output


# -- attachments by a relative path ----------------------------------------------------------------

def test_a_relative_path_is_looked_for_where_the_human_is_then_at_the_root(tmp_path):
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "here.png").write_bytes(image("PNG", 40, 30))
    (ws / "root.png").write_bytes(image("PNG", 40, 30))
    found = candidates("compare here.png with root.png, and ./sub/here.png", cwd=ws / "sub", workspace=ws)
    assert found == [ws / "sub" / "here.png", ws / "root.png"]
    assert candidates("here.png", cwd=None, workspace=None) == []  # no base given: as before
    assert candidates("the png", cwd=ws / "sub", workspace=ws) == []


def test_a_symlink_in_the_workspace_to_an_image_outside_is_not_attached(tmp_path):
    """A hostile model makes shot.png a link to an image of the human's; they type "see shot.png"."""
    secret = tmp_path / "private" / "passport.png"
    secret.parent.mkdir()
    secret.write_bytes(image("PNG", 64, 48))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "shot.png").symlink_to(secret)
    (ws / "dir").symlink_to(secret.parent)
    attached = attach("see shot.png and dir/passport.png", VISION, cwd=ws, workspace=ws)
    assert attached.images == [] and attached.lines == [] and attached.prompt == "see shot.png and dir/passport.png"
    named = attach(f"see {ws / 'shot.png'}", VISION, cwd=ws, workspace=ws)  # by its absolute path: the same
    assert named.images == []
    outside = attach(f"see {secret}", VISION, cwd=ws, workspace=ws)  # the human names the file itself
    assert len(outside.images) == 1


def test_a_fifo_named_like_an_image_does_not_hang_the_chat(tmp_path):
    os.mkfifo(tmp_path / "pipe.png")
    assert candidates("look at pipe.png", cwd=tmp_path, workspace=tmp_path) == []


def test_a_relative_path_leading_out_of_the_workspace_is_opened_as_named(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "beside.png").write_bytes(image("PNG", 40, 30))
    assert candidates("see ../beside.png", cwd=ws, workspace=ws) == [tmp_path / "beside.png"]


# -- a failed call's whole error -------------------------------------------------------------------

def test_the_rest_of_an_error_is_shown_bounded_and_escaped():
    lines = [f"- problem {n}" for n in range(30)]
    error = "Invalid arguments for `task`:\n" + "\n".join(lines) + "\n\x1b[2Jcleared"
    rest = errorview.rest(error, "Invalid arguments for `task`:")
    assert rest[:errorview.MAX_LINES] == lines[:errorview.MAX_LINES]
    assert rest[-1] == f"... {31 - errorview.MAX_LINES} more lines (the model reads the whole error)"
    assert errorview.rest("one line only", "one line only") == []
    assert errorview.rest("first\n\x1b[31mred", "first") == ["\\x1b[31mred"]
    long = "x" * 1000
    assert errorview.rest(f"first\n{long}", "first") == ["x" * errorview.LINE_CHARS + "... (600 more characters)"]


def test_a_first_line_the_result_line_cut_is_shown_whole():
    first = "Not run: " + "y" * 200
    assert errorview.rest(first, first[:107] + "...") == [first]


# -- a human's decline -----------------------------------------------------------------------------

def _declined(reason: str) -> Verdict:
    gate = Gate(Policy.create("ask", [], [], Path("/nonexistent")), ask_human=lambda *_: Answer(False, reason=reason))
    return gate.confirm("bash", None, Verdict("ask", "bash runs commands"))


def test_a_decline_with_a_reason_tells_the_model_a_human_said_it():
    message = refusal("bash", _declined("use the Makefile"), None)
    assert "(the human declined it: use the Makefile)" in message
    assert "A human at the terminal declined this call (not the operator's configuration)" in message
    assert "do what it says instead" in message and "The operator's configuration decides this" not in message


def test_a_decline_without_a_reason_says_to_ask_them():
    message = refusal("bash", _declined(""), None)
    assert "A human at the terminal declined this call" in message and "ask them what they want" in message


def test_a_deny_rule_still_names_the_configuration():
    message = refusal("bash", Verdict("deny", "denied by approval.deny bash(rm:*)"), None)
    assert "The operator's configuration decides this" in message and "A human" not in message


# -- /compact --------------------------------------------------------------------------------------

def test_compact_keeps_the_latest_turn_only():
    messages = [Msg("user", "first"), Msg("assistant", "one"), Msg("user", "[Abhed: mode auto]"),
                Msg("user", "second"), Msg("assistant", "calling"), Msg("tool", "result"), Msg("assistant", "two")]
    assert compaction.last_turn(messages) == 4
    assert compaction.last_turn(messages[:2]) == 1  # one turn: nothing older
    assert compaction.last_turn([Msg("user", "[Abhed: mode auto]")]) == 1


def test_every_display_shows_the_rest_of_an_error_under_its_line():
    import io

    from rich.console import Console

    from abhed.cli.display import Chat, Progress
    from abhed.model.wire import ToolCall
    from abhed.tools.base import fail
    call = ToolCall(id="1", name="task", arguments='{"prompt": 3}')
    error = fail("Invalid arguments for `task`:\n- `prompt`: bad \x1b[2J\nCall task again")
    out = io.StringIO()
    chat = Chat(Console(file=out, width=100, force_terminal=False))
    chat.tool_finished(call, error)
    chat.subagent("1.1", "helper").tool_finished(call, error)
    shown = out.getvalue()
    assert shown.count("- `prompt`: bad \\x1b[2J") == 2 and shown.count("Call task again") == 2
    assert "\x1b" not in shown
    log = io.StringIO()
    progress = Progress(log)
    progress.tool_finished(call, error)
    progress.subagent("1.1", "helper").tool_finished(call, error)
    assert log.getvalue().count("          - `prompt`: bad \\x1b[2J\n") == 2
    assert log.getvalue().count("Call task again") == 2
