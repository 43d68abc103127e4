"""Issue 14 item 5: temporary files left by a writer killed with -9 are cleaned on the next write
in that directory, and glob and grep never show them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from abhed.files import atomic


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def live_pid():
    """A live process of our own standing for a writer still at work (never a process we did not start)."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc.pid
    assert proc.poll() is None, "the cleanup signalled a live writer"
    proc.kill()
    proc.wait()


def _leftover(directory, name: str, pid: int, age: float = 0) -> str:
    temp = f".{name}{atomic.TEMP_MARK}{pid}-0123abcd"
    (directory / temp).write_text("half-writ")
    if age:
        os.utime(directory / temp, (time.time() - age, time.time() - age))
    return temp


def test_a_dead_writers_temp_file_is_removed_by_the_next_write_there(tools, ws, live_pid):
    dead = _leftover(ws, "big.txt", _dead_pid())
    live = _leftover(ws, "other.txt", live_pid)  # a live writer: left alone
    tools.ok("write", path=str(ws / "new.txt"), content="x\n")
    names = os.listdir(ws)
    assert dead not in names and live in names


def test_a_very_old_temp_file_is_removed_even_if_its_pid_was_reused(tools, ws, live_pid):
    old = _leftover(ws, "big.txt", live_pid, age=atomic.STALE_SECONDS + 60)
    tools.ok("write", path=str(ws / "new.txt"), content="x\n")
    assert old not in os.listdir(ws)


def test_names_that_only_look_like_temp_files_are_kept(tools, ws):
    keep = [f"notes{atomic.TEMP_MARK}1-0123abcd", f".x{atomic.TEMP_MARK}abc-0123abcd", f".x{atomic.TEMP_MARK}1-XYZ"]
    for name in keep:
        (ws / name).write_text("mine\n")
    tools.ok("write", path=str(ws / "new.txt"), content="x\n")
    assert set(keep) <= set(os.listdir(ws))
    assert not any(atomic.is_temp(n) for n in keep)


def test_glob_and_grep_never_list_temp_files(tools, ws, live_pid):
    (ws / "big.txt").write_text("needle\n")
    temp = _leftover(ws, "big.txt", live_pid)
    (ws / temp).write_text("needle\n")
    listed = tools.ok("glob", pattern="**/*")
    assert temp not in listed and str(ws / "big.txt") in listed
    assert tools.ok("glob", pattern=".*").count(atomic.TEMP_MARK) == 0
    for backend in ("rg", "python"):
        tools.settings.search.backend = backend
        found = tools.ok("grep", pattern="needle", output_mode="content")
        assert temp not in found and found.count("needle") == 1, found


def test_the_session_store_cleans_its_own(tools, home):
    directory = tools.session.dir
    dead = _leftover(directory, "state.json", _dead_pid())
    tools.session.save()
    assert dead not in os.listdir(directory)


def test_a_live_writers_temp_file_is_kept_for_one_day(tools, ws, live_pid):
    young = _leftover(ws, "a.txt", live_pid, age=86400 - 60)
    old = _leftover(ws, "b.txt", live_pid, age=86400 + 10)
    tools.ok("write", path=str(ws / "new.txt"), content="x\n")
    names = os.listdir(ws)
    assert young in names and old not in names


def test_another_users_writer_counts_as_alive(tmp_path, monkeypatch):
    """kill(pid, 0) on another user's process fails with EPERM: it exists, so its file is kept.
    (Running as root, no real process gives EPERM, hence the stand-in for os.kill.)"""
    temp = _leftover(tmp_path, "a.txt", 424242)

    def not_yours(pid, sig):
        assert sig == 0
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "kill", not_yours)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert atomic.clean_stale(fd) == []
    finally:
        os.close(fd)
    assert temp in os.listdir(tmp_path)


def test_a_temp_named_symlink_of_a_dead_writer_is_removed_not_followed(tools, ws, tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep\n")
    link = ws / f".a.txt{atomic.TEMP_MARK}{_dead_pid()}-0123abcd"
    link.symlink_to(tmp_path / "missing")  # dangling: following it would find nothing to judge
    other = ws / f".b.txt{atomic.TEMP_MARK}{_dead_pid()}-0123abcd"
    other.symlink_to(target)
    tools.ok("write", path=str(ws / "new.txt"), content="x\n")
    assert not os.path.lexists(link) and not os.path.lexists(other)
    assert target.read_text() == "keep\n"


def test_clean_stale_names_what_it_removed(tmp_path, live_pid):
    dead = _leftover(tmp_path, "a.txt", _dead_pid())
    _leftover(tmp_path, "b.txt", live_pid)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert atomic.clean_stale(fd) == [dead]
        assert atomic.clean_stale(fd) == []
    finally:
        os.close(fd)
