"""Issue 12 item 3, file-tool side: write/edit never change what host git (or Abhed) obeys without a
human's confirmation, in any mode. Judged by what host git runs afterwards."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sandbox.config import DEFAULT_PROTECTED_PATHS

from abhed.gate import protected
from abhed.gate.approval import Gate, Policy
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
    assert "a .git entry in the workspace root is a git repository or a pointer to one" in err
    assert (ws / ".git").read_text() == "gitdir: /real/repo/.git/worktrees/w\n"


def test_edit_of_git_config_needs_a_human(repo, home):
    tools = unattended(repo, home, "auto")
    tools.ok("read", path=str(repo / ".git" / "config"))
    before = (repo / ".git" / "config").read_text()
    err = tools.err("edit", path=str(repo / ".git" / "config"), old_string="[core]",
                    new_string="[core]\n\tfsmonitor = touch /tmp/pwned")
    assert "needs approval" in err and "a protected path: .git/config decides what host git runs" in err
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
    err = unattended(repo, home, "auto").err("write", path=str(repo / "innocent.txt"), content="[core]\n\tfsmonitor = x\n")
    assert f"changes {repo / '.git' / 'config'}, a protected path: .git/config decides" in err
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
    assert "a protected path: .git/hooks decides" in err
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    assert protected.through_link(str(other / "hooks" / "x"), repo / ".git" / "hooks" / "x", repo, repo) is not None


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
    assert ".git/config decides" in protected.reason(tmp_path / ".git" / "config", tmp_path)
    assert protected.reason(tmp_path / ".git" / "configs", tmp_path) is None
    assert protected.reason(tmp_path / ".git" / "HEAD", tmp_path) is None
    assert protected.reason(tmp_path / "a.git" / "config", tmp_path) is None
    assert protected.reason(tmp_path / "src" / "config", tmp_path) is None
    assert protected.reason(tmp_path / "src" / "hooks" / "x", tmp_path) is None
    assert ".abhed/ holds Abhed's own" in protected.reason(tmp_path / ".abhed", tmp_path)
    assert ".git/commondir decides" in protected.reason(tmp_path / "sub" / ".git" / "commondir", tmp_path)
    assert "creates the repository directory" in protected.reason(tmp_path / "sub" / ".git" / "HEAD", tmp_path)
    assert protected.confirmation_needed(None, tmp_path) is None
    assert protected.confirmation_needed(str(tmp_path / "x\x00"), tmp_path) is None
    assert protected.confirmation_needed("src/../.git/config", tmp_path) is not None


def _operator(ws: Path, home: Path, *entries: str) -> Tools:
    """A human confirming every call: only the operator's entries stand in the way."""
    tools = Tools(ws, home)
    tools.settings.sandbox.protected_paths.extend(entries)
    return tools


def test_operator_entries_are_read_only_for_write_and_edit_too(ws, home):
    """Bash sees `sandbox.protected_paths` entries read-only; the file tools refuse them outright, even
    confirmed, and say which entry and what to do. Judged by the files on disk."""
    (ws / "secrets").mkdir()
    (ws / "secrets" / "key").write_text("k\n")
    (ws / "deploy.sh").write_text("echo ok\n")
    tools = _operator(ws, home, "secrets/", "deploy.sh")
    tools.ok("read", path=str(ws / "deploy.sh"))
    tools.ok("read", path=str(ws / "secrets" / "key"))
    err = tools.err("edit", path=str(ws / "deploy.sh"), old_string="ok", new_string="pwned")
    assert f"{ws / 'deploy.sh'} is inside deploy.sh, which the operator listed in sandbox.protected_paths" in err
    assert "It was not changed" in err and "ask the operator to remove 'deploy.sh'" in err
    err = tools.err("write", path=str(ws / "secrets" / "key"), content="x\n")
    assert "inside secrets/, which the operator listed" in err
    err = tools.err("write", path=str(ws / "secrets" / "new" / "file"), content="x\n")
    assert "inside secrets/" in err
    assert (ws / "deploy.sh").read_text() == "echo ok\n" and (ws / "secrets" / "key").read_text() == "k\n"
    assert not (ws / "secrets" / "new").exists()
    tools.ok("write", path=str(ws / "secrets2.txt"), content="a prefix is not the entry\n")
    (ws / "sub").mkdir()
    tools.ok("write", path=str(ws / "sub" / "deploy.sh"), content="another directory's file\n")


def test_operator_entries_are_judged_where_a_symlink_leads(ws, home):
    (ws / "secrets").mkdir()
    (ws / "secrets" / "key").write_text("k\n")
    (ws / "innocent").symlink_to(ws / "secrets" / "key")
    (ws / "alias").symlink_to(ws / "secrets")
    tools = _operator(ws, home, "secrets")
    tools.ok("read", path=str(ws / "innocent"))
    assert "inside secrets, which the operator listed" in tools.err("write", path=str(ws / "innocent"), content="x\n")
    assert "inside secrets" in tools.err("write", path=str(ws / "alias" / "new"), content="x\n")
    assert (ws / "secrets" / "key").read_text() == "k\n" and not (ws / "secrets" / "new").exists()


def test_default_entries_still_ask_instead_of_refusing(repo, home):
    """Listing a default entry again does not turn its confirmation into a refusal."""
    tools = _operator(repo, home, ".git/hooks/")
    tools.ok("write", path=str(repo / ".git" / "hooks" / "pre-commit"), content="#!/bin/sh\n")


def test_the_name_rule_is_the_sandboxs(tmp_path):
    """One rule for every tool: sandbox.protect.protected_reason decides, applied to the path relative to the
    workspace; the file tools add only the creation of a missing .git directory."""
    assert ".git/modules decides" in protected.reason(tmp_path / "a" / ".git" / "modules" / "x" / "config", tmp_path)
    assert ".git/info decides" in protected.reason(tmp_path / ".git" / "info" / "exclude", tmp_path)
    assert ".abhed/ holds" in protected.reason(tmp_path / ".abhed" / "rules.toml", tmp_path)
    assert protected.reason(tmp_path / "vendor" / ".abhed" / "x", tmp_path) is None  # only the root's is Abhed's
    outside = tmp_path.parent / "elsewhere"
    assert ".git/hooks decides" in protected.reason(outside / ".git" / "hooks" / "x", tmp_path)
    assert protected.operator_entry("a", tmp_path / "a", tmp_path, tmp_path, [".git/config"]) is None
    assert protected.operator_entry(str(outside / "s"), outside / "s", tmp_path, tmp_path, ["s"]) is None


def _git_on_a_terminal(*args: str, cwd: Path) -> None:
    """git as a person at a terminal runs it: stdout a tty, so git starts the configured pager
    (PAGER=cat stands in for the person's own; core.pager, if any, wins over it)."""
    primary, secondary = os.openpty()
    try:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1", "TERM": "dumb", "PAGER": "cat"}
        subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                       stdout=secondary, stderr=secondary, timeout=60)
    finally:
        os.close(secondary)
        os.close(primary)


def _pager_runs_nowhere(cwd: Path, marker: Path, *commands: tuple[str, ...]) -> None:
    for args in commands:
        _git_on_a_terminal(*args, cwd=cwd)
    assert not marker.exists()


def test_a_bare_repository_of_any_name_cannot_be_assembled_unattended(repo, home, tmp_path):
    """git run inside a directory holding HEAD, objects/ and refs/ (or HEAD and commondir) takes it
    for a repository and obeys its config (core.pager runs on a terminal), whatever the directory's
    name. The file tools alone must not assemble one, nor change the config or hooks of one.
    Judged by host git run inside it."""
    marker = tmp_path / "pager-ran"
    hostile = f"[core]\n\tpager = touch {marker}; cat\n"
    evil = repo / "vendor" / "evil"
    tools = unattended(repo, home, "auto")
    results = [tools("write", path=str(evil / rel), content=content) for rel, content in [
        ("config", hostile), ("HEAD", "ref: refs/heads/master\n"), ("objects/keep", ""), ("refs/keep", "")]]
    assert [r.is_error for r in results] == [False, False, False, True], [r.content for r in results]
    assert f"makes {evil} a git directory (a valid HEAD, and objects and refs" in results[-1].content
    assert "needs approval" in results[-1].content and not (evil / "refs").exists()
    for args in (("branch", "-a"), ("log", "-1"), ("config", "-l")):
        _git_on_a_terminal(*args, cwd=evil)
    assert not marker.exists()
    # One the operator assembled (or bash, where sandbox.gitguard takes its HEAD at the next command):
    # its config, hooks and commondir are protected as a .git's are.
    (evil / "config").unlink()
    (evil / "refs").mkdir()
    err = tools.err("write", path=str(evil / "config"), content=hostile)
    assert f"{evil} is a git directory and its config decides what host git runs there" in err
    assert "needs approval" in err and not (evil / "config").exists()
    assert "needs approval" in tools.err("write", path=str(evil / "hooks" / "pre-commit"), content="#!/bin/sh\n")
    _pager_runs_nowhere(evil, marker, ("branch", "-a"), ("config", "-l"))
    other = repo / "other"
    other.mkdir()
    (other / "commondir").write_text("../vendor/evil\n")
    assert f"makes {other} a git directory" in tools.err("write", path=str(other / "HEAD"), content="ref: x\n")
    tools.ok("write", path=str(repo / "src" / "refs" / "api.md"), content="a directory named refs is fine\n")


def test_a_bare_shape_made_of_symlinks_is_judged_as_git_judges_it(repo, home, tmp_path):
    """Issue 30: objects and refs as symlinks to real directories (git's access() follows them), as a
    sandboxed command builds them. The file tools ask before writing the HEAD that completes the
    shape, or the config of one complete; through a symlinked path the tool refuses even when a
    human confirmed the path as named. Judged by host git on a terminal (its pager) afterwards."""
    marker = tmp_path / "pager-ran"
    hostile = f"[core]\n\tpager = touch {marker}; cat\n"
    evil = repo / "vendor" / "evil"
    evil.mkdir(parents=True)
    (repo / "store" / "refs").mkdir(parents=True)
    (evil / "objects").symlink_to("/usr/share")  # a real directory outside the workspace
    (evil / "refs").symlink_to("../../store/refs")
    tools = unattended(repo, home, "auto")
    tools.ok("write", path=str(evil / "config"), content=hostile)  # no HEAD: not a git directory yet
    err = tools.err("write", path=str(evil / "HEAD"), content="ref: refs/heads/master\n")
    assert f"makes {evil} a git directory (a valid HEAD, and objects and refs or a commondir)" in err
    assert "needs approval" in err and not (evil / "HEAD").exists()
    (evil / "HEAD").write_text("not a ref\n")  # an invalid HEAD already there: rewriting it completes the shape
    assert "needs approval" in tools.err("write", path=str(evil / "HEAD"), content="ref: refs/heads/master\n")
    (evil / "HEAD").write_text("ref: refs/heads/master\n")  # made by bash (the guard takes it at its next check)
    err = tools.err("edit", path=str(evil / "config"), old_string="cat", new_string="cat -v")
    assert f"{evil} is a git directory and its config decides what host git runs there" in err
    (evil / "config").unlink()
    err = tools.err("write", path=str(evil / "config"), content=hostile)
    assert f"{evil} is a git directory and its config decides what host git runs there" in err
    (repo / "link").symlink_to(evil)
    confirmed = Tools(repo, home, {"create_parents": True}, gate=Gate(Policy.create("auto", [], [], repo), confirmed=True))
    err = confirmed.err("write", path=str(repo / "link" / "config"), content=hostile)
    assert f"resolves through a symlink to {evil / 'config'}, which is protected" in err
    assert not (evil / "config").exists()
    _pager_runs_nowhere(evil, marker, ("branch", "-a"), ("log", "-1"))
    # A dangling symlink counts too (its target may be made later, by a write that never looks here).
    other = repo / "other"
    other.mkdir()
    (other / "objects").symlink_to("../not-yet")
    (other / "refs").mkdir()
    assert "needs approval" in tools.err("write", path=str(other / "HEAD"), content="ref: refs/heads/x\n")


def _husky(repo: Path, marker: Path) -> Path:
    """A husky-style repository: core.hooksPath = .husky and an executable pre-commit there."""
    assert _git("config", "core.hooksPath", ".husky", cwd=repo).returncode == 0
    (repo / ".husky").mkdir()
    hook = repo / ".husky" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    return hook


def _host_commit(repo: Path) -> subprocess.CompletedProcess[str]:
    (repo / "new.txt").write_text(f"{len(list(repo.iterdir()))}\n")
    _git("add", "-A", cwd=repo)
    return _git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "host", cwd=repo)


@pytest.mark.parametrize("mode", ["accept-edits", "auto"])
def test_a_work_tree_hooks_path_needs_a_human(repo, home, tmp_path, mode):
    """core.hooksPath = .husky makes .husky/ what .git/hooks/ is: edit, write and create there ask a
    human (sandbox.gitexec reads the config). Judged by a host `git commit` afterwards."""
    marker = tmp_path / "payload-ran"
    hook = _husky(repo, marker)
    tools = unattended(repo, home, mode)
    tools.ok("read", path=str(hook))
    err = tools.err("edit", path=str(hook), old_string="exit 0", new_string=f"touch {marker}")
    assert "needs approval" in err and "a protected path: core.hookspath = .husky in" in err
    assert f"makes host git run the hooks in {repo / '.husky'}" in err
    err = tools.err("write", path=str(repo / ".husky" / "post-commit"), content=f"#!/bin/sh\ntouch {marker}\n")
    assert "needs approval" in err and not (repo / ".husky" / "post-commit").exists()
    assert _host_commit(repo).returncode == 0
    assert not marker.exists() and hook.read_text() == "#!/bin/sh\nexit 0\n"
    tools.ok("write", path=str(repo / "src" / "husky.md"), content="other files are not protected\n")


def test_a_hooks_path_in_a_config_included_from_the_work_tree_is_found(repo, home, tmp_path):
    """`include.path = ../.gitconfig` (a tracked config): its hooks path counts, and the included
    file itself decides what git runs, so it asks too."""
    marker = tmp_path / "payload-ran"
    (repo / ".gitconfig").write_text("[core]\n\thooksPath = \"hooks dir\"  # tracked\n")
    assert _git("config", "include.path", "../.gitconfig", cwd=repo).returncode == 0
    tools = unattended(repo, home, "auto")
    err = tools.err("write", path=str(repo / "hooks dir" / "pre-commit"), content=f"#!/bin/sh\ntouch {marker}\n")
    assert "needs approval" in err and f"makes host git run the hooks in {repo / 'hooks dir'}" in err
    tools.ok("read", path=str(repo / ".gitconfig"))
    err = tools.err("edit", path=str(repo / ".gitconfig"), old_string="hooks dir", new_string="evil")
    assert "needs approval" in err and f"includes {repo / '.gitconfig'}" in err
    assert _host_commit(repo).returncode == 0 and not marker.exists()


def test_a_filter_driver_script_in_the_work_tree_needs_a_human(repo, home, tmp_path):
    """filter.x.clean = ./tools/clean.sh with `*.txt filter=x`: host `git add` runs the script."""
    marker = tmp_path / "payload-ran"
    assert _git("config", "filter.x.clean", "./tools/clean.sh", cwd=repo).returncode == 0
    (repo / ".gitattributes").write_text("*.txt filter=x\n")
    (repo / "tools").mkdir()
    script = repo / "tools" / "clean.sh"
    script.write_text("#!/bin/sh\ncat\n")
    script.chmod(0o755)
    tools = unattended(repo, home, "auto")
    tools.ok("read", path=str(script))
    err = tools.err("edit", path=str(script), old_string="cat", new_string=f"touch {marker}; cat")
    assert "needs approval" in err and f"filter.x.clean = ./tools/clean.sh in {repo / '.git' / 'config'}" in err
    assert _host_commit(repo).returncode == 0
    assert not marker.exists() and script.read_text() == "#!/bin/sh\ncat\n"


def test_a_missing_driver_script_cannot_be_created_unattended(repo, home, tmp_path):
    """The config names a script that does not exist yet (a fresh clone before `make setup`):
    creating it is what the attack needs, so it asks too. Also a nested repository's own hooks path."""
    marker = tmp_path / "payload-ran"
    assert _git("config", "diff.x.textconv", "sh scripts/textconv.sh", cwd=repo).returncode == 0
    sub = repo / "vendor" / "lib"
    sub.mkdir(parents=True)
    assert _git("init", "-q", cwd=sub).returncode == 0
    assert _git("config", "core.hooksPath", "githooks", cwd=sub).returncode == 0
    tools = unattended(repo, home, "auto")
    err = tools.err("write", path=str(repo / "scripts" / "textconv.sh"), content=f"touch {marker}\n")
    assert "needs approval" in err and not (repo / "scripts" / "textconv.sh").exists()
    err = tools.err("write", path=str(sub / "githooks" / "pre-commit"), content=f"#!/bin/sh\ntouch {marker}\n")
    assert "needs approval" in err and f"run the hooks in {sub / 'githooks'}" in err
    tools.ok("write", path=str(repo / "githooks" / "pre-commit"), content="the outer repository has no such hooks path\n")


def test_config_worktree_needs_a_human_once_git_reads_it(repo, home, tmp_path):
    """`git sparse-checkout init` turns on extensions.worktreeConfig: git then obeys .git/config.worktree."""
    marker = tmp_path / "payload-ran"
    assert _git("config", "extensions.worktreeConfig", "true", cwd=repo).returncode == 0
    target = repo / ".git" / "config.worktree"
    err = unattended(repo, home, "auto").err("write", path=str(target), content=f"[core]\n\tfsmonitor = \"touch {marker}; false\"\n")
    assert "needs approval" in err and f"host git reads its settings from {target}" in err
    (repo / "a.txt").write_text("changed\n")
    _git("status", cwd=repo)
    assert not marker.exists() and not target.exists()


def test_a_directory_that_changes_under_the_shape_check_fails_closed(ws, monkeypatch):
    """The directories on the way down are judged through descriptors (sandbox.gitshape); an error
    there (a sandboxed job swapping them) asks a human rather than passing the path."""
    from sandbox import gitshape

    (ws / "a" / "b").mkdir(parents=True)
    target = ws / "a" / "b" / "config"
    assert protected.reason(target, ws) is None

    def failing(fd, *, assume=None):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(gitshape, "verdict", failing)
    assert protected.reason(target, ws) == f"changes {target}, whose directories changed while it was being checked"
    assert protected.reason(ws.parent / "elsewhere" / "config", ws) is None  # outside the workspace: not judged here
    missing = ws.parent / "no-such-workspace"
    assert protected.reason(missing / "x" / "HEAD", missing) is None  # the tool reports the missing workspace


def test_the_walk_down_stops_at_a_file_and_closes_what_it_opened(ws):
    from fd_testing import fds_on

    _bare_at(ws / "a" / "b")
    (ws / "a" / "file").write_text("x\n")
    assert protected.reason(ws / "a" / "file" / "HEAD", ws) is None  # no directory there: nothing to judge
    assert "is a git directory" in protected.reason(ws / "a" / "b" / "config", ws)
    assert protected.reason(ws / "a" / "c" / "config", ws) is None
    assert fds_on(ws) == []


def _bare_at(path: Path) -> Path:
    (path / "objects").mkdir(parents=True)
    (path / "refs").mkdir()
    (path / "HEAD").write_text("ref: refs/heads/main\n")
    return path


def test_the_walk_down_stops_at_a_symlink_and_leaves_the_resolved_path_to_its_own_check(ws, home):
    evil = _bare_at(ws / "real")
    (ws / "link").symlink_to(evil)
    assert protected.reason(ws / "link" / "config", ws) is None  # as named: the walk does not follow link
    assert "is a git directory" in protected.reason(evil / "config", ws)
    assert "is a git directory" in protected.confirmation_needed(str(ws / "link" / "config"), ws)  # both judged
