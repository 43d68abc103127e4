"""Issue 12 item 1: a workspace entry swapped for a symlink while the file tools work.

A background process exchanges a directory of the workspace with a symlink to a directory outside
it (renameat2 RENAME_EXCHANGE, in a tight loop, as a command left running in the sandbox can), while
hundreds of read, grep (both backends), glob, write and edit calls run. Judged on the host: nothing
outside was read (its marker never appears in any answer), created or changed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from abhed.files import beneath
from abhed_testing import Tools

SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE, PR_SET_PDEATHSIG = -100, 2, 1
libc.prctl(PR_SET_PDEATHSIG, 9)  # dies with pytest, even a pytest killed before its teardown ran
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
print("swapping", flush=True)
while True:
    if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
"""

SECRET = "SECRET-OUTSIDE-4711"
CALLS = 60  # rounds; each makes 7 tool calls


def _tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(path.rglob("*"))}


@pytest.fixture
def swapped(tmp_path: Path, ws: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(f"{SECRET}\n")
    (outside / "only-outside-name.txt").write_text(f"{SECRET}\n")
    os.chmod(outside / "f.txt", 0o600)
    inside = ws / "d"
    inside.mkdir()
    (inside / "f.txt").write_text("inside\n")
    (ws / "link").symlink_to(outside)
    before = _tree(outside)
    proc = subprocess.Popen([sys.executable, "-c", SWAPPER, str(inside), str(ws / "link")], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "swapping"
    yield ws, outside
    proc.kill()
    proc.wait()
    assert proc.returncode == -9, "the swapper stopped by itself: the attack did not run the whole time"
    assert _tree(outside) == before, "something outside the workspace was created or changed"


@pytest.mark.slow
@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "component-walk"])
def test_swapper_loop_never_leaks(swapped, home, monkeypatch, walk):
    ws, outside = swapped
    if walk:
        monkeypatch.setattr(beneath, "_openat2_works", False)
    else:
        assert beneath.openat2_available()
    tools = Tools(ws, home, {"create_parents": True})
    answers: list[str] = []
    refused = 0
    f = str(ws / "d" / "f.txt")
    for n in range(CALLS):
        calls = [
            ("read", {"path": f}),
            ("grep", {"pattern": "SECRET|inside", "output_mode": "content"}),
            ("glob", {"pattern": "**/*.txt"}),
            ("write", {"path": str(ws / "d" / f"new{n}.txt"), "content": "mine\n"}),
            ("write", {"path": str(ws / "d" / f"sub{n}" / "deep.txt"), "content": "mine\n"}),
            ("edit", {"path": f, "old_string": "inside", "new_string": "inside"[::-1]}),
            ("edit", {"path": f, "old_string": "inside"[::-1], "new_string": "inside"}),
        ]
        tools.settings.search.backend = "python" if n % 2 else "rg"
        for name, args in calls:
            result = tools(name, **args)
            answers.append(result.content)
            refused += result.is_error
    text = "\n".join(answers)
    assert SECRET not in text
    assert "only-outside-name" not in text
    print(f"\n{len(answers)} calls, {refused} refused", flush=True)
    assert refused > 0, "no call ever met the swap: the test did not exercise the race"
    tools.ctx.close()


@pytest.mark.slow
def test_swapper_loop_never_leaks_through_the_forked_grep_workers(swapped, home, monkeypatch):
    """Issue 18: the fallback backend's forked workers open files through the tool's confined
    opener, so the swap they meet is refused as in one process: nothing outside is read."""
    from abhed.files import grepsearch

    ws, outside = swapped
    for i in range(6):  # files beside the swapped directory, so that every search has several batches
        (ws / f"beside{i}.txt").write_text("inside beside\n")
    forks = []
    real = grepsearch.fork_map
    monkeypatch.setattr(grepsearch, "fork_map", lambda *a: forks.append(a[2]) or real(*a))
    monkeypatch.setattr(grepsearch, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(grepsearch, "default_workers", lambda: 3)
    tools = Tools(ws, home)
    tools.settings.search.backend = "python"
    answers = []
    for n in range(CALLS):
        mode = ("content", "files_with_matches", "count")[n % 3]
        answers.append(tools.ok("grep", pattern="SECRET|inside", output_mode=mode))
    text = "\n".join(answers)
    assert SECRET not in text
    assert "only-outside-name" not in text
    assert len(forks) == CALLS and set(forks) == {3}, "the searches did not run in forked workers"
    met = sum("became a symbolic link during the search" in a for a in answers)
    print(f"\n{len(answers)} searches, {met} met the swap in a worker", flush=True)
    assert met > 0, "no worker ever met the swap: the test did not exercise the race"
    tools.ctx.close()


@pytest.mark.slow
def test_swapper_loop_never_leaks_through_the_forked_glob_children(swapped, home, monkeypatch):
    """Issue 18: glob's forked children list the pending directories through the walk's root
    descriptor (splitwalk), so a directory swapped for a symlink after the parent saw it is
    refused there as in one process: no name from outside appears."""
    from abhed.files import splitwalk

    ws, outside = swapped
    for i in range(6):  # directories beside the swapped one, so that every walk has several pending
        (ws / f"beside{i}").mkdir()
        (ws / f"beside{i}" / "g.txt").write_text("inside\n")
    forks = []
    real = splitwalk.fork_map
    monkeypatch.setattr(splitwalk, "fork_map", lambda *a: forks.append(a[2]) or real(*a))
    monkeypatch.setattr(splitwalk, "STEP", 1)
    monkeypatch.setattr(splitwalk, "MIN_FILES", 0)
    monkeypatch.setattr(splitwalk, "workers", lambda: 2)
    tools = Tools(ws, home)
    answers = [tools.ok("glob", pattern=("**/*.txt", "**/*")[n % 2]) for n in range(2 * CALLS)]
    text = "\n".join(answers)
    assert "only-outside-name" not in text and str(outside) not in text
    assert forks == [2] * (2 * CALLS), "the walks did not run in forked children"
    met = sum("could not be read" in a for a in answers)
    print(f"\n{len(answers)} globs, {met} met the swap in a child", flush=True)
    assert met > 0, "no child ever met the swap: the test did not exercise the race"
    tools.ctx.close()


def swap_after_check(tools, ws, outside, monkeypatch):
    """Every path check passes on the real `ws/d`, which is then replaced by a symlink to `outside`."""
    real_resolve = tools.ctx.paths.resolve

    def resolve_then_swap(raw, **kw):
        checked = real_resolve(raw, **kw)
        os.rename(ws / "d", ws / "d-moved")
        (ws / "d").symlink_to(outside)
        return checked
    monkeypatch.setattr(type(tools.ctx.paths), "resolve", lambda self, raw, **kw: resolve_then_swap(raw, **kw))


def test_a_symlink_swapped_in_after_the_check_is_refused_by_read(tools, ws, tmp_path, monkeypatch):
    """The deterministic form of the race: the check sees a directory, the open meets a symlink."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(f"{SECRET}\n")
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("inside\n")
    swap_after_check(tools, ws, outside, monkeypatch)
    err = tools.err("read", path=str(ws / "d" / "f.txt"))
    assert SECRET not in err
    assert f"Refused reading {ws / 'd' / 'f.txt'}: a component of the path is a symbolic link now" in err
    assert "Nothing was read or written" in err


def test_a_symlink_swapped_in_after_the_check_is_refused_by_write(tools, ws, tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "d").mkdir()
    swap_after_check(tools, ws, outside, monkeypatch)
    err = tools.err("write", path=str(ws / "d" / "new.txt"), content="x\n")
    assert f"Refused writing {ws / 'd'}: a component of the path is a symbolic link now" in err
    assert list(outside.iterdir()) == []


def test_a_directory_swapped_for_a_symlink_right_after_mkdir_is_not_followed(ws, home, tmp_path, monkeypatch):
    """write creates missing parents one by one and opens each with O_NOFOLLOW from its parent: a
    racer replacing a just-made directory with a link to outside gets the write refused."""
    outside = tmp_path / "outside"
    outside.mkdir()
    real_mkdir = os.mkdir

    def mkdir_then_swap(name, mode=0o777, *, dir_fd=None):
        real_mkdir(name, mode, dir_fd=dir_fd)
        if name == "new" and dir_fd is not None:  # the racer strikes at the workspace's new directory only
            os.rmdir(name, dir_fd=dir_fd)
            os.symlink(outside, name, dir_fd=dir_fd)
    monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
    tools = Tools(ws, home, {"create_parents": True})
    err = tools.err("write", path=str(ws / "new" / "f.txt"), content="x\n")
    assert f"Refused creating {ws / 'new' / 'f.txt'}: a component of the path is a symbolic link now" in err
    assert list(outside.iterdir()) == []


def test_a_dangling_symlink_planted_at_a_new_files_name_is_refused_not_followed(tools, ws, tmp_path, monkeypatch):
    """The check sees no file; before the create, a racer plants `new.txt -> outside/x` (dangling).
    The write must see the link itself (lstat), refuse it, and create nothing outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    real_resolve = tools.ctx.paths.resolve

    def resolve_then_plant(raw, **kw):
        checked = real_resolve(raw, **kw)
        (ws / "new.txt").symlink_to(outside / "x")
        return checked
    monkeypatch.setattr(type(tools.ctx.paths), "resolve", lambda self, raw, **kw: resolve_then_plant(raw, **kw))
    err = tools.err("write", path=str(ws / "new.txt"), content="x\n")
    assert f"Refused writing {ws / 'new.txt'}: a component of the path is a symbolic link now" in err
    assert list(outside.iterdir()) == [] and (ws / "new.txt").is_symlink()
