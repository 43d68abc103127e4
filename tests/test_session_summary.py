"""`abhed sessions list` reads a per-session summary, not the log (issue 33, item 8): the summary an
append keeps is what reading every event would give, and a summary that is missing, corrupt, behind,
ahead, or of another log is caught up or rebuilt, never believed. Judged against the full read of
the log (EventLog.load) and by what `abhed sessions list` prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from abhed.session import summary as summary_module
from abhed.session.events import EventLog, MessageEvent, RunEvent, to_json
from abhed.session.store import Session, SessionStore
from abhed.session.summary import Summary, current, first_prompt
from abhed_testing import REPO, abhed


def _expected(log: EventLog) -> tuple[int, str, str]:
    """What `sessions list` showed before the summary: every event read."""
    events = log.load().events
    runs = [e for e in events if isinstance(e, RunEvent) and e.agent_id == "main"]
    prompts = [e.prompt for e in runs if e.status == "started" and e.prompt]
    return len(events), runs[-1].status if runs else "new", prompts[0] if prompts else ""


def _seen(log: EventLog) -> tuple[int, str, str]:
    found = current(log)
    return found.events, found.status, first_prompt(log, found)


def _stored(session: Session) -> dict:
    return json.loads((session.dir / "summary.json").read_text())


def _run(session: Session, status: str, prompt: str | None = None, agent: str = "main", sync: bool = True) -> None:
    session.record(RunEvent(session_id=session.id, status=status, prompt=prompt, agent_id=agent), sync=sync)


def _busy(session: Session) -> None:
    """A session as an agent leaves it: runs of the main agent and of a subagent, replies, an empty prompt."""
    _run(session, "started", "")  # an empty prompt is no first prompt
    _run(session, "done")
    _run(session, "started", "fix the bug\nin parse()")
    _run(session, "started", "a subagent's task", agent="main.1")
    session.record(MessageEvent(session_id=session.id, role="assistant", content="x"), sync=False)
    _run(session, "failed", agent="main.1")
    _run(session, "started", "the second prompt")
    _run(session, "budget")


@pytest.fixture
def session(home: Path, ws: Path) -> Session:
    return SessionStore(home).create(ws, "s")


def test_the_summary_an_append_keeps_is_what_reading_every_event_gives(session):
    log = session.log
    assert _stored(session)["events"] == 1  # the SessionEvent: kept from the log's first line on
    _busy(session)
    stored = _stored(session)
    assert stored["size"] == log.path.stat().st_size  # written by the appends: no reader was needed
    assert stored["version"] == 1 and set(stored) == {"version", "size", "tail", "events", "status", "prompt"}
    assert (stored["events"], stored["status"], stored["prompt"]) == (9, "budget", "fix the bug\nin parse()")
    assert _seen(log) == _expected(log) == (9, "budget", "fix the bug\nin parse()")


def test_an_up_to_date_summary_is_believed_without_reading_an_event(session):
    _busy(session)
    path = session.dir / "summary.json"
    planted = {**_stored(session), "events": 12345, "status": "planted"}
    path.write_text(json.dumps(planted))
    inode = path.stat().st_ino
    assert _seen(session.log) == (12345, "planted", "fix the bug\nin parse()")  # what covers the log is used as is
    assert path.stat().st_ino == inode  # and not written again


@pytest.mark.parametrize(("log_bytes", "planted"), [
    (b"", {"size": 0, "events": 5}),  # counts of zero bytes and of zero events are counts like any other
    (b"\n\n", {"size": 2, "events": 0}),
])
def test_a_summary_of_nothing_is_a_summary(session, log_bytes, planted):
    session.log.path.write_bytes(log_bytes)
    tail = __import__("hashlib").sha256(log_bytes).hexdigest()
    (session.dir / "summary.json").write_text(json.dumps({"version": 1, "tail": tail, "status": "planted",
                                                          "prompt": None, **planted}))
    assert _seen(session.log) == (planted["events"], "planted", "")


def test_a_summary_behind_the_log_is_caught_up_from_where_it_ends(session):
    _busy(session)
    path = session.dir / "summary.json"
    path.write_text(json.dumps({**_stored(session), "events": 100}))
    with open(session.log.path, "ab") as handle:  # an append the summary missed (an older Abhed; a crash)
        handle.write(to_json(RunEvent(session_id="s", status="done")).encode() + b"\n")
    assert _seen(session.log) == (101, "done", "fix the bug\nin parse()")  # only the new line was read
    assert _stored(session)["events"] == 101 and _stored(session)["size"] == session.log.path.stat().st_size
    _run(session, "interrupted")  # in step again: the append counts itself in
    assert _stored(session)["events"] == 102 and _stored(session)["status"] == "interrupted"


def test_an_append_leaves_a_summary_not_in_step_to_the_next_reader(session):
    _busy(session)
    path = session.dir / "summary.json"
    behind = _stored(session)
    with open(session.log.path, "ab") as handle:
        handle.write(to_json(RunEvent(session_id="s", status="done")).encode() + b"\n")
    _run(session, "interrupted")
    assert _stored(session) == behind  # it cannot know what it missed: not counted, not moved
    assert _seen(session.log) == _expected(session.log) == (11, "interrupted", "fix the bug\nin parse()")
    path.unlink()
    _run(session, "done")
    assert not path.exists()  # gone: an append does not guess a summary of a log it did not see whole
    assert _seen(session.log) == _expected(session.log) == (12, "done", "fix the bug\nin parse()")
    _run(session, "failed")  # the reader saved it: in step again
    assert _stored(session)["events"] == 13 and _stored(session)["status"] == "failed"


@pytest.mark.parametrize("damage", [
    "missing", "not json", "a list", "version 2", "no version", "size missing", "extra field", "size negative",
    "events negative", "size a string", "events a float", "size a bool", "tail not a string", "status not a string",
    "prompt a number", "size past the log", "tail of other bytes", "a directory",
])
def test_a_summary_that_cannot_be_trusted_is_rebuilt_from_the_log(session, damage):
    _busy(session)
    path = session.dir / "summary.json"
    good = _stored(session)
    changes = {"version 2": {"version": 2}, "extra field": {"colour": 1}, "size negative": {"size": -1},
               "events negative": {"events": -5}, "size a string": {"size": str(good["size"])},
               "events a float": {"events": 9.0}, "size a bool": {"size": True},
               "tail not a string": {"tail": 7}, "status not a string": {"status": 1}, "prompt a number": {"prompt": 3},
               "size past the log": {"size": good["size"] + 1}, "tail of other bytes": {"tail": "0" * 64}}
    path.unlink()
    if damage == "not json":
        path.write_text("{not json")
    elif damage == "a list":
        path.write_text("[]")
    elif damage == "a directory":
        path.mkdir()
    elif damage == "no version":
        path.write_text(json.dumps({k: v for k, v in good.items() if k != "version"}))
    elif damage == "size missing":
        path.write_text(json.dumps({k: v for k, v in good.items() if k != "size"}))
    elif damage != "missing":
        path.write_text(json.dumps({**good, "events": 777, **changes[damage]}))
    assert _seen(session.log) == _expected(session.log) == (9, "budget", "fix the bug\nin parse()")
    if damage != "a directory":
        assert _stored(session) == good  # written again, whole
    assert sorted(p.name for p in session.dir.iterdir() if p.name.startswith(".summary")) == []  # no leftover


@pytest.mark.parametrize("how", ["cut", "rewritten"])
def test_a_log_cut_or_rewritten_under_its_summary_is_read_again(session, how):
    _busy(session)
    log = session.log
    data = log.path.read_bytes()
    if how == "cut":  # the last two lines gone: the summary covers more than the log holds
        lines = data.split(b"\n")
        log.path.write_bytes(b"\n".join(lines[:-3]) + b"\n")
    else:  # the same size, the last event's status changed ("budget" -> "failed")
        log.path.write_bytes(data.replace(b'"status": "budget"', b'"status": "failed"'))
        assert log.path.stat().st_size == len(data)
    assert _seen(log) == _expected(log) == ((7, "started", "fix the bug\nin parse()") if how == "cut"
                                            else (9, "failed", "fix the bug\nin parse()"))


def test_a_torn_final_line_is_left_until_it_is_whole(session):
    _busy(session)
    log = session.log
    with open(log.path, "ab") as handle:  # a crash mid-write, or an append being written right now
        handle.write(to_json(RunEvent(session_id="s", status="done")).encode()[:40])
    before = _stored(session)["size"]
    assert _seen(log) == _expected(log) == (9, "budget", "fix the bug\nin parse()")
    assert _stored(session)["size"] == before  # not past the torn line: it may still become whole
    _run(session, "interrupted")  # the next append puts itself on a line of its own
    assert _seen(log) == _expected(log) == (10, "interrupted", "fix the bug\nin parse()")
    assert _stored(session)["size"] == log.path.stat().st_size


def test_blank_and_unreadable_lines_are_not_counted(session):
    with open(session.log.path, "ab") as handle:
        handle.write(b"\n   \n{not an event}\n" + to_json(RunEvent(session_id="s", status="started", prompt="p"))
                     .encode() + b"\n")
    assert _seen(session.log) == _expected(session.log) == (2, "started", "p")


def test_a_large_or_nul_led_first_prompt_is_kept_as_the_line_keeps_it(session):
    prompt = "\0" + "a long task description. " * 2000  # 50 KB: a blob in the log
    _run(session, "started", prompt)
    stored = _stored(session)
    assert stored["prompt"].startswith("\0blob:") and len(json.dumps(stored)) < 1000  # the summary stays small
    assert _seen(session.log) == _expected(session.log) == (2, "started", prompt)
    (session.dir / "summary.json").unlink()  # rebuilt from the log: the same reference
    assert current(session.log).prompt == stored["prompt"]
    other = SessionStore(session.dir.parent.parent).create(Path("/tmp"), "t")
    _run(other, "started", "\0short")  # a NUL-led prompt is not taken for a reference
    assert _seen(other.log) == _expected(other.log) == (2, "started", "\0short")


def test_a_session_without_a_log_has_an_empty_summary(home, ws):
    log = EventLog(home / "nowhere" / "events.jsonl")
    assert current(log) == Summary() and first_prompt(log, Summary()) == ""
    assert not (home / "nowhere").exists()


def test_a_store_that_cannot_take_the_summary_still_lists_right_and_keeps_no_temporary_file(session):
    _busy(session)
    path = session.dir / "summary.json"
    path.unlink()
    path.mkdir()  # the rename over it fails (EISDIR), as a full or read-only store would fail it
    (path / "keep").write_text("x")
    assert _seen(session.log) == _expected(session.log)
    _run(session, "done")  # the append's own update fails too, and the append does not
    assert _seen(session.log) == _expected(session.log) == (10, "done", "fix the bug\nin parse()")
    assert [p.name for p in session.dir.iterdir() if p.name.startswith(".summary")] == []


def test_concurrent_appends_by_another_process_are_never_miscounted(session):
    """A real second process appends 300 events while this one reads the summary again and again: each
    reading is of a whole prefix of the log (never more, never fewer than it covers), and the last equals
    the full read."""
    child = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from abhed.session.store import SessionStore
        from abhed.session.events import RunEvent
        session = SessionStore(Path({str(session.dir.parent.parent)!r})).open("s")
        print("ready", flush=True)
        for i in range(300):
            session.record(RunEvent(session_id="s", status="started" if i % 2 else "done", prompt=f"p{{i}}"),
                           sync=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdout.readline().strip() == "ready"
    counts = []
    while proc.poll() is None:
        if len(counts) % 3 == 0:  # some readers find the summary gone and rebuild it meanwhile
            (session.dir / "summary.json").unlink(missing_ok=True)
        counts.append(current(session.log).events)
    assert proc.wait() == 0
    assert counts == sorted(counts) and all(1 <= c <= 301 for c in counts) and len(counts) > 1
    assert _seen(session.log) == _expected(session.log) == (301, "started", "p1")


def test_sessions_list_shows_what_the_log_holds(home, ws):
    store = SessionStore(home)
    first = store.create(ws, "first")
    _busy(first)
    second = store.create(ws, "second")
    _run(second, "started", "cut short")
    store.create(ws, "third")
    (second.dir / "summary.json").write_text("garbage")
    (first.dir / "summary.json").unlink()
    proc = abhed("sessions", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["id"]: row for row in json.loads(proc.stdout)}
    assert {k: (rows[k]["events"], rows[k]["status"], rows[k]["first_prompt"]) for k in rows} == {
        "first": (9, "budget", "fix the bug\nin parse()"), "second": (2, "running or cut short", "cut short"),
        "third": (1, "new", "")}
    assert json.loads((first.dir / "summary.json").read_text())["events"] == 9  # rebuilt and kept


def test_the_summary_module_is_a_cache_only_list_reads(home, ws):
    """verify reads the log itself: a planted summary changes nothing it says."""
    session = SessionStore(home).create(ws, "s")
    _busy(session)
    (session.dir / "summary.json").write_text(json.dumps({**_stored(session), "events": 1}))
    proc = abhed("sessions", "verify", "s")
    assert proc.returncode == 0 and "9 events" in proc.stdout, proc.stdout


def test_fold_counts_events_and_follows_only_the_main_agents_runs():
    seen = Summary()
    summary_module.fold(seen, RunEvent(session_id="s", status="started", prompt="a", agent_id="main.1"), str)
    assert (seen.events, seen.status, seen.prompt) == (1, "new", None)
    summary_module.fold(seen, RunEvent(session_id="s", status="done", prompt="x"), str)
    assert (seen.events, seen.status, seen.prompt) == (2, "done", None)  # a prompt is taken from a start only
    summary_module.fold(seen, RunEvent(session_id="s", status="started", prompt="b"), lambda t: t.upper())
    summary_module.fold(seen, RunEvent(session_id="s", status="started", prompt="c"), str)
    assert (seen.events, seen.status, seen.prompt) == (4, "started", "B")  # the first, as stored


def test_the_summary_file_is_replaced_by_a_rename_with_owner_only_access(session):
    path = session.dir / "summary.json"
    inode = path.stat().st_ino
    _run(session, "done")
    assert path.stat().st_ino != inode and path.stat().st_mode & 0o777 == 0o600
    assert not any(p.name.startswith(".summary") for p in session.dir.iterdir())
    target = session.dir / "elsewhere"
    path.unlink()  # a link planted where the temporary file goes is not followed
    os.symlink(target, session.dir / f".summary.json.{os.getpid()}.{__import__('threading').get_ident()}")
    assert _seen(session.log) == _expected(session.log)
    assert not target.exists()


def test_appends_and_readings_leave_no_descriptor_open(session):
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))
    _busy(session)
    before = open_fds()
    for i in range(20):
        _run(session, "done")
        (session.dir / "summary.json").unlink()
        current(session.log)
    assert open_fds() == before


def test_unsynced_appends_are_counted_in_memory_and_saved_with_the_next_synced_one(session):
    _busy(session)
    saved = _stored(session)
    inode = (session.dir / "summary.json").stat().st_ino
    _run(session, "interrupted", sync=False)
    _run(session, "started", "again", sync=False)
    assert _stored(session) == saved and (session.dir / "summary.json").stat().st_ino == inode  # no file written
    assert _seen(session.log) == _expected(session.log) == (11, "started", "fix the bug\nin parse()")  # caught up
    _run(session, "done", sync=False)
    summary_module._KEPT.clear()  # as another process sees it: it did not count these
    assert _seen(session.log) == (12, "done", "fix the bug\nin parse()")
    _run(session, "failed", sync=False)
    _run(session, "done")  # synced: saved, with every event counted
    assert _stored(session)["events"] == 14 and _stored(session)["size"] == session.log.path.stat().st_size
    assert _seen(session.log) == _expected(session.log)


def test_a_logs_first_line_saves_the_summary_even_unsynced(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    log.append(RunEvent(session_id="s", status="started", prompt="first"), sync=False)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert (saved["events"], saved["status"], saved["prompt"]) == (1, "started", "first")
    log.append(RunEvent(session_id="s", status="done"), sync=False)  # not the first: not saved
    assert json.loads((tmp_path / "summary.json").read_text()) == saved
    assert _seen(log) == _expected(log) == (2, "done", "first")


def test_a_sync_saves_the_summary_counted_since_the_last_synced_append(session):
    _busy(session)
    _run(session, "interrupted", sync=False)
    _run(session, "started", "more", sync=False)
    assert _stored(session)["events"] == 9
    session.log.sync()
    assert _stored(session)["events"] == 11 and _stored(session)["size"] == session.log.path.stat().st_size
    with open(session.log.path, "ab") as handle:  # a line this process did not count: not saved over it
        handle.write(to_json(RunEvent(session_id="s", status="done")).encode() + b"\n")
    session.log.sync()
    assert _stored(session)["events"] == 11
    summary_module._KEPT.clear()
    session.log.sync()  # nothing counted: nothing saved
    assert _stored(session)["events"] == 11
    assert _seen(session.log) == _expected(session.log) == (12, "done", "fix the bug\nin parse()")
