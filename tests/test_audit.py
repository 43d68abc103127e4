"""The tamper-evident session record (issues 16, 30): every way of changing the log is detected and
named; a session declares its chain at creation, so it cannot be downgraded to an unchained one; a
crash's torn line is not taken for tampering; old logs still load; the export has every call."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from abhed.session import checkpoint, events
from abhed.session.audit import Stated, approved_by, export, parse_head, verify, verify_session
from abhed.session.events import CHAIN, ActionEvent, EventLog, MessageEvent, RunEvent, head_token, line_hash, who
from abhed.session.store import SessionStore
from abhed_testing import Tools, abhed


@pytest.fixture
def logged(ws: Path, home: Path) -> Tools:
    """A session with nine events: its creation, a run's start and end, a prompt, a reply, two calls."""
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


def checked(t: Tools, kept: tuple[int, str] | None = None):  # type: ignore[no-untyped-def]
    return verify_session(t.session.dir, kept)


def problem(t: Tools) -> str:
    verdict = checked(t)
    assert not verdict.ok and verdict.status == "TAMPERED" and verdict.exit_code == 1
    assert verdict.line("x") == f"TAMPERED: x: {verdict.problem}"
    return verdict.problem


def without(raw: bytes, *keys: str) -> bytes:
    """The line with `keys` taken out, written as the log writes lines."""
    value = json.loads(raw)
    for key in keys:
        value.pop(key, None)
    return json.dumps(value).encode()


def head_file(t: Tools) -> Path:
    return t.session.dir / "events.head"


def set_head(t: Tools, seq: int, digest: str) -> None:
    head_file(t).write_text(json.dumps({"seq": seq, "hash": digest}))


def test_an_untouched_log_verifies(logged: Tools) -> None:
    verdict = checked(logged)
    assert verdict.ok and verdict.events == verdict.chained == len(lines(logged)) == 9
    assert verdict.status == "OK" and verdict.exit_code == 0 and verdict.chain == CHAIN and verdict.notes == []
    assert [json.loads(line)["seq"] for line in lines(logged)] == list(range(1, 10))
    assert verdict.head == (9, line_hash(lines(logged)[-1])) == logged.session.log.head()
    assert json.loads(head_file(logged).read_text()) == {"seq": 9, "hash": verdict.head[1]}
    assert verdict.line("s") == f"OK: s: 9 events, hash-chained from creation ({CHAIN}), intact; head 9:{verdict.head[1]}"
    assert verdict.summary("s") == verdict.line("s")  # no note: nothing to add


def test_a_session_declares_its_chain_at_creation_in_state_and_first_event(ws: Path, home: Path) -> None:
    session = SessionStore(home).create(ws, "fresh", origin="tool")
    state = json.loads((session.dir / "state.json").read_text())
    (first,) = [json.loads(line) for line in session.log.path.read_bytes().splitlines()]
    assert state["chain"] == CHAIN == "sha256-prev/1"
    assert first["kind"] == "session" and first["chain"] == CHAIN and first["seq"] == 1 and first["prev"] == ""
    assert first["workspace"] == str(ws) and first["origin"] == "tool" and (first["user"], first["host"]) == who()
    assert session.new
    verdict = verify_session(session.dir)
    assert verdict.status == "OK" and verdict.events == 1


def test_a_session_made_again_after_losing_its_state_keeps_its_log_and_its_chain(logged: Tools, home: Path) -> None:
    before = logged.session.log.path.read_bytes()
    (logged.session.dir / "state.json").unlink()
    again = SessionStore(home).create(logged.ws, logged.session.id)
    assert logged.session.log.path.read_bytes() == before and again.state.chain == CHAIN and not again.new
    assert verify_session(again.dir).status == "OK"


def test_a_flipped_byte_is_named(logged: Tools) -> None:
    old = lines(logged)
    changed = bytearray(old[4])
    changed[changed.index(b'"tool"') + 9] ^= 0x01  # one letter of the tool's name
    rewrite(logged, old[:4] + [bytes(changed)] + old[5:])
    assert problem(logged) == ("event 5, the line before line 6 was changed: event 6 (line 6) links to a line with "
                               "another hash")


def test_a_flipped_byte_that_breaks_the_json_is_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:4] + [old[4].replace(b"{", b"[", 1)] + old[5:])
    assert problem(logged) == ("line 5 was changed (it is no longer readable, and event 6 on line 6 does not follow "
                               "on from the line before it)")


def test_a_flipped_byte_in_the_last_line_is_caught_by_the_head(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:-1] + [old[-1].replace(b'"done"', b'"fail"')])
    assert problem(logged) == "event 9 (line 9) was changed: its hash is not the one recorded when it was written"


def test_a_deleted_line_is_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:3] + old[4:])
    assert problem(logged) == "event 4 was removed: line 4 holds event 5 right after event 3"


def test_two_deleted_lines_are_named_as_a_range(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:3] + old[5:])
    assert problem(logged) == "events 4 to 5 were removed: line 4 holds event 6 right after event 3"


def test_swapped_lines_are_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:2] + [old[3], old[2]] + old[4:])
    assert problem(logged) == ("line 3 holds event 4 where event 3 belongs (it is on line 4): the lines were "
                               "reordered")


def test_a_duplicated_line_is_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old + [old[-1]])
    assert problem(logged) == "line 10 holds event 9 again (it is also on line 9): the line was duplicated"


def test_a_duplicated_line_in_the_middle_is_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:4] + [old[3]] + old[4:])
    assert problem(logged) == "line 5 holds event 4 again (it is also on line 4): the line was duplicated"


def test_an_events_number_changed_is_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:4] + [old[4].replace(b'"seq": 5', b'"seq": 2')] + old[5:])
    assert problem(logged) == ("line 5 holds event 2 after event 4: the lines were reordered or the event's number was "
                               "changed")


@pytest.mark.parametrize("cut", [1, 3])
def test_a_log_cut_at_the_end_is_named(logged: Tools, cut: int) -> None:
    old = lines(logged)
    rewrite(logged, old[:-cut])
    assert problem(logged) == f"the log was cut: it ends at event {9 - cut}, but event 9 had been written"


def test_a_cut_inside_a_line_that_removed_whole_events_is_not_passed_off_as_a_crash(logged: Tools) -> None:
    data = logged.session.log.path.read_bytes()
    logged.session.log.path.write_bytes(data[: data.index(lines(logged)[7]) + 20])  # into line 8: line 9 gone too
    assert problem(logged).startswith("the log was cut: it ends at event 7, but event 9 had been written (its last "
                                      "line is torn, but a crash cannot remove whole events")


def test_a_torn_last_line_from_a_crash_is_not_tampering(logged: Tools) -> None:
    path = logged.session.log.path
    with open(path, "ab") as log:  # a write the crash cut: events.head was not yet moved on
        log.write(b'{"schema_version": 3, "id": "x", "kind": "obs')  # 45 bytes
    verdict = checked(logged)
    assert verdict.status == "OK"
    assert verdict.notes == ["line 10 is torn (45 bytes, no newline): a crash cut the last write; it is not part of "
                             "the record"]
    logged.ok("read", path=str(logged.ws / "a.txt"))  # the session goes on after the crash
    verdict = checked(logged)
    assert verdict.status == "OK" and verdict.chained == 11
    assert verdict.notes == ["line 10 is torn (45 bytes): a crash cut that write; the next event starts a fresh line "
                             "and links past it"]


def test_an_unreadable_last_line_with_its_newline_is_a_change_not_a_crash(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:-1] + [old[-1][:-5]])  # cut inside, but the newline kept: no crash does that
    assert problem(logged) == "line 9 is unreadable and no event follows it: it was changed"
    rewrite(logged, old[:-1] + [b'["a", "list"]'])  # JSON, but no event
    assert problem(logged) == "line 9 is unreadable and no event follows it: it was changed"


def test_an_unreadable_line_before_an_event_whose_link_was_changed_is_named(logged: Tools) -> None:
    """A torn line is forgiven only when the next event links past it as a crash leaves it."""
    old = lines(logged)
    relinked = json.dumps({**json.loads(old[5]), "prev": "0" * 64}).encode()
    rewrite(logged, old[:5] + [b'{"schema_version": 3, "id": "x", "kind": "obs'] + [relinked] + old[6:])
    assert problem(logged) == ("line 6 was changed (it is no longer readable, and event 6 on line 7 does not follow "
                               "on from the line before it)")


def test_a_changed_link_on_the_first_line_is_named(logged: Tools) -> None:
    old = lines(logged)
    first = json.loads(old[0])
    rewrite(logged, [json.dumps({**first, "prev": "0" * 64}).encode()] + old[1:])
    assert problem(logged) == "the line before it was changed: event 1 (line 1) links to a line with another hash"


def test_the_only_event_of_a_log_changed_is_caught_by_the_head(ws: Path, home: Path) -> None:
    t = Tools(ws, home)
    path = t.session.log.path
    path.write_bytes(path.read_bytes().replace(b'"origin": "agent"', b'"origin": "tool"'))
    assert problem(t) == "event 1 (line 1) was changed: its hash is not the one recorded when it was written"


# -- a record that cannot be downgraded (issue 30, finding 8) --------------------------------------


def test_the_reported_downgrade_links_stripped_an_event_edited_and_the_head_deleted_fails(logged: Tools) -> None:
    """The attack as reported: `seq`/`prev` stripped from every line, an event edited, events.head
    deleted. Before, verify said "OK ... the chain of 0 intact"."""
    old = lines(logged)
    stripped = [without(line, "seq", "prev") for line in old]
    stripped[4] = stripped[4].replace(b'"write"', b'"read"')
    rewrite(logged, stripped)
    head_file(logged).unlink()
    assert problem(logged) == ("line 1 has no link to the line before it although this session is hash-chained from "
                               "its first event: it was inserted, or its link stripped")


def test_stripping_the_first_events_declaration_too_is_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, [without(old[0], "seq", "prev", "chain")] + [without(line, "seq", "prev") for line in old[1:]])
    assert problem(logged) == ("line 1, the session's first event, no longer declares its hash chain (the declaration "
                               "was removed or changed)")


def test_removing_the_first_event_and_every_link_is_caught_by_state_json(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, [without(line, "seq", "prev") for line in old[1:]])
    head_file(logged).unlink()
    assert problem(logged) == (f"state.json records that this session declared its hash chain ({CHAIN}) at creation, "
                               "in its first event, but the log's first event (line 1) declares none: that event was "
                               "removed or changed (a chained log passed off as one from before the chain)")


def test_a_log_emptied_or_deleted_is_caught_by_state_json(logged: Tools) -> None:
    rewrite(logged, [], end=b"")
    assert problem(logged) == (f"state.json records that this session declared its hash chain ({CHAIN}) at creation, "
                               "in its first event, but the log holds no event: that event was removed or changed (a "
                               "chained log passed off as one from before the chain)")
    logged.session.log.path.unlink()
    assert problem(logged) == (f"the log {logged.session.log.path} does not exist, but state.json records that the "
                               f"session declared its hash chain ({CHAIN}) at creation, in the log's first event: the "
                               "log was deleted")


def test_lines_written_with_links_but_stripped_in_a_legacy_looking_log_are_named(logged: Tools) -> None:
    """With state.json's declaration and the first event both gone, the lines' own schema version
    (3: every line is linked) still gives the stripped links away."""
    old = lines(logged)
    rewrite(logged, [without(line, "seq", "prev") for line in old[1:]])
    state = logged.session.dir / "state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "chain": None}))
    assert problem(logged) == ("line 1 has no link to the line before it, but it was written by an Abhed that links "
                               "every event (schema_version 3): its link was stripped")


def test_a_full_downgrade_is_legacy_at_best_and_the_kept_head_catches_it(logged: Tools) -> None:
    """Someone who rewrites everything (first event gone, links and versions stripped, state.json's
    declaration removed) gets LEGACY (exit 3), never OK; the head kept elsewhere catches it."""
    kept = logged.session.log.head()
    old = lines(logged)
    rewrite(logged, [without(line, "seq", "prev").replace(b'"schema_version": 3', b'"schema_version": 2')
                     for line in old[1:]])
    head_file(logged).unlink()
    state = logged.session.dir / "state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "chain": None}))
    verdict = checked(logged)
    assert verdict.ok and verdict.status == "LEGACY" and verdict.exit_code == 3
    with_kept = checked(logged, kept)
    assert with_kept.exit_code == 1 and with_kept.problem == (
        "the log ends at event 8, but the head kept elsewhere names event 9: the log was cut after that head was taken "
        "(and events.head rewritten to match)")
    assert checked(logged, (8, kept[1])).problem == (
        "event 8 (line 8) is not the event the head kept elsewhere names: the log was rewritten up to there (or that "
        "head is another session's)")


def test_a_line_whose_link_alone_was_stripped_is_named(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, old[:5] + [without(old[5], "prev")] + old[6:])
    assert problem(logged) == ("line 6 has no link to the line before it although this session is hash-chained from "
                               "its first event: it was inserted, or its link stripped")


def test_an_inserted_line_without_a_link_is_named(logged: Tools) -> None:
    old = lines(logged)
    forged = ActionEvent(session_id="s", tool="bash", input={"command": "true"}).model_dump_json().encode()
    rewrite(logged, old[:5] + [without(forged, "seq")] + old[5:])
    assert problem(logged) == ("line 6 has no link to the line before it although this session is hash-chained from "
                               "its first event: it was inserted, or its link stripped")


def test_a_missing_events_head_fails_a_chained_session(logged: Tools) -> None:
    head_file(logged).unlink()
    assert problem(logged) == (f"{head_file(logged)} is missing: Abhed writes it with every event of a hash-chained "
                               "session, so it was deleted (without it a cut at the end of the log could not be seen)")


def test_the_reported_cut_with_events_head_deleted_fails(logged: Tools) -> None:
    rewrite(logged, lines(logged)[:-2])
    head_file(logged).unlink()
    assert problem(logged).startswith(f"{head_file(logged)} is missing: ")


def test_an_unreadable_events_head_is_named(logged: Tools) -> None:
    for text in ("{not json", '{"seq": 9}', '{"seq": "x", "hash": ""}', "[1]", '{"seq": -1, "hash": ""}'):
        head_file(logged).write_text(text)
        assert problem(logged).startswith(f"{head_file(logged)} is unreadable"), text
    head_file(logged).unlink()
    head_file(logged).mkdir()  # cannot be read at all (EISDIR, as root too)
    assert problem(logged) == f"{head_file(logged)} is unreadable: it was changed"


def test_an_events_head_older_than_the_log_fails(logged: Tools) -> None:
    """Events appended after the head, links and all (someone who knows the scheme), or the head set
    back: either way the log goes on past the last event Abhed noted."""
    old = lines(logged)
    set_head(logged, 8, line_hash(old[7]))
    assert problem(logged) == ("event 9 (line 9) comes after the last event events.head names (event 8): it was added "
                               "to the log by something other than Abhed, which notes each event there as it writes it "
                               "(or Abhed was killed in the instant between writing it and noting it)")
    set_head(logged, 6, line_hash(old[5]))
    assert problem(logged) == ("events 7 to 9 (lines 7 to 9) come after the last event events.head names (event 6): "
                               "they were added to the log by something other than Abhed, which notes each event "
                               "there as it writes it")
    set_head(logged, 0, "")
    assert problem(logged).startswith("events 1 to 9 (lines 1 to 9) come after the last event events.head names "
                                      "(event 0)")


def test_an_events_head_naming_a_changed_hash_fails(logged: Tools) -> None:
    set_head(logged, 9, "0" * 64)
    assert problem(logged) == "event 9 (line 9) was changed: its hash is not the one recorded when it was written"


def test_state_json_and_the_log_disagreeing_on_the_chain_fails(logged: Tools) -> None:
    state = logged.session.dir / "state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "chain": "sha256-prev/0"}))
    assert problem(logged) == (f"state.json records the hash chain 'sha256-prev/0', but the log's first event declares "
                               f"'{CHAIN}': one of them was changed")


def test_a_chain_this_abhed_does_not_know_cannot_pass(logged: Tools) -> None:
    old = lines(logged)
    rewrite(logged, [old[0].replace(CHAIN.encode(), b"sha256-prev/9")] + old[1:])
    assert problem(logged) == (f"line 1 declares the hash chain 'sha256-prev/9', which this Abhed does not know (it "
                               f"knows {CHAIN}): the log cannot be verified here (it was changed, or written by a newer "
                               "Abhed: verify it with that one)")


def test_state_json_without_the_declaration_leaves_the_log_chained(logged: Tools) -> None:
    """An older Abhed saving state.json drops the field it does not know: the log still declares it."""
    state = logged.session.dir / "state.json"
    state.write_text(json.dumps({k: v for k, v in json.loads(state.read_text()).items() if k != "chain"}))
    verdict = checked(logged)
    assert verdict.status == "OK" and verdict.notes == [
        "state.json does not record it (rewritten by an older Abhed, or edited); the chain the log's first event "
        "declares is used"]


@pytest.mark.parametrize("content, why", [(None, "is missing"), (b"{not json", "is unreadable"),
                                          (b'{"chain": 7}', "is unreadable (its chain is 7)"),
                                          (b'["chain"]', "is unreadable (not a JSON object)")])
def test_a_state_json_lost_or_unreadable(logged: Tools, content: bytes | None, why: str) -> None:
    """The log's own declaration still holds; without it, a log that declares none cannot pass for a
    legacy one."""
    state = logged.session.dir / "state.json"
    state.unlink()
    if content is not None:
        state.write_bytes(content)
    verdict = checked(logged)
    assert verdict.status == "OK" and verdict.notes == [f"{state} {why}; the chain the log's first event declares is "
                                                        "used"]
    rewrite(logged, [without(line, "seq", "prev") for line in lines(logged)[1:]])
    assert problem(logged) == (f"{state} {why}, and the log's first event (line 1) declares none: whether the session "
                               "declared a hash chain cannot be told, so its log cannot be taken for one from before "
                               "the chain")


# -- payloads in blobs/ -----------------------------------------------------------------------------


@pytest.fixture
def with_blob(ws: Path, home: Path) -> tuple[Tools, Path]:
    t = Tools(ws, home)
    t.ok("write", path=str(ws / "big.txt"), content="big\n" * 10_000)  # 40,000 bytes: a blob
    t.ok("write", path=str(ws / "again.txt"), content="big\n" * 10_000)  # the same payload, named again
    (blob,) = t.session.log.blobs.iterdir()
    return t, blob


def test_a_deleted_payload_is_named(with_blob: tuple[Tools, Path]) -> None:
    t, blob = with_blob
    assert checked(t).status == "OK"
    blob.unlink()
    assert problem(t) == f"line 2 (event 2) names the payload {blob} (40000 bytes), which is missing: it was deleted"


def test_an_overwritten_payload_is_named(with_blob: tuple[Tools, Path]) -> None:
    t, blob = with_blob
    blob.write_bytes(b"bog\n" * 10_000)
    assert problem(t) == (f"the payload {blob} that line 2 (event 2) names does not match its hash: it was changed (or "
                          "damaged on disk)")


def test_an_unreadable_payload_cannot_pass(with_blob: tuple[Tools, Path]) -> None:
    t, blob = with_blob
    blob.unlink()
    blob.mkdir()  # read() fails with EISDIR, as root too
    assert problem(t) == (f"line 2 (event 2) names the payload {blob}, which cannot be read (Is a directory): it cannot "
                          "be verified")


def test_each_payload_is_hashed_once_however_many_lines_name_it(with_blob: tuple[Tools, Path],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from abhed.session import audit
    t, blob = with_blob
    hashed: list[str] = []
    real = audit.file_digest
    monkeypatch.setattr(audit, "file_digest", lambda handle, name: (hashed.append(handle.name), real(handle, name))[1])
    assert checked(t).status == "OK" and hashed == [str(blob)]  # named by both writes' actions


def test_a_payload_of_a_legacy_line_is_checked_too(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", blob_min=64)
    log.append(ActionEvent(session_id="s", tool="write", input={"content": "x" * 100}))
    (blob,) = log.blobs.iterdir()
    lines_ = [without(line, "seq", "prev").replace(b'"schema_version": 3', b'"schema_version": 2')
              for line in log.path.read_bytes().splitlines()]
    log.path.write_bytes(b"\n".join(lines_) + b"\n")
    (tmp_path / "events.head").unlink()
    assert verify(log.path).status == "LEGACY"
    blob.write_bytes(b"y" * 100)
    assert verify(log.path).problem == (f"the payload {blob} that line 1 names does not match its hash: it was changed "
                                        "(or damaged on disk)")


def test_a_nul_led_string_of_a_version_1_line_is_no_payload(tmp_path: Path) -> None:
    """Before blobs (schema_version 1), a string starting with NUL was the model's own."""
    path = tmp_path / "events.jsonl"
    ref = "\0blob:" + "0" * 64 + ":5"
    path.write_text(json.dumps({"schema_version": 1, "id": "a", "session_id": "s", "kind": "action", "tool": "t",
                                "input": ref}) + "\n")
    assert verify(path).status == "LEGACY"


# -- the head kept elsewhere ------------------------------------------------------------------------


def test_a_kept_head_is_found_and_events_after_it_are_counted(logged: Tools) -> None:
    kept = (5, line_hash(lines(logged)[4]))
    verdict = checked(logged, kept)
    assert verdict.status == "OK" and verdict.notes == [
        "the log holds the head kept elsewhere (event 5, line 5): events 1 to 5 are as they were when it was taken; "
        "4 events were added after it"]
    last = checked(logged, logged.session.log.head())
    assert last.notes == ["the log holds the head kept elsewhere (event 9, line 9): events 1 to 9 are as they were "
                          "when it was taken"]


def test_a_cut_that_also_rewrote_events_head_is_caught_by_the_kept_head(logged: Tools) -> None:
    kept = logged.session.log.head()
    old = lines(logged)
    rewrite(logged, old[:-2])
    set_head(logged, 7, line_hash(old[6]))  # events.head made to agree with the cut log
    assert checked(logged).status == "OK"  # nothing on this machine can tell: the kept head can
    assert checked(logged, kept).problem == ("the log ends at event 7, but the head kept elsewhere names event 9: the "
                                             "log was cut after that head was taken (and events.head rewritten to "
                                             "match)")


def test_a_kept_head_on_a_legacy_log_says_what_it_covers(ws: Path, home: Path) -> None:
    t = Tools(ws, home)
    old = [json.dumps({"schema_version": 2, "id": f"e{i}", "session_id": t.session.id, "agent_id": "main",
                       "at": "2026-01-01T00:00:00Z", "kind": "run", "status": "done"}).encode() for i in range(3)]
    legacy(t, old)
    verdict = checked(t, (2, line_hash(old[1])))
    assert verdict.status == "LEGACY" and verdict.notes[-1] == (
        "the log holds the head kept elsewhere (event 2, line 2): events 1 to 2 are as they were when it was taken (in "
        "a legacy session, only as far as its links go); 1 events were added after it")


@pytest.mark.parametrize("text, head", [("9:" + "ab" * 32, (9, "ab" * 32)), (" 12:" + "AB" * 32 + "\n", (12, "ab" * 32)),
                                        ("0:" + "ab" * 32, None), ("9:" + "ab" * 31, None), ("9:" + "g" * 64, None),
                                        ("ab" * 32, None), ("9:" + "ab" * 32 + ":", None), ("-1:" + "ab" * 32, None)])
def test_parse_head(text: str, head: tuple[int, str] | None) -> None:
    assert parse_head(text) == head


# -- legacy sessions ---------------------------------------------------------------------------------


def legacy(t: Tools, old: list[bytes]) -> None:
    """Make `t`'s session one from before the declaration: its log `old`, state.json without a chain."""
    t.session.log.path.write_bytes(b"\n".join(old) + b"\n")
    (t.session.dir / "events.head").unlink(missing_ok=True)
    state = t.session.dir / "state.json"
    state.write_text(json.dumps({k: v for k, v in json.loads(state.read_text()).items() if k != "chain"}))
    t.session.state.chain = None  # as the store opens it now
    events._TAILS.clear()  # and as a new process continues it: nothing known of where the log ends


def test_a_log_from_before_the_chain_still_loads_and_says_what_it_cannot_check(ws: Path, home: Path) -> None:
    t = Tools(ws, home)
    old = [json.dumps({"schema_version": 2, "id": f"e{i}", "session_id": t.session.id, "agent_id": "main",
                       "at": "2026-01-01T00:00:00Z", "kind": "run", "status": "done"}).encode() for i in range(3)]
    legacy(t, old)
    assert len(t.session.log.load().events) == 3
    assert checked(t).status == "LEGACY" and checked(t).events == 3 and checked(t).chained == 0
    assert checked(t).notes == ["3 events were written before the chain existed (older Abhed): they are counted, not "
                                "verifiable"]  # no word of events.head: nothing linked, nothing it could anchor
    assert checked(t).line("L") == ("LEGACY: L: 3 events, not tamper-evident (made before sessions declared their hash "
                                    f"chain); none is linked; head 3:{line_hash(old[2])}")
    t.ok("write", path=str(ws / "a.txt"), content="a")  # a newer Abhed continues the session: the chain starts
    verdict = checked(t)
    assert verdict.ok and verdict.status == "LEGACY" and verdict.exit_code == 3
    assert verdict.events == 5 and verdict.chained == 2 and verdict.chain is None
    assert verdict.notes == ["3 events were written before the chain existed (older Abhed): they are counted, not "
                             "verifiable"]
    assert verdict.summary("L").splitlines() == [
        f"LEGACY: L: 5 events, not tamper-evident (made before sessions declared their hash chain); the 2 linked ones "
        f"agree; head 5:{verdict.head[1]}",
        "note: this session was made by an Abhed that did not yet declare its chain at creation: a line changed, "
        "removed, or stripped of its link cannot be told from an old unlinked one; all that can be said is that the "
        "links it has agree",
        "note: 3 events were written before the chain existed (older Abhed): they are counted, not verifiable"]
    first_chained = json.loads(lines(t)[3])
    assert first_chained["seq"] == 4 and first_chained["prev"] != ""


def issue16(rows: list[bytes]) -> list[bytes]:
    """`rows` as issue 16's Abhed wrote them: linked from 1, schema_version 2, nothing declared."""
    out: list[bytes] = []
    for row in rows:
        value = {**json.loads(row), "schema_version": 2, "seq": len(out) + 1, "prev": line_hash(out[-1]) if out else ""}
        out.append(json.dumps(value).encode())
    return out


def test_a_legacy_log_whose_links_break_is_still_tampered(ws: Path, home: Path) -> None:
    t = Tools(ws, home)
    t.ok("write", path=str(ws / "a.txt"), content="a")
    t.ok("read", path=str(ws / "a.txt"))
    old = issue16(lines(t)[1:])
    legacy(t, old)
    assert checked(t).status == "LEGACY"
    head_file(t).write_text(json.dumps({"seq": 3, "hash": line_hash(old[2])}))  # older than the log: allowed here
    assert checked(t).status == "LEGACY"
    head_file(t).write_text(json.dumps({"seq": 0, "hash": ""}))  # as old as can be: names no event to check
    assert checked(t).status == "LEGACY"
    legacy(t, old[:1] + old[2:])
    assert problem(t) == "event 2 was removed: line 2 holds event 3 right after event 1"
    legacy(t, old[:2] + [without(old[2], "seq")] + old[3:])
    assert problem(t) == ("line 3 has no link to the line before it although earlier ones do: it was inserted, or its "
                          "link stripped")


def test_a_legacy_log_without_events_head_says_a_cut_cannot_be_seen(ws: Path, home: Path) -> None:
    t = Tools(ws, home)
    t.ok("write", path=str(ws / "a.txt"), content="a")
    legacy(t, issue16(lines(t)[1:]))
    verdict = checked(t)
    assert verdict.status == "LEGACY" and verdict.notes == [
        f"{head_file(t)} is missing: a cut at the end of the log cannot be detected"]
    head_file(t).write_text("{not json")
    assert problem(t) == f"{head_file(t)} is unreadable: it was changed"


def test_a_missing_log_of_a_legacy_session_is_not_taken_for_an_intact_one(tmp_path: Path) -> None:
    verdict = verify(tmp_path / "events.jsonl")
    assert not verdict.ok and verdict.problem == f"the log {tmp_path / 'events.jsonl'} does not exist"


def test_verify_of_a_log_without_a_session_reads_it_as_state_json_says(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.append(ActionEvent(session_id="s", tool="read", input={}))
    assert verify(log.path).status == "LEGACY"
    assert verify(log.path, Stated(CHAIN)).problem.startswith(f"state.json records that this session declared its "
                                                              f"hash chain ({CHAIN})")


# -- several writers ---------------------------------------------------------------------------------


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
    verdict = checked(t)
    assert verdict.status == "OK" and verdict.chained == 321, verdict.problem
    assert verdict.head == log.head() == (321, json.loads(head_file(t).read_text())["hash"])


def test_processes_appending_to_one_log_at_once_keep_the_chain_and_the_head(ws: Path, home: Path) -> None:
    """Several processes (subagents, `abhed tool` calls, an undo) append to one log, each under the
    log's flock: the links and events.head come out as one writer's would."""
    import subprocess
    import sys
    t = Tools(ws, home)
    code = """
import sys
from pathlib import Path
from abhed.session.events import EventLog, MessageEvent
log = EventLog(Path(sys.argv[1]))
for i in range(60):
    log.append(MessageEvent(session_id="s", agent_id="p" + sys.argv[2], role="user", content=str(i)), sync=i % 3 == 0)
"""
    writers = [subprocess.Popen([sys.executable, "-c", code, str(t.session.log.path), str(k)]) for k in range(4)]
    assert [w.wait(timeout=120) for w in writers] == [0] * 4
    verdict = checked(t)
    assert verdict.status == "OK" and verdict.chained == 241, verdict.problem
    assert json.loads(head_file(t).read_text()) == {"seq": 241, "hash": line_hash(lines(t)[-1])}
    assert sorted(p.name for p in t.session.dir.iterdir()) == ["events.head", "events.jsonl", "state.json", "summary.json"]


def test_verify_while_the_session_is_written_never_sees_a_half_append(ws: Path, home: Path) -> None:
    """Verify reads the log and events.head under the log's shared lock: an append (line, then head)
    going on meanwhile is seen whole or not at all, never as a cut or an added event."""
    t = Tools(ws, home)
    log, done = EventLog(t.session.log.path), threading.Event()

    def writer() -> None:
        for i in range(400):
            log.append(MessageEvent(session_id=t.session.id, role="user", content=str(i)), sync=False)
        done.set()
    thread = threading.Thread(target=writer)
    thread.start()
    verdicts = []
    while not done.is_set():
        verdicts.append(checked(t))
    thread.join()
    assert len(verdicts) > 1 and [v.problem for v in verdicts if not v.ok] == []


# -- the command line ---------------------------------------------------------------------------------


def test_verify_and_export_on_the_command_line(ws: Path, home: Path) -> None:
    abhed("tool", "write", json.dumps({"path": str(ws / "a.txt"), "content": "a"}), "--session", "s",
          "--workspace", str(ws))
    abhed("tool", "bash", json.dumps({"command": "rm a.txt", "description": "x"}), "--session", "s",
          "--workspace", str(ws), "--mode", "plan")  # refused: plan mode
    path = home / "sessions" / "s" / "events.jsonl"
    good = abhed("sessions", "verify", "s")
    head = head_token((6, line_hash(path.read_bytes().splitlines()[-1])))
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout == f"OK: {path}: 6 events, hash-chained from creation ({CHAIN}), intact; head {head}\n"
    exported = abhed("sessions", "export", "s", "--format", "jsonl")
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [r["type"] for r in records] == ["session", "call", "checkpoint", "call"]
    assert records[0]["chain_ok"] is True and records[0]["chain_status"] == "OK" and records[0]["head"] == head
    write, made, refused = records[1], records[2], records[3]
    assert write["user"] and write["host"] and write["decision"] == "allow" and write["approved_by"] == "human"
    assert write["checkpoint"] == 1 and made["number"] == 1 and made["call_id"] == write["call_id"]
    assert refused["decision"] == "deny" and refused["approved_by"] == "nobody (refused)"
    path.write_bytes(path.read_bytes().replace(b"rm a.txt", b"ls a.txt"))
    bad = abhed("sessions", "verify", "s")
    assert bad.returncode == 1 and bad.stdout == (f"TAMPERED: {path}: event 5, the line before line 6 was changed: "
                                                  "event 6 (line 6) links to a line with another hash\n")
    record = json.loads(abhed("sessions", "export", "s").stdout.splitlines()[0])
    assert record["chain_ok"] is False and record["chain_status"] == "TAMPERED" and record["head"] is None
    missing = abhed("sessions", "verify", "nope")
    assert missing.returncode == 2 and "No session 'nope'" in missing.stderr


def test_abhed_tool_prints_the_head_and_verify_head_checks_a_log_against_it(ws: Path, home: Path) -> None:
    """The reported cut with events.head rewritten to match: invisible on the machine, caught by
    the head `abhed tool` printed at the end of the last call."""
    for name in ("a", "b"):
        call = abhed("tool", "write", json.dumps({"path": str(ws / name), "content": name}), "--session", "s",
                     "--workspace", str(ws))
        assert call.returncode == 0, call.stderr
    directory = home / "sessions" / "s"
    rows = (directory / "events.jsonl").read_bytes().splitlines()
    assert len(rows) == 7  # its creation, then each call's action, checkpoint and observation
    kept = f"7:{line_hash(rows[-1])}"
    assert call.stderr == f"abhed: session s head {kept}\n"
    ok = abhed("sessions", "verify", "s", "--head", kept)
    assert ok.returncode == 0 and ok.stdout.splitlines()[1] == (
        "note: the log holds the head kept elsewhere (event 7, line 7): events 1 to 7 are as they were when it was "
        "taken")
    (directory / "events.jsonl").write_bytes(b"\n".join(rows[:4]) + b"\n")  # the second call cut away
    (directory / "events.head").write_text(json.dumps({"seq": 4, "hash": line_hash(rows[3])}))
    assert abhed("sessions", "verify", "s").returncode == 0
    cut = abhed("sessions", "verify", "s", "--head", kept)
    assert cut.returncode == 1 and cut.stdout == (
        f"TAMPERED: {directory / 'events.jsonl'}: the log ends at event 4, but the head kept elsewhere names event 7: "
        "the log was cut after that head was taken (and events.head rewritten to match)\n")


def test_the_reported_downgrade_fails_on_the_command_line(ws: Path, home: Path) -> None:
    abhed("tool", "write", json.dumps({"path": str(ws / "a.txt"), "content": "a"}), "--session", "s",
          "--workspace", str(ws))
    directory = home / "sessions" / "s"
    rows = [without(line, "seq", "prev") for line in (directory / "events.jsonl").read_bytes().splitlines()]
    rows[1] = rows[1].replace(b"a.txt", b"b.txt")
    (directory / "events.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    (directory / "events.head").unlink()
    proc = abhed("sessions", "verify", "s")
    assert proc.returncode == 1 and proc.stdout == (
        f"TAMPERED: {directory / 'events.jsonl'}: line 1 has no link to the line before it although this session is "
        "hash-chained from its first event: it was inserted, or its link stripped\n")


@pytest.mark.parametrize("args, message", [
    ([], "Name the session to verify (`abhed sessions list --all` lists them), or pass --all for every one."),
    (["s", "--all"], "--all verifies every session: give it without a SESSION_ID or --head."),
    (["--all", "--head", "1:" + "a" * 64], "--all verifies every session: give it without a SESSION_ID or --head."),
    (["s", "--head", "12"], "--head '12' is not a head: give it as printed at the session's end, SEQ:SHA256 (the "
                            "event's number, a colon, 64 hex digits), e.g. --head 12:3f5a..."),
    (["../x"], "Invalid session id '../x'")])
def test_verify_invocation_mistakes_are_instructions(home: Path, args: list[str], message: str) -> None:
    proc = abhed("sessions", "verify", *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_verify_all_gives_a_line_per_session_and_the_totals(ws: Path, home: Path) -> None:
    for name in ("good", "bad", "old", "nostate"):
        abhed("tool", "read", json.dumps({"path": str(ws)}), "--session", name, "--workspace", str(ws))
    store = home / "sessions"
    all_ok = abhed("sessions", "verify", "--all")
    assert all_ok.returncode == 0 and all_ok.stdout.splitlines()[-1] == (
        f"4 sessions in {store}: 4 OK, 0 legacy (not tamper-evident), 0 TAMPERED")
    (store / "nostate" / "state.json").unlink()  # still verified: its log is there
    (store / "lock-only").mkdir()  # a directory that holds no record is no session
    (store / "lock-only" / "lock").touch()
    old = [without(line, "seq", "prev").replace(b'"schema_version": 3', b'"schema_version": 2')
           for line in (store / "old" / "events.jsonl").read_bytes().splitlines()[1:]]
    (store / "old" / "events.jsonl").write_bytes(b"\n".join(old) + b"\n")
    (store / "old" / "events.head").unlink()
    state = json.loads((store / "old" / "state.json").read_text())
    (store / "old" / "state.json").write_text(json.dumps({**state, "chain": None}))
    with_legacy = abhed("sessions", "verify", "--all")
    assert with_legacy.returncode == 3, with_legacy.stdout
    assert with_legacy.stdout.splitlines()[-1] == (f"4 sessions in {store}: 3 OK, 1 legacy (not tamper-evident), 0 "
                                                   "TAMPERED")
    (store / "bad" / "events.head").unlink()
    proc = abhed("sessions", "verify", "--all")
    assert proc.returncode == 1
    out = proc.stdout.splitlines()
    assert out[0] == (f"TAMPERED: bad: {store / 'bad' / 'events.head'} is missing: Abhed writes it with every event of "
                      "a hash-chained session, so it was deleted (without it a cut at the end of the log could not be "
                      "seen)")
    assert out[1].startswith("OK: good: 3 events, hash-chained from creation") and out[2].startswith("OK: nostate: ")
    assert out[3].startswith("LEGACY: old: 2 events, not tamper-evident")
    assert out[4] == f"4 sessions in {store}: 2 OK, 1 legacy (not tamper-evident), 1 TAMPERED"
    single = abhed("sessions", "verify", "nostate")  # a session whose state.json is gone can be named too
    assert single.returncode == 0 and f"note: {store / 'nostate' / 'state.json'} is missing" in single.stdout


def test_verify_all_of_an_empty_store(home: Path) -> None:
    proc = abhed("sessions", "verify", "--all")
    assert proc.returncode == 0 and proc.stdout == f"0 sessions in {home / 'sessions'}: 0 OK, 0 legacy (not " \
                                                   "tamper-evident), 0 TAMPERED\n"


# -- the export ------------------------------------------------------------------------------------------


def test_export_names_the_run_its_model_and_who_approved(logged: Tools) -> None:
    records = export(logged.session)
    assert records[0]["chain_status"] == "OK" and records[0]["chain"].startswith("OK: the log: 9 events")
    assert records[0]["chain_ok"] is True and records[0]["head"] == head_token(logged.session.log.head())
    assert records[-1] == {**records[-1], "type": "run", "status": "done", "model": "m1"}  # the run's, carried on
    run = records[1]
    assert run["type"] == "run" and run["model"] == "m1" and run["user"] and run["host"]
    assert records[2] == {**records[2], "type": "prompt", "text": "go", "model": "m1"}
    calls = [r for r in records if r["type"] == "call"]
    assert [c["tool"] for c in calls] == ["write", "read"] and all(c["model"] == "m1" for c in calls)
    assert calls[0]["checkpoint"] is None  # Tools has checkpoints off
    head_file(logged).unlink()
    assert export(logged.session)[0] == {**export(logged.session)[0], "chain_ok": False, "chain_status": "TAMPERED",
                                         "head": None}


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
    assert checked(t).status == "OK"


def test_calls_from_before_user_and_host_were_recorded_are_not_credited_to_the_reader(ws: Path, home: Path) -> None:
    t = Tools(ws, home)
    old = {"schema_version": 2, "id": "a1", "session_id": t.session.id, "agent_id": "main",
           "at": "2026-01-01T00:00:00Z", "kind": "action", "tool": "read", "input": {"path": "/x"}}
    t.session.log.path.write_text(json.dumps(old) + "\n")
    call = [r for r in export(t.session) if r["type"] == "call"][0]
    assert call["user"] is None and call["host"] is None and call["outcome"].startswith("no result recorded")


def test_who_is_the_user_and_the_host_name_as_the_system_gives_them() -> None:
    """The audit's "who": the login name and the machine's host name (read without the socket module)."""
    import getpass
    import socket
    assert who() == (getpass.getuser(), socket.gethostname())
