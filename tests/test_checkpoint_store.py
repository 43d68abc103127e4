"""Issue 30, finding 7: the checkpoint store is capped per workspace, oldest collected first and told;
a snapshot is not written into the disk reserve of the store's filesystem.

Judged by what is in the store afterwards (its refs, the objects git can still find, its size on disk)
and by what undo can still do, never by the message alone.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest
from sandbox import reserve

from abhed.agent import dispatch
from abhed.gate.approval import Gate, Policy
from abhed.session import collect, gitindex
from abhed.session import checkpoint
from abhed.session.checkpoint import Checkpoints, CheckpointError, Shadow
from abhed.session.events import CheckpointEvent, new_id
from abhed.session.store import SessionStore
from abhed.session.undo import undo
from abhed_testing import Tools


def calls(cp: Checkpoints, session_id: str, ws: Path, count: int, size: int = 8, start: int = 0) -> list[int]:
    """`count` checkpointed calls, each writing a file of `size` fresh random bytes; their numbers."""
    numbers = []
    for i in range(start, start + count):
        before, capture = cp.before(session_id, new_id(), "bash", "main")
        (ws / f"f{i}.bin").write_bytes(os.urandom(size))
        cp.after(session_id, before)
        numbers.append(before.number)
        calls.told.append(capture.collected)  # type: ignore[attr-defined]
    return numbers


calls.told = []  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _fresh_told():
    calls.told.clear()  # type: ignore[attr-defined]


def has_object(shadow: Shadow, oid: str) -> bool:
    return subprocess.run(["git", "--git-dir", str(shadow.git_dir), "cat-file", "-e", oid]).returncode == 0


def test_past_the_count_cap_the_oldest_checkpoints_are_collected_and_told(ws: Path, home: Path) -> None:
    shadow = Shadow(home, ws, max_count=10)
    cp = Checkpoints(shadow)
    session = SessionStore(home).create(ws)
    (ws / "gone.bin").write_bytes(os.urandom(64))  # in checkpoint 1 only: its second call deletes it
    calls(cp, session.id, ws, 1)
    (ws / "gone.bin").unlink()
    calls(cp, session.id, ws, 9, start=1)
    assert [t for t in calls.told if t] == []  # type: ignore[attr-defined]
    first = cp.listing(session.id)[0].snapshot
    blob = shadow.git("rev-parse", f"{first.commit}:files/gone.bin").decode().strip()
    calls(cp, session.id, ws, 1, start=10)  # the 11th: over the cap
    told = calls.told[-1]  # type: ignore[attr-defined]
    assert told == ("the checkpoint store of this workspace was over checkpoints.max_count (10): its 2 oldest "
                    f"checkpoints were collected (session {session.id}: 1-2) and can no longer be undone")
    kept = [e.snapshot.number for e in cp.listing(session.id)]
    assert kept == list(range(3, 12))  # back to 90% of the cap, the newest kept
    assert not has_object(shadow, first.commit) and not has_object(shadow, blob)  # pruned, not only hidden
    with pytest.raises(CheckpointError) as gone:
        undo(cp, session, 1, force=True, confirm=lambda plan: True)
    assert str(gone.value) == (f"There is no checkpoint 1 in session {session.id} (it has 3 to 11; checkpoints before 3 "
                               "were collected to keep the store within its caps (checkpoints.max_store_bytes, "
                               f"checkpoints.max_count)). List them with `abhed checkpoints {session.id}`.")
    assert undo(cp, session, 3, force=False, confirm=lambda plan: True).startswith("Undone")  # the rest still undo
    assert sorted(p.name for p in ws.iterdir()) == ["f0.bin", "f1.bin"]  # as before checkpoint 3's call


def test_the_oldest_of_every_session_go_first_and_a_session_with_none_left_loses_its_chain(ws: Path,
                                                                                          home: Path) -> None:
    shadow = Shadow(home, ws, max_count=10)
    cp = Checkpoints(shadow)
    store = SessionStore(home)
    old, new = store.create(ws), store.create(ws)
    calls(cp, old.id, ws, 3)
    calls(cp, new.id, ws, 8, start=3)  # 11 in all: the three of the older session are the oldest
    assert f"session {old.id}: 1-2" in calls.told[-1]  # type: ignore[attr-defined]
    calls(cp, new.id, ws, 2, start=11)
    assert cp.listing(old.id) == []
    assert shadow.git("for-each-ref", "--format=%(refname)", "refs/abhed/").decode().split() == [f"refs/abhed/{new.id}"]
    assert [e.snapshot.number for e in cp.listing(new.id)][-1] == 10


def test_the_newest_checkpoint_of_the_call_about_to_run_is_never_collected(ws: Path, home: Path) -> None:
    shadow = Shadow(home, ws, max_store_bytes=1, max_count=10)  # every store is over a one-byte cap
    cp = Checkpoints(shadow)
    session = SessionStore(home).create(ws)
    calls(cp, session.id, ws, 3)
    assert [e.snapshot.number for e in cp.listing(session.id)] == [3]
    assert "over checkpoints.max_store_bytes" in calls.told[-1]  # type: ignore[attr-defined]


def test_past_the_size_cap_the_store_shrinks_below_it(ws: Path, home: Path, monkeypatch) -> None:
    monkeypatch.setattr(collect, "MEASURE_EVERY", 1)
    cap = 600_000
    shadow = Shadow(home, ws, max_store_bytes=cap, max_count=1000)
    cp = Checkpoints(shadow)
    session = SessionStore(home).create(ws)
    for i in range(12):  # 100 KB of incompressible bytes a call: past 600 KB after six
        calls(cp, session.id, ws, 1, size=100_000, start=i)
        (ws / f"f{i}.bin").unlink()  # each version lives only in its checkpoints
        assert collect.measure(shadow) <= cap + 250_000  # measured every call here: never far over
    told = [t for t in calls.told if t]  # type: ignore[attr-defined]
    assert told and all("over checkpoints.max_store_bytes (600,000 bytes): its " in t for t in told)


def test_a_lost_store_record_is_counted_again_from_the_chains(ws: Path, home: Path) -> None:
    shadow = Shadow(home, ws, max_count=10)
    cp = Checkpoints(shadow)
    session = SessionStore(home).create(ws)
    calls(cp, session.id, ws, 10)
    (shadow.dir / "store.json").write_text("damaged")
    calls(cp, session.id, ws, 1, start=10)
    assert "its 2 oldest checkpoints were collected" in calls.told[-1]  # type: ignore[attr-defined]


def test_the_call_s_observation_and_event_say_what_was_collected(ws: Path, home: Path) -> None:
    t = Tools(ws, home, gate=Gate(Policy.create("auto", [], [], ws)))
    t.ctx.checkpoints = Checkpoints(Shadow(home, ws, max_count=10))
    for i in range(11):
        result = t("write", path=str(ws / f"w{i}.txt"), content=f"{i}\n")
        assert not result.is_error, result.content
    assert result.content.endswith("[Abhed: the checkpoint store of this workspace was over checkpoints.max_count "
                                   f"(10): its 2 oldest checkpoints were collected (session {t.session.id}: 1-2) and "
                                   "can no longer be undone.]")
    events = [e for e in t.session.log.load().events if isinstance(e, CheckpointEvent)]
    assert events[-1].collected.startswith("the checkpoint store of this workspace was over")
    assert all(not e.collected for e in events[:-1])


def test_a_snapshot_is_not_written_into_the_store_s_disk_reserve(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    home.mkdir(parents=True)
    st = os.statvfs(home)
    free = st.f_bavail * st.f_frsize
    shadow = Shadow(home, ws, disk_reserve_bytes=free + 1024**3)  # the real filesystem, below this reserve
    with pytest.raises(CheckpointError) as refused:
        shadow.snapshot("s", "before", {"call": "1", "tool": "bash"})
    message = str(refused.value)
    assert message.startswith(f"the checkpoint store's filesystem ({shadow.dir}) has ")
    assert f"under the disk reserve of {reserve.size_text(free + 1024**3)}, set by sandbox.disk_reserve_bytes = " in message
    assert message.endswith("Free space on that filesystem, or lower sandbox.disk_reserve_bytes (0 turns the reserve "
                            "off), or move ABHED_HOME to a larger disk")
    assert not any((shadow.git_dir / "objects").glob("??/*"))  # nothing was written


def test_a_call_whose_checkpoint_meets_the_reserve_needs_a_human(ws: Path, home: Path) -> None:
    home.mkdir(parents=True)
    st = os.statvfs(home)
    t = Tools(ws, home, gate=Gate(Policy.create("auto", [], [], ws)))
    t.ctx.checkpoints = Checkpoints(Shadow(home, ws, disk_reserve_bytes=st.f_bavail * st.f_frsize + 1024**3))
    result = t("write", path=str(ws / "a.txt"), content="a\n")
    assert result.is_error and result.metadata["error_kind"] == dispatch.CHECKPOINT_FAILED
    assert "under the disk reserve" in result.content and not (ws / "a.txt").exists()


# -- the shadow repository's own set-up (mutation testing found these unjudged) ------------------------

def test_a_shadow_made_without_settings_has_the_settings_defaults(ws: Path, home: Path) -> None:
    """A Shadow made by code that passes no settings (tests, tools) keeps the operator's documented
    defaults: the two must not drift apart."""
    from abhed.session.config import CheckpointsConfig
    shadow, defaults = Shadow(home, ws), CheckpointsConfig()
    assert (shadow.max_file_bytes, shadow.timeout_s, shadow.max_store_bytes, shadow.max_count) == (
        defaults.max_file_bytes, defaults.timeout_s, defaults.max_store_bytes, defaults.max_count)


def test_a_lost_info_directory_is_made_again_and_its_attributes_still_hold(ws: Path, home: Path) -> None:
    shadow = Shadow(home, ws)
    with shadow.locked():
        shadow.capture()
    info = shadow.git_dir / "info"
    for entry in info.iterdir():
        entry.unlink()
    info.rmdir()
    (ws / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    (ws / ".gitattributes").write_text("* text eol=lf\n")
    with shadow.locked():
        taken = shadow.capture()
    assert (info / "attributes").read_text().startswith("* -text")
    assert shadow.git("cat-file", "blob", f"{taken.tree}:crlf.txt") == b"a\r\nb\r\n"  # byte for byte: no eol conversion


def test_a_weakened_shadow_config_does_not_hide_a_change(ws: Path, home: Path) -> None:
    """The settings that decide what a snapshot sees are on every command line: a config in the
    store that says otherwise (trust no ctime, compare only sizes and whole seconds, ignore modes)
    cannot make a same-size replacement that kept its mtime, or a mode change, look unchanged."""
    shadow = Shadow(home, ws)
    target, script = ws / "same.txt", ws / "run.sh"
    target.write_bytes(b"first\n")
    script.write_text("#!/bin/sh\n")
    old = (1_600_000_000, 1_600_000_000)  # long before the index: never racy, so stat data decides
    for path in (target, script):
        os.utime(path, old)
    with shadow.locked():
        first = shadow.capture()
    with open(shadow.git_dir / "config", "a") as config:
        config.write("[core]\n\tcheckStat = minimal\n\ttrustctime = false\n\tfileMode = false\n")
    (ws / "same.new").write_bytes(b"other\n")  # the same size
    os.utime(ws / "same.new", old)  # and the same mtime: only the inode (and ctime) tell
    os.replace(ws / "same.new", target)
    script.chmod(0o755)
    os.utime(script, old)
    with shadow.locked():
        second = shadow.capture()
        changed = {c.path: c for c in shadow.diff(first, second)}
    assert set(changed) >= {"same.txt", "run.sh"}, changed


def test_git_lock_files_a_killed_holder_left_are_cleared_by_the_next(ws: Path, home: Path) -> None:
    """A process killed while its git held index.lock or a ref's lock (kill -9 of Abhed mid-snapshot)
    would otherwise make every later snapshot of the workspace fail on them."""
    shadow = Shadow(home, ws)
    cp = Checkpoints(shadow)
    session = SessionStore(home).create(ws)
    calls(cp, session.id, ws, 1)
    left = [shadow.git_dir / "index.lock", shadow.git_dir / "refs" / "abhed" / f"{session.id}.lock"]
    for path in left:
        path.write_text("")
    calls(cp, session.id, ws, 1, start=1)
    assert not any(path.exists() for path in left)
    assert [row.snapshot.number for row in cp.listing(session.id)] == [1, 2]


def _chmod_undone(ws: Path, home: Path, settle: bool) -> None:
    cp = Checkpoints(Shadow(home, ws))
    session = SessionStore(home).create(ws)
    secret = ws / "secret.txt"
    if not settle:
        time.sleep(1 - time.time() % 1)  # at the start of a second: what follows takes a few ms
    secret.write_text("private\n")
    secret.chmod(0o600)
    os.utime(secret, (1_600_000_000, 1_600_000_000))  # an old mtime: only the change time is recent
    if settle:
        time.sleep(gitindex.RACY_S + 0.5)  # and then not even that: no snapshot reads the file again
        calls(cp, session.id, ws, 2)  # two calls that change other files only
    before, _ = cp.before(session.id, new_id(), "bash", "main")
    secret.chmod(0o644)  # git keeps 100644 for both, and the mtime does not move
    cp.after(session.id, before)
    report = undo(cp, session, before.number, force=True, confirm=lambda plan: True)
    assert report.startswith("Undone"), report
    assert oct(secret.stat().st_mode & 0o7777) == oct(0o600)


def test_a_permission_change_in_the_second_of_the_snapshot_is_undone(ws: Path, home: Path) -> None:
    """git compares whole seconds of ctime (and keeps no permission bits but x): a chmod 600 -> 644
    right after a snapshot looked unchanged, and undo left the file 0644. An entry whose inode
    changed that recently is now made to be read again, as git does for a racy mtime."""
    _chmod_undone(ws, home, settle=False)


def test_a_mode_recorded_before_survives_calls_that_did_not_touch_its_file(ws: Path, home: Path) -> None:
    """Each snapshot reads only the paths that changed; the modes of the others come from the record
    of the snapshot before. Losing that record would restore a 0600 file as 0644."""
    _chmod_undone(ws, home, settle=True)


def test_a_file_that_cannot_be_put_back_stops_the_undo_part_way_and_is_named(ws: Path, home: Path) -> None:
    """Where a file is to be restored, a directory now holds an ignored file no checkpoint covers:
    the undo cannot write the file, keeps the ignored one, and says so instead of reporting success."""
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "x").write_text("data\n")
    (ws / "other.txt").write_text("old\n")
    cp = Checkpoints(Shadow(home, ws))
    session = SessionStore(home).create(ws)
    before, _ = cp.before(session.id, new_id(), "bash", "main")
    (ws / "x").unlink()
    (ws / "x").mkdir()
    (ws / "x" / "keep.log").write_text("not covered\n")
    (ws / "other.txt").write_text("new\n")
    cp.after(session.id, before)
    with pytest.raises(CheckpointError) as stopped:
        undo(cp, session, before.number, force=True, confirm=lambda plan: True)
    message = str(stopped.value)
    assert message.startswith("Undo stopped part-way: 1 path could not be restored:\n"), message
    assert "  x (" in message and "The other files are restored." in message
    assert (ws / "x" / "keep.log").read_text() == "not covered\n" and (ws / "other.txt").read_text() == "old\n"


def test_listing_the_checkpoints_of_a_workspace_without_any_creates_no_store(ws: Path, home: Path) -> None:
    shadow = Shadow(home, ws)
    assert shadow.chain("s") == []
    assert not shadow.dir.exists()  # `abhed checkpoints` looks; it makes nothing


def test_undo_keeps_the_repositorys_own_directories_that_it_empties(ws: Path, home: Path) -> None:
    """git wants refs/tags and the like even when empty: undoing the one tag in it leaves the directory."""
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "f.txt").write_text("x\n")
    subprocess.run(["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c",
                    "--allow-empty"], check=True)
    assert (ws / ".git" / "refs" / "tags").is_dir() and not any((ws / ".git" / "refs" / "tags").iterdir())
    cp = Checkpoints(Shadow(home, ws))
    session = SessionStore(home).create(ws)
    before, _ = cp.before(session.id, new_id(), "bash", "main")
    subprocess.run(["git", "-C", str(ws), "tag", "v1"], check=True)
    cp.after(session.id, before)
    report = undo(cp, session, before.number, force=True, confirm=lambda plan: True)
    assert report.startswith("Undone"), report
    assert not (ws / ".git" / "refs" / "tags" / "v1").exists() and (ws / ".git" / "refs" / "tags").is_dir()


# -- many files read at once go into packs (gitobjects.Pack), a few into loose objects ------------------


def test_a_snapshot_that_reads_many_files_stores_them_as_a_pack_and_undo_restores_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from abhed.session import gitobjects
    from test_checkpoint_seed import undo_to
    monkeypatch.setattr(gitindex, "RACY_S", -10)  # files made a moment ago: the next snapshot reads only the changed
    ws = tmp_path / "ws"
    ws.mkdir()
    for n in range(checkpoint.PACK_FROM + 8):  # no git here: every file is read
        (ws / f"f{n}.txt").write_text(f"file {n}\n")
    shadow = Shadow(tmp_path / "home", ws, max_count=10)
    shadow.snapshot("s1", "before", {"call": "c1", "tool": "bash"})
    objects = shadow.git_dir / "objects"
    ids = {hashlib.sha1(b"blob %d\0" % len(f"file {n}\n") + f"file {n}\n".encode()).hexdigest()
           for n in range(checkpoint.PACK_FROM + 8)}
    assert not any((objects / oid[:2] / oid[2:]).exists() for oid in ids)  # none loose
    packed = shadow.git("cat-file", "--batch-check", data="".join(f"{oid}\n" for oid in sorted(ids)).encode())
    assert packed.count(b" blob ") == len(ids) and b"missing" not in packed
    assert list((objects / "pack").glob("*.pack")) and all(p.with_suffix(".idx").exists() for p in (objects / "pack").glob("*.pack"))
    for n in range(3):
        (ws / f"f{n}.txt").write_text("changed\n")
    shadow.snapshot("s1", "after", {"call": "c1", "tool": "bash", "number": 1})
    changed = hashlib.sha1(b"blob 8\0changed\n").hexdigest()
    assert (objects / changed[:2] / changed[2:]).exists()  # a few files: a loose object, no git child
    undo_to(shadow)
    assert [(ws / f"f{n}.txt").read_text() for n in range(3)] == ["file 0\n", "file 1\n", "file 2\n"]
    assert gitobjects.PACK_TYPES[b"blob"] == 3


def test_a_pack_over_its_limit_is_written_as_several_and_each_holds_its_objects_once(tmp_path: Path) -> None:
    from abhed.session import gitobjects
    ws = tmp_path / "ws"
    ws.mkdir()
    shadow = Shadow(tmp_path / "home", ws, max_count=10)
    shadow.snapshot("s1", "before", {"call": "c1", "tool": "bash"})  # (the store made)
    pack = gitobjects.Pack(shadow.git_dir / "objects" / "pack", limit=50)  # each object is over it
    bodies = [os.urandom(80) for _ in range(3)]
    ids = [pack.add(b"blob", body) for body in bodies]
    assert pack.add(b"blob", bodies[0]) == ids[0]  # held once
    written = pack.written()
    assert len(written) == 3 and pack.written() == written  # one a limit's worth each; nothing written twice
    for path in written:
        shadow.git("index-pack", str(path))
    for oid, body in zip(ids, bodies):
        assert shadow.git("cat-file", "blob", oid.hex()) == body
