"""sandbox.protect: the name rule the file tools share with the sandbox (protected_reason), and the
.git it leaves at a workspace root that is no repository (place_gitfile)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sandbox.config import DEFAULT_PROTECTED_PATHS
from sandbox.protect import PLACEHOLDER_GITFILE, place_gitfile, protected_reason, protection_mounts


@pytest.mark.parametrize(
    "path",
    [
        ".git/config", ".git/hooks/pre-commit", ".git/hooks", ".git/commondir", ".git/info/attributes", ".git/modules/x/config",
        "sub/.git/config", "a/b/.git/hooks/post-checkout", "vendor/lib/.git/commondir", "x/.git/info/exclude",
        ".git/modules/x/.git/hooks/h",
        ".git", "sub/.git", "a/b/.git",  # creating or rewriting a repository or a gitdir: pointer
        ".abhed/config.toml", ".abhed", "./.abhed/x", ".//.git/config",
    ],
)  # fmt: skip
def test_protected(path):
    assert protected_reason(path) is not None


@pytest.mark.parametrize(
    "path",
    ["README.md", ".git/HEAD", ".git/objects/ab/cdef", ".git/refs/heads/main", ".gitignore", ".github/workflows/ci.yml",
     "sub/.gitmodules", "a/.abhed/x", "config", "hooks/pre-commit", ".git-config", "x.git/config"],
)  # fmt: skip
def test_not_protected(path):
    assert protected_reason(path) is None


def test_reasons_name_the_place_and_the_danger():
    assert protected_reason("sub/.git") == "a .git entry in sub is a git repository or a pointer to one: host git would run its hooks and settings"
    assert protected_reason(".git") == "a .git entry in the workspace root is a git repository or a pointer to one: host git would run its hooks and settings"
    assert protected_reason("a/.git/commondir").startswith(".git/commondir decides what host git runs")
    assert protected_reason(".abhed/rules") == ".abhed/ holds Abhed's own per-project configuration (approval rules)"


def test_every_default_protected_path_follows_the_rule():
    for entry in DEFAULT_PROTECTED_PATHS:
        assert protected_reason(entry.rstrip("/") + "/x") is not None, entry


# -- the .git left at a root that is no repository (sandbox.protect.place_gitfile) -------------

def _git_says(where: Path, ceiling: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(where), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CEILING_DIRECTORIES": str(ceiling)}
    return subprocess.run(["git", "-c", "safe.directory=*", "status"], cwd=where, env=env, capture_output=True, text=True)


def test_a_root_that_is_no_repository_gets_a_gitfile_that_stops_git_everywhere_below(tmp_path):
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    for name in ("objects", "refs"):  # a bare shape at the root: git would take the root for a repository
        (tmp_path / f"real-{name}").mkdir()
        (ws / name).symlink_to(tmp_path / f"real-{name}")
    (ws / "HEAD").write_text("ref: refs/heads/main\n")
    assert place_gitfile(ws, DEFAULT_PROTECTED_PATHS) is False  # the root is a git directory: the operator's
    (ws / "HEAD").unlink()
    assert place_gitfile(ws, DEFAULT_PROTECTED_PATHS) is True
    assert (ws / ".git").read_text() == PLACEHOLDER_GITFILE and (ws / ".git").stat().st_mode & 0o777 == 0o444
    (ws / "HEAD").write_text("ref: refs/heads/main\n")  # made after: git stops at .git before it looks
    for where in (ws, ws / "sub"):
        said = _git_says(where, tmp_path)
        assert said.returncode == 128 and "fatal: not a git repository: /dev/null/not-a-repository (Abhed put this .git" in said.stderr
        assert "delete it, while no Abhed session runs here, to run git init" in said.stderr
    # From then on it is a regular file like a worktree's .git: bound read-only, never replaced.
    assert [(m.kind, m.path.name) for m in protection_mounts(ws, DEFAULT_PROTECTED_PATHS)] == [("ro-bind", ".git"), ("empty-dir", ".abhed")]
    assert place_gitfile(ws, DEFAULT_PROTECTED_PATHS) is False
    assert (ws / ".git").read_text() == PLACEHOLDER_GITFILE


def test_no_descriptor_is_left_open(tmp_path):
    from fd_testing import fds_on

    ws = tmp_path / "ws"
    ws.mkdir()
    assert place_gitfile(ws, DEFAULT_PROTECTED_PATHS) is True
    assert place_gitfile(ws, DEFAULT_PROTECTED_PATHS) is False
    assert fds_on(ws) == []  # the workspace and its .git
    assert [t for p in ws.parents for t in fds_on(p) if t == str(p)] == []  # each directory above it


@pytest.mark.parametrize("existing", ["empty-dir", "file", "symlink", "repository"])
def test_whatever_stands_at_the_root_git_already_stays(tmp_path, existing):
    ws = tmp_path / "ws"
    ws.mkdir()
    dotgit = ws / ".git"
    if existing == "empty-dir":
        dotgit.mkdir()  # an earlier version's placeholder: another sandbox may use it as a mount point
    elif existing == "file":
        dotgit.write_text("gitdir: /somewhere/.git/worktrees/x\n")
    elif existing == "symlink":
        dotgit.symlink_to("elsewhere")
    else:
        subprocess.run(["git", "init", "-q", str(ws)], check=True)
    before = os.lstat(dotgit)
    assert place_gitfile(ws, DEFAULT_PROTECTED_PATHS) is False
    assert os.lstat(dotgit).st_ino == before.st_ino


def test_a_repository_above_the_workspace_is_still_reached(tmp_path):
    """git run in the workspace must still find the operator's enclosing repository."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    ws = tmp_path / "deep" / "ws"
    ws.mkdir(parents=True)
    assert place_gitfile(ws, DEFAULT_PROTECTED_PATHS) is False
    assert not os.path.lexists(ws / ".git")
    assert _git_says(ws, tmp_path.parent).returncode == 0


def test_no_gitfile_without_a_protected_entry_under_git(tmp_path):
    assert place_gitfile(tmp_path, (".abhed/", "tools/")) is False
    assert place_gitfile(tmp_path, (".gitignore",)) is False
    assert not os.path.lexists(tmp_path / ".git")
    assert place_gitfile(tmp_path, (".git",)) is True


def test_a_git_made_at_the_same_moment_is_not_overwritten(tmp_path, monkeypatch):
    real = os.open

    def racing(path, flags, mode=0o777, *, dir_fd=None):
        if path == ".git" and dir_fd is not None:  # a sandboxed job made it just before
            (tmp_path / ".git").write_text("theirs\n")
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", racing)
    assert place_gitfile(tmp_path, DEFAULT_PROTECTED_PATHS) is False
    assert (tmp_path / ".git").read_text() == "theirs\n"


def test_a_directory_above_that_cannot_be_opened_leaves_gits_way_up_alone(tmp_path, monkeypatch):
    real = os.open

    def refusing(path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is None and Path(path) == tmp_path.parent:
            raise PermissionError(13, "Permission denied", path)
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", refusing)
    assert place_gitfile(tmp_path, DEFAULT_PROTECTED_PATHS) is False
    assert not os.path.lexists(tmp_path / ".git")
