#!/usr/bin/env python3
"""Preparing a grep pattern, against the pattern's length: linear, up to the grep tool's 64 KiB.

    .venv/bin/python benchmarks/pattern_prep_bench.py                  # every family, 1-64 KiB
    .venv/bin/python benchmarks/pattern_prep_bench.py --family literal --repeat 5

Issue 30: the prefilter's planning was cubic (a 2,000-character literal took 60 s, 64 KiB would
have taken an hour) and ran in Abhed's own process even when rg searched. For each family of
patterns, at each length, this times (best of --repeat, CPU of this process):

  read      one Python pass over the pattern's characters: the least any parser could cost
  validate  what the grep tool runs when rg searches: parse, grep's line rewrite, the
            translation for rg (fallback_grep.translate.rust_pattern, capped as the tool caps it)
  matcher   what it runs when fallback_grep searches: filesearch.Matcher (parse, line rewrite,
            program, prefilter plan)
  rg        rg compiling the translation (`rg -f - /dev/null`, wall clock minus rg's run with the
            pattern `x`), when rg is beside this interpreter

and prints each as ms, as us per KB of pattern, and validate and matcher as multiples of read.
Linear means a flat us/KB down a family's rows; the last column of the summary is the us/KB at
64 KiB over that at 4 KiB (1.0 is linear, a log factor shows as ~1.3, quadratic as 16).
An outcome other than `ok` is the error the tool answers with (too large: past the program's
250,000 instructions; rg: the translation is past ripgrep.RG_MAX_PATTERN, so the fallback
searches; rg refuses: its engine cannot compile it, so the fallback searches, and `rg ms` is the
time it took to say so). Each stage runs in bounded.deadline, as in the tool (which also pauses
the cyclic garbage collector). The script never asserts times. Note the load (printed) when you
quote it.
"""
import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import fallback_grep  # noqa: E402
from fallback_grep import bounded  # noqa: E402
from fallback_grep.filesearch import Matcher  # noqa: E402
from fallback_grep.lines import to_line_mode  # noqa: E402
from fallback_grep.parser import FLAG_M, parse  # noqa: E402
from fallback_grep.translate import rust_pattern  # noqa: E402

KIB = 1024
SIZES = (1, 4, 16, 64)
RG_LIMIT = 1 << 20     # abhed.files.ripgrep.RG_MAX_PATTERN (not imported: fallback_grep alone)
WATCHDOG = 600.0       # a stage still running after this long is stopped and shown as such


def _fill(unit, n, head="", tail=""):
    body = unit * max(1, (n - len(head) - len(tail)) // len(unit))
    return head + body + tail


def _nested(n, depth=500):
    """Groups nested `depth` deep, side by side until n characters."""
    block = "(" * depth + "ab" + ")" * depth
    return _fill(block, n)


def _nested_loops(n, depth=300):
    """Loops of loops that can iterate on empty (`(?:(?:a*)*)*`), the RE2-shape path."""
    block = "(?:" * depth + "a*" + ")*" * depth
    return _fill(block, n)


FAMILIES = {
    "literal": lambda n: _fill("abcdefghij", n),
    "icase literal": lambda n: _fill("abcdefghij", n, head="(?i)"),
    "class repetition": lambda n: _fill("[[:alpha:]]", n),
    "unicode class": lambda n: _fill("\\p{Greek}", n),
    "alternation": lambda n: "|".join(f"w{i:05d}" for i in range(max(1, n // 7))),
    "shared prefix alternation": lambda n: _fill("a", n // 2 - 8, head="(?:x*)*(?:", tail="b|") +
    _fill("a", n // 2 - 8, tail="c)"),
    "nested groups": _nested,
    "nested empty loops": _nested_loops,
    "counted nested stars": lambda n: _fill("(((a|b)*)*){0,1000}c", n),
    "words and spaces": lambda n: _fill("\\w+\\s", n),
}


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn, repeat):
    """(best CPU seconds, outcome) of fn()."""
    best, outcome = None, "ok"
    for _ in range(repeat):
        t = cpu()
        try:
            with bounded.deadline(WATCHDOG, "benchmark"):
                result = fn()
            if result is None:
                outcome = "rg: translation capped"
        except fallback_grep.error as exc:
            outcome = exc.construct
        dt = cpu() - t
        best = dt if best is None else min(best, dt)
    return best, outcome


def read_pass(pattern):
    count = 0
    for _ in pattern:
        count += 1
    return count


def validate(pattern):
    tree = parse(pattern, FLAG_M).tree
    to_line_mode(tree, pattern)
    return rust_pattern(pattern, limit=RG_LIMIT)


def rg_compile(rg, regex, baseline):
    """(Wall seconds rg spends on the translation beyond its run with a one-letter pattern, whether
    it refused it: exit 2, e.g. nesting past its 250)."""
    t = time.perf_counter()
    proc = subprocess.run([rg, "--no-config", "-f", "-", os.devnull], input=(regex + "\n").encode(),
                          capture_output=True, timeout=300)
    return max(0.0, time.perf_counter() - t - baseline), proc.returncode == 2


def rg_baseline(rg):
    best = None
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([rg, "--no-config", "-e", "x", os.devnull], capture_output=True)
        best = min(best or 1e9, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES), help="only these (repeatable)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="KiB, comma-separated")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rg = shutil.which("rg", path=str(Path(sys.executable).parent))
    base = rg_baseline(rg) if rg else 0.0
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; {os.cpu_count()} cores; "
          f"rg: {rg or 'not found'}")
    head = (f"{'family':26} {'KiB':>4} {'read ms':>8} {'validate ms':>11} {'us/KB':>7} {'x read':>7} "
            f"{'matcher ms':>10} {'us/KB':>7} {'x read':>7} {'rg ms':>7}  outcome")
    print(head)
    summary = []
    for name in args.family or FAMILIES:
        per_kb = {}
        for kib in sizes:
            pattern = FAMILIES[name](kib * KIB)
            kb = len(pattern.encode()) / 1000
            t_read, _ = timed(lambda: read_pass(pattern), args.repeat)
            t_val, out_val = timed(lambda: validate(pattern), args.repeat)
            t_mat, out_mat = timed(lambda: Matcher(pattern), args.repeat)
            regex = None if out_val != "ok" else validate(pattern)
            t_rg, refused = rg_compile(rg, regex, base) if rg and regex is not None else (None, False)
            per_kb[kib] = (t_val / kb * 1e6, t_mat / kb * 1e6)
            read = max(t_read, 1e-9)
            print(f"{name:26} {len(pattern.encode()) / KIB:4.0f} {t_read * 1e3:8.2f} {t_val * 1e3:11.1f} "
                  f"{t_val / kb * 1e6:7.0f} {t_val / read:7.0f} {t_mat * 1e3:10.1f} {t_mat / kb * 1e6:7.0f} "
                  f"{t_mat / read:7.0f} {'-' if t_rg is None else f'{t_rg * 1e3:.1f}':>7}  "
                  f"{out_val}/{out_mat}{' (rg refuses it: fallback_grep searches)' if refused else ''}", flush=True)
        if 4 in per_kb and 64 in per_kb:
            summary.append((name, per_kb[64][0] / per_kb[4][0], per_kb[64][1] / per_kb[4][1]))
    if summary:
        print("\nus/KB at 64 KiB over us/KB at 4 KiB (1.0 = linear):")
        for name, val, mat in summary:
            print(f"  {name:26} validate {val:5.2f}   matcher {mat:5.2f}")


if __name__ == "__main__":
    main()
