"""Each session's head is printed at its end (issue 30), so a site can keep it elsewhere and check
the log against it later: `abhed run`/`resume` on the last line of stderr and in --json, `abhed chat`
when it ends. The head named is the log's last event, and `sessions verify --head` takes it."""

from __future__ import annotations

import json
from pathlib import Path

from abhed.model.replay import ReplayServer, Turn
from abhed.session.events import line_hash
from abhed.session.store import SessionStore
from test_cli_agent import abhed


def _head(home: Path, session_id: str) -> str:
    """The head of the session's log as it is now: its last event's number and hash."""
    rows = (home / "sessions" / session_id / "events.jsonl").read_bytes().splitlines()
    return f"{len(rows)}:{line_hash(rows[-1])}"


def test_run_ends_with_the_head_and_a_later_resume_keeps_it_verifiable(ws: Path, home: Path) -> None:
    with ReplayServer([Turn(text="One."), Turn(text="Two.")]) as server:
        first = abhed("run", "first", "--endpoint", server.url, "--workspace", str(ws), home=home)
        (session_id,) = SessionStore(home).ids()
        kept = _head(home, session_id)
        resumed = abhed("resume", session_id, "second", "--endpoint", server.url, "--json", home=home)
    last = first.stderr.rstrip("\n").splitlines()[-1]
    assert first.returncode == 0 and last.startswith(f"abhed: session {session_id}; spent 1 replies, ")
    assert last.endswith(f" s; head {kept}")
    assert resumed.returncode == 0 and json.loads(resumed.stdout)["head"] == _head(home, session_id) != kept
    assert resumed.stderr.rstrip("\n").splitlines()[-1].endswith(f"; head {_head(home, session_id)}")
    check = abhed("sessions", "verify", session_id, "--head", kept, home=home)  # the first run's, kept elsewhere
    assert check.returncode == 0 and check.stdout.splitlines()[1].startswith(
        f"note: the log holds the head kept elsewhere (event {kept.split(':')[0]}, line {kept.split(':')[0]})")


def test_chat_prints_the_head_when_it_ends(ws: Path, home: Path) -> None:
    with ReplayServer([Turn(text="Hello there.")]) as server:
        proc = abhed("chat", "--endpoint", server.url, "--workspace", str(ws), home=home, input="hi\n")
    (session_id,) = SessionStore(home).ids()
    head = _head(home, session_id)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.rstrip("\n").splitlines()[-1] == (
        f"abhed: session {session_id} ended; head {head} (keep it elsewhere: `abhed sessions verify {session_id} "
        f"--head {head}` checks the log against it)")
    assert abhed("sessions", "verify", session_id, "--head", head, home=home).returncode == 0
