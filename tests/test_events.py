"""Sessions and events (rule 7): persisted per call, fsync'd, torn lines survived, state shared."""

from __future__ import annotations

import json
import os

import pytest

from abhed.session.events import ActionEvent, EventLog, ObservationEvent, line_hash, who
from abhed.session.store import SessionStore
from abhed_testing import abhed


def test_every_call_is_an_action_and_an_observation(tools, ws):
    (ws / "f.txt").write_text("x\n")
    tools.ok("read", path=str(ws / "f.txt"))
    tools.err("read", path="relative")
    tools("nosuchtool", path="/x")
    tools("read", raw="{not json")
    created, *events = tools.session.log.load().events
    assert created.kind == "session" and [e.kind for e in events] == ["action", "observation"] * 4
    actions, observations = events[0::2], events[1::2]
    assert [a.tool for a in actions] == ["read", "read", "nosuchtool", "read"]
    assert actions[3].input == "{not json"  # what the model sent, verbatim
    for action, obs in zip(actions, observations):
        assert obs.action_id == action.id and obs.session_id == tools.session.id and obs.duration_ms >= 0
    assert [o.is_error for o in observations] == [False, True, True, True]
    assert observations[2].metadata["error_kind"] == "unknown_tool"


def test_events_carry_schema_version_ids_and_agent_lineage(tools, ws):
    tools("read", path=str(ws))
    raw = [json.loads(line) for line in tools.session.log.path.read_text().splitlines()]
    for event in raw:
        assert event["schema_version"] == 3 and len(event["id"]) == 32
        assert event["agent_id"] == "main" and event["parent_id"] is None and event["at"].endswith("Z")


def test_each_event_is_fsynced(tools, ws, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    tools("read", path=str(ws / "missing"))
    # two events, the state file, and the directory holding the state file
    assert len(synced) >= 3


def test_torn_last_line_is_reported_skipped_and_later_appends_still_load(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    log.append(ActionEvent(session_id="s", tool="read", input={"path": "/x"}))
    with open(log.path, "ab") as f:
        f.write(b'{"kind": "observation", "session_id": "s", "act')  # the crash
    loaded = log.load()
    assert len(loaded.events) == 1
    assert len(loaded.problems) == 1 and ":2: torn final line (cut by a crash mid-write)" in loaded.problems[0]
    log.append(ObservationEvent(session_id="s", action_id="a", tool="read", content="c", is_error=False,
                                duration_ms=1))
    again = log.load()
    assert [e.kind for e in again.events] == ["action", "observation"]
    assert "unreadable line" in again.problems[0]  # the torn bytes stay on their own line


def test_lone_surrogates_from_the_model_are_logged_faithfully(tools, ws):
    tools("write", raw=json.dumps({"path": str(ws / "s"), "content": "a\ud800"}))
    action = tools.session.log.load().events[1]  # after the session's creation
    assert action.input["content"] == "a\ud800"


def test_state_json_is_valid_after_every_call_and_keeps_the_read_set(tools, ws, home):
    (ws / "f.txt").write_text("x\n")
    tools.ok("read", path=str(ws / "f.txt"))
    state = json.loads((tools.session.dir / "state.json").read_text())
    assert str(ws / "f.txt") in state["reads"] and state["schema_version"] == 1
    reopened = SessionStore(home).open(tools.session.id)
    assert reopened.last_read(ws / "f.txt") is not None


def test_read_set_is_shared_across_invocations_with_one_session(ws, home):
    (ws / "f.txt").write_text("old\n")
    env = {"ABHED_HOME": str(home)}
    args = ["--workspace", str(ws), "--session", "shared"]
    abhed("tool", "read", json.dumps({"path": str(ws / "f.txt")}), *args, env=env)
    proc = abhed("tool", "edit", json.dumps({"path": str(ws / "f.txt"), "old_string": "old", "new_string": "new"}),
                 *args, env=env)
    assert proc.stdout.startswith(f"Edited {ws / 'f.txt'}"), proc.stdout + proc.stderr
    fresh = abhed("tool", "edit", json.dumps({"path": str(ws / "f.txt"), "old_string": "new", "new_string": "x"}),
                  "--workspace", str(ws), "--session", "another", env=env)
    assert "You have not read" in fresh.stdout


def test_sessions_list_and_show(ws, home):
    env = {"ABHED_HOME": str(home)}
    (ws / "f.txt").write_text("hello\n")
    abhed("tool", "read", json.dumps({"path": str(ws / "f.txt")}), "--workspace", str(ws), "--session", "s1", env=env)
    hidden = abhed("sessions", "list", env=env)  # `abhed tool` calls do not clutter the list
    assert "s1" not in hidden.stdout and "1 session of `abhed tool` calls not shown: --all lists them" in hidden.stderr
    listed = abhed("sessions", "list", "--all", env=env).stdout
    assert "s1" in listed and str(ws) in listed
    assert json.loads(abhed("sessions", "list", "--all", "--json", env=env).stdout)[0]["events"] == 3
    shown = abhed("sessions", "show", "s1", env=env).stdout.splitlines()
    assert shown[0].endswith(f"[main] session created by {who()[0]}@{who()[1]} in {ws} (log hash-chained: "
                             "sha256-prev/1)")
    assert "[main] read" in shown[1] and str(ws / "f.txt") in shown[1]
    assert shown[2].strip().startswith("-> ok") and "hello" in shown[2]
    as_json = [json.loads(x) for x in abhed("sessions", "show", "s1", "--json", env=env).stdout.splitlines()]
    assert [e["kind"] for e in as_json] == ["session", "action", "observation"]


def test_show_reports_a_torn_log_and_still_prints_the_rest(ws, home):
    env = {"ABHED_HOME": str(home)}
    abhed("tool", "read", json.dumps({"path": str(ws / "nope")}), "--workspace", str(ws), "--session", "t", env=env)
    with open(home / "sessions" / "t" / "events.jsonl", "ab") as f:
        f.write(b'{"kind": "act')
    proc = abhed("sessions", "show", "t", env=env)
    assert proc.returncode == 0
    assert "torn final line" in proc.stderr and "File not found" in proc.stdout


def test_unknown_session_and_bad_session_ids_are_instructions(home):
    env = {"ABHED_HOME": str(home)}
    proc = abhed("sessions", "show", "nope", env=env)
    assert proc.returncode == 2 and "No session 'nope'" in proc.stderr and "abhed sessions list" in proc.stderr
    proc = abhed("tool", "read", "{}", "--session", "../escape", env=env)
    assert proc.returncode == 2 and "Invalid session id '../escape'" in proc.stderr


def test_lines_from_a_newer_abhed_with_fields_this_one_does_not_know_still_load(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    log.append(ActionEvent(session_id="s", tool="read", input={}))
    line = json.loads(log.path.read_text())
    line["added_later"] = {"x": 1}
    log.path.write_text(json.dumps(line) + "\n")
    loaded = log.load()
    assert not loaded.problems and loaded.events[0].tool == "read"


def test_lines_that_are_not_events_are_reported_with_the_reason(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    log.path.write_text('[1, 2]\n{"kind": "action"}\n"text"\n{"schema_version": "2", "kind": "message", '
                        '"session_id": "s", "role": "user", "content": "\\u0000x"}\n')
    loaded = log.load()
    assert [e.content for e in loaded.events] == ["\x00x"]  # a version that is not a number: read as it is
    assert len(loaded.problems) == 3
    assert loaded.problems[0] == f"{log.path}:1: unreadable line, 6 bytes, skipped (line: Input should be a valid " \
                                 "dictionary or object to extract fields from)"
    assert loaded.problems[1].startswith(f"{log.path}:2: unreadable line, 18 bytes, skipped (action.session_id: Field "
                                         "required)")


def test_sync_false_leaves_the_fsync_to_the_next_synced_append_or_sync(tmp_path, monkeypatch):
    log = EventLog(tmp_path / "events.jsonl")
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1])
    log.append(ActionEvent(session_id="s", tool="t", input={}), sync=False)
    assert synced == []
    log.sync()
    assert synced == [str(log.path)]
    log.append(ActionEvent(session_id="s", tool="t", input={}))
    assert synced == [str(log.path)] * 2
    assert len(log.load().events) == 2


def test_events_get_fresh_ids_and_utc_times():
    first, second = ActionEvent(session_id="s", tool="t", input={}), ActionEvent(session_id="s", tool="t", input={})
    assert first.id != second.id and len(first.id) == 32 and first.at.utcoffset().total_seconds() == 0


def test_append_and_sync_leave_no_file_descriptor_open(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", blob_min=64)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        log.append(ActionEvent(session_id="s", tool="t", input="b" * 100), sync=False)
        log.sync()
    assert len(os.listdir("/proc/self/fd")) == before


def test_parallel_first_uses_of_the_deferred_event_kinds_all_make_valid_events():
    """Event kinds are built on first use (start-up, issue 18): threads that make the first events of
    several kinds at once (subagents) each get a complete, serialisable event. In a fresh interpreter,
    so that no kind is built yet."""
    import subprocess
    import sys
    code = """
import json, threading
from abhed.session.events import ActionEvent, MessageEvent, ObservationEvent, to_json
barrier, made, errors = threading.Barrier(24), [], []
def first(i):
    barrier.wait()
    try:
        kind = i % 3
        event = (ActionEvent(session_id="s", tool="read", input={"i": i}) if kind == 0 else
                 MessageEvent(session_id="s", role="user", content=str(i)) if kind == 1 else
                 ObservationEvent(session_id="s", action_id="a", tool="read", content=str(i), is_error=False,
                                  duration_ms=1.0))
        made.append(json.loads(to_json(event))["kind"])
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=first, args=(i,)) for i in range(24)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(sorted(set(made)), len(made), errors)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "['action', 'message', 'observation'] 24 []", out.stderr[-2000:]


# -- where the next event links to, in a process that has not seen the log (each `abhed tool` call) --


def _append_in_a_new_process(log: EventLog, event: ActionEvent) -> None:
    """Append as a fresh process would: nothing known of where the log ended."""
    from abhed.session import events
    events._TAILS.clear()
    log.append(event)


@pytest.mark.parametrize("step", [1, 7, 100, 64 * 1024])
def test_a_new_process_links_to_the_last_event_whatever_lies_after_it(tmp_path, monkeypatch, step):
    """Read from the end back to the last event, whatever the first window's size (a line cut by the
    window's start, a window ending on a newline): its seq and hash, past torn lines, as counting
    every line gives."""
    from abhed.session import events
    from abhed.session.audit import verify
    monkeypatch.setattr(events, "_BACK_STEP", step)
    log = EventLog(tmp_path / "events.jsonl")
    for n in range(3):
        _append_in_a_new_process(log, ActionEvent(session_id="s", tool="read", input={"n": n, "pad": "x" * 150}))
    with open(log.path, "ab") as f:
        f.write(b'{"kind": "observation", "ses')  # a crash, then the next append starts a fresh line
    _append_in_a_new_process(log, ActionEvent(session_id="s", tool="read", input={"n": 3}))
    with open(log.path, "ab") as f:
        f.write(b'{"kind": "observation", "ses')  # a crash at the very end: no newline
    _append_in_a_new_process(log, ActionEvent(session_id="s", tool="read", input={"n": 4}))
    rows = [json.loads(line) for line in log.path.read_bytes().split(b"\n") if line.startswith(b'{"schema')]
    assert [row["seq"] for row in rows] == [1, 2, 3, 4, 5]
    verdict = verify(log.path)
    assert verdict.ok and verdict.chained == 5 and len(verdict.notes) == 2  # the two torn writes, nothing else


def test_a_log_whose_last_event_predates_the_chain_is_counted(tmp_path):
    """Lines written before the chain existed carry no seq: the next event's number counts them."""
    log = EventLog(tmp_path / "events.jsonl")
    old = [ActionEvent(session_id="s", tool="read", input={"n": n}).model_dump(mode="json") for n in range(3)]
    for row in old:
        del row["seq"], row["prev"]
    log.path.write_text("".join(json.dumps(row) + "\n" for row in old))
    _append_in_a_new_process(log, ActionEvent(session_id="s", tool="read", input={"n": 3}))
    last = json.loads(log.path.read_bytes().splitlines()[-1])
    assert last["seq"] == 4 and last["prev"] == line_hash(log.path.read_bytes().splitlines()[2])
    _append_in_a_new_process(log, ActionEvent(session_id="s", tool="read", input={"n": 4}))  # now from the end
    lines = log.path.read_bytes().splitlines()
    assert json.loads(lines[-1])["seq"] == 5 and json.loads(lines[-1])["prev"] == line_hash(lines[3])


def test_a_new_process_reads_the_end_of_a_long_log_not_all_of_it(tmp_path, monkeypatch):
    """Every `abhed tool --session` call is a new process: its first event costs the same on a log of
    a thousand calls as on a log of one."""
    log = EventLog(tmp_path / "events.jsonl")
    for n in range(300):
        log.append(ActionEvent(session_id="s", tool="read", input={"n": n, "pad": "x" * 10_000}), sync=False)
    size = log.path.stat().st_size
    read: list[int] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: (read.append(n), real(fd, n, at))[1])
    _append_in_a_new_process(log, ActionEvent(session_id="s", tool="read", input={"n": 300}))
    assert size > 3_000_000 and sum(read) < 200_000, (size, read)
    assert json.loads(log.path.read_bytes().splitlines()[-1])["seq"] == 301
