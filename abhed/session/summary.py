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

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any, Protocol

from abhed.files.atomic import replace_unsynced

NAME = "summary.json"
VERSION = 1
# Bytes before the covered end that must still be the same: a cut or rewritten last line is caught.
TAIL = 256  # pragma: no mutate (its size: any window covering the last line's end catches the same)
EMPTY = sha256(b"").hexdigest()  # the tail of nothing: a summary of an empty log


class Log(Protocol):
    """What this module needs of a session's log (events.EventLog, which calls it: so it is
    described here, not imported)."""

    path: Path

    # pragma: no mutate (a Protocol's stubs: described, never run)
    def scan(self, start: int) -> Iterator[tuple[int, bool, Any]]: ...  # pragma: no mutate

    def stored(self, text: str) -> str: ...  # pragma: no mutate

    def payload(self, stored: str) -> str: ...  # pragma: no mutate


@dataclass
class Summary:
    size: int = 0  # how many bytes of the log it covers: whole lines only
    tail: str = EMPTY  # sha256 of the (up to) TAIL bytes that end there
    events: int = 0  # readable events in them
    status: str = "new"  # the status of the top-level agent's last run ("new": none yet)
    prompt: str | None = None  # the first prompt of its runs, as the log's line stores it (maybe a blob reference)


def fold(summary: Summary, event: Any, stored: Callable[[str], str]) -> None:
    """`summary` with one more event of the log (an events.AnyEvent) counted in."""
    summary.events += 1
    if event.kind == "run" and event.agent_id == "main":
        summary.status = event.status
        if summary.prompt is None and event.status == "started" and event.prompt:
            summary.prompt = stored(event.prompt)


def noted(log: Log, fd: int, event: Any, before: int, save: bool) -> None:
    """After `log.append` wrote `event` (under its lock, the log `before` bytes long until then):
    count it into the summary when that covered the log exactly up to it; else leave it to readers.
    The summary this process keeps of the log is counted in memory, and saved with the appends that
    are synced (`save`): an unsynced one is followed at once by a synced one, and a reader in between
    catches up the few lines the saved one lacks (an unsynced append costs no file written)."""
    try:
        summary = _KEPT.pop(log.path, None)
        if summary is None or summary.size != before:  # another process appended since: its summary may be
            summary = _read(log)
        # The log's first line: there was nothing to miss. (pragma: `or` is equivalent: a summary
        # of more than an empty log is not in step with it either way, and is rebuilt by a reader.)
        if summary is None and before == 0:  # pragma: no mutate
            summary = Summary()
        if summary is None or summary.size != before or summary.tail != _tail(fd, before):
            return
        fold(summary, event, log.stored)
        summary.size = os.fstat(fd).st_size
        summary.tail = _tail(fd, summary.size)
        _KEPT[log.path] = summary
        if save or before == 0:  # the first line saves it: a summary exists from the start
            _write(log, summary)
    except OSError:
        pass  # a cache: the next reader catches up from what the summary still covers


def synced(log: Log, fd: int) -> None:
    """After `log.sync()` made every append durable (under the log's lock): save the summary this
    process counted, when it still covers the whole log, so unsynced appends made it to the file too."""
    summary = _KEPT.get(log.path)
    try:
        if summary is not None and summary.size == os.fstat(fd).st_size and summary.tail == _tail(fd, summary.size):
            _write(log, summary)
    except OSError:
        pass  # a cache: the next reader catches up


# The summary of each log this process appends to, as counted after its last append.
_KEPT: dict[Path, Summary] = {}


def current(log: Log) -> Summary:
    """The log's summary, up to date: as stored when it covers the whole log, caught up from where it
    ends when the log only grew, rebuilt from the start otherwise; saved again when it changed (when
    the store lets it). Takes no lock, so it never holds up an append: it reads only whole lines,
    which an append never changes, and what it saves claims only the bytes it read (one saved over
    a newer one is behind, and caught up by the next reader)."""
    try:
        fd = os.open(log.path, os.O_RDONLY | os.O_CLOEXEC)  # pragma: no mutate (O_RDONLY is 0: & is |)
    except FileNotFoundError:
        return Summary()
    try:
        size = os.fstat(fd).st_size
        summary = _read(log)
        if summary is None or summary.size > size or summary.tail != _tail(fd, summary.size):
            summary = Summary()
        if summary.size < size:
            _catch_up(log, fd, summary)
            _write(log, summary)
        return summary
    finally:
        os.close(fd)


def first_prompt(log: Log, summary: Summary) -> str:
    """The summary's first prompt as the model was given it (a large one is read from its blob)."""
    if summary.prompt is None:
        return ""
    return log.payload(summary.prompt)


def _catch_up(log: Log, fd: int, summary: Summary) -> None:
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


def _path(log: Log) -> Path:
    return log.path.parent / NAME


def _read(log: Log) -> Summary | None:
    """The stored summary, or None when there is none or it cannot be trusted to be one."""
    try:
        value = json.loads(_path(log).read_bytes())
        if value.pop("version") != VERSION:
            return None
        summary = Summary(**value)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    texts = (summary.tail, summary.status, "" if summary.prompt is None else summary.prompt)
    if not (_count(summary.size) and _count(summary.events) and all(isinstance(text, str) for text in texts)):
        return None
    return summary


def _count(value: object) -> bool:
    return type(value) is int and value >= 0  # not a bool, a float or a string of digits


def _write(log: Log, summary: Summary) -> None:
    """Replace summary.json by a rename: a reader sees the old one or the new one, never half. A
    store that will not take it (full, read-only, another user's) keeps the old one: the list is
    still right, only not faster next time."""
    data = json.dumps({"version": VERSION, **asdict(summary)}).encode()
    try:
        replace_unsynced(_path(log), data)
    except OSError:
        pass  # a cache: nothing is left behind, and the next reader catches up
