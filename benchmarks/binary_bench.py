#!/usr/bin/env python3
"""Start-up of the one-file binary against `python -m abhed`, its size, and (opt-in) build times.

    .venv/bin/python benchmarks/binary_bench.py                 # start-up and size (needs dist/abhed)
    .venv/bin/python benchmarks/binary_bench.py --runs 50
    .venv/bin/python benchmarks/binary_bench.py --build-times   # also: ./build.sh cold, then with ccache

Start-up: `abhed --version` and one `abhed tool read` call (a 200-line file), each run --runs
times, alternating binary and source so both see the same machine load; the binary's cache is
warm (one untimed run first). Goals (issue 7): median under 150 ms (--version) and 250 ms (tool
read); binary under 60 MB. Build times: a cold build (empty ccache and Nuitka caches, in temp
dirs) and a rebuild with the now-warm ccache. Times are wall clock on a shared machine: read the
ratios. The script never asserts times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BINARY = REPO / "dist" / "abhed"
GOALS_MS = {"--version": 150, "tool read": 250}


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    return elapsed * 1000


def startup(runs: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="abhed-bench-"))
    target = work / "file.py"
    target.write_text("".join(f"line_{i} = {i}\n" for i in range(200)))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "ABHED_HOME": str(work / "abhed-home"),
           "ABHED_CONFIG": "", "LANG": "C.UTF-8"}
    read = ["tool", "read", json.dumps({"path": str(target)}), "--workspace", str(work)]
    commands = {"--version": ["--version"], "tool read": read}
    runners = {"binary": [str(BINARY)], "python -m abhed": [str(REPO / ".venv/bin/python"), "-m", "abhed"]}
    print(f"start-up, median of {runs} runs (ms), warm cache; binary {BINARY}")
    print(f"{'command':<12} {'binary':>8} {'python -m':>10} {'ratio':>7}  goal")
    for name, args in commands.items():
        for runner in runners.values():
            timed([*runner, *args], env, work)  # warm-up: unpack, page cache
        samples: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(runs):
            for label, runner in runners.items():
                samples[label].append(timed([*runner, *args], env, work))
        binary, source = (statistics.median(samples[k]) for k in runners)
        verdict = "met" if binary < GOALS_MS[name] else "MISSED"
        print(f"{name:<12} {binary:8.1f} {source:10.1f} {binary / source:6.2f}x  < {GOALS_MS[name]} ms: {verdict}")


def build_times() -> None:
    caches = Path(tempfile.mkdtemp(prefix="abhed-build-caches-"))
    env = {**os.environ, "CCACHE_DIR": str(caches / "ccache"), "NUITKA_CACHE_DIR": str(caches / "nuitka")}
    for label in ("cold (empty caches)", "rebuild (warm ccache)"):
        start = time.perf_counter()
        subprocess.run([str(REPO / "build.sh")], env=env, cwd=REPO, check=True, capture_output=True)
        print(f"build {label}: {(time.perf_counter() - start) / 60:.1f} min")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--build-times", action="store_true", help="also time ./build.sh cold and with ccache")
    args = parser.parse_args()
    if args.build_times:
        build_times()
    if not BINARY.is_file():
        sys.exit(f"{BINARY} is missing: run ./build.sh first")
    size = BINARY.stat().st_size / 2**20
    print(f"binary size: {size:.1f} MB (goal < 60 MB: {'met' if size < 60 else 'MISSED'})")
    startup(args.runs)


if __name__ == "__main__":
    main()
