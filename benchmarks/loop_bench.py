"""Loop overhead per turn, the model's own time excluded.

    .venv/bin/python benchmarks/loop_bench.py [--turns 60] [--file-kb 4] [--home DIR]

Drives the real agent (loop, adapter, dispatch, tools, event log with its fsyncs, state saves)
against the in-process replay server, which answers at once. One turn is one model reply with
one `read` call. For each turn:

    overhead = (time from one request to the next) - (time the server spent answering it)

so it covers building and sending the request, reading and joining the stream, recording the
reply, running the call through dispatch (approval, tool, two events, state save) and feeding the
result back. Two runs: a 4 KB file read each turn, and a 16 KB one, so the history (sent whole
with every request) grows to about 0.4 MB and 1.4 MB. Also printed: the share spent in dispatch.call (the tool and
its persistence). Goal: median under 10 ms. Timing lives here only; tests never assert durations.
Put --home on the disk Abhed will use: fsync cost depends on it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abhed.session import config  # noqa: E402
from abhed.agent import dispatch
from abhed.agent.loop import Agent, Budget, Limits  # noqa: E402
from abhed.gate.approval import Gate, Policy  # noqa: E402
from abhed.session.config import AgentConfig  # noqa: E402
from abhed.model.connect import connect  # noqa: E402
from abhed.model.replay import ReplayServer, Turn  # noqa: E402
from abhed.files.paths import PathPolicy  # noqa: E402
from abhed.session.store import SessionStore  # noqa: E402
from abhed.tools.base import ToolContext  # noqa: E402

GOAL_MS = 10.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def scenario(home: Path, workspace: Path, turns: int, file_kb: int, window: int) -> dict[str, list[float]]:
    target = workspace / f"module_{file_kb}k.py"
    target.write_text("".join(f"def f{i}(x):\n    return x + {i}  # {'.' * 20}\n" for i in range(file_kb * 20)))
    script = [Turn(text=f"Step {n}.", calls=[("read", {"path": str(target)})]) for n in range(turns)]
    script.append(Turn(text="Done."))
    with ReplayServer(script, max_model_len=window) as server:
        settings = config.load({}, env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
        model = connect(server.url, profile="generic", backoff_s=0)
        session = SessionStore(home).create(workspace)
        ctx = ToolContext(session, settings, PathPolicy.create(workspace))
        agent = Agent(ctx, model, Gate(Policy.create("auto", [], [], workspace)), Budget(Limits()),
                      config=AgentConfig(compact_at=0.99, max_turns=None, max_seconds=None))
        starts: list[float] = []
        in_dispatch: list[float] = []
        chat, call = model.client.chat, dispatch.call

        def timed_chat(*args, **kwargs):  # type: ignore[no-untyped-def]
            starts.append(time.perf_counter())
            return chat(*args, **kwargs)

        def timed_call(*args, **kwargs):  # type: ignore[no-untyped-def]
            began = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                in_dispatch.append(time.perf_counter() - began)

        syncs: list[float] = []
        fsync = os.fsync

        def timed_fsync(fd: int) -> None:
            began = time.perf_counter()
            try:
                fsync(fd)
            finally:
                syncs.append(time.perf_counter() - began)

        model.client.chat = timed_chat  # type: ignore[method-assign]
        dispatch.call = timed_call  # type: ignore[assignment]
        os.fsync = timed_fsync
        try:
            outcome = agent.run("Read the module again and again.")
        finally:
            dispatch.call = call  # type: ignore[assignment]
            os.fsync = fsync
            model.client.close()
            ctx.close()
        assert outcome.status == "done", outcome
        served = server.handler_seconds
        request_kb = len(str(server.requests[-1])) / 1024
    turn = [(starts[i + 1] - starts[i] - served[i]) * 1000 for i in range(len(starts) - 1)]
    return {"overhead": turn, "dispatch": [d * 1000 for d in in_dispatch], "model": [s * 1000 for s in served],
            "request_kb": [request_kb], "fsync": [s * 1000 for s in syncs], "turns": [len(starts)]}


def filesystem(path: Path) -> str:
    out = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True).stdout.split("\n")
    return out[1].split()[1] if len(out) > 1 and out[1].split() else "?"


def report(name: str, figures: dict[str, list[float]]) -> None:
    overhead, inside = figures["overhead"], figures["dispatch"]
    median = statistics.median(overhead)
    print(f"{name}: {len(overhead)} turns, the last request {figures['request_kb'][0]:.0f} KB")
    print(f"  loop overhead per turn   median {median:6.2f} ms   p90 {percentile(overhead, 0.9):6.2f} ms   "
          f"({'under' if median < GOAL_MS else 'OVER'} the {GOAL_MS:g} ms goal)")
    print(f"  of which dispatch.call   median {statistics.median(inside):6.2f} ms   "
          "(approval, the read, its two events)")
    print(f"  rest of the loop         median {median - statistics.median(inside):6.2f} ms   "
          "(request, stream, reply event, bookkeeping)")
    print(f"  model (replay server)    median {statistics.median(figures['model']):6.2f} ms   (excluded)")
    syncs = figures["fsync"]
    print(f"  fsync                    {len(syncs) / figures['turns'][0]:.1f} a turn, median {statistics.median(syncs):.2f} ms "
          f"each (the event log's durability; included above)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--file-kb", type=int, default=4, help="size of the file read each turn (short run)")
    parser.add_argument("--home", type=Path, help="ABHED_HOME for the run (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="abhed-loop-bench-", dir=args.home) as tmp:
        root = Path(tmp)
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, event log on {filesystem(root)}")
        for name, turns, kb, window in ((f"{args.file_kb} KB read a turn", args.turns, args.file_kb, 1_000_000),
                                        ("16 KB read a turn", args.turns, 16, 10_000_000)):
            workspace = root / f"ws-{kb}"
            workspace.mkdir()
            report(name, scenario(root / f"home-{kb}", workspace.resolve(), turns, kb, window))


if __name__ == "__main__":
    main()
