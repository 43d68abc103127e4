"""Which workspace, and which of its sessions, a command typed in a directory means.

One answer for every command: `abhed chat` and `abhed run` work in the root of the git repository
the directory is in; `abhed resume`, `abhed checkpoints` and `abhed undo` take that workspace's
most recently used session. A command typed in a subdirectory therefore finds the session a chat
started there made (issue 36: undo said "No session works in .../sub").
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from abhed.session.store import SessionError, SessionStore


def project_root(start: Path) -> Path:
    """The workspace for a command started in `start`: the root of the git repository it is in
    (the nearest directory above holding a `.git`, as git finds it; nothing is run), else `start`."""
    start = start.resolve()
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return start


def latest(store: SessionStore, workspace: Path, origins: Iterable[str]) -> str | None:
    """The id of the most recently used session of `origins` working in `workspace`, or None. A
    session that cannot be opened is passed over (`abhed sessions list` reports it)."""
    wanted, mine = set(origins), []
    for session_id in store.ids():
        try:
            state = store.open(session_id).state
        except SessionError:
            continue
        if state.origin in wanted and state.workspace == str(workspace):
            mine.append((store.last_used(session_id), session_id))
    return max(mine)[1] if mine else None
