"""Many users, one cluster: concurrent `abhed run` sessions against several replicas, beside a bare HTTP client.

    flock /work/notes/bench.lock .venv/bin/python benchmarks/endpoints_bench.py [--sessions 32] [--endpoints 3]
                                                                               [--turns 6] [--file-kb 8]

Starts --endpoints replay servers (each a process of its own on 127.0.0.1, speaking vLLM's wire format,
serving /metrics), then two phases against fresh servers:

1. Abhed: --sessions `abhed run` processes at once (real processes, model.endpoints listing every server,
   defaults otherwise: checkpoints, the event log and its fsyncs). Each session's model replies --turns
   times with one `read` of a small file and then answers. The servers record, for every request, which
   session and turn it is, when it arrived and when its reply ended, and its body.
2. Bare: as many processes of a plain httpx client, each sending its session's recorded bodies, the same
   bytes, one after another, reading each streamed reply to its end (what any client must do).

Reported, each side measured the same way, beside the load average:
- CPU per turn: user+system time of each process and its children (wait4), summed, divided by the requests;
- added latency per request: from the end of one reply to the arrival of the next request of the same
  session, seen by the server (so the replies' own time is outside it). For Abhed that is reading the
  stream's end, recording the reply, running the call (dispatch, the tool, events, a state save) and
  sending the next request; for the bare client only the next send. p50 and p99, and their ratios.
- how the sessions spread over the servers (least-loaded selection), and that every session kept its server.

Ratios are measured in one run on the same machine, so a busy machine weighs on both sides alike.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- the server process ------------------------------------------------------------------------------

def serve(turns: int, file_path_of: str) -> None:
    """A replay server whose script depends only on the request (any server can answer any turn of any
    session: failover-proof); prints its URL, records each request, dumps the records at stdin's end."""
    from abhed.model import replay
    from abhed.model.replay import ReplayServer, Turn

    records: list[dict[str, Any]] = []
    lock = threading.Lock()

    def session_and_turn(body: dict[str, Any]) -> tuple[str, int]:
        messages = body.get("messages", [])
        prompt = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        key = str(prompt).split()[-1] if prompt else "?"
        return key, sum(1 for m in messages if m.get("role") == "assistant")

    def script(body: dict[str, Any]) -> Turn:
        key, turn = session_and_turn(body)
        if turn >= turns:
            return Turn(text=f"Read it {turns} times.")
        return Turn(text=f"Step {turn}.", calls=[("read", {"path": file_path_of.replace("KEY", key)})])

    original = replay._Handler.do_POST

    def timed(handler: Any) -> None:
        arrived = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
        length = int(handler.headers.get("Content-Length") or 0)
        raw, real = handler.rfile.read(length), handler.rfile
        handler.rfile = _Replayed(raw)  # the handler reads the body again; the connection's next request from `real`
        try:
            original(handler)
        finally:
            handler.rfile = real
        key, turn = session_and_turn(json.loads(raw))
        with lock:
            records.append({"session": key, "turn": turn, "arrived": arrived, "ended": time.monotonic(),
                            "body": base64.b64encode(raw).decode()})

    replay._Handler.do_POST = timed  # type: ignore[method-assign]
    # As vLLM's server (uvicorn) does: without it the last small write of a reply waits for the client's
    # delayed ACK (40 ms), which would swamp what is measured here on both sides.
    replay._Handler.disable_nagle_algorithm = True
    with ReplayServer(script, max_model_len=1_000_000, chunk_chars=64) as server:
        print(server.url, flush=True)
        sys.stdin.read()
    json.dump(records, sys.stdout)


class _Replayed:
    """The request body again, for the handler that reads it after the timing wrapper did."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, n: int = -1) -> bytes:
        out, self.data = (self.data, b"") if n < 0 else (self.data[:n], self.data[n:])
        return out


class Servers:
    def __init__(self, count: int, turns: int, file_pattern: str) -> None:
        self.procs = [subprocess.Popen([sys.executable, __file__, "serve", "--turns", str(turns),
                                        "--file-pattern", file_pattern], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, env=_env()) for _ in range(count)]
        self.urls = [p.stdout.readline().strip() for p in self.procs]  # type: ignore[union-attr]

    def stop(self) -> list[list[dict[str, Any]]]:
        out = []
        for proc in self.procs:
            data, _ = proc.communicate("", timeout=120)
            out.append(json.loads(data or "[]"))
        return out


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


# -- the bare client ---------------------------------------------------------------------------------

def bare(url_and_bodies: str) -> None:
    """Send the bodies in the file, one after another, each reply read to its end."""
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    import httpx
    job = json.loads(Path(url_and_bodies).read_text())
    with httpx.Client(trust_env=False, timeout=300) as client:
        for url, body in job:
            with client.stream("POST", url + "/chat/completions", content=base64.b64decode(body),
                               headers={"Content-Type": "application/json"}) as response:
                for _ in response.iter_lines():
                    pass


# -- the phases --------------------------------------------------------------------------------------

def wait_all(procs: list[subprocess.Popen[bytes]]) -> tuple[float, list[int]]:
    """CPU seconds of the processes and their children, and their exit statuses."""
    cpu, codes = 0.0, []
    for proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu += usage.ru_utime + usage.ru_stime
        codes.append(proc.returncode)
    return cpu, codes


def gaps(records: list[dict[str, Any]]) -> tuple[list[float], dict[str, list[dict[str, Any]]]]:
    """Seconds from one reply's end to the session's next request, and each session's requests in order."""
    by_session: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_session.setdefault(record["session"], []).append(record)
    out = []
    for requests in by_session.values():
        requests.sort(key=lambda r: r["arrived"])
        out += [b["arrived"] - a["ended"] for a, b in zip(requests, requests[1:])]
    return out, by_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--endpoints", type=int, default=3)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--file-kb", type=int, default=8)
    opts = parser.parse_args()
    top = Path(tempfile.mkdtemp(prefix="abhed-endpoints-bench-"))
    try:
        run(top, opts)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def run(top: Path, opts: argparse.Namespace) -> None:
    workspaces = []
    for n in range(opts.sessions):
        ws = top / f"ws{n}"
        ws.mkdir()
        (ws / "notes.txt").write_text("".join(f"line {i}: {'x' * 60}\n" for i in range(opts.file_kb * 16)))
        workspaces.append(ws)
    pattern = str(top / "wsKEY" / "notes.txt")
    load_before = os.getloadavg()

    servers = Servers(opts.endpoints, opts.turns, pattern)
    env = {**_env(), "ABHED_HOME": str(top / "home"), "ABHED_CONFIG": "", "ABHED_ENDPOINTS": ",".join(servers.urls)}
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "abhed", "run", f"Read notes.txt; session {n}", "--workspace",
                               str(ws)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for n, ws in enumerate(workspaces)]
    errors = [p.stderr for p in procs]
    abhed_cpu, codes = wait_all(procs)
    wall = time.monotonic() - started
    failed = [(n, (e.read() if e else b"").decode()[-400:]) for n, (e, c) in enumerate(zip(errors, codes)) if c != 0]
    per_server = servers.stop()
    records = [r for server in per_server for r in server]
    abhed_gaps, sessions = gaps(records)
    load_mid = os.getloadavg()

    # the bare client: the same bodies to the same server each went to, against fresh servers
    servers = Servers(opts.endpoints, opts.turns, pattern)
    where = {r["body"]: i for i, server in enumerate(per_server) for r in server}
    jobs = []
    for key, requests in sessions.items():
        job = top / f"bare{key}.json"
        job.write_text(json.dumps([[servers.urls[where[r["body"]]], r["body"]] for r in requests]))
        jobs.append(job)
    bare_procs = [subprocess.Popen([sys.executable, __file__, "bare", str(job)], env=_env()) for job in jobs]
    bare_cpu, bare_codes = wait_all(bare_procs)
    bare_records = [r for server in servers.stop() for r in server]
    bare_gaps, _ = gaps(bare_records)
    load_after = os.getloadavg()

    turns = len(records)
    spread = [len({r["session"] for r in server}) for server in per_server]
    moved = sum(1 for key in sessions if len({i for i, server in enumerate(per_server)
                                               for r in server if r["session"] == key}) > 1)
    print(f"endpoints_bench: {opts.sessions} concurrent `abhed run` sessions, {opts.endpoints} replay servers, "
          f"{opts.turns} read calls each ({opts.file_kb} KB file), {turns} requests; wall {wall:.1f} s")
    print(f"load average (1 min) before {load_before[0]:.2f}, after Abhed {load_mid[0]:.2f}, after bare "
          f"{load_after[0]:.2f}; cores {os.cpu_count()}")
    print(f"sessions per server: {spread}; sessions that changed server: {moved}; failed runs: {len(failed)}")
    for n, tail in failed[:3]:
        print(f"  session {n} failed: {tail}")
    if bare_codes.count(0) != len(bare_codes):
        print(f"  bare clients failed: {len(bare_codes) - bare_codes.count(0)}")
    rows = [("CPU per turn", abhed_cpu / max(turns, 1), bare_cpu / max(len(bare_records), 1)),
            ("CPU per session (start included)", abhed_cpu / max(len(procs), 1), bare_cpu / max(len(bare_procs), 1)),
            ("added latency per request, p50", percentile(abhed_gaps, 0.5), percentile(bare_gaps, 0.5)),
            ("added latency per request, p99", percentile(abhed_gaps, 0.99), percentile(bare_gaps, 0.99))]
    print("| measure | Abhed | bare httpx | ratio |")
    print("|---|---|---|---|")
    for label, mine, theirs in rows:
        print(f"| {label} | {mine * 1000:.1f} ms | {theirs * 1000:.1f} ms | {mine / theirs:.1f}x |"
              if theirs > 0 else f"| {label} | {mine * 1000:.1f} ms | {theirs * 1000:.1f} ms | - |")
    if abhed_gaps:
        print(f"Abhed's added latency: mean {statistics.mean(abhed_gaps) * 1000:.1f} ms over {len(abhed_gaps)} "
              f"requests (the first request of each session, after its start, is not counted)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        parsed = argparse.ArgumentParser()
        parsed.add_argument("serve")
        parsed.add_argument("--turns", type=int)
        parsed.add_argument("--file-pattern")
        args = parsed.parse_args()
        serve(args.turns, args.file_pattern)
    elif len(sys.argv) > 1 and sys.argv[1] == "bare":
        bare(sys.argv[2])
    else:
        main()
