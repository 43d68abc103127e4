"""The git status summary in the system prompt (issue 17, item 9), and that host git runs nothing
the repository holds while it is computed: judged by marker files on the host."""

from __future__ import annotations

import subprocess
from pathlib import Path

from abhed.agent.gitstatus import git_summary
from abhed.model.replay import ReplayServer, Turn
from agent_helpers import make_agent


def _git(ws: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(ws), *args], check=True,
                   capture_output=True)


def _repo(ws: Path) -> None:
    _git(ws, "init", "-q", "-b", "work")
    (ws / "a.txt").write_text("hi\n")
    _git(ws, "add", "-A")
    _git(ws, "commit", "-qm", "init")


def test_the_system_prompt_carries_branch_and_changed_files_and_fsmonitor_or_hooks_do_not_run(ws, home, tmp_path):
    _repo(ws)
    marker = tmp_path / "pwned"
    _git(ws, "config", "core.fsmonitor", f"touch {marker}; true")
    hook = ws / ".git" / "hooks" / "post-index-change"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    (ws / "a.txt").write_text("ho\n")
    (ws / "new.py").write_text("x = 1\n")
    with ReplayServer([Turn(text="ok")]) as server:
        make_agent(ws, home, server).run("hi")
    system = server.requests[0]["messages"][0]["content"]
    assert "# Git status when the session started\nBranch: work\nChanged files: 2\n   M a.txt\n  ?? new.py" in system
    assert not marker.exists()


def test_a_filter_driver_the_model_could_apply_is_never_run(ws, tmp_path):
    _repo(ws)
    marker = tmp_path / "pwned"
    _git(ws, "config", "filter.evil.clean", f"touch {marker}; cat")
    (ws / ".gitattributes").write_text("*.txt filter=evil\n")  # what a model could write
    (ws / "a.txt").write_text("ho\n")  # same size: status would re-read it through the filter
    assert git_summary(ws) == ("Branch: work\nChanged files: not listed (the repository's config defines filter "
                               "drivers, which `git status` would run)")
    assert not marker.exists()


def test_many_changes_are_cut_with_a_note_and_no_repository_means_no_section(ws, home, tmp_path):
    _repo(ws)
    for n in range(35):
        (ws / f"f{n:02}.txt").write_text("x\n")
    summary = git_summary(ws)
    assert summary is not None and "Changed files: 35" in summary and "  ?? f29.txt" in summary
    assert "f30.txt" not in summary and summary.endswith("  [5 more; run `git status` for all]")
    plain = tmp_path / "plain"
    plain.mkdir()
    assert git_summary(plain) is None
    with ReplayServer([Turn(text="ok")]) as server:
        make_agent(plain, home, server).run("hi")
    assert "Git status" not in server.requests[0]["messages"][0]["content"]


def test_a_rename_is_one_change_and_a_failing_git_leaves_the_summary_out(ws):
    _repo(ws)
    _git(ws, "mv", "a.txt", "b.txt")
    assert git_summary(ws) == "Branch: work\nChanged files: 1\n  R  b.txt"
    (ws / ".git" / "HEAD").write_text("garbage\n")  # git no longer takes it for a repository
    assert git_summary(ws) is None
