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


def _python_for_nobody() -> str | None:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", os.path.realpath(sys.executable)):
        try:
            probe = subprocess.run([candidate, "-S", "-c", "import sys; sys.exit(sys.version_info < (3, 11))"],
                                   user=65534, group=65534, extra_groups=[], cwd="/", capture_output=True, timeout=60)
        except OSError:
            continue
        if probe.returncode == 0:
            return candidate
    return None


def test_an_unprivileged_cleaner_keeps_the_temp_file_of_another_users_live_writer():
    """Cleaning as a user: kill(pid, 0) on another user's process fails with EPERM, and that process is
    alive (its temp file is kept). PID 1 stands for the other user's writer; a dead PID's file goes."""
    import shutil
    import tempfile
    from pathlib import Path

    if os.geteuid() != 0:
        pytest.skip("needs root to run the cleaner as another user")
    python = _python_for_nobody()
    if python is None:
        pytest.skip("no Python >= 3.11 that user nobody can run")
    base = Path(tempfile.mkdtemp(prefix="abhed-clean-"))
    try:
        base.chmod(0o755)
        # atomic.py and what it imports (namelimits, errors) need only the standard library: copied
        # where user nobody can read them, under empty package files.
        source = Path(atomic.__file__).parents[2]
        for module in ("abhed/files/atomic.py", "abhed/files/namelimits.py", "abhed/common/errors.py"):
            (base / module).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / module, base / module)
        for package in ("abhed", "abhed/files", "abhed/common"):
            (base / package / "__init__.py").touch()
        for entry in base.rglob("*"):
            entry.chmod(0o755 if entry.is_dir() else 0o644)
        directory = base / "dir"
        directory.mkdir()
        others = _leftover(directory, "f.txt", 1)
        dead = _leftover(directory, "g.txt", _dead_pid())
        for path in (directory, directory / others, directory / dead):
            os.chown(path, 65534, 65534)
        code = ("import os; from abhed.files import atomic; fd = os.open('dir', os.O_RDONLY | os.O_DIRECTORY); "
                "print(atomic.clean_stale(fd))")
        out = subprocess.run([python, "-S", "-c", code], user=65534, group=65534, extra_groups=[], cwd=base,
                             capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(base)})
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == repr([dead])
        assert sorted(os.listdir(directory)) == [others]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_temp_file_that_vanishes_while_the_cleaner_looks_is_skipped(tmp_path, monkeypatch):
    """Two cleaners race: the other one removes a leftover between our listing and our stat. Ours
    skips it without error (reproduced for real: the file is deleted right before the stat), and
    a later pass removes the rest as usual."""
    gone = _leftover(tmp_path, "a.txt", _dead_pid())
    real_stat = os.stat

    def stat_after_the_other_cleaner(name, *args, **kwargs):
        if name == gone:
            os.unlink(tmp_path / gone)
        return real_stat(name, *args, **kwargs)

    monkeypatch.setattr(atomic.os, "stat", stat_after_the_other_cleaner)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert atomic.clean_stale(fd) == []
        monkeypatch.undo()
        rest = _leftover(tmp_path, "b.txt", _dead_pid())
        assert atomic.clean_stale(fd) == [rest]
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []
