"""ActionEvent / ObservationEvent and the append-only log that persists them (rule 7).

One JSON object a line, fsync'd per event, so the log is the durable record of what the agent did:
`abhed sessions show` prints it and `abhed resume` rebuilds a session from it. A crash can cut only
the line being written; loading reports that torn line and skips it, and the next append starts on
a fresh line so the torn bytes never corrupt a later event.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

SCHEMA_VERSION = 1


def new_id() -> str:
    return uuid.uuid4().hex


def now() -> datetime:
    return datetime.now(UTC)


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a newer Abhed may add fields; older ones still load

    schema_version: int = SCHEMA_VERSION
    id: str = Field(default_factory=new_id)
    session_id: str
    agent_id: str = "main"
    parent_id: str | None = None  # the agent that spawned this one; None for the top-level agent
    at: datetime = Field(default_factory=now)


class ActionEvent(_Event):
    """A tool call as the model made it, recorded before anything runs."""

    kind: Literal["action"] = "action"
    tool: str
    tool_call_id: str | None = None
    input: Any  # the parsed arguments, or the raw string when they were not valid JSON


class ObservationEvent(_Event):
    """What the tool answered: exactly the text the model reads, plus structured metadata."""

    kind: Literal["observation"] = "observation"
    action_id: str
    tool: str
    content: str
    is_error: bool
    metadata: dict[str, Any] = {}
    duration_ms: float


Event = Annotated[ActionEvent | ObservationEvent, Field(discriminator="kind")]
_EVENT = TypeAdapter(Event)


@dataclass
class LoadedLog:
    events: list[ActionEvent | ObservationEvent] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # lines skipped, and why


class EventLog:
    """The append-only JSONL file of one session."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, event: ActionEvent | ObservationEvent) -> None:
        # ensure_ascii: the model can send lone surrogates ("\ud800"), which UTF-8 cannot encode
        # but an escaped JSON string can carry, so the log records exactly what was sent.
        line = json.dumps(event.model_dump(mode="json"), ensure_ascii=True).encode("ascii") + b"\n"
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if _ends_torn(fd):
                line = b"\n" + line  # keep a torn line on its own so this event stays parseable
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def load(self) -> LoadedLog:
        loaded = LoadedLog()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return loaded
        lines = data.split(b"\n")
        last = len(lines) - 1
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                loaded.events.append(_EVENT.validate_python(json.loads(raw)))
            except (ValidationError, ValueError) as exc:
                torn = number - 1 == last  # the final line had no newline: cut by a crash mid-write
                what = "torn final line (cut by a crash mid-write)" if torn else "unreadable line"
                loaded.problems.append(
                    f"{self.path}:{number}: {what}, {len(raw)} bytes, skipped ({_first_error(exc)})"
                )
        return loaded


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors(include_url=False)[0]
        return f"{'.'.join(str(p) for p in err['loc']) or 'line'}: {err['msg']}"
    return str(exc)
