"""The tamper-evident session record (issue 16): every way of changing the log is detected and named;
a crash's torn line is not taken for tampering; old logs still load; the export has every call."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from abhed.session import checkpoint
from abhed.session.audit import approved_by, export, verify
from abhed.session.events import ActionEvent, EventLog, MessageEvent, RunEvent, who
from abhed_testing import Tools, abhed


@pytest.fixture
def logged(ws: Path, home: Path) -> Tools:
    """A session with eight events: a run's start and end, a prompt, a reply, two calls."""
    t = Tools(ws, home)
    user, host = who()
    t.session.record(RunEvent(session_id=t.session.id, status="started", prompt="go", model="m1", user=user,
                              host=host))
    t.session.record(MessageEvent(session_id=t.session.id, role="user", content="go", origin="user"))
    t.session.record(MessageEvent(session_id=t.session.id, role="assistant", content="writing a.txt"))
    t.ok("write", path=str(ws / "a.txt"), content="a\n")
    t.ok("read", path=str(ws / "a.txt"))
    t.session.record(RunEvent(session_id=t.session.id, status="done"))
    return t


def lines(t: Tools) -> list[bytes]:
    return t.session.log.path.read_bytes().split(b"\n")[:-1]


def rewrite(t: Tools, new: list[bytes], end: bytes = b"\n") -> None:
    t.session.log.path.write_bytes(b"\n".join(new) + end)


def test_an_untouched_log_verifies(logged: Tools) -> None:
    verdict = verify(logged.session.log.path)
    assert verdict.ok and verdict.events == verdict.chained == len(lines(logged)) == 8
    assert [json.loads(line)["seq"] for line in lines(logged)] == list(range(1, 9))


def test_a_flipped_byte_is_named(logged: Tools) -> None:
    old = lines(logged)
    changed = bytearray(old[3])
    changed[changed.index(b'"tool"') + 9] ^= 0x01  # one letter of the tool's name
    rewrite(logged, old[:3] + [bytes(changed)] + old[4:])
    verdict = verify(logged.session.log.path)
    assert not verdict.ok
    assert verdict.problem == ("event 4, the line before line 5 was changed: event 5 (line 5) links to a line with "
                               "another hash")


def test_a_flipped_byte_that_breaks_the_json_is_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:4] + [old[4].replace(b"{", b"[", 1)] + old[5:])
    verdict = verify(logged.session.log.path)
    assert not verdict.ok and verdict.problem.startswith("line 5 was changed (it is no longer readable")


def test_a_flipped_byte_in_the_last_line_is_caught_by_the_head(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:-1] + [old[-1].replace(b'"done"', b'"fail"')])
    verdict = verify(logged.session.log.path)
    assert verdict.problem == ("event 8 (line 8) was changed: its hash is not the one recorded when it was written")


def test_a_deleted_line_is_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:3] + old[4:])
    verdict = verify(logged.session.log.path)
    assert verdict.problem == "event 4 was removed: line 4 holds event 5 right after event 3"


def test_swapped_lines_are_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:2] + [old[3], old[2]] + old[4:])
    verdict = verify(logged.session.log.path)
    assert verdict.problem == ("line 3 holds event 4 where event 3 belongs (it is on line 4): the lines were "
                               "reordered")


@pytest.mark.parametrize("cut", [1, 3])
def test_a_log_cut_at_the_end_is_named(logged: Tools, cut: int) -> None:
    old = lines(logged)
    rewrite(logged, old[:-cut])
    verdict = verify(logged.session.log.path)
    assert verdict.problem == f"the log was cut: it ends at event {8 - cut}, but event 8 had been written"


def test_a_cut_inside_a_line_that_removed_whole_events_is_not_passed_off_as_a_crash(logged: Tools) -> None:
    data = logged.session.log.path.read_bytes()
    logged.session.log.path.write_bytes(data[: data.index(lines(logged)[6]) + 20])  # into line 7: line 8 gone too
    verdict = verify(logged.session.log.path)
    assert verdict.problem.startswith("the log was cut: it ends at event 6, but event 8 had been written (its last "
                                      "line is torn, but a crash cannot remove whole events")


def test_a_torn_last_line_from_a_crash_is_not_tampering(logged: Tools) -> None:
    path = logged.session.log.path
    with open(path, "ab") as log:  # a write the crash cut: never fsync'd, so events.head does not name it
        log.write(b'{"schema_version": 2, "id": "x", "kind": "obs')  # 45 bytes
    verdict = verify(path)
    assert verdict.ok
    assert verdict.notes == ["line 9 is torn (45 bytes, no newline): a crash cut the last write; it is not part of the "
                             "record"]
    logged.ok("read", path=str(logged.ws / "a.txt"))  # the session goes on after the crash
    verdict = verify(path)
    assert verdict.ok and verdict.chained == 10
    assert verdict.notes == ["line 9 is torn (45 bytes): a crash cut that write; the next event starts a fresh line "
                             "and links past it"]


def test_an_inserted_line_without_a_link_is_named(logged: Tools) -> None:
    old = lines(logged)
    forged = ActionEvent(session_id="s", tool="bash", input={"command": "true"}).model_dump_json().encode()
    rewrite(logged, old[:5] + [json.dumps({**json.loads(forged), "seq": None}).encode()] + old[5:])
    verdict = verify(logged.session.log.path)
    assert verdict.problem == ("line 6 has no link to the line before it although earlier ones do: it was inserted "
                               "or rewritten")


def test_a_log_from_before_the_chain_still_loads_and_says_what_it_cannot_check(ws: Path, home: Path) -> None:
    t = Tools(ws, home)
    old = [json.dumps({"schema_version": 2, "id": f"e{i}", "session_id": t.session.id, "agent_id": "main",
                       "at": "2026-01-01T00:00:00Z", "kind": "run", "status": "done"}).encode() for i in range(3)]
    t.session.log.path.write_bytes(b"\n".join(old) + b"\n")
    assert len(t.session.log.load().events) == 3
    t.ok("write", path=str(ws / "a.txt"), content="a")  # a newer Abhed continues the session: the chain starts
    verdict = verify(t.session.log.path)
    assert verdict.ok and verdict.events == 5 and verdict.chained == 2
    assert verdict.notes == ["3 events were written before the chain existed (older Abhed): they are counted, not "
                             "verifiable"]
    first_chained = json.loads(lines(t)[3])
    assert first_chained["seq"] == 4 and first_chained["prev"] != ""


def test_subagents_writing_at_once_form_one_unbroken_chain(ws: Path, home: Path) -> None:
    t = Tools(ws, home)
    log = EventLog(t.session.log.path)

    def agent(k: int) -> None:
        for i in range(40):
            log.append(MessageEvent(session_id=t.session.id, agent_id=f"main.{k}", parent_id="main", role="user",
                                    content=f"{k}.{i}"), sync=i % 5 == 0)
    threads = [threading.Thread(target=agent, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    verdict = verify(t.session.log.path)
    assert verdict.ok and verdict.chained == 320, verdict.problem


def test_verify_and_export_on_the_command_line(ws: Path, home: Path) -> None:
    abhed("tool", "write", json.dumps({"path": str(ws / "a.txt"), "content": "a"}), "--session", "s",
          "--workspace", str(ws))
    abhed("tool", "bash", json.dumps({"command": "rm a.txt", "description": "x"}), "--session", "s",
          "--workspace", str(ws), "--mode", "plan")  # refused: plan mode
    good = abhed("sessions", "verify", "s")
    assert good.returncode == 0 and good.stdout.startswith("OK: ") and "the chain of 5 intact" in good.stdout
    exported = abhed("sessions", "export", "s", "--format", "jsonl")
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [r["type"] for r in records] == ["session", "call", "checkpoint", "call"]
    assert records[0]["chain_ok"] is True
    write, made, refused = records[1], records[2], records[3]
    assert write["user"] and write["host"] and write["decision"] == "allow" and write["approved_by"] == "human"
    assert write["checkpoint"] == 1 and made["number"] == 1 and made["call_id"] == write["call_id"]
    assert refused["decision"] == "deny" and refused["approved_by"] == "nobody (refused)"
    path = home / "sessions" / "s" / "events.jsonl"
    path.write_bytes(path.read_bytes().replace(b"rm a.txt", b"ls a.txt"))
    bad = abhed("sessions", "verify", "s")
    assert bad.returncode == 1 and bad.stdout.startswith("TAMPERED: ") and "event 5" in bad.stdout
    assert json.loads(abhed("sessions", "export", "s").stdout.splitlines()[0])["chain_ok"] is False
    missing = abhed("sessions", "verify", "nope")
    assert missing.returncode == 2 and "No session 'nope'" in missing.stderr


def test_export_names_the_run_its_model_and_who_approved(logged: Tools) -> None:
    records = export(logged.session)
    run = records[1]
    assert run["type"] == "run" and run["model"] == "m1" and run["user"] and run["host"]
    assert records[2] == {**records[2], "type": "prompt", "text": "go", "model": "m1"}
    calls = [r for r in records if r["type"] == "call"]
    assert [c["tool"] for c in calls] == ["write", "read"] and all(c["model"] == "m1" for c in calls)
    assert calls[0]["checkpoint"] is None  # Tools has checkpoints off


@pytest.mark.parametrize("approval, who", [
    ({"decision": "allow", "rule": "mode: auto", "reason": "mode auto allows"}, "mode auto"),
    ({"decision": "allow", "rule": "allow: bash(npm test)", "reason": "allowed by bash(npm test)"},
     "operator rule (bash(npm test))"),
    ({"decision": "allow", "rule": "not allowlisted", "reason": "approved by the human; x"}, "human"),
    ({"decision": "allow", "rule": "read-only", "reason": "read-only tool"}, "read-only"),
    ({"decision": "deny", "rule": "mode: plan", "reason": "plan"}, "nobody (refused)"),
    ({}, None)])
def test_who_approved_a_call(approval: dict, who: str | None) -> None:
    assert approved_by(approval) == who


def test_undo_is_in_the_export(ws: Path, home: Path) -> None:
    t = Tools(ws, home)
    t.ctx.checkpoints = checkpoint.Checkpoints(checkpoint.Shadow(home, ws))
    t.ok("write", path=str(ws / "a.txt"), content="a")
    from abhed.session.undo import undo
    undo(t.ctx.checkpoints, t.session, None, force=False, confirm=lambda plan: True)
    kinds = [(r["type"], r.get("number"), r.get("restored_to_before")) for r in export(t.session)
             if r["type"] in ("checkpoint", "undo")]
    assert kinds == [("checkpoint", 1, None), ("undo", 2, 1)]
    assert verify(t.session.log.path).ok


def test_calls_from_before_user_and_host_were_recorded_are_not_credited_to_the_reader(ws: Path, home: Path) -> None:
    t = Tools(ws, home)
    old = {"schema_version": 2, "id": "a1", "session_id": t.session.id, "agent_id": "main",
           "at": "2026-01-01T00:00:00Z", "kind": "action", "tool": "read", "input": {"path": "/x"}}
    t.session.log.path.write_text(json.dumps(old) + "\n")
    call = [r for r in export(t.session) if r["type"] == "call"][0]
    assert call["user"] is None and call["host"] is None and call["outcome"].startswith("no result recorded")


def test_a_missing_log_is_not_taken_for_an_intact_one(tmp_path: Path) -> None:
    verdict = verify(tmp_path / "events.jsonl")
    assert not verdict.ok and verdict.problem == f"the log {tmp_path / 'events.jsonl'} does not exist"


def test_two_deleted_lines_are_named_as_a_range(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:3] + old[5:])
    verdict = verify(logged.session.log.path)
    assert verdict.problem == "events 4 to 5 were removed: line 4 holds event 6 right after event 3"


def test_an_unreadable_last_line_with_its_newline_is_a_change_not_a_crash(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:-1] + [old[-1][:-5]])  # cut inside, but the newline kept: no crash does that
    verdict = verify(logged.session.log.path)
    assert verdict.problem == "line 8 is unreadable and no event follows it: it was changed"


def test_a_duplicated_line_is_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old + [old[-1]])
    verdict = verify(logged.session.log.path)
    assert verdict.problem == ("line 9 holds event 8 after event 8: the lines were reordered or the event's number "
                               "was changed")


def test_a_changed_link_on_the_first_line_is_named(logged: Tools) -> None:
    old = lines(logged)
    first = json.loads(old[0])
    rewrite(logged, [json.dumps({**first, "prev": "0" * 64}).encode()] + old[1:])
    verdict = verify(logged.session.log.path)
    assert verdict.problem == "the line before it was changed: event 1 (line 1) links to a line with another hash"


def test_without_events_head_a_cut_cannot_be_seen_and_verify_says_so(logged: Tools) -> None:
    head = logged.session.log.path.parent / "events.head"
    head.unlink()
    verdict = verify(logged.session.log.path)
    assert verdict.ok and verdict.notes == [f"{head} is missing: a cut at the end of the log cannot be detected"]
    head.write_text("{not json")
    assert verify(logged.session.log.path).problem == f"{head} is unreadable: it was changed"


def test_the_only_event_of_a_log_changed_is_caught_by_the_head(ws: Path, home: Path) -> None:
    t = Tools(ws, home)
    t.session.record(RunEvent(session_id=t.session.id, status="done"))
    path = t.session.log.path
    path.write_bytes(path.read_bytes().replace(b'"done"', b'"fail"'))
    assert verify(path).problem == "event 1 (line 1) was changed: its hash is not the one recorded when it was written"


def test_who_is_the_user_and_the_host_name_as_the_system_gives_them() -> None:
    """The audit's "who": the login name and the machine's host name (read without the socket module)."""
    import getpass
    import socket
    assert who() == (getpass.getuser(), socket.gethostname())
