"""What the approval check of a bash line costs, side by side with the alternatives.

    .venv/bin/python benchmarks/approval_bench.py [--lines 3000]

For real lines (Debian's bash-completion scripts, installed by scripts/setup-test-data) and for
issue 13's pathological inputs, times per line:

- check:  Policy.check("bash", ...) in mode auto -- tree-sitter parse, the second scan, the walk,
          wrappers and destructive rules: everything the approval layer does;
- parse:  tree-sitter's parse alone, the floor of any grammar-based check;
- bash:   `bash -n -c LINE` in a subprocess, bash's own parser (what a check that asked the real
          shell would pay; it still would not say what the line runs).

Prints median and p99 per line and the ratios. Goal: a check stays under a few milliseconds, and
inputs over the limits are refused (opaque) at once. Timing lives here only; tests never assert it.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abhed.gate.approval import Policy  # noqa: E402
from abhed.gate.shellparse import _parser  # noqa: E402

CORPUS = Path("/usr/share/bash-completion")
PATHOLOGICAL = {
    "1 MB word": "echo " + "x" * 1_000_000,
    "989 commands joined by &&": " && ".join(["true"] * 989),
    "$( nested 248 deep": "echo " + "$(" * 248 + "x" + ")" * 248,
    "60 KB here-document": "cat <<EOF > out\n" + "line of text $HOME\n" * 3300 + "EOF",
}


def _time(fn, text: str) -> float:
    started = time.perf_counter()
    fn(text)
    return time.perf_counter() - started


def _lines(limit: int) -> list[str]:
    lines: list[str] = []
    for path in sorted(CORPUS.rglob("*")):
        if path.is_file():
            lines.extend(line for line in path.read_text(errors="replace").splitlines() if line.strip())
        if len(lines) >= limit:
            break
    return lines[:limit]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--bash-lines", type=int, default=300, help="bash -n spawns a process per line")
    args = parser.parse_args()
    policy = Policy.create("auto", [], [], Path("/nonexistent"))
    check = lambda text: policy.check("bash", SimpleNamespace(command=text))  # noqa: E731
    parse = lambda text: _parser().parse(text.encode("utf-8", "replace"))  # noqa: E731
    bash = lambda text: subprocess.run(["bash", "-n", "-c", text], capture_output=True)  # noqa: E731

    lines = _lines(args.lines)
    if not lines:
        sys.exit(f"no corpus under {CORPUS}: run scripts/setup-test-data")
    results = {}
    for name, fn, subset in (("check", check, lines), ("parse", parse, lines), ("bash", bash, lines[: args.bash_lines])):
        times = sorted(_time(fn, line) for line in subset)
        results[name] = (statistics.median(times), times[int(len(times) * 0.99) - 1])
    print(f"{len(lines)} real lines from {CORPUS} (bash -n on the first {args.bash_lines})")
    for name, (median, p99) in results.items():
        print(f"  {name:6s} median {median * 1e3:7.3f} ms   p99 {p99 * 1e3:7.3f} ms")
    check_median, parse_median, bash_median = (results[k][0] for k in ("check", "parse", "bash"))
    print(f"  check / parse = {check_median / parse_median:.1f}x   bash -n / check = {bash_median / check_median:.1f}x")
    print("pathological inputs (issue 13):")
    for name, text in PATHOLOGICAL.items():
        elapsed = _time(check, text)
        verdict = check(text)
        print(f"  {name:28s} {elapsed * 1e3:8.2f} ms  -> {verdict.decision} ({verdict.rule})")


if __name__ == "__main__":
    main()
