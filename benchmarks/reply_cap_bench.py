"""A huge model reply: what reading it costs the client, side by side with curl reading the same stream.

    .venv/bin/python benchmarks/reply_cap_bench.py [--mb 50] [--chunk-chars 1024]

The fake vLLM (model.replay, in a process of its own so that its memory is not counted) streams a
reply of `--mb` MB of text in `--chunk-chars` deltas, as a broken or hostile server could. Measured
under /usr/bin/time -v, each in its own process:

    client  ModelClient.chat (streamed, the agent's path), with model.max_reply_bytes at its default:
            before issue 33 the whole reply was read and returned; now reading stops at the cap
    curl    `curl -sN` posting the same request and throwing the stream away: the native floor of
            reading every byte (it keeps nothing)

Printed: wall seconds and peak RSS of each, the ratios client/curl, and what the client ended
with (the reply's size, or the error's first words). Note the load (printed from `uptime`).
Timing lives here only; tests never assert it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BODY = {"model": "replay/abhed-demo", "messages": [{"role": "user", "content": "hi"}], "stream": True}

SERVER = """
import sys, time
from abhed.model.replay import ReplayServer, Turn
turn = Turn(text="x" * int(sys.argv[1]))
with ReplayServer(lambda body: turn, chunk_chars=int(sys.argv[2]), max_model_len=None) as server:
    print(server.url, flush=True)
    time.sleep(3600)
"""

CLIENT = """
import sys
from abhed.model.client import ModelClient
from abhed.model.errors import ModelError
try:
    reply = ModelClient(sys.argv[1], attempts=1).chat({"model": "replay/abhed-demo", "messages": []})
    print(f"reply of {len(reply.text):,} characters")
except ModelError as exc:
    print("error: " + exc.message[:110] + "...")
"""


def measured(command: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in KiB and stdout of `command` run under /usr/bin/time -v."""
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True, check=False)
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if not wall or not rss:
        raise SystemExit(f"/usr/bin/time gave no figures for {command[:3]}: {done.stderr[-500:]}")
    hours, minutes, seconds = wall.groups()
    return int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds), int(rss.group(1)), done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=50)
    parser.add_argument("--chunk-chars", type=int, default=1024)
    args = parser.parse_args()
    size = int(args.mb * 1_000_000)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(size), str(args.chunk_chars)], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (uptime)")
        print(f"a reply of {size:,} characters in {args.chunk_chars}-character deltas from {url}")
        time.sleep(0.2)
        client = measured([sys.executable, "-c", CLIENT, url])
        curl = measured(["curl", "-sN", "-o", "/dev/null", "-H", "Content-Type: application/json",
                         "--data", json.dumps(BODY), url + "/chat/completions"])
    finally:
        server.kill()
        server.wait()
    print(f"{'':8}{'seconds':>10}{'peak RSS MiB':>15}")
    for name, (wall, rss, _) in (("client", client), ("curl", curl)):
        print(f"{name:8}{wall:10.2f}{rss / 1024:15.1f}")
    print(f"{'ratio':8}{client[0] / max(curl[0], 0.01):10.2f}{client[1] / max(curl[1], 1):15.2f}   (client / curl)")
    print(f"client ended with: {client[2]}")


if __name__ == "__main__":
    main()
