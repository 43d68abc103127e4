"""Issue 36 item 2 and the rule-saving part of item 9, in a real terminal (tmux) against the
scripted model server: the approval panel and the transcript show the diff of the file itself
(hunks, line numbers, context), a write of unchanged content shows no added lines, a long diff is
paged with a key and the question comes back, and `s` shows the rule's scope and saves the
narrowest unless the human picks a wider one. Judged by the screen and by what changed on disk."""

from __future__ import annotations

import pytest

from abhed.model.replay import ReplayServer, Turn

pytestmark = pytest.mark.slow


def numbered(count: int, prefix: str = "line") -> str:
    return "".join(f"{prefix} {n}\n" for n in range(1, count + 1))


def test_an_edit_at_line_6_shows_a_hunk_with_context_and_line_numbers(ws, term):
    target = ws / "twenty.txt"
    target.write_text(numbered(20))
    edit = {"path": str(target), "old_string": "line 6\n", "new_string": "line six\n"}
    turns = [Turn(calls=[("read", {"path": str(target)})]), Turn(calls=[("edit", edit)]), Turn(text="Edited.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("change line 6")
        screen = chat.wait_for("Allow? [")
        assert "@@ -3,7 +3,7 @@" in screen, screen  # before: "@@ -1 +1 @@", no context
        rows = [line.strip("│ ").rstrip(" │") for line in screen.splitlines()]
        assert "3   3   line 3" in rows and "6     - line 6" in rows and "6 + line six" in rows, screen
        assert "9   9   line 9" in rows and "10  10   line 10" not in rows
        chat.type("y")
        screen = chat.wait_for("Edited.")
        assert screen.count("@@ -3,7 +3,7 @@") == 2, screen  # the transcript shows the file's diff too
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert target.read_text() == numbered(20).replace("line 6\n", "line six\n")


def test_a_write_of_the_files_own_content_shows_no_added_lines(ws, term):
    target = ws / "same.txt"
    target.write_text(numbered(200))
    turns = [Turn(calls=[("read", {"path": str(target)})]),
             Turn(calls=[("write", {"path": str(target), "content": numbered(200)})]), Turn(text="Wrote.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("rewrite it")
        screen = chat.wait_for("Allow? [")
        assert "no change: the file already has exactly this content" in screen, screen
        assert "+line 1" not in screen and "+ line 1" not in screen  # before: 200 `+` lines
        chat.type("y")
        screen = chat.wait_for("Wrote.")
        assert "Unchanged" in screen and "+ line" not in screen, screen
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")


def test_a_new_file_is_shown_as_new(ws, term):
    target = ws / "fresh.txt"
    turns = [Turn(calls=[("write", {"path": str(target), "content": "alpha\nbeta\n"})]), Turn(text="Made.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("make it")
        screen = chat.wait_for("Allow? [")
        assert "new file: 11 bytes, 2 lines" in screen and "@@ -0,0 +1,2 @@" in screen, screen
        chat.type("n")
        chat.wait_for("Made.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert not target.exists()


def test_a_100_line_diff_pages_with_a_key_and_returns_to_the_question(ws, term):
    target = ws / "long.txt"
    target.write_text(numbered(100, "old"))
    turns = [Turn(calls=[("read", {"path": str(target)})]),
             Turn(calls=[("write", {"path": str(target), "content": numbered(100, "new")})]), Turn(text="Rewrote.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.type("rewrite it")
        screen = chat.wait_for("Allow? [")
        assert "d at the question shows the whole diff" in screen, screen  # before: hidden, no key
        assert "new 100" not in screen
        assert "d  show the whole diff (201 lines), then answer" in screen
        chat.type("d")
        for page in range(1, 5):  # 202 lines, 48 a page in a 50-line pane: four pages, then the end
            chat.wait_for("Enter for more, q to go back to the question", page)
            chat.keys("Enter")
        screen = chat.wait_for("-- end of the diff (202 lines); back to the question --")
        assert "-- lines 1-48 of 202: Enter for more" in screen and "-- lines 145-192 of 202" in screen, screen
        assert "100 + new 100" in screen, screen
        chat.wait_for("Allow? [", 2)  # the same question again
        chat.type("y")
        chat.wait_for("Rewrote.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert target.read_text() == numbered(100, "new")


def test_s_shows_the_rules_scope_and_saves_the_narrowest(ws, tmp_path, term):
    config = tmp_path / "config.toml"
    config.write_text("[approval]\nsave_rules = true\n")
    target = ws / "a.py"
    target.write_text("x = 1\n")
    edit = {"path": str(target), "old_string": "x = 1", "new_string": "x = 2"}
    turns = [Turn(calls=[("read", {"path": str(target)})]), Turn(calls=[("edit", edit)]), Turn(text="Saved.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), env={"ABHED_CONFIG": str(config)})
        chat.wait_for("ends the session.")
        chat.type("edit it")
        chat.wait_for("Allow? [y/a/p/s/n/r]")
        chat.type("s")
        screen = chat.wait_for("Save which? [1/2/n]")
        assert f"save to approval.allow in {config}: it holds in every future session" in screen, screen
        assert "1  edit(a.py)  edit calls on a.py only  (narrowest)" in screen
        assert "2  edit        every edit call, on any file in the workspace" in screen
        chat.keys("Enter")  # the default: the narrowest (before: `s` saved `edit`, every edit, unasked)
        chat.wait_for("saved edit(a.py) to approval.allow in")
        chat.wait_for("Saved.")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert config.read_text() == "[approval]\nallow = [\"edit(a.py)\"]\nsave_rules = true\n"
    assert target.read_text() == "x = 2\n"
