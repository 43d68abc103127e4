"""A session is loaded by reading its log through once, holding what it adds up to, not its events
(issue 33, item 8): the state, conversation and verdict a resume gets are those of the whole log read
at once, and the memory it takes follows the state, not the length of the log (measured as the host
sees it: a real process's peak RSS)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from abhed.agent.conversation import rebuild
from abhed.agent.loop import resumed
from abhed.session.events import (ActionEvent, CompactionEvent, EventLog, MessageEvent, ObservationEvent, RunEvent,
                                  to_json)
from abhed.session.store import Session, SessionStore, rebuild_state
from abhed_testing import REPO


def _read(n: int) -> dict:
    return {"size": n, "mtime_ns": n, "sha256": "0" * 64, "at": "2026-01-01T00:00:00Z"}


def _events(session_id: str, turns: int, agent: str = "main", big: bool = False) -> list:
    """A run of `turns` calls by `agent`, each changing the state, with a compaction on the way."""
    out: list = [RunEvent(session_id=session_id, status="started", prompt="go", agent_id=agent)]
    keep = None
    for n in range(turns):
        reply = MessageEvent(session_id=session_id, role="assistant", content=f"step {n}", agent_id=agent,
                             tool_calls=[{"id": f"{agent}-c{n}", "name": "read", "arguments": "{}"}])
        action = ActionEvent(session_id=session_id, tool="read", tool_call_id=f"{agent}-c{n}", input={}, agent_id=agent)
        changes: dict = {"reads": {f"/w/f{n % 7}": _read(n)}}
        if n % 5 == 4:
            changes["forgot"] = [f"/w/f{(n + 1) % 7}"]
        if n % 6 == 0:
            changes.update(cwd=f"/w/d{n}", plan={"goal": f"g{n}", "steps": ["a"]},
                           todos=[{"id": "1", "content": f"t{n}", "status": "in_progress"}], next_todo_id=2)
        content = ("x" * 20_000 if big and n % 3 == 0 else "") + f"out {n}"  # large ones are blobs
        out += [reply, action, ObservationEvent(session_id=session_id, action_id=action.id, tool="read", content=content,
                                                is_error=False, metadata={"state": changes}, duration_ms=1.0, agent_id=agent)]
        keep = reply.id if n % 4 == 0 else keep
        if n == turns // 2:
            out.append(CompactionEvent(session_id=session_id, content="summary", keep_from=keep, method="mechanical",
                                       tokens_before=10, tokens_after=5, agent_id=agent))
    out.append(MessageEvent(session_id=session_id, role="assistant", content="done?", agent_id=agent,
                            tool_calls=[{"id": f"{agent}-last", "name": "read", "arguments": "{}"}]))  # unanswered
    return out


@pytest.fixture
def session(home: Path, ws: Path) -> Session:
    made = SessionStore(home).create(ws, "s")
    main, sub = _events("s", 40, big=True), _events("s", 25, agent="main.1")
    for i in range(max(len(main), len(sub))):  # a subagent's events interleaved with the main agent's
        for events in (main, sub):
            if i < len(events):
                made.record(events[i], sync=False)
    with open(made.log.path, "ab") as handle:
        handle.write(b"{not an event}\n")
    made.record(RunEvent(session_id="s", status="done", agent_id="main.1"), sync=False)
    with open(made.log.path, "ab") as handle:
        handle.write(b'{"kind": "run", "sta')  # torn by a crash
    return made


@pytest.mark.parametrize("agent", ["main", "main.1", "nobody"])
def test_a_resume_gets_what_the_whole_log_read_at_once_gives(session, agent):
    loaded = session.log.load()
    own = [e for e in loaded.events if e.agent_id == agent]
    runs = [e for e in own if isinstance(e, RunEvent)]
    found = resumed(session, agent, 3000)
    assert found.state == rebuild_state(session.state, own)
    assert found.conversation == rebuild(loaded.events, agent, 3000)
    assert found.unfinished is (bool(runs) and runs[-1].status != "done")
    assert found.problems == loaded.problems and len(found.problems) == 2
    assert session.state.reads == {}  # the session's own state is not changed by reading


def test_the_resumed_state_is_the_logs_and_the_conversation_is_cut_at_the_compaction(session):
    found = resumed(session, "main", 3000)
    assert found.state.cwd == "/w/d36" and found.state.plan.goal == "g36" and found.state.todos[0].content == "t36"
    assert sorted(found.state.reads) == [f"/w/f{i}" for i in range(7) if i != (39 + 1) % 7]  # f5: forgotten last
    assert found.conversation[0].content == "summary" and found.conversation[-1].content.startswith("[")
    assert found.unfinished and not resumed(session, "main.1", 3000).unfinished


def test_problems_of_the_log_are_told_in_order_with_their_line(session):
    problems = resumed(session, "main", 3000).problems
    assert "unreadable line" in problems[0] and "torn final line (cut by a crash mid-write), 20 bytes" in problems[1]
    assert all(p.startswith(f"{session.log.path}:") for p in problems)


_LOAD = """
import gc, json, sys
from pathlib import Path
from abhed.session.store import SessionStore
def rss(field):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(field))
session = SessionStore(Path(sys.argv[1])).open("long")
from abhed.agent.loop import resumed
gc.collect()
open("/proc/self/clear_refs", "w").write("5")
base = rss("VmRSS:")
if sys.argv[2] == "whole":
    held = session.log.load()
else:
    held = resumed(session, "main", 3000)
print(json.dumps({"peak": rss("VmHWM:") - base}))
"""


def test_loading_a_long_session_holds_its_state_not_its_log(home, ws):
    """20,000 events (8,000 calls), 8 MB of log: a resume's peak RSS stays a small part of the log's
    size, where reading it whole (what every load did before) takes several times the log."""
    made = SessionStore(home).create(ws, "long")
    with open(made.log.path, "ab") as handle:  # written at once: the chain does not matter to a load
        for _ in range(4):
            for event in _events("long", 2000):
                handle.write(to_json(event).encode() + b"\n")
    size = made.log.path.stat().st_size
    figures = {}
    for how in ("whole", "stream"):
        out = subprocess.run([sys.executable, "-c", _LOAD, str(home), how], capture_output=True, text=True,
                             cwd=REPO, check=True)
        figures[how] = json.loads(out.stdout)["peak"]
    assert figures["whole"] > 2 * size, (figures, size)  # the measurement sees what a whole read holds
    assert figures["stream"] < size / 3 and figures["stream"] * 10 < figures["whole"], (figures, size)


def test_a_session_is_created_by_reading_only_its_first_event(home, ws):
    store = SessionStore(home)
    made = store.create(ws, "s")
    assert made.new and made.state.chain == "sha256-prev/1"
    with open(made.log.path, "ab") as handle:
        handle.write(b"{broken line}\n" * 3)
    again = store.create(ws, "s")  # a crash between the log's first line and state.json: the log is kept
    assert not again.new and again.state.chain == "sha256-prev/1"
    legacy = store.create(ws, "old")
    legacy.log.path.write_bytes(to_json(RunEvent(session_id="old", status="done")).encode() + b"\n")
    assert store.create(ws, "old").state.chain is None and not store.create(ws, "old").new


def test_stream_stops_cleanly_when_its_reader_does(session):
    events = session.log.stream([])
    first = next(events)
    events.close()  # the file is closed with the generator
    assert first.kind == "session"
    assert isinstance(EventLog(session.dir / "missing.jsonl").load().events, list)


def test_blank_lines_are_no_problem_and_unreadable_ones_are_named(home, ws):
    made = SessionStore(home).create(ws, "s")
    with open(made.log.path, "ab") as handle:
        handle.write(b"\n   \n{not an event}\n\n")
    loaded = made.log.load()
    assert len(loaded.events) == 1 and len(loaded.problems) == 1
    assert loaded.problems[0].startswith(f"{made.log.path}:4: unreadable line, 14 bytes, skipped")
