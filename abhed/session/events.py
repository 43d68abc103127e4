"""ActionEvent / ObservationEvent and the append-only log that persists them (rule 7).

The agent loop adds three kinds so a session can be rebuilt from its log alone (`abhed resume`):
MessageEvent (a user prompt or a model reply, with its tool calls), CompactionEvent (older turns
replaced by a summary) and RunEvent (a run of the loop started or ended, and how); ModeEvent records
a change of approval mode during the session (chat's /mode). Tool results are
the ObservationEvents themselves; nothing is stored twice. A SessionEvent opens every session's log:
its creation, declaring that the log is hash-chained (abhed/session/audit.py).

One JSON object a line, fsync'd per event, so the log is the durable record of what the agent did:
`abhed sessions show` prints it and `abhed resume` rebuilds a session from it. A crash can cut only
the line being written; loading reports that torn line and skips it, and the next append starts on
a fresh line so the torn bytes never corrupt a later event.

Large payloads (a file the model writes, a long output) would make the log grow by their size at
every call. Any string of BLOB_MIN bytes or more is stored once, content-addressed, in `blobs/<sha256>`
beside the log (made durable before the line that names it), and the line holds a reference:
"\0blob:<sha256>:<bytes>". Every call stays auditable, each line stays small, and the same content
written twice is stored once. Loading puts the payloads back, checking their hash. Lines of
schema_version 1 (before blobs) are read as they are; in later ones a string the model sent that
itself starts with NUL is stored with one NUL more, so it can never pass for a reference.
"""

# No `from __future__ import annotations` here: pydantic would then turn each field's annotation, a
# string, into a typing.ForwardRef (compiled) and evaluate it, at import, for the eight models: about a
# fifth of this module's import (start-up, issue 18). Annotations are plain objects; all names they use are
# defined above them.

import fcntl
import getpass
import json
import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from hashlib import sha256
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from abhed.files.atomic import replace_file, replace_unsynced, write_all
from abhed.session import summary
from abhed.session.storefail import store_error

# 2: payloads of BLOB_MIN bytes or more live in blobs/ (see the module doc). 3: the log begins with a
# SessionEvent declaring its chain, and every line carries its link (seq, prev): a line of version 3
# or later without one had it stripped (abhed/session/audit.py).
SCHEMA_VERSION = 3
# The hash chain a session declares at creation (state.json and its first event): each event's `seq`
# counts the log's readable lines from 1, its `prev` is the sha256 of the line before it ("" for the
# first), and events.head holds the last event's seq and hash. Verify refuses a scheme it does not know.
CHAIN = "sha256-prev/1"
BLOB_MIN = 16 * 1024
BLOB_REF = "\0blob:"
_REF = re.compile(r"\0blob:([0-9a-f]{64}):(\d+)")


@lru_cache(maxsize=1)
def who() -> tuple[str, str]:
    """The user and host this process records its calls and runs under (the audit's "who")."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return user, os.uname().nodename  # what socket.gethostname() returns, without loading socket


def new_id() -> str:
    return uuid.uuid4().hex


def now() -> datetime:
    return datetime.now(UTC)


class _Event(BaseModel):
    # A newer Abhed may add fields; older ones still load (tested). pydantic's default, said out loud.
    # Each kind is built on its first use, not at import: `abhed tool read` makes two kinds of the
    # seven (start-up, issue 18).
    # pragma: no mutate (equivalent: extra="ignore" is the default; deferring changes only when a kind is built)
    model_config = ConfigDict(extra="ignore", defer_build=True)  # pragma: no mutate

    schema_version: int = SCHEMA_VERSION
    id: str = Field(default_factory=new_id)
    session_id: str
    agent_id: str = "main"
    parent_id: str | None = None  # the agent that spawned this one; None for the top-level agent
    at: datetime = Field(default_factory=now)
    # The hash chain (abhed/session/audit.py): this event's place in the session's log, counting every
    # readable line from 1, and the sha256 of the line before it ("" for the first). Set by
    # EventLog.append; None in logs written before the chain existed.
    seq: int | None = None
    prev: str | None = None


class ActionEvent(_Event):
    """A tool call as the model made it, recorded before anything runs."""

    kind: Literal["action"] = "action"
    tool: str
    tool_call_id: str | None = None
    input: Any  # the parsed arguments, or the raw string when they were not valid JSON
    # Who made the call (who ran Abhed) and where: set when the call is made (dispatch), None in
    # lines from before these fields (a default here would credit old calls to today's reader).
    user: str | None = None
    host: str | None = None


class ObservationEvent(_Event):
    """What the tool answered: exactly the text the model reads, plus structured metadata."""

    kind: Literal["observation"] = "observation"
    action_id: str
    tool: str
    content: str
    is_error: bool
    metadata: dict[str, Any] = {}
    duration_ms: float
    images: list[dict[str, str]] = []  # {"url": data URL, "label"}: what the model was shown beside the text


class MessageEvent(_Event):
    """A user prompt or a model reply, as it enters the conversation.

    For a reply, `content` is the model's whole text (with a text-protocol reply, the tool-call
    markup too) and `tool_calls` the calls read from it: `{"id", "name", "arguments"}` with
    `arguments` the raw string the model sent, so a resumed session replays exactly what it said.
    `forms` names the text forms those calls were written in (textcalls: "hermes", "qwen3_coder",
    ...): empty when the server parsed them (native calls) or there were none, and in lines from
    before the field. `origin` tells a human's prompt from text Abhed itself added (a loop-guard
    hint, a resume note).
    """

    kind: Literal["message"] = "message"
    role: Literal["user", "assistant"]
    content: str
    tool_calls: list[dict[str, Any]] = []
    forms: list[str] = []  # the text forms of the calls read from `content`; [] for the server's own
    images: list[dict[str, str]] = []  # a user's attachments: {"url": data URL, "label"}
    reasoning: str | None = None
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    origin: str = "model"  # user | model | loop_guard | interrupt | resume


class CompactionEvent(_Event):
    """Older turns were replaced: the conversation is now `content` followed by the messages from
    the event `keep_from` on (None: nothing kept). `content` is the whole replacement text, summary
    and re-injected plan, todos and files read, so a rebuild needs nothing else."""

    kind: Literal["compaction"] = "compaction"
    content: str
    keep_from: str | None
    method: Literal["model", "mechanical"]
    tokens_before: int
    tokens_after: int


class RunEvent(_Event):
    """A run of the loop (one prompt worked to an end) started, or ended and how."""

    kind: Literal["run"] = "run"
    status: Literal["started", "done", "failed", "budget", "interrupted"]
    detail: str = ""
    prompt: str | None = None  # for "started"
    # for "started", the audit record's who and which model (abhed sessions export)
    user: str | None = None
    host: str | None = None
    model: str | None = None


class CheckpointEvent(_Event):
    """The workspace was snapshotted before a call that may change it (abhed/session/checkpoint.py).

    `number` counts the session's checkpoints from 1 in call order; `abhed undo --to N` restores
    the state this one holds. `not_covered` names files the snapshot left out, and why."""

    kind: Literal["checkpoint"] = "checkpoint"
    number: int
    commit: str
    action_id: str | None  # the call that followed (None: an undo, which is checkpointed too)
    tool: str
    not_covered: list[str] = []
    not_covered_count: int = 0
    collected: str = ""  # what the store's collection took to stay within its caps (abhed/session/collect.py)
    undo_to: int | None = None  # for an undo: the checkpoint whose state it restored


class SessionEvent(_Event):
    """The session was created: the first event of its log, written before state.json. `chain` says
    the log is hash-chained from this line on (and how), so a log stripped of its links, or of this
    line, cannot pass for one written before the chain existed (abhed/session/audit.py)."""

    kind: Literal["session"] = "session"
    chain: str = CHAIN
    workspace: str
    origin: str
    user: str | None = None  # who created it, where
    host: str | None = None


class ModeEvent(_Event):
    """The human changed the approval mode during the session (chat's /mode): from the next model
    request on, the gate and the system prompt use `mode`, and `abhed resume` continues in it."""

    kind: Literal["mode"] = "mode"
    mode: str
    previous: str
    user: str | None = None  # who changed it, where (the audit's "who")
    host: str | None = None


class RepoMapEvent(_Event):
    """The repository map (agent/repomap.py) went into the system prompt of the agent's first request:
    its text as sent, its size in tokens (estimated) against its budget, and how it was made."""

    kind: Literal["repomap"] = "repomap"
    content: str
    tokens: int
    budget: int
    files_shown: int
    files_found: int
    parsed: int  # outlined in this session
    cached: int  # outlined from the cache
    seconds: float


class HookEvent(_Event):
    """An operator's hook ran (agent/hooks.py): on which event, what it was, how it ended. `outcome`:
    ok (exit 0), blocked (pre_tool, exit 2), warned (any other end: another exit status, a timeout,
    a program that could not start). `stderr` is kept bounded, as the human and the model saw it."""

    kind: Literal["hook"] = "hook"
    event: str
    command: list[str]
    tool: str | None = None  # pre_tool/post_tool: the call's tool
    exit_code: int | None = None  # None: killed at its deadline, or never started
    outcome: Literal["ok", "blocked", "warned"]
    stderr: str = ""
    duration_ms: float = 0.0


class EndpointEvent(_Event):
    """The model server this session talks to changed (model.endpoints): `previous` was down, for
    `reason`, and the session goes on at `endpoint`, where `abhed resume` starts too."""

    kind: Literal["endpoint"] = "endpoint"
    endpoint: str
    previous: str
    reason: str



class AuditEvent(_Event):
    """Central audit (abhed/session/auditship.py): a process began or ended its use of the session
    (`start`, `end`: the audit's session start and end, the end carrying the head), or a sink
    could not be sent to (`failed`, told once) or took records again after that (`resumed`)."""

    kind: Literal["audit"] = "audit"
    what: Literal["start", "end", "failed", "resumed"]
    sink: str | None = None  # failed, resumed: which sink
    detail: str = ""  # failed: what went wrong; resumed: how many records were sent late
    user: str | None = None  # start, end: who, where
    host: str | None = None


AnyEvent = (ActionEvent | ObservationEvent | MessageEvent | CompactionEvent | RunEvent | CheckpointEvent | ModeEvent
            | SessionEvent | RepoMapEvent | HookEvent | EndpointEvent | AuditEvent)
Event = Annotated[AnyEvent, Field(discriminator="kind")]


@lru_cache(maxsize=1)
def _event_adapter() -> TypeAdapter[AnyEvent]:
    """The validator of any event, read by its kind: built on the first load (it builds every kind)."""
    return TypeAdapter(Event)


@dataclass
class LoadedLog:
    events: list[AnyEvent] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # lines skipped, and why


class EventLog:
    """The append-only JSONL file of one session, and the blobs beside it."""

    def __init__(self, path: Path, blob_min: int = BLOB_MIN) -> None:
        self.path = path
        self.blobs = path.parent / "blobs"
        self.blob_min = blob_min

    def append(self, event: AnyEvent, *, sync: bool = True) -> None:
        """Append one event. `sync=False` leaves it to the next synced append (or `sync()`) to make
        it durable: fsync flushes everything written to the file, so an event followed at once by a
        synced one (a reply by the call it makes) costs no fsync of its own. Blobs are always
        durable before the line that names it is written.

        All or nothing: when the store fails (a full disk, EIO, ...) the log is cut back to where it
        was, `events.head` still names its last event, and StoreError says where and what to do."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise store_error(exc, self.path, "open") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # the link to the last line and the write are one step (subagents)
            size = os.fstat(fd).st_size
            try:
                self._append_locked(fd, event, sync)
            except OSError as exc:  # _TAILS still holds the log's end before this append: right after the cut
                _cut(fd, size)
                raise store_error(exc, self.path, "append an event to") from None
        finally:
            os.close(fd)  # releases the lock

    def _append_locked(self, fd: int, event: AnyEvent, sync: bool) -> None:
        torn = _ends_torn(fd)
        event.seq, event.prev = _tail(self.path, fd)
        event.seq += 1
        body = to_json(event, self._stored).encode("ascii")
        before = os.fstat(fd).st_size
        write_all(fd, (b"\n" if torn else b"") + body + b"\n")  # a torn line stays on its own
        digest = line_hash(body)
        if sync:
            os.fsync(fd)
        self._anchor(event.seq, digest)  # still under the lock: the heads follow the log's order
        # Last: an append that failed (and was cut back) is never counted into the summary.
        summary.noted(self, fd, event, before, sync)  # what `sessions list` shows (never raises)
        # pragma: no mutate (a cache: without it the next append reads this line back, to the same link)
        _TAILS[self.path] = (os.fstat(fd).st_ino, os.fstat(fd).st_size, event.seq, digest)  # pragma: no mutate

    def _anchor(self, seq: int, digest: str) -> None:
        """Note the last event's number and hash beside the log (`events.head`), after every event (a
        synced one after its fsync): a log cut at the end no longer reaches it, and an event added
        after it is past it (abhed/session/audit.py). Replaced by a rename, never fsync'd: a process
        killed between an event and this leaves that one event past the head; only a crash of the
        machine can lose more (events not yet fsync'd, or the head's last replacements). A failed
        replacement removes its temporary file and leaves the old head. (Not written over in place,
        though that would spare each event a rename: a new file is what a full or read-only store
        refuses, while a short line still fits the log's last block, so this is what stops the run
        at the first event the store cannot take; tests/test_store_failures.py.)"""
        data = json.dumps({"seq": seq, "hash": digest}).encode()
        replace_unsynced(self.path.parent / "events.head", data)

    def sync(self) -> None:
        """Make every event appended so far durable (StoreError when the disk cannot)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)  # pragma: no mutate (O_RDONLY is 0: & is |)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # pragma: no mutate (not between another append's write and head)
                os.fsync(fd)  # pragma: no mutate (durability: only a power cut tells)
                summary.synced(self, fd)  # the summary counted in memory, saved with the events (never raises)
            finally:
                os.close(fd)
        except OSError as exc:
            raise store_error(exc, self.path, "make durable the events of") from None

    def head(self) -> tuple[int, str]:
        """The number and hash of the log's last event ((0, "") when it has none): what a site keeps
        elsewhere, to check the log against later (`abhed sessions verify --head`)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)  # pragma: no mutate (O_RDONLY is 0: & is |)
        except FileNotFoundError:
            return 0, ""
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # not in the middle of another process's append
            return _tail(self.path, fd)
        finally:
            os.close(fd)

    def stored(self, text: str) -> str:
        """`text` as a line of this log holds it (a blob reference when large; the blob is written)."""
        return self._stored(text)

    def payload(self, stored: str) -> str:
        """A string as a line of this log holds it, as it was given (a blob reference read back)."""
        return _Payloads(self.blobs).text(stored)

    def _stored(self, text: str) -> str:
        """A string as the line holds it: a reference to its blob when large, else itself."""
        # A shortcut (pragma: equivalent mutants): fewer than blob_min / 4 characters cannot reach
        # blob_min bytes in UTF-8, so there is no need to encode them to know.
        if len(text) * 4 < self.blob_min:  # pragma: no mutate
            return "\0" + text if text.startswith("\0") else text  # pragma: no mutate (a shortcut of the below)
        data = text.encode("utf-8", "surrogatepass")
        if len(data) < self.blob_min:
            return "\0" + text if text.startswith("\0") else text
        name = sha256(data).hexdigest()
        target = self.blobs / name
        if not target.exists():  # content-addressed: the same payload is stored once
            self.blobs.mkdir(mode=0o700, exist_ok=True)
            replace_file(target, data, mode=0o600)
        return f"{BLOB_REF}{name}:{len(data)}"

    def load(self) -> LoadedLog:
        """Every event, in a list: for what needs them all at once (`sessions show`). What needs only
        what they add up to (a resume, `sessions list`) reads `stream()` instead."""
        loaded = LoadedLog()
        loaded.events.extend(self.stream(loaded.problems))
        return loaded

    def stream(self, problems: list[str]) -> Iterator[AnyEvent]:
        """The log's events one at a time, read line by line: memory for one line (and its payloads),
        not for the log. Each line skipped is noted in `problems` as it is met."""
        for _end, _whole, event in self.scan(0, problems):
            if event is not None:
                yield event

    def scan(self, start: int, problems: list[str] | None = None) -> Iterator[tuple[int, bool, AnyEvent | None]]:
        """From byte `start` (a line's beginning), each line as (the offset just past it, whether it
        ends with a newline, its event or None when it is blank or unreadable). Only the final line
        can lack its newline: cut by a crash mid-write, or being written right now."""
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 (closed below, also when the caller stops early)
        except FileNotFoundError:
            return
        noted = problems if problems is not None else []
        with handle:
            handle.seek(start)
            payloads, end = _Payloads(self.blobs), start
            for number, raw in enumerate(handle, start=1):
                end += len(raw)
                whole = raw.endswith(b"\n")
                yield end, whole, (self._event(raw, number, whole, payloads, noted) if raw.strip() else None)

    def _event(self, raw: bytes, number: int, whole: bool, payloads: "_Payloads", problems: list[str]) -> AnyEvent | None:
        try:
            value = json.loads(raw)
            if _may_name_blobs(value):
                value = _restored(value, payloads)
                problems.extend(f"{self.path}:{number}: {problem}" for problem in payloads.take_problems())
            return _event_adapter().validate_python(value)
        except (ValidationError, ValueError, RecursionError) as exc:  # Recursion: nested too deep to parse
            what = "unreadable line" if whole else "torn final line (cut by a crash mid-write)"
            problems.append(f"{self.path}:{number}: {what}, {len(raw) - whole} bytes, skipped "
                            f"({_first_error(exc)})")
            return None  # pragma: no mutate (deleted, it still returns None)


def to_json(event: AnyEvent, stored: Callable[[str], str] | None = None) -> str:
    """One event as one line of ASCII JSON, each string value passed through `stored` (the log's
    blobs). The model can send lone surrogates ("\\ud800"), in values and in keys, which UTF-8
    cannot encode but an escaped JSON string carries: so the log records exactly what was sent.
    (pydantic's own JSON mode refuses such a key, hence json.dumps here.)"""
    value = event.model_dump()
    return json.dumps(_map_strings(value, stored) if stored else value, default=to_jsonable_python,
                      ensure_ascii=True)


def _map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """`value` with every string value (not key) replaced by change(it)."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {key: _map_strings(item, change) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_map_strings(item, change) for item in value]
    return value


class _Payloads:
    """The blobs a log's lines refer to, read (and checked against their name) as they are met; the
    last one is kept, for the strings of one event that hold the same payload."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.read: dict[str, str] = {}
        self.problems: list[str] = []

    def text(self, stored: str) -> str:
        if not stored.startswith("\0"):
            return stored
        ref = _REF.fullmatch(stored)
        if ref is None:
            return stored[1:]  # a string of the model's own that started with NUL
        name, size = ref.group(1), int(ref.group(2))
        if name not in self.read:  # only the last payload is kept: a log read through holds one, not all
            self.read = {name: self._load(name, size)}
        return self.read[name]

    def _load(self, name: str, size: int) -> str:
        path = self.directory / name
        try:
            data = path.read_bytes()
        except OSError as exc:
            self.problems.append(f"payload {path} ({size} bytes) cannot be read ({exc.strerror or exc}); shown as a "
                                 "placeholder")
            return f"[payload of {size} bytes missing: {path}]"
        if sha256(data).hexdigest() != name:
            self.problems.append(f"payload {path} does not match its hash (changed or damaged on disk); shown as a "
                                 "placeholder")
            return f"[payload of {size} bytes damaged: {path}]"
        return data.decode("utf-8", "surrogatepass")

    def take_problems(self) -> list[str]:
        problems, self.problems = self.problems, []
        return problems


def _restored(value: dict[str, Any], payloads: _Payloads) -> dict[str, Any]:
    return _map_strings(value, payloads.text)


def _may_name_blobs(value: Any) -> bool:
    """Whether a parsed line is of a version whose NUL-led strings may be references (2 and later)."""
    return isinstance(value, dict) and isinstance(value.get("schema_version"), int) and value["schema_version"] >= 2


def blob_refs(value: Any) -> list[tuple[str, int]]:
    """The payloads a parsed line names: (sha256, bytes) of each reference among its string values."""
    found: list[tuple[str, int]] = []

    def note(text: str) -> str:
        ref = _REF.fullmatch(text)
        if ref is not None:
            found.append((ref.group(1), int(ref.group(2))))
        return text
    if _may_name_blobs(value):
        _map_strings(value, note)
    return found


# The chain's end per log, so an append reads only what was added since: (inode, size, seq, hash).
_TAILS: dict[Path, tuple[int, int, int, str]] = {}


def head_token(head: tuple[int, str]) -> str:
    """How a log's head (its last event's number and hash) is printed at a session's end, and given
    back to `abhed sessions verify --head`: `SEQ:SHA256`."""
    return f"{head[0]}:{head[1]}"


def line_hash(line: bytes) -> str:
    """The hash the next event's `prev` holds: sha256 of the line's bytes, without its newline."""
    return sha256(line).hexdigest()


def _tail(path: Path, fd: int) -> tuple[int, str]:
    """The number and hash of the log's last readable line: what the next event links to.

    Lines that are not JSON objects (a line torn by a crash) are not in the chain. Reads from where
    this process last saw the log end; a log this process has not seen (or another replaced) is read
    from its end back to its last event, whose `seq` is its number (every `abhed tool` call is a new
    process: counting the lines of a log of 2,000 events, 8.8 MB, took 28 ms of CPU; from the end,
    0.1 ms). A log whose last event has no `seq` (written before the chain existed) is counted from
    the start."""
    st = os.fstat(fd)
    inode, size, seq, last = _TAILS.get(path, (st.st_ino, 0, 0, ""))
    if inode != st.st_ino or size > st.st_size:
        size, seq, last = 0, 0, ""
    if size == 0:
        found = _last_event(fd, st.st_size)
        if found is not None:
            _TAILS[path] = (st.st_ino, *found)
            return found[1], found[2]
    if size == st.st_size:
        return seq, last
    data = os.pread(fd, st.st_size - size, size)
    end = data.rfind(b"\n") + 1  # a torn line at the end is not read (nor linked to)
    for line in data[:end].split(b"\n"):
        if line.strip() and _is_object(line):
            seq, last = seq + 1, line_hash(line)
    _TAILS[path] = (st.st_ino, size + end, seq, last)
    return seq, last


# How much of the log's end is read first: a few events' lines (large payloads are blobs). Each
# further try reads twice as much, so a long last line costs reads of at most twice its size.
_BACK_STEP = 64 * 1024


def _last_event(fd: int, size: int) -> tuple[int, int, str] | None:
    """(where the log's last whole line ends, the `seq` of its last event, that line's hash), read
    from the end; None when the last event carries no usable `seq` (a log from before the chain:
    its lines must be counted) or the log holds no event. Torn lines after it are skipped, as the
    count skips them."""
    step = _BACK_STEP
    while True:
        start = max(0, size - step)
        data = os.pread(fd, size - start, start)
        end = data.rfind(b"\n") + 1  # what follows the last newline is a torn write
        lines = data[:end].split(b"\n")[:-1]
        for line in reversed(lines if start == 0 else lines[1:]):  # the first may begin further back
            value = _object(line) if line.strip() else None
            if value is None:
                continue
            seq = value.get("seq")
            if type(seq) is not int or seq < 1:
                return None
            return start + end, seq, line_hash(line)
        if start == 0:
            return None
        step *= 2


def _object(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _is_object(line: bytes) -> bool:
    return _object(line) is not None



def _cut(fd: int, size: int) -> None:
    """Take back what a failed append wrote after `size` (a torn line, or a line the head does not
    name): the log is as it was. If even that fails, the torn line is skipped on loading."""
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors(include_url=False)[0]  # pragma: no mutate (the url is not shown either way)
        return f"{'.'.join(str(p) for p in err['loc']) or 'line'}: {err['msg']}"
    return str(exc)
