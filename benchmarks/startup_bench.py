"""How long `abhed run` takes to give up on a model host that drops packets, side by side with
the bound it had before (issue 17 item 12: a wrong endpoint at start-up fails in about a second).

    .venv/bin/python benchmarks/startup_bench.py

The host is a real listening socket whose accept queue is full, so the kernel drops the SYNs of
every further connect, as a host that is down or a firewall does. Times the whole command (a fresh
process: imports, config, the probe) with:

- startup:  model.startup_connect_s at its default (2 s), what start-up now uses;
- before:   model.startup_connect_s = 10, the connect bound every request had (and start-up with it);
- refused:  a port nothing listens on (connection refused): the floor, no waiting at all.

Prints seconds and the ratios. Timing lives here only; tests never assert it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(endpoint: str, home: Path, config: Path) -> tuple[float, str]:
    env = {**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": str(config)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "abhed", "run", "hi", "--endpoint", endpoint, "--workspace",
                           str(home)], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    return time.monotonic() - started, proc.stderr.strip().splitlines()[-1][:120]


def main() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    filler = socket.create_connection(server.getsockname(), timeout=5)
    silent = f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    closed.close()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        default, before = home / "default.toml", home / "before.toml"
        default.write_text("")
        before.write_text("[model]\nstartup_connect_s = 10\n")
        rows = {"startup": timed(silent, home, default), "before": timed(silent, home, before),
                "refused": timed(refused, home, default)}
    filler.close()
    server.close()
    for name, (seconds, said) in rows.items():
        print(f"{name:<8} {seconds:6.2f} s  {said}")
    print(f"before/startup {rows['before'][0] / rows['startup'][0]:.1f}x; startup/refused "
          f"{rows['startup'][0] / rows['refused'][0]:.1f}x")


if __name__ == "__main__":
    main()
