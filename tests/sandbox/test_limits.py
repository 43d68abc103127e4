"""sandbox.limits against fake cgroup trees in tmp_path: the cgroup v2 paths this v1 host cannot run.

The kernel's cgroupfs is imitated by plain files (``cgroup.controllers``,
``cgroup.subtree_control``); the mount table is handed in as mountinfo text.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

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
    for fact in ("runs as host root", "RLIMIT_NPROC", "pid_max", "no cgroup v1 'pids'", "unprivileged user", "limits.processes to None"):
        assert fact in message, fact
    # Not root, or no process limit: no pids cgroup is needed.
    assert find_cgroup_parents(Limits(processes=50, memory_bytes=None), as_root=False, mountinfo="") == ((), None)
    assert find_cgroup_parents(Limits(processes=None, memory_bytes=None), as_root=True, mountinfo="") == ((), None)


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
    monkeypatch.setattr(CgroupParent, "settings", lambda self, limits: [("no/such/dir", "1")])
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


def test_a_pids_parent_that_also_limits_memory_is_not_doubled_by_another_memory_hierarchy(tmp_path):
    mountinfo = v1_mount(tmp_path / "memory", "memory") + v1_mount(tmp_path / "both", "pids,memory")
    parents, fallback = find_cgroup_parents(Limits(processes=50, memory_bytes=1 << 30), as_root=True, mountinfo=mountinfo)
    assert parents == (CgroupParent(tmp_path / "both" / CGROUP_DIR_NAME, 1, ("pids", "memory")),) and fallback is None
