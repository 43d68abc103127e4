"""What deciding one bash line costs as the line grows to the argument limit (64 KiB), per shape.

    .venv/bin/python benchmarks/approval_scale_bench.py [--sizes 1,4,16,64] [--families wrappers,pipeline]

Issue 31 item 6: a 5 KB `nice nice ... ls` once took 6.7 s and 812 MB, a 60 KB one 24 GB. For
each family of shapes and each size, a fresh child process warms the check up, then decides the
line once under `Policy.check` (mode ask, an allow and a deny rule) and reports:

- wall and CPU time (this thread's: the machine is shared, and CPU time is what load does not
  inflate) and CPU microseconds per KiB, whose flatness across sizes is the linearity;
- peak memory: Python's allocations (tracemalloc, a second run), the process's maximum resident
  set growth (ru_maxrss, which sees tree-sitter's C allocations too), and for a line over 1 KiB,
  read in a bounded child (shellparse.ISOLATE_BYTES), the child's peak over the parent's; CPU
  time includes the child's;
- side by side, `bash -n` on the same line: bash's own parser, the native program's floor;
- the decision, and why.

Goal: every line up to 64 KiB decided within 50 ms of CPU and 50 MB. Prints the load (`uptime`)
first: wall times are only comparable at equal load. Timing lives here only; tests never assert it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KIB = 1024


def _fill(unit: str, size: int, head: str = "", tail: str = "") -> str:
    return head + unit * max(0, (size - len(head) - len(tail)) // len(unit)) + tail


FAMILIES = {
    "wrappers": lambda n: _fill("nice ", n, tail="ls"),  # the chain: each suffix a command
    "wrappers-args": lambda n: _fill("timeout 5 ", n, tail="ls"),  # wrappers with operands
    "wrappers-unknown": lambda n: _fill("sudo -Q ", n, tail="ls"),  # an option no table knows: the generic reading
    "pipeline": lambda n: _fill("ls | ", n, tail="ls"),
    "pipeline-open": lambda n: _fill("ls | ", n),  # ends in `|`: the grammar's error recovery
    "semicolons": lambda n: _fill("ls; ", n, tail="ls"),
    "nesting": lambda n: "echo " + "$(" * (n // 4) + "x" + ")" * (n // 4),
    "subshells": lambda n: "(" * (n // 2) + "ls" + ")" * (n // 2),
    "quotes": lambda n: _fill('"${x:-', n, head="echo "),  # the second reader's nesting
    "redirects": lambda n: _fill("> f ", n, head="ls "),
    "long-word": lambda n: _fill("x", n, head="ls "),
    "arguments": lambda n: _fill("a ", n, head="ls "),
    "find-exec": lambda n: _fill("-exec ls ; ", n, head="find . "),
    "settings": lambda n: _fill("A=1 ", n, head="env ", tail="ls"),
    "heredoc": lambda n: _fill("line of text $HOME\n", n, head="cat <<EOF > out\n", tail="EOF"),
}

CHILD = r"""
import json, resource, sys, time, tracemalloc
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, sys.argv[1])
from abhed.gate.approval import Policy
line = sys.stdin.read()
policy = Policy.create("ask", ["bash(ls:*)"], ["bash(rm:*)"], Path("/nonexistent"))
for warm in ("ls -l | wc", "timeout 5 nice rm -rf x; find . -exec rm {} +; git -C . push; sudo -Q ls", "x=$(ls) && echo ${x:-a}"):
    policy.check("bash", SimpleNamespace(command=warm))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
wall, cpu = time.perf_counter(), time.thread_time()
verdict = policy.check("bash", SimpleNamespace(command=line))
wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
after = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu += (after.ru_utime + after.ru_stime) - (kids.ru_utime + kids.ru_stime)  # a line over 1 KiB is read in a child
# the child's peak resident set over the parent's (it starts as a copy of the parent)
child = max(0, after.ru_maxrss - resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) if after.ru_maxrss else 0
tracemalloc.start()
policy.check("bash", SimpleNamespace(command=line))
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"wall": wall, "cpu": cpu, "rss_kib": rss, "child_kib": child, "peak": peak, "decision": verdict.decision,
                  "why": verdict.reason}))
"""


def _measure(line: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], input=line, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout)


def _bash_n(line: str) -> float:
    started = time.perf_counter()
    subprocess.run(["bash", "-n"], input=line, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,4,16,64", help="KiB, comma-separated (64 is the argument limit)")
    parser.add_argument("--families", default=",".join(FAMILIES))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on {os.cpu_count()} CPUs "
          "(wall times are only comparable at equal load; CPU time is this thread's)")
    print(f"{'family':17s} {'KiB':>4s} {'wall ms':>8s} {'cpu ms':>7s} {'cpu us/KiB':>10s} {'py MB':>6s} {'rss MB':>6s} "
          f"{'child MB':>8s} {'bash -n ms':>10s} {'cpu/bash':>8s}  decision")
    worst_cpu = worst_mem = 0.0
    for family in args.families.split(","):
        for kib in sizes:
            line = FAMILIES[family](kib * KIB)[: kib * KIB]
            got = _measure(line)
            if "error" in got:
                print(f"{family:17s} {kib:4d}  ERROR {got['error']}")
                worst_cpu = float("inf")
                continue
            native = _bash_n(line)
            worst_cpu = max(worst_cpu, got["cpu"])
            worst_mem = max(worst_mem, got["peak"] / 1e6, got["rss_kib"] / 1024, got["child_kib"] / 1024)
            print(f"{family:17s} {kib:4d} {got['wall'] * 1e3:8.1f} {got['cpu'] * 1e3:7.1f} "
                  f"{got['cpu'] * 1e6 / kib:10.0f} {got['peak'] / 1e6:6.1f} {got['rss_kib'] / 1024:6.1f} "
                  f"{got['child_kib'] / 1024:8.1f} "
                  f"{native * 1e3:10.1f} {got['cpu'] / native:8.2f}  {got['decision']}: {got['why'][:70]}")
    print(f"worst: {worst_cpu * 1e3:.1f} ms CPU, {worst_mem:.1f} MB (goal: 50 ms, 50 MB at 64 KiB)")


if __name__ == "__main__":
    main()
