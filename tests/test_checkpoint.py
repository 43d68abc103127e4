"""Checkpoints and undo (issue 16): real git, real files, the real `abhed` command line.

Judged by what is on disk afterwards (bytes, modes, the project's own .git), never by what a
command printed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from abhed.agent import dispatch
from abhed.session import checkpoint
from abhed.gate.approval import Gate, Policy, read_only_command
from abhed.session.checkpoint import Shadow, UndoRefused
from abhed.session.events import CheckpointEvent, new_id
from abhed.session.store import SessionStore
from abhed.session.undo import undo
from abhed_testing import Tools, abhed


def tree_state(root: Path, skip: tuple[str, ...] = (".abhed", ".git")) -> dict[str, tuple[str, int, bytes]]:
    """Every entry below root: kind, exact permission bits, content (or link target); not what the
    sandbox's protection leaves (`.abhed/`, the `.git` placeholder file or directory)."""
    found = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip)
        for name in dirs + [f for f in files if f not in skip]:
            path = Path(directory, name)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", 0, os.readlink(path).encode())
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", 0, b"")  # git keeps no directory modes
            else:
                found[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return found


def dir_digest(root: Path) -> str:
    """A hash over every file of a directory (names, modes, bytes): to show it was not touched."""
    h = hashlib.sha256()
    for directory, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            path = Path(directory, name)
            h.update(str(path.relative_to(root)).encode() + oct(path.lstat().st_mode).encode())
            h.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
    return h.hexdigest()


def populate(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "lib").mkdir()
    (ws / "src" / "lib" / "a.py").write_bytes(b"def a():\n    return 1\n")
    (ws / "src" / "lib" / "data.bin").write_bytes(bytes(range(256)) * 4 + b"\r\n\0tail")
    (ws / "src" / "secret.txt").write_text("keep me private\n")
    (ws / "src" / "secret.txt").chmod(0o600)
    (ws / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (ws / "run.sh").chmod(0o755)
    (ws / "notes.md").write_text("line 1\r\nline 2\r\n")
    (ws / "link").symlink_to("src/lib/a.py")


def shadow(home: Path, ws: Path, **kw) -> Shadow:
    return Shadow(home, ws, **kw)


# -- the scripted session of the issue: bash deletes a directory, rewrites a file, creates others --


def test_undo_restores_what_a_bash_command_did_byte_for_byte(ws: Path, home: Path) -> None:
    populate(ws)
    before = tree_state(ws)
    script = ("rm -r src/lib && printf 'rewritten' > notes.md && chmod 640 notes.md && mkdir out && "
              "echo made > out/new.txt && echo more > extra.txt && ln -sf notes.md link")
    run = abhed("tool", "bash", json.dumps({"command": script, "description": "reshape"}), "--session", "s1",
                "--workspace", str(ws), "--confirm")
    assert run.returncode == 0, run.stderr
    assert not (ws / "src" / "lib").exists() and (ws / "extra.txt").exists()  # the command really ran
    after = tree_state(ws)

    listing = abhed("checkpoints", "s1")
    assert listing.returncode == 0, listing.stderr
    assert "   1  " in listing.stdout and "bash rm -r src/lib" in listing.stdout
    assert "abhed undo --to N s1" in listing.stdout

    done = abhed("undo", "s1", "--yes")
    assert done.returncode == 0, done.stderr
    assert "restore notes.md" in done.stdout and "recreate src/lib/a.py" in done.stdout
    assert "delete extra.txt" in done.stdout and "delete out/new.txt" in done.stdout
    assert tree_state(ws) == before  # content, modes (0600, 0755), the symlink: all as they were

    again = abhed("undo", "s1", "--yes")  # the undo is itself a checkpoint: taking it back redoes the command
    assert again.returncode == 0, again.stderr
    assert "checkpoint 2" in again.stdout
    assert tree_state(ws) == after


def test_undo_to_an_earlier_checkpoint_reverts_every_later_call(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("one\n")
    base = tree_state(ws)
    for n, command in enumerate(["echo two > a.txt", "echo three > b.txt", "rm a.txt"], start=1):
        run = abhed("tool", "bash", json.dumps({"command": command, "description": f"step {n}"}), "--session", "s",
                    "--workspace", str(ws), "--mode", "auto")
        assert run.returncode == 0 and "Not run" not in run.stdout, run.stdout + run.stderr
    middle = abhed("undo", "s", "--to", "2", "--yes")
    assert middle.returncode == 0, middle.stderr
    assert (ws / "a.txt").read_text() == "two\n" and not (ws / "b.txt").exists()
    first = abhed("undo", "s", "--to", "1", "--yes")
    assert first.returncode == 0, first.stderr
    assert tree_state(ws) == base


def test_undo_asks_first_and_a_no_changes_nothing(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("one\n")
    abhed("tool", "write", json.dumps({"path": str(ws / "b.txt"), "content": "new\n"}), "--session", "s",
          "--workspace", str(ws))
    asked = abhed("undo", "s", input="")  # no terminal to answer on
    assert asked.returncode == 1
    assert "delete b.txt" in asked.stdout and "pass --yes" in asked.stderr
    assert (ws / "b.txt").read_text() == "new\n"


def test_undo_without_checkpoints_and_of_a_missing_number_say_what_to_do(ws: Path, home: Path) -> None:
    abhed("tool", "read", json.dumps({"path": str(ws)}), "--session", "s", "--workspace", str(ws))
    none = abhed("undo", "s", "--yes")
    assert none.returncode == 2 and "Session s has no checkpoints" in none.stderr
    abhed("tool", "write", json.dumps({"path": str(ws / "b.txt"), "content": "x"}), "--session", "s",
          "--workspace", str(ws))
    missing = abhed("undo", "s", "--to", "7", "--yes")
    assert missing.returncode == 2
    assert "no checkpoint 7 in session s (it has 1 to 1)" in missing.stderr and "abhed checkpoints s" in missing.stderr
    nobody = abhed("undo", "--yes", cwd=ws.parent)
    assert nobody.returncode == 2 and f"No session works in {ws.parent}" in nobody.stderr


# -- the human's changes are never overwritten silently ------------------------------------------


def test_undo_refuses_to_overwrite_what_the_human_changed_since_and_lists_it(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("agent's start\n")
    abhed("tool", "bash", json.dumps({"command": "echo agent > a.txt; echo agent > b.txt", "description": "x"}),
          "--session", "s", "--workspace", str(ws), "--mode", "auto")
    (ws / "a.txt").write_text("the human's work\n")  # after the agent's call
    refused = abhed("undo", "s", "--yes")
    assert refused.returncode == 1
    assert "1 of the files it would change were changed by someone other than" in refused.stderr
    assert "  a.txt" in refused.stderr and "--force" in refused.stderr and "b.txt" not in refused.stderr
    assert (ws / "a.txt").read_text() == "the human's work\n" and (ws / "b.txt").exists()  # nothing changed
    forced = abhed("undo", "s", "--yes", "--force")
    assert forced.returncode == 0, forced.stderr
    assert (ws / "a.txt").read_text() == "agent's start\n" and not (ws / "b.txt").exists()


def test_a_human_change_between_two_calls_is_protected_too(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("1\n")
    call = ["--session", "s", "--workspace", str(ws), "--mode", "auto"]
    abhed("tool", "bash", json.dumps({"command": "echo agent > b.txt", "description": "x"}), *call)
    (ws / "a.txt").write_text("human\n")
    abhed("tool", "bash", json.dumps({"command": "echo agent > c.txt", "description": "x"}), *call)
    refused = abhed("undo", "s", "--to", "1", "--yes")
    assert refused.returncode == 1 and "  a.txt" in refused.stderr
    ok = abhed("undo", "s", "--to", "2", "--yes")  # the human's change came before checkpoint 2: not in the way
    assert ok.returncode == 0, ok.stderr
    assert (ws / "a.txt").read_text() == "human\n" and not (ws / "c.txt").exists() and (ws / "b.txt").exists()


# -- what is and is not covered -------------------------------------------------------------------


def test_ignored_excluded_large_files_and_nested_repositories_are_left_out_and_named(ws: Path, home: Path) -> None:
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "debug.log").write_text("ignored\n")
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "dep.js").write_text("x")
    (ws / "big.bin").write_bytes(b"\0" * 2000)
    (ws / "small.txt").write_text("s")
    subprocess.run(["git", "init", "-q", str(ws / "vendor")], check=True)
    (ws / "vendor" / "v.c").write_text("v")
    s = shadow(home, ws, exclude=("node_modules",), max_file_bytes=1000)
    snap, capture = s.snapshot("s", "before", {"call": "c", "tool": "bash"})
    files = s.git("ls-tree", "-r", "--name-only", snap.tree).decode().split()
    assert files == [".gitignore", "small.txt"]
    assert capture.not_covered == ["vendor/ (a nested git repository: commit or copy it yourself)",
                                   "big.bin (2,000 bytes, over checkpoints.max_file_bytes)"]


def test_the_checkpoint_event_names_files_not_covered(ws: Path, home: Path) -> None:
    (ws / "big.bin").write_bytes(b"\0" * 2000)
    t = Tools(ws, home)
    t.ctx.checkpoints = checkpoint.Checkpoints(shadow(home, ws, max_file_bytes=1000))
    result = t("write", path=str(ws / "a.txt"), content="x")
    assert result.metadata["checkpoint"]["number"] == 1 and result.metadata["checkpoint"]["not_covered"] == 1
    events = [e for e in t.session.log.load().events if isinstance(e, CheckpointEvent)]
    assert [(e.number, e.tool, e.not_covered) for e in events] == [
        (1, "write", ["big.bin (2,000 bytes, over checkpoints.max_file_bytes)"])]


def test_a_session_store_inside_the_workspace_is_not_snapshotted(ws: Path) -> None:
    (ws / "a.txt").write_text("a")
    home = ws / "my store"  # e.g. the workspace is the user's home directory
    s = shadow(home, ws)
    first, _ = s.snapshot("s", "before", {"call": "1", "tool": "bash"})
    second, _ = s.snapshot("s", "before", {"call": "2", "tool": "bash"})
    assert s.git("ls-tree", "-r", "--name-only", second.tree).decode().split() == ["a.txt"]
    assert first.tree == second.tree


# -- which calls are checkpointed ----------------------------------------------------------------


@pytest.mark.parametrize("line", ["ls -la", "cat a | grep x", "cd src && ls", "find . -name '*.py'", "wc -l a b",
                                  "cat a > /dev/null 2>&1", "bash -c 'cat x'", "git status"])
def test_read_only_command_lines_are_not_checkpointed(line: str) -> None:
    assert read_only_command(line)


@pytest.mark.parametrize("line", ["echo hi > f", "rm x", "python3 -c 'import shutil; shutil.rmtree(\"src\")'",
                                  "find . -delete", "find . -exec rm {} ;", "xargs rm", "ls; touch a", "$CMD",
                                  "echo $(rm -rf x)", "cat <(rm x)", "bash -c 'rm x'", "rg --pre ./x y", "git stash",
                                  "sort -o out in", "X=1 ls", "tree -o out", ""])
def test_every_other_command_line_is_checkpointed(line: str) -> None:
    assert not read_only_command(line)


def test_a_read_only_call_takes_no_checkpoint_and_a_change_takes_one(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    t = Tools(ws, home)
    t.ctx.checkpoints = checkpoint.Checkpoints(shadow(home, ws))
    t.ok("read", path=str(ws / "a.txt"))
    t.ok("glob", pattern="*")
    assert not [e for e in t.session.log.load().events if isinstance(e, CheckpointEvent)]
    t.ok("edit", path=str(ws / "a.txt"), old_string="a", new_string="b")
    t.ok("write", path=str(ws / "c.txt"), content="c")
    numbers = [e.number for e in t.session.log.load().events if isinstance(e, CheckpointEvent)]
    assert numbers == [1, 2]


@pytest.mark.parametrize("who", ["abhed run (auto mode, no human)", "abhed tool without --confirm",
                                 "a human who says no"])
def test_when_the_checkpoint_cannot_be_taken_the_change_needs_a_human(ws: Path, home: Path, who: str) -> None:
    gate = {"abhed run (auto mode, no human)": Gate(Policy.create("auto", [], [], ws)),
            "abhed tool without --confirm": Gate(Policy.create("auto", [], [], ws), invoked_by_human=True),
            "a human who says no": Gate(Policy.create("auto", [], [], ws), ask_human=lambda *a: False)}[who]
    t = Tools(ws, home, gate=gate)
    home.mkdir(parents=True, exist_ok=True)
    (home / "checkpoints").write_text("not a directory")  # the shadow repository cannot be created
    t.ctx.checkpoints = checkpoint.Checkpoints(shadow(home, ws))
    result = t("write", path=str(ws / "a.txt"), content="x")
    assert result.is_error and result.metadata["error_kind"] == dispatch.CHECKPOINT_FAILED
    assert "Not run: the checkpoint that lets this call be undone could not be taken (cannot use the shadow " in \
        result.content
    assert "A human must confirm running it without a checkpoint" in result.content
    assert "the next call tries again" in result.content and "checkpoints.enabled = false" in result.content
    assert not (ws / "a.txt").exists()


def test_a_human_may_run_a_call_without_its_checkpoint_and_the_next_call_tries_again(ws: Path, home: Path) -> None:
    asked = []
    gate = Gate(Policy.create("auto", [], [], ws), ask_human=lambda tool, args, verdict: asked.append(verdict) or True)
    t = Tools(ws, home, gate=gate)
    home.mkdir(parents=True, exist_ok=True)
    (home / "checkpoints").write_text("not a directory")
    t.ctx.checkpoints = checkpoint.Checkpoints(shadow(home, ws))
    result = t("write", path=str(ws / "a.txt"), content="x")
    assert not result.is_error and (ws / "a.txt").read_text() == "x"
    assert asked[0].destructive and "could not be taken" in asked[0].reason  # asked in auto mode, yes once only
    assert "ran without a checkpoint (cannot use the shadow repository" in result.content
    assert "it cannot be undone" in result.content
    (home / "checkpoints").unlink()  # the operator fixed the cause
    result = t("write", path=str(ws / "b.txt"), content="y")
    assert not result.is_error and len(asked) == 1 and result.metadata["checkpoint"]["number"] == 1


# -- a hostile workspace: the shadow repository's git runs nothing from it --------------------------


def test_workspace_filters_hooks_fsmonitor_and_attributes_run_nothing_and_change_no_byte(ws: Path, home: Path,
                                                                                           tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    evil = f"touch {marks}/ran-$$"
    with open(ws / ".git" / "config", "a") as config:
        config.write(f'[filter "evil"]\n\tclean = {evil}\n\tsmudge = {evil}\n\trequired = true\n'
                     f'[core]\n\tfsmonitor = {evil}\n\thooksPath = {ws}/.githooks\n'
                     f'[diff "evil"]\n\ttextconv = {evil}\n')
    hooks = ws / ".githooks"
    hooks.mkdir()
    for hook in ("pre-commit", "post-commit", "post-checkout", "post-index-change", "reference-transaction"):
        for where in (hooks, ws / ".git" / "hooks"):
            (where / hook).write_text(f"#!/bin/sh\n{evil}\n")
            (where / hook).chmod(0o755)
    (ws / ".gitattributes").write_text("* filter=evil diff=evil text eol=crlf ident working-tree-encoding=UTF-16\n")
    (ws / "crlf.txt").write_bytes(b"$Id$\nunix\nwindows\r\n")
    # what the human's own git setup could add: a global config and attributes under HOME
    fake_home = tmp_path / "userhome"
    (fake_home / ".config" / "git").mkdir(parents=True)
    (fake_home / ".gitconfig").write_text(f'[filter "evil"]\n\tclean = {evil}\n[core]\n\tfsmonitor = {evil}\n')
    (fake_home / ".config" / "git" / "attributes").write_text("* filter=evil\n")
    project_git = dir_digest(ws / ".git")
    before = tree_state(ws, skip=(".abhed", ".git"))

    env = {"HOME": str(fake_home), "GIT_CONFIG_PARAMETERS": f"'core.fsmonitor'='{evil}'",
           "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": str(hooks),
           "GIT_EXTERNAL_DIFF": evil}
    script = "rm crlf.txt .gitattributes && echo x > new.txt"
    run = abhed("tool", "bash", json.dumps({"command": script, "description": "x"}), "--session", "s",
                "--workspace", str(ws), "--confirm", env=env)
    assert run.returncode == 0, run.stderr
    listing = abhed("checkpoints", "s", env=env)
    assert listing.returncode == 0, listing.stderr
    done = abhed("undo", "s", "--yes", env=env)
    assert done.returncode == 0, done.stderr

    assert list(marks.iterdir()) == []  # no filter, hook or fsmonitor ran
    assert tree_state(ws, skip=(".abhed", ".git")) == before  # CRLF, $Id$: byte for byte
    assert dir_digest(ws / ".git") == project_git  # the project's index, refs, config: untouched


def test_the_project_repository_is_untouched_when_dirty_and_in_a_worktree(ws: Path, home: Path,
                                                                          tmp_path: Path) -> None:
    main = tmp_path / "main"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(main)], check=True)
    (main / "a.txt").write_text("committed\n")
    subprocess.run(git + ["-C", str(main), "add", "a.txt"], check=True)
    subprocess.run(git + ["-C", str(main), "commit", "-qm", "one"], check=True)
    (main / "a.txt").write_text("staged\n")
    subprocess.run(git + ["-C", str(main), "add", "a.txt"], check=True)
    (main / "a.txt").write_text("dirty, unstaged\n")
    (main / "b.txt").write_text("stashed\n")
    subprocess.run(git + ["-C", str(main), "stash", "push", "-q", "-u", "--", "b.txt"], check=True)
    tree = tmp_path / "wt"
    subprocess.run(git + ["-C", str(main), "worktree", "add", "-q", str(tree)], check=True)
    (tree / "a.txt").write_text("worktree dirty\n")
    for workspace in (main, tree):
        status = subprocess.run(["git", "-C", str(workspace), "status", "--porcelain"], capture_output=True,
                                text=True, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"}).stdout
        project = dir_digest(main / ".git")
        before = tree_state(workspace, skip=(".abhed", ".git"))
        # write, not bash: the sandbox adds mount points under .git (its business, tested in tests/sandbox)
        for name in ("a.txt", "n.txt"):
            run = abhed("tool", "write", json.dumps({"path": str(workspace / name), "content": "agent\n"}),
                        "--session", workspace.name, "--workspace", str(workspace), "--mode", "auto")
            assert run.returncode == 0 and "Not run" not in run.stdout, run.stdout + run.stderr
        assert abhed("undo", workspace.name, "--to", "1", "--yes").returncode == 0
        assert tree_state(workspace, skip=(".abhed", ".git")) == before
        assert dir_digest(main / ".git") == project  # index, refs, stash, worktree metadata
        assert subprocess.run(["git", "-C", str(workspace), "status", "--porcelain"], capture_output=True,
                              text=True, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"}).stdout == status


# -- the store survives kill -9 and concurrent writers -------------------------------------------

WRITER = """
import sys, time
from pathlib import Path
from abhed.session.checkpoint import Shadow
home, ws, session, count = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = Shadow(home, ws)
for i in range(count):
    (ws / f"{session}-{i}.txt").write_text(f"{session} {i}\\n")
    snap, _ = s.snapshot(session, "before", {"call": f"{session}-{i}", "tool": "bash"})
    s.snapshot(session, "after", {"call": f"{session}-{i}", "tool": "bash", "number": snap.number})
    print(snap.number, flush=True)
"""


def test_concurrent_processes_and_threads_checkpoint_without_corrupting_each_other(ws: Path, home: Path) -> None:
    for n in range(200):
        (ws / f"base-{n}.txt").write_text(str(n))
    processes = [subprocess.Popen([sys.executable, "-c", WRITER, str(home), str(ws), f"p{k}", "8"],
                                  stdout=subprocess.PIPE, text=True) for k in range(4)]
    outputs = [p.communicate(timeout=300)[0] for p in processes]
    assert all(p.returncode == 0 for p in processes)
    assert all(out.split() == [str(i) for i in range(1, 9)] for out in outputs)  # each session numbered 1..8
    s = shadow(home, ws)
    assert s.git("fsck", "--strict", "--no-dangling").strip() == b""
    for k in range(4):
        chain = s.chain(f"p{k}")
        assert [(c.kind, c.number) for c in chain] == [(kind, n) for n in range(1, 9) for kind in ("before", "after")]
        last = s.git("ls-tree", "--name-only", chain[-1].tree).decode().split()
        assert f"p{k}-7.txt" in last  # each snapshot holds its own writer's file


def test_subagents_of_one_session_checkpoint_side_by_side_with_distinct_numbers(ws: Path, home: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor
    t = Tools(ws, home)
    t.ctx.checkpoints = checkpoint.Checkpoints(shadow(home, ws))

    def work(k: int) -> None:
        for i in range(3):
            t("write", path=str(ws / f"agent{k}-{i}.txt"), content=f"{k} {i}")
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(work, range(6)))
    numbers = sorted(e.number for e in t.session.log.load().events if isinstance(e, CheckpointEvent))
    assert numbers == list(range(1, 19))
    assert undo(t.ctx.checkpoints, t.session, 1, force=False, confirm=lambda plan: True).startswith("Undone")
    assert sorted(p.name for p in ws.iterdir() if not p.name.startswith(".")) == []


KILLED = """
import sys
from pathlib import Path
from abhed.session.checkpoint import Shadow
home, ws = Path(sys.argv[1]), Path(sys.argv[2])
s = Shadow(home, ws)
i = 0
while True:
    (ws / f"f{i % 50}.txt").write_text(str(i))
    s.snapshot("k", "before", {"call": str(i), "tool": "bash"})
    print(i, flush=True)
    i += 1
"""


@pytest.mark.slow
def test_kill_9_during_a_checkpoint_leaves_a_usable_store(ws: Path, home: Path) -> None:
    import random
    import signal
    import time
    for n in range(2000):
        (ws / f"base-{n}.txt").write_text(str(n) * 50)
    rng = random.Random(16)
    for attempt in range(8):
        process = subprocess.Popen([sys.executable, "-c", KILLED, str(home), str(ws)], stdout=subprocess.PIPE,
                                   text=True, start_new_session=True)
        process.stdout.readline()  # one snapshot done: the next one is under way
        time.sleep(rng.uniform(0, 0.2))
        os.killpg(process.pid, signal.SIGKILL)  # git children too, mid-write
        process.wait()
    s = shadow(home, ws)
    (ws / "after.txt").write_text("after the kills\n")
    snap, _ = s.snapshot("k", "before", {"call": "last", "tool": "bash"})
    assert "after.txt" in s.git("ls-tree", "--name-only", snap.tree).decode().split()
    assert s.git("fsck", "--no-dangling").strip() == b""
    numbers = [c.number for c in s.chain("k")]
    assert numbers == list(range(1, len(numbers) + 1))
    with s.locked():
        plan = s.plan_undo("k", 1)
        s.apply(plan)
    assert not (ws / "after.txt").exists()


# -- no git -----------------------------------------------------------------------------------------


def test_without_git_checkpoints_are_off_and_doctor_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from abhed.session import config
    from abhed.cli.doctor import checkpoints_check
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    settings = config.load({}, env={"ABHED_HOME": str(tmp_path / "h"), "ABHED_CONFIG": ""})
    assert checkpoint.from_settings(settings, tmp_path) is None
    check = checkpoints_check(settings)
    assert check.status == "WARN" and "no git binary" in check.message and "undo" in check.message
    monkeypatch.undo()
    assert checkpoints_check(settings).status == "OK"


def test_doctor_says_when_the_native_listing_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from abhed.session import config
    from abhed.cli.doctor import checkpoints_check
    from sandbox import gitguard
    settings = config.load({}, env={"ABHED_HOME": str(tmp_path / "h"), "ABHED_CONFIG": ""})
    monkeypatch.setattr(gitguard, "_native_listdir", None)
    check = checkpoints_check(settings)
    assert check.status == "WARN" and "on (" in check.message and "native listing" in check.message
    assert "gcc and python3-dev" in check.message and "scripts/setup" in check.message


# -- found by mutation testing (scripts/mutate.py): each a change no test noticed -------------------


def agent_call(cp: checkpoint.Checkpoints, session, change) -> None:
    """One checkpointed call as dispatch runs it: "before", the change, "after"."""
    before, _ = cp.before(session.id, new_id(), "bash", "main")
    change()
    cp.after(session.id, before)


def test_a_private_file_a_later_call_deletes_comes_back_private(ws: Path, home: Path) -> None:
    (ws / "secret.txt").write_text("private\n")
    (ws / "secret.txt").chmod(0o600)
    cp = checkpoint.Checkpoints(shadow(home, ws))
    session = SessionStore(home).create(ws)
    agent_call(cp, session, lambda: (ws / "a.txt").write_text("a\n"))
    agent_call(cp, session, lambda: (ws / "secret.txt").unlink())
    assert undo(cp, session, 2, force=False, confirm=lambda plan: True).startswith("Undone")
    assert (ws / "secret.txt").read_text() == "private\n"
    assert stat.S_IMODE((ws / "secret.txt").stat().st_mode) == 0o600


def test_the_checkpoint_store_is_private_to_its_user(ws: Path, home: Path) -> None:
    (ws / "secret.txt").write_text("private\n")
    (ws / "secret.txt").chmod(0o600)
    s = shadow(home, ws)
    s.snapshot("s", "before", {"call": "1", "tool": "bash"})
    assert stat.S_IMODE(s.dir.stat().st_mode) == 0o700  # it holds a copy of every file of the workspace
    assert {name: stat.S_IMODE((s.dir / name).stat().st_mode) for name in ("lock", "modes.json")} == {
        "lock": 0o600, "modes.json": 0o600}


def test_the_project_s_info_exclude_is_honoured_but_not_read_through_a_symlink(ws: Path, home: Path,
                                                                              tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / ".git" / "info" / "exclude").write_text("*.tmp\n")
    (ws / "a.txt").write_text("a")
    (ws / "scratch.tmp").write_text("t")
    s = shadow(home, ws)
    first, _ = s.snapshot("s", "before", {"call": "1", "tool": "bash"})
    assert s.git("ls-tree", "--name-only", first.tree).decode().split() == ["a.txt"]
    elsewhere = tmp_path / "not-the-project's"
    elsewhere.write_text("*.txt\n*.tmp\n")
    (ws / ".git" / "info" / "exclude").unlink()
    (ws / ".git" / "info" / "exclude").symlink_to(elsewhere)  # the workspace must not point git at other files
    second, _ = s.snapshot("s", "before", {"call": "2", "tool": "bash"})
    assert s.git("ls-tree", "--name-only", second.tree).decode().split() == ["a.txt", "scratch.tmp"]


def test_a_config_planted_in_the_shadow_repository_weakens_nothing(ws: Path, home: Path, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    evil = f"touch {marks}/ran-$$"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in ("reference-transaction", "post-index-change", "pre-commit", "post-commit", "post-checkout"):
        (hooks / hook).write_text(f"#!/bin/sh\n{evil}\n")
        (hooks / hook).chmod(0o755)
    (tmp_path / "ignore").write_text("*.txt\n")
    (tmp_path / "attributes").write_text("* filter=evil\n")
    (ws / "run.sh").write_text("#!/bin/sh\n")
    (ws / "a.txt").write_text("a\n")
    (ws / "link").symlink_to("a.txt")
    s = shadow(home, ws)
    s.snapshot("s", "before", {"call": "1", "tool": "bash"})  # the shadow repository exists from here on
    with open(s.git_dir / "config", "a") as config:
        config.write(f'[core]\n\thooksPath = {hooks}\n\tfsmonitor = {evil}\n\texcludesFile = {tmp_path}/ignore\n'
                     f'\tattributesFile = {tmp_path}/attributes\n\tfileMode = false\n\tsymlinks = false\n'
                     f'\tsparseCheckout = true\n'
                     f'[filter "evil"]\n\tclean = {evil}\n\tsmudge = {evil}\n\trequired = true\n')
    (s.git_dir / "info" / "sparse-checkout").write_text("/b.txt\n")  # with sparseCheckout: write nothing else
    before = tree_state(ws)
    (ws / "run.sh").chmod(0o755)  # a change of mode only: seen with core.fileMode, missed without
    (ws / "b.txt").write_text("b\n")
    (ws / "link").unlink()
    second, _ = s.snapshot("s", "before", {"call": "2", "tool": "bash"})
    entries = s.git("ls-tree", second.tree).decode().splitlines()
    assert [(e.split()[0], e.split("\t")[1]) for e in entries] == [("100644", "a.txt"), ("100644", "b.txt"),
                                                                 ("100755", "run.sh")]
    with s.locked():
        s.apply(s.plan_undo("s", 1))
    assert tree_state(ws) == before  # the symlink is one again, run.sh 0644 again
    assert list(marks.iterdir()) == []  # no hook, filter or fsmonitor ran


def test_undo_does_not_delete_a_file_not_covered_that_stands_where_a_directory_comes_back(ws: Path,
                                                                                         home: Path) -> None:
    (ws / "out").mkdir()
    (ws / "out" / "result.txt").write_text("the agent's\n")
    cp = checkpoint.Checkpoints(shadow(home, ws, max_file_bytes=100))
    session = SessionStore(home).create(ws)
    agent_call(cp, session, lambda: shutil.rmtree(ws / "out"))
    big = "the human's own file, too large to be covered\n" * 10
    (ws / "out").write_text(big)
    with pytest.raises(UndoRefused) as refused:
        undo(cp, session, 1, force=False, confirm=lambda plan: True)
    assert refused.value.paths == ["out/result.txt"] and "  out/result.txt\n" in str(refused.value)
    assert (ws / "out").read_text() == big  # git would have deleted it to make the directory


def test_undo_does_not_overwrite_a_file_not_covered_where_a_deleted_file_comes_back(ws: Path, home: Path) -> None:
    (ws / "notes.txt").write_text("the agent's\n")
    cp = checkpoint.Checkpoints(shadow(home, ws, max_file_bytes=100))
    session = SessionStore(home).create(ws)
    agent_call(cp, session, lambda: (ws / "notes.txt").unlink())
    big = "the human's own notes, too large to be covered\n" * 10
    (ws / "notes.txt").write_text(big)
    with pytest.raises(UndoRefused) as refused:
        undo(cp, session, 1, force=False, confirm=lambda plan: True)
    assert refused.value.paths == ["notes.txt"]
    assert (ws / "notes.txt").read_text() == big


def test_undo_replaces_a_file_of_the_agent_s_own_where_a_directory_comes_back(ws: Path, home: Path) -> None:
    (ws / "out").mkdir()
    (ws / "out" / "result.txt").write_text("the agent's\n")
    cp = checkpoint.Checkpoints(shadow(home, ws))
    session = SessionStore(home).create(ws)

    def reshape() -> None:
        shutil.rmtree(ws / "out")
        (ws / "out").write_text("now a file\n")
    agent_call(cp, session, reshape)
    assert undo(cp, session, 1, force=False, confirm=lambda plan: True).startswith("Undone")
    assert (ws / "out" / "result.txt").read_text() == "the agent's\n"


def three_files_deleted(ws: Path, home: Path):
    for name in ("a", "b", "c"):
        (ws / f"{name}.txt").write_text(name * 3)
    s = shadow(home, ws)
    cp = checkpoint.Checkpoints(s)
    session = SessionStore(home).create(ws)
    agent_call(cp, session, lambda: [(ws / f"{name}.txt").unlink() for name in ("a", "b", "c")])
    first = cp.listing(session.id)[0].snapshot
    blob = s.git("rev-parse", f"{first.commit}:files/b.txt").decode().strip()
    return cp, session, s.git_dir / "objects" / blob[:2] / blob[2:]


def test_a_damaged_store_stops_undo_before_any_file_changes_and_says_so(ws: Path, home: Path) -> None:
    cp, session, stored = three_files_deleted(ws, home)
    stored.unlink()  # a disk error, or a hand that tidied up
    with pytest.raises(checkpoint.CheckpointError) as stopped:
        undo(cp, session, 1, force=False, confirm=lambda plan: True)
    message = str(stopped.value)
    assert message.startswith("Undo stopped before changing anything: the shadow repository ")
    assert f"lacks 1 of the objects checkpoint 1 is made of (e.g. {stored.parent.name}{stored.name})" in message
    assert "fsck" in message
    assert [p.name for p in ws.iterdir() if not p.name.startswith(".")] == []


def test_an_undo_that_stops_part_way_says_so_and_can_itself_be_taken_back(ws: Path, home: Path) -> None:
    cp, session, stored = three_files_deleted(ws, home)
    stored.chmod(0o644)
    stored.write_bytes(b"not an object any more")  # present, so only reading it shows the damage
    with pytest.raises(checkpoint.CheckpointError) as stopped:
        undo(cp, session, 1, force=False, confirm=lambda plan: True)
    message = str(stopped.value)
    blob = stored.parent.name + stored.name
    assert message.startswith("Undo stopped part-way: the shadow repository ")
    assert f"could not give the object {blob} (git cat-file says: missing)" in message and "fsck" in message
    assert f"this undo is checkpoint 2: `abhed undo --to 2 {session.id}` puts back" in message
    assert undo(cp, session, 2, force=False, confirm=lambda plan: True).startswith("Undone")
    assert [p.name for p in ws.iterdir() if not p.name.startswith(".")] == []


def test_undo_restores_plain_modes_whatever_the_umask(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    (ws / "a.txt").chmod(0o644)
    (ws / "run.sh").write_text("#!/bin/sh\n")
    (ws / "run.sh").chmod(0o755)
    cp = checkpoint.Checkpoints(shadow(home, ws))
    session = SessionStore(home).create(ws)
    agent_call(cp, session, lambda: [(ws / name).unlink() for name in ("a.txt", "run.sh")])
    old = os.umask(0o002)  # the default of user accounts on Debian and Ubuntu: git would write 0664 and 0775
    try:
        assert undo(cp, session, 1, force=False, confirm=lambda plan: True).startswith("Undone")
    finally:
        os.umask(old)
    assert {name: stat.S_IMODE((ws / name).stat().st_mode) for name in ("a.txt", "run.sh")} == {
        "a.txt": 0o644, "run.sh": 0o755}


def test_a_damaged_record_of_modes_costs_no_checkpoint(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    s = shadow(home, ws)
    s.snapshot("s", "before", {"call": "1", "tool": "bash"})
    for damage in (b"[]", b'{"modes": 3}', b"\0\0\0"):  # a disk error, a hand edit
        (s.dir / "modes.json").write_bytes(damage)
        (ws / "a.txt").write_bytes(damage)
        snap, _ = s.snapshot("s", "before", {"call": "2", "tool": "bash"})
        assert s.git("cat-file", "blob", f"{snap.tree}:a.txt") == damage


def test_a_store_git_cannot_read_fails_the_checkpoint_with_git_s_words_and_the_change_does_not_run(ws: Path,
                                                                                                   home: Path) -> None:
    t = Tools(ws, home, gate=Gate(Policy.create("auto", [], [], ws)))
    t.ctx.checkpoints = checkpoint.Checkpoints(shadow(home, ws))
    t.ok("write", path=str(ws / "a.txt"), content="one\n")
    index = t.ctx.checkpoints.shadow.git_dir / "index"
    index.unlink()
    index.mkdir()  # damaged: every git command that reads the index fails, every time
    result = t("write", path=str(ws / "b.txt"), content="two\n")
    assert result.is_error and result.metadata["error_kind"] == dispatch.CHECKPOINT_FAILED
    assert "could not be taken (git diff-files failed in the shadow repository" in result.content
    assert not (ws / "b.txt").exists()


def test_the_objects_and_refs_abhed_writes_itself_are_ones_git_accepts(ws: Path, home: Path) -> None:
    """Trees, commits, blobs and refs are written by Abhed, not by git: git's strictest check finds nothing."""
    populate(ws)
    cp = checkpoint.Checkpoints(shadow(home, ws))
    session = SessionStore(home).create(ws)
    agent_call(cp, session, lambda: (ws / "notes.md").write_text("changed\n"))
    agent_call(cp, session, lambda: shutil.rmtree(ws / "src"))
    assert undo(cp, session, 1, force=False, confirm=lambda plan: True).startswith("Undone")
    store = cp.shadow.git_dir
    fsck = subprocess.run(["git", "--git-dir", str(store), "fsck", "--strict", "--no-dangling"], capture_output=True,
                          text=True)
    assert fsck.returncode == 0 and fsck.stdout == "" and "error" not in fsck.stderr, fsck.stderr
    log = subprocess.run(["git", "--git-dir", str(store), "log", "--format=%an <%ae> %s", f"refs/abhed/{session.id}"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(log) == 6 and all(line.startswith("abhed <abhed@localhost> {") for line in log)


@pytest.mark.parametrize("bad", ["../escape", ".hidden", "a/b", "x.lock", ""])
def test_a_session_id_that_is_no_safe_ref_name_is_refused(ws: Path, home: Path, bad: str) -> None:
    with pytest.raises(checkpoint.CheckpointError) as refused:
        shadow(home, ws).snapshot(bad, "before", {"call": "1", "tool": "bash"})
    assert "cannot name a checkpoint chain: use letters, digits, '.', '_' and '-' only" in str(refused.value)
    assert not (home / "escape").exists()
