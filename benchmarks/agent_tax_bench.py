#!/usr/bin/env python3
"""The agent's tax: each tool call as the agent makes it, beside the bare operation, in one run (issue 34).

    .venv/bin/python benchmarks/agent_tax_bench.py                      # 1,000-file tree, then Linux 6.1
    .venv/bin/python benchmarks/agent_tax_bench.py --skip-kernel --repeat 3
    .venv/bin/python benchmarks/agent_tax_bench.py --only grep --only bash

Replays an agent-like sequence in this process, through abhed/agent/dispatch.py as the agent loop calls
it: a real session store, checkpoints on, the bwrap sandbox, approval mode auto (nothing asks). Two
git repositories, each copied fresh into a temporary workspace with a fresh ABHED_HOME for every
repeat, so that the first call that changes the workspace really takes its first checkpoint (the
copy's index refreshed and its files a few seconds old, as a user's repository is). The session
starts its warm-up as `abhed run` does (tools/warmup.py: the first checkpoint and the sandbox, while
the model takes its first turn), so the first bash call is measured twice: at once after the session
opened (with --only bash: the worst case, it waits for the whole warm-up) and after --turn seconds:

  small   a generated tree of --files files (default 1,000; seeded, so every run gets the same tree):
          C, headers, Python, Go, JavaScript, Markdown, Makefiles and JSON in nested directories, a
          .gitignore and a few ignored build outputs, committed once.
  kernel  benchmarks/corpus/linux-6.1-git: Linux 6.1 (Debian's linux-source-6.1, the top .gitignore
          made the upstream one) committed once. Made here when missing, from linux-source-6.1
          (grep_bench.ensure_corpus fetches that); --skip-kernel leaves it out.

The sequence, each kind --calls times unless said (its rows; the bare operation beside each):
  grep   files_with_matches, content, count, on the root and on drivers/   rg -l / rg -n / rg -c
  glob   `**/*.c`                                                         rg --files --sortr modified -g '*.c'
  read   one source file                                                  a Python read of it
  bash   `env true`, the first call of the session (cold: the workspace's bash -c 'env true' in the bwrap
         first checkpoint, the sandbox's start), once per repeat          the sandbox uses (sandbox/bwrap.py)
  bash   the same first call in another fresh workspace, --turn seconds   the same
         after the session opened (a model's first turn; default 3)
  bash   `env true` again, 2 x --calls times (warm)                       the same
  bash   `true`: provably read-only, so no checkpoint (the sandbox alone) bash -c true in that bwrap
  edit   a one-line edit of a tracked file (read first)                   a Python read, replace, write
  write  a new 4 KB file                                                  a Python write
  bash   a command that appends to 3 tracked files and creates one        the same command in that bwrap
  undo   of that command (abhed.session.undo, as /undo does)              a Python restore of the files
Bare operations that write work on copies outside the workspace (else they would be changes made by
"someone else" for the next checkpoint and undo), so the bare bash that changes files runs in a bwrap
whose workspace is that copy. The bare bwrap makes its own network namespace (the sandbox lends one
from a pool as root): it pays bwrap's whole start.

Printed per tree: a table of the medians (over --repeat fresh workspaces, and the calls within each)
of Abhed's wall and CPU time (this process and the children it reaped: bwrap, git, rg) beside the bare
operation's, their ratios, and what Abhed adds (wall difference); the load average before and after
each table. The script never asserts times.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import resource
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import grep_bench  # noqa: E402
from abhed.agent import dispatch  # noqa: E402
from abhed.files.paths import PathPolicy  # noqa: E402
from abhed.session.gitindex import RACY_S  # noqa: E402
from abhed.gate.approval import Gate, Policy  # noqa: E402
from abhed.session import config  # noqa: E402
from abhed.session import undo as undoing  # noqa: E402
from abhed.session.checkpoint import from_settings  # noqa: E402
from abhed.session.store import SessionStore  # noqa: E402
from abhed.tools.base import ToolContext  # noqa: E402
from abhed.tools import warmup  # noqa: E402
from sandbox import launcher  # noqa: E402
from sandbox.bwrap import bwrap_argv  # noqa: E402
from sandbox.seccomp import syscall_filter  # noqa: E402

KERNEL_GIT = grep_bench.CORPUS / "linux-6.1-git"
MAY_CHANGE = "env true"  # a bash command that changes nothing, yet is checkpointed first (see sequence)
# A model's first turn before it calls bash: a self-hosted model reads the system prompt and the tools
# (some 10,000 tokens) and writes its first call; a few seconds, more with a grep or read first.
TURN_S = 3.0
KINDS = ("grep", "glob", "read", "bash", "edit", "write", "undo")
GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


# -- the trees ----------------------------------------------------------------------------------------------


def ensure_kernel_git() -> Path:
    """benchmarks/corpus/linux-6.1-git, made as the project's lead made it when missing: a copy of
    linux-source-6.1 with the upstream top .gitignore, committed once, moved into place when done."""
    if KERNEL_GIT.is_dir():
        return KERNEL_GIT
    grep_bench.ensure_corpus()
    tmp = KERNEL_GIT.with_name(KERNEL_GIT.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"making {KERNEL_GIT} (a copy of {grep_bench.TREE} committed once; a few minutes) ...", flush=True)
    subprocess.run(["cp", "-a", str(grep_bench.TREE), str(tmp)], check=True)
    grep_bench.upstream_gitignore(tmp)
    subprocess.run(["git", "init", "-q", str(tmp)], check=True, env=GIT_ENV)
    subprocess.run(["git", "-C", str(tmp), "add", "-A"], check=True, env=GIT_ENV)
    subprocess.run([*GIT, "-c", "gc.auto=0", "-C", str(tmp), "commit", "-q", "-m", "Linux 6.1 (Debian linux-source-6.1)"],
                   check=True, env=GIT_ENV)
    # Packed before it is used, not by the commit's automatic gc, which goes on in the background: a copy
    # taken meanwhile held half a pack, and its first checkpoint hashed every file (40 s, not 1.7).
    subprocess.run(["git", "-C", str(tmp), "gc", "-q"], check=True, env=GIT_ENV)
    tmp.rename(KERNEL_GIT)
    return KERNEL_GIT


WORDS = ("buffer", "device", "driver", "queue", "state", "count", "index", "power", "resume", "suspend", "lock",
         "node", "entry", "table", "config", "status", "event", "handle", "irq", "port", "frame", "packet")
LANGS = (  # (extension, weight, maker of one line from a random word pair and a number)
    (".c", 30, lambda a, b, n: f"static int {a}_{b}_{n}(struct {a} *p) {{ return p->{b} + {n}; }}"),
    (".h", 12, lambda a, b, n: f"#define {a.upper()}_{b.upper()}_{n} 0x{n:04x}"),
    (".py", 18, lambda a, b, n: f"def {a}_{b}_{n}(self, {b}):\n    return self.{a} + {b} * {n}"),
    (".go", 10, lambda a, b, n: f"func {a.title()}{b.title()}{n}(x int) int {{ return x + {n} }}"),
    (".js", 10, lambda a, b, n: f"export function {a}{b.title()}{n}(x) {{ return x.{b} ?? {n}; }}"),
    (".md", 6, lambda a, b, n: f"The {a} {b} keeps {n} entries; see `{a}_{b}`."),
    (".json", 4, lambda a, b, n: f'  "{a}_{b}_{n}": {n},'),
)
TOPS = ("drivers", "src", "lib", "include", "tools", "docs", "tests", "net", "fs")


def make_tree(root: Path, files: int, seed: int = 34) -> Path:
    """A deterministic git repository of `files` committed source files in nested directories; about
    5% of them mention PM_RESUME (the grep rows' pattern). Plus a .gitignore and ignored build output."""
    rng = random.Random(seed)
    exts = [ext for ext, weight, _ in LANGS for _ in range(weight)]
    makers = {ext: make for ext, _, make in LANGS}
    dirs = [Path(top) for top in TOPS]
    for _ in range(max(8, files // 12)):  # nested directories, up to 4 deep
        parent = rng.choice(dirs)
        if len(parent.parts) < 4:
            dirs.append(parent / f"{rng.choice(WORDS)}{rng.randint(0, 99)}")
    for n in range(files - 2):  # Makefile and .gitignore make up the rest
        ext = rng.choice(exts)
        where = root / (dirs[0] if n < files // 5 else rng.choice(dirs))  # drivers/ holds a fifth of the tree
        where.mkdir(parents=True, exist_ok=True)
        body = [makers[ext](rng.choice(WORDS), rng.choice(WORDS), rng.randint(0, 9999))
                for _ in range(rng.randint(10, 300))]
        if rng.random() < 0.05:
            body.insert(rng.randrange(len(body)), makers[ext]("pm", "resume", n).replace("pm_resume", "PM_RESUME"))
        (where / f"{rng.choice(WORDS)}_{n}{ext}").write_text("\n".join(body) + "\n")
    (root / "Makefile").write_text("all:\n\tcc -o build/app $(wildcard src/*.c)\n")
    (root / ".gitignore").write_text("build/\n*.o\nnode_modules/\n*.log\n")
    for n in range(20):  # ignored: neither grep nor glob may list them
        (root / "build").mkdir(exist_ok=True)
        (root / "build" / f"obj{n}.o").write_bytes(bytes(rng.randrange(256) for _ in range(2048)))
        (root / f"run{n}.log").write_text("PM_RESUME in a log\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=GIT_ENV)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=GIT_ENV)
    subprocess.run([*GIT, "-C", str(root), "commit", "-q", "-m", "generated"], check=True, env=GIT_ENV)
    return root


# -- timing -------------------------------------------------------------------------------------------------


def timed(action: Callable[[], Any]) -> tuple[float, float]:
    """(wall s, CPU s of this process and of the children reaped meanwhile)."""
    before = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    started = time.perf_counter()
    action()
    wall = time.perf_counter() - started
    after = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return wall, sum(b.ru_utime - a.ru_utime + b.ru_stime - a.ru_stime for a, b in zip(before, after))


@dataclasses.dataclass
class Row:
    """One call kind: Abhed's samples and the bare operation's, (wall, cpu) each."""

    kind: str
    label: str
    bare: str
    abhed: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    native: list[tuple[float, float]] = dataclasses.field(default_factory=list)


class Rows(dict):
    def add(self, key: str, kind: str, label: str, bare: str, ours: tuple[float, float],
            theirs: tuple[float, float]) -> None:
        row = self.setdefault(key, Row(kind, label, bare))
        row.abhed.append(ours)
        row.native.append(theirs)
        # On stderr, so a kernel run that takes minutes shows where it is (the tables go to stdout).
        print(f"  {label}: {ms(ours[0])} (bare {ms(theirs[0])})", file=sys.stderr, flush=True)


# -- the agent's side ---------------------------------------------------------------------------------------


class Agent:
    """A session as `abhed run --mode auto` makes one (cli/launch.py), calling tools through dispatch."""

    def __init__(self, workspace: Path, home: Path) -> None:
        self.settings = config.load({"approval": {"mode": "auto"}}, env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
        checkpoints = from_settings(self.settings, workspace)
        if checkpoints is None:
            raise SystemExit("checkpoints are off (no git binary?): the benchmark measures them, install git")
        self.session = SessionStore(home).create(workspace)
        self.ctx = ToolContext(self.session, self.settings, PathPolicy.create(workspace, self.settings.allowed_roots),
                               checkpoints=checkpoints)
        self.gate = Gate(Policy.from_settings(self.settings, workspace, checkpoints=True))
        warmup.start(self.ctx)  # as cli/launch.py does when the session opens

    def call(self, name: str, **args: Any) -> dict[str, Any]:
        """The call's metadata (its checkpoint's facts among them); SystemExit when it failed. As the
        agent loop makes a reply's call (loop._call, then its one log.sync() before the model sees the
        results): the action synced before the tool runs, the observation made durable by that sync."""
        result = dispatch.call(self.ctx, name, json.dumps(args), self.gate, durable=False)
        self.session.log.sync()
        if result.is_error:
            raise SystemExit(f"the {name} call {args} failed (the benchmark would time an error):\n{result.content}")
        return result.metadata

    def undo(self) -> str:
        assert self.ctx.checkpoints is not None
        return undoing.undo(self.ctx.checkpoints, self.session, None, force=False, confirm=lambda plan: True,
                            changes=dispatch.changes_of(self.ctx))  # as chat's /undo: the sandbox's change set

    def close(self) -> None:
        self.ctx.close()


class BareBwrap:
    """`bash -c COMMAND` in the bwrap the sandbox uses: the session's own bwrap plan (sandbox/bwrap.py),
    recorded at its first command, with fresh descriptors and without the launcher's cgroups, rlimits,
    netns pool, output collection and wrapper script."""

    def __init__(self) -> None:
        self.plan: Any = None
        self.seccomp = syscall_filter()
        self._real = launcher.bwrap_argv

    def __enter__(self) -> BareBwrap:
        def recording(plan: Any) -> list[str]:
            if self.plan is None:
                self.plan = plan
            return self._real(plan)
        launcher.bwrap_argv = recording
        return self

    def __exit__(self, *exc: object) -> None:
        launcher.bwrap_argv = self._real

    def run(self, command: str, workspace: Path | None = None) -> None:
        if self.plan is None:
            raise SystemExit("no bwrap command line was seen: is the sandbox backend bwrap?")
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        seccomp_r, seccomp_w = os.pipe()
        os.write(block_w, b"g")  # go at once: nothing to set up in between
        os.write(seccomp_w, self.seccomp)
        os.close(block_w)
        os.close(seccomp_w)
        plan = dataclasses.replace(self.plan, info_fd=info_w, block_fd=block_r, seccomp_fd=seccomp_r, in_netns=False,
                                   command=(self.plan.command[0], "-c", command))
        if workspace is not None:  # a copy elsewhere: its protected paths are the real workspace's
            plan = dataclasses.replace(plan, workspace=workspace, cwd=workspace, protected=())
        try:
            done = subprocess.run(bwrap_argv(plan), pass_fds=(info_w, block_r, seccomp_r), env={}, cwd="/",
                                  start_new_session=True, stdin=subprocess.DEVNULL, capture_output=True)
        finally:
            for fd in (info_r, info_w, block_r, seccomp_r):
                os.close(fd)
        if done.returncode != 0:
            raise SystemExit(f"bare bwrap {command!r} failed ({done.returncode}): {done.stderr.decode()[-500:]}")


# -- the sequence -------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Tree:
    name: str
    source: Path
    pattern: str  # what the grep rows search for
    subdir: str  # the grep rows' second root
    read: str  # a source file to read and edit (relative)
    changed: tuple[str, ...]  # tracked files the changing bash appends to


def rg(*args: str) -> Callable[[], None]:
    binary = grep_bench.find_rg()
    return lambda: subprocess.run([binary, "--no-config", *args], capture_output=True, check=False)


def python_read(path: Path) -> Callable[[], None]:
    return lambda: path.read_bytes()


def python_write(path: Path, data: bytes) -> Callable[[], None]:
    return lambda: path.write_bytes(data)


def python_edit(path: Path, old: bytes, new: bytes) -> Callable[[], None]:
    return lambda: path.write_bytes(path.read_bytes().replace(old, new, 1))


def interleaved(rows: Rows, n: int, key: str, kind: str, label: str, bare: str, ours: Callable[[], Any],
                theirs: Callable[[], Any]) -> None:
    """`n` samples of both sides, taking turns at going first (the page cache favours the second)."""
    for i in range(n):
        if i % 2:
            b, a = timed(theirs), timed(ours)
        else:
            a, b = timed(ours), timed(theirs)
        rows.add(key, kind, label, bare, a, b)


def one_workspace(tree: Tree, scratch: Path, only: set[str], calls: int, rows: Rows, turn_s: float = 0.0) -> None:
    """One fresh copy of the tree and a fresh ABHED_HOME, the whole sequence on it; with `turn_s`, only
    the first bash call, that long after the session opened (a model's first turn)."""
    ws, home, bare = scratch / "ws", scratch / "home", scratch / "bare"
    subprocess.run(["cp", "-a", str(tree.source), str(ws)], check=True)
    ws = ws.resolve()
    # A user's repository as the user has it: the copy gave every file a new inode and ctime, which
    # the index records, so refresh it as the user's next `git status` would (a checkpoint trusts
    # only entries whose stat matches); and older than the seed's window for fresh files (gitindex.RACY_S
    # and a second: seed.py), since a file changed in the last seconds is read again by every snapshot
    # until it settles (files seconds old are a copy's artefact, not a user's repository).
    subprocess.run(["git", "-C", str(ws), "update-index", "-q", "--refresh"], check=False)
    # Nor is a user's repository a gigabyte of pages still to be written: unsynced, the copy's writeback
    # starts 30 s later (vm.dirty_expire_centisecs), in the middle of the calls timed, on their cores.
    os.sync()
    time.sleep(RACY_S + 1.2)
    bare.mkdir()
    agent = Agent(ws, home)
    with BareBwrap() as box:
        try:
            if turn_s:
                time.sleep(turn_s)
                first_bash(agent, box, rows, "bash cold turn", f"first call {turn_s:g} s after the session opened")
            else:
                sequence(agent, box, tree, ws, bare, only, calls, rows)
        finally:
            agent.close()


def sequence(agent: Agent, box: BareBwrap, tree: Tree, ws: Path, bare: Path, only: set[str], calls: int,
             rows: Rows) -> None:
    if "grep" in only:
        for where, root in (("root", ws), (tree.subdir + "/", ws / tree.subdir)):
            for mode, flag in (("files_with_matches", "-l"), ("content", "-n"), ("count", "-c")):
                interleaved(rows, calls, f"grep {mode} {where}", "grep", f"grep {mode}, {where}",
                            f"rg {flag}", lambda: agent.call("grep", pattern=tree.pattern, path=str(root),
                                                             output_mode=mode),
                            rg(flag, "-e", tree.pattern, str(root)))
    if "glob" in only:
        interleaved(rows, calls, "glob", "glob", "glob **/*.c", "rg --files --sortr modified",
                    lambda: agent.call("glob", pattern="**/*.c", path=str(ws)),
                    rg("--files", "--sortr", "modified", "-g", "*.c", str(ws)))
    target = ws / tree.read
    if "read" in only:
        interleaved(rows, calls, "read", "read", f"read {tree.read}", "Python read",
                    lambda: agent.call("read", path=str(target)), python_read(target))
    if not only & {"bash", "edit", "write", "undo"}:
        return
    # The first call that may change the workspace: its first checkpoint, and the sandbox's start.
    # `env true` changes nothing but is no provably read-only command (gate.approval.read_only_command),
    # so it gets a checkpoint as a build or a script would; a plain `true` gets none.
    # With --only bash it comes at once after the session opened: the warm-up (tools/warmup.py) has just begun.
    first_bash(agent, box, rows, "bash cold", "first call (cold)" if only & {"grep", "glob", "read"} else
               "first call at once after the session opened (cold)")
    if "bash" in only:
        interleaved(rows, 2 * calls, "bash warm", "bash", f"bash `{MAY_CHANGE}`, later calls",
                    f"bash -c '{MAY_CHANGE}' in bwrap",
                    lambda: agent.call("bash", command=MAY_CHANGE, description="again"), lambda: box.run(MAY_CHANGE))
        interleaved(rows, calls, "bash read-only", "bash", "bash `true` (read-only: no checkpoint)",
                    "bash -c true in bwrap", lambda: agent.call("bash", command="true", description="again"),
                    lambda: box.run("true"))
    if "edit" in only:
        agent.call("read", path=str(target))  # edit wants the file read first
        text = target.read_text()
        first = next(line for line in text.splitlines() if line.strip() and text.count(line) == 1)
        copy = bare / "edited"
        shutil.copyfile(target, copy)
        for i in range(calls):
            old, new = (first if i == 0 else f"{first} /* bench {i} */"), f"{first} /* bench {i + 1} */"
            interleaved(rows, 1, "edit", "edit", "edit (one line)", "Python read+replace+write",
                        lambda: agent.call("edit", path=str(target), old_string=old, new_string=new),
                        python_edit(copy, old.encode(), new.encode()))
    if "write" in only:
        data = "".join(f"int bench_{n}(void) {{ return {n}; }}\n" for n in range(128))
        for i in range(calls):
            interleaved(rows, 1, "write", "write", "write (new 4 KB file)", "Python write",
                        lambda: agent.call("write", path=str(ws / f"bench_write_{i}.c"), content=data),
                        python_write(bare / f"bench_write_{i}.c", data.encode()))
    if not only & {"bash", "undo"}:
        return
    command = "".join(f"echo '// bench' >> {path}; " for path in tree.changed) + "echo new > bench_new.txt"
    for path in tree.changed:  # the bare bwrap's workspace: a copy of what the command touches
        (bare / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ws / path, bare / path)
    originals = {path: (bare / path).read_bytes() for path in tree.changed}

    def restore() -> None:
        for path, data in originals.items():
            (bare / path).write_bytes(data)
        (bare / "bench_new.txt").unlink()

    for i in range(calls):
        changing = timed(lambda: agent.call("bash", command=command, description="change a few files"))
        rows.add("bash change", "bash", f"bash changing {len(tree.changed) + 1} files", "the same in bwrap", changing,
                 timed(lambda: box.run(command, workspace=bare)))
        undone = timed(agent.undo)
        rows.add("undo", "undo", "undo of that bash call", "Python restore", undone, timed(restore))


# -- the report ---------------------------------------------------------------------------------------------


def first_bash(agent: Agent, box: BareBwrap, rows: Rows, key: str, label: str) -> None:
    """The session's first call that may change the workspace: it must take checkpoint 1."""
    facts: dict[str, Any] = {}
    cold = timed(lambda: facts.update(agent.call("bash", command=MAY_CHANGE, description="first")))
    if facts.get("checkpoint", {}).get("number") != 1:
        raise SystemExit(f"the first `{MAY_CHANGE}` took no first checkpoint ({facts.get('checkpoint')}): the cold row "
                         "would not measure one; pick a command the gate does not prove read-only")
    rows.add(key, "bash", f"bash `{MAY_CHANGE}`, {label}", f"bash -c '{MAY_CHANGE}' in bwrap", cold,
             timed(lambda: box.run(MAY_CHANGE)))


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def report(tree: Tree, rows: Rows, files: int, repeat: int, load_before: str) -> None:
    print(f"\n{tree.name}: {tree.source} ({files:,} files tracked), medians over {repeat} fresh workspace"
          f"{'s' * (repeat != 1)}; load average {load_before} before, {load()} after")
    print("\n| call | n | Abhed wall | Abhed CPU | bare | bare wall | bare CPU | wall ratio | CPU ratio | Abhed adds |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for row in rows.values():
        aw, ac = (statistics.median(s[i] for s in row.abhed) for i in (0, 1))
        bw, bc = (statistics.median(s[i] for s in row.native) for i in (0, 1))
        print(f"| {row.label} | {len(row.abhed)} | {ms(aw)} | {ms(ac)} | {row.bare} | {ms(bw)} | {ms(bc)} | "
              f"{ratio(aw, bw)} | {ratio(ac, bc)} | {ms(aw - bw)} |", flush=True)


def ms(seconds: float) -> str:
    return f"{seconds:.2f} s" if abs(seconds) >= 1 else f"{seconds * 1000:.1f} ms"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b > 0 else "-"


def run_tree(tree: Tree, repeat: int, only: set[str], calls: int, tmp: Path | None, turn_s: float = 0.0) -> None:
    files = len(subprocess.run(["git", "-C", str(tree.source), "ls-files", "-z"], capture_output=True, check=True,
                               env=GIT_ENV).stdout.split(b"\0")) - 1
    print(f"\n== {tree.name}: copying it into a fresh workspace {repeat} time{'s' * (repeat != 1)} ...", flush=True)
    rows, load_before = Rows(), load()
    for _ in range(repeat):
        scratch = Path(tempfile.mkdtemp(prefix="abhed-tax-", dir=tmp))
        try:
            one_workspace(tree, scratch, only, calls, rows)
        finally:  # rm, not shutil.rmtree: several times faster on the kernel's 80,000 files
            subprocess.run(["rm", "-rf", "--one-file-system", str(scratch)], check=False)
        if "bash" in only and turn_s:  # the same first call, after a model's turn: another fresh workspace
            scratch = Path(tempfile.mkdtemp(prefix="abhed-tax-", dir=tmp))
            try:
                one_workspace(tree, scratch, only, calls, rows, turn_s)
            finally:
                subprocess.run(["rm", "-rf", "--one-file-system", str(scratch)], check=False)
    report(tree, rows, files, repeat, load_before)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="fresh workspaces per tree (default 1)")
    parser.add_argument("--calls", type=int, default=5, help="calls of each kind per workspace (default 5; warm "
                                                              "bash twice that)")
    parser.add_argument("--files", type=int, default=1000, help="files of the generated tree (default 1000)")
    parser.add_argument("--only", action="append", choices=KINDS, help="only this call kind (repeatable)")
    parser.add_argument("--skip-kernel", action="store_true", help="only the generated tree")
    parser.add_argument("--turn", type=float, default=TURN_S, help="seconds of a model's first turn before the "
                        f"first bash call of another fresh workspace (default {TURN_S:g}; 0: no such row)")
    parser.add_argument("--tmp", type=Path, help="where the workspaces are copied (default: the system's temp)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill by TERM still removes the copies
    only = set(args.only or KINDS)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, uid {os.getuid()}, load {load()}, "
          f"rg {grep_bench.find_rg()}")
    made = Path(tempfile.mkdtemp(prefix="abhed-tax-tree-", dir=args.tmp))
    try:
        small = make_tree(made / f"tree-{args.files}", args.files)
        sources = sorted(str(p.relative_to(small)) for p in small.rglob("*") if p.suffix in (".c", ".py", ".h", ".go"))
        read = next(path for path in sources if path.startswith("drivers/"))
        run_tree(Tree(f"generated tree of {args.files:,} files", small, "PM_RESUME", "drivers", read,
                      tuple(path for path in sources if path != read)[:3]), args.repeat, only, args.calls, args.tmp, args.turn)
    finally:
        shutil.rmtree(made, ignore_errors=True)
    if args.skip_kernel:
        return
    kernel = ensure_kernel_git()
    run_tree(Tree("Linux 6.1 (git, one commit)", kernel, "PM_RESUME", "drivers", "drivers/usb/core/hub.c",
                  ("drivers/usb/core/hub.h", "kernel/sched/core.c", "README")), args.repeat, only, args.calls,
             args.tmp, args.turn)


if __name__ == "__main__":
    main()
