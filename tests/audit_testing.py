"""The central audit's tests' helpers: a session at work (one call of every sort the audit tells
apart), a syslog daemon's socket (a listening unix datagram socket) and a parser of the RFC 5424
frames it receives."""

from __future__ import annotations

import json
import re
import socket
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from abhed.session import config
from abhed.session.auditrecord import Mapper
from abhed.session.events import ActionEvent, MessageEvent, ModeEvent, ObservationEvent, RunEvent
from abhed.session.store import Session, SessionStore


def audit(**values: Any) -> config.AuditConfig:
    return config.AuditConfig.model_validate({"timeout_s": 2.0, **values})


def new_session(tmp_path: Path) -> Session:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return SessionStore(tmp_path / "home").create(ws)


def call(session: Session, tool: str, args: dict[str, Any], approval: dict[str, Any] | None, *,
         metadata: dict[str, Any] | None = None, is_error: bool = False, answered: bool = True) -> ActionEvent:
    action = ActionEvent(session_id=session.id, tool=tool, input=args, user="alice", host="ws1")
    session.record(action)
    if answered:
        answer(session, action, approval, metadata=metadata, is_error=is_error)
    return action


def answer(session: Session, action: ActionEvent, approval: dict[str, Any] | None, *,
           metadata: dict[str, Any] | None = None, is_error: bool = False) -> None:
    meta = {**({"approval": approval} if approval is not None else {}), **(metadata or {})}
    session.record(ObservationEvent(session_id=session.id, action_id=action.id, tool=action.tool, content="done",
                                    is_error=is_error, metadata=meta, duration_ms=5.0))


def at_work(session: Session, ws: Path) -> None:
    """A run with one call of every sort the audit tells apart."""
    session.record(RunEvent(session_id=session.id, status="started", prompt="fix it", user="alice", host="ws1",
                            model="qwen"))
    call(session, "bash", {"command": "make test"}, {"decision": "allow", "rule": "allow: bash(make test)",
                                                     "reason": "allowed by the rule bash(make test)"},
         metadata={"exit_code": 2, "timed_out": False}, is_error=True)
    call(session, "write", {"path": str(ws / "a.py"), "content": "x"},
         {"decision": "allow", "rule": "mode: accept-edits", "reason": "mode accept-edits allows file edits"},
         metadata={"path": str(ws / "a.py"), "action": "created"})
    call(session, "edit", {"path": str(ws / "b.py")}, {"decision": "deny", "rule": "mode: ask",
                                                       "reason": "the human declined it: not now"})
    call(session, "mcp__jira__get_issue", {"key": "ABC-1"},
         {"decision": "allow", "rule": "allow: mcp__jira__get_issue", "reason": "allowed by the rule"})
    call(session, "bash", {"command": "rm -rf /"}, None, metadata={"error_kind": "hook_blocked"}, is_error=True)
    call(session, "read", {"path": str(ws / "a.py")}, {"decision": "allow", "rule": "read-only",
                                                       "reason": "read-only tool"})
    session.record(MessageEvent(session_id=session.id, role="assistant", content="Done."))  # not an audit record
    session.record(ModeEvent(session_id=session.id, mode="auto", previous="ask", user="alice", host="ws1"))
    session.record(RunEvent(session_id=session.id, status="done"))


KINDS = ["session.create", "run.start", "approval", "command", "approval", "file.change", "approval", "approval",
         "mcp.call", "approval", "approval", "mode.change", "run.end"]


def records_of(session: Session) -> list[dict[str, Any]]:
    mapper, out, offset = Mapper(session.id), [], 0
    for end, _whole, event in session.log.scan(0):
        if event is not None:
            out += mapper.records(event, offset)
        offset = end
    return out



class Daemon:
    """A listening unix datagram socket, read as it comes (a datagram queue holds only ten): what
    rsyslog's imuxsock or journald's /dev/log is."""

    def __init__(self, path: Path) -> None:
        self.path, self.got = path, []  # type: ignore[var-annotated]
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            data = self.sock.recv(70_000)
            if data == b"end":
                return
            self.got.append(data)

    def frames(self) -> list[bytes]:
        """What arrived so far (every datagram sent before this call: the end mark comes after them)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.sendto(b"end", str(self.path))
        self.thread.join()
        return self.got

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)


RFC5424 = re.compile(rb"<(\d{1,3})>1 (\S+) (\S+) (\S+) (\S+) (\S+) (\[(?:[^\]\\]|\\.)*\]) (.*)", re.DOTALL)


def parse5424(frame: bytes) -> dict[str, Any]:
    match = RFC5424.fullmatch(frame)
    assert match, frame[:300]
    pri, stamp, host, app, procid, msgid, sd, msg = match.groups()
    assert sd.startswith(b"[abhed@32473 ")
    params = {k.decode(): re.sub(rb"\\(.)", rb"\1", v).decode()
              for k, v in re.findall(rb'(\w+)="((?:[^"\\]|\\.)*)"', sd)}
    return {"facility": int(pri) // 8, "severity": int(pri) % 8, "time": datetime.fromisoformat(stamp.decode()),
            "host": host.decode(), "app": app.decode(), "procid": procid.decode(), "msgid": msgid.decode(),
            "sd": params, "record": json.loads(msg)}
