"""What chat shows: collapsed bash output, diffs of edits and writes, markdown streamed by whole
blocks, glob's count, slash command parsing; everything made printable."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from abhed.cli import diffview, slash
from abhed.cli.display import Chat, collapsed, outcome
from abhed.model.wire import ToolCall
from abhed.tools.base import ok


def test_bash_output_keeps_head_and_tail_and_counts_the_middle():
    content = "\n".join(f"line {n}" for n in range(1, 21)) + "\n[exit code 0]"
    assert collapsed(content) == "line 1\nline 2\nline 3\n... 14 more lines ...\nline 18\nline 19\nline 20"
    assert collapsed("a\nb\n[exit code 1]") == "a\nb"
    assert collapsed("\x1b[2Jevil\n[exit code 0]") == "\\x1b[2Jevil"


def test_edit_and_write_diffs_are_coloured_sized_bounded_and_printable():
    edit = diffview.render("edit", SimpleNamespace(old_string="a\nb\n", new_string="a\nB\x07\n"))
    assert edit.plain.splitlines()[0] == "+1 -1 lines" and "-b" in edit.plain and "+B\\x07" in edit.plain
    assert any(span.style == "red" for span in edit.spans) and any(span.style == "green" for span in edit.spans)
    write = diffview.render("write", SimpleNamespace(content="".join(f"{n}\n" for n in range(100))), max_lines=5)
    assert write.plain.splitlines()[0] == "290 bytes, 100 lines"
    assert write.plain.splitlines()[-1] == "... 95 more lines not shown"


def chat() -> tuple[Chat, io.StringIO]:
    out = io.StringIO()
    return Chat(Console(file=out, width=40, force_terminal=False)), out


def test_markdown_is_shown_by_whole_blocks_without_breaking_words():
    display, out = chat()
    display.text("# Plan\n\nA paragraph long enough to wrap across the forty ")
    assert "Plan" in out.getvalue() and "paragraph" not in out.getvalue()  # the block is not complete yet
    display.text("columns of this terminal.\n\n```python\nx = 1\n")
    assert "paragraph" in out.getvalue() and "x = 1" not in out.getvalue()  # inside an open fence
    display.text("```\ntail \x1b[31m")
    display.reply_done(True)
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert "A paragraph long enough to wrap across" in lines and "the forty columns of this terminal." in lines
    assert any("x = 1" in line for line in lines) and "tail \\x1b[31m" in lines


def test_the_tool_line_of_glob_gives_its_count_and_an_edit_its_diff():
    call = ToolCall(id="1", name="glob", arguments='{"pattern": "*.py"}')
    assert outcome(call, ok("/w/a.py\n/w/b.py", matches=2)) == "2 files matched"
    display, out = chat()
    edit = ToolCall(id="2", name="edit", arguments='{"path": "/w/a.py", "old_string": "x = 1", "new_string": "x = 2"}')
    display.tool_finished(edit, ok("Edited /w/a.py", path="/w/a.py"))
    assert "-x = 1" in out.getvalue() and "+x = 2" in out.getvalue()


def test_slash_commands_are_parsed_and_paths_are_messages():
    assert slash.parse("/mode auto") == ("mode", "auto")
    assert slash.parse("  /help ") == ("help", "")
    assert slash.parse("/etc/hosts is wrong") is None and slash.parse("fix /tmp") is None
