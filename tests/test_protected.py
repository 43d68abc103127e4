"""Issue 12 item 3, file-tool side: write/edit never change what host git (or Abhed) obeys without a
human's confirmation, in any mode. Judged by what host git runs afterwards."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sandbox.config import DEFAULT_PROTECTED_PATHS

from abhed import protected
from abhed.approval import Gate, Policy
from abhed_testing import Tools


def _git(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env)


@pytest.fixture
def repo(ws: Path) -> Path:
    assert _git("init", "-q", cwd=ws).returncode == 0
    return ws


def unattended(ws: Path, home: Path, mode: str) -> Tools:
    """An `abhed run` session: nobody to ask, edits allowed by the mode."""
    return Tools(ws, home, {"create_parents": True}, gate=Gate(Policy.create(mode, [], [], ws)))


def _target(ws: Path, entry: str) -> Path:
    return ws / entry / "x" if entry.endswith("/") else ws / entry


@pytest.mark.parametrize("mode", ["accept-edits", "auto"])
@pytest.mark.parametrize("entry", DEFAULT_PROTECTED_PATHS)
def test_every_protected_entry_needs_a_human_in_every_mode(repo, home, mode, entry):
    tools = unattended(repo, home, mode)
    target = _target(repo, entry)
    before = target.read_bytes() if target.exists() else None
    err = tools.err("write", path=str(target), content="[core]\n\tfsmonitor = touch /tmp/pwned\n")
    assert "needs approval" in err and "protected path" in err and "confirmation in every mode" in err
    assert "--confirm" in err
    assert (target.read_bytes() if target.exists() else None) == before


@pytest.mark.parametrize("entry", [e for e in DEFAULT_PROTECTED_PATHS if e.startswith(".git/")])
def test_a_nested_repository_is_protected_too(ws, home, entry):
    sub = ws / "vendor" / "lib"
    sub.mkdir(parents=True)
    assert _git("init", "-q", cwd=sub).returncode == 0
    target = _target(sub, entry)
    err = unattended(ws, home, "auto").err("write", path=str(target), content="x\n")
    assert "protected path" in err and str(target) in err


@pytest.mark.parametrize("rel", [".git/config", "deep/er/.git/config", "sub/.git"])
def test_creating_a_git_entry_needs_a_human(ws, home, rel):
    err = unattended(ws, home, "auto").err("write", path=str(ws / rel), content="[core]\n")
    assert "needs approval" in err and ".git" in err
    assert not (ws / rel).exists() and not (ws / rel.split("/.git")[0] / ".git").exists()


def test_a_git_file_of_a_worktree_cannot_be_rewritten_unattended(ws, home):
    (ws / ".git").write_text("gitdir: /real/repo/.git/worktrees/w\n")
    tools = unattended(ws, home, "auto")
    err = tools.err("write", path=str(ws / ".git"), content="gitdir: /tmp/evil\n")
    assert "repository marker host git obeys" in err
    assert (ws / ".git").read_text() == "gitdir: /real/repo/.git/worktrees/w\n"


def test_edit_of_git_config_needs_a_human(repo, home):
    tools = unattended(repo, home, "auto")
    tools.ok("read", path=str(repo / ".git" / "config"))
    before = (repo / ".git" / "config").read_text()
    err = tools.err("edit", path=str(repo / ".git" / "config"), old_string="[core]",
                    new_string="[core]\n\tfsmonitor = touch /tmp/pwned")
    assert "needs approval" in err and "protected path .git/config" in err
    assert (repo / ".git" / "config").read_text() == before


def test_a_human_can_confirm_it(repo, home):
    tools = Tools(repo, home, gate=Gate(Policy.create("auto", [], [], repo), confirmed=True))
    tools.ok("read", path=str(repo / ".git" / "config"))
    tools.ok("edit", path=str(repo / ".git" / "config"), old_string="[core]", new_string="[core]\n\tautocrlf = false")
    assert "autocrlf = false" in (repo / ".git" / "config").read_text()


def test_a_symlink_into_a_protected_path_is_judged_where_it_leads(repo, home):
    """The approval layer resolves the link and asks; the tool re-checks when it runs, and refuses
    a path that leads into a protected one unless it was named directly (the swap-after-approval race)."""
    (repo / "innocent.txt").symlink_to(repo / ".git" / "config")
    before = (repo / ".git" / "config").read_text()
    err = Tools(repo, home).err("write", path=str(repo / "innocent.txt"), content="[core]\n\tfsmonitor = x\n")
    assert f"changes {repo / '.git' / 'config'}, inside the protected path .git/config" in err
    assert "needs approval" in err
    confirmed = Tools(repo, home, gate=Gate(Policy.create("auto", [], [], repo), confirmed=True))
    confirmed.ok("read", path=str(repo / "innocent.txt"))
    err = confirmed.err("write", path=str(repo / "innocent.txt"), content="[core]\n\tfsmonitor = x\n")
    assert f"resolves through a symlink to {repo / '.git' / 'config'}, which is protected" in err
    assert f"name {repo / '.git' / 'config'} itself, so a human is asked to confirm it" in err
    assert (repo / ".git" / "config").read_text() == before


def test_a_symlink_outside_the_workspace_pointing_into_a_protected_path_is_resolved(repo, home, tmp_path):
    """Issue 12 item 9: an operator root outside the workspace holding a link to .git/hooks."""
    other = tmp_path / "shared"
    other.mkdir()
    (repo / ".git" / "hooks").mkdir(exist_ok=True)
    (other / "hooks").symlink_to(repo / ".git" / "hooks")
    tools = Tools(repo, home, roots=[repo, other], gate=Gate(Policy.create("auto", [], [], repo)))
    err = tools.err("write", path=str(other / "hooks" / "post-checkout"), content="#!/bin/sh\ntouch /tmp/p\n")
    assert "protected path .git/hooks/" in err
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    assert protected.through_link(str(other / "hooks" / "x"), repo / ".git" / "hooks" / "x", repo) is not None


def test_host_git_runs_nothing_the_session_wrote(repo, home, tmp_path):
    """The rule to reach: after unconfirmed write/edit calls, `git status` on the host runs nothing."""
    marker = tmp_path / "payload-ran"
    payload = f"touch {marker}"
    (repo / "a.txt").write_text("a\n")
    tools = unattended(repo, home, "auto")
    tools.ok("read", path=str(repo / ".git" / "config"))
    attempts = [
        ("edit", {"path": str(repo / ".git" / "config"), "old_string": "[core]",
                  "new_string": f"[core]\n\tfsmonitor = {payload}"}),
        ("write", {"path": str(repo / ".git" / "hooks" / "pre-commit"), "content": f"#!/bin/sh\n{payload}\n"}),
        ("write", {"path": str(repo / ".git" / "commondir"), "content": str(tmp_path / "evil") + "\n"}),
        ("write", {"path": str(repo / "nested" / ".git" / "config"), "content": f"[core]\n\tfsmonitor = {payload}\n"}),
        ("write", {"path": str(repo / ".abhed" / "config.toml"), "content": "[approval]\nmode = \"auto\"\n"}),
    ]
    if ".git/info/" in DEFAULT_PROTECTED_PATHS:  # the sandbox's list (its branch adds it)
        attempts.append(("write", {"path": str(repo / ".git" / "info" / "attributes"), "content": "* filter=x\n"}))
    for name, args in attempts:
        result = tools(name, **args)
        assert result.is_error, (name, args)
    for where in (repo, repo / "nested") if (repo / "nested").is_dir() else (repo,):
        _git("status", cwd=where)
        _git("commit", "-qam", "x", cwd=where)
    assert not marker.exists()
    assert not (repo / "nested" / ".git").exists()


def test_protection_reasons_name_the_entry(tmp_path):
    (tmp_path / ".git").mkdir()
    assert "protected path .git/config" in protected.reason(tmp_path / ".git" / "config")
    assert protected.reason(tmp_path / ".git" / "configs") is None
    assert protected.reason(tmp_path / ".git" / "HEAD") is None
    assert protected.reason(tmp_path / "a.git" / "config") is None
    assert protected.reason(tmp_path / "src" / "config") is None
    assert protected.reason(tmp_path / "src" / "hooks" / "x") is None
    assert "protected path .abhed/" in protected.reason(tmp_path / ".abhed")
    assert "protected path .git/commondir" in protected.reason(tmp_path / "sub" / ".git" / "commondir")
    assert "creates the repository directory" in protected.reason(tmp_path / "sub" / ".git" / "HEAD")
    assert protected.confirmation_needed(None, tmp_path) is None
    assert protected.confirmation_needed(str(tmp_path / "x\x00"), tmp_path) is None
    assert protected.confirmation_needed("src/../.git/config", tmp_path) is not None
