"""A session as a markdown document, for people: `abhed sessions export ID --format markdown` and chat's
`/export [path]`.

From the event log, in order: each run (when, which model, how it ended), the human's messages,
the model's text (its call markup left out), each tool call with its arguments, the approval
decision and who made it (audit.py's reading of the result's metadata), its result, and what
Abhed itself added (notes, hints, an interrupt, an undo), each in a line. Arguments and results
are bounded, with a note for what was cut; the full record stays in the log (`sessions show
--full`). Control characters are shown as escapes (the document may be cat'ed to a terminal), and
a fence is always longer than any run of backticks it holds, so a result cannot close it early.

Writing goes to a new file only (`write_new`): it never replaces one, and never follows a symlink
at the end of the path or, inside the workspace, anywhere below the workspace root (a model could
have planted one there to make the export overwrite a file of the human's).
"""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path
from typing import Any

from abhed.common.terminal import printable
from abhed.files.beneath import open_beneath, opened
from abhed.files.paths import is_within
from abhed.model.textcalls import prose
from abhed.session.audit import approved_by
from abhed.session.events import ActionEvent, CheckpointEvent, MessageEvent, ModeEvent, ObservationEvent, RunEvent
from abhed.session.store import Session
from abhed.tools.base import head_tail

ARGUMENT_CHARS = 2_000  # a call's arguments, as JSON
RESULT_CHARS = 3_000  # a call's result
NOTE_CHARS = 300  # a line Abhed added (notes, hints)


class ExportError(Exception):
    """The export could not be written: the message says why and what to do."""


def _fenced(text: str, limit: int, info: str = "") -> str:
    kept, cut = head_tail(printable(text), limit)
    longest = max((len(run) for run in re.findall(r"`+", kept)), default=0)
    fence = "`" * max(3, longest + 1)
    note = f"\n[{cut} characters cut here; the whole text is in the log: abhed sessions show ID --full]" if cut else ""
    return f"{fence}{info}\n{kept}\n{fence}{note}"


def _who(event: Any) -> str:
    return "" if event.agent_id == "main" else f" (subagent {event.agent_id})"


def render(session: Session) -> str:
    """The whole session as markdown."""
    loaded = session.log.load()
    state = session.state
    out = [f"# Abhed session {state.id}", "",
           f"- workspace: `{printable(state.workspace)}`",
           f"- created: {state.created_at.isoformat(timespec='seconds')}"]
    out += [f"- warning: {printable(problem)}" for problem in loaded.problems]
    results = {e.action_id: e for e in loaded.events if isinstance(e, ObservationEvent)}
    runs = 0
    for event in loaded.events:
        if isinstance(event, RunEvent):
            if event.status == "started":
                runs += 1
                out += ["", f"## Run {runs}{_who(event)}: {event.at.isoformat(timespec='seconds')}, model "
                            f"{printable(event.model or '?')}"]
            else:
                detail = f": {printable(event.detail)}" if event.detail else ""
                out += ["", f"*run {event.status}{_who(event)}{detail}*"]
        elif isinstance(event, MessageEvent):
            out += _message(event)
        elif isinstance(event, ActionEvent):
            out += _call(event, results.get(event.id))
        elif isinstance(event, ModeEvent):
            out += ["", f"*approval mode {event.previous} -> {event.mode} (by {printable(event.user or '?')})*"]
        elif isinstance(event, CheckpointEvent) and event.undo_to:
            out += ["", f"*undo: the workspace went back to before checkpoint {event.undo_to}*"]
    return "\n".join(out) + "\n"


def _message(event: MessageEvent) -> list[str]:
    if event.role == "assistant":
        text = prose(event.content).strip()
        return ["", f"### Assistant{_who(event)}", "", printable(text)] if text else []
    if event.origin == "user":
        attached = f"\n\n({len(event.images)} attachment{'s' * (len(event.images) != 1)})" if event.images else ""
        return ["", f"### User{_who(event)}", "", printable(event.content) + attached]
    kept, cut = head_tail(event.content, NOTE_CHARS)
    shown = printable(kept).replace("\n", " ") + (f" [{cut} characters more]" if cut else "")
    return ["", f"> Abhed ({printable(event.origin)}){_who(event)}: {shown}"]


def _call(action: ActionEvent, result: ObservationEvent | None) -> list[str]:
    arguments = action.input if isinstance(action.input, str) else json.dumps(action.input, indent=1, ensure_ascii=False)
    lines = ["", f"**{printable(action.tool)}**{_who(action)}", "", _fenced(arguments, ARGUMENT_CHARS, "json")]
    if result is None:
        return [*lines, "", "*no result recorded (the process ended during the call)*"]
    approval = result.metadata.get("approval") or {}
    if approval:
        decision = approval.get("decision", "?")
        lines += ["", f"approval: {printable(str(decision))} by {printable(str(approved_by(approval)))}"
                      + (f" ({printable(str(approval['reason']))})" if approval.get("reason") else "")]
    lines += ["", "error:" if result.is_error else "result:", "", _fenced(result.content, RESULT_CHARS)]
    return lines


def target(raw: str, base: Path) -> Path:
    """Where `/export PATH` or `--output PATH` writes: `~` expanded, relative to `base`, absolute."""
    return Path(os.path.normpath(base / os.path.expanduser(raw)))  # an absolute PATH replaces base


def write_new(path: Path, text: str, workspace: Path) -> None:
    """Create `path` with `text`; ExportError (why, what to do) when it exists or cannot be made."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if is_within(path.parent, workspace):  # the model's ground: no symlink on the way counts
            # no mutate below: with O_PATH|O_DIRECTORY or none of them it is the same directory, opened beneath
            with opened(open_beneath(workspace, path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)) as parent:  # pragma: no mutate
                fd = os.open(path.name, flags, 0o644, dir_fd=parent)
        else:
            fd = os.open(path, flags, 0o644)
    except FileExistsError:
        raise ExportError(f"{path} exists: the export never replaces a file. Name another path (/export PATH, "
                          "--output PATH).") from None
    except OSError as exc:
        reason = "a symlink is on the way" if exc.errno in (errno.ELOOP, errno.EXDEV) else (exc.strerror or str(exc))
        raise ExportError(f"cannot create {path}: {reason}. Name a path in a directory you can write (/export PATH, "
                          "--output PATH).") from None
    with opened(fd):
        data = text.encode("utf-8", errors="surrogateescape")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
