"""What allow_hosts costs, side by side with the host network shared (allow_network), in one run.

    .venv/bin/python benchmarks/egress_bench.py [--rounds 5] [--mib 64]

A host server on 127.0.0.1 serves a body of --mib MiB; inside the sandbox curl fetches it:

- start:  a sandbox that runs `true`: with allow_hosts (the forked child enters the namespace and
          makes the proxy's socket, a thread starts) against without it;
- fetch:  one sandboxed `curl` of the body through the proxy (CONNECT-free: an http:// URL, the
          absolute-URI path) against the same curl straight over the shared host network;
- tunnel: the same through `curl -p` (CONNECT), the path HTTPS takes.

Prints medians and the ratios (proxy / direct). Timing lives here only; tests never assert it.
"""

from __future__ import annotations

import argparse
import http.server
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sandbox  # noqa: E402


def serve(body: bytes) -> int:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def timed(config: sandbox.SandboxConfig, workspace: Path, command: str, rounds: int) -> float:
    times = []
    with sandbox.Sandbox(config, workspace) as box:
        for _ in range(rounds):
            started = time.perf_counter()
            result = box.run(command, cwd=workspace, timeout_s=300)
            times.append(time.perf_counter() - started)
            if result.exit_code != 0:
                raise SystemExit(f"{command!r} failed ({result.exit_code}): {result.output[-500:]}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    port = serve(b"x" * (args.mib * 1024 * 1024))
    proxy = sandbox.SandboxConfig(allow_hosts=(f"127.0.0.1:{port}",))
    direct = sandbox.SandboxConfig(allow_network=True)
    url = f"http://127.0.0.1:{port}/body"
    fetch = f"curl -sS --fail -o /dev/null {url}"
    rows = [("start (true)", "true", "true"),
            (f"fetch {args.mib} MiB", fetch, fetch),
            (f"tunnel {args.mib} MiB", f"curl -sS --fail -p -o /dev/null {url}", fetch)]
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        print(f"{'':<18} {'allow_hosts':>12} {'allow_network':>14} {'ratio':>7}")
        for label, with_proxy, without in rows:
            a = timed(proxy, workspace, with_proxy, args.rounds)
            b = timed(direct, workspace, without, args.rounds)
            print(f"{label:<18} {a * 1000:>10.1f}ms {b * 1000:>12.1f}ms {a / b:>7.2f}")


if __name__ == "__main__":
    main()
