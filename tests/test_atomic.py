"""Issue 14 item 13, atomic writes: which descriptors are fsync'd in which order, modes, owners,
the session state's inode, and a save that fails half-way."""

from __future__ import annotations

import os
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest
from fd_testing import fds_on

from abhed.files import atomic
from abhed.session.store import ReadRecord, changed_since
from abhed.session.storefail import StoreError

OTHER = 65534  # nobody


def _trace(monkeypatch) -> list[tuple[str, str]]:
    """Every fsync (by what the descriptor is) and every rename, in order."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst, **kw):
        events.append(("rename", f"{src} -> {dst}"))
        return real_replace(src, dst, **kw)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_the_data_is_synced_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    target.write_text("old\n")
    events = _trace(monkeypatch)
    atomic.replace_file(target, b"new\n", mode=0o644)
    assert len(events) == 3, events
    (kind1, what1), (kind2, what2), (kind3, what3) = events
    assert kind1 == "fsync" and atomic.is_temp(Path(what1).name) and Path(what1).parent == tmp_path
    assert kind2 == "rename" and what2 == f"{Path(what1).name} -> f.txt"
    assert (kind3, what3) == ("fsync", str(tmp_path))
    assert target.read_bytes() == b"new\n"


def test_the_session_state_is_replaced_never_rewritten_in_place(tools):
    state = tools.session.dir / "state.json"
    before = state.stat().st_ino
    tools.session.state.cwd = str(tools.ws)
    tools.session.save()
    assert state.stat().st_ino != before


def test_a_save_that_fails_half_way_leaves_the_old_state(tools, monkeypatch):
    state = tools.session.dir / "state.json"
    old = state.read_bytes()

    def crash(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fsync", crash)
    tools.session.state.cwd = "/elsewhere"
    with pytest.raises(StoreError) as failed:  # an instruction naming the file, not a bare OSError (issue 33)
        tools.session.save()
    assert f"could not save the session's state to {state} (Input/output error)" in failed.value.message
    assert state.read_bytes() == old
    assert [n for n in os.listdir(tools.session.dir) if atomic.TEMP_MARK in n] == []


@pytest.mark.parametrize("mode", [0o2755, 0o1644, 0o2640, 0o4755, 0o600])
def test_edit_and_write_keep_every_mode_bit(tools, ws, mode):
    path = ws / "f.txt"
    path.write_text("one\n")
    path.chmod(mode)
    tools.ok("read", path=str(path))
    tools.ok("edit", path=str(path), old_string="one", new_string="two")
    assert stat.S_IMODE(path.stat().st_mode) == mode
    tools.ok("write", path=str(path), content="three\n")
    assert stat.S_IMODE(path.stat().st_mode) == mode


@pytest.mark.skipif(os.geteuid() != 0, reason="rewriting another user's file needs root")
def test_root_editing_another_users_file_keeps_its_owner_and_set_gid(tools, ws):
    path = ws / "theirs.txt"
    path.write_text("one\n")
    os.chown(path, OTHER, OTHER)
    path.chmod(0o2664)  # a chown after the chmod would clear set-gid
    tools.ok("read", path=str(path))
    tools.ok("edit", path=str(path), old_string="one", new_string="two")
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (OTHER, OTHER, 0o2664)
    assert path.read_text() == "two\n"


def test_new_files_are_owned_by_the_writer_with_the_operator_mode(tools, ws):
    tools.ok("write", path=str(ws / "n.txt"), content="x\n")
    st = (ws / "n.txt").stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o644)


def _record(size: int, mtime_ns: int) -> ReadRecord:
    return ReadRecord(size=size, mtime_ns=mtime_ns, sha256=None, at=datetime.now(timezone.utc))


def test_changed_since_over_the_hash_limit_uses_size_and_mtime():
    seen = _record(100, 5)
    assert not changed_since(seen, None, 100, 5)
    assert changed_since(seen, None, 100, 6)  # same size, touched: may have changed
    assert changed_since(seen, None, 101, 5)


def test_the_re_check_never_follows_a_symlink_swapped_in_for_the_target(tmp_path):
    import errno
    import hashlib
    (tmp_path / "elsewhere.txt").write_text("seen\n")
    (tmp_path / "f.txt").symlink_to(tmp_path / "elsewhere.txt")
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as err:
            atomic.replace_at(dirfd, "f.txt", b"mine\n", mode=0o644, expect=hashlib.sha256(b"seen\n").hexdigest())
    finally:
        os.close(dirfd)
    assert err.value.errno == errno.ELOOP
    assert (tmp_path / "f.txt").is_symlink() and (tmp_path / "elsewhere.txt").read_text() == "seen\n"
    assert sorted(os.listdir(tmp_path)) == ["elsewhere.txt", "f.txt"]


def test_no_descriptor_is_left_open(tmp_path):
    import hashlib
    (tmp_path / "f.txt").write_bytes(b"old\n")
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        before = fds_on(tmp_path)
        atomic.replace_at(dirfd, "f.txt", b"new\n", mode=0o644, expect=hashlib.sha256(b"old\n").hexdigest())
        assert fds_on(tmp_path) == before
    finally:
        os.close(dirfd)


def test_the_temporary_file_is_private_while_it_is_written(tmp_path, monkeypatch):
    seen = []
    real = atomic.write_all

    def spy(fd, data):
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real(fd, data)
    monkeypatch.setattr(atomic, "write_all", spy)
    old = os.umask(0)
    try:
        atomic.replace_file(tmp_path / "f.txt", b"secret\n", mode=0o644)
    finally:
        os.umask(old)
    assert seen == [0o600] and stat.S_IMODE((tmp_path / "f.txt").stat().st_mode) == 0o644


def test_replace_file_closes_what_it_opens_and_refuses_a_directory_name(tmp_path):
    (tmp_path / "d").mkdir()
    before = fds_on(tmp_path)
    atomic.replace_file(tmp_path / "f.txt", b"x\n", mode=0o644)
    with pytest.raises(OSError):
        atomic.replace_file(tmp_path / "d" / "..", b"x\n", mode=0o644)
    assert fds_on(tmp_path) == before
    assert sorted(os.listdir(tmp_path)) == ["d", "f.txt"] and os.listdir(tmp_path / "d") == []


def test_replace_file_holds_its_directory_close_on_exec_and_as_a_directory(tmp_path, monkeypatch):
    """The directory descriptor must not leak into a command started meanwhile (FD_CLOEXEC), and
    must be a directory (O_DIRECTORY): checked on the real descriptor replace_at receives."""
    import fcntl

    seen = []
    real = atomic.replace_at

    def inspect(dirfd, name, data, **kwargs):
        flags = fcntl.fcntl(dirfd, fcntl.F_GETFD)
        seen.append((bool(flags & fcntl.FD_CLOEXEC), stat.S_ISDIR(os.fstat(dirfd).st_mode)))
        return real(dirfd, name, data, **kwargs)
    monkeypatch.setattr(atomic, "replace_at", inspect)
    atomic.replace_file(tmp_path / "f.txt", b"x", mode=0o600)
    assert seen == [(True, True)]
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(NotADirectoryError):
        atomic.replace_file(tmp_path / "file" / "f.txt", b"x", mode=0o600)
    assert seen == [(True, True)]  # refused at the open, before any write


def test_the_temporary_name_of_a_255_byte_name_fits_the_limit_and_splits_no_character(tmp_path):
    """Issue 33 #5: `.NAME.abhed-tmp-PID-RANDOM` of a long name was over 255 bytes (ENAMETOOLONG)."""
    for name in ("n" * 255, "é" * 127, "日" * 85, "a" + "é" * 127):
        temp = atomic.temp_name(name)
        assert len(os.fsencode(temp)) <= 255 and atomic.is_temp(temp)
        kept = temp[1:temp.index(atomic.TEMP_MARK)]
        assert name.startswith(kept) and len(kept) >= 50  # a prefix of whole characters
        assert len(os.fsencode(temp)) >= 255 - 3  # shortened no more than a character's bytes beyond need
    assert atomic.temp_name("short.txt").startswith(f".short.txt{atomic.TEMP_MARK}{os.getpid()}-")
    room = 255 - 1 - len(f"{atomic.TEMP_MARK}{os.getpid()}-") - 8
    assert len(os.fsencode(atomic.temp_name("r" * room))) == 255  # a name that just fits is kept whole
    target = tmp_path / ("n" * 255)
    atomic.replace_file(target, b"data", mode=0o644)
    assert target.read_bytes() == b"data" and os.listdir(tmp_path) == [target.name]
