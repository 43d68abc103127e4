"""Abhed's MCP client beside the official `mcp` SDK, in one run: what each adds to the binary, what
each costs to import, and the time of a tools/call round trip to the same real server.

    scripts/setup-mcp-servers && .venv/bin/python benchmarks/mcp_bench.py [--calls 200]

The SDK is the one mcp-server-time itself depends on, in .mcp-servers/venv; the server is
mcp-server-time, run directly (no sandbox) by both clients, so only the clients differ.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".mcp-servers" / "venv"
SERVER = [str(VENV / "bin" / "mcp-server-time"), "--local-timezone", "UTC"]
ARGS = {"timezone": "Europe/Paris"}

SDK_CALLS = r"""
import anyio, sys, time
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
async def main(n, command):
    async with stdio_client(StdioServerParameters(command=command[0], args=command[1:])) as (r, w):
        async with ClientSession(r, w) as session:
            await session.initialize()
            await session.call_tool("get_current_time", {"timezone": "Europe/Paris"})
            start = time.perf_counter()
            for _ in range(n):
                await session.call_tool("get_current_time", {"timezone": "Europe/Paris"})
            print((time.perf_counter() - start) / n)
anyio.run(main, int(sys.argv[1]), sys.argv[2:])
"""


def ours_per_call(calls: int) -> float:
    from abhed.mcp.client import StdioConnection
    proc = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    connection = StdioConnection("time", os.dup(proc.stdin.fileno()), os.dup(proc.stdout.fileno()),
                                 stop=proc.kill, exit_status=proc.poll, stderr_tail=lambda: "", timeout_s=30,
                                 max_message_bytes=1 << 24)
    proc.stdin.close()
    proc.stdout.close()
    try:
        connection.initialize()
        connection.call_tool("get_current_time", ARGS)
        start = time.perf_counter()
        for _ in range(calls):
            connection.call_tool("get_current_time", ARGS)
        return (time.perf_counter() - start) / calls
    finally:
        connection.close()
        proc.wait()


def sdk_per_call(calls: int) -> float:
    out = subprocess.run([str(VENV / "bin" / "python"), "-c", SDK_CALLS, str(calls), *SERVER], capture_output=True,
                         text=True, check=True)
    return float(out.stdout.strip())


def import_seconds(python: str, statement: str, runs: int = 5) -> float:
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    return statistics.median(float(subprocess.run([python, "-c", code], capture_output=True, text=True,
                                                  check=True).stdout) for _ in range(runs))


def sdk_added_bytes() -> tuple[int, int]:
    """Bytes of source the SDK's dependency closure adds beyond what Abhed already ships, and how many packages."""
    code = ("import importlib.metadata as m, os, json\n"
            "print(json.dumps([(d.metadata['Name'], sum(os.path.getsize(d.locate_file(f)) for f in (d.files or []) "
            "if os.path.isfile(d.locate_file(f)) and not str(f).endswith('.pyc'))) for d in m.distributions()]))")
    import json
    sizes = json.loads(subprocess.run([str(VENV / "bin" / "python"), "-c", code], capture_output=True, text=True,
                                      check=True).stdout)
    have = {d.metadata["Name"].lower().replace("_", "-") for d in importlib.metadata.distributions()}
    server_only = {"mcp-server-time", "mcp-server-git", "tzdata", "tzlocal", "gitpython", "gitdb", "smmap", "pip",
                   "setuptools"}
    added = [(n, b) for n, b in sizes if n.lower().replace("_", "-") not in have | server_only]
    return sum(b for _, b in added), len(added)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    calls = parser.parse_args().calls
    if not (VENV / "bin" / "mcp-server-time").exists():
        sys.exit("run scripts/setup-mcp-servers first")
    ours_size = sum(p.stat().st_size for p in (REPO / "abhed" / "mcp").glob("*.py"))
    sdk_size, packages = sdk_added_bytes()
    print(f"added to the binary (Python source): ours {ours_size / 1e3:.0f} kB (abhed/mcp, no new package); "
          f"SDK {sdk_size / 1e6:.1f} MB in {packages} packages: ratio {sdk_size / ours_size:.0f}x")
    ours_import = import_seconds(sys.executable, "import abhed.mcp.gateway")
    sdk_import = import_seconds(str(VENV / "bin" / "python"),
                                "import mcp.client.session, mcp.client.stdio, mcp.client.streamable_http")
    print(f"import: ours {ours_import * 1e3:.0f} ms (abhed.mcp.gateway, Abhed's own modules included); SDK client "
          f"{sdk_import * 1e3:.0f} ms: ratio {sdk_import / ours_import:.2f}x")
    ours = statistics.median(ours_per_call(calls) for _ in range(3))
    sdk = statistics.median(sdk_per_call(calls) for _ in range(3))
    print(f"tools/call round trip to mcp-server-time ({calls} calls, median of 3 runs): ours {ours * 1e3:.2f} ms, "
          f"SDK {sdk * 1e3:.2f} ms: ratio SDK/ours {sdk / ours:.2f}")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
