"""What a snapshot or an undo was doing, kept in the checkpoint store while it runs (issue 33).

A kill -9 (or a power cut) can stop Abhed in the middle of a snapshot or of an undo's restore. The
files it wrote are whole (each is renamed into place), but an undo stopped half-way leaves the
workspace half restored, and a snapshot stopped half-way leaves a call with no checkpoint. So
each writes a small journal into the store (atomically, before it starts) and removes it when it
is done: a journal found later names what was interrupted.

A journal is only read, written and removed by the holder of the store's lock (checkpoint.Shadow.
locked), and a holder keeps the lock for the whole of the work the journal describes, its git
children included (they inherit the lock's descriptor). So a journal seen by the next holder is
provably one whose writer is gone: nothing can still be working on it.

For the kill -9 tests only: ABHED_TEST_PAUSE names a point (`snapshot`, or `undo:N`: after the
N-th restored path) where Abhed writes the file ABHED_TEST_PAUSE_MARKER and waits to be killed, so
that a test kills it at a known place. Unset (as always outside the tests) it does nothing.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from abhed.files.atomic import replace_file
from abhed.session import gitobjects

UNDO = "undo.journal"
SNAPSHOT = "snapshot.journal"


def write(store: Path, name: str, facts: dict[str, Any]) -> None:
    """Record `facts` as the journal `name` of the store (lock held), whole or not at all. An undo's is
    fsync'd (it guards the workspace's files); a snapshot's is not, as the store's refs are not
    (gitobjects.write_file): two per call, and a power cut loses the snapshot it names anyway."""
    data = json.dumps({**facts, "pid": os.getpid()}, sort_keys=True).encode()  # pragma: no mutate (key order: any)
    if name == UNDO:  # pragma: no mutate (equivalent short of a power cut: both write whole, 0600; only fsync differs)
        replace_file(store / name, data, mode=0o600)
    else:
        gitobjects.write_file(store / name, data)


def read(store: Path, name: str) -> dict[str, Any] | None:
    """The journal `name`, or None; one that is damaged (a disk error) reads as an empty record."""
    try:
        data = (store / name).read_bytes()
    except FileNotFoundError:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def clear(store: Path, name: str) -> None:
    (store / name).unlink(missing_ok=True)


def undo_notice(facts: dict[str, Any]) -> str:
    """What an interrupted undo was, and the two ways out."""
    session = facts.get("session", "?")
    return (f"An undo was interrupted: undo checkpoint {facts.get('number', '?')} of session {session}, taking the "
            f"workspace back to before checkpoint {facts.get('to', '?')}, started {facts.get('started', '?')} "
            f"(process {facts.get('pid', '?')}), never finished: Abhed was killed or the machine stopped while it "
            "restored files, so the workspace is part-way between the two. Finish it with `abhed undo --finish "
            f"{session}`, or put back the workspace as it was before it with `abhed undo --rollback {session}`.")


def snapshot_notice(facts: dict[str, Any]) -> str:
    """What a killed snapshot lost, said by the snapshot that retakes it."""
    what = f"the {facts.get('kind', '?')} snapshot of call {facts.get('call', '?')} ({facts.get('tool', '?')})"
    return (f"{what} of session {facts.get('session', '?')}, started {facts.get('started', '?')} by process "
            f"{facts.get('pid', '?')}, was interrupted (Abhed was killed) and never recorded: that call has no "
            "checkpoint of its own. This snapshot retakes the workspace whole, so later undos are not affected.")


def pause(point: str) -> None:
    """For the kill -9 tests (see the module docstring): wait here to be killed."""
    if os.environ.get("ABHED_TEST_PAUSE") != point:
        return
    Path(os.environ["ABHED_TEST_PAUSE_MARKER"]).write_text(str(os.getpid()))
    while True:  # pragma: no cover no mutate (killed here by the test; a mutant that returns races the kill)
        time.sleep(1)  # pragma: no mutate (any wait, even a busy one, waits for the kill)
