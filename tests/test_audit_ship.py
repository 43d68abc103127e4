"""Central audit (issue 37, item 2): records derived from the session's log, sent to syslog (a
listening unix datagram socket here, parsed as RFC 5424), a JSON-lines file or directory, and an
OTLP/HTTP collector (a real HTTP receiver decoding the protobuf); a sink that is down loses nothing
and gets everything, once and in order, when it is back."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import abhed.tools  # noqa: F401 (installs the tools' traits, which tell a command and a file change)
from abhed.session import config
from abhed.session.audit import parse_head, verify_session
from abhed.session.auditrecord import SCHEMA
from abhed.session.auditship import PENDING, Pass, Shipper, deliver, read_cursor, refuse_writable
from abhed.session.auditsink import SinkError, make, syslog_frame
from abhed.session.events import AuditEvent, HookEvent, MessageEvent, ObservationEvent, RunEvent
from audit_testing import KINDS, Daemon, answer, at_work, audit, call, new_session, parse5424, records_of


# -- a session at work ------------------------------------------------------------------------------


def test_records_come_from_the_log_with_who_decided_each_call(tmp_path):
    session = new_session(tmp_path)
    at_work(session, tmp_path / "ws")
    records = records_of(session)
    assert [r["kind"] for r in records] == KINDS
    assert all(r["schema"] == SCHEMA and r["session"] == session.id for r in records)
    approvals = [r["fields"] for r in records if r["kind"] == "approval"]
    assert [(a["tool"], a["decision"], a["decided_by"]) for a in approvals] == [
        ("bash", "allow", "rule"), ("write", "allow", "mode"), ("edit", "deny", "human"),
        ("mcp__jira__get_issue", "allow", "rule"), ("bash", "deny", "hook"), ("read", "allow", "check")]
    command = next(r for r in records if r["kind"] == "command")
    assert command["fields"]["command"] == "make test" and command["fields"]["exit_code"] == 2
    assert command["user"] == "alice" and command["host"] == "ws1"
    change = next(r for r in records if r["kind"] == "file.change")
    assert change["fields"]["path"] == str(tmp_path / "ws" / "a.py") and change["fields"]["action"] == "created"
    mcp = next(r for r in records if r["kind"] == "mcp.call")
    assert (mcp["fields"]["server"], mcp["fields"]["tool"]) == ("jira", "get_issue")
    assert json.loads(mcp["fields"]["arguments"]) == {"key": "ABC-1"}
    ids = [r["id"] for r in records]
    assert len(set(ids)) == len(ids)  # a call's second record is SEQ.1
    assert records[3]["id"] == f"{session.id}:{records[2]['seq']}.1"


def test_long_strings_are_cut_and_say_so(tmp_path):
    session = new_session(tmp_path)
    call(session, "bash", {"command": "echo " + "x" * 10_000}, {"decision": "allow", "rule": "read-only",
                                                                  "reason": "r"})
    command = next(r for r in records_of(session) if r["kind"] == "command")
    assert len(command["fields"]["command"]) < 4200 and command["fields"]["command"].endswith("characters cut]")


# -- the settings -----------------------------------------------------------------------------------


def test_settings_default_to_no_sink_and_refuse_a_sink_without_its_destination(tmp_path):
    assert config.Settings().audit.sinks == []
    with pytest.raises(ValueError, match=r"jsonl sink needs \[audit.jsonl\] path"):
        audit(sinks=["jsonl"])
    with pytest.raises(ValueError, match=r"otlp sink needs \[audit.otlp\] endpoint"):
        audit(sinks=["otlp"])
    with pytest.raises(ValueError, match="facility"):
        audit(syslog={"facility": "mail2"})
    with pytest.raises(ValueError, match="sinks"):
        audit(sinks=["splunk"])
    toml = tmp_path / "config.toml"
    toml.write_text('[audit]\nsinks = ["syslog", "jsonl"]\n[audit.jsonl]\npath = "/var/log/abhed"\n'
                    '[audit.syslog]\nsocket = "/run/systemd/journal/dev-log"\nfacility = "local3"\n')
    loaded = config.load(env={"ABHED_CONFIG": str(toml)})
    assert loaded.audit.sinks == ["syslog", "jsonl"] and loaded.audit.syslog.facility == "local3"


def test_a_sink_path_the_model_can_write_is_refused(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(config.ConfigError, match=r"\[audit.jsonl\] path .* lies inside .*where the model can write"):
        refuse_writable(audit(sinks=["jsonl"], jsonl={"path": str(ws / "audit.jsonl")}), [ws])
    refuse_writable(audit(sinks=["jsonl"], jsonl={"path": str(tmp_path / "audit.jsonl")}), [ws])


# -- syslog -----------------------------------------------------------------------------------------


def test_syslog_frames_are_rfc5424_with_the_record_in_structured_data_and_message(tmp_path, short_dir):
    session = new_session(tmp_path)
    at_work(session, tmp_path / "ws")
    daemon = Daemon(short_dir / "log")
    try:
        cfg = audit(sinks=["syslog"], syslog={"socket": str(daemon.path), "facility": "local3"})
        out = deliver(session.dir, session.id, make("syslog", cfg, "ws1.lan"), cfg)
        frames = [parse5424(f) for f in daemon.frames()]
    finally:
        daemon.close()
    assert out == Pass(sent=len(KINDS))
    assert [f["msgid"] for f in frames] == KINDS
    first = frames[0]
    assert first["facility"] == 19 and first["severity"] == 6 and first["app"] == "abhed"
    assert first["host"] == "ws1.lan" and first["procid"] == str(os.getpid())
    assert first["sd"]["session"] == session.id and first["sd"]["seq"] == "1" and first["sd"]["kind"] == KINDS[0]
    assert first["time"].tzinfo is not None
    declined = next(f for f in frames if f["msgid"] == "approval" and f["record"]["fields"]["tool"] == "edit")
    assert declined["severity"] == 5 and declined["record"]["fields"]["decided_by"] == "human"
    assert [f["record"]["seq"] for f in frames] == sorted(f["record"]["seq"] for f in frames)


def test_a_syslog_frame_too_long_is_cut_to_the_limit_and_says_so(tmp_path):
    record = {"schema": SCHEMA, "id": "s:1", "session": "s", "seq": 1, "time": "2026-12-07T02:36:13+00:00",
              "kind": "command", "user": 'a"b]c\\', "host": "h", "agent": "main", "fields": {"command": "x" * 20_000}}
    frame = syslog_frame(record, 10, "host", 1, 1024)
    parsed = parse5424(frame)
    assert len(frame) <= 1024 and parsed["record"]["truncated"] is True
    assert parsed["sd"]["user"] == 'a"b]c\\'  # escaped in the structured data, read back whole


def test_syslog_down_then_up_delivers_everything_once_in_order_and_the_log_stays_whole(tmp_path, short_dir):
    session = new_session(tmp_path)
    at_work(session, tmp_path / "ws")
    cfg = audit(sinks=["syslog"], syslog={"socket": str(short_dir / "log")})
    sink = make("syslog", cfg, "h")
    down = deliver(session.dir, session.id, sink, cfg)
    assert down.sent == 0 and down.behind and "syslog socket" in (down.error or "")
    assert "does not exist" in (down.error or "")
    assert verify_session(session.dir).ok  # the local record is untouched
    session.record(RunEvent(session_id=session.id, status="started", prompt="again"))  # more while it is down
    daemon = Daemon(short_dir / "log")
    try:
        up = deliver(session.dir, session.id, sink, cfg)
        again = deliver(session.dir, session.id, sink, cfg)
        frames = [parse5424(f)["record"] for f in daemon.frames()]
    finally:
        daemon.close()
    assert up.sent == len(KINDS) + 1 and again == Pass()
    assert [r["kind"] for r in frames] == [*KINDS, "run.start"]
    assert [r["id"] for r in frames] == [r["id"] for r in records_of(session)]  # each once, in the log's order


# -- JSON lines ---------------------------------------------------------------------------------------


def test_jsonl_file_parsed_back_private_and_never_through_a_link(tmp_path):
    session = new_session(tmp_path)
    at_work(session, tmp_path / "ws")
    target = tmp_path / "audit.jsonl"
    cfg = audit(sinks=["jsonl"], jsonl={"path": str(target)})
    assert deliver(session.dir, session.id, make("jsonl", cfg, "h"), cfg).sent == len(KINDS)
    lines = target.read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == KINDS
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    outside = tmp_path / "elsewhere"
    outside.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(outside)
    cfg = audit(sinks=["jsonl"], jsonl={"path": str(link)})
    other = new_session(tmp_path)
    out = deliver(other.dir, other.id, make("jsonl", cfg, "h"), cfg)
    assert "is a symbolic link: refusing to follow it" in (out.error or "") and outside.read_text() == ""


def test_jsonl_directory_gets_a_file_per_session(tmp_path):
    one, two = new_session(tmp_path), new_session(tmp_path)
    (tmp_path / "collected").mkdir()
    cfg = audit(sinks=["jsonl"], jsonl={"path": str(tmp_path / "collected")})
    sink = make("jsonl", cfg, "h")
    for session in (one, two):
        assert deliver(session.dir, session.id, sink, cfg).sent == 1
    for session in (one, two):
        [line] = (tmp_path / "collected" / f"{session.id}.jsonl").read_text().splitlines()
        assert json.loads(line)["session"] == session.id


class Flaky:
    """A sink that takes `room` records, then fails (as a full disk or a dropped link would)."""

    name = "flaky"

    def __init__(self, room: int) -> None:
        self.room, self.got = room, []  # type: ignore[var-annotated]

    def send(self, records: list[dict[str, Any]]) -> None:
        taken = records[:self.room]
        self.got += taken
        self.room -= len(taken)
        if len(taken) < len(records):
            raise SinkError("full", sent=len(taken))

    def close(self) -> None:
        pass


def test_a_failure_mid_batch_resumes_at_the_first_record_not_taken(tmp_path):
    session = new_session(tmp_path)
    at_work(session, tmp_path / "ws")
    sink = Flaky(3)  # takes session.create, run.start, and the approval of a call, not its command record
    cfg = audit(batch=4)
    first = deliver(session.dir, session.id, sink, cfg)
    assert first.error == "full" and first.sent == 3 and first.behind
    cursor = read_cursor(session.dir / "audit" / "flaky.cursor")
    assert cursor.seq == 3  # up to the call (event 3); its result, event 4, was not wholly taken
    sink.room = 100
    deliver(session.dir, session.id, sink, cfg)
    # the approval of the cut call is sent again with its command record: a repeat, never a loss
    assert [r["kind"] for r in sink.got] == [*KINDS[:3], *KINDS[2:]]


def test_a_call_answered_after_a_pass_still_gets_its_command_record(tmp_path):
    session = new_session(tmp_path)
    action = call(session, "bash", {"command": "make"}, None, answered=False)
    sink, cfg = Flaky(100), audit()
    deliver(session.dir, session.id, sink, cfg)
    session.record(MessageEvent(session_id=session.id, role="assistant", content="waiting"))
    deliver(session.dir, session.id, sink, cfg)
    answer(session, action, {"decision": "allow", "rule": "read-only", "reason": "r"}, metadata={"exit_code": 0})
    deliver(session.dir, session.id, sink, cfg)
    command = sink.got[-1]
    assert command["kind"] == "command" and command["fields"]["command"] == "make" and command["user"] == "alice"
    assert [r["kind"] for r in sink.got] == ["session.create", "approval", "command"]


def test_two_deliverers_at_once_send_each_record_once(tmp_path):
    session = new_session(tmp_path)
    for _ in range(5):
        at_work(session, tmp_path / "ws")
    target = tmp_path / "audit.jsonl"
    cfg = audit(sinks=["jsonl"], jsonl={"path": str(target)}, batch=7)
    threads = [threading.Thread(target=deliver, args=(session.dir, session.id, make("jsonl", cfg, "h"), cfg))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [json.loads(line)["id"] for line in target.read_text().splitlines()]
    assert ids == [r["id"] for r in records_of(session)]


# -- OTLP ---------------------------------------------------------------------------------------------


class Collector:
    """An OTLP/HTTP logs receiver: decodes each ExportLogsServiceRequest; answers `status`."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (ExportLogsServiceRequest,
                                                                             ExportLogsServiceResponse)
        self.requests: list[Any] = []
        self.status = 200
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if owner.status != 200:
                    self.send_response(owner.status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                request = ExportLogsServiceRequest()
                request.ParseFromString(body)
                owner.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, request))
                reply = ExportLogsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/logs"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def logs(self) -> list[Any]:
        return [log for _, _, request in self.requests for resource in request.resource_logs
                for scope in resource.scope_logs for log in scope.log_records]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a unix socket's path is at most 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="abhed-audit-") as name:
        yield Path(name)


@pytest.fixture
def collector() -> Iterator[Collector]:
    pytest.importorskip("opentelemetry.sdk")
    made = Collector()
    yield made
    made.close()


def attributes(log: Any) -> dict[str, Any]:
    out = {}
    for item in log.attributes:
        value = item.value
        out[item.key] = getattr(value, value.WhichOneof("value"))
    return out


def test_otlp_log_records_reach_a_real_collector_as_protobuf(tmp_path, collector):
    session = new_session(tmp_path)
    at_work(session, tmp_path / "ws")
    cfg = audit(sinks=["otlp"], otlp={"endpoint": collector.url, "headers": {"Authorization": "Bearer t0k"}})
    out = deliver(session.dir, session.id, make("otlp", cfg, "ws1.lan"), cfg)
    assert out == Pass(sent=len(KINDS))
    path, headers, request = collector.requests[0]
    assert path == "/v1/logs" and headers["authorization"] == "Bearer t0k"
    resource = {a.key: a.value.string_value for a in request.resource_logs[0].resource.attributes}
    assert resource["service.name"] == "abhed" and resource["host.name"] == "ws1.lan"
    assert request.resource_logs[0].scope_logs[0].scope.name == "abhed.audit"
    logs = collector.logs()
    assert [attributes(log)["abhed.kind"] for log in logs] == KINDS
    assert [json.loads(log.body.string_value)["kind"] for log in logs] == KINDS
    command = next(log for log in logs if attributes(log)["abhed.kind"] == "command")
    assert attributes(command)["abhed.field.command"] == "make test" and attributes(command)["abhed.user"] == "alice"
    assert command.event_name == "abhed.command" and command.severity_text == "INFO"
    assert command.time_unix_nano > 0


def test_otlp_collector_refusing_then_taking_gets_everything_once(tmp_path, collector):
    session = new_session(tmp_path)
    at_work(session, tmp_path / "ws")
    cfg = audit(sinks=["otlp"], otlp={"endpoint": collector.url}, timeout_s=0.5)
    sink = make("otlp", cfg, "h")
    collector.status = 400  # not retried by the exporter: a quick failure
    down = deliver(session.dir, session.id, sink, cfg)
    assert down.sent == 0 and f"the OTLP collector {collector.url} did not take the records" in (down.error or "")
    collector.status = 200
    assert deliver(session.dir, session.id, sink, cfg).sent == len(KINDS)
    assert [attributes(log)["abhed.id"] for log in collector.logs()] == [r["id"] for r in records_of(session)]


# -- a session's shipper --------------------------------------------------------------------------------


def test_a_session_start_and_end_carry_the_head_and_a_failure_is_recorded_and_told_once(tmp_path, short_dir):
    session = new_session(tmp_path)
    told: list[str] = []
    cfg = audit(sinks=["syslog", "jsonl"], syslog={"socket": str(short_dir / "log")},
                jsonl={"path": str(tmp_path / "audit.jsonl")}, retry_s=600, close_wait_s=10)
    shipper = Shipper(cfg, tmp_path / "home", session.dir, session.id, session.record, told.append)
    session.after_record = shipper.notify
    shipper.start()
    at_work(session, tmp_path / "ws")
    shipper.end()
    events = session.log.load().events
    failed = [e for e in events if isinstance(e, AuditEvent) and e.what == "failed"]
    assert len(failed) == 1 and failed[0].sink == "syslog" and "does not exist" in failed[0].detail
    assert len([t for t in told if t.startswith("audit: cannot send to the syslog sink")]) == 1
    assert "Nothing is lost" in told[0]
    assert any("did not take all of this session's records" in t and "syslog" in t for t in told)
    assert (tmp_path / "home" / PENDING / session.id).exists()
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    kinds = [r["kind"] for r in lines]
    assert kinds[0] == "session.create" and kinds[1] == "session.start" and kinds[-1] in ("session.end", "audit.failed")
    assert "audit.failed" in kinds and kinds.count("session.end") == 1
    end = next(r for r in lines if r["kind"] == "session.end")
    head = parse_head(end["fields"]["head"])
    assert head is not None and head[0] == end["seq"]
    assert verify_session(session.dir, kept=head).ok  # the head sent is the log's own

    # The next session started with this store sends the first one's backlog, once syslog is back.
    daemon = Daemon(short_dir / "log")
    try:
        other = new_session(tmp_path)
        shipper = Shipper(cfg, tmp_path / "home", other.dir, other.id, other.record, told.append)
        shipper.start()
        shipper.end()
        frames = [parse5424(f)["record"] for f in daemon.frames()]
    finally:
        daemon.close()
    first = [r["id"] for r in frames if r["session"] == session.id]
    assert first == [r["id"] for r in lines]  # everything of the first session, once, in order
    assert not (tmp_path / "home" / PENDING / session.id).exists()


def test_a_sink_back_in_the_same_session_is_recorded_as_resumed(tmp_path, short_dir):
    session = new_session(tmp_path)
    told: list[str] = []
    cfg = audit(sinks=["syslog"], syslog={"socket": str(short_dir / "log")}, retry_s=0.05, close_wait_s=10)
    shipper = Shipper(cfg, tmp_path / "home", session.dir, session.id, session.record, told.append)
    session.after_record = shipper.notify
    shipper.start()
    daemon = None
    try:
        while not any(isinstance(e, AuditEvent) and e.what == "failed" for e in session.log.load().events):
            shipper.wake.wait(0.01)
        daemon = Daemon(short_dir / "log")
        at_work(session, tmp_path / "ws")
        shipper.end()
        frames = [parse5424(f)["record"] for f in daemon.frames()]
    finally:
        if daemon is not None:
            daemon.close()
    kinds = [r["kind"] for r in frames]
    assert kinds[:3] == ["session.create", "session.start", "audit.failed"] and "audit.resumed" in kinds
    assert kinds.count("approval") == 6 and kinds.count("session.end") == 1  # resumed may come after the end
    ids = [r["id"] for r in frames]
    assert ids == [r["id"] for r in records_of(session)]  # each once, in the log's order
    assert any(t.startswith("audit: the syslog sink takes records again") for t in told)
    assert not (tmp_path / "home" / PENDING / session.id).exists()


def test_hooks_and_their_outcomes_are_records(tmp_path):
    session = new_session(tmp_path)
    session.record(HookEvent(session_id=session.id, event="pre_tool", command=["/bin/check"], tool="bash",
                             exit_code=2, outcome="blocked"))
    [hook] = [r for r in records_of(session) if r["kind"] == "hook"]
    assert hook["fields"] == {"event": "pre_tool", "command": ["/bin/check"], "tool": "bash", "exit_code": 2,
                              "outcome": "blocked"}


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a file to another user")
def test_a_jsonl_file_another_user_made_is_refused(tmp_path):
    session = new_session(tmp_path)
    (tmp_path / "collected").mkdir()
    planted = tmp_path / "collected" / f"{session.id}.jsonl"
    planted.write_text("")
    os.chown(planted, 54321, 54321)
    cfg = audit(sinks=["jsonl"], jsonl={"path": str(tmp_path / "collected")})
    out = deliver(session.dir, session.id, make("jsonl", cfg, "h"), cfg)
    assert f"the audit file {planted} belongs to uid 54321, not to you or root" in (out.error or "")
    assert planted.read_text() == "" and out.behind


def test_the_opentelemetry_packages_load_only_for_an_otlp_sink(tmp_path, short_dir):
    import subprocess
    import sys
    code = ("import sys; from pathlib import Path; from abhed.session import config; "
            "from abhed.session.auditsink import make; "
            f"cfg = config.AuditConfig(sinks=['syslog', 'jsonl'], jsonl={{'path': '{tmp_path}'}}); "
            "[make(n, cfg, 'h') for n in cfg.sinks]; print(any(m.startswith('opentelemetry') for m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def test_a_cursor_another_process_holds_is_waited_for_then_left(tmp_path):
    import fcntl
    session = new_session(tmp_path)
    sink, cfg = Flaky(100), audit(timeout_s=0.2)
    assert deliver(session.dir, session.id, sink, cfg) == Pass(sent=1)
    lock = session.dir / "audit" / "flaky.lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    assert stat.S_IMODE((session.dir / "audit").stat().st_mode) == 0o700
    at_work(session, tmp_path / "ws")
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process is sending this session's records to this sink
        busy = deliver(session.dir, session.id, sink, cfg)
    assert busy == Pass(behind=True) and len(sink.got) == 1
    assert deliver(session.dir, session.id, sink, cfg) == Pass(sent=len(KINDS) - 1)


def test_a_cursor_that_cannot_be_kept_is_a_failure_named(tmp_path):
    session = new_session(tmp_path)
    (session.dir / "audit").write_text("")  # not a directory
    out = deliver(session.dir, session.id, Flaky(100), audit())
    assert out.behind and out.error == f"cannot keep the flaky sink's cursor in {session.dir / 'audit'}: File exists"


def test_a_cursor_past_the_end_of_a_replaced_log_reads_it_again_from_the_start(tmp_path):
    session = new_session(tmp_path)
    at_work(session, tmp_path / "ws")
    (session.dir / "audit").mkdir()
    (session.dir / "audit" / "flaky.cursor").write_text(json.dumps({"seq": 5, "offset": 10**9}))
    sink = Flaky(100)
    deliver(session.dir, session.id, sink, audit())
    assert [r["seq"] for r in sink.got] == [r["seq"] for r in records_of(session) if r["seq"] > 5]


def test_a_line_still_being_written_waits_for_its_newline(tmp_path):
    session = new_session(tmp_path)
    sink, cfg = Flaky(100), audit()
    deliver(session.dir, session.id, sink, cfg)
    from abhed.session.events import to_json
    line = to_json(RunEvent(session_id=session.id, status="started", prompt="p", seq=2, prev="x")).encode()
    with open(session.dir / "events.jsonl", "ab") as log:
        log.write(line)  # whole JSON, no newline yet: the writer is between its write and its newline
    assert deliver(session.dir, session.id, sink, cfg) == Pass()
    with open(session.dir / "events.jsonl", "ab") as log:
        log.write(b"\n")
    assert deliver(session.dir, session.id, sink, cfg) == Pass(sent=1)
    assert [r["kind"] for r in sink.got] == ["session.create", "run.start"]


def test_records_read_again_for_an_unanswered_call_are_not_sent_again(tmp_path):
    session = new_session(tmp_path)
    waiting = call(session, "bash", {"command": "sleep 9"}, None, answered=False)
    call(session, "read", {"path": "/x"}, {"decision": "allow", "rule": "read-only", "reason": "r"})
    sink, cfg = Flaky(100), audit()
    deliver(session.dir, session.id, sink, cfg)
    answer(session, waiting, {"decision": "allow", "rule": "read-only", "reason": "r"}, metadata={"exit_code": 0})
    deliver(session.dir, session.id, sink, cfg)
    assert [(r["kind"], r["fields"]["tool"] if r["kind"] == "approval" else "") for r in sink.got] == [
        ("session.create", ""), ("approval", "read"), ("approval", "bash"), ("command", "")]


def test_a_sink_that_cannot_be_made_is_told_and_its_records_wait(tmp_path, monkeypatch):
    import abhed.session.auditship as ship

    def missing(name, config, hostname):  # type: ignore[no-untyped-def]
        raise SinkError("the otlp sink needs the OpenTelemetry packages")
    monkeypatch.setattr(ship, "make", missing)
    session = new_session(tmp_path)
    told: list[str] = []
    cfg = audit(sinks=["otlp"], otlp={"endpoint": "http://127.0.0.1:9/v1/logs"}, close_wait_s=10)
    shipper = Shipper(cfg, tmp_path / "home", session.dir, session.id, session.record, told.append)
    shipper.start()
    shipper.end()
    assert told[0].startswith("audit: cannot send to the otlp sink: the otlp sink needs the OpenTelemetry packages")
    assert "the otlp sink did not take all of this session's records" in told[-1]
    assert (tmp_path / "home" / PENDING / session.id).exists()
    audits = [e.what for e in session.log.load().events if isinstance(e, AuditEvent)]
    assert audits[0] == "start" and sorted(audits[1:]) == ["end", "failed"]  # the worker makes the sinks: either order


def test_a_pending_note_of_a_session_since_removed_is_dropped(tmp_path):
    session = new_session(tmp_path)
    (tmp_path / "home" / PENDING).mkdir()
    (tmp_path / "home" / PENDING / "gone-1").touch()
    cfg = audit(sinks=["jsonl"], jsonl={"path": str(tmp_path / "a.jsonl")})
    shipper = Shipper(cfg, tmp_path / "home", session.dir, session.id, session.record, lambda text: None)
    shipper.start()
    shipper.end()
    assert os.listdir(tmp_path / "home" / PENDING) == []


def test_an_unreadable_line_is_passed_over_and_a_bad_cursor_starts_again(tmp_path):
    session = new_session(tmp_path)
    with open(session.dir / "events.jsonl", "ab") as log:
        log.write(b"{torn by a crash\n")
    at_work(session, tmp_path / "ws")
    (session.dir / "audit").mkdir()
    (session.dir / "audit" / "flaky.cursor").write_text(json.dumps({"seq": -3, "offset": -1}))
    sink = Flaky(100)
    assert deliver(session.dir, session.id, sink, audit()) == Pass(sent=len(KINDS))
    assert [r["kind"] for r in sink.got] == KINDS


def test_a_pass_asked_to_stop_stops_between_batches_and_says_it_is_behind(tmp_path):
    session = new_session(tmp_path)
    at_work(session, tmp_path / "ws")
    sink = Flaky(100)
    out = deliver(session.dir, session.id, sink, audit(batch=2), stop=lambda: True)
    assert out == Pass(sent=2, behind=True) and len(sink.got) == 2
    assert deliver(session.dir, session.id, sink, audit(batch=2)).sent == len(KINDS) - 2


def test_only_the_sinks_named_are_checked_for_a_writable_path(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    refuse_writable(audit(sinks=[], jsonl={"path": str(ws / "a.jsonl")}, syslog={"socket": str(ws / "log")}), [ws])
    with pytest.raises(config.ConfigError, match=r"\[audit.syslog\] socket"):
        refuse_writable(audit(sinks=["syslog"], syslog={"socket": str(ws / "log")}), [ws])


def test_nothing_is_recorded_once_the_session_has_ended(tmp_path):
    session = new_session(tmp_path)
    cfg = audit(sinks=["jsonl"], jsonl={"path": str(tmp_path / "a.jsonl")})
    shipper = Shipper(cfg, tmp_path / "home", session.dir, session.id, session.record, lambda text: None)
    shipper.start()
    shipper.end()
    before = session.log.head()
    shipper._failed("jsonl", "late")  # a pass still running when the session ended
    assert session.log.head() == before


def test_a_result_whose_call_is_not_in_the_log_still_gives_its_approval(tmp_path):
    session = new_session(tmp_path)
    session.record(ObservationEvent(session_id=session.id, action_id="gone", tool="bash", content="Not run: hook\nsaid",
                                    is_error=True, metadata={"error_kind": "hook_blocked"}, duration_ms=1.0))
    session.record(ObservationEvent(session_id=session.id, action_id="odd", tool="read", content="x", is_error=False,
                                    metadata={"approval": "not a table"}, duration_ms=1.0))
    records = records_of(session)
    assert [r["kind"] for r in records] == ["session.create", "approval"]
    assert records[1]["user"] is None and records[1]["fields"]["decided_by"] == "hook"
    assert records[1]["fields"]["reason"] == "Not run: hook"


def test_a_string_at_the_limit_is_kept_whole():
    from abhed.session.auditrecord import MAX_STRING, bounded
    assert bounded("x" * MAX_STRING) == "x" * MAX_STRING
    assert bounded(["y" * (MAX_STRING + 1)])[0].endswith("[...1 characters cut]")


def test_a_jsonl_write_that_fails_midway_is_cut_back_and_sent_again_later(tmp_path):
    """A full disk, played by a file size limit: part of the batch lands, the write fails (EFBIG);
    the file is cut back to where it was, and the cursor stays, so nothing is half there."""
    import subprocess
    import sys
    session = new_session(tmp_path)
    at_work(session, tmp_path / "ws")
    target = tmp_path / "audit.jsonl"
    target.write_text('{"earlier": 1}\n')
    code = f"""
import resource, signal, sys
from pathlib import Path
from abhed.session import config
from abhed.session.auditship import deliver
from abhed.session.auditsink import make
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({target.stat().st_size + 600}, resource.RLIM_INFINITY))
cfg = config.AuditConfig(sinks=["jsonl"], jsonl={{"path": "{target}"}})
print(deliver(Path("{session.dir}"), "{session.id}", make("jsonl", cfg, "h"), cfg).error)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"cannot append to the audit file {target}: File too large" in proc.stdout
    assert target.read_text() == '{"earlier": 1}\n'
    cfg = audit(sinks=["jsonl"], jsonl={"path": str(target)})
    assert deliver(session.dir, session.id, make("jsonl", cfg, "h"), cfg).sent == len(KINDS)
    assert [json.loads(line).get("kind") for line in target.read_text().splitlines()] == [None, *KINDS]


def test_a_jsonl_path_that_is_no_regular_file_is_refused(tmp_path):
    session = new_session(tmp_path)
    cfg = audit(sinks=["jsonl"], jsonl={"path": "/dev/null"})
    out = deliver(session.dir, session.id, make("jsonl", cfg, "h"), cfg)
    assert out.error == "the audit file /dev/null is not a regular file: refusing to write into it" and out.sent == 0


def test_a_jsonl_file_another_process_keeps_locked_is_waited_for_then_told(tmp_path):
    import fcntl
    session = new_session(tmp_path)
    target = tmp_path / "audit.jsonl"
    target.write_text("")
    cfg = audit(sinks=["jsonl"], jsonl={"path": str(target)}, timeout_s=0.2)
    with open(target, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another session appending its batch
        out = deliver(session.dir, session.id, make("jsonl", cfg, "h"), cfg)
    assert out.error == f"the audit file {target} stayed locked by another process for 0.2 s"
    assert target.read_text() == ""
    assert deliver(session.dir, session.id, make("jsonl", cfg, "h"), cfg).sent == 1
