"""Sandbox overhead per call: the same command through the bwrap backend and unconfined.

    .venv/bin/python benchmarks/bash_bench.py [--runs 100] [--command 'true']

For each command, runs it ``--runs`` times through three paths, interleaved so that load
changes on the machine hit all three alike:

- raw:   subprocess.run(["bash", "-c", command]), the floor;
- none:  Sandbox(backend="none").run(), the launcher without confinement (same wrapper,
         same output collection, same rlimits);
- bwrap: Sandbox(backend="bwrap").run(), confined.

Prints the median (and p90) per call, and the overhead of bwrap over none -- the cost of
the sandbox itself -- side by side with the ratio. Goal: median overhead under 10 ms.
Measured figures, with the load average of each run, are in docs/security.md ("Performance");
on a busy machine compare trees with ``--against`` (both ways round) and the host CPU column.
Timing lives here only; the test suites never assert durations.

Also printed: the mount operations bwrap performs per call for this workspace (each bind
or remount re-reads /proc/self/mountinfo inside bwrap; they are most of its set-up time).

``--gap MS`` pauses between calls, as an agent does while the model thinks. Some kernel
costs only show then: the first move of a process into a cgroup after a quiet spell waits
for an RCU grace period (as root, each command gets its own pids/memory cgroups), while
calls that follow each other closely find it already paid. On cgroup v1 the launcher moves
no process at all: bwrap is started from inside the command's cgroups
(sandbox.limits.ThreadInCgroups); on cgroup v2 it overlaps that wait with bwrap's own set-up
(sandbox.launcher.BwrapLauncher._join_cgroups_early).

``--against TREE`` times another checkout's sandbox package too (e.g. main's, at /work/main),
in a worker process, in the same interleaved rounds, with the same workspace: before and
after a change in one run, so the machine's load hits both alike. Printed: its none/bwrap
medians, its overhead, and the change. The host-side CPU time per call (the calling
process's own, kernel time included; bwrap and the command excluded) is printed for every
path but raw, with the change in bwrap's CPU over none: less noisy than wall time on a busy
machine.

``--tree N`` first fills the workspace with N files (10 per directory, in a git repository)
so the per-call cost of the git guard (sandbox.gitguard: the scan for repositories the
command created) is part of the bwrap figures, and times that scan on its own beside
``find -name .git`` over the same tree (what a naive full scan would cost), then again with
20 directories that hold HEAD, objects and refs without being git directories (the guard asks
sandbox.gitshape about each at every check).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sandbox  # noqa: E402

GOAL_MS = 10.0
DEFAULT_COMMANDS = ("true", "echo hello; ls -la >/dev/null; cd sub")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# Flags of bwrap that each mount something (a bind, a tmpfs, a remount, /proc, /dev).
MOUNT_FLAGS = ("--ro-bind", "--bind", "--dev-bind", "--tmpfs", "--remount-ro", "--proc", "--dev", "--ro-overlay")


def mount_operations(config: sandbox.SandboxConfig, workspace: Path) -> int:
    """How many mount flags the bwrap command line of one call in ``workspace`` carries."""
    from sandbox import launcher

    seen: list[list[str]] = []
    real = launcher.bwrap_argv

    def watched(plan):  # the launcher's own argv for one call, kept
        seen.append(real(plan))
        return seen[-1]

    launcher.bwrap_argv = watched
    try:
        with sandbox.Sandbox(config, workspace) as box:
            box.run("true", cwd=workspace, timeout_s=60)
    finally:
        launcher.bwrap_argv = real
    argv = seen[0][: seen[0].index("--")]
    return sum(1 for arg in argv if arg in MOUNT_FLAGS)


# The worker of --against: the other checkout's Sandbox, timing one call per request line.
WORKER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import sandbox
workspace, limits = sys.argv[2], sandbox.Limits(processes=None) if sys.argv[3] == "1" else sandbox.Limits()
boxes = {"none": sandbox.Sandbox(sandbox.SandboxConfig(backend="none", limits=limits), workspace),
         "bwrap": sandbox.Sandbox(sandbox.SandboxConfig(limits=limits), workspace)}
for line in sys.stdin:
    path, command = json.loads(line)
    started, cpu_started = time.perf_counter(), time.process_time()
    result = boxes[path].run(command, cwd=workspace, timeout_s=60)
    elapsed, cpu = (time.perf_counter() - started) * 1000, (time.process_time() - cpu_started) * 1000
    print(json.dumps([elapsed, cpu, result.exit_code, result.output[-500:]]), flush=True)
for box in boxes.values():
    box.close()
"""


class Against:
    """Another checkout's sandbox, run by a worker process (``--against``)."""

    def __init__(self, tree: Path, workspace: Path, no_process_limit: bool) -> None:
        self.worker = subprocess.Popen([sys.executable, "-c", WORKER, str(tree), str(workspace), "1" if no_process_limit else "0"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def time(self, path: str, command: str) -> tuple[float, float]:
        """Wall and host-side CPU time (ms) of one call in the worker."""
        assert self.worker.stdin is not None and self.worker.stdout is not None
        self.worker.stdin.write(json.dumps([path, command]) + "\n")
        self.worker.stdin.flush()
        answer = self.worker.stdout.readline()
        if not answer:
            raise SystemExit(f"--against: the worker died (its error is above) while running {path} {command!r}")
        elapsed, cpu, code, output = json.loads(answer)
        if code != 0:
            raise SystemExit(f"--against {path}: {command!r} failed ({code}): {output}")
        return elapsed, cpu

    def close(self) -> None:
        assert self.worker.stdin is not None
        self.worker.stdin.close()
        self.worker.wait()


def bench(command: str, runs: int, workspace: Path, config: sandbox.SandboxConfig, gap_s: float = 0.0,
          against: Against | None = None) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall times per path (ms), and host-side CPU times per call for none and bwrap (ms)."""
    timings: dict[str, list[float]] = {"raw": [], "none": [], "bwrap": []}
    if against is not None:
        timings.update({"against-none": [], "against-bwrap": []})
    cpu: dict[str, list[float]] = {path: [] for path in timings if path != "raw"}
    none = sandbox.Sandbox(sandbox.SandboxConfig(backend="none", limits=config.limits), workspace)
    bwrap = sandbox.Sandbox(config, workspace)
    try:
        for path in timings:  # warm caches once, not measured
            _once(path, command, workspace, none, bwrap, against)
        for _ in range(runs):
            for path in timings:
                time.sleep(gap_s)
                started, cpu_started = time.perf_counter(), time.process_time()
                measured = _once(path, command, workspace, none, bwrap, against)
                wall, host_cpu = measured or ((time.perf_counter() - started) * 1000, (time.process_time() - cpu_started) * 1000)
                timings[path].append(wall)
                if path in cpu:
                    cpu[path].append(host_cpu)
    finally:
        none.close()
        bwrap.close()
    return timings, cpu


def _once(path: str, command: str, workspace: Path, none: sandbox.Sandbox, bwrap: sandbox.Sandbox,
          against: Against | None) -> tuple[float, float] | None:
    """Runs one call; returns its wall and CPU times when measured elsewhere (the --against worker)."""
    if path == "raw":
        subprocess.run(["bash", "-c", command], cwd=workspace, stdin=subprocess.DEVNULL, capture_output=True, check=False)
        return None
    if path.startswith("against-"):
        assert against is not None
        return against.time(path.removeprefix("against-"), command)
    result = (none if path == "none" else bwrap).run(command, cwd=workspace, timeout_s=60)
    if result.exit_code != 0:
        raise SystemExit(f"{path}: {command!r} failed ({result.exit_code}): {result.output}")
    return None


def make_tree(root: Path, files: int) -> None:
    """``files`` small files, 10 per directory, 10 directories per directory, under a git repository."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for n in range(files):
        directory = root.joinpath(*[f"d{(n // 10 // 10**level) % 10}" for level in range(max(1, len(str(max(files // 10, 1)))))][::-1])
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{n}.txt").write_text("x\n")


def guard_bench(root: Path, files: int, runs: int) -> None:
    from sandbox.gitguard import GitGuard

    dirs = sum(1 for _ in os.walk(root))
    started = time.perf_counter()
    guard = GitGuard.start(root)
    first = (time.perf_counter() - started) * 1000
    time.sleep(GitGuardRecent)  # let every directory's ctime age past the "recent" window
    guard.check()  # the first check after start still lists what was recent
    checks, finds = [], []
    for _ in range(runs):
        started = time.perf_counter()
        guard.check()
        checks.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        subprocess.run(["find", str(root), "-name", ".git"], capture_output=True, check=True)
        finds.append((time.perf_counter() - started) * 1000)
    check, find = statistics.median(checks), statistics.median(finds)
    print(f"git guard on {files} files in {dirs} directories: first scan {first:.1f} ms; per call (nothing changed) "
          f"median {check:.2f} ms, p90 {percentile(checks, 0.9):.2f} ms; `find -name .git` median {find:.2f} ms "
          f"(guard/find ratio {check / find:.2f})")
    # Directories whose names make them candidates but that are no git directory (an invalid HEAD):
    # sandbox.gitshape is asked about each at every check, through a descriptor.
    for n in range(CANDIDATES):
        (root / f"candidate{n}" / "objects").mkdir(parents=True)
        (root / f"candidate{n}" / "refs").mkdir()
        (root / f"candidate{n}" / "HEAD").write_text("not a ref\n")
    guard.check()
    with_candidates = []
    for _ in range(runs):
        started = time.perf_counter()
        guard.check()
        with_candidates.append((time.perf_counter() - started) * 1000)
    median = statistics.median(with_candidates)
    print(f"  with {CANDIDATES} directories holding HEAD, objects and refs but no valid HEAD (asked again at each "
          f"check): median {median:.2f} ms ({(median - check) / CANDIDATES * 1000:.0f} us per such directory)")
    guard.close()
    for n in range(CANDIDATES):  # the sandbox figures below are for the plain tree
        shutil.rmtree(root / f"candidate{n}")


CANDIDATES = 20


GitGuardRecent = 0.3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--command", action="append", help="command to time (repeatable); default: a trivial and a small one")
    parser.add_argument("--no-process-limit", action="store_true", help="limits.processes=None (as root: no pids cgroup)")
    parser.add_argument("--tree", type=int, default=0, metavar="FILES", help="fill the workspace with FILES files first")
    parser.add_argument("--gap", type=float, default=0.0, metavar="MS", help="pause before each call, as between an agent's calls")
    parser.add_argument("--against", type=Path, metavar="TREE", help="also time this checkout's sandbox, interleaved (e.g. /work/main)")
    args = parser.parse_args()
    limits = sandbox.Limits(processes=None) if args.no_process_limit else sandbox.Limits()
    config = sandbox.SandboxConfig(limits=limits)
    workspace = Path(tempfile.mkdtemp(prefix="abhed-bench-"))
    (workspace / "sub").mkdir()
    if args.tree:
        make_tree(workspace, args.tree)
        guard_bench(workspace, args.tree, runs=min(args.runs, 30))
    report = sandbox.probe(config, workspace)
    print(f"Sandbox benchmark: uid {os.getuid()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; {args.runs} runs per path"
          + (f", {args.gap:g} ms pause before each call" if args.gap else ""))
    for line in report.details:
        print(f"  {line}")
    print(f"  mount operations per call: {mount_operations(config, workspace)} (bwrap's mount flags for this workspace)")
    failed = False
    against = Against(args.against.resolve(), workspace, args.no_process_limit) if args.against else None
    labels = [("raw", "raw bash -c"), ("none", "unconfined (backend none)"), ("bwrap", "sandboxed (backend bwrap)")]
    if against is not None:
        labels += [("against-none", f"  {args.against}: none"), ("against-bwrap", f"  {args.against}: bwrap")]
    try:
        for command in args.command or DEFAULT_COMMANDS:
            timings, cpu = bench(command, args.runs, workspace, config, args.gap / 1000, against)
            med = {path: statistics.median(values) for path, values in timings.items()}
            print(f"\ncommand: {command!r} (load now {os.getloadavg()[0]:.2f})")
            print(f"  {'path':<28}{'median ms':>10}{'p90 ms':>10}{'host cpu ms':>13}")
            for path, label in labels:
                host_cpu = f"{statistics.median(cpu[path]):>13.2f}" if path in cpu else ""
                print(f"  {label:<28}{med[path]:>10.2f}{percentile(timings[path], 0.9):>10.2f}{host_cpu}")
            if against is not None:
                before = med["against-bwrap"] - med["against-none"]
                after = med["bwrap"] - med["none"]
                print(f"  overhead of {args.against}: {before:.2f} ms; of this tree: {after:.2f} ms; change {after - before:+.2f} ms "
                      f"(ratio {after / before:.2f})")
                cpu_before, cpu_after = (statistics.median(cpu[f"{prefix}bwrap"]) - statistics.median(cpu[f"{prefix}none"])
                                         for prefix in ("against-", ""))
                print(f"  host cpu of bwrap over none: {args.against}: {cpu_before:.2f} ms; this tree: {cpu_after:.2f} ms; "
                      f"change {cpu_after - cpu_before:+.2f} ms")
            overhead = med["bwrap"] - med["none"]
            ratio = med["bwrap"] / med["none"]
            verdict = "OK" if overhead < GOAL_MS else "OVER GOAL"
            failed |= overhead >= GOAL_MS
            print(
                f"  sandbox overhead per call (median bwrap - median none): {overhead:.2f} ms, ratio {ratio:.1f}x, goal < {GOAL_MS:.0f} ms: {verdict}"
            )
    finally:
        if against is not None:
            against.close()
        shutil.rmtree(workspace, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
