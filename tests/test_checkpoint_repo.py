"""Issue 31, item 1: a checkpoint covers what a command can change in the repository, and undo puts it back.

A scratch repository with commits, a second branch, a tag, a staged change, an uncommitted change, an
untracked file and a stash entry. Each harmful command runs for real in the bwrap sandbox, between
a checkpoint and the call's end, as bash would run it; then `undo` goes back to that checkpoint.
Judged by the repository as git on the host reads it afterwards -- HEAD, every ref and its object,
the index (its bytes), the stash, the reflogs, every object the refs reach -- and every work-tree
file's bytes and mode: all exactly as before.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

import sandbox
from abhed.session import repostate
from abhed.session.checkpoint import Checkpoints, Shadow
from abhed.session.events import new_id
from abhed.session.store import SessionStore
from abhed.session.undo import undo

GIT_ENV = {"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/nonexistent",
           "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}


def git(ws: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=True,
                          env=GIT_ENV).stdout


def scratch_repository(ws: Path) -> None:
    """Commits on two branches, a tag, a stash entry, a staged change, an uncommitted one, an untracked file."""
    git(ws, "init", "-q", "-b", "main")
    git(ws, "config", "user.name", "Dev")
    git(ws, "config", "user.email", "dev@example.com")
    (ws / "src").mkdir()
    for i in range(3):
        (ws / "src" / "app.py").write_text(f"version = {i}\n")
        (ws / "README.md").write_text(f"readme {i}\n")
        git(ws, "add", "-A")
        git(ws, "commit", "-qm", f"commit {i}")
    git(ws, "tag", "v1", "HEAD~1")
    git(ws, "branch", "feature", "HEAD~2")
    (ws / "src" / "app.py").write_text("version = 'stashed'\n")
    git(ws, "stash", "push", "-q", "-m", "work in progress")
    (ws / "src" / "app.py").write_text("version = 'staged'\n")
    git(ws, "add", "src/app.py")
    (ws / "README.md").write_text("readme, changed but not staged\n")
    (ws / "notes.txt").write_text("untracked notes\n")
    (ws / "run.sh").write_text("#!/bin/sh\necho run\n")
    (ws / "run.sh").chmod(0o755)
    git(ws, "gc", "-q")  # the history packed, as in a clone


def state(ws: Path) -> dict[str, object]:
    """The workspace and its repository as host git sees them."""
    files = {}
    for directory, dirs, names in os.walk(ws):
        dirs[:] = sorted(d for d in dirs if not (directory == str(ws) and d == ".git"))
        for name in names:
            path = Path(directory, name)
            st = path.lstat()
            content = os.readlink(path).encode() if stat.S_ISLNK(st.st_mode) else path.read_bytes()
            files[str(path.relative_to(ws))] = (oct(stat.S_IMODE(st.st_mode)), hashlib.sha256(content).hexdigest())
    refs = git(ws, "for-each-ref", "--format=%(refname) %(objectname)")
    tips = [line.split()[1] for line in refs.splitlines()]
    return {
        "files": files,
        "HEAD": (ws / ".git" / "HEAD").read_text(),
        "head commit": git(ws, "rev-parse", "HEAD"),
        "refs": refs,
        "index": hashlib.sha256((ws / ".git" / "index").read_bytes()).hexdigest(),
        "staged": git(ws, "diff", "--cached", "--name-status"),
        "stash": git(ws, "stash", "list"),
        "reflog": git(ws, "reflog", "show", "--all", "--format=%H %gs"),
        "objects": git(ws, "rev-list", "--objects", "--reflog", "--all", *tips),
        "fsck": subprocess.run(["git", "-C", str(ws), "fsck", "--no-dangling", "--no-progress"], capture_output=True,
                               text=True, env=GIT_ENV).returncode,
    }


HARMFUL = [
    "git reset --hard HEAD~2",
    "git commit --amend -qm rewritten",
    "git branch -f feature HEAD",
    "git update-ref refs/heads/main HEAD~2",
    "git update-ref -d refs/heads/feature",
    "git stash drop -q",
    "git stash clear",
    "git checkout -- .",
    "git checkout-index -f -a",
    "git read-tree -u --reset HEAD~1",
    "git clean -fdx",
    "git clean -fdx && git reset --hard HEAD~1 && git stash clear",
    "sed -i s/version/VERSION/ src/app.py",
    ": > README.md",
    "git tag -d v1",
    "git branch -D feature",
    "git checkout -q feature",
    "git rm -q --cached src/app.py",
    "git add -A",
    "git commit -qam 'everything'",
    "git stash drop -q; git reflog expire --expire=now --all; git gc -q --prune=now",
    "git reset --hard HEAD~2; git reflog expire --expire=now --all; git prune --expire=now",
    "git commit -qam 'new work' && git reset -q --hard HEAD~1 && git prune --expire=now",
    "git symbolic-ref HEAD refs/heads/nowhere",
    "git notes add -m note HEAD",
    "git replace HEAD~1 HEAD~2 && git rev-parse HEAD",
    "rm -rf src .gitignore notes.txt",
    "chmod 000 run.sh; chmod 600 README.md",
    "ln -sfn /etc src",
    "git repack -a -d -q",
]


@pytest.mark.parametrize("command", HARMFUL)
def test_undo_puts_back_the_work_tree_and_the_repository_exactly(ws: Path, home: Path, command: str) -> None:
    scratch_repository(ws)
    before = state(ws)
    cp = Checkpoints(Shadow(home, ws))
    session = SessionStore(home).create(ws)
    checkpoint, _ = cp.before(session.id, new_id(), "bash", "main")
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws) as sb:
        sb.run(command, cwd=ws, timeout_s=60)
    cp.after(session.id, checkpoint)
    assert undo(cp, session, checkpoint.number, force=False, confirm=lambda plan: True).startswith(("Undone",
                                                                                                    "Nothing to undo"))
    after = state(ws)
    assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}


def test_a_pack_cannot_be_replaced_or_deleted_from_the_sandbox_and_gc_says_so(ws: Path) -> None:
    scratch_repository(ws)
    packs = sorted((ws / ".git" / "objects" / "pack").iterdir())
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in packs}
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws) as sb:
        result = sb.run("git gc --prune=now; echo gc=$?; rm -f .git/objects/pack/*; echo x > .git/objects/pack/new",
                        cwd=ws, timeout_s=60)
    assert "gc=0" not in result.output
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(
        (ws / ".git" / "objects" / "pack").iterdir())} == digest


def test_a_loose_object_a_prune_deleted_comes_back_and_a_planted_one_is_not_copied(ws: Path, home: Path) -> None:
    scratch_repository(ws)
    (ws / "extra.txt").write_text("only in a loose object\n")
    blob = git(ws, "hash-object", "-w", "extra.txt").strip()
    git(ws, "update-ref", "refs/keep/extra", blob)
    fake = ws / ".git" / "objects" / "ab" / ("c" * 38)
    fake.parent.mkdir(exist_ok=True)
    fake.write_bytes(b"not the object its name says")
    shadow = Shadow(home, ws)
    cp = Checkpoints(shadow)
    session = SessionStore(home).create(ws)
    checkpoint, _ = cp.before(session.id, new_id(), "bash", "main")
    assert not (shadow.dir / "repo-objects" / "ab" / ("c" * 38)).exists()
    assert (shadow.dir / "repo-objects" / blob[:2] / blob[2:]).exists()
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws) as sb:
        sb.run("git update-ref -d refs/keep/extra && git prune --expire=now", cwd=ws, timeout_s=60)
    cp.after(session.id, checkpoint)
    assert subprocess.run(["git", "-C", str(ws), "cat-file", "-e", blob], env=GIT_ENV).returncode != 0
    undo(cp, session, checkpoint.number, force=False, confirm=lambda plan: True)
    assert git(ws, "cat-file", "blob", blob) == "only in a loose object\n"
    assert git(ws, "rev-parse", "refs/keep/extra").strip() == blob


def test_an_unchanged_repository_adds_nothing_to_a_checkpoint(ws: Path, home: Path) -> None:
    scratch_repository(ws)
    shadow = Shadow(home, ws)
    first, capture = shadow.snapshot("s", "before", {"call": "1", "tool": "bash"})
    second, again = shadow.snapshot("s", "before", {"call": "2", "tool": "bash"})
    assert capture.repo and again.repo == capture.repo and capture.not_covered == []
    names = shadow.git("ls-tree", "-r", "--name-only", capture.repo).decode().split()
    assert {"HEAD", "index", "packed-refs", "logs/HEAD", "logs/refs/stash"} <= set(names)
    assert not any(n.startswith(("objects/", "hooks/", "info/")) or n == "config" for n in names)


def test_the_human_s_commit_between_two_calls_is_not_overwritten_without_force(ws: Path, home: Path) -> None:
    scratch_repository(ws)
    cp = Checkpoints(Shadow(home, ws))
    session = SessionStore(home).create(ws)
    checkpoint, _ = cp.before(session.id, new_id(), "bash", "main")
    (ws / "notes.txt").write_text("the agent's\n")
    cp.after(session.id, checkpoint)
    git(ws, "commit", "-qm", "the human's own commit")  # on the host, between calls
    from abhed.session.checkpoint import UndoRefused
    with pytest.raises(UndoRefused) as refused:
        undo(cp, session, checkpoint.number, force=False, confirm=lambda plan: True)
    assert ".git/refs/heads/main" in refused.value.paths or ".git/logs/HEAD" in refused.value.paths


def test_a_repository_changing_while_it_is_captured_costs_no_checkpoint(ws: Path, home: Path) -> None:
    """A `git gc` packing the loose objects while a snapshot reads them (git commit starts one in the
    background): entries vanish between the listing and the read, and the snapshot goes on."""
    scratch_repository(ws)
    for i in range(300):
        (ws / f"f{i}.txt").write_text(f"{i}\n")
    git(ws, "add", "-A")
    shadow = Shadow(home, ws)
    gc = subprocess.Popen(["git", "-C", str(ws), "gc", "-q", "--prune=now"], env=GIT_ENV)
    try:
        for round_ in range(20):
            shadow.snapshot("s", "before", {"call": str(round_), "tool": "bash"})
    finally:
        gc.wait()
    snap, capture = shadow.snapshot("s", "before", {"call": "last", "tool": "bash"})
    assert capture.repo


def test_what_checkpoints_leave_out_and_a_call_changed_is_named_in_the_observation_and_the_list(ws: Path,
                                                                                                home: Path) -> None:
    from abhed.gate.approval import Gate, Policy
    from abhed.session.undo import rows, table
    from abhed_testing import Tools
    scratch_repository(ws)
    (ws / ".gitignore").write_text("build/\n*.log\n")
    (ws / "build").mkdir()
    for i in range(5):
        (ws / "build" / f"out{i}.o").write_text(f"object {i}\n")
    (ws / "server.log").write_text("log\n")
    (ws / "node_modules" / "left").mkdir(parents=True)  # checkpoints.exclude by default
    (ws / "node_modules" / "left" / "index.js").write_text("module.exports = 1\n")
    (ws / "big.bin").write_bytes(b"x" * 4096)
    t = Tools(ws, home, gate=Gate(Policy.create("auto", [], [], ws), invoked_by_human=True, confirmed=True))
    t.ctx.checkpoints = Checkpoints(Shadow(home, ws, max_file_bytes=1024,
                                           exclude=("node_modules", "target", "dist", "__pycache__", ".abhed")))
    result = t("bash", command="rm -rf build node_modules/left; echo more >> server.log; : > big.bin; "
                               "echo fine > notes.txt", description="clean")
    assert not result.is_error, result.content
    assert ("this call changed what checkpoints do not cover (ignored, excluded or too large), which undo cannot "
            "bring back: big.bin (1 changed); build/ (6 deleted); node_modules/ (2 deleted); server.log (1 changed).]"
            ) in result.content
    listing = table(rows(t.ctx.checkpoints, t.session), t.session.id)
    assert "      cannot be undone: big.bin (1 changed); build/ (6 deleted)" in listing
    quiet = t("bash", command="echo again > notes.txt", description="covered only")
    assert "checkpoints do not cover" not in quiet.content


def test_what_a_snapshot_leaves_out_names_the_repository_s_state_first_then_the_work_tree(
        ws: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The .git walk runs beside the work tree's reads and ends after them; what each left out is
    named in the same order all the same (deterministic), and handed to the survey."""
    scratch_repository(ws)
    (ws / ".git" / "big-state").write_bytes(b"s" * 100_000)  # over the state files' limit below
    (ws / "big.bin").write_bytes(b"b" * 100_000)  # over checkpoints.max_file_bytes below
    monkeypatch.setattr(repostate.RepoState.capture, "__defaults__", (50_000,))
    shadow = Shadow(home, ws, max_file_bytes=50_000)
    _snap, capture = shadow.snapshot("s", "before", {"call": "1", "tool": "bash"})
    assert [item.split(" ")[0] for item in capture.not_covered] == [".git/big-state", "big.bin"]
    assert [item.split(" ")[0] for item in capture.left_out] == [".git/big-state", "big.bin"]
