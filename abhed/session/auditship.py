"""Central audit delivery: the session's records (auditrecord.py) sent to the sinks `[audit]` names
(auditsink.py), from the session's own log.

The log is the record; a sink gets a copy. Each sink has a cursor in the session's directory
(`audit/SINK.cursor`: the last event whose records it took, and where reading resumes), changed
only under `audit/SINK.lock` (flock), so any number of Abhed processes sharing the store never send
a record twice between them. A pass reads the log from the cursor, sends in batches of at most
`batch` records, each send with its deadline (`timeout_s`), and moves the cursor past what the sink
took. So a sink that is down loses nothing: its records wait in the log, and the next pass sends
them, in order. Passes run in a thread of their own, woken by every event the session records
(and every `retry_s` while a sink is failing): the agent's turn never waits for a sink. At the
session's end one last pass is given `close_wait_s`; what is still unsent then is noted in the
store (`audit-pending/SESSION`), and the next session started with that store sends it.

Told, and recorded: the first failure of a sink in a process is an AuditEvent (`failed`) in the
log (so the other sinks carry it too, and this one once it is back) and one notice to the person;
its return is another (`resumed`). Delivery is at least once: a process killed between a send and
its cursor's update sends that batch again; each record's `id` lets the collector drop the repeat.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from abhed.files.atomic import replace_unsynced
from abhed.session.auditrecord import Mapper
from abhed.session.auditsink import Sink, SinkError, make
from abhed.session.config import AuditConfig, ConfigError
from abhed.session.events import AnyEvent, AuditEvent, EventLog, line_hash, who
from abhed.session.storefail import StoreError

AUDIT_DIR = "audit"  # in a session's directory: each sink's cursor and its lock
PENDING = "audit-pending"  # in the store's home: sessions some sink has not taken every record of
LOCK_POLL_S = 0.02


@dataclass(frozen=True)
class Cursor:
    seq: int = 0  # the last event whose records the sink took
    offset: int = 0  # where reading resumes: at or before that event's end, before any call not yet answered


@dataclass
class Pass:
    """What one pass of one sink did."""

    sent: int = 0
    error: str | None = None  # the send that failed, and why
    behind: bool = False  # records are left: a failure, a deadline, or another process at the cursor


def read_cursor(path: Path) -> Cursor:
    """The cursor in `path`; from the start when there is none or it is unreadable (a repeat is
    better than a loss)."""
    try:
        value = json.loads(path.read_bytes())
        cursor = Cursor(int(value["seq"]), int(value["offset"]))
    except (OSError, ValueError, KeyError, TypeError):
        return Cursor()
    return cursor if cursor.seq >= 0 and cursor.offset >= 0 else Cursor()


@contextmanager
def _locked(path: Path, wait_s: float) -> Iterator[bool]:
    """Hold `path`'s exclusive flock (True), or give up after `wait_s` (False)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(LOCK_POLL_S)
        yield True
    finally:
        os.close(fd)


def deliver(directory: Path, session_id: str, sink: Sink, config: AuditConfig,
            stop: Callable[[], bool] = lambda: False) -> Pass:
    """Send the session's records that `sink` has not taken yet, from its log in `directory`, in
    order, moving its cursor past each batch taken. `stop` is asked between batches."""
    audit = directory / AUDIT_DIR
    try:
        audit.mkdir(mode=0o700, exist_ok=True)
        with _locked(audit / f"{sink.name}.lock", config.timeout_s) as held:
            if not held:
                return Pass(behind=True)  # another process is sending this session's records to this sink
            return _deliver(directory, session_id, sink, config, stop)
    except OSError as exc:
        return Pass(error=f"cannot keep the {sink.name} sink's cursor in {audit}: {exc.strerror or exc}", behind=True)


def _deliver(directory: Path, session_id: str, sink: Sink, config: AuditConfig, stop: Callable[[], bool]) -> Pass:
    where = directory / AUDIT_DIR / f"{sink.name}.cursor"
    cursor, log = read_cursor(where), EventLog(directory / "events.jsonl")
    size = log.path.stat().st_size if log.path.exists() else 0
    start = cursor.offset if cursor.offset <= size else 0  # a log replaced under it: read it all again
    mapper, out = Mapper(session_id), Pass()
    batch: list[dict[str, object]] = []
    marks: list[tuple[int, Cursor]] = []  # after each new event: (records before it and its own, the cursor past it)

    def flush() -> bool:
        nonlocal cursor
        sent, error = len(batch), None
        if batch:
            try:
                sink.send(batch)
            except SinkError as exc:
                sent, error = exc.sent, exc.message
        taken = [mark for count, mark in marks if count <= sent]
        if taken:
            cursor = taken[-1]
            replace_unsynced(where, json.dumps({"seq": cursor.seq, "offset": cursor.offset}).encode())
        out.sent += sent
        batch.clear()
        marks.clear()
        out.error = error
        return error is None

    if not size:
        return out
    with open(log.path, "rb") as raw:
        begin = start
        for end, whole, event in log.scan(start):
            line_start, begin = begin, end
            if not whole:
                break  # being written (or torn by a crash): a later pass reads it whole
            if event is None or event.seq is None:
                continue  # unreadable, or from before the chain (no seq to keep a cursor by): not sent
            head = _head(raw.fileno(), event, line_start, end)
            records = mapper.records(event, line_start, head)
            if event.seq <= cursor.seq:
                continue  # taken already: read again only for the calls it leaves unanswered
            batch.extend(records)
            marks.append((len(batch), Cursor(event.seq, mapper.resume_from(end))))
            if len(batch) >= config.batch:
                if not flush():
                    out.behind = True
                    return out
                if stop():
                    out.behind = True
                    return out
    if not flush():
        out.behind = True
    return out


def _head(fd: int, event: AnyEvent, start: int, end: int) -> str | None:
    """A session start's or end's own SEQ:SHA256 (what `abhed sessions verify --head` takes)."""
    if not (isinstance(event, AuditEvent) and event.what in ("start", "end")):
        return None
    line = os.pread(fd, end - start, start).rstrip(b"\n")
    return f"{event.seq}:{line_hash(line)}"


def refuse_writable(config: AuditConfig, writable: list[Path]) -> None:
    """ConfigError when a sink's path lies where the model can write (the workspace, an allowed
    root): it could rewrite the audit trail, or stand in for the syslog daemon."""
    paths = [("[audit.jsonl] path", config.jsonl.path) if "jsonl" in config.sinks else None,
             ("[audit.syslog] socket", config.syslog.socket) if "syslog" in config.sinks else None]
    roots = [Path(os.path.realpath(root)) for root in writable]
    for what, path in filter(None, paths):
        assert path is not None
        real = Path(os.path.realpath(path))
        inside = next((root for root in roots if real == root or root in real.parents), None)
        if inside is not None:
            raise ConfigError(f"The audit sink's {what} {path} lies inside {inside}, where the model can write "
                              "files: it could change the audit trail. Put it outside the workspace and the "
                              "allowed roots (e.g. /var/log/abhed), then start again.")


class Shipper:
    """One process's delivery of one session's records: started when the session opens, ended when
    it closes. `record` appends to the session's log; `tell` shows the person a line."""

    def __init__(self, config: AuditConfig, home: Path, directory: Path, session_id: str,
                 record: Callable[[AnyEvent], None], tell: Callable[[str], None]) -> None:
        self.config, self.home, self.directory, self.session_id = config, home, directory, session_id
        self.record, self.tell = record, tell
        self.sinks: dict[str, Sink] = {}
        self.failing: dict[str, float] = {}  # sink -> when to try it again
        self.wake, self.stopping = threading.Event(), False
        self.passing = threading.Lock()  # one pass at a time: the worker's, or the last one at the end
        self.thread: threading.Thread | None = None
        self.closed = False  # the session's end is past: nothing more is recorded in its log

    def start(self) -> None:
        """Record the session's start, and start delivering (the sinks are made in the worker: the
        OTLP packages take a good part of a second to load, which the session need not wait for)."""
        user, host = who()
        self.record(AuditEvent(session_id=self.session_id, what="start", user=user, host=host,
                               detail=f"process {os.getpid()}"))
        self.thread = threading.Thread(target=self._run, name="abhed-audit", daemon=True)
        self.thread.start()
        self.notify()

    def notify(self) -> None:
        """An event was recorded: deliver it (in the worker, never here)."""
        self.wake.set()

    def end(self) -> None:
        """Record the session's end, then give the sinks `close_wait_s` to take everything."""
        user, host = who()
        self._record(AuditEvent(session_id=self.session_id, what="end", user=user, host=host,
                                detail=f"process {os.getpid()}"))
        deadline = time.monotonic() + self.config.close_wait_s
        self.stopping = True
        self.wake.set()
        if self.thread is not None:
            self.thread.join(timeout=max(0.0, deadline - time.monotonic()))  # pragma: no mutate (a bound)
        behind = list(self.sinks)
        if self.passing.acquire(timeout=max(0.0, deadline - time.monotonic())):
            try:
                behind = self._last_passes(deadline)
            finally:
                self.passing.release()
        behind += [name for name in self.config.sinks if name not in self.sinks]  # never made: all unsent
        self._note_pending(bool(behind))
        if behind:
            self.tell(f"audit: the {', '.join(behind)} sink{'s' * (len(behind) > 1)} did not take all of this "
                      f"session's records before it ended; they stay in its log ({self.directory / 'events.jsonl'}) "
                      "and the next Abhed session started with this store sends them")
        self.closed = True
        for sink in self.sinks.values():
            sink.close()

    def _last_passes(self, deadline: float) -> list[str]:
        """Passes over every sink until none records anything more (a sink's failure or return is
        an event the others must carry too), or the deadline; the sinks left behind."""
        log = EventLog(self.directory / "events.jsonl")
        while True:
            head = log.head()
            # pragma: no mutate (> or >= on a float clock: equivalent)
            behind = self._pass(lambda: time.monotonic() >= deadline, everyone=True)  # pragma: no mutate
            if log.head() == head or time.monotonic() >= deadline:
                return behind

    def _make_sinks(self) -> None:
        made: dict[str, Sink] = {}
        for name in self.config.sinks:
            try:
                made[name] = make(name, self.config, who()[1])
            except SinkError as exc:
                self._failed(name, exc.message)
        self.sinks = made  # whole: end() may read it while this runs

    def _run(self) -> None:
        try:
            self._deliver_until_stopped()
        except Exception as exc:  # noqa: BLE001 (a bug here must not end the session: the log keeps every record)
            self.tell(f"audit: delivery stopped ({type(exc).__name__}: {exc}); the records stay in the session's log "
                      "and the next session sends them")
            self._note_pending(True)

    def _deliver_until_stopped(self) -> None:
        self._make_sinks()
        self._others()
        while not self.stopping:  # pragma: no mutate (forced True: the check after the wait returns)
            # pragma: no mutate (a timeout while nothing fails only wakes the worker more often)
            self.wake.wait(timeout=self.config.retry_s if self.failing else None)  # pragma: no mutate
            self.wake.clear()
            if self.stopping:
                return
            with self.passing:
                self._pass(lambda: self.stopping)

    def _pass(self, stop: Callable[[], bool], everyone: bool = False) -> list[str]:
        """One pass over the sinks (those failing only when their retry is due, or `everyone`);
        the names of those left behind."""
        behind = []
        for name, sink in self.sinks.items():
            if name in self.failing and not everyone and time.monotonic() < self.failing[name]:
                behind.append(name)  # pragma: no mutate (only end() reads the list, and it passes everyone)
                continue
            out = deliver(self.directory, self.session_id, sink, self.config, stop)
            if out.error is not None:
                self._failed(name, out.error)
            elif name in self.failing and not out.behind:
                self._resumed(name, out.sent)
            if out.behind:
                behind.append(name)
        return behind

    def _failed(self, name: str, error: str) -> None:
        again = time.monotonic() + self.config.retry_s
        if name in self.failing:
            self.failing[name] = again
            return
        self.failing[name] = again
        self._note_pending(True)
        self._record(AuditEvent(session_id=self.session_id, what="failed", sink=name, detail=error))
        self.tell(f"audit: cannot send to the {name} sink: {error}. Nothing is lost: the records stay in this "
                  f"session's log and are sent when the sink takes them again (tried every "
                  f"{self.config.retry_s:g} s, and at the next session's start)")

    def _resumed(self, name: str, sent: int) -> None:
        del self.failing[name]
        self._record(AuditEvent(session_id=self.session_id, what="resumed", sink=name,
                                detail=f"{sent} records sent from the log after the failure"))
        self.tell(f"audit: the {name} sink takes records again; the {sent} held back were sent")

    def _record(self, event: AuditEvent) -> None:
        """Record `event` in the log; a store that cannot is told (its own error says what to do).
        Nothing once the session has ended: this process may no longer hold it."""
        if self.closed:
            return
        try:
            self.record(event)
        except StoreError as exc:
            self.tell(f"audit: the session's log could not record the audit {event.what}: {exc.message}")

    def _note_pending(self, pending: bool) -> None:
        """Note (or clear) in the store that this session has records a sink has not taken."""
        marker = self.home / PENDING / self.session_id
        try:
            if pending:
                marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                marker.touch(mode=0o600)
            else:
                _clear(marker)
        except OSError:
            pass  # only a hint for the next session: this session's own start finds its backlog anyway

    def _others(self) -> None:
        """Send what earlier sessions left unsent (their own log and cursors; nothing is recorded in
        a session this process does not hold)."""
        try:
            names = sorted(os.listdir(self.home / PENDING))
        except OSError:
            return
        for session_id in names:
            directory = self.home / "sessions" / session_id
            if not directory.is_dir():  # removed since: nothing left to send
                _clear(self.home / PENDING / session_id)
                continue
            # pragma: no mutate (and: its own session would be sent by the same cursor, never twice)
            if self.stopping or session_id == self.session_id:  # pragma: no mutate
                continue
            outs = [deliver(directory, session_id, sink, self.config, lambda: self.stopping)
                    for name, sink in self.sinks.items() if name not in self.failing]
            if len(outs) == len(self.config.sinks) and not any(out.behind for out in outs):
                _clear(self.home / PENDING / session_id)


def _clear(marker: Path) -> None:
    try:
        marker.unlink(missing_ok=True)  # pragma: no mutate (a missing one is an OSError, passed over below)
    except OSError:
        pass  # a hint only: it is looked at again by the next session
