"""Issue 34: rg reads names inside a read-only view of the searched root (abhed/files/rgjail.py).

Attacks judged on the host: whatever is swapped in after the walk (a directory for a symlink to a
secret outside, a file for a FIFO, a name leading to the execute-only rg), no byte of a file outside
the root reaches the answer, and no call hangs. Both paths: the jail (sandbox backend bwrap) and
the descriptor fallback (backend none).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from abhed.files import rgjail, ripgrep
from abhed.tools import grep as grep_tool
from abhed_testing import Tools
from test_race import SWAPPER

SECRET = "SECRET-OUTSIDE-4711"
MODES = ("files_with_matches", "count", "content")


@pytest.fixture
def tree(ws: Path, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(f"{SECRET} inside\n")
    (outside / "g.txt").write_text(f"{SECRET} inside\n")
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("inside one\n")
    (ws / "d" / "g.txt").write_text("inside two\n")
    (ws / "e").mkdir()
    (ws / "e" / "h.txt").write_text("inside three\n")
    return ws, outside


def _tools(ws: Path, home: Path, backend: str = "bwrap") -> Tools:
    tools = Tools(ws, home)
    tools.settings.search.backend = "rg"
    tools.settings.sandbox.backend = backend
    return tools


def _after_walk(monkeypatch, change) -> None:
    """Run `change()` once the grep tool's walk has listed the files (before rg reads any). (The
    Python walk's path: rg walking by itself has no such moment; test_grep_rgwalk.py races it.)"""
    monkeypatch.setattr(grep_tool, "RG_WALK", False)
    real = grep_tool.walk_checked

    def walk_then_change(*args, **kwargs):
        listing = real(*args, **kwargs)
        change()
        return listing
    monkeypatch.setattr(grep_tool, "walk_checked", walk_then_change)


def test_the_jail_answers_as_the_descriptor_path_in_every_mode(tree, home, monkeypatch):
    ws, _ = tree
    (ws / "bin.dat").write_bytes(b"inside\0binary\n")
    by_descriptor = []
    real = ripgrep._by_descriptor
    for mode in MODES:
        monkeypatch.setattr(ripgrep, "_by_descriptor", lambda *a: by_descriptor.append(a[3]) or real(*a))
        jailed = _tools(ws, home)(name := "grep", pattern="inside", output_mode=mode)
        assert not by_descriptor, by_descriptor   # rg read every file in the jail: none handed back
        monkeypatch.setattr(ripgrep, "_by_descriptor", real)
        plain = _tools(ws, home, "none")(name, pattern="inside", output_mode=mode)
        assert jailed.metadata["rg_jail"] is True and plain.metadata["rg_jail"] is False
        assert jailed.content == plain.content
        assert "binary file(s) matched and were skipped: " + str(ws / "bin.dat") in jailed.content


@pytest.mark.parametrize("backend", ["bwrap", "none"])
def test_a_directory_swapped_for_a_symlink_after_the_walk_leaks_nothing(tree, home, monkeypatch, backend):
    ws, outside = tree
    _after_walk(monkeypatch, lambda: (os.rename(ws / "d", ws / "d-away"), os.symlink(outside, ws / "d")))
    for mode in MODES:
        result = _tools(ws, home, backend)("grep", pattern="SECRET|inside", output_mode=mode)
        assert result.metadata["rg_jail"] is (backend == "bwrap")
        assert SECRET not in result.content
        assert "became a symbolic link during the search" in result.content  # the two files, named
        os.unlink(ws / "d")
        os.rename(ws / "d-away", ws / "d")


@pytest.mark.parametrize("backend", ["bwrap", "none"])
def test_a_parent_swapped_for_a_symlink_leaks_no_size_of_a_file_outside(tree, home, monkeypatch, backend):
    """The size check reads each size through the listed directory's descriptor: a directory
    swapped after the walk for a link to one outside (where the same name is a big file) does not
    put that file's size in the over-the-limit note (a stat by path follows the parent link)."""
    ws, outside = tree
    (outside / "big.log").write_text("needle " + "y" * 70000 + "\n")
    (ws / "d" / "big.log").write_text("needle\n")
    _after_walk(monkeypatch, lambda: (os.rename(ws / "d", ws / "d-away"), os.symlink(outside, ws / "d")))
    tools = _tools(ws, home, backend)
    tools.settings.search.max_file_bytes = 1000
    result = tools("grep", pattern="needle|SECRET", output_mode="content")
    assert "68.4 KiB" not in result.content and "over grep's limit" not in result.content
    assert SECRET not in result.content and "y" * 20 not in result.content


def test_a_file_swapped_for_a_symlink_to_etc_leaks_nothing(tree, home, monkeypatch):
    ws, outside = tree
    _after_walk(monkeypatch, lambda: (os.unlink(ws / "e" / "h.txt"), os.symlink(outside / "f.txt", ws / "e" / "h.txt")))
    result = _tools(ws, home)("grep", pattern="SECRET|inside", output_mode="content")
    assert result.metadata["rg_jail"] is True
    assert SECRET not in result.content and "inside one" in result.content


def test_a_name_leading_to_the_execute_only_rg_shows_nothing_of_it(tree, home, monkeypatch):
    ws, _ = tree
    (ws / "x").mkdir()
    (ws / "x" / rgjail.EXE_AT.name).write_text("inside\n")   # listed by the walk, then x -> /
    _after_walk(monkeypatch, lambda: (os.rename(ws / "x", ws / "x-away"), os.symlink("/", ws / "x")))
    result = _tools(ws, home)("grep", pattern="ripgrep|inside|ELF", output_mode="count")
    assert result.metadata["rg_jail"] is True
    assert f"{ws}/x/{rgjail.EXE_AT.name}:" not in result.content
    exe = next((home / "cache").iterdir())
    assert oct(exe.stat().st_mode & 0o777) == "0o111"


@pytest.mark.parametrize("mode", ["count", "files_with_matches"])
def test_a_name_swapped_back_before_the_hosts_reopen_shows_nothing_of_the_execute_only_rg(tree, home, monkeypatch,
                                                                                          mode):
    """x -> / while rg reads (x/abhed-rg is then the execute-only rg), the real x back before the
    host re-opens the hit: rg must not have been able to read rg (it holds no capability, so
    the 0111 mode holds even for root), else the answer counts lines of rg for an inside file."""
    ws, _ = tree
    (ws / "x").mkdir()
    (ws / "x" / rgjail.EXE_AT.name).write_text("inside\n")
    _after_walk(monkeypatch, lambda: (os.rename(ws / "x", ws / "x-away"), os.symlink("/", ws / "x")))
    real = ripgrep._sniffed

    def back_then_sniff(hits, opener):
        if os.path.islink(ws / "x"):
            os.unlink(ws / "x")
            os.rename(ws / "x-away", ws / "x")
        return real(hits, opener)
    monkeypatch.setattr(ripgrep, "_sniffed", back_then_sniff)
    result = _tools(ws, home)("grep", pattern="ELF|GNU|ripgrep", output_mode=mode)
    assert result.metadata["rg_jail"] is True
    hit = f"{ws}/x/{rgjail.EXE_AT.name}"
    assert not [line for line in result.content.splitlines() if line == hit or line.startswith(hit + ":")]


def _held_rg(ws: Path, home: Path, monkeypatch) -> list[dict]:
    """What the host sees of rg in the jail while it is held on a FIFO swapped in after the walk
    (read by the watch's first look): capabilities, environment, namespaces, mounts, directory."""
    seen: list[dict] = []

    class Looking(rgjail.Watch):
        def __call__(self, pid: int) -> bool:
            for child in rgjail._children(pid):
                with open(f"/proc/{child}/status") as f:
                    caps = dict(line.split(":") for line in f if line.startswith("Cap"))
                with open(f"/proc/{child}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{child}/mountinfo") as f:
                    mounts = [line.split() for line in f]
                seen.append({"caps": {k: int(v, 16) for k, v in caps.items()}, "env": [e for e in env if e],
                             "ns": {n: os.readlink(f"/proc/{child}/ns/{n}") != os.readlink(f"/proc/self/ns/{n}")
                                    for n in ("user", "mnt", "ipc", "uts", "net", "pid")},
                             "mounts": [(m[4], m[5].split(",")) for m in mounts],
                             "cwd": os.readlink(f"/proc/{child}/cwd")})
            return super().__call__(pid)
    monkeypatch.setattr(rgjail, "Watch", Looking)
    monkeypatch.setattr(ripgrep, "RG_TIMEOUT_S", 60.0)
    _after_walk(monkeypatch, lambda: (os.unlink(ws / "d" / "f.txt"), os.mkfifo(ws / "d" / "f.txt")))
    result = _tools(ws, home)("grep", pattern="inside")
    assert result.metadata["rg_jail"] is True and "not a regular file any more" in result.content
    assert seen
    return seen


def test_rg_in_the_jail_holds_no_capability(tree, home, monkeypatch):
    """Looked at on the host while rg is held: no capability in any set (root's rg in its user
    namespace would otherwise hold them all: DAC override inside the view)."""
    ws, _ = tree
    for rg in _held_rg(ws, home, monkeypatch):
        assert set(rg["caps"]) == {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}
        assert all(value == 0 for value in rg["caps"].values()), rg["caps"]


def test_rg_in_the_jail_sees_only_the_root_read_only_in_namespaces_of_its_own(tree, home, monkeypatch):
    """The view itself, read on the host from the held rg: only the root (at its own path) and rg,
    every mount read-only (the tmpfs root too), no /proc, no /dev; its own user, mount, IPC and
    UTS namespaces; an environment of LC_ALL alone (no variable of Abhed's); the root as its
    directory (rg is given names relative to it)."""
    ws, _ = tree
    for rg in _held_rg(ws, home, monkeypatch):
        points = [point for point, _ in rg["mounts"]]
        assert sorted(points) == sorted(["/", str(ws), str(rgjail.EXE_AT)]), points
        assert all("ro" in options for _, options in rg["mounts"]), rg["mounts"]
        assert rg["ns"] == {"user": True, "mnt": True, "ipc": True, "uts": True, "net": False, "pid": False}
        assert sorted(rg["env"]) == [b"LC_ALL=C.UTF-8", f"PWD={ws}".encode()]   # (PWD: bwrap's own)
        assert rg["cwd"] == str(ws)


@pytest.mark.parametrize("writer", [False, True], ids=["no-writer", "writer-holding-it-open"])
def test_a_file_swapped_for_a_fifo_after_the_walk_does_not_block(tree, home, monkeypatch, writer):
    """rg opens whatever it is named: a FIFO blocks its open (no writer) or its read (a writer that
    sends nothing). The watch sees the wait, kills rg, and the batch is searched by descriptor."""
    ws, _ = tree
    monkeypatch.setattr(ripgrep, "RG_TIMEOUT_S", 60.0)   # a failed watch shows as this call's timeout
    held: list[int] = []

    def fifo() -> None:
        os.unlink(ws / "d" / "f.txt")
        os.mkfifo(ws / "d" / "f.txt")
        if writer:
            held.append(os.open(ws / "d" / "f.txt", os.O_RDWR))  # both ends: an open for reading returns
    _after_walk(monkeypatch, fifo)
    stuck = []
    real = ripgrep._by_descriptor
    monkeypatch.setattr(ripgrep, "_by_descriptor", lambda *a: stuck.append(a[3]) or real(*a))
    try:
        for mode in MODES:
            result = _tools(ws, home)("grep", pattern="inside", output_mode=mode)
            assert not result.is_error, result.content
            assert result.metadata["rg_jail"] is True
            assert "not a regular file any more" in result.content and str(ws / "d" / "g.txt") in result.content
            os.unlink(ws / "d" / "f.txt")
            (ws / "d" / "f.txt").write_text("inside one\n")
            for fd in held:
                os.close(fd)
            held.clear()
    finally:
        for fd in held:
            os.close(fd)
    assert stuck and all(str(ws / "d" / "f.txt") in batch for batch in stuck)


@pytest.mark.parametrize("writer", [False, True], ids=["no-writer", "writer-holding-it-open"])
def test_a_fifo_is_found_without_wait_channel_names(tree, home, monkeypatch, writer):
    """Whatever the kernel names its FIFO waits (or when wchan cannot be read), rg that makes no
    progress for STALL_S is stopped and its batch searched by descriptor."""
    ws, _ = tree
    monkeypatch.setattr(ripgrep, "RG_TIMEOUT_S", 60.0)   # a failed watch shows as this call's timeout
    monkeypatch.setattr(rgjail, "_waits_on_fifo", lambda pid: False)   # wchan says nothing
    held: list[int] = []

    def fifo() -> None:
        os.unlink(ws / "d" / "f.txt")
        os.mkfifo(ws / "d" / "f.txt")
        if writer:
            held.append(os.open(ws / "d" / "f.txt", os.O_RDWR))
    _after_walk(monkeypatch, fifo)
    stuck = []
    real = ripgrep._by_descriptor
    monkeypatch.setattr(ripgrep, "_by_descriptor", lambda *a: stuck.append(a[3]) or real(*a))
    try:
        result = _tools(ws, home)("grep", pattern="inside", output_mode="count")
    finally:
        for fd in held:
            os.close(fd)
    assert not result.is_error and result.metadata["rg_jail"] is True, result.content
    assert "not a regular file any more" in result.content and f"{ws}/d/g.txt:1" in result.content
    assert stuck and all(str(ws / "d" / "f.txt") in batch for batch in stuck)


def test_the_watch_waits_for_a_run_that_moves_and_stops_one_that_does_not(monkeypatch):
    """rgjail.Watch on real processes: a busy one is never stuck; an idle one is once STALL_S has passed
    with nothing done; one that reads a little now and then is not."""
    monkeypatch.setattr(rgjail, "_waits_on_fifo", lambda pid: False)
    monkeypatch.setattr(rgjail, "STALL_S", 0.3)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen(["sleep", "60"])
    trickle = subprocess.Popen([sys.executable, "-c", "import time, os\nwhile True:\n os.read(os.open('/etc/hostname', "
                                "os.O_RDONLY), 1); time.sleep(0.05)"])
    try:
        watches = {p.pid: rgjail.Watch() for p in (busy, idle, trickle)}
        said = {pid: [] for pid in watches}
        for _ in range(12):
            for pid, watch in watches.items():
                # each watched as bwrap would be: itself, and its children (none)
                said[pid].append(watch(pid))
            threading.Event().wait(0.06)
    finally:
        for p in (busy, idle, trickle):
            p.kill()
            p.wait()
    assert not any(said[busy.pid]) and not any(said[trickle.pid])
    assert said[idle.pid][-1] and not said[idle.pid][0]


@pytest.fixture
def many(ws: Path):
    """40 directories of 5 files (a few matching, one binary, one over a small size limit, one large)."""
    for d in range(40):
        (ws / f"d{d:02d}").mkdir()
        for f in range(5):
            (ws / f"d{d:02d}" / f"f{f}.txt").write_text(("needle here\n" if (d + f) % 7 == 0 else "hay\n") * 3)
    (ws / "d03" / "bin.dat").write_bytes(b"needle\0\n")
    (ws / "d05" / "big.txt").write_text("needle\n" * 400)      # over the limit the tests set
    (ws / "d07" / "mapped.txt").write_text("needle\n" * 100)   # "large": rg maps it
    (ws / ".gitignore").write_text("d09/\n")
    return ws


def test_rg_starts_while_the_walk_goes_on_and_answers_as_before(many, home, monkeypatch):
    """Streaming (ripgrep.Stream): with small first batches, runs start before the walk ends, and
    every mode answers exactly as the descriptor path does (notes, binary, size limit included)."""
    monkeypatch.setattr(ripgrep, "FIRST_NAMES", 3)
    monkeypatch.setattr(ripgrep, "MMAP_FROM", 500)
    monkeypatch.setattr(grep_tool, "RG_WALK", False)   # (the Python walk's path)
    started_before_end = []
    real_walk = grep_tool.walk_checked

    def walk(*args, **kwargs):
        listing = real_walk(*args, **kwargs)
        started_before_end.append(len(ripgrep._started))
        return listing
    monkeypatch.setattr(grep_tool, "walk_checked", walk)
    monkeypatch.setattr(ripgrep, "_started", [], raising=False)
    real_jailed = ripgrep._jailed
    monkeypatch.setattr(ripgrep, "_jailed", lambda rg, jail, regex, root, batch, mmap, *rest: (
        ripgrep._started.append((len(batch), mmap)), real_jailed(rg, jail, regex, root, batch, mmap, *rest))[1])
    for mode in MODES:
        tools = {b: _tools(many, home, b) for b in ("bwrap", "none")}
        for t in tools.values():
            t.settings.search.max_file_bytes = 1000
        jailed = tools["bwrap"]("grep", pattern="needle", output_mode=mode)
        plain = tools["none"]("grep", pattern="needle", output_mode=mode)
        assert jailed.metadata["rg_jail"] is True and jailed.content == plain.content
        assert "over grep's limit" in jailed.content and "binary file(s) matched" in jailed.content
        assert f"{many}/d07/mapped.txt" in jailed.content and "d09" in jailed.content   # (the hidden note)
    assert all(n > 1 for n in started_before_end), started_before_end   # runs began during the walk
    sizes = [n for n, mmap in ripgrep._started if not mmap]
    assert sizes[:3] == [3, 6, 12] and (1, True) in ripgrep._started   # growing batches; the large file mapped


def test_a_pattern_rg_refuses_mid_stream_is_searched_by_the_built_in_engine(many, home, monkeypatch):
    monkeypatch.setattr(ripgrep, "FIRST_NAMES", 2)
    nested = "(" * 300 + "needle" + ")" * 300   # RE2 nests 1000 groups, rg's engine 250
    jailed = _tools(many, home)("grep", pattern=nested, output_mode="count")
    plain = _tools(many, home, "python")("grep", pattern="needle", output_mode="count")
    assert "rg could not search with this pattern" in jailed.content
    lines = jailed.content.splitlines()
    assert [line for line in lines if not line.startswith("[searched with the built-in")] == plain.content.splitlines()


def test_the_wait_channel_hint_names_fifo_waits_only():
    """The hint (the stall rule decides in the end): a FIFO's open or read, whatever the kernel
    version calls it; never a write (rg's output pipe), nor a wait for a child or a lock."""
    for name in ("wait_for_partner", "fifo_open", "pipe_read", "anon_pipe_read", "pipe_wait_readable"):
        assert rgjail.waits_on_fifo(name), name
    for name in ("pipe_write", "anon_pipe_write", "pipe_wait_writable", "do_wait", "futex_wait_queue", "0", ""):
        assert not rgjail.waits_on_fifo(name), name


def test_without_a_children_file_the_watch_finds_rg_by_its_process_group(monkeypatch):
    """On a kernel without /proc/PID/task/TID/children, rg is found as a member of bwrap's process
    group (hostproc gives each child its own); a process of another group is not taken."""
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & echo started; wait"], stdout=subprocess.PIPE,
                              process_group=0, text=True)
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert leader.stdout.readline().strip() == "started"
        real = sorted(rgjail._children(leader.pid))
        monkeypatch.setattr(rgjail, "CHILDREN", "/nonexistent/{pid}")
        assert len(real) == 2 and sorted(rgjail._children(leader.pid)) == real
        assert other.pid not in rgjail._children(leader.pid) and leader.pid not in real
        monkeypatch.setattr(rgjail, "CHILDREN", "/etc/hostname/{pid}")   # another error (ENOTDIR): nothing, no scan
        assert rgjail._children(leader.pid) == []
    finally:
        os.killpg(leader.pid, 9)
        other.kill()
        leader.wait()
        other.wait()


def test_without_bwrap_the_descriptor_path_searches(tree, home, monkeypatch):
    ws, _ = tree
    for backend in ("none", "microvm"):
        assert _tools(ws, home, backend)("grep", pattern="inside").metadata["rg_jail"] is False
    monkeypatch.setattr(rgjail, "_broken", ["bwrap: setting up uid map: Permission denied"])
    result = _tools(ws, home)("grep", pattern="inside")
    assert result.metadata["rg_jail"] is False and str(ws / "d" / "f.txt") in result.content


def test_a_bwrap_that_fails_hands_the_batch_to_descriptors(tree, home, monkeypatch):
    ws, _ = tree
    monkeypatch.setattr(rgjail, "_broken", [])
    monkeypatch.setattr(rgjail.Jail, "argv", lambda self, options, cwd: [
        sys.executable, "-c", "import sys; sys.stderr.write('bwrap: No permissions to create new namespace\\n'); "
        "sys.exit(1)"])
    result = _tools(ws, home)("grep", pattern="inside", output_mode="count")
    assert f"{ws}/d/f.txt:1" in result.content and f"{ws}/e/h.txt:1" in result.content
    assert rgjail._broken and "namespace" in rgjail._broken[0]


def test_the_execute_only_copy_is_never_kept_where_sandboxed_commands_write(tmp_path):
    rg = ripgrep.find_rg()
    assert rg is not None
    assert rgjail.exec_only_copy(rg, tmp_path / "ws" / "cache", (tmp_path / "ws",)) is None
    exe = rgjail.exec_only_copy(rg, tmp_path / "home" / "cache", (tmp_path / "ws",))
    assert exe is not None and oct(exe.stat().st_mode & 0o777) == "0o111" and exe.stat().st_size == rg.stat().st_size
    assert rgjail.exec_only_copy(rg, tmp_path / "home" / "cache", (tmp_path / "ws",)) == exe  # made once
    assert rgjail.is_static(rg) and not rgjail.is_static(Path(sys.executable).resolve())


def test_a_readable_file_under_the_copys_name_is_replaced_not_used(tmp_path):
    """A file in the cache with the copy's name and size but readable (or not a regular file)
    is not taken for the execute-only copy: a new one is made in its place."""
    rg = ripgrep.find_rg()
    st = rg.stat()
    cache = tmp_path / "home" / "cache"
    cache.mkdir(parents=True)
    planted = cache / f"rg-{st.st_size}-{st.st_mtime_ns}"
    shutil.copyfile(rg, planted)
    planted.chmod(0o755)
    exe = rgjail.exec_only_copy(rg, cache, (tmp_path / "ws",))
    assert exe == planted and oct(exe.stat().st_mode & 0o777) == "0o111"
    planted.unlink()
    planted.mkdir()
    assert rgjail.exec_only_copy(rg, cache, (tmp_path / "ws",)) is None   # (cannot be replaced: no jail)


def test_a_new_copy_of_rg_removes_the_older_ones_and_nothing_else(tmp_path):
    rg = ripgrep.find_rg()
    cache = tmp_path / "home" / "cache"
    cache.mkdir(parents=True)
    older = [cache / "rg-123-456", cache / "rg-7-8"]
    for path in older:
        path.write_bytes(b"old rg")
        path.chmod(0o111)
    others = [cache / "rg-1-2.keep", cache / "other", cache / "xrg-1-2", cache / "rg-a-1"]
    for path in others:
        path.write_text("not a copy")
    outside = tmp_path / "outside"
    outside.write_text("stays")
    (cache / "rg-9-9").symlink_to(outside)   # a copy's name that is a link: the link goes, not its target
    exe = rgjail.exec_only_copy(rg, cache, (tmp_path / "ws",))
    assert exe is not None and exe.exists()
    assert not any(p.exists() for p in older) and not os.path.lexists(cache / "rg-9-9")
    assert all(p.read_text() == "not a copy" for p in others) and outside.read_text() == "stays"
    assert sorted(p.name for p in cache.iterdir()) == sorted([exe.name, *(p.name for p in others)])


HELD_DRIVER = r"""
import os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from abhed.files import rgjail
from abhed.tools import grep as grep_tool
from abhed_testing import Tools
ws, home = Path(sys.argv[1]), Path(sys.argv[2])
rgjail.Watch.__call__ = lambda self, pid: print("held", *rgjail._children(pid), flush=True) or False
grep_tool.RG_WALK = False   # (the Python walk's path: see _after_walk)
real = grep_tool.walk_checked
def walk_then_fifo(*args, **kwargs):
    listing = real(*args, **kwargs)
    os.unlink(ws / "d" / "f.txt")
    os.mkfifo(ws / "d" / "f.txt")
    return listing
grep_tool.walk_checked = walk_then_fifo
t = Tools(ws, home)
t.settings.search.backend = "rg"
t("grep", pattern="inside")
"""


def test_rg_held_in_the_jail_dies_with_abhed(tree, home):
    """Abhed killed (-9) while rg is held on a FIFO: bwrap dies with it (hostproc), and rg with
    bwrap (--die-with-parent); nothing is left blocked on the FIFO."""
    ws, _ = tree
    driver = subprocess.Popen([sys.executable, "-c", HELD_DRIVER, str(ws), str(home), str(Path(__file__).parent)],
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    try:
        line = driver.stdout.readline().split()
        assert line[:1] == ["held"] and len(line) == 2, line
        rg = int(line[1])
        assert _alive(rg)
    finally:
        driver.kill()
        driver.wait()
    for _ in range(300):
        if not _alive(rg):
            break
        threading.Event().wait(0.01)
    left = _alive(rg)
    if left:
        os.kill(rg, 9)   # (the test's own leftover)
    assert not left, "rg outlived Abhed, held on the FIFO"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def _elf(ptype: int, *, magic: bytes = b"\x7fELF", cls: int = 2) -> bytes:
    """A 64-bit ELF header with one program header of type `ptype` right after it."""
    head = bytearray(64)
    head[:5] = magic + bytes([cls])
    struct.pack_into("<Q", head, 32, 64)        # e_phoff
    struct.pack_into("<HH", head, 54, 56, 1)    # e_phentsize, e_phnum
    return bytes(head) + struct.pack("<I", ptype) + bytes(52)


def test_only_an_elf_without_a_program_interpreter_counts_as_static(tmp_path):
    PT_LOAD, PT_INTERP = 1, 3
    cases = {"static": (_elf(PT_LOAD), True), "dynamic": (_elf(PT_INTERP), False),
             "not elf": (_elf(PT_LOAD, magic=b"MZ\0\0"), False), "32-bit": (_elf(PT_LOAD, cls=1), False),
             "short": (b"\x7fELF\x02", False), "empty": (b"", False)}
    for name, (data, static) in cases.items():
        (tmp_path / name).write_bytes(data)
        assert rgjail.is_static(tmp_path / name) is static, name
    assert rgjail.is_static(tmp_path / "missing") is False


def test_a_missing_bwrap_means_descriptors_not_an_error(tree, home, monkeypatch):
    ws, _ = tree
    monkeypatch.setattr(rgjail, "_bwrap_seen", {})
    tools = _tools(ws, home)
    tools.settings.sandbox.bwrap_path = Path("/nonexistent/bwrap")
    result = tools("grep", pattern="inside", output_mode="count")
    assert not result.is_error and result.metadata["rg_jail"] is False
    assert f"{ws}/d/f.txt:1" in result.content


# -- real races ---------------------------------------------------------------------------------

CALLS = 40

FIFO_SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, 9)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
print("swapping", flush=True)
while True:
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
"""


def _swapper(code: str, a: Path, b: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code, str(a), str(b)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "swapping"
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()
    assert proc.returncode == -9, "the swapper stopped by itself: the attack did not run the whole time"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["bwrap", "none"])
def test_swapper_loop_through_the_jail_never_leaks(tree, home, backend):
    ws, outside = tree
    (ws / "link").symlink_to(outside)
    proc = _swapper(SWAPPER, ws / "d", ws / "link")
    try:
        tools = _tools(ws, home, backend)
        answers = [tools("grep", pattern="SECRET|inside", output_mode=MODES[n % 3]) for n in range(CALLS)]
    finally:
        _stop(proc)
    assert all(a.metadata["rg_jail"] is (backend == "bwrap") for a in answers)
    text = "\n".join(a.content for a in answers)
    assert SECRET not in text
    met = sum("became a symbolic link" in a.content for a in answers)
    print(f"\n{CALLS} greps ({backend}), {met} met the swap", flush=True)
    assert met > 0, "no call ever met the swap: the test did not exercise the race"


@pytest.mark.slow
def test_fifo_swapper_loop_never_blocks_the_jail(tree, home, monkeypatch):
    """A FIFO and a file exchanged in a loop while grep runs: every call ends (the watch sees rg
    wait on the FIFO), and each either read the file or said it is not a regular file."""
    ws, _ = tree
    monkeypatch.setattr(ripgrep, "RG_TIMEOUT_S", 60.0)
    (ws / "p").mkdir()
    os.mkfifo(ws / "p" / "f.txt")
    proc = _swapper(FIFO_SWAPPER, ws / "d" / "f.txt", ws / "p" / "f.txt")
    try:
        tools = _tools(ws, home)
        answers = [tools("grep", pattern="inside", output_mode=MODES[n % 3]) for n in range(CALLS)]
    finally:
        _stop(proc)
    assert not any(a.is_error for a in answers), [a.content for a in answers if a.is_error]
    assert all(a.metadata["rg_jail"] for a in answers)
    met = sum("not a regular file any more" in a.content for a in answers)
    print(f"\n{CALLS} greps, {met} met the FIFO", flush=True)
    assert met > 0, "no call ever met the FIFO: the test did not exercise the race"


# -- an unprivileged user -----------------------------------------------------------------------

USER = "abhed-sbx-test"  # the sandbox suites' user (tests/sandbox/conftest.py)
PYTHON = "/usr/bin/python3.11"
DRIVER = r'''
import json, os, sys, threading
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from abhed_testing import Tools
ws, home, outside = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[4])
t = Tools(ws, home)
t.settings.search.backend = "rg"
stop = threading.Event()
def swap():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    while not stop.is_set():
        libc.renameat2(-100, os.fsencode(ws / "d"), -100, os.fsencode(ws / "link"), 2)
threading.Thread(target=swap, daemon=True).start()
out = [t("grep", pattern="SECRET|inside", output_mode=("content", "count", "files_with_matches")[n % 3])
       for n in range(30)]
stop.set()
print(json.dumps({"jail": [r.metadata.get("rg_jail") for r in out], "text": "\n".join(r.content for r in out)}))
'''


@pytest.mark.slow
def test_an_unprivileged_user_greps_through_the_jail(tmp_path):
    if os.geteuid() != 0 or not os.access(PYTHON, os.X_OK):
        pytest.skip(f"needs root (to become an ordinary user) and {PYTHON}")
    from users import ensure_user
    user = ensure_user(USER)
    base = Path(tempfile.mkdtemp(prefix="abhed-jail-"))
    try:
        base.chmod(0o755)
        ws, home, outside = base / "ws", base / "home", base / "outside"
        for d in (ws / "d", home, outside):
            d.mkdir(parents=True)
        (ws / "d" / "f.txt").write_text("inside\n")
        (outside / "f.txt").write_text(f"{SECRET}\n")   # the user's own file, outside the workspace
        (ws / "link").symlink_to(outside)
        for path in [base, *base.rglob("*")]:
            os.lchown(path, user.pw_uid, user.pw_gid)
        import httpx
        site = str(Path(httpx.__file__).resolve().parent.parent)
        repo = Path(__file__).resolve().parent.parent
        rg_dir = str(ripgrep.find_rg().parent)
        out = subprocess.run([PYTHON, "-c", DRIVER, str(ws), str(home), str(repo / "tests"), str(outside)],
                             user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd=str(base), capture_output=True,
                             text=True, timeout=600,
                             env={"PATH": f"{rg_dir}:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(base),
                                  "PYTHONPATH": f"{repo}:{site}", "ABHED_HOME": str(home), "ABHED_CONFIG": ""})
        assert out.returncode == 0, out.stderr[-3000:]
        said = json.loads(out.stdout.splitlines()[-1])
        assert all(said["jail"]), said["jail"]
        assert SECRET not in said["text"] and "inside" in said["text"]
    finally:
        shutil.rmtree(base, ignore_errors=True)
