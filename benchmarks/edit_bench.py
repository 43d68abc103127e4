"""Benchmark: edit's nearest-match error on a 20,000-line file, and read windows of a 1 GB file.

Each figure is printed beside a plain-Python way of doing the same job, measured in the same run.
Goals (issue 2): the no-match error costs under 0.2 s; reading 2000 lines from anywhere in a 1 GB
file costs under 0.5 s and under 50 MB. Run: .venv/bin/python benchmarks/edit_bench.py [--nearest-only]
"""

from __future__ import annotations

import difflib
import itertools
import json
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from abhed.session import config  # noqa: E402
from abhed.agent import dispatch
from abhed.gate.approval import Gate, Policy  # noqa: E402
from abhed.files.paths import PathPolicy  # noqa: E402
from abhed.session.store import SessionStore  # noqa: E402
from abhed.tools.base import ToolContext  # noqa: E402

CORPUS = REPO / "benchmarks" / "corpus"
GIB = 1 << 30


def call(ctx: ToolContext, name: str, args: str):
    """One call as a person running `abhed tool` by hand would make it (edits allowed)."""
    gate = Gate(Policy.create("accept-edits", [], [], ctx.paths.workspace), invoked_by_human=True)
    return dispatch.call(ctx, name, args, gate)


def context(ws: Path, home: Path) -> ToolContext:
    settings = config.load(env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
    return ToolContext(SessionStore(home).create(ws), settings, PathPolicy.create(ws))


def timed(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def source_file(path: Path, lines: int) -> str:
    rng = random.Random(1)
    words = ["value", "result", "count", "index", "buffer", "config", "handler", "request", "token", "state"]
    out = []
    for i in range(lines):
        indent = "    " * rng.randint(0, 3)
        out.append(f"{indent}{rng.choice(words)}_{i} = {rng.choice(words)}({rng.randint(0, 999)}, '{rng.choice(words)}')")
    text = "\n".join(out) + "\n"
    path.write_text(text)
    return text


def baseline_nearest(text: str, needle: str) -> tuple[int, float]:
    """Plain Python: difflib's ratio over every window of the needle's height."""
    lines = text.split("\n")
    k = needle.count("\n") + 1
    best = (0, 0.0)
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(needle)
    for i in range(len(lines) - k + 1):
        matcher.set_seq1("\n".join(lines[i : i + k]))
        if matcher.real_quick_ratio() > best[1] and matcher.quick_ratio() > best[1]:
            score = matcher.ratio()
            if score > best[1]:
                best = (i + 1, score)
    return best


def bench_nearest(tmp: Path) -> None:
    ws = tmp / "ws"
    ws.mkdir()
    path = ws / "big.py"
    text = source_file(path, 20_000)
    lines = text.split("\n")
    ctx = context(ws, tmp / "home")
    call(ctx, "read", json.dumps({"path": str(path), "limit": 1}))
    window = lines[12_000:12_006]
    cases = [
        # A realistic miss: 6 lines from the middle, re-indented with a tab and one token changed.
        ("6 lines, a tab and a typo", "\n".join(["\t" + window[0].lstrip(), *window[1:4],
                                                window[4].replace("(", "[", 1), window[5]]), "lines 12001-12006"),
        # One line, equal up to whitespace: must win over closer-looking lines.
        ("1 line, tabs for spaces", "\t" * 2 + lines[15_000].lstrip() if lines[15_000].startswith(" ") else
         "  " + lines[15_000], "line 15001"),
        # A line missing from the middle of 5, with the indentation changed.
        ("5 lines, one missing", "\n".join(" " + line for line in lines[8_000:8_002] + lines[8_003:8_005]),
         "lines 8001-8005"),
        # Nothing like it anywhere: the whole search runs and finds nothing.
        ("4 lines, no similar text", "\n".join(["zzzz qqqq xxxx"] * 4), "No similar text"),
    ]
    print("nearest match on a 20,000-line file (no-match error, whole edit call, median of 5)")
    print(f"  {'case':<28} {'abhed edit':>10}  {'difflib windows':>15}  {'ratio':>7}")
    for name, needle, expect in cases:
        args = json.dumps({"path": str(path), "old_string": needle, "new_string": "x"})
        result = call(ctx, "edit", args)
        assert result.is_error and expect in result.content, (name, result.content[:300])
        ours = timed(lambda: call(ctx, "edit", args))
        start = time.perf_counter()
        baseline_nearest(text, needle)
        base = time.perf_counter() - start
        print(f"  {name:<28} {ours * 1000:8.1f}ms  {base * 1000:13.0f}ms  {base / ours:6.0f}x")
    print("  goal: < 200 ms per error; difflib over windows is the plain-Python way (run once)")


def big_file() -> Path:
    path = CORPUS / "1gib.log"
    if path.exists() and path.stat().st_size >= GIB:
        return path
    CORPUS.mkdir(parents=True, exist_ok=True)
    rng = random.Random(2)
    block = "".join(f"2026-12-02T10:{i % 60:02d}:{i % 59:02d} worker-{rng.randint(1, 64)} processed request "
                    f"{rng.getrandbits(48):012x} in {rng.randint(1, 999)} ms\n" for i in range(20_000)).encode()
    with open(path, "wb") as f:
        while f.tell() < GIB:
            f.write(block)
    return path


def bench_read(tmp: Path) -> None:
    path = big_file()
    ctx = context(path.parent, tmp / "home2")
    index_dir = ctx.settings.home / "cache" / "line-index"
    with open(path, "rb") as f:
        total = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 22), b""))
    print(f"\nread 2000 lines from a {path.stat().st_size / GIB:.2f} GiB file ({total} lines; page cache warm)")
    print("  cold: first read of the file, which counts every line and records a line index")
    print("  warm: later reads of the unchanged file, which start from the index (median of 5)")
    print(f"  {'offset':>10}  {'cold':>7}  {'warm':>7}  {'peak alloc':>10}  {'islice baseline':>15}")
    for where in (0.0, 0.5, 0.999):
        offset = max(1, int(total * where))
        args = json.dumps({"path": str(path), "offset": offset, "limit": 2000})
        shutil.rmtree(index_dir, ignore_errors=True)
        tracemalloc.start()
        start = time.perf_counter()
        result = call(ctx, "read", args)
        cold = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert not result.is_error and f"of {total}." in result.content, result.content[-300:]
        warm = timed(lambda: call(ctx, "read", args))

        def islice_read() -> None:
            with open(path, "rb") as f:
                list(itertools.islice(f, offset - 1, offset - 1 + 2000))
                sum(1 for _ in f)  # the total line count the truncation note needs

        base = timed(islice_read, repeat=1)
        print(f"  {offset:>10}  {cold * 1000:>5.0f}ms  {warm * 1000:>5.0f}ms  {peak / 1e6:>8.1f}MB  "
              f"{base * 1000:>13.0f}ms")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"  process max RSS: {rss / 1024:.0f} MB, interpreter and imports included "
          "(f.readlines() would hold the whole file: over 1 GB, not run)")
    print("  goals: < 500 ms and < 50 MB per call")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bench_nearest(Path(tmp))
        if "--nearest-only" not in sys.argv[1:]:  # the read half writes a 1 GiB file
            bench_read(Path(tmp))


if __name__ == "__main__":
    main()
