"""A session as markdown (cli/mdexport.py): `abhed sessions export ID --format markdown` and chat's
/export. What it holds, its bounds, and that writing it never replaces a file or follows a link
the model planted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from abhed.model.replay import ReplayServer, Turn
from abhed.cli import mdexport as markdown
from agent_helpers import make_agent
from test_cli_agent import abhed


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def bash(command: str) -> tuple[str, dict]:
    return ("bash", {"command": command, "description": "run it"})


@pytest.fixture
def session(ws, home):  # type: ignore[no-untyped-def]
    hostile = "```\n# not a heading\x1b[2J\n" + ("y" * 80 + "\n") * 100
    (ws / "f.txt").write_text(hostile)
    turns = [Turn(text="Looking.", calls=[("read", {"path": str(ws / "f.txt")})]), Turn(calls=[bash("touch made && echo hi")]),
             Turn(text="All **done**.")]
    with ReplayServer(turns) as server:
        agent = make_agent(ws, home, server, mode="auto")
        agent.run("please look at f.txt")
    return agent.ctx.session


def test_the_document_holds_the_prompt_the_text_each_call_its_approval_and_its_result(session):
    text = markdown.render(session)
    assert text.startswith(f"# Abhed session {session.id}\n")
    for part in ("## Run 1: ", "### User\n\nplease look at f.txt", "### Assistant\n\nLooking.", "**read**",
                 "**bash**", '"command": "touch made && echo hi"', "approval: allow by mode auto", "result:", "hi",
                 "### Assistant\n\nAll **done**.", "*run done*"):
        assert part in text, part


def test_a_result_is_bounded_fenced_beyond_its_backticks_and_its_controls_escaped(session):
    text = markdown.render(session)
    assert "\x1b" not in text and "\\x1b[2J" in text
    assert "characters cut here; the whole text is in the log: abhed sessions show ID --full]" in text
    assert "\n````\n" in text  # a fence longer than the ``` the file holds: the result cannot close it
    assert len(text) < 12_000


def test_export_writes_a_new_file_and_refuses_an_existing_one(session, ws):
    path = markdown.target("out/s.md", ws)
    assert path == ws / "out" / "s.md"
    with pytest.raises(markdown.ExportError, match="cannot create .*out/s.md: No such file or directory"):
        markdown.write_new(path, "x", ws)
    (ws / "keep.md").write_text("mine\n")
    with pytest.raises(markdown.ExportError, match="keep.md exists: the export never replaces a file"):
        markdown.write_new(ws / "keep.md", "x", ws)
    assert (ws / "keep.md").read_text() == "mine\n"
    markdown.write_new(ws / "new.md", "# doc\n", ws)
    assert (ws / "new.md").read_text() == "# doc\n"
    assert (ws / "new.md").stat().st_mode & 0o777 == 0o644 & ~umask()
    assert markdown.target("~/x.md", ws) == Path.home() / "x.md" and markdown.target("/a/../b.md", ws) == Path("/b.md")


def test_a_link_the_model_planted_in_the_workspace_writes_nothing_outside(ws, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "exports").symlink_to(outside)  # a directory swapped for a link
    (ws / "abhed-x.md").symlink_to(tmp_path / "victim.md")  # the default name, planted as a link
    with pytest.raises(markdown.ExportError, match="a symlink is on the way"):
        markdown.write_new(ws / "exports" / "s.md", "x", ws)
    with pytest.raises(markdown.ExportError):
        markdown.write_new(ws / "abhed-x.md", "x", ws)
    assert list(outside.iterdir()) == [] and not (tmp_path / "victim.md").exists()


def test_sessions_export_markdown_prints_or_writes_a_new_file(session, home, tmp_path):
    printed = abhed("sessions", "export", session.id, "--format", "markdown", home=home)
    assert printed.returncode == 0 and printed.stdout == markdown.render(session)
    out = tmp_path / "s.md"
    written = abhed("sessions", "export", session.id, "--format", "markdown", "-o", str(out), home=home)
    assert written.returncode == 0 and out.read_text() == printed.stdout and f"wrote {out}" in written.stderr
    assert out.stat().st_mode & 0o777 == 0o644 & ~umask()
    again = abhed("sessions", "export", session.id, "--format", "markdown", "-o", str(out), home=home)
    assert again.returncode == 2 and "exists: the export never replaces a file" in again.stderr
    jsonl = abhed("sessions", "export", session.id, home=home)
    assert jsonl.returncode == 0 and jsonl.stdout.startswith('{"type": "session"')
