"""The git guard's inotify watches stay within a share of the user's host-wide limit, and beyond it
the guard walks (sandbox.gitguard.WatchBudget): counted from the kernel's own list of an inotify
instance's watches (/proc/self/fdinfo/<fd>: one "inotify wd:" line each), and judged by what the
quarantine did to the repositories a command made where no watch reached."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox import gitguard
from sandbox.gitguard import QUARANTINE_SUFFIX, GitGuard, WatchBudget, process_watch_budget, user_watch_share


def kernel_watches(guard: GitGuard) -> int:
    """The watches the kernel holds for the guard's inotify instance now (0 when it has none)."""
    if guard._notify is None:
        return 0
    text = Path(f"/proc/self/fdinfo/{guard._notify.fd}").read_text()
    return sum(line.startswith("inotify wd:") for line in text.splitlines())


class WatchSpy:
    """The kernel's watch count of every inotify instance, read after each watch a guard adds."""

    def __init__(self, monkeypatch) -> None:
        self.counts: list[int] = []
        real = gitguard._Inotify.watch

        def watch(notify, dir_fd):
            wd = real(notify, dir_fd)
            text = Path(f"/proc/self/fdinfo/{notify.fd}").read_text()
            self.counts.append(sum(line.startswith("inotify wd:") for line in text.splitlines()))
            return wd

        monkeypatch.setattr(gitguard._Inotify, "watch", watch)


def tree(root: Path, directories: int) -> None:
    for i in range(directories):
        (root / f"d{i // 10}" / f"e{i}").mkdir(parents=True, exist_ok=True)


def bare_repository(path: Path) -> None:
    (path / "objects").mkdir(parents=True)
    (path / "refs").mkdir()
    (path / "HEAD").write_text("ref: refs/heads/main\n")
    (path / "config").write_text("[core]\n\tfsmonitor = touch /tmp/pwned\n")


def test_a_tree_larger_than_the_share_never_holds_more_watches_and_is_walked(tmp_path, monkeypatch):
    tree(tmp_path, 40)  # 45 directories with the workspace and d0..d3
    spy, budget = WatchSpy(monkeypatch), WatchBudget(12)
    guard = GitGuard.start(tmp_path, watches=budget)
    try:
        assert spy.counts and max(spy.counts) <= 12 and len(spy.counts) == 13  # the 13th was refused by the budget
        assert guard.mode == "walk" and budget.used == 0  # the 12 it held went back with the instance
        bare_repository(tmp_path / "d3" / "e39" / "evil")  # deep: no watch would ever have seen it
        (tmp_path / "d0" / "e1" / "sub" / ".git").mkdir(parents=True)
        bare_repository(tmp_path / "d0" / "e1" / "sub" / ".git")
        notes = guard.check()
    finally:
        guard.close()
    assert len(notes) == 2, notes
    evil = tmp_path / "d3" / "e39" / "evil"
    assert not (evil / "HEAD").exists() and list(evil.glob(f"HEAD{QUARANTINE_SUFFIX}-*"))
    assert not (tmp_path / "d0" / "e1" / "sub" / ".git").exists()
    assert max(spy.counts) <= 12


def test_a_tree_that_grows_past_the_share_drops_to_walking_and_still_quarantines(tmp_path, monkeypatch):
    tree(tmp_path, 5)  # 7 directories: watched
    spy, budget = WatchSpy(monkeypatch), WatchBudget(10)
    guard = GitGuard.start(tmp_path, watches=budget)
    try:
        assert guard.mode == "inotify" and kernel_watches(guard) == budget.used == 7
        tree(tmp_path, 60)  # a command makes many more, and a repository among them
        bare_repository(tmp_path / "d5" / "e59" / "x")
        first = guard.check()
        assert guard.mode == "walk" and budget.used == 0 and max(spy.counts) <= 10
        bare_repository(tmp_path / "d2" / "e25" / "y")  # and later, found by the walk
        second = guard.check()
    finally:
        guard.close()
    assert len(first) == 1 and f"{tmp_path}/d5/e59/x" in first[0] and not (tmp_path / "d5" / "e59" / "x" / "HEAD").exists()
    assert len(second) == 1 and f"{tmp_path}/d2/e25/y" in second[0] and not (tmp_path / "d2" / "e25" / "y" / "HEAD").exists()


def test_the_guards_of_a_process_share_one_budget(tmp_path, monkeypatch):
    first_ws, second_ws = tmp_path / "one", tmp_path / "two"
    tree(first_ws, 7)  # 9 directories each (the workspace, d0, e0..e6)
    tree(second_ws, 7)
    budget = WatchBudget(12)
    first = GitGuard.start(first_ws, watches=budget)
    second = GitGuard.start(second_ws, watches=budget)
    try:
        assert (first.mode, second.mode) == ("inotify", "walk")  # 8 + 8 > 12: the second walks
        assert budget.used == 9 == kernel_watches(first) and kernel_watches(second) == 0
        first.close()
        assert budget.used == 0
        third = GitGuard.start(second_ws, watches=budget)
        assert third.mode == "inotify" and budget.used == 9
        third.close()
        first.close()  # twice: gives nothing back twice
        assert budget.used == 0
    finally:
        first.close()
        second.close()


def test_watches_the_kernel_drops_or_gives_again_are_counted_once(tmp_path):
    tree(tmp_path, 6)  # the workspace, d0, e0..e5: 8 directories
    budget = WatchBudget(100)
    guard = GitGuard.start(tmp_path, watches=budget)
    try:
        assert budget.used == 8 == kernel_watches(guard)
        (tmp_path / "d0" / "e0").rmdir()
        (tmp_path / "d0" / "e1").rename(tmp_path / "moved")  # the same inode: the kernel's watch is reused
        assert guard.check() == []
        assert budget.used == kernel_watches(guard) == 7
    finally:
        guard.close()
    assert budget.used == 0


def test_the_share_is_a_quarter_of_the_users_limit(tmp_path):
    limit = tmp_path / "max_user_watches"
    limit.write_text("20204\n")
    assert gitguard.WATCH_SHARE == 4 and user_watch_share(str(limit)) == 5051
    limit.write_text("lots\n")
    assert gitguard.DEFAULT_MAX_USER_WATCHES == 8192  # the kernel's default on small machines
    assert user_watch_share(str(limit)) == 8192 // 4
    assert user_watch_share(str(tmp_path / "missing")) == 2048
    with open("/proc/sys/fs/inotify/max_user_watches") as f:
        assert process_watch_budget().limit == int(f.read()) // 4
    assert process_watch_budget() is process_watch_budget()  # one for the process


def test_an_instance_gives_its_watches_back_once(tmp_path):
    budget = WatchBudget(5)
    notify = gitguard._Inotify.open(budget)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first = notify.watch(fd)
        assert first is not None and notify.watch(fd) == first and budget.used == 1  # the same inode: one watch
    finally:
        os.close(fd)
    notify.close()
    notify.close()  # again: nothing closed twice, nothing given back twice
    assert budget.used == 0 and notify.fd == -1


def test_the_budget_counts_and_refuses():
    budget = WatchBudget(2)
    assert budget.take() and budget.take() and not budget.take() and budget.used == 2
    budget.give(1)
    assert budget.take() and not budget.take()
    budget.give(2)
    assert budget.used == 0


def test_a_sandboxed_command_beyond_the_share_is_still_quarantined(tmp_path, monkeypatch):
    """Through the real sandbox: the session's guard holds at most its share (the process's budget,
    made small here), and the repository the command made beyond it is quarantined all the same."""
    import sandbox

    monkeypatch.setattr(gitguard, "_process_budget", WatchBudget(6))
    spy = WatchSpy(monkeypatch)
    workspace = tmp_path / "ws"
    tree(workspace, 3)
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as box:
        assert box._guard.mode == "inotify"
        made = "mkdir -p " + " ".join(f"many/m{i}" for i in range(30)) + \
            " && mkdir -p many/m29/r/objects many/m29/r/refs && echo 'ref: refs/heads/x' > many/m29/r/HEAD"
        result = box.run(made, cwd=workspace, timeout_s=60)
        assert box._guard.mode == "walk"
    assert result.exit_code == 0 and max(spy.counts) <= 6
    assert any(f"{workspace}/many/m29/r" in note for note in result.notes), result.notes
    assert not (workspace / "many" / "m29" / "r" / "HEAD").exists()
