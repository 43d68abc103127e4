"""What the tamper-evident record costs (issue 30): an event's append with events.head rewritten after
it, and `sessions verify` of a whole session, side by side with what they cannot go below.

    .venv/bin/python benchmarks/record_bench.py [--events 2000] [--dir DIR]

Per event appended (a 600-byte MessageEvent, in a fresh log in DIR, default a temporary directory):

- append:    EventLog.append as Abhed does it: flock, link to the last line, write, rewrite events.head;
- no head:   the same with events.head not rewritten (as before issue 30 for an unsynced event);
- write:     os.write of the same line to an O_APPEND file: the floor of any log.

Each for sync=False (the agent loop's unsynced events) and sync=True (fsync'd: most events). Then
`verify` of the log the run made, per event and per MB, against reading and sha256-hashing every line
(the floor of any check of the chain). Prints medians of 5 rounds and the ratios. Timing lives here
only; tests never assert it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from hashlib import sha256
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abhed.session import events  # noqa: E402
from abhed.session.audit import verify_session  # noqa: E402
from abhed.session.events import EventLog, MessageEvent, to_json  # noqa: E402
from abhed.session.store import SessionStore  # noqa: E402

ROUNDS = 5


def _event(i: int) -> MessageEvent:
    return MessageEvent(session_id="bench", role="assistant", content=f"reply {i} " + "x" * 500)


def _appends(directory: Path, count: int, sync: bool, head: bool) -> float:
    """Seconds per append of `count` events to a fresh log."""
    log = EventLog(directory / "events.jsonl")
    log.path.unlink(missing_ok=True)
    events._TAILS.clear()
    anchor = EventLog._anchor
    if not head:
        EventLog._anchor = lambda self, seq, digest: None  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        for i in range(count):
            log.append(_event(i), sync=sync)
        return (time.perf_counter() - started) / count
    finally:
        EventLog._anchor = anchor  # type: ignore[method-assign]


def _writes(directory: Path, count: int, sync: bool) -> float:
    path = directory / "plain.jsonl"
    path.unlink(missing_ok=True)
    line = (to_json(_event(0)) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        started = time.perf_counter()
        for _ in range(count):
            os.write(fd, line)
            if sync:
                os.fsync(fd)
        return (time.perf_counter() - started) / count
    finally:
        os.close(fd)


def _hash_floor(path: Path) -> float:
    started = time.perf_counter()
    for line in path.read_bytes().split(b"\n"):
        sha256(line).hexdigest()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--dir", type=Path, help="where the logs are written (default: a temporary directory)")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; {args.events} events "
          "a round, medians of 5 rounds")
    with tempfile.TemporaryDirectory(dir=args.dir) as temp:
        directory = Path(temp)
        for sync in (False, True):
            count = args.events if not sync else max(50, args.events // 10)
            got = {name: [] for name in ("append", "no head", "write")}
            for _ in range(ROUNDS):  # interleaved, so a change of load hits each alike
                got["append"].append(_appends(directory, count, sync, head=True))
                got["no head"].append(_appends(directory, count, sync, head=False))
                got["write"].append(_writes(directory, count, sync))
            med = {name: statistics.median(values) * 1e6 for name, values in got.items()}
            print(f"sync={sync!s:<5} append {med['append']:7.1f} us  no head {med['no head']:7.1f} us  write "
                  f"{med['write']:7.1f} us  | append/no head {med['append'] / med['no head']:.2f}x  append/write "
                  f"{med['append'] / med['write']:.1f}x")
        store = SessionStore(directory / "home")
        session = store.create(directory, "bench")
        for i in range(args.events):
            session.record(_event(i), sync=False)
        session.log.sync()
        size = session.log.path.stat().st_size
        checks, floors = [], []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            verdict = verify_session(session.dir)
            checks.append(time.perf_counter() - started)
            floors.append(_hash_floor(session.log.path))
        assert verdict.status == "OK", verdict.problem
        check, floor = statistics.median(checks), statistics.median(floors)
        print(f"verify {args.events + 1} events ({size / 1e6:.2f} MB): {check * 1e3:.1f} ms ({check / size * 1e9:.1f} "
              f"ms/MB)  read+sha256 of every line {floor * 1e3:.1f} ms  | verify/floor {check / floor:.1f}x")


if __name__ == "__main__":
    main()
