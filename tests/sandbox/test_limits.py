"""sandbox.limits against fake cgroup trees in tmp_path: the cgroup v2 paths this v1 host cannot run.

The kernel's cgroupfs is imitated by plain files (``cgroup.controllers``,
``cgroup.subtree_control``); the mount table is handed in as mountinfo text.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import Limits
from sandbox.errors import BackendUnavailable
from sandbox.limits import (
    CGROUP_DIR_NAME,
    Cgroup,
    CgroupJanitor,
    CgroupParent,
    CgroupUnavailable,
    apply_rlimits,
    effective_rlimits,
    find_cgroup_parent,
    find_cgroup_parents,
)


def v2_tree(top, available="cpu io memory pids"):
    top.mkdir(parents=True, exist_ok=True)
    (top / "cgroup.controllers").write_text(available + "\n")
    (top / "cgroup.subtree_control").write_text("")
    (top / CGROUP_DIR_NAME).mkdir(exist_ok=True)
    (top / CGROUP_DIR_NAME / "cgroup.subtree_control").write_text("")  # the kernel makes it on mkdir
    return f"40 1 0:30 / {top} rw - cgroup2 cgroup2 rw,nsdelegate\n"


def v1_mount(top, controllers):
    top.mkdir(parents=True, exist_ok=True)
    return f"41 1 0:31 / {top} rw - cgroup cgroup rw,{controllers}\n"


def test_a_v2_hierarchy_serves_both_controllers_and_enables_them(tmp_path):
    top = tmp_path / "unified"
    parent = find_cgroup_parent("memory", v2_tree(top))
    assert parent == CgroupParent(top / CGROUP_DIR_NAME, 2, ("pids", "memory"))
    # _enable writes one "+controller" at a time; the fake file keeps the last write.
    assert (top / "cgroup.subtree_control").read_text() == "+memory"
    assert (top / CGROUP_DIR_NAME / "cgroup.subtree_control").read_text() == "+memory"


def test_already_enabled_controllers_are_not_written_again(tmp_path):
    top = tmp_path / "unified"
    mountinfo = v2_tree(top, available="pids memory")
    (top / "cgroup.subtree_control").write_text("pids memory\n")
    (top / CGROUP_DIR_NAME / "cgroup.subtree_control").write_text("pids memory\n")
    find_cgroup_parent("pids", mountinfo)
    assert (top / "cgroup.subtree_control").read_text() == "pids memory\n"
    assert (top / CGROUP_DIR_NAME / "cgroup.subtree_control").read_text() == "pids memory\n"


def test_a_v2_hierarchy_without_the_controller_is_reported(tmp_path):
    top = tmp_path / "unified"
    with pytest.raises(CgroupUnavailable) as caught:
        find_cgroup_parent("memory", v2_tree(top, available="cpu pids"))
    assert str(caught.value) == f"{top}: the memory controller is not available in this cgroup v2 hierarchy"
    parent = find_cgroup_parent("pids", v2_tree(top, available="cpu pids"))
    assert parent.controllers == ("pids",)


def test_v1_hierarchies_are_chosen_by_controller_and_v2_comes_last(tmp_path):
    mountinfo = v1_mount(tmp_path / "pids", "pids") + v1_mount(tmp_path / "memory", "memory") + v2_tree(tmp_path / "unified")
    assert find_cgroup_parent("pids", mountinfo) == CgroupParent(tmp_path / "pids" / CGROUP_DIR_NAME, 1, ("pids",))
    assert find_cgroup_parent("memory", mountinfo) == CgroupParent(tmp_path / "memory" / CGROUP_DIR_NAME, 1, ("memory",))
    assert (tmp_path / "pids" / CGROUP_DIR_NAME).stat().st_mode & 0o777 == 0o755 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_every_unusable_hierarchy_is_listed(tmp_path):
    broken = tmp_path / "broken"  # v2 mount point whose cgroup.controllers cannot be read
    broken.mkdir()
    mountinfo = f"40 1 0:30 / {broken} rw - cgroup2 cgroup2 rw\n" + v2_tree(tmp_path / "nomem", available="pids")
    with pytest.raises(CgroupUnavailable) as caught:
        find_cgroup_parent("memory", mountinfo)
    message = str(caught.value)
    assert message.startswith(f"{broken}: No such file or directory; ")
    assert message.endswith(f"{tmp_path / 'nomem'}: the memory controller is not available in this cgroup v2 hierarchy")


def test_no_hierarchy_at_all_says_where_to_look():
    with pytest.raises(CgroupUnavailable) as caught:
        find_cgroup_parent("pids", "")
    assert str(caught.value) == "no cgroup v1 'pids' or cgroup v2 hierarchy is mounted (see /proc/self/mountinfo)"
    with pytest.raises(CgroupUnavailable, match="no cgroup v1 'memory'"):
        find_cgroup_parent("memory", "41 1 0:31 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n")


def test_host_root_without_a_pids_cgroup_fails_closed_with_the_fixes():
    with pytest.raises(BackendUnavailable) as caught:
        find_cgroup_parents(Limits(processes=50), as_root=True, mountinfo="")
    message = str(caught.value)
    assert not isinstance(caught.value, CgroupUnavailable)
    for fact in ("runs as host root", "RLIMIT_NPROC", "pid_max", "no cgroup v1 'pids'", "unprivileged user",
                 "limits.processes and limits.session_processes to None"):
        assert fact in message, fact
    # The session's total alone needs one as much: it is the bound on every command of the session together.
    with pytest.raises(BackendUnavailable, match="RLIMIT_NPROC"):
        find_cgroup_parents(Limits(processes=None, session_processes=500), as_root=True, mountinfo="")
    # Not root, or no process limit: no pids cgroup is needed.
    no_memory = {"memory_bytes": None, "session_memory_bytes": None}
    assert find_cgroup_parents(Limits(processes=50, **no_memory), as_root=False, mountinfo="") == ((), None)
    assert find_cgroup_parents(Limits(processes=None, session_processes=None, **no_memory), as_root=True, mountinfo="") == ((), None)


def test_one_v2_parent_serves_pids_and_memory(tmp_path):
    top = tmp_path / "unified"
    parents, fallback = find_cgroup_parents(Limits(processes=50, memory_bytes=1 << 30), as_root=True, mountinfo=v2_tree(top))
    assert parents == (CgroupParent(top / CGROUP_DIR_NAME, 2, ("pids", "memory")),) and fallback is None


def test_v1_gives_separate_pids_and_memory_parents(tmp_path):
    mountinfo = v1_mount(tmp_path / "pids", "pids") + v1_mount(tmp_path / "memory", "memory")
    parents, fallback = find_cgroup_parents(Limits(processes=50, memory_bytes=1 << 30), as_root=True, mountinfo=mountinfo)
    assert [p.path.parent.name for p in parents] == ["pids", "memory"] and fallback is None
    # Unprivileged with a memory cgroup: only the memory parent.
    parents, _ = find_cgroup_parents(Limits(processes=50, memory_bytes=1 << 30), as_root=False, mountinfo=mountinfo)
    assert [p.path.parent.name for p in parents] == ["memory"]


def test_a_combined_v1_hierarchy_is_used_once(tmp_path):
    mountinfo = v1_mount(tmp_path / "both", "pids,memory")
    parents, fallback = find_cgroup_parents(Limits(processes=50, memory_bytes=1 << 30), as_root=True, mountinfo=mountinfo)
    assert parents == (CgroupParent(tmp_path / "both" / CGROUP_DIR_NAME, 1, ("pids", "memory")),) and fallback is None


def test_without_a_memory_cgroup_memory_falls_back_to_rlimit_data(tmp_path):
    mountinfo = v1_mount(tmp_path / "pids", "pids")
    parents, fallback = find_cgroup_parents(Limits(processes=50, memory_bytes=1 << 30), as_root=True, mountinfo=mountinfo)
    assert [p.controllers for p in parents] == [("pids",)]
    assert fallback == "no memory cgroup could be created (no cgroup v1 'memory' or cgroup v2 hierarchy is mounted (see /proc/self/mountinfo))"


def test_stale_children_of_dead_processes_are_removed(tmp_path):
    parent = CgroupParent(tmp_path, 1, ("pids",))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    dead_pid = dead.stdout.strip()
    names = [f"run-{dead_pid}-0", f"run-{os.getpid()}-0", f"run-{dead_pid}", "run-x-0", f"other-{dead_pid}-0", f"run-{dead_pid}-busy"]
    for name in names:
        (tmp_path / name).mkdir()
    (tmp_path / f"run-{dead_pid}-busy" / "cgroup.procs").write_text("")  # rmdir fails: left, no error
    parent.remove_stale_children()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])


def test_add_writes_the_pid_to_cgroup_procs(tmp_path):
    Cgroup(tmp_path).add(4242)
    assert (tmp_path / "cgroup.procs").read_text() == "4242"


def test_create_child_removes_the_child_when_a_setting_fails(tmp_path):
    parent = CgroupParent(tmp_path, 1, ("pids",))
    (tmp_path / "run-1-0").mkdir()
    with pytest.raises(FileExistsError):
        parent.create_child("run-1-0", Limits(processes=9))
    assert (tmp_path / "run-1-0").is_dir()  # not ours: left alone
    bad = CgroupParent(tmp_path / "missing", 1, ("pids",))
    with pytest.raises(FileNotFoundError):
        bad.create_child("run-1-1", Limits(processes=9))
    child = parent.create_child("run-1-2", Limits(processes=None))
    assert child.path.is_dir() and (child.path.stat().st_mode & 0o777) == 0o755 & ~_umask()


def test_create_child_removes_its_cgroup_when_a_setting_cannot_be_written(tmp_path, monkeypatch):
    parent = CgroupParent(tmp_path, 2, ("pids", "memory"))
    monkeypatch.setattr(CgroupParent, "settings", lambda self, limits, session=False: [("no/such/dir", "1")])
    with pytest.raises(FileNotFoundError):
        parent.create_child("run-1-3", Limits())
    assert not (tmp_path / "run-1-3").exists()


def test_rlimits_are_set_hard_and_soft_on_a_real_process():
    child = subprocess.Popen(["sleep", "30"])
    try:
        apply_rlimits(child.pid, ((resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)))
        assert resource.prlimit(child.pid, resource.RLIMIT_NOFILE) == (64, 64)
        assert resource.prlimit(child.pid, resource.RLIMIT_CORE) == (0, 0)
    finally:
        child.kill()
        child.wait()


def test_effective_rlimits_leave_out_what_is_disabled_or_enforced_elsewhere():
    limits = Limits(processes=10, memory_bytes=1 << 30, address_space_bytes=None)
    assert dict(effective_rlimits(limits))[resource.RLIMIT_DATA] == min(1 << 30, _hard(resource.RLIMIT_DATA))
    assert resource.RLIMIT_DATA not in dict(effective_rlimits(limits, include_memory=False))
    assert resource.RLIMIT_NPROC in dict(effective_rlimits(limits, include_memory=False))
    assert resource.RLIMIT_AS not in dict(effective_rlimits(limits))
    assert resource.RLIMIT_NPROC not in dict(effective_rlimits(Limits(processes=None)))


def _hard(res: int) -> int:
    hard = resource.getrlimit(res)[1]
    return 1 << 62 if hard == resource.RLIM_INFINITY else hard


def test_janitor_close_waits_for_busy_cgroups_and_gives_up_at_the_deadline():
    from tests.sandbox.test_sandbox_internals import StubbornCgroup

    janitor = CgroupJanitor()
    slow = StubbornCgroup(3)
    janitor.retire(slow)
    janitor.close(wait_s=60)  # returns as soon as the cgroup is gone, long before the deadline
    assert janitor._pending == [] and slow.busy < 0
    stuck = StubbornCgroup(10**9)
    janitor.retire(stuck)
    janitor.close(wait_s=0)  # one sweep, then gives up
    assert janitor._pending == [stuck] and stuck.busy == 10**9 - 2


def test_either_memory_limit_alone_asks_for_a_memory_cgroup(tmp_path):
    mountinfo = v1_mount(tmp_path / "memory", "memory")
    for limits in (Limits(memory_bytes=None, session_memory_bytes=1 << 30), Limits(memory_bytes=1 << 30, session_memory_bytes=None)):
        parents, fallback = find_cgroup_parents(limits, as_root=False, mountinfo=mountinfo)
        assert [p.controllers for p in parents] == [("memory",)] and fallback is None
    assert find_cgroup_parents(Limits(memory_bytes=None, session_memory_bytes=None), as_root=False, mountinfo=mountinfo) == ((), None)


def test_a_pids_parent_that_also_limits_memory_is_not_doubled_by_another_memory_hierarchy(tmp_path):
    mountinfo = v1_mount(tmp_path / "memory", "memory") + v1_mount(tmp_path / "both", "pids,memory")
    parents, fallback = find_cgroup_parents(Limits(processes=50, memory_bytes=1 << 30), as_root=True, mountinfo=mountinfo)
    assert parents == (CgroupParent(tmp_path / "both" / CGROUP_DIR_NAME, 1, ("pids", "memory")),) and fallback is None


# -- the session's cgroups (fake hierarchies; the real ones: test_session_totals.py) ----------------

from sandbox.limits import (  # noqa: E402
    MAKE_TRIES,
    MEMORY_SLACK_BYTES,
    SessionCgroups,
    _owner_alive,
    _process_tag,
    limits_reached,
    workspace_cgroups,
    workspace_key,
    workspace_processes,
)

SESSION_LIMITS = Limits(processes=50, memory_bytes=256 << 20, session_processes=120, session_memory_bytes=1 << 30)
# Nothing written into a session's cgroup: a plain directory (these fakes) can then be removed as cgroupfs removes one.
NO_TOTALS = Limits(processes=None, memory_bytes=None, session_processes=None, session_memory_bytes=None)


def v1_roots(tmp_path):
    roots = []
    for controller in ("pids", "memory"):
        (tmp_path / controller / CGROUP_DIR_NAME).mkdir(parents=True)
        roots.append(CgroupParent(tmp_path / controller / CGROUP_DIR_NAME, 1, (controller,)))
    return tuple(roots)


def test_a_session_makes_its_cgroups_at_first_use_below_its_workspace_with_the_totals(tmp_path):
    roots = v1_roots(tmp_path)
    session = SessionCgroups(roots, tmp_path, SESSION_LIMITS)
    assert not list(roots[0].path.iterdir())  # nothing yet: a session that runs nothing costs nothing
    parents = session.parents()
    assert session.parents() is parents  # made once
    assert session.name == f"session-{_process_tag(os.getpid())}-{session.name.rsplit('-', 1)[1]}"
    pids, memory = parents
    assert pids.path == roots[0].path / f"ws-{workspace_key(tmp_path)}" / session.name == session.path_under(roots[0])
    for made in (pids.path, pids.path.parent):
        assert made.stat().st_mode & 0o777 == 0o755 & ~_umask()
    assert (pids.version, pids.controllers, memory.controllers) == (1, ("pids",), ("memory",))
    assert (pids.path / "pids.max").read_text() == "120"
    assert (memory.path / "memory.limit_in_bytes").read_text() == str(1 << 30)
    # A command's cgroup below it gets the command's own limits.
    command = pids.create_child("run-1-0", SESSION_LIMITS)
    assert (command.path / "pids.max").read_text() == "50" and command.path.parent == pids.path


def test_on_cgroup_v2_the_workspace_and_session_levels_hand_the_controllers_down(tmp_path):
    top = tmp_path / "unified"
    v2_tree(top)
    root = CgroupParent(top / CGROUP_DIR_NAME, 2, ("pids", "memory"))
    session = SessionCgroups((root,), tmp_path, SESSION_LIMITS)
    workspace_dir = session.path_under(root).parent
    workspace_dir.mkdir()
    (workspace_dir / "cgroup.subtree_control").write_text("")  # the kernel makes these on mkdir
    (workspace_dir / "memory.swap.max").write_text("max\n")
    real_mkdir = type(workspace_dir).mkdir

    def mkdir_as_the_kernel(path, *args, **kwargs):  # a new cgroup comes with its cgroup.subtree_control
        real_mkdir(path, *args, **kwargs)
        (path / "cgroup.subtree_control").write_text("")

    import pathlib
    pathlib.Path.mkdir, saved = mkdir_as_the_kernel, pathlib.Path.mkdir
    try:
        (parent,) = session.parents()
    finally:
        pathlib.Path.mkdir = saved
    assert (workspace_dir / "cgroup.subtree_control").read_text() == "+memory"  # the fake keeps the last write
    assert (parent.path / "cgroup.subtree_control").read_text() == "+memory"
    assert (parent.path / "pids.max").read_text() == "120"
    assert (parent.path / "memory.max").read_text() == str(1 << 30)
    assert (parent.path / "memory.swap.max").read_text() == "0"


def test_a_session_cgroup_that_cannot_be_made_leaves_nothing(tmp_path):
    good, _memory = v1_roots(tmp_path)
    broken = CgroupParent(tmp_path / "gone" / CGROUP_DIR_NAME, 1, ("memory",))
    session = SessionCgroups((good, broken), tmp_path, NO_TOTALS)
    with pytest.raises(FileNotFoundError) as caught:
        session.parents()
    assert caught.value.filename == str(session.path_under(broken).parent)
    assert list(good.path.iterdir()) == []  # the first hierarchy's session and workspace directories went again
    other = SessionCgroups((good,), tmp_path, NO_TOTALS)
    other.parents()
    with pytest.raises(FileNotFoundError):
        SessionCgroups((good, broken), tmp_path, NO_TOTALS).parents()
    assert [p.name for p in session.path_under(good).parent.iterdir()] == [other.name]  # another session's: kept


def test_a_setting_the_session_cgroup_refuses_removes_it_and_its_empty_workspace_directory(tmp_path, monkeypatch):
    root, _memory = v1_roots(tmp_path)
    monkeypatch.setattr(CgroupParent, "settings", lambda self, limits, session=False: [("no/such/dir", "1")])
    calls = []
    real = CgroupParent.create_child
    monkeypatch.setattr(CgroupParent, "create_child", lambda *a, **k: calls.append(1) or real(*a, **k))
    with pytest.raises(FileNotFoundError):
        SessionCgroups((root,), tmp_path, NO_TOTALS).parents()
    assert list(root.path.iterdir()) == [] and len(calls) == MAKE_TRIES


def test_a_workspace_directory_removed_by_another_session_meanwhile_is_made_again(tmp_path, monkeypatch):
    root, _memory = v1_roots(tmp_path)
    session = SessionCgroups((root,), tmp_path, NO_TOTALS)
    real, races = CgroupParent.create_child, []

    def another_session_closes_first(parent, name, limits, session=False):
        if len(races) < MAKE_TRIES - 1:
            races.append(parent.path)
            parent.path.rmdir()  # between our mkdir of the workspace's directory and of the session's
        return real(parent, name, limits, session=session)

    monkeypatch.setattr(CgroupParent, "create_child", another_session_closes_first)
    (parent,) = session.parents()
    assert parent.path.is_dir() and len(races) == MAKE_TRIES - 1
    races.clear()
    monkeypatch.setattr(CgroupParent, "create_child", lambda parent, *a, **k: races.append(1) or parent.path.rmdir() or real(parent, *a, **k))
    with pytest.raises(FileNotFoundError):
        SessionCgroups((root,), tmp_path / "other", NO_TOTALS).parents()
    assert len(races) == MAKE_TRIES  # tried again, then given up


SESSIONS_COMING_AND_GOING = """
import sys, time
from pathlib import Path
from sandbox import Limits
from sandbox.limits import CgroupJanitor, SessionCgroups, find_cgroup_parent
limits = Limits(processes=None, memory_bytes=None, session_processes=None, session_memory_bytes=None)
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    session = SessionCgroups((find_cgroup_parent("pids", sys.argv[1]),), Path("/one/workspace"), limits)
    session.parents()
    session.close(CgroupJanitor())
"""


def test_sessions_of_one_workspace_starting_and_ending_at_once_in_many_processes_all_start(tmp_path):
    """Real processes: each session's start walks the hierarchy (removing what dead ones left) and
    makes the workspace's directory; each end removes it when it was the last. One process's end
    between another's listing and its look inside, or between its two mkdirs, failed that start
    ("the pids cgroup ...: No such file or directory": the sandbox refused to run, in CI)."""
    mountinfo = v1_mount(tmp_path / "pids", "pids")
    procs = [subprocess.Popen([sys.executable, "-c", SESSIONS_COMING_AND_GOING, mountinfo, "2"], stderr=subprocess.PIPE,
                              text=True, cwd=Path(__file__).parents[2]) for _ in range(4)]
    errors = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    assert list((tmp_path / "pids" / CGROUP_DIR_NAME).iterdir()) == []  # the last session out removed the workspace's


def test_closing_removes_the_session_after_its_commands_and_the_workspace_directory_when_unused(tmp_path):
    root, memory = v1_roots(tmp_path)
    first = SessionCgroups((root, memory), tmp_path, NO_TOTALS)
    second = SessionCgroups((root,), tmp_path, NO_TOTALS)
    pids_parent, _ = first.parents()
    (second_parent,) = second.parents()
    janitor = CgroupJanitor()
    command = pids_parent.create_child("run-1-0", NO_TOTALS)
    janitor._pending.append(command)  # a command's cgroup still waiting: removed first, then the session's
    first.close(janitor)
    assert not pids_parent.path.exists() and janitor._pending == []
    assert [p.name for p in pids_parent.path.parent.iterdir()] == [second.name]  # the other session keeps its workspace's
    assert not first.path_under(memory).parent.exists()  # nobody else there
    second.close(CgroupJanitor())
    assert list(root.path.iterdir()) == []


def test_a_full_session_is_told_by_its_pids_cgroup(tmp_path):
    root, memory = v1_roots(tmp_path)
    session = SessionCgroups((root, memory), tmp_path, SESSION_LIMITS)
    assert session.full() is None  # not made yet
    pids_parent, _ = session.parents()
    assert session.full() is None  # no pids.current: unknown is not full
    (pids_parent.path / "pids.current").write_text("119\n")
    assert session.full() is None
    (pids_parent.path / "pids.current").write_text("120\n")
    assert session.full() == 120
    unlimited = SessionCgroups((root,), tmp_path / "x", Limits(session_processes=None))
    (parent,) = unlimited.parents()
    (parent.path / "pids.current").write_text("100000\n")
    assert unlimited.full() is None


def dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return int(child.stdout)


def test_the_sessions_of_dead_processes_are_removed_at_the_next_start(tmp_path):
    parent = CgroupParent(tmp_path, 1, ("pids",))
    tag = _process_tag(os.getpid())
    pid, start = tag.split("-")
    gone = dead_pid()
    layout = {
        "ws-a": [f"session-{gone}-123-0", f"session-{pid}-{int(start) + 1}-0"],  # dead; our pid, reused: dead too
        "ws-b": [f"session-{tag}-0", f"session-{gone}-5-1"],  # ours (alive) and a dead one
        "ws-c": ["session-x-1-2", "elsewise"],  # not our names: left alone
        "ws-d": [],  # an empty workspace directory: removed
    }
    for workspace, sessions in layout.items():
        for session in sessions:
            (tmp_path / workspace / session).mkdir(parents=True)
    (tmp_path / "ws-a" / f"session-{gone}-123-0" / "run-7-0").mkdir()  # a command's cgroup inside a dead session
    parent.remove_stale_children()
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == ["ws-b", f"ws-b/session-{tag}-0", "ws-c", "ws-c/elsewise", "ws-c/session-x-1-2"]


def test_whose_session_is_alive(tmp_path):
    tag = _process_tag(os.getpid())
    assert _owner_alive(f"session-{tag}-0") and _owner_alive(f"session-{tag}-17")
    assert not _owner_alive(f"session-{dead_pid()}-1-0")
    assert not _owner_alive(f"session-{tag.split('-')[0]}-1-0")  # the pid, but another process's start time
    for foreign in ("session-", "session-1-2", "session-1-2-3-4", "session-a-2-3", "session-1-b-3", "session-1-2-c"):
        assert _owner_alive(foreign), foreign
    assert _process_tag(dead_pid()) is None
    # The second part is the start time: a process started just now started about "uptime" after boot.
    child = subprocess.Popen(["sleep", "30"])
    try:
        started = int(_process_tag(child.pid).split("-")[1]) / os.sysconf("SC_CLK_TCK")
        assert abs(started - float(Path("/proc/uptime").read_text().split()[0])) < 30
    finally:
        child.kill()
        child.wait()


def test_a_process_tag_survives_a_command_name_with_spaces_and_parentheses(tmp_path):
    name = "x) y (z 1 2"
    script = "import ctypes, sys, time; ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0); print(flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script, name], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # named by now (PR_SET_NAME)
        stat = Path(f"/proc/{child.pid}/stat").read_text()
        assert f"({name[:15]})" in stat
        assert _process_tag(child.pid) == f"{child.pid}-{stat.split()[21 + name[:15].count(' ')]}"  # field 22
    finally:
        child.kill()
        child.wait()


def test_the_workspace_key_is_the_checkpoint_stores(tmp_path):
    import hashlib

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    expected = hashlib.sha256(os.fsencode(str(real))).hexdigest()[:24]
    assert workspace_key(real) == workspace_key(tmp_path / "link") == workspace_key(str(real)) == expected


def test_workspace_cgroups_list_every_session_of_the_workspace_in_every_hierarchy(tmp_path):
    mountinfo = v1_mount(tmp_path / "pids", "pids") + v1_mount(tmp_path / "memory", "memory") + v2_tree(tmp_path / "unified")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    key = f"ws-{workspace_key(workspace)}"
    made = []
    for hierarchy, sessions in (("pids", ["session-1-2-0", "session-1-2-1"]), ("memory", ["session-1-2-0"])):
        for name in sessions:
            (tmp_path / hierarchy / CGROUP_DIR_NAME / key / name / "run-1-0").mkdir(parents=True)
            made.append(tmp_path / hierarchy / CGROUP_DIR_NAME / key / name)
    (tmp_path / "pids" / CGROUP_DIR_NAME / key / "pids.max").write_text("max\n")  # a control file: not a session
    (tmp_path / "pids" / CGROUP_DIR_NAME / "ws-other" / "session-9-9-9").mkdir(parents=True)  # another workspace
    assert workspace_cgroups(workspace, mountinfo) == made
    assert workspace_cgroups(tmp_path / "elsewhere", mountinfo) == []
    # Their processes: the sessions' own members and their commands', once each.
    (made[0] / "cgroup.procs").write_text("")
    (made[0] / "run-1-0" / "cgroup.procs").write_text("10\n11\n")
    (made[1] / "run-1-0" / "cgroup.procs").write_text("12\n")  # no cgroup.procs in made[1] itself: gone meanwhile
    (made[2] / "cgroup.procs").write_text("10\n")
    (made[2] / "run-1-0" / "cgroup.procs").write_text("11\n13\n")
    assert workspace_processes(workspace, mountinfo) == {10, 11, 12, 13}


def test_the_api_is_in_the_sandbox_package():
    import sandbox

    assert sandbox.workspace_cgroups is workspace_cgroups and sandbox.workspace_processes is workspace_processes
    assert "workspace_cgroups" in sandbox.__all__ and "workspace_processes" in sandbox.__all__


def fake_cgroup(path, version, controllers, files):
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return Cgroup(path, version, controllers)


def test_which_limit_a_command_reached_is_read_from_its_cgroups_and_its_sessions(tmp_path):
    limit, total = 256 << 20, 1 << 30
    fake_cgroup(tmp_path / "m", 1, ("memory",), {"memory.max_usage_in_bytes": str(total), "memory.limit_in_bytes": str(total)})
    own = fake_cgroup(tmp_path / "m" / "run-1", 1, ("memory",), {
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        "memory.max_usage_in_bytes": str(limit - MEMORY_SLACK_BYTES), "memory.limit_in_bytes": str(limit)})
    assert limits_reached((own,)) == (("memory_bytes", 2),)  # its own limit, within the slack
    (own.path / "memory.max_usage_in_bytes").write_text(str(limit - MEMORY_SLACK_BYTES - 1))
    assert limits_reached((own,)) == (("session_memory_bytes", 2),)  # below its own, the session's at its total
    (tmp_path / "m" / "memory.max_usage_in_bytes").write_text(str(total - MEMORY_SLACK_BYTES - 1))
    assert limits_reached((own,)) == (("memory_bytes", 2),)  # neither reached (the host's OOM): as before
    (own.path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    assert limits_reached((own,)) == ()
    # pids, on the same command's other hierarchy: forks refused, by whichever limit.
    fake_cgroup(tmp_path / "p", 1, ("pids",), {"pids.peak": "120", "pids.max": "120"})
    pids = fake_cgroup(tmp_path / "p" / "run-1", 1, ("pids",), {"pids.events": "max 7\n", "pids.peak": "40", "pids.max": "50"})
    assert limits_reached((own, pids)) == (("session_processes", 7),)
    (pids.path / "pids.peak").write_text("50\n")
    assert limits_reached((pids,)) == (("processes", 7),)
    (pids.path / "pids.peak").unlink()  # a kernel without pids.peak: its own limit, as the notes always said
    assert limits_reached((pids,)) == (("processes", 7),)
    # v2: one cgroup with both controllers.
    fake_cgroup(tmp_path / "u", 2, ("pids", "memory"), {"memory.peak": str(total), "memory.max": str(total)})
    both = fake_cgroup(tmp_path / "u" / "run-1", 2, ("pids", "memory"), {
        "memory.events": "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n", "memory.peak": "1000", "memory.max": "max",
        "pids.events": "max 3\n", "pids.peak": "50", "pids.max": "50"})
    assert limits_reached((both,)) == (("session_memory_bytes", 1), ("processes", 3))


def test_forks_refused_and_peaks_are_parsed_carefully(tmp_path):
    cgroup = fake_cgroup(tmp_path / "c", 1, ("pids",), {"pids.events": "max 12\n"})
    assert cgroup.forks_refused() == 12
    for text in ("", "max\n", "max x\n", "min 3\n"):
        (cgroup.path / "pids.events").write_text(text)
        assert cgroup.forks_refused() == 0, text
    assert Cgroup(tmp_path / "gone", 1, ("pids",)).forks_refused() == 0
    assert fake_cgroup(tmp_path / "m", 1, ("memory",), {"pids.events": "max 4\n"}).forks_refused() == 0  # not a pids cgroup
    peaks = fake_cgroup(tmp_path / "p", 2, ("pids", "memory"), {"pids.peak": "9", "pids.max": "10"})
    assert peaks.peak_reached("pids") is False  # no slack for processes: 9 of 10 is not the limit
    (peaks.path / "pids.max").write_text("max\n")
    assert peaks.peak_reached("pids") is False  # no limit: never reached
    (peaks.path / "pids.peak").write_text("?\n")
    assert peaks.peak_reached("pids") is None
    assert peaks.peak_reached("memory") is None  # no memory.peak (an older kernel)
    (peaks.path / "memory.peak").write_text(str(64 << 20))
    (peaks.path / "memory.max").write_text(str((64 << 20) + MEMORY_SLACK_BYTES))
    assert peaks.peak_reached("memory") is True
