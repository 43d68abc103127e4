"""What holding a large argument, loading a long session and listing many sessions cost (issue 33, item 8).

    .venv/bin/python benchmarks/memory_bench.py [arguments|load|list|all] [--mb 4,30] [--events 100000]
                                                [--sessions 1000] [--per 1000] [--old]

- arguments: one `write` call through dispatch.call (bounds check, JSON parse, validation, the
  ActionEvent and its blob, the tool) in a fresh process; the peak RSS above the process's RSS just
  before the call (the argument text already held), per MB of argument. Side by side: what the
  native floor holds, json.loads of the same text plus its UTF-8 encoding (2 MB per MB).
- load:      what `abhed resume` reads of a session of N events (state rebuilt from the log, the
  conversation, the problems), in a fresh process: peak RSS above the baseline, per event and per
  MB of log; side by side with reading the log's bytes (`cat`-like, 1 MB per MB).
- list:      `abhed sessions list --all --json` over S sessions of P events each, in a child
  process: seconds per session and in all; side by side with `ls -l` of every session directory.

--old measures the paths as they were before issue 33 (EventLog.load() whole; the list command
of main reads every event): the figures "before". Peak RSS is VmHWM, reset through
/proc/self/clear_refs just before the measured step. Note the load (uptime) printed first; timing
lives here only, tests never assert it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PYTHON = sys.executable

_RSS = """
import gc, os
def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
def reset_peak():
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return rss("VmRSS:")
"""

_ARGUMENT_CHILD = _RSS + """
import json, sys, tempfile
from pathlib import Path
from abhed.session import config
from abhed.agent import dispatch
from abhed.gate.approval import Gate, Policy
from abhed.files.paths import PathPolicy
from abhed.session.store import SessionStore
from abhed.tools.base import ToolContext
mb, native = float(sys.argv[1]), sys.argv[2] == "native"
root = Path(tempfile.mkdtemp())
ws, home = root / "ws", root / "home"
ws.mkdir()
settings = config.load({"agent": {"max_argument_bytes": 1 << 30}}, env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
session = SessionStore(home).create(ws)
ctx = ToolContext(session, settings, PathPolicy.create(ws, settings.allowed_roots))
gate = Gate(Policy.create("accept-edits", [], [], ws), invoked_by_human=True, confirmed=True)
line = "a line of text, with a tab\\t and a quote \\" and some more words\\n"
args = json.dumps({"path": str(ws / "big.txt"), "content": line * int(mb * 1024 * 1024 / len(line))})
dispatch.call(ctx, "write", json.dumps({"path": str(ws / "warm.txt"), "content": "x"}), gate)  # imports
base = reset_peak()
if native:
    value = json.loads(args); data = value["content"].encode(); del value, data
else:
    result = dispatch.call(ctx, "write", args, gate)
    assert not result.is_error, result.content
print(json.dumps({"bytes": len(args), "peak": rss("VmHWM:") - base}))
"""

_LOAD_CHILD = _RSS + """
import json, sys
from pathlib import Path
from abhed.session.store import SessionStore
directory, old = Path(sys.argv[1]), sys.argv[2] == "old"
session = SessionStore(directory.parent.parent).open(directory.name)
from abhed.agent.conversation import rebuild
from abhed.session.store import rebuild_state
base = reset_peak()
if old:
    loaded = session.log.load()
    own = [e for e in loaded.events if e.agent_id == "main"]
    state = rebuild_state(session.state, own)
    conversation = rebuild(loaded.events, "main", 40000)
else:
    from abhed.agent.loop import resumed
    state, conversation, unfinished, problems = resumed(session, "main", 40000)
print(json.dumps({"peak": rss("VmHWM:") - base, "messages": len(conversation), "reads": len(state.reads)}))
"""


def _child(code: str, *args: str) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}  # RSS follows what is held (see tests/test_arguments.py)
    out = subprocess.run([PYTHON, "-c", code, *args], capture_output=True, text=True, check=True, cwd=REPO, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def arguments(sizes: list[float]) -> None:
    print("arguments: one write call, peak RSS above the baseline (the argument text already held)")
    for mb in sizes:
        abhed = _child(_ARGUMENT_CHILD, str(mb), "abhed")
        native = _child(_ARGUMENT_CHILD, str(mb), "native")
        size = abhed["bytes"] / 2**20
        print(f"  {size:6.1f} MB argument: abhed {abhed['peak'] / 2**20:8.1f} MB peak = "
              f"{abhed['peak'] / abhed['bytes']:5.2f} x the argument; json.loads+encode {native['peak'] / 2**20:7.1f} MB "
              f"= {native['peak'] / native['bytes']:4.2f} x; ratio abhed/native {abhed['peak'] / max(native['peak'], 1):5.2f}")


def _write_session(directory: Path, session_id: str, events: int, prompt_every: int = 250) -> None:
    """A session of `events` events as the agent writes them: runs, replies with a call, the action,
    the observation carrying the read-set change, a compaction every 200 events; lines chained."""
    from abhed.session.events import (ActionEvent, CompactionEvent, EventLog, MessageEvent, ObservationEvent,
                                      RunEvent)
    from abhed.session.store import SessionStore
    store = SessionStore(directory)
    session = store.create(Path("/tmp/ws"), session_id)
    session.state.options = {"mode": "auto", "model": "bench"}
    session.save()
    log = EventLog(session.dir / "events.jsonl")
    made, keep, n = 1, None, 0
    while made < events:
        if made % prompt_every == 1:
            batch = [RunEvent(session_id=session_id, status="started", prompt=f"task {made}: fix the bug")]
        elif made % 200 == 0:
            batch = [CompactionEvent(session_id=session_id, content="summary " * 50, keep_from=keep,
                                     method="mechanical", tokens_before=9000, tokens_after=900)]
        else:
            n += 1
            reply = MessageEvent(session_id=session_id, role="assistant", content=f"reading file {n}",
                                 tool_calls=[{"id": f"c{n}", "name": "read", "arguments": json.dumps({"path": f"/tmp/ws/f{n % 500}.py"})}])
            keep = reply.id
            action = ActionEvent(session_id=session_id, tool="read", tool_call_id=f"c{n}", input={"path": f"/tmp/ws/f{n % 500}.py"})
            changes = {"reads": {f"/tmp/ws/f{n % 500}.py": {"size": n, "mtime_ns": n, "sha256": "0" * 64,
                                                             "at": "2026-01-01T00:00:00Z"}}}
            observation = ObservationEvent(session_id=session_id, action_id=action.id, tool="read",
                                           content=f"     1\tline {n} of the file\n" * 8, is_error=False,
                                           metadata={"state": changes}, duration_ms=1.0)
            batch = [reply, action, observation]
        for event in batch[: events - made]:
            log.append(event, sync=isinstance(event, ActionEvent))  # as dispatch does: a call's action is synced
            made += 1


def load(events: int, old: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        started = time.perf_counter()
        _write_session(home, "big", events)
        log = home / "sessions" / "big" / "events.jsonl"
        size = log.stat().st_size
        print(f"load: a session of {events:,} events, {size / 2**20:.1f} MB of log (written in "
              f"{time.perf_counter() - started:.0f} s)")
        result = _child(_LOAD_CHILD, str(home / "sessions" / "big"), "old" if old else "new")
        print(f"  {'old' if old else 'new'}: peak {result['peak'] / 2**20:7.1f} MB above the baseline = "
              f"{result['peak'] / events:7.0f} bytes per event = {result['peak'] / size:5.2f} x the log's size "
              f"(state: {result['reads']} reads, {result['messages']} messages)")


def listing(sessions: int, per: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        _write_session(home, "s0000", per)
        template = home / "sessions" / "s0000"
        for i in range(1, sessions):
            copy = home / "sessions" / f"s{i:04d}"
            shutil.copytree(template, copy)
            state = json.loads((copy / "state.json").read_text())
            state["id"] = copy.name
            (copy / "state.json").write_text(json.dumps(state))
        env = {**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": ""}
        times = []
        for _ in range(3):
            started = time.perf_counter()
            out = subprocess.run([PYTHON, "-m", "abhed", "sessions", "list", "--all", "--json"], env=env,
                                 capture_output=True, text=True, check=True)
            times.append(time.perf_counter() - started)
        rows = json.loads(out.stdout)
        assert len(rows) == sessions and rows[0]["events"] == per, (len(rows), rows[0])
        started = time.perf_counter()
        subprocess.run(["ls", "-l", *[str(p) for p in (home / "sessions").iterdir()]], capture_output=True, check=True)
        ls = time.perf_counter() - started
        print(f"list: {sessions:,} sessions of {per:,} events; runs (s): " + ", ".join(f"{t:.2f}" for t in times))
        best = min(times)
        print(f"  abhed sessions list: {best:.2f} s = {best / sessions * 1000:.2f} ms per session "
              f"(first run {times[0]:.2f} s); ls -l of every session: {ls:.2f} s; ratio {best / ls:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", nargs="?", default="all", choices=["arguments", "load", "list", "all"])
    parser.add_argument("--mb", default="4,30")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--per", type=int, default=1000)
    parser.add_argument("--old", action="store_true", help="the load path before issue 33 (EventLog.load whole)")
    args = parser.parse_args()
    print("load average:", os.getloadavg())
    if args.what in ("arguments", "all"):
        arguments([float(x) for x in args.mb.split(",")])
    if args.what in ("load", "all"):
        load(args.events, args.old)
    if args.what in ("list", "all"):
        listing(args.sessions, args.per)


if __name__ == "__main__":
    main()
