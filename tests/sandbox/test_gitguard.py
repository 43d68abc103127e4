"""sandbox.gitguard on its own: real directories, both modes (inotify and the ctime-cached walk).

The escape suite runs the same attacks through the sandbox and host git; these pin the
guard's decisions and messages quickly (they are what mutation testing of the module runs).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from fd_testing import fds_on

from sandbox.gitguard import QUARANTINE_SUFFIX, GitGuard, may_be_git_dir

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture(params=["inotify", "walk"])
def mode(request) -> str:
    return request.param


def start(ws: Path, mode: str) -> GitGuard:
    guard = GitGuard.start(ws, use_inotify=mode == "inotify")
    assert guard.mode == mode
    return guard


def fake_repo(path: Path, *, bare: bool = False) -> Path:
    """The minimum git recognises as a repository: HEAD, objects/, refs/ (and a config)."""
    gitdir = path if bare else path / ".git"
    (gitdir / "objects").mkdir(parents=True)
    (gitdir / "refs").mkdir()
    (gitdir / "HEAD").write_text("ref: refs/heads/main\n")
    (gitdir / "config").write_text("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    return gitdir


def test_the_candidates_are_every_name_set_gits_test_can_pass():
    assert may_be_git_dir({"HEAD", "objects", "refs"})
    assert may_be_git_dir({"HEAD", "commondir"})
    assert not may_be_git_dir({"HEAD", "objects"})
    assert not may_be_git_dir({"HEAD", "refs"})
    assert not may_be_git_dir({"objects", "refs", "commondir"})
    assert may_be_git_dir({"HEAD": False, "objects": False, "refs": False})  # of any type: gitshape decides


def test_the_operators_repositories_are_the_baseline_and_protected(tmp_path, mode):
    fake_repo(tmp_path)
    fake_repo(tmp_path / "vendor" / "lib")
    fake_repo(tmp_path / "bare.git", bare=True)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")
    (tmp_path / "vendor" / "lib" / ".git" / "commondir").write_text("../..\n")
    guard = start(tmp_path, mode)
    assert guard.baseline_git_dirs == {".git", "vendor/lib/.git", "bare.git"}
    assert guard.baseline_pointers == {"sub/.git"}
    assert guard.baseline_commondirs == {"vendor/lib/.git"}
    assert guard.nested_protected_entries() == (
        "bare.git/config", "bare.git/hooks/", "bare.git/info/", "bare.git/modules/",
        "vendor/lib/.git/config", "vendor/lib/.git/hooks/", "vendor/lib/.git/info/", "vendor/lib/.git/modules/",
        "vendor/lib/.git/commondir", "sub/.git",
    )  # fmt: skip
    assert guard.check() == []  # nothing new: nothing moved
    assert (tmp_path / ".git" / "HEAD").exists() and (tmp_path / "sub" / ".git").exists()


def test_root_commondir_present_at_start_is_protected(tmp_path, mode):
    gitdir = fake_repo(tmp_path)
    (gitdir / "commondir").write_text("/elsewhere\n")
    assert start(tmp_path, mode).nested_protected_entries() == (".git/commondir",)


def test_a_new_repository_is_quarantined_with_its_head(tmp_path, mode):
    fake_repo(tmp_path)
    guard = start(tmp_path, mode)
    fake_repo(tmp_path / "a" / "b")
    notes = guard.check()
    assert fds_on(tmp_path) == []  # every directory opened for the renames is closed
    moved = tmp_path / "a" / "b" / f".git{QUARANTINE_SUFFIX}-2"
    assert notes == [
        f"the sandbox created a git repository (its HEAD is renamed too): {tmp_path}/a/b/.git was renamed to {moved} so "
        "that git on the host cannot run hooks or settings the sandbox wrote. Repositories cannot be created from the "
        "sandbox; if one is needed, a human can review it and rename it back."
    ]
    assert not os.path.lexists(tmp_path / "a" / "b" / ".git")
    assert not (moved / "HEAD").exists() and (moved / f"HEAD{QUARANTINE_SUFFIX}-1").exists()
    assert guard.check() == []  # quarantined once, then quiet


def test_a_new_bare_repository_loses_its_head(tmp_path, mode):
    guard = start(tmp_path, mode)
    fake_repo(tmp_path / "x" / "evil", bare=True)
    notes = guard.check()
    assert len(notes) == 1 and f"the sandbox created a git directory at {tmp_path}/x/evil: {tmp_path}/x/evil/HEAD was renamed" in notes[0]
    assert not (tmp_path / "x" / "evil" / "HEAD").exists()


def test_a_worktree_style_git_dir_with_commondir_is_a_repository(tmp_path, mode):
    gitdir = fake_repo(tmp_path)
    guard = start(tmp_path, mode)
    (gitdir / "worktrees" / "w").mkdir(parents=True)
    (gitdir / "worktrees" / "w" / "commondir").write_text("../..\n")
    (gitdir / "worktrees" / "w" / "HEAD").write_text("ref: refs/heads/main\n")
    assert len(guard.check()) == 1
    assert not (gitdir / "worktrees" / "w" / "HEAD").exists()


@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_a_new_git_pointer_is_quarantined(tmp_path, mode, kind):
    guard = start(tmp_path, mode)
    (tmp_path / "p").mkdir()
    if kind == "file":
        (tmp_path / "p" / ".git").write_text("gitdir: /evil\n")
    else:
        (tmp_path / "p" / ".git").symlink_to("/evil")
    notes = guard.check()
    assert len(notes) == 1 and "a .git file or symlink (it points git at another repository)" in notes[0]
    assert not os.path.lexists(tmp_path / "p" / ".git") and os.path.lexists(tmp_path / "p" / f".git{QUARANTINE_SUFFIX}-1")


def test_a_new_commondir_in_an_existing_repository_is_quarantined(tmp_path, mode):
    gitdir = fake_repo(tmp_path)
    guard = start(tmp_path, mode)
    (gitdir / "commondir").write_text("../copy\n")
    notes = guard.check()
    assert len(notes) == 1 and "a commondir (it redirects an existing repository)" in notes[0]
    assert not (gitdir / "commondir").exists() and (gitdir / f"commondir{QUARANTINE_SUFFIX}-1").exists()
    assert (gitdir / "HEAD").exists()  # the operator's repository itself is untouched


def test_an_empty_git_placeholder_directory_is_left_alone(tmp_path, mode):
    guard = start(tmp_path, mode)
    (tmp_path / ".git").mkdir()  # what a protection mount point leaves behind
    (tmp_path / "d" / ".git").mkdir(parents=True)
    assert guard.check() == []
    assert (tmp_path / ".git").is_dir() and (tmp_path / "d" / ".git").is_dir()


def test_an_existing_quarantine_name_is_not_overwritten(tmp_path, mode):
    guard = start(tmp_path, mode)
    (tmp_path / f".git{QUARANTINE_SUFFIX}-1").write_text("keep me\n")
    (tmp_path / ".git").write_text("gitdir: /evil\n")
    guard.check()
    assert (tmp_path / f".git{QUARANTINE_SUFFIX}-1").read_text() == "keep me\n"
    assert (tmp_path / f".git{QUARANTINE_SUFFIX}-2").read_text() == "gitdir: /evil\n"


def test_repositories_moved_in_renamed_or_made_deep_later_are_found(tmp_path, mode):
    guard = start(tmp_path, mode)
    (tmp_path / "one" / "two").mkdir(parents=True)
    assert guard.check() == []
    fake_repo(tmp_path / "one" / "two" / "three")  # inside directories the guard already knows
    assert len(guard.check()) == 1
    fake_repo(tmp_path / "one" / "r2")
    os.rename(tmp_path / "one", tmp_path / "renamed")  # a directory renamed after it was seen
    notes = guard.check()
    assert len(notes) == 1 and f"{tmp_path}/renamed/r2/.git was renamed" in notes[0]
    staging = tmp_path.parent / f"{tmp_path.name}-staging"
    fake_repo(staging / "r3")
    os.rename(staging, tmp_path / "renamed" / "in")  # a tree moved in from outside, ready-made
    notes = guard.check()
    assert len(notes) == 1 and f"{tmp_path}/renamed/in/r3/.git was renamed" in notes[0]


def test_a_deleted_directory_is_forgotten_and_its_name_reused(tmp_path, mode):
    guard = start(tmp_path, mode)
    (tmp_path / "d" / "e").mkdir(parents=True)
    guard.check()
    shutil.rmtree(tmp_path / "d")
    assert guard.check() == []
    fake_repo(tmp_path / "d" / "e")
    assert len(guard.check()) == 1


def test_an_unreadable_directory_is_reported(tmp_path, mode):
    if os.geteuid() == 0:
        pytest.skip("root reads every directory")
    guard = start(tmp_path, mode)
    (tmp_path / "locked").mkdir(mode=0o000)
    try:
        notes = guard.check()
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert notes == [
        f"the directory {tmp_path}/locked cannot be read by Abhed, so it could not be checked for git repositories the "
        "sandbox created; make it readable (chmod u+rx) or remove it before running git there."
    ]


def test_the_walk_cache_sees_a_change_hidden_by_touch(tmp_path):
    """In walk mode, a directory whose mtime was reset still changed ctime: it is listed again."""
    (tmp_path / "d").mkdir()
    guard = start(tmp_path, "walk")
    before = os.stat(tmp_path / "d")
    fake_repo(tmp_path / "d" / "x")
    os.utime(tmp_path / "d", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert len(guard.check()) == 1


def test_without_watches_the_guard_still_works(tmp_path, monkeypatch):
    """When inotify watches run out the guard drops to walking, and still finds what is new."""
    from sandbox import gitguard

    monkeypatch.setattr(gitguard._Inotify, "watch", lambda self, fd: None)
    (tmp_path / "a").mkdir()
    guard = gitguard.GitGuard.start(tmp_path)
    assert guard.mode == "walk"
    fake_repo(tmp_path / "a")
    assert len(guard.check()) == 1


def test_an_event_queue_overflow_falls_back_to_a_full_walk(tmp_path, monkeypatch):
    from sandbox import gitguard

    guard = start(tmp_path, "inotify")
    fake_repo(tmp_path / "q")
    monkeypatch.setattr(guard._notify, "read", lambda: [(-1, gitguard._IN_Q_OVERFLOW)])
    assert len(guard.check()) == 1
    assert guard.mode == "inotify"  # a fresh instance, watching again


@needs_git
def test_real_git_init_is_recognised(tmp_path, mode):
    guard = start(tmp_path, mode)
    subprocess.run(["git", "init", "-q", str(tmp_path / "r")], check=True)
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "b")], check=True)
    notes = guard.check()
    assert len(notes) == 2
    assert not (tmp_path / "r" / ".git").exists() and not (tmp_path / "b" / "HEAD").exists()


def test_close_releases_the_inotify_descriptor(tmp_path):
    guard = start(tmp_path, "inotify")
    fd = guard._notify.fd
    guard.close()
    assert guard.mode == "walk"
    with pytest.raises(OSError):
        os.fstat(fd)
    guard.close()  # idempotent: Sandbox.close may run twice


def test_a_workspace_that_is_itself_a_bare_repository_is_protected_at_its_root(tmp_path, mode):
    fake_repo(tmp_path, bare=True)
    guard = start(tmp_path, mode)
    assert guard.baseline_git_dirs == {""}
    assert guard.nested_protected_entries() == ("config", "hooks/", "info/", "modules/")


def test_the_default_is_inotify():
    import tempfile

    with tempfile.TemporaryDirectory() as ws:
        guard = GitGuard.start(Path(ws))
        assert guard.mode == "inotify"
        guard.close()


def test_a_workspace_that_disappears_is_reported_not_crashed_on(tmp_path, mode):
    ws = tmp_path / "ws"
    ws.mkdir()
    guard = start(ws, mode)
    ws.rmdir()
    notes = guard.check()
    assert notes == [
        f"the directory {ws} cannot be read by Abhed, so it could not be checked for git repositories the sandbox "
        "created; make it readable (chmod u+rx) or remove it before running git there."
    ]


def test_open_beneath_never_follows_a_symlink_or_opens_a_file(tmp_path):
    from sandbox.gitguard import _open_beneath

    (tmp_path / "real" / "x").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "file").write_text("")
    fd = _open_beneath(tmp_path, "real/x")
    os.close(fd)
    for rel in ("link/x", "link", "file", "real/x/missing"):
        with pytest.raises(OSError):
            os.close(_open_beneath(tmp_path, rel))


def count_listings(monkeypatch) -> list[str]:
    from sandbox import gitguard

    calls: list[str] = []
    real = gitguard._list

    def counting(fd, signature, files=None):
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd, signature, files)

    monkeypatch.setattr(gitguard, "_list", counting)
    return calls


def test_a_check_lists_only_what_changed(tmp_path, mode, monkeypatch):
    from sandbox import gitguard

    monkeypatch.setattr(gitguard, "RECENT_NS", 0)  # trust every ctime at once (no waiting in a test)
    for name in ("a/b", "c/d", "e"):
        (tmp_path / name).mkdir(parents=True)
    guard = start(tmp_path, mode)
    guard.check()
    calls = count_listings(monkeypatch)
    assert guard.check() == [] and calls == []  # nothing changed: nothing listed
    (tmp_path / "c" / "d" / "new").mkdir()
    guard.check()
    assert sorted(calls) == [str(tmp_path / "c" / "d"), str(tmp_path / "c" / "d" / "new")]


def test_the_walk_does_not_trust_a_directory_changed_just_now(tmp_path, monkeypatch):
    from sandbox import gitguard

    monkeypatch.setattr(gitguard, "RECENT_NS", 10**18)  # everything counts as changed just now
    (tmp_path / "a").mkdir()
    guard = start(tmp_path, "walk")
    calls = count_listings(monkeypatch)
    guard.check()
    assert sorted(calls) == [str(tmp_path), str(tmp_path / "a")]


def test_after_an_overflow_the_guard_watches_afresh(tmp_path, monkeypatch):
    from sandbox import gitguard

    (tmp_path / "gone").mkdir()
    guard = start(tmp_path, "inotify")
    old = guard._notify
    (tmp_path / "gone").rmdir()
    monkeypatch.setattr(old, "read", lambda: [(-1, gitguard._IN_Q_OVERFLOW)])
    guard.check()
    assert guard._notify is not old and old.fd == -1  # the old instance closed, a new one made
    assert sorted(guard._wd_rel.values()) == [""]  # no watch left for the directory that is gone
    fake_repo(tmp_path / "later")
    assert len(guard.check()) == 1


def test_a_directory_that_fails_to_list_leaks_no_descriptor(tmp_path, mode, monkeypatch):
    from sandbox import gitguard

    (tmp_path / "a" / "b").mkdir(parents=True)
    guard = start(tmp_path, mode)
    real = gitguard._list

    def failing(fd, signature, files=None):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/a"):
            raise PermissionError(13, "Permission denied")
        return real(fd, signature, files)

    monkeypatch.setattr(gitguard, "_list", failing)
    monkeypatch.setattr(gitguard, "RECENT_NS", 10**18)
    (tmp_path / "a" / "new").mkdir()
    notes = guard.check()
    guard._full_walk_needed = True
    notes += guard.check()
    assert fds_on(tmp_path) == []
    assert any(f"the directory {tmp_path}/a cannot be read by Abhed" in n for n in notes), notes


def test_events_for_directories_no_longer_watched_are_ignored(tmp_path, monkeypatch):
    from sandbox import gitguard

    guard = start(tmp_path, "inotify")
    monkeypatch.setattr(guard._notify, "read", lambda: [(9999, gitguard._IN_CREATE), (9998, gitguard._IN_IGNORED)])
    assert guard.check() == []


class FailingLibc:
    """Stands in for libc's inotify_add_watch failing with one errno."""

    def __init__(self, code: int) -> None:
        self.code = code

    def inotify_add_watch(self, fd, path, mask):
        import ctypes

        ctypes.set_errno(self.code)
        return -1


def test_running_out_of_watches_drops_to_walking_and_other_errors_are_reported(tmp_path):
    import errno

    from sandbox import gitguard

    budget = gitguard.WatchBudget(10)
    notify = gitguard._Inotify.open(budget)
    try:
        notify._libc = FailingLibc(errno.ENOSPC)  # fs.inotify.max_user_watches reached
        assert notify.watch(0) is None
        notify._libc = FailingLibc(errno.ENOMEM)
        assert notify.watch(0) is None
        notify._libc = FailingLibc(errno.EACCES)
        with pytest.raises(PermissionError):
            notify.watch(0)
        assert budget.used == 0  # a watch the kernel did not give is not counted
    finally:
        notify.close()


def test_a_deleted_tree_leaves_no_listing_behind(tmp_path, mode):
    (tmp_path / "d" / "e" / "f").mkdir(parents=True)
    guard = start(tmp_path, mode)
    shutil.rmtree(tmp_path / "d")
    assert guard.check() == []
    assert sorted(guard._listings) == [""]  # forgotten, not kept (a long session must not grow without bound)


def test_a_deleted_subdirectory_costs_no_full_walk(tmp_path, monkeypatch):
    (tmp_path / "a" / "b").mkdir(parents=True)
    guard = start(tmp_path, "inotify")
    walks: list[int] = []
    real = guard._full_walk
    monkeypatch.setattr(guard, "_full_walk", lambda: walks.append(1) or real())
    shutil.rmtree(tmp_path / "a" / "b")  # its watch ends (IN_IGNORED); the workspace's stays
    assert guard.check() == [] and walks == []
    fake_repo(tmp_path / "a")
    assert len(guard.check()) == 1 and walks == []


def test_a_directory_made_unreadable_after_it_changed_is_reported_then_walked(tmp_path, monkeypatch):
    from sandbox import gitguard

    (tmp_path / "sub").mkdir()
    guard = start(tmp_path, "inotify")
    fake_repo(tmp_path / "sub")  # an event on sub/ ...
    real = gitguard._open_beneath

    def locked(workspace, rel):  # ... then chmod 000 sub/ (no event), as a non-root sandbox can
        if rel == "sub":
            raise PermissionError(13, "Permission denied")
        return real(workspace, rel)

    monkeypatch.setattr(gitguard, "_open_beneath", locked)
    assert guard.check() == [
        f"the directory {tmp_path}/sub cannot be read by Abhed, so it could not be checked for git repositories the "
        "sandbox created; make it readable (chmod u+rx) or remove it before running git there."
    ]
    monkeypatch.setattr(gitguard, "_open_beneath", real)  # readable again: the next check walks it
    notes = guard.check()
    assert len(notes) == 1 and "a git repository" in notes[0] and not (tmp_path / "sub" / ".git").exists()


def test_a_failed_quarantine_says_so_and_claims_no_rename(tmp_path, mode, monkeypatch):
    guard = start(tmp_path, mode)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".git").write_text("gitdir: /elsewhere\n")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "rename", refuse)
    assert guard.check() == [
        "the sandbox created a .git file or symlink (it points git at another repository), and moving "
        f"{tmp_path}/sub/.git aside failed (Permission denied): do not run git on the host in that directory "
        "until a human has removed it."
    ]
    assert (tmp_path / "sub" / ".git").is_file()


def test_a_new_subdirectory_that_cannot_be_opened_is_reported(tmp_path, mode, monkeypatch):
    # A non-root guard gets EACCES for a directory the sandbox made and chmod'ed 000 before the
    # check. As root every directory opens, so that refusal is injected here (the test above
    # runs the real chmod when not root).
    guard = start(tmp_path, mode)
    fake_repo(tmp_path / "locked")
    real_open = os.open

    def refuse_locked(path, flags, mode=0o777, *, dir_fd=None):
        if path == "locked" and dir_fd is not None:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", refuse_locked)
    assert guard.check() == [
        f"the directory {tmp_path}/locked cannot be read by Abhed, so it could not be checked for git repositories the "
        "sandbox created; make it readable (chmod u+rx) or remove it before running git there."
    ]
    monkeypatch.setattr(os, "open", real_open)  # readable again: the next check finds the repository
    notes = guard.check()
    assert len(notes) == 1 and "a git repository" in notes[0] and not (tmp_path / "locked" / ".git").exists()


def test_an_entry_gone_before_its_quarantine_is_not_claimed_renamed(tmp_path, mode, monkeypatch):
    guard = start(tmp_path, mode)
    (tmp_path / ".git").write_text("gitdir: /elsewhere\n")

    def vanish(src, dst, *, src_dir_fd=None, dst_dir_fd=None):  # the sandbox removed it meanwhile
        os.unlink(src, dir_fd=src_dir_fd)
        raise FileNotFoundError(2, "No such file or directory", src)

    monkeypatch.setattr(os, "rename", vanish)
    assert guard.check() == []
    assert not (tmp_path / ".git").exists()


# -- the shape rule is sandbox.gitshape's (issue 30) ---------------------------------------------


def symlinked_bare(path: Path, outside: Path) -> Path:
    """A bare shape whose objects and refs are symlinks to real directories (one outside the workspace)."""
    (outside / "objects").mkdir(parents=True, exist_ok=True)
    path.mkdir(parents=True)
    (path / "store" / "refs").mkdir(parents=True)
    (path / "objects").symlink_to(outside / "objects")
    (path / "refs").symlink_to("store/refs")
    (path / "HEAD").write_text("ref: refs/heads/main\n")
    (path / "config").write_text("[core]\n\tpager = touch /tmp/pwned\n")
    return path


def test_a_shape_made_of_symlinks_is_quarantined(tmp_path, mode):
    """git's access() follows symlinks: objects -> a real directory counts (the guard used to skip it)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    guard = start(ws, mode)
    symlinked_bare(ws / "sub" / "b", tmp_path / "outside")
    symlinked_bare(ws / "r" / ".git", tmp_path / "outside")
    notes = guard.check()
    assert len(notes) == 2, notes
    assert f"{ws}/sub/b/HEAD was renamed to {ws}/sub/b/HEAD{QUARANTINE_SUFFIX}-" in notes[1]
    assert f"{ws}/r/.git was renamed to {ws}/r/.git{QUARANTINE_SUFFIX}-" in notes[0]
    assert not (ws / "sub" / "b" / "HEAD").exists() and not os.path.lexists(ws / "r" / ".git")


def test_a_head_made_valid_in_place_is_caught_without_listing_anything(tmp_path, mode, monkeypatch):
    """Rewriting HEAD's bytes changes no directory entry (no inotify event, no ctime): the guard asks
    gitshape about the candidate at every check, so the same inode made valid is quarantined."""
    from sandbox import gitguard

    monkeypatch.setattr(gitguard, "RECENT_NS", 0)
    (tmp_path / "x" / "objects").mkdir(parents=True)
    (tmp_path / "x" / "refs").mkdir()
    (tmp_path / "x" / "HEAD").write_text("not a ref\n")  # like .git/logs: HEAD, refs... and no git directory
    guard = start(tmp_path, mode)
    assert guard.baseline_git_dirs == set() and guard.check() == [] and guard.check() == []
    calls = count_listings(monkeypatch)
    with open(tmp_path / "x" / "HEAD", "r+") as head:
        head.write("ref: refs/heads/main\n")
    notes = guard.check()
    assert len(notes) == 1 and f"{tmp_path}/x/HEAD was renamed" in notes[0]
    assert calls == [str(tmp_path / "x")]  # listed once: after the guard's own rename, to take it in


def test_the_operators_git_directories_are_not_asked_again(tmp_path, mode, monkeypatch):
    from sandbox import gitguard

    fake_repo(tmp_path)
    fake_repo(tmp_path / "vendor", bare=True)
    guard = start(tmp_path, mode)
    asked: list[int] = []
    real = gitguard.gitshape.is_git_directory
    monkeypatch.setattr(gitguard.gitshape, "is_git_directory", lambda fd: asked.append(fd) or real(fd))
    assert guard.check() == [] and asked == []  # a check costs no look at them
    fake_repo(tmp_path / "new", bare=True)
    assert len(guard.check()) == 1 and len(asked) == 2  # the new one, and again after its HEAD moved


def test_a_git_directory_still_one_after_its_head_moved_is_reported(tmp_path, mode, monkeypatch):
    """A background job that makes HEAD again between the rename and the look: the human is told."""
    guard = start(tmp_path, mode)
    fake_repo(tmp_path / "b", bare=True)
    real = os.rename

    def and_again(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        (tmp_path / "b" / "HEAD").write_text("ref: refs/heads/main\n")

    monkeypatch.setattr(os, "rename", and_again)
    notes = guard.check()
    assert len(notes) == 1 and notes[0].startswith(
        f"the sandbox created a git directory at {tmp_path}/b, and it still is one after its HEAD was moved aside "
        f"(the sandbox created a git directory at {tmp_path}/b: {tmp_path}/b/HEAD was renamed to ")
    assert notes[0].endswith(f"do not run git on the host in {tmp_path}/b or below it until a human has removed it.")


def test_a_head_gone_before_its_quarantine_is_not_reported(tmp_path, mode, monkeypatch):
    guard = start(tmp_path, mode)
    fake_repo(tmp_path / ".hidden" / "x" / "b", bare=True)

    def vanish(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        os.unlink(src, dir_fd=src_dir_fd)
        raise FileNotFoundError(2, "No such file or directory", src)

    monkeypatch.setattr(os, "rename", vanish)
    assert guard.check() == []


@pytest.mark.parametrize(("error", "unreadable"), [(PermissionError(13, "Permission denied"), True),
                                                   (FileNotFoundError(2, "No such file or directory"), False)])
def test_a_candidate_that_cannot_be_opened_is_reported_only_when_unreadable(tmp_path, mode, monkeypatch, error, unreadable):
    from sandbox import gitguard

    (tmp_path / "x" / "objects").mkdir(parents=True)
    (tmp_path / "x" / "refs").mkdir()
    (tmp_path / "x" / "HEAD").write_text("not a ref\n")
    guard = start(tmp_path, mode)
    (tmp_path / "x" / "HEAD").write_text("ref: refs/heads/main\n")  # in place: no event
    real = gitguard._open_beneath

    def refusing(workspace, rel):
        if rel == "x":
            raise error
        return real(workspace, rel)

    monkeypatch.setattr(gitguard, "_open_beneath", refusing)
    notes = guard.check()
    expected = [f"the directory {tmp_path}/x cannot be read by Abhed, so it could not be checked for git repositories "
                "the sandbox created; make it readable (chmod u+rx) or remove it before running git there."]
    assert notes == (expected if unreadable else [])
    assert fds_on(tmp_path) == []


def test_a_change_set_carries_the_listed_directories_and_the_fifos_sockets_and_devices_in_them(tmp_path, mode):
    """What checkpoints name as not covered, from the guard's own listings (no second walk): as they are
    when the interval is taken, a special removed or made since included; a directory gone, dropped."""
    ws = tmp_path / "ws"
    (ws / "sub" / "deep").mkdir(parents=True)
    os.mkfifo(ws / "pipe")
    (ws / "a.txt").write_text("a file\n")
    os.symlink("a.txt", ws / "link")
    guard = start(ws, mode)
    try:
        taken = guard.take_changes()
        assert taken.listed == {"", "sub", "sub/deep"}
        assert taken.specials == {"": (("pipe", stat.S_IFIFO),)}
        os.unlink(ws / "pipe")
        os.mknod(ws / "sub" / "deep" / "s.sock", stat.S_IFSOCK | 0o600)
        os.mkfifo(ws / "sub" / "deep" / "a.fifo")
        taken = guard.take_changes()
        assert taken.specials == {"sub/deep": (("a.fifo", stat.S_IFIFO), ("s.sock", stat.S_IFSOCK))}
        shutil.rmtree(ws / "sub")
        taken = guard.take_changes()
        assert taken.listed == {""} and taken.specials == {}
    finally:
        guard.close()
