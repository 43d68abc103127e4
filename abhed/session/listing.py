"""The rows of `abhed sessions list`: each stored session's status, mode, model, workspace and first
prompt, the most recently used first.

Reads each session's summary (session/summary.py), not its events. A session that cannot be
opened is a warning, not a row; the sessions of `abhed tool` calls are counted, not listed, unless
asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from abhed.session import summary
from abhed.session.store import SessionError, SessionStore


@dataclass
class Listing:
    rows: list[dict[str, Any]] = field(default_factory=list)  # newest first; the keys `--json` prints
    hidden: int = 0  # sessions of `abhed tool` calls left out
    warnings: list[str] = field(default_factory=list)  # sessions that could not be opened, why


def listing(store: SessionStore, show_all: bool) -> Listing:
    out, used_at = Listing(), {}
    for session_id in store.ids():
        try:
            session = store.open(session_id)
        except SessionError as exc:
            out.warnings.append(str(exc))
            continue
        state = session.state
        if state.origin == "tool" and not show_all:
            out.hidden += 1
            continue
        log = session.log
        seen = summary.current(log)  # reads no event when the summary is up to date (session/summary.py)
        last = seen.status
        used = store.last_used(session_id)
        used_at[state.id] = used
        out.rows.append({"id": state.id, "created_at": state.created_at.isoformat(timespec="seconds"),
                         "last_used": datetime.fromtimestamp(used, timezone.utc).isoformat(timespec="seconds"),
                         "status": "running or cut short" if last == "started" else last,
                         "mode": state.options.get("mode") or "", "model": state.options.get("model") or "",
                         "origin": state.origin, "events": seen.events, "workspace": state.workspace,
                         "first_prompt": summary.first_prompt(log, seen)})
    # Newest first by the exact time: the shown one is cut to the second, where two sessions tie.
    out.rows.sort(key=lambda row: (used_at[row["id"]], row["id"]), reverse=True)
    return out
