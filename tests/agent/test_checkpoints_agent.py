"""Checkpoints as a person meets them in `abhed run` and `abhed chat` (issue 16), on the replay server."""

from __future__ import annotations

import re

from abhed.model.replay import ReplayServer, Turn
from test_cli_agent import abhed


def test_run_prints_the_checkpoint_range_and_one_undo_takes_the_whole_run_back(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    (ws / "old").mkdir()
    (ws / "old" / "keep.txt").write_text("kept\n")
    turns = [Turn(calls=[("read", {"path": str(ws / "a.py")})]),
             Turn(calls=[("edit", {"path": str(ws / "a.py"), "old_string": "x = 1", "new_string": "x = 2"})]),
             Turn(calls=[("bash", {"command": "python3 -c \"import shutil; shutil.rmtree('old')\"",
                                   "description": "tidy"})]),
             Turn(calls=[("write", {"path": str(ws / "b.py"), "content": "y = 1\n"})]),
             Turn(text="Done.")]
    with ReplayServer(turns) as server:
        proc = abhed("run", "change things", "--endpoint", server.url, "--mode", "auto",
                     home=home, cwd=ws)
    assert proc.returncode == 0, proc.stderr
    [r1] = re.findall(r"abhed: session (\S+); spent", proc.stderr)
    assert not (ws / "old").exists() and (ws / "b.py").exists()  # the run really changed them
    assert f"abhed: checkpoints 1-3 (undo this run: abhed undo --to 1 {r1})" in proc.stderr
    listing = abhed("checkpoints", r1, home=home, cwd=ws)
    rows = listing.stdout.splitlines()
    assert rows[0].startswith("   1  ") and " main     edit /" in rows[0] and rows[0].endswith("1 (M a.py)")
    assert " bash python3 -c " in rows[1] and rows[1].endswith("1 (D old/keep.txt)")
    assert rows[2].startswith("   3  ") and rows[2].endswith("1 (A b.py)")
    undone = abhed("undo", "--to", "1", r1, "--yes", home=home, cwd=ws)
    assert undone.returncode == 0, undone.stderr
    assert (ws / "a.py").read_text() == "x = 1\n" and (ws / "old" / "keep.txt").read_text() == "kept\n"
    assert not (ws / "b.py").exists()


def test_a_read_only_run_prints_no_range(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    turns = [Turn(calls=[("bash", {"command": "cat a.py", "description": "look"})]), Turn(text="x is 1.")]
    with ReplayServer(turns) as server:
        proc = abhed("run", "what is x?", "--endpoint", server.url, "--mode", "auto", home=home, cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert "checkpoint" not in proc.stderr


def test_chat_notes_each_checkpoint_and_undo_tells_the_model(ws, home):
    turns = [Turn(calls=[("write", {"path": str(ws / "b.py"), "content": "y = 1\n"})]), Turn(text="Made b.py."),
             Turn(text="Noted.")]
    with ReplayServer(turns) as server:
        proc = abhed("chat", "--endpoint", server.url, "--workspace", str(ws), "--mode", "accept-edits",
                     home=home, input="make b.py\n/undo\ny\nwhat now?\n")
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
        assert "checkpoint 1 (/undo takes this call back)" in out
        assert "Undo to before checkpoint 1 changes 1 file" in out and "delete b.py" in out
        assert "Undone: the workspace is as it was before checkpoint 1" in out
        assert not (ws / "b.py").exists()
        said = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"]
        assert any("the user undid the changes since checkpoint 1" in text for text in said)


def test_chat_undo_explains_bad_arguments_and_refusals(ws, home):
    with ReplayServer([Turn(text="Hello.")]) as server:
        proc = abhed("chat", "--endpoint", server.url, "--workspace", str(ws), home=home,
                     input="/undo what\n/undo\n")
    assert proc.returncode == 0, proc.stderr
    assert "use /undo (the last call), /undo N" in proc.stdout
    assert "has no checkpoints, so there is nothing to undo" in proc.stdout
