"""Issue 36, the work as it happens: a command's output reaches the display while it runs
(sandbox -> bash tool -> ToolContext.output), bounded and escaped on the status line; a reply's
draft and its estimated tokens; the keys held during a turn. The terminal itself: tests/agent/test_tmux_live36.py."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from abhed.cli import activity as activity_module
from abhed.cli.activity import Activity
from abhed.cli.display import Chat, Progress
from abhed.cli.outputtail import OutputTail
from abhed.gate.approval import Verdict
from abhed.model.wire import ToolCall
from abhed.tools.base import ok
from sandbox.output import OutputCollector


def test_a_commands_output_is_heard_while_it_runs_whole_and_in_order(tools, ws):
    heard: list[str] = []
    before_the_end: list[bool] = []

    def listen(text: str) -> None:
        heard.append(text)
        before_the_end.append(not (ws / "ended").exists())
    tools.ctx.output = listen
    result = tools("bash", command="echo first; sleep 0.3; seq 1 20000; touch ended", description="d")
    assert "omitted from the middle" in result.content  # the model's copy is cut at 30,000 characters...
    assert "".join(heard) == "first\n" + "".join(f"{n}\n" for n in range(1, 20001))  # ...what the display hears is not
    assert heard[0] == "first\n" and before_the_end[0]


def test_the_collector_tells_its_listener_everything_before_it_cuts():
    heard: list[str] = []
    collector = OutputCollector(10, heard.append)
    collector.feed("é".encode()[:1])  # half a character: nothing decoded yet
    collector.feed("é".encode()[1:] + b"0123456789abcdef")
    collector.feed(b"\xc3")  # a character the command never finished
    captured = collector.finish()
    assert heard == ["é0123456789abcdef", "\ufffd"]
    assert captured.omitted_chars == 8
    assert OutputCollector(None).finish().head == ""  # no listener: nothing to tell


def test_the_tail_keeps_the_last_lines_bounded_escaped_and_counts_the_rest():
    tail = OutputTail(lines=3, line_chars=10)
    tail.feed("one\ntwo\nthree\x1b[2J\nfour\nfive")
    assert tail.lines() == ["... 2 earlier lines", "three\\x1b[2J", "four", "five"]
    tail.feed(" more\r\nsix\r10%\r20%")  # \r\n ends a line; a lone \r redraws it
    assert tail.lines() == ["... 3 earlier lines", "four", "five more", "20%"]
    tail.feed("x" * 1_000_000)  # a line without an end: its end is kept, bounded
    assert len(tail._partial) <= 11 and tail.lines()[-1] == "20%xxxxxxx..."
    tail.feed("\n" + "y" * 30 + "\n")
    assert tail.lines()[-1] == "y" * 10 + "..." and tail.total == 7
    tail.feed("z" * 10 + "\n" + "partial")  # ten characters are not cut; a note for one line says "line"
    assert tail.lines() == ["... 6 earlier lines", "y" * 10 + "...", "z" * 10, "partial"]
    tail = OutputTail(lines=2, line_chars=10)
    tail.feed("a\nb\nc")
    assert tail.lines() == ["... 1 earlier line", "b", "c"]
    tail.clear()
    assert tail.lines() == [] and tail.total == 0
    tail.feed("\u202eevil\n")
    assert tail.lines() == ["\\u202eevil"]


def render(activity: Activity) -> str:
    console = Console(file=io.StringIO(), width=40, height=12, force_terminal=False)
    console.print(activity)
    return console.file.getvalue()


def test_the_status_line_shows_the_commands_last_lines_beneath_it():
    activity = Activity(Console(file=io.StringIO(), width=40, height=12))
    activity.start("running bash")
    activity.command_output("tick 1\ntick 2\n\x1b]0;title\x07")
    shown = render(activity).splitlines()
    assert shown[0].endswith("running bash 0s · tokens in 0 out 0") or "running bash 0s" in shown[0]
    assert [line.strip() for line in shown[1:]] == ["tick 1", "tick 2", "\\x1b]0;title\\x07"]
    activity.command_ended()
    assert len(render(activity).splitlines()) == 1


def test_the_draft_shows_its_last_lines_within_the_screen_and_the_tokens_move():
    activity = Activity(Console(file=io.StringIO(), width=40, height=12))
    words = " ".join(f"w{n}" for n in range(200))
    activity.draft = lambda: words
    activity.wrote(len(words))
    shown = render(activity).splitlines()
    assert len(shown) == 12 - activity_module.ROOM + 1  # the draft's last lines, and the status line
    assert shown[-2].rstrip().endswith("w199")
    assert f"out ~{len(words) // 4}" in shown[-1]
    activity.count(100, 50, 150, 1000)  # the server's count replaces the estimate
    assert "out 50 " in activity.line() and "~" not in activity.line()
    activity.wrote(40)  # a reply that failed: the model is asked again
    activity.new_reply()
    activity.wrote(3)  # under a token
    assert "~" not in activity.line()
    activity.wrote(1)
    activity.count(0, 0, 0, 0)
    activity.wrote(3)
    assert "~" not in activity.line()
    activity.command_output("one\ntwo\n")  # the command's lines take their room from the draft's
    assert len(render(activity).splitlines()) == 12 - activity_module.ROOM + 1
    small = Activity(Console(file=io.StringIO(), width=40, height=3))
    small.draft = lambda: words
    assert len(small._draft_lines(0)) == 1  # a screen too small still shows the last line


def call(name: str = "bash") -> ToolCall:
    return ToolCall(id="c1", name=name, arguments='{"command": "ls", "description": "d"}')


def test_progress_off_a_terminal_prints_the_same_lines_and_no_output():
    out = io.StringIO()
    progress = Progress(out)
    progress.tool_started(call())
    progress.command_output("tick 1\n")
    progress.tool_finished(call(), ok("tick 1\n[exit code 0]", exit_code=0))
    assert progress.activity is None
    assert out.getvalue() == "-> bash d\n   ok: exit 0: tick 1\n"


def test_an_approved_call_gets_its_status_line_back_a_declined_one_not(monkeypatch):
    display = Chat(Console(file=io.StringIO(), width=80, force_terminal=False))
    display.tool_started(call())
    verdict = Verdict("ask", "asked")
    for typed, running in (("y", "running bash"), ("n", "")):
        display.activity.stop()
        monkeypatch.setattr(display.console, "input", lambda prompt, typed=typed: typed)
        display.ask("bash", SimpleNamespace(command="ls", description="d"), verdict)
        assert display.activity._what == running


def test_the_tail_is_the_same_however_the_output_is_split():
    import random
    rng = random.Random(36)
    for _ in range(200):
        text = "".join(rng.choice(["a", "bc", "\n", "\r", "\r\n", "\x1b", "é"]) for _ in range(rng.randrange(60)))
        whole, pieces = OutputTail(lines=3, line_chars=4), OutputTail(lines=3, line_chars=4)
        whole.feed(text)
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, 4)))
        for start, end in zip([0, *cuts], [*cuts, len(text)]):
            pieces.feed(text[start:end])
        expected = [line for line in text.split("\n")]
        assert pieces.lines() == whole.lines(), repr(text)
        assert whole.total == len(expected) - 1
