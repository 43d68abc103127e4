"""One session's durable state: its event log, the read-set, the working directory.

Layout under $ABHED_HOME/sessions/<id>/: `events.jsonl` (see events.py) and `state.json`, replaced
atomically after every call, so two `abhed tool` invocations sharing `--session` share the read-set.
A `lock` file serialises processes that use one session at the same time.
"""

from __future__ import annotations

import fcntl
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from hashlib import sha256
from pathlib import Path

from pydantic import BaseModel, ValidationError

from abhed.atomic import replace_file
from abhed.events import ActionEvent, EventLog, ObservationEvent, now

STATE_VERSION = 1
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Files larger than this are fingerprinted by size and timestamps only: hashing a 1 GB log to read
# 2000 lines of it would cost more than the read.
HASH_LIMIT = 64 * 1024 * 1024


class SessionError(Exception):
    """The session cannot be opened or created; the message says why and what to do."""


class ReadRecord(BaseModel):
    """What the model saw when it last read (or wrote) a file: the basis of edit/write safety."""

    size: int
    mtime_ns: int
    sha256: str | None  # None when the file was over HASH_LIMIT
    at: datetime


class SessionState(BaseModel):
    schema_version: int = STATE_VERSION
    id: str
    created_at: datetime
    workspace: str
    cwd: str
    reads: dict[str, ReadRecord] = {}


def digest(data: bytes) -> str:
    return sha256(data).hexdigest()


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


@dataclass
class Session:
    dir: Path
    state: SessionState

    @property
    def id(self) -> str:
        return self.state.id

    @property
    def log(self) -> EventLog:
        return EventLog(self.dir / "events.jsonl")

    def record(self, event: ActionEvent | ObservationEvent) -> None:
        self.log.append(event)

    def save(self) -> None:
        data = self.state.model_dump_json(indent=1).encode("utf-8")
        replace_file(self.dir / "state.json", data, mode=0o600)

    # -- the read-set ---------------------------------------------------------------------------

    def remember(self, path: Path, data: bytes | None, size: int, mtime_ns: int) -> None:
        """Record that the model now knows `path` as it is (after a read, write or edit).

        `data` is the whole content when the caller has it; None for files over HASH_LIMIT.
        """
        self.state.reads[str(path)] = ReadRecord(
            size=size,
            mtime_ns=mtime_ns,
            sha256=digest(data) if data is not None else None,
            at=now(),
        )

    def last_read(self, path: Path) -> ReadRecord | None:
        return self.state.reads.get(str(path))

    def forget(self, path: Path) -> None:
        self.state.reads.pop(str(path), None)


def changed_since(record: ReadRecord, data: bytes | None, size: int, mtime_ns: int) -> bool:
    """Whether the file differs from what the model last saw.

    The content hash decides when both sides have one (an mtime can stay put while content changes,
    and a touch changes mtime without changing content); otherwise size and mtime do.
    """
    if record.sha256 is not None and data is not None:
        return digest(data) != record.sha256
    return (record.size, record.mtime_ns) != (size, mtime_ns)


class SessionStore:
    """All sessions under $ABHED_HOME/sessions."""

    def __init__(self, home: Path) -> None:
        self.root = home / "sessions"

    def _dir(self, session_id: str) -> Path:
        if not SESSION_ID.fullmatch(session_id):
            raise SessionError(
                f"Invalid session id {session_id!r}: use 1-64 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit."
            )
        return self.root / session_id

    def open(self, session_id: str) -> Session:
        directory = self._dir(session_id)
        path = directory / "state.json"
        try:
            state = SessionState.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            raise SessionError(
                f"No session {session_id!r} in {self.root}. List them with `abhed sessions list`."
            ) from None
        except (OSError, ValidationError, ValueError) as exc:
            raise SessionError(f"The state of session {session_id!r} ({path}) is unreadable: {exc}") from exc
        return Session(directory, state)

    def create(self, workspace: Path, session_id: str | None = None) -> Session:
        session_id = session_id or new_session_id()
        directory = self._dir(session_id)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        state = SessionState(id=session_id, created_at=now(), workspace=str(workspace), cwd=str(workspace))
        session = Session(directory, state)
        session.save()
        return session

    @contextmanager
    def use(self, session_id: str | None, workspace: Path) -> Iterator[Session]:
        """Open (or create) a session and hold its lock, so concurrent processes take turns.

        The state is loaded after the lock is taken: a process that waited sees what the one
        before it saved.
        """
        session_id = session_id or new_session_id()
        directory = self._dir(session_id)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(directory / "lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            if (directory / "state.json").exists():
                yield self.open(session_id)
            else:
                yield self.create(workspace, session_id)

    def ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "state.json").is_file())
