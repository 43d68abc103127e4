#!/usr/bin/env python3
"""The grep tool on the fallback_grep backend: one process against forked workers, beside GNU grep and rg.

    .venv/bin/python benchmarks/grep_tool_bench.py                 # both tables, drivers/ of Linux 6.1
    .venv/bin/python benchmarks/grep_tool_bench.py --only-threshold --repeat 5
    .venv/bin/python benchmarks/grep_tool_bench.py --subdir fs --repeat 3
    .venv/bin/python benchmarks/grep_tool_bench.py --only-rg --repeat 5   # issue 34: the rg backend beside rg
    .venv/bin/python benchmarks/grep_tool_bench.py --only-rg --skip-descriptors --repeat 3   # the jail only (faster)

threshold: python_search (the tool's fallback backend, confined opener included) over the first
  files of the tree, growing sizes, with workers=1 and workers=N, interleaved; shows where the forks
  start to pay (grepsearch.PARALLEL_MIN_BYTES).
tool: a whole grep tool call (walk with ignore rules, stat, search, answer) with search.backend =
  "python", which forks workers above the threshold, against GNU grep -r (one thread), rg -j1 and
  rg (its default threads), each searching the same directory, files_with_matches mode.
rg (issue 34): a whole grep tool call on the rg backend (jailed: rg reads names in a read-only bwrap
  view; descriptors: sandbox.backend = "none", rg reads /proc/self/fd/N) beside bare `rg -uu` on the
  same directory, every output mode, on drivers/, the whole tree and a generated 1,000-file tree.
Wall and CPU time (this process and its reaped children for the tool, the child for grep and rg),
medians of --repeat runs, the load average beside every table. The script never asserts times.
Corpus: benchmarks/corpus/linux-source-6.1 (see grep_bench.py, which fetches it).
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from abhed.files import grepsearch  # noqa: E402
from fallback_grep.filesearch import walk  # noqa: E402
from fallback_grep.parallel import default_workers  # noqa: E402

TREE = HERE / "corpus" / "linux-source-6.1"
PATTERNS = [("PM_RESUME", ["-E", "PM_RESUME"]), ("(?i)PM_RESUME", ["-E", "-i", "PM_RESUME"]),
            ("[A-Z]+_RESUME", ["-E", "[A-Z]+_RESUME"]),
            ("ERR_SYS|PME_TURN_OFF|LINK_REQ_RST|CFG_BME_EVT", ["-E", "ERR_SYS|PME_TURN_OFF|LINK_REQ_RST|CFG_BME_EVT"]),
            (r"\p{Greek}", ["-P", r"\p{Greek}"]), (r"\wAh", ["-E", r"\wAh"])]


def timed(fn):
    """(wall s, CPU s of this process and of the children reaped meanwhile, result)."""
    r0 = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    t0 = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - t0
    r1 = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(b.ru_utime - a.ru_utime + b.ru_stime - a.ru_stime for a, b in zip(r0, r1))
    return wall, cpu, result


def medians(runs):
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def bench_threshold(root, repeat, workers):
    files = [p for p in walk(str(root))]
    sizes = {p: os.path.getsize(p) for p in files}
    query = grepsearch.Query("ERR_SYS|PME_TURN_OFF|LINK_REQ_RST|CFG_BME_EVT")
    print(f"\npython_search (the tool's fallback backend) over the first files of {root}, "
          f"workers=1 against workers={workers}, interleaved, medians of {repeat}; wall ms (CPU ms, "
          f"children included); load average {os.getloadavg()[0]:.1f}")
    print("\n| MB | files | 1 process | forked | wall ratio | CPU ratio | same answer |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for mb in (1, 4, 8, 16, 32, 64, 128):
        chosen, total = [], 0
        for p in files:
            if total >= mb * 1e6:
                break
            chosen.append(p)
            total += sizes[p]
        one, many = [], []
        for _ in range(repeat):
            one.append(timed(lambda: list(grepsearch.python_search(chosen, query, workers=1))))
            many.append(timed(lambda: list(grepsearch.python_search(chosen, query, workers=workers))))
        (w1, c1), (wn, cn) = medians(one), medians(many)
        same = one[-1][2] == many[-1][2]
        print(f"| {total / 1e6:.1f} | {len(chosen)} | {w1 * 1000:.0f} ({c1 * 1000:.0f}) | "
              f"{wn * 1000:.0f} ({cn * 1000:.0f}) | {wn / w1:.2f}x | {cn / c1:.2f}x | {same} |", flush=True)


def bench_tool(root, repeat):
    from abhed_testing import Tools

    tools = Tools(root, Path(tempfile.mkdtemp()))
    tools.settings.search.backend = "python"
    rg = str(Path(sys.executable).with_name("rg"))
    env = dict(os.environ, LC_ALL="C.UTF-8")
    n = default_workers()
    rows = []
    for pattern, grep_args in PATTERNS:
        *opts, pat = grep_args
        runs = {
            "tool, 1 process": lambda: _tool(tools, pattern, workers=False),
            f"tool, {n} workers": lambda: _tool(tools, pattern, workers=True),
            "GNU grep": lambda: subprocess.run(["grep", "-r", "-I", "-l", *opts, "-e", pat, str(root)],
                                               capture_output=True, env=env),
            "rg -j1": lambda: subprocess.run([rg, "--no-config", "-j1", "-uu", "-l", "-e", pattern, str(root)],
                                             capture_output=True),
            "rg": lambda: subprocess.run([rg, "--no-config", "-uu", "-l", "-e", pattern, str(root)],
                                         capture_output=True),
        }
        got = {k: [] for k in runs}
        for _ in range(repeat):
            for k, fn in runs.items():   # interleaved: every tool sees the same load
                got[k].append(timed(fn))
        same = got["tool, 1 process"][-1][2] == got[f"tool, {n} workers"][-1][2]
        rows.append((pattern, {k: medians(v) for k, v in got.items()}, same))
        print(f"{pattern:46} " + " ".join(f"{k}={w:.2f}s ({c:.2f})" for k, (w, c) in rows[-1][1].items()),
              flush=True)
    keys = list(rows[0][1])
    print(f"\ngrep tool (search.backend = python, files_with_matches) on {root}; the tool with {n} workers "
          f"uses {n} forked fallback_grep worker processes; rg its default threads, GNU grep one thread; wall s "
          f"(CPU s), medians of {repeat}; load average {os.getloadavg()[0]:.1f}")
    print("\n| pattern | " + " | ".join(keys) + " | workers wall / grep wall | workers wall / rg -j1 wall | "
          "workers wall / rg wall | workers CPU / 1 process CPU | same answer |")
    print("|---|" + "---:|" * (len(keys) + 4) + "---|")
    for pattern, t, same in rows:
        wn = t[f"tool, {n} workers"]
        cells = " | ".join(f"{w:.2f} ({c:.2f})" for w, c in t.values())
        print(f"| `{pattern}` | {cells} | {wn[0] / t['GNU grep'][0]:.2f}x | {wn[0] / t['rg -j1'][0]:.2f}x | "
              f"{wn[0] / t['rg'][0]:.2f}x | {wn[1] / t['tool, 1 process'][1]:.2f}x | {same} |")


def _tool(tools, pattern, workers):
    saved = grepsearch.PARALLEL_MIN_BYTES
    grepsearch.PARALLEL_MIN_BYTES = saved if workers else 1 << 62
    try:
        result = tools("grep", raw=json.dumps({"pattern": pattern}))
    finally:
        grepsearch.PARALLEL_MIN_BYTES = saved
    assert not result.is_error, result.content
    return result.content


RG_MODES = {"files_with_matches": ["-l"], "count": ["-c"], "content": ["-n"]}


def thousand_files() -> Path:
    """A generated tree of 1,000 C-like files (4 KiB each, 10 per directory), a few matching."""
    root = Path(tempfile.mkdtemp(prefix="grep-1000-"))
    for i in range(1000):
        d = root / f"dir{i // 10:03d}"
        d.mkdir(exist_ok=True)
        body = "".join(f"static int value_{i}_{k}(void) {{ return {k}; }}\n" for k in range(100))
        (d / f"f{i:04d}.c").write_text(body + ("PM_RESUME\n" if i % 97 == 0 else ""))
    return root


def bench_rg(roots, repeat, pattern="PM_RESUME", descriptors=True):
    from abhed_testing import Tools
    from abhed.tools.grep import Grep, GrepInput

    rg = str(Path(sys.executable).with_name("rg"))
    print(f"\ngrep tool on the rg backend beside `rg -uu` (same directory, same mode), pattern {pattern!r}; wall ms "
          f"(CPU ms, children included), medians of {repeat}, interleaved")
    print("\n| tree | mode | tool, jailed | tool, descriptors | rg | jailed / rg wall | descriptors / rg wall | "
          "jailed / rg CPU | load |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, root in roots:
        tools = Tools(root, Path(tempfile.mkdtemp()))
        tools.settings.search.backend = "rg"
        for mode, flag in RG_MODES.items():
            def tool(backend):
                # The tool's own run with a real ToolContext (walk and formatting included), as the
                # agent calls it, without dispatch's session-log write (an fsync, not grep's work).
                tools.settings.sandbox.backend = backend
                result = Grep().run(GrepInput(pattern=pattern, output_mode=mode), tools.ctx)
                assert not result.is_error and result.metadata["rg_jail"] is (backend == "bwrap"), result.content
                return result.content
            runs = {"jailed": lambda: tool("bwrap"), "descriptors": lambda: tool("none") if descriptors else "",
                    "rg": lambda: subprocess.run([rg, "--no-config", "-uu", *flag, pattern, str(root)],
                                                 capture_output=True)}
            got = {k: [] for k in runs}
            for _ in range(repeat):
                for k, fn in runs.items():
                    got[k].append(timed(fn))
            m = {k: medians(v) for k, v in got.items()}
            cells = " | ".join(f"{w * 1000:.0f} ({c * 1000:.0f})" for w, c in m.values())
            print(f"| {label} | {mode} | {cells} | {m['jailed'][0] / m['rg'][0]:.2f}x | "
                  f"{m['descriptors'][0] / m['rg'][0]:.2f}x | {m['jailed'][1] / max(m['rg'][1], 1e-6):.2f}x | "
                  f"{os.getloadavg()[0]:.1f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subdir", default="drivers", help="part of the tree to search (default drivers)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is shown")
    ap.add_argument("--only-threshold", action="store_true")
    ap.add_argument("--only-tool", action="store_true")
    ap.add_argument("--only-rg", action="store_true", help="only the rg backend beside rg (issue 34)")
    ap.add_argument("--skip-descriptors", action="store_true", help="--only-rg without the descriptor column (faster)")
    args = ap.parse_args()
    if not TREE.is_dir():
        sys.exit(f"{TREE} is missing: run benchmarks/grep_bench.py once, it installs the corpus")
    if args.only_rg:
        small = thousand_files()
        try:
            bench_rg([("1,000 files", small), ("drivers/", TREE / "drivers"), ("whole tree", TREE)], args.repeat,
                     descriptors=not args.skip_descriptors)
        finally:
            shutil.rmtree(small, ignore_errors=True)
        return
    root = TREE / args.subdir
    if not args.only_tool:
        bench_threshold(root, args.repeat, default_workers())
    if not args.only_threshold:
        bench_tool(root, args.repeat)


if __name__ == "__main__":
    main()
