"""The event log stays small however large the payloads (issue 14 item 7): strings of BLOB_MIN bytes
or more are stored once by hash in blobs/ beside the log, made durable first, and put back on load."""

from __future__ import annotations

import json
import os
from pathlib import Path

from abhed.agent.conversation import message_event, rebuild
from abhed.session.events import BLOB_MIN, ActionEvent, EventLog, MessageEvent, ObservationEvent, to_json
from abhed.model.wire import Msg, ToolCall
from abhed_testing import abhed


def _lines(log: EventLog) -> list[dict]:
    return [json.loads(line) for line in log.path.read_text().splitlines()]


def test_a_large_write_keeps_the_log_small_and_loads_whole(tools, ws):
    content = "".join(f"line {n} of a big generated file\n" for n in range(40000))  # about 1.3 MB
    tools.ok("write", path=str(ws / "big.txt"), content=content)
    log = tools.session.log
    assert log.path.stat().st_size < 4000
    stored = _lines(log)[1]["input"]["content"]  # line 1: the session's creation
    data = content.encode()
    from hashlib import sha256
    name = sha256(data).hexdigest()
    assert stored == f"\x00blob:{name}:{len(data)}"
    assert (log.blobs / name).read_bytes() == data and (log.blobs / name).stat().st_mode & 0o777 == 0o600
    loaded = log.load()
    assert not loaded.problems and loaded.events[1].input["content"] == content


def test_the_same_payload_is_stored_once(tools, ws):
    content = "same\n" * 10000
    tools.ok("write", path=str(ws / "a.txt"), content=content)
    blobs = sorted(tools.session.log.blobs.iterdir())
    inode = blobs[0].stat().st_ino
    tools.ok("write", path=str(ws / "b.txt"), content=content)
    assert sorted(tools.session.log.blobs.iterdir()) == blobs and blobs[0].stat().st_ino == inode
    events = tools.session.log.load().events
    assert [e.input["content"] for e in events if isinstance(e, ActionEvent)] == [content, content]


def test_the_threshold_is_in_utf8_bytes(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", blob_min=100)
    small, exact, wide = "x" * 99, "x" * 100, "é" * 50  # 99, 100 and 100 bytes
    log.append(ActionEvent(session_id="s", tool="t", input={"small": small, "exact": exact, "wide": wide}))
    stored = _lines(log)[0]["input"]
    assert stored["small"] == small and stored["exact"].startswith("\x00blob:") and stored["wide"].startswith("\x00blob:")
    assert stored["exact"].endswith(":100") and stored["wide"].endswith(":100")
    assert len(list(log.blobs.iterdir())) == 2
    assert log.load().events[0].input == {"small": small, "exact": exact, "wide": wide}
    assert EventLog(tmp_path / "other.jsonl").blob_min == BLOB_MIN


def test_lone_surrogates_in_a_blob_round_trip(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", blob_min=64)
    text = "a\ud800" * 100
    log.append(ActionEvent(session_id="s", tool="t", input=text))
    assert log.load().events[0].input == text


def test_strings_the_model_started_with_nul_never_pass_for_a_reference(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", blob_min=1000)
    fake = "\x00blob:" + "0" * 64 + ":3"
    values = {"fake": fake, "nul": "\x00", "nulnul": "\x00\x00x", "plain": "x"}
    log.append(ActionEvent(session_id="s", tool="t", input=values))
    assert _lines(log)[0]["input"]["fake"] == "\x00" + fake
    loaded = log.load()
    assert not loaded.problems and loaded.events[0].input == values


def test_logs_written_before_blobs_load_as_they_are(tmp_path):
    """A schema_version 1 line is read literally, even a string that looks like a reference."""
    path = tmp_path / "events.jsonl"
    old = {"schema_version": 1, "id": "a" * 32, "session_id": "s", "agent_id": "main", "parent_id": None,
           "at": "2026-01-01T00:00:00Z", "kind": "action", "tool": "bash", "tool_call_id": None,
           "input": {"command": "\u0000blob:" + "0" * 64 + ":3", "other": "\u0000\u0000x"}}
    path.write_text(json.dumps(old) + "\n")
    loaded = EventLog(path).load()
    assert not loaded.problems and loaded.events[0].input == old["input"]
    assert loaded.events[0].schema_version == 1


def test_a_missing_or_damaged_blob_is_reported_and_the_rest_loads(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", blob_min=64)
    gone, damaged = "g" * 100, "d" * 100
    log.append(ActionEvent(session_id="s", tool="t", input=gone))
    log.append(ActionEvent(session_id="s", tool="t", input=damaged))
    log.append(ActionEvent(session_id="s", tool="t", input="fine"))
    from hashlib import sha256
    (log.blobs / sha256(gone.encode()).hexdigest()).unlink()
    (log.blobs / sha256(damaged.encode()).hexdigest()).write_text("tampered")
    loaded = log.load()
    assert [e.input for e in loaded.events][2] == "fine"
    assert loaded.events[0].input == f"[payload of 100 bytes missing: {log.blobs / sha256(gone.encode()).hexdigest()}]"
    assert loaded.events[1].input.startswith("[payload of 100 bytes damaged: ")
    assert len(loaded.problems) == 2
    assert loaded.problems[0].startswith(f"{log.path}:1: payload {log.blobs}/")
    assert loaded.problems[0].endswith(" (100 bytes) cannot be read (No such file or directory); shown as a placeholder")
    assert loaded.problems[1].startswith(f"{log.path}:2: payload ") and "does not match its hash" in loaded.problems[1]


def test_the_blob_is_durable_before_the_line_that_names_it(tmp_path, monkeypatch):
    log = EventLog(tmp_path / "events.jsonl", blob_min=64)
    order: list[str] = []
    real_fsync, real_write = os.fsync, os.write

    def fsync(fd: int) -> None:
        order.append("fsync " + os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def write(fd: int, data: bytes) -> int:
        order.append("write " + os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        return real_write(fd, data)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "write", write)
    log.append(ActionEvent(session_id="s", tool="t", input="p" * 100), sync=False)
    blob_synced = next(i for i, step in enumerate(order) if step.startswith("fsync .") and "abhed-tmp" in step)
    assert "fsync blobs" in order  # the directory entry too
    assert order.index("write events.jsonl") > max(blob_synced, order.index("fsync blobs"))


def test_resume_rebuilds_a_conversation_whose_calls_were_stored_as_blobs(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    arguments = json.dumps({"path": "/w/big.txt", "content": "z" * 50000})
    reply = Msg("assistant", "writing it", [ToolCall("c1", "write", arguments)])
    log.append(message_event(Msg("user", "make big.txt"), "s", "main", None, origin="user"))
    event = message_event(reply, "s", "main", None, origin="model")
    log.append(event)
    action = ActionEvent(session_id="s", tool="write", tool_call_id="c1", input=json.loads(arguments))
    log.append(action)
    log.append(ObservationEvent(session_id="s", action_id=action.id, tool="write", content="Created /w/big.txt",
                                is_error=False, duration_ms=1))
    assert log.path.stat().st_size < 5000
    messages = rebuild(log.load().events, "main", 100000)
    assert messages[1].tool_calls[0].arguments == arguments and messages[2].content == "Created /w/big.txt"


def test_sessions_show_prints_payloads_from_blobs(ws, home):
    content = "shown from a blob\n" + "y" * 30000
    proc = abhed("tool", "write", json.dumps({"content": content, "path": str(ws / "b.txt")}), "--workspace", str(ws),
                 "--session", "b")
    assert proc.returncode == 0
    as_json = abhed("sessions", "show", "b", "--json")
    assert json.loads(as_json.stdout.splitlines()[1])["input"]["content"] == content  # after the session's creation
    assert "shown from a blob" in abhed("sessions", "show", "b").stdout


def test_to_json_without_a_store_is_the_plain_event():
    event = MessageEvent(session_id="s", role="user", content="\x00x" + "y" * BLOB_MIN)
    assert json.loads(to_json(event))["content"] == event.content


def test_a_nul_led_string_between_the_quick_check_and_the_threshold_is_escaped_too(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", blob_min=100)
    text = "\x00" + "x" * 30  # 31 characters: may reach 100 bytes as far as the length says; 31 bytes in fact
    wide = "😀" * 25  # 25 characters, 100 bytes: a blob
    log.append(ActionEvent(session_id="s", tool="t", input={"text": text, "wide": wide}))
    stored = _lines(log)[0]["input"]
    assert stored["text"] == "\x00" + text and stored["wide"].startswith("\x00blob:") and stored["wide"].endswith(":100")
    assert log.load().events[0].input == {"text": text, "wide": wide}


def test_one_damaged_blob_named_twice_is_read_and_reported_once(tmp_path):
    from hashlib import sha256
    log = EventLog(tmp_path / "events.jsonl", blob_min=64)
    payload = "p" * 100
    log.append(ActionEvent(session_id="s", tool="t", input={"a": payload, "b": payload}))
    (log.blobs / sha256(payload.encode()).hexdigest()).write_text("tampered")
    loaded = log.load()
    assert len(loaded.problems) == 1 and loaded.events[0].input["a"] == loaded.events[0].input["b"]


def test_the_log_and_its_blobs_are_private(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", blob_min=64)
    log.append(ActionEvent(session_id="s", tool="t", input="q" * 100))
    assert log.path.stat().st_mode & 0o777 == 0o600 and log.blobs.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in log.blobs.iterdir())


def test_the_documented_threshold():
    assert BLOB_MIN == 16 * 1024  # README: "payloads of 16 KiB or more"
