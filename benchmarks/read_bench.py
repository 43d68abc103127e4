#!/usr/bin/env python3
"""Benchmark the read tool on a 1 GB file against `head -n 2000` + `wc -l`, side by side.

    .venv/bin/python benchmarks/read_bench.py                # 1 GB log in a temporary directory
    .venv/bin/python benchmarks/read_bench.py --size-mb 256 --repeat 5
    .venv/bin/python benchmarks/read_bench.py --file /var/log/big.log

What is timed (best of --repeat, page cache warm after one untimed pass over the file):
  first read   read {"path": F} with an empty line-index cache: 2000 lines plus the "of N" total,
               which needs every newline of the file counted (the pass also builds the index).
  next read    the same call again: the index saved by the first read gives the total.
  deep read    read at offset N/2 with the index: a jump to the nearest mark.
  head + wc    `head -n 2000 F` and `wc -l F`, two processes, what a person would run for the
               same two facts; wc counts newlines with SIMD code.
  count only   abhed.files.lines.count_newlines over the file in 4 MB chunks, and bytes.count for
               contrast (the method it replaces for long lines).
Times are wall clock and CPU time of this process (children for head + wc): on a shared machine
read the CPU column and the ratios. The script never asserts times.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from abhed.files.lines import CHUNK, count_newlines  # noqa: E402

LINE = b"2026-12-03T09:13:33.123 INFO worker[1234]: processed request id=abcdef0123456789 status=200 in 12ms\n"


def make_file(path, size):
    block = LINE * (CHUNK // len(LINE))
    with open(path, "wb") as f:
        written = 0
        while written < size:
            f.write(block)
            written += len(block)


def timed(fn, repeat, children=False):
    """(best wall s, best CPU s, result) over repeat runs."""
    best_wall = best_cpu = None
    result = None
    for _ in range(repeat):
        who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
        r0, t0 = resource.getrusage(who), time.perf_counter()
        result = fn()
        wall, r1 = time.perf_counter() - t0, resource.getrusage(who)
        cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
        best_wall = wall if best_wall is None else min(best_wall, wall)
        best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
    return best_wall, best_cpu, result


def chunked(path, count):
    buf = bytearray(CHUNK)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            got = f.readinto(buf)
            if not got:
                return total
            total += count(buf if got == CHUNK else buf[:got])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", help="an existing file to read (default: a generated log)")
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from abhed_testing import Tools

    tmp = Path(tempfile.mkdtemp(prefix="read-bench-"))
    try:
        path = Path(args.file).resolve() if args.file else tmp / "big.log"
        if not args.file:
            make_file(path, args.size_mb << 20)
        size = path.stat().st_size
        chunked(path, len)  # page cache warm
        print(f"file: {path} ({size / 1e6:.0f} MB); load average {os.getloadavg()[0]:.2f}")

        def first_read():
            tools = Tools(path.parent, Path(tempfile.mkdtemp(dir=tmp)))  # a fresh home: no index
            return tools("read", raw=json.dumps({"path": str(path)}))

        tools = Tools(path.parent, tmp / "home")
        tools("read", raw=json.dumps({"path": str(path)}))
        total = tools("read", raw=json.dumps({"path": str(path)})).metadata["total_lines"]
        rows = [
            ("first read (counts the file)", timed(first_read, args.repeat)),
            ("next read (line index)", timed(lambda: tools("read", raw=json.dumps({"path": str(path)})), args.repeat)),
            ("deep read at N/2 (line index)", timed(lambda: tools("read", raw=json.dumps(
                {"path": str(path), "offset": total // 2, "limit": 2000})), args.repeat)),
            ("head -n 2000 + wc -l", timed(lambda: (subprocess.run(["head", "-n", "2000", str(path)],
                                                                    capture_output=True),
                                                     subprocess.run(["wc", "-l", str(path)], capture_output=True)),
                                           args.repeat, children=True)),
            ("count_newlines, 4 MB chunks", timed(lambda: chunked(path, count_newlines), args.repeat)),
            ("bytes.count, 4 MB chunks", timed(lambda: chunked(path, lambda b: b.count(b"\n")), args.repeat)),
        ]
        head_wc = rows[3][1]
        print(f"{'what':34} {'wall s':>8} {'cpu s':>8} {'wall/head+wc':>13} {'cpu/head+wc':>12}")
        for what, (wall, cpu, _) in rows:
            print(f"{what:34} {wall:8.3f} {cpu:8.3f} {wall / head_wc[0]:12.2f}x {cpu / head_wc[1]:11.2f}x")
        print(f"total lines: {total}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
