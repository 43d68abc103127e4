"""Where the central audit sends its records (abhed/session/auditrecord.py): syslog, a JSON-lines
file or directory, an OpenTelemetry collector. Each sink sends a batch in order and says how many
of its records went out before a failure (SinkError.sent), so delivery (auditship.py) resumes at
the first one that did not: a record is never skipped. Every send has a deadline (timeout_s).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import stat
import time
from datetime import datetime
from typing import Any, Protocol

from abhed.files.atomic import write_all
from abhed.session.auditrecord import bounded
from abhed.session.config import SYSLOG_FACILITIES, AuditConfig

APP_NAME = "abhed"
# The structured data's ID: a private one (name@enterprise number); 32473 is the number RFC 5612
# reserves for documentation and examples, as no enterprise number is registered for Abhed.
SD_ID = "abhed@32473"
SEVERITY = {"info": 6, "notice": 5, "warning": 4}
SD_KEYS = ("session", "seq", "kind", "user", "host", "agent")


class SinkError(Exception):
    """A send failed: `message` says where and why; `sent` records of the batch went out first."""

    def __init__(self, message: str, sent: int = 0) -> None:
        super().__init__(message)
        self.message, self.sent = message, sent


class Sink(Protocol):
    name: str

    def send(self, records: list[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...


def severity(record: dict[str, Any]) -> str:
    """info for what happened; notice for a call refused; warning for a sink that failed."""
    if record["kind"] == "audit.failed":
        return "warning"
    if record["kind"] == "approval" and record["fields"].get("decision") != "allow":
        return "notice"
    return "info"


# -- syslog ---------------------------------------------------------------------------------------


def _sd_value(value: Any) -> str:
    """A structured-data parameter value (RFC 5424 6.3.3): ", \\ and ] escaped with a backslash."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def _header_field(text: str | None, limit: int) -> str:
    """A header field: printable US-ASCII without spaces, at most `limit` characters, "-" when empty."""
    clean = "".join(ch if 33 <= ord(ch) <= 126 else "_" for ch in (text or ""))[:limit]
    return clean or "-"


def syslog_frame(record: dict[str, Any], facility: int, hostname: str, pid: int, max_bytes: int) -> bytes:
    """One record as an RFC 5424 message: <PRI>1 TIMESTAMP HOSTNAME abhed PROCID MSGID [SD] MSG,
    MSG being the record as JSON. Fields that do not fit in `max_bytes` are cut, and the record
    says so (`"truncated": true`)."""
    pri = facility * 8 + SEVERITY[severity(record)]
    sd = "[" + SD_ID + "".join(f' {key}="{_sd_value(record.get(key))}"' for key in SD_KEYS) + "]"
    head = (f"<{pri}>1 {record['time']} {_header_field(hostname, 255)} {APP_NAME} {pid} "
            f"{_header_field(record['kind'], 32)} {sd} ")
    body, limit = record, 2048
    while True:
        frame = (head + json.dumps(body, ensure_ascii=True, default=str, separators=(",", ":"))).encode("utf-8")
        if len(frame) <= max_bytes or limit < 16:
            return frame[:max_bytes]
        body, limit = {**record, "fields": bounded(record["fields"], limit), "truncated": True}, limit // 2


class SyslogSink:
    """RFC 5424 datagrams to the local syslog socket (rsyslog's imuxsock, journald's /dev/log)."""

    name = "syslog"

    def __init__(self, config: AuditConfig, hostname: str) -> None:
        self.path, self.timeout = str(config.syslog.socket), config.timeout_s
        self.facility = SYSLOG_FACILITIES[config.syslog.facility]
        self.max_bytes, self.hostname = config.syslog.max_message_bytes, hostname

    def send(self, records: list[dict[str, Any]]) -> None:
        sent = 0
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(self.timeout)  # a full queue at the daemon blocks a send: the deadline
                sock.connect(self.path)
                for record in records:
                    sock.send(syslog_frame(record, self.facility, self.hostname, os.getpid(), self.max_bytes))
                    sent += 1
        except FileNotFoundError:
            raise SinkError(f"the syslog socket {self.path} does not exist (no syslog daemon: install and start "
                            "rsyslog or systemd-journald, or set [audit.syslog] socket)", sent) from None
        except ConnectionRefusedError:
            raise SinkError(f"nothing listens on the syslog socket {self.path} (is the syslog daemon running?)",
                            sent) from None
        except TimeoutError:
            raise SinkError(f"the syslog daemon at {self.path} took no record for {self.timeout:g} s (its queue is "
                            "full)", sent) from None
        except OSError as exc:
            raise SinkError(f"cannot send to the syslog socket {self.path}: {exc.strerror or exc}", sent) from None

    def close(self) -> None:
        pass


# -- JSON lines -----------------------------------------------------------------------------------


class JsonlSink:
    """Appends records, one JSON object a line, to a file (every session's) or, when the path is a
    directory, to `<session id>.jsonl` in it. Made 0600 (the site's collector reads as root), never
    through a symbolic link or into anything but a regular file; each batch is one write under an
    exclusive lock, so processes sharing the file never interleave, and a failed write is cut back."""

    name = "jsonl"

    def __init__(self, config: AuditConfig) -> None:
        assert config.jsonl.path is not None  # AuditConfig refuses the sink without one
        self.base, self.timeout = config.jsonl.path, config.timeout_s
        self.path = self.base

    def send(self, records: list[dict[str, Any]]) -> None:
        """Append `records` (all of one session: a pass sends one session's)."""
        self.path = self.base / f"{records[0]['session']}.jsonl" if self.base.is_dir() else self.base
        data = b"".join(json.dumps(record, ensure_ascii=True, default=str).encode() + b"\n" for record in records)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise SinkError(self._why(exc, "open")) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SinkError(f"the audit file {self.path} is not a regular file: refusing to write into it")
            if st.st_uid not in (os.geteuid(), 0):  # made by another user in a shared directory, to read or edit ours
                raise SinkError(f"the audit file {self.path} belongs to uid {st.st_uid}, not to you or root: "
                                "refusing to write into it (another user could change what it holds)")
            self._lock(fd)
            size = os.fstat(fd).st_size
            try:
                write_all(fd, data)
                os.fsync(fd)  # pragma: no mutate (durability: only a power cut tells)
            except OSError as exc:
                _cut(fd, size)
                raise SinkError(self._why(exc, "append to")) from None
        finally:
            os.close(fd)

    def _lock(self, fd: int) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:  # pragma: no mutate (> or >= on a float clock: equivalent)
                    raise SinkError(f"the audit file {self.path} stayed locked by another process for "
                                    f"{self.timeout:g} s") from None
                time.sleep(0.01)  # pragma: no mutate (a poll's pace)

    def _why(self, exc: OSError, doing: str) -> str:
        if exc.errno == errno.ELOOP:
            return f"the audit file {self.path} is a symbolic link: refusing to follow it"
        return f"cannot {doing} the audit file {self.path}: {exc.strerror or exc}"

    def close(self) -> None:
        pass


def _cut(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass


# -- OpenTelemetry --------------------------------------------------------------------------------


class _Said(logging.Handler):
    """What the OTLP exporter logs while it exports: the reason a send failed. Kept off the terminal."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class OtlpSink:
    """OpenTelemetry log records over OTLP/HTTP (protobuf), with the official exporter. Each
    record's body is the record as JSON (as the jsonl sink writes it); its attributes repeat the
    envelope (abhed.session, abhed.seq, abhed.kind, ...) and the scalar fields (abhed.field.NAME)
    for the collector's filters. The SDK is imported here only: a site without an otlp sink never
    loads it."""

    name = "otlp"

    def __init__(self, config: AuditConfig, hostname: str) -> None:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        from abhed import __version__
        assert config.otlp.endpoint is not None  # AuditConfig refuses the sink without one
        self.endpoint = config.otlp.endpoint
        self.said = _Said()
        logger = logging.getLogger("opentelemetry")
        logger.propagate = False  # its complaints are ours to tell, once, not printed into the session
        if not any(isinstance(handler, _Said) for handler in logger.handlers):
            logger.addHandler(self.said)
        else:
            self.said = next(handler for handler in logger.handlers if isinstance(handler, _Said))
        self.exporter = OTLPLogExporter(endpoint=self.endpoint, headers=dict(config.otlp.headers),
                                        timeout=config.timeout_s)
        self.resource = Resource({"service.name": APP_NAME, "service.version": __version__, "host.name": hostname})
        self.scope = InstrumentationScope("abhed.audit", __version__)

    def send(self, records: list[dict[str, Any]]) -> None:
        from opentelemetry.sdk._logs.export import LogRecordExportResult
        self.said.messages.clear()
        try:
            result = self.exporter.export([self._log(record) for record in records])
        except Exception as exc:  # noqa: BLE001 (the exporter is a third party's: any failure is a failed send)
            raise SinkError(f"cannot send to the OTLP collector {self.endpoint}: {exc}") from None
        if result != LogRecordExportResult.SUCCESS:
            why = self.said.messages[0] if self.said.messages else "it did not accept them"
            raise SinkError(f"the OTLP collector {self.endpoint} did not take the records: {why}")

    def _log(self, record: dict[str, Any]) -> Any:
        from opentelemetry._logs import LogRecord, SeverityNumber
        from opentelemetry.sdk._logs import ReadableLogRecord
        level = severity(record)
        number = {"info": SeverityNumber.INFO, "notice": SeverityNumber.INFO2, "warning": SeverityNumber.WARN}[level]
        attributes: dict[str, Any] = {f"abhed.{key}": record[key] for key in ("id", "schema", *SD_KEYS)
                                      if record.get(key) is not None}
        attributes.update({f"abhed.field.{key}": value for key, value in record["fields"].items()
                           if isinstance(value, str | int | float | bool)})
        at = int(datetime.fromisoformat(record["time"]).timestamp() * 1e9)
        log = LogRecord(timestamp=at, observed_timestamp=time.time_ns(), severity_text=level.upper(),
                        severity_number=number, body=json.dumps(record, ensure_ascii=False, default=str),
                        attributes=attributes, event_name=f"abhed.{record['kind']}")
        return ReadableLogRecord(log, resource=self.resource, instrumentation_scope=self.scope)

    def close(self) -> None:
        try:
            self.exporter.shutdown()
        except Exception:  # noqa: BLE001 (closing a third party's client: nothing left to lose)
            pass


def make(name: str, config: AuditConfig, hostname: str) -> Sink:
    """The sink `name` as `config` describes it (SinkError when it cannot be made: the OTLP packages
    missing)."""
    if name == "syslog":
        return SyslogSink(config, hostname)
    if name == "jsonl":
        return JsonlSink(config)
    try:
        return OtlpSink(config, hostname)
    except ImportError as exc:
        raise SinkError(f"the otlp sink needs the OpenTelemetry packages, which this Abhed lacks ({exc}): install "
                        "opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http") from None
