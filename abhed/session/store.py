"""One session's durable state: its event log, the read-set, the working directory.

Layout under $ABHED_HOME/sessions/<id>/: `events.jsonl` (see events.py) and `state.json`, replaced
atomically after every call, so two `abhed tool` invocations sharing `--session` share the read-set.
A `lock` file serialises processes that use one session at the same time.

The log is the truth and state.json a cache of it: every observation carries what its call changed
in the state (`changes_since`), so `rebuild_state` gets the read-set, cwd, plan and todos back from
the log even when a crash came between an event and the save of state.json.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from hashlib import sha256
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from abhed.files.atomic import replace_file
from abhed.session.events import CHAIN, AnyEvent, EventLog, ObservationEvent, SessionEvent, now, who
from abhed.session.storefail import StoreError, store_error
from abhed.common.terminal import printable

STATE_VERSION = 1
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Files larger than this are fingerprinted by size and timestamps only: hashing a 1 GB log to read
# 2000 lines of it would cost more than the read.
HASH_LIMIT = 64 * 1024 * 1024
WAIT_S = 60.0  # default of agent.session_wait_s: how long to wait for a session another process holds
TELL_AFTER_S = 1.0  # a wait longer than this is announced, with who holds the session
POLL_S = 0.1
RECORD = ("state.json", "events.jsonl", "events.head")  # what a session leaves, any one of which makes it one


class SessionError(Exception):
    """The session cannot be opened or created; the message says why and what to do."""


class ReadRecord(BaseModel):
    """What the model saw when it last read (or wrote) a file: the basis of edit/write safety."""

    size: int
    mtime_ns: int
    sha256: str | None  # None when the file was over HASH_LIMIT
    at: datetime


class Plan(BaseModel):
    """The model's plan (spec §9): written whole by the plan tool, re-injected after compaction."""

    goal: str
    steps: list[str]
    notes: str = ""
    version: int = 1


TodoStatus = Literal["pending", "in_progress", "done"]


class TodoItem(BaseModel):
    id: str  # stable: assigned once, never reused in the session
    content: str
    status: TodoStatus = "pending"


class SessionState(BaseModel):
    schema_version: int = STATE_VERSION
    id: str
    created_at: datetime
    workspace: str
    cwd: str
    reads: dict[str, ReadRecord] = {}
    plan: Plan | None = None
    todos: list[TodoItem] = []
    next_todo_id: int = 1
    # How the session's agent runs were launched (mode, allow rules, budgets, model), so `abhed
    # resume` runs as the session was started; {} for sessions of `abhed tool` calls.
    options: dict[str, Any] = {}
    origin: Literal["agent", "tool"] = "agent"  # tool: made by `abhed tool`, hidden from `sessions list`
    # The hash chain the log declares in its first event (events.CHAIN), recorded at creation; None
    # for a session made before sessions declared one (legacy: `sessions verify` says it is not
    # tamper-evident). Kept here too, so stripping the log's declaration does not make it legacy.
    chain: str | None = None


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to a mark)
class StateMark:
    """The parts of the state a tool call may change, as they were before it (see changes_since)."""

    reads: dict[str, ReadRecord]
    cwd: str
    plan: Plan | None
    todos: list[TodoItem]
    next_todo_id: int


def apply_changes(state: SessionState, changes: dict[str, Any]) -> None:
    """Replay what one call changed (the `state` metadata of its observation) onto `state`."""
    for path, record in changes.get("reads", {}).items():
        state.reads[path] = ReadRecord.model_validate(record)
    for path in changes.get("forgot", []):
        state.reads.pop(path, None)
    if "cwd" in changes:
        state.cwd = changes["cwd"]
    if "plan" in changes:
        state.plan = Plan.model_validate(changes["plan"]) if changes["plan"] is not None else None
    if "todos" in changes:
        state.todos = [TodoItem.model_validate(item) for item in changes["todos"]]
    if "next_todo_id" in changes:
        state.next_todo_id = changes["next_todo_id"]


def rebuild_state(state: SessionState, events: Iterable[AnyEvent]) -> SessionState:
    """`state` (state.json, possibly a call behind) brought up to date from the log.

    Each change is applied in log order, so the last word on any path, the plan or the todos is
    the log's; what only state.json knows (sessions older than these records) is kept.
    """
    rebuilt = state.model_copy(deep=True)
    for event in events:
        replay(rebuilt, event)
    return rebuilt


def replay(state: SessionState, event: AnyEvent) -> None:
    """`state` with what one event of the log changed applied (see rebuild_state): for a reader that
    goes through the log once, event by event, holding none of them."""
    if isinstance(event, ObservationEvent) and isinstance(event.metadata.get("state"), dict):
        apply_changes(state, event.metadata["state"])


def digest(data: bytes) -> str:
    return sha256(data).hexdigest()


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


@dataclass
class Session:
    dir: Path
    state: SessionState
    # Read-only tool calls may run in parallel threads: the read-set must not change while the
    # state is being serialised.
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)  # pragma: no mutate
    # write and edit hold this from their read-set check to their rename, so two agents of the
    # session (subagents run side by side) cannot both pass the check and overwrite each other.
    # Shared by every branch of the session.
    writes: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)  # pragma: no mutate
    new: bool = False  # begun by this process (SessionStore.create), not continued from a log
    # Called after each event is recorded (the central audit's delivery wakes: session/auditship.py).
    after_record: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    @property
    def id(self) -> str:
        return self.state.id

    @property
    def log(self) -> EventLog:
        return EventLog(self.dir / "events.jsonl")

    def record(self, event: AnyEvent, *, sync: bool = True) -> None:
        self.log.append(event, sync=sync)
        if self.after_record is not None:
            self.after_record()

    def save(self) -> None:
        """Replace state.json (atomically: on a failure the old one stays, with no temporary file
        left); StoreError when the store cannot be written."""
        with self.lock:
            data = self.state.model_dump_json(indent=1).encode("utf-8")
            try:
                replace_file(self.dir / "state.json", data, mode=0o600)
            except OSError as exc:
                raise store_error(exc, self.dir / "state.json", "save the session's state to") from None

    def branch(self) -> Session:
        """A subagent's view of this session: the same log and write lock, a state of its own.

        The subagent has seen nothing, so its read-set starts empty: an edit of a file it never
        read is refused, and a file another agent changed after it read it is caught by the hash
        check. Its cwd starts as this one's; its cd, plan and todos stay its own. The state is
        never saved (state.json is the top-level agent's), but every change it makes is in its
        observations in the log, marked with its agent id.
        """
        state = SessionState(id=self.state.id, created_at=self.state.created_at, workspace=self.state.workspace,
                             cwd=self.state.cwd, chain=self.state.chain)
        return Branch(self.dir, state, writes=self.writes, after_record=self.after_record)

    # -- what a call changed, for the log ----------------------------------------------------------

    def mark(self) -> StateMark:
        with self.lock:
            state = self.state
            return StateMark(dict(state.reads), state.cwd, state.plan, list(state.todos), state.next_todo_id)

    def changes_since(self, mark: StateMark) -> dict[str, Any]:
        """What changed since `mark`, in the form apply_changes replays; {} when nothing did."""
        with self.lock:
            state = self.state
            changes: dict[str, Any] = {}
            reads = {p: r.model_dump(mode="json") for p, r in state.reads.items() if mark.reads.get(p) != r}
            forgot = [p for p in mark.reads if p not in state.reads]
            if reads:
                changes["reads"] = reads
            if forgot:
                changes["forgot"] = forgot
            if state.cwd != mark.cwd:
                changes["cwd"] = state.cwd
            if state.plan != mark.plan:
                changes["plan"] = state.plan.model_dump(mode="json") if state.plan else None
            if state.todos != mark.todos or state.next_todo_id != mark.next_todo_id:
                changes["todos"] = [item.model_dump(mode="json") for item in state.todos]
                changes["next_todo_id"] = state.next_todo_id
            return changes

    # -- the read-set ---------------------------------------------------------------------------

    def remember(self, path: Path, data: bytes | None, size: int, mtime_ns: int) -> None:
        """Record that the model now knows `path` as it is (after a read, write or edit).

        `data` is the whole content when the caller has it; None for files over HASH_LIMIT.
        """
        record = ReadRecord(size=size, mtime_ns=mtime_ns, sha256=digest(data) if data is not None else None, at=now())
        with self.lock:
            self.state.reads[str(path)] = record

    def last_read(self, path: Path) -> ReadRecord | None:
        return self.state.reads.get(str(path))

    def forget(self, path: Path) -> None:
        with self.lock:
            self.state.reads.pop(str(path), None)


class Branch(Session):
    """A subagent's session (Session.branch): its state lives only as long as the subagent."""

    def save(self) -> None:
        pass


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

    def create(self, workspace: Path, session_id: str | None = None, origin: str = "agent") -> Session:
        """A new session: its log's first event declares the hash chain (SessionEvent), then state.json
        records it too. A crash between the two leaves a log without a state; creating the session
        again then keeps that log, and the state takes the chain its first event declares."""
        session_id = session_id or new_session_id()
        directory = self._made(session_id)
        state = SessionState(id=session_id, created_at=now(), workspace=str(workspace), cwd=str(workspace),
                             origin=origin)
        session = Session(directory, state)
        first = next(session.log.stream([]), None)  # the first event is all it needs: not the whole log
        session.new = first is None
        if first is not None:
            state.chain = first.chain if isinstance(first, SessionEvent) else None
        else:
            user, host = who()
            try:
                session.record(SessionEvent(session_id=session_id, workspace=str(workspace), origin=origin,
                                            user=user, host=host))
            except StoreError as exc:
                raise not_begun(session_id, exc) from None
            state.chain = CHAIN
        try:
            session.save()
        except StoreError as exc:
            raise not_begun(session_id, exc) from None
        return session

    @contextmanager
    def use(self, session_id: str | None, workspace: Path, *, wait_s: float = WAIT_S,
            on_wait: Callable[[str], None] | None = None, origin: str = "agent") -> Iterator[Session]:
        """Open (or create) a session and hold its lock, so concurrent processes take turns.

        The state is loaded after the lock is taken: a process that waited sees what the one
        before it saved. A wait longer than a second is announced on `on_wait` (default: stderr)
        naming the process that holds the session; after `wait_s` seconds, SessionError.
        """
        session_id = session_id or new_session_id()
        directory = self._made(session_id)
        try:
            handle = open(directory / "lock", "a+")
        except OSError as exc:
            raise not_begun(session_id, store_error(exc, directory / "lock", "open the lock file")) from None
        with handle:
            _take(handle, session_id, wait_s, on_wait or _tell_stderr)
            if (directory / "state.json").exists():
                yield self.open(session_id)
            else:
                yield self.create(workspace, session_id, origin)

    def _made(self, session_id: str) -> Path:
        """The session's directory, made if new; SessionError (nothing begun) when the store cannot."""
        directory = self._dir(session_id)
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise not_begun(session_id, store_error(exc, directory, "make the session directory")) from None
        return directory

    def ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "state.json").is_file())

    def stored(self, session_id: str) -> Path:
        """The directory of a session that left any record (state.json, its log or events.head),
        for verifying: a session whose state.json is gone is still checked, not passed over."""
        directory = self._dir(session_id)
        if not any((directory / name).exists() for name in RECORD):
            raise SessionError(f"No session {session_id!r} in {self.root}. List them with `abhed sessions list --all`.")
        return directory

    def stored_dirs(self) -> list[Path]:
        """Every session directory that left any record, by name."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if SESSION_ID.fullmatch(p.name)
                      and any((p / name).exists() for name in RECORD))

    def exists(self, session_id: str) -> bool:
        return (self._dir(session_id) / "state.json").is_file()

    def last_used(self, session_id: str) -> float:
        """When the session last changed (its log's or state's modification time), for "newest first"."""
        directory = self._dir(session_id)
        times = [p.stat().st_mtime for p in (directory / "events.jsonl", directory / "state.json") if p.exists()]
        return max(times, default=0.0)


def _take(handle: Any, session_id: str, wait_s: float, on_wait: Callable[[str], None]) -> None:
    """Lock the session's lock file, waiting at most `wait_s`; then write who holds it into it."""
    started, told = time.monotonic(), False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            waited = time.monotonic() - started
            if waited >= wait_s:  # pragma: no mutate (>= or > on a float clock: equivalent)
                raise SessionError(
                    f"Session {session_id!r} is still in use by {_holder(handle)} after {waited:.0f} s of waiting. "
                    "Let that finish (or stop it), then try again; or use another session (leave out --session "
                    "for a new one). agent.session_wait_s sets how long to wait.") from None
            if not told and waited >= TELL_AFTER_S:
                on_wait(f"waiting for session {session_id}: it is in use by {_holder(handle)}; giving up after "
                        f"{wait_s:g} s (agent.session_wait_s)")
                told = True
            time.sleep(POLL_S)
    note = f"{os.getpid()} abhed {' '.join(sys.argv[1:])}"[:240] + "\n"  # pragma: no mutate (the cap's size)
    try:  # who holds it, for a process that waits: a nicety; on a full disk the lock holds all the same
        os.ftruncate(handle.fileno(), 0)
        os.pwrite(handle.fileno(), note.encode("utf-8", "replace"), 0)
    except OSError:
        pass


def not_begun(session_id: str, exc: StoreError) -> SessionError:
    """A store failure before any tool ran: the session could not be begun or continued."""
    return SessionError(f"Session {session_id!r} could not be started, and nothing was run: {exc.message}.")


def _holder(handle: Any) -> str:
    """Who holds the lock, as its holder wrote it: "process 1234 (abhed run ...)"."""
    written = os.pread(handle.fileno(), 512, 0).decode("utf-8", "replace").strip()  # pragma: no mutate (a read size)
    pid, _, command = written.partition(" ")
    return f"process {pid} ({command})" if pid.isdigit() else "another process"


def _tell_stderr(message: str) -> None:
    print(f"abhed: {printable(message)}", file=sys.stderr, flush=True)
