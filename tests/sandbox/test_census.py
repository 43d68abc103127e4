"""sandbox.census: the start's lstat of every file, handed to the first interval of changes only, and
only while the guard has seen every change since it was taken (a real bwrap Sandbox, real files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import sandbox
from sandbox import census as census_module
from sandbox import gitguard


def lstat(path: Path) -> gitguard.Lstat:
    """What the census keeps of the file at `path` (gitguard.record)."""
    st = os.lstat(path)
    return gitguard.record(st) or st


def tree(ws: Path) -> Path:
    (ws / "sub" / "deep").mkdir(parents=True)
    (ws / "a.txt").write_text("a\n")
    (ws / "sub" / "b.txt").write_text("b\n")
    (ws / "sub" / "deep" / "c.txt").write_text("c\n")
    os.symlink("a.txt", ws / "link")
    os.mkfifo(ws / "pipe")
    return ws


def names(found: dict[str, dict[str, gitguard.Lstat]]) -> dict[str, set[str]]:
    return {rel: set(files) for rel, files in found.items() if files}


def test_the_first_interval_carries_each_file_s_and_symlink_s_lstat_and_no_later_one(tmp_path: Path) -> None:
    ws = tree(tmp_path / "ws")
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws, census=True) as sb:
        (ws / "sub" / "b.txt").write_text("changed\n")  # after the census: named by the interval it comes with
        taken = sb.take_changes()
        assert taken is not None
        changes, _quiet = taken
        assert changes.census is not None
        assert names(changes.census) == {"": {"a.txt", "link", ".git"}, "sub": {"b.txt"}, "sub/deep": {"c.txt"}}
        assert changes.census["sub/deep"]["c.txt"] == lstat(ws / "sub" / "deep" / "c.txt")
        assert changes.census["sub"]["b.txt"] != lstat(ws / "sub" / "b.txt")  # stale, and so named:
        assert "sub/b.txt" in changes.paths
        again = sb.take_changes()
        assert again is not None and again[0].census is None


def test_a_nested_repository_s_git_is_in_the_census_whatever_its_kind(tmp_path: Path) -> None:
    """Its consumer takes nothing below a .git (abhed/session/seed.py): the census says where one stood."""
    ws = tree(tmp_path / "ws")
    (ws / "sub" / ".git").mkdir()
    os.mkfifo(ws / "sub" / "deep" / ".git")  # (a regular file is in it as any file is)
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws, census=True) as sb:
        taken = sb.take_changes()
        assert taken is not None and taken[0].census is not None
        found = taken[0].census
        assert names(found) == {"": {"a.txt", "link", ".git"}, "sub": {"b.txt", ".git"}, "sub/deep": {"c.txt", ".git"}}
        assert found["sub"][".git"] == lstat(ws / "sub" / ".git")


def test_no_census_unless_asked_for(tmp_path: Path) -> None:
    ws = tree(tmp_path / "ws")
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws) as sb:
        taken = sb.take_changes()
        assert taken is not None and taken[0].census is None


def test_a_guard_that_walked_again_since_the_census_hands_none(tmp_path: Path) -> None:
    """An overflow of the event queue (or a watch it could not add) makes the guard walk again: events
    were missed, so the census can no longer be checked against them."""
    ws = tree(tmp_path / "ws")
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws, census=True) as sb:
        sb._guard._full_walk_needed = True  # as after IN_Q_OVERFLOW
        taken = sb.take_changes()
        assert taken is not None and taken[0].census is None


def test_an_interval_taken_by_someone_else_since_leaves_the_census_unused(tmp_path: Path) -> None:
    ws = tree(tmp_path / "ws")
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws, census=True) as sb:
        sb._guard.take_changes()  # the census's interval, taken past the Sandbox
        taken = sb.take_changes()
        assert taken is not None and taken[0].census is None


def test_a_census_of_too_many_files_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tree(tmp_path / "ws")
    monkeypatch.setattr(census_module, "CENSUS_MAX", 2)
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws, census=True) as sb:
        taken = sb.take_changes()
        assert taken is not None and taken[0].census is None
