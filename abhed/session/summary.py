"""What `abhed sessions list` shows of a session's log, kept beside it so the list reads no event.

`summary.json` in the session's directory holds the event count, the last status of the top-level
agent's runs and its first prompt, and which part of the log they cover: its first `size` bytes,
whose last TAIL bytes hash to `tail`. It is a cache of the log, never its truth: the log is read
again from where the summary ends when the log grew since (an append the summary missed: an older
Abhed, a crash between the two, a failed write of the summary), and from the start when the
summary is missing, unreadable, of another version, or no longer matches the log (cut, rewritten,
replaced). An append updates it only when it covered the log exactly up to that append; anything
else is left for the next reader to catch up. `abhed sessions verify` never uses it.

Replaced by a rename, never fsync'd: after a crash of the machine the summary may cover more than
the log kept, or other bytes, and then it does not match and is rebuilt. Failing to write it
(a full or read-only store) loses nothing: it is left as it was, and the next reader catches up.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from hashlib import sha256
from pathlib import Path

from abhed.session.events import AnyEvent, EventLog, RunEvent

NAME = "summary.json"
VERSION = 1
TAIL = 256  # bytes before the covered end that must still be the same: a cut or rewritten log is caught
EMPTY = sha256(b"").hexdigest()  # the tail of nothing: a summary of an empty log


@dataclass
class Summary:
    size: int = 0  # how many bytes of the log it covers: whole lines only
    tail: str = EMPTY  # sha256 of the (up to) TAIL bytes that end there
    events: int = 0  # readable events in them
    status: str = "new"  # the status of the top-level agent's last run ("new": none yet)
    prompt: str | None = None  # the first prompt of its runs, as the log's line stores it (maybe a blob reference)


def fold(summary: Summary, event: AnyEvent, stored: Callable[[str], str]) -> None:
    """`summary` with one more event of the log counted in."""
    summary.events += 1
    if isinstance(event, RunEvent) and event.agent_id == "main":
        summary.status = event.status
        if summary.prompt is None and event.status == "started" and event.prompt:
            summary.prompt = stored(event.prompt)


def noted(log: EventLog, fd: int, event: AnyEvent, before: int) -> None:
    """After `log.append` wrote `event` (under its lock, the log `before` bytes long until then):
    count it into the summary when that covered the log exactly up to it; else leave it to readers."""
    try:
        summary = _read(log)
        if summary is None and before == 0:  # the log's first line: there was nothing to miss
            summary = Summary()
        if summary is None or summary.size != before or summary.tail != _tail(fd, before):
            return
        fold(summary, event, log.stored)
        summary.size = os.fstat(fd).st_size
        summary.tail = _tail(fd, summary.size)
        _write(log, summary)
    except OSError:
        pass  # a cache: the next reader catches up from what the summary still covers


def current(log: EventLog) -> Summary:
    """The log's summary, up to date: as stored when it covers the whole log, caught up from where it
    ends when the log only grew, rebuilt from the start otherwise; saved again when it changed (when
    the store lets it). Read under a shared lock on the log, so no append lands in the middle."""
    try:
        fd = os.open(log.path, os.O_RDONLY | os.O_CLOEXEC)  # pragma: no mutate (O_RDONLY is 0: & is |)
    except FileNotFoundError:
        return Summary()
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        size = os.fstat(fd).st_size
        summary = _read(log)
        if summary is None or summary.size > size or summary.tail != _tail(fd, summary.size):
            summary = Summary()
        if summary.size < size:
            _catch_up(log, fd, summary)
            try:
                _write(log, summary)
            except OSError:
                pass  # a store this user cannot write: the list is still right, just not faster next time
        return summary
    finally:
        os.close(fd)


def first_prompt(log: EventLog, summary: Summary) -> str:
    """The summary's first prompt as the model was given it (a large one is read from its blob)."""
    if summary.prompt is None:
        return ""
    return log.payload(summary.prompt)


def _catch_up(log: EventLog, fd: int, summary: Summary) -> None:
    """Count in the whole lines after what `summary` covers; a final line without its newline (torn,
    or being written) is left for later, when it is whole or followed by a new line."""
    for end, whole, event in log.scan(summary.size):
        if not whole:
            break
        if event is not None:
            fold(summary, event, log.stored)
        summary.size = end
    summary.tail = _tail(fd, summary.size)


def _tail(fd: int, end: int) -> str:
    start = max(0, end - TAIL)
    return sha256(os.pread(fd, end - start, start)).hexdigest()


def _path(log: EventLog) -> Path:
    return log.path.parent / NAME


def _read(log: EventLog) -> Summary | None:
    """The stored summary, or None when there is none or it cannot be trusted to be one."""
    try:
        value = json.loads(_path(log).read_bytes())
        if value.pop("version") != VERSION:
            return None
        summary = Summary(**value)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    fields = (summary.size, summary.events, summary.tail, summary.status)
    if not (type(fields[0]) is int and type(fields[1]) is int and fields[0] >= 0 and fields[1] >= 0
            and isinstance(fields[2], str) and isinstance(fields[3], str)
            and (summary.prompt is None or isinstance(summary.prompt, str))):
        return None
    return summary


def _write(log: EventLog, summary: Summary) -> None:
    """Replace summary.json by a rename: a reader sees the old one or the new one, never half."""
    target = _path(log)
    temp = target.parent / f".{NAME}.{os.getpid()}.{threading.get_ident()}"
    data = json.dumps({"version": VERSION, **asdict(summary)}).encode()
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except OSError:
        temp.unlink(missing_ok=True)  # no leftover on a full or failing store
        raise
