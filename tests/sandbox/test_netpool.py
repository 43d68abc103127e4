"""Network namespaces lent to one command at a time (sandbox.netpool)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sbx_helpers import host_pids_with, wait_until

import sandbox
from sandbox.netpool import Netns, NetnsError, NetnsPool, ThreadInNetns



def host_makes_network_namespaces() -> bool:
    """Judged without sandbox.netpool (util-linux's unshare), so a pool that breaks fails these tests, not skips them."""
    try:
        return os.getuid() == 0 and subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


CAN_POOL = host_makes_network_namespaces()
POOL = NetnsPool.create() if CAN_POOL else None
pytestmark = pytest.mark.skipif(not CAN_POOL, reason="this process cannot make network namespaces (not root): bwrap makes them")


def test_as_root_a_session_lends_its_commands_pooled_namespaces(tmp_path: Path):
    assert POOL is not None  # NetnsPool.create() must not give up where util-linux's unshare can make one
    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path) as box:
        assert box._launcher.netns_pool is not None

# Binds a port without SO_REUSEADDR, and leaves a connection in TIME_WAIT on it (the server closes first).
TIME_WAIT_ON = """python3 -c "
import socket, sys
s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()
c = socket.create_connection(('127.0.0.1', int(sys.argv[1]))); a, _ = s.accept(); a.close(); c.close(); print('bound')
" """


def own_netns() -> str:
    return os.readlink("/proc/thread-self/ns/net")


def test_a_thread_enters_a_namespace_with_its_loopback_up_and_comes_back():
    assert POOL is not None
    netns = POOL.take()
    home = own_netns()
    inside: list[object] = []

    def probe() -> None:
        thread = ThreadInNetns(netns.fd)
        thread.enter()
        try:
            inside.append(own_netns())
            with socket.socket() as server:
                server.bind(("127.0.0.1", 0))
                server.listen()
                socket.create_connection(server.getsockname()).close()
                inside.append("connected")
        finally:
            inside.append(thread.leave())
            inside.append(own_netns())

    worker = threading.Thread(target=probe)
    worker.start()
    worker.join()
    assert inside[0] != home and inside[1:] == ["connected", None, home]
    assert own_netns() == home
    POOL.give_back(netns)


def test_a_namespace_holding_a_socket_is_not_reused():
    pool = NetnsPool.create()
    assert pool is not None
    netns = pool.take()
    assert netns.unused()
    held: list[socket.socket] = []

    def open_socket() -> None:
        thread = ThreadInNetns(netns.fd)
        thread.enter()
        try:
            held.append(socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))  # the socket stays in that namespace
        finally:
            assert thread.leave() is None

    worker = threading.Thread(target=open_socket)
    worker.start()
    worker.join()
    assert not netns.unused()
    pool.give_back(netns)
    assert pool._idle == []  # dropped, not pooled
    held[0].close()
    pool.close()


def run(box: sandbox.Sandbox, command: str) -> str:
    result = box.run(command, cwd=box.workspace, timeout_s=60)
    assert result.exit_code == 0, result.output
    return result.output


def test_commands_one_after_another_reuse_a_namespace_left_as_new(tmp_path: Path):
    home = own_netns()
    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path) as box:
        first, second = run(box, "readlink /proc/self/ns/net"), run(box, "readlink /proc/self/ns/net")
        assert first == second and first.strip() != home  # reused, and never the host's
        # A connection left in TIME_WAIT would keep the port: the next command gets another namespace.
        assert run(box, TIME_WAIT_ON + "8123") == "bound\n"
        assert run(box, TIME_WAIT_ON + "8123") == "bound\n"
    assert own_netns() == home


def test_commands_running_at_the_same_time_never_share_a_namespace(tmp_path: Path):
    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path) as box:
        listener = "python3 -c \"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 8124)); s.listen(); print('listening', flush=True); time.sleep(60)\""
        job = box.start_background(listener, cwd=tmp_path, log_path=tmp_path / "job.log")
        try:
            assert wait_until(lambda: "listening" in (tmp_path / "job.log").read_text())
            output = box.run("python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8124))\"; echo end",
                             cwd=tmp_path, timeout_s=60).output
            assert "ConnectionRefusedError" in output and output.endswith("end\n")
        finally:
            job.stop()


def children_of_this_process() -> list[str]:
    """Every child of every thread of this process, zombies included: (pid, state)."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            found.append(f"{pid} {Path(f'/proc/{pid}/stat').read_text().split(')')[-1].split()[0]}")
    return found


def waiting_for_go(marker: str) -> int | None:
    """The sandbox's pid 1 (a copy of bwrap, so it has the marker) once it is blocked on the block
    fd: the only pipe it reads before the "go" (before it, it waits on an eventfd)."""
    for pid in host_pids_with(marker):
        with contextlib.suppress(OSError):
            if "pipe_read" in Path(f"/proc/{pid}/wchan").read_text():
                return pid
    return None


def hold_the_go(pid1: int) -> list[int]:
    """Copies of this process's ends of pid 1's block-fd pipe: while they are open, pid 1 can never
    read its "go" (EOF), as when bwrap dies before writing pid 1's eventfd."""
    argv = Path(f"/proc/{pid1}/cmdline").read_bytes().split(b"\0")
    pipe = os.readlink(f"/proc/{pid1}/fd/{int(argv[argv.index(b'--block-fd') + 1])}")
    return [os.dup(int(fd)) for fd in os.listdir("/proc/self/fd") if _link(fd) == pipe]


def _link(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@pytest.mark.parametrize("when", ["at once", "once pid 1 waits for its go"])
def test_a_thread_that_cannot_leave_the_namespace_stops_the_command(tmp_path: Path, monkeypatch, when: str):
    marker = f"abhed-netns-stuck-{os.getpid()}"
    real_leave = ThreadInNetns.leave  # still called: this test's thread must really go home
    held: list[int] = []

    def leave(self) -> str:
        real_leave(self)
        if when != "at once":
            # bwrap has cloned pid 1, which asks for its parent-death signal only after the go: so
            # killing bwrap alone left pid 1 behind, stuck or (once the block fd closed) running the
            # command without its limits. Holding the go makes the leftover visible.
            assert wait_until(lambda: waiting_for_go(marker) is not None)
            held.extend(hold_the_go(waiting_for_go(marker)))
        return "setns failed: Operation not permitted"

    monkeypatch.setattr(ThreadInNetns, "leave", leave)
    home = own_netns()
    # Earlier tests of the same run may have left children of their own (servers, fixtures): only
    # a child this command adds counts.
    before = {child.split()[0] for child in children_of_this_process()}
    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path) as box:
        with pytest.raises(sandbox.SandboxSetupError) as err:
            box.run(f"touch ran; sleep 60 # {marker}", cwd=tmp_path, timeout_s=60)
        added = [child for child in children_of_this_process() if child.split()[0] not in before]
        # bwrap's child (holding the marker in its argv) dies with it, but asynchronously
        assert wait_until(lambda: host_pids_with(marker) == []) and added == []  # bwrap killed and reaped: it never gets its "go"
    assert str(err.value) == (
        "Could not move Abhed's thread back to its own network namespace: setns failed: Operation not permitted; the "
        "command did not run. Restart Abhed: that thread's next programs would have no network."
    )
    assert not (tmp_path / "ran").exists() and own_netns() == home
    # The test really held the go: a write end of that pipe (the late case).
    assert any(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_WRONLY for fd in held) == (when != "at once")
    for fd in held:
        os.close(fd)


def test_a_start_that_fails_in_the_cgroups_still_brings_the_thread_home(tmp_path: Path, monkeypatch):
    from sandbox.limits import ThreadInCgroups

    home = own_netns()
    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path) as box:
        if not any(c.version == 1 for c in box._launcher.cgroup_parents):
            pytest.skip("no cgroup v1 hierarchy in use")
        real_leave = ThreadInCgroups.leave
        monkeypatch.setattr(ThreadInCgroups, "leave", lambda self: real_leave(self) or "/sys/fs/cgroup/pids/x (Permission denied)")
        with pytest.raises(sandbox.SandboxSetupError, match="back out of the command's cgroup"):
            box.run("touch ran", cwd=tmp_path, timeout_s=60)
    assert not (tmp_path / "ran").exists() and own_netns() == home


def test_when_no_namespace_can_be_made_bwrap_makes_the_commands_own(tmp_path: Path, monkeypatch):
    from sandbox import netpool

    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path) as box:
        pooled = run(box, "readlink /proc/self/ns/net")
        pool = box._launcher.netns_pool
        while pool._idle:  # all lent: the next command needs a new one...
            pool._idle.pop().close()

        def refused() -> netpool.Netns:
            raise netpool.NetnsError(28, "unshare(CLONE_NEWNET) failed: No space left on device")

        monkeypatch.setattr(netpool, "_new_namespace", refused)  # ...and none can be made
        own = run(box, "readlink /proc/self/ns/net")
        assert own.strip() not in (pooled.strip(), own_netns())  # bwrap's --unshare-net: neither pooled nor the host's


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_pool_starts_with_one_namespace_makes_more_on_demand_and_closes_every_descriptor():
    before = open_fds()
    pool = NetnsPool.create()
    assert pool is not None and len(pool._idle) == 1
    first, second = pool.take(), pool.take()  # the second: none idle, a new one
    assert os.fstat(first.fd).st_ino != os.fstat(second.fd).st_ino
    for fd in (first.fd, *first._stats, second.fd, *second._stats):
        assert not os.get_inheritable(fd)  # never passed on to bwrap or the command
    pool.give_back(first)
    assert pool._idle == [first]
    pool.close()
    pool.give_back(second)  # after close: closed, not kept
    assert pool._idle == [] and open_fds() == before


def test_a_namespace_whose_counts_cannot_be_read_is_not_reused():
    pool = NetnsPool()
    unreadable = Netns(os.open("/proc/thread-self/ns/net", os.O_RDONLY), (os.open("/", os.O_RDONLY),))  # read: EISDIR
    pool.give_back(unreadable)
    assert pool._idle == []
    with pytest.raises(OSError):
        os.fstat(unreadable.fd)  # closed


def test_entering_what_is_no_network_namespace_fails_and_says_why():
    before = open_fds()
    with open("/dev/null") as not_a_namespace:
        thread = ThreadInNetns(not_a_namespace.fileno())
        with pytest.raises(NetnsError) as err:
            thread.enter()
    assert str(err.value) == "[Errno 22] setns into the command's network namespace failed: Invalid argument"
    assert thread.leave() is None and open_fds() == before  # never entered: nothing to leave, nothing left open


def test_a_thread_that_cannot_go_home_says_why():
    netns = Netns(os.open("/proc/thread-self/ns/net", os.O_RDONLY), ())
    outcome: list[object] = []

    def probe() -> None:
        thread = ThreadInNetns(netns.fd)
        thread.enter()  # its own namespace: entering changes nothing
        before = open_fds()
        os.close(thread._home)
        thread._home = os.open("/dev/null", os.O_RDONLY)  # home is no namespace now
        outcome.append(thread.leave())
        outcome.append(thread.leave())  # already handled: None
        outcome.append(open_fds() - before)

    worker = threading.Thread(target=probe)
    worker.start()
    worker.join()
    netns.close()
    assert outcome == ["[Errno 22] setns into Abhed's own network namespace failed: Invalid argument", None, -1]


def test_no_pool_where_the_thread_could_not_come_back():
    # Root in a user namespace makes a network namespace but cannot go back to the host's.
    probe = (
        "import os\n"
        "from sandbox.netpool import NetnsError, NetnsPool, _new_namespace\n"
        "before = len(os.listdir('/proc/self/fd'))\n"
        "try:\n    _new_namespace()\nexcept NetnsError as exc:\n    print(exc)\n"
        "print(NetnsPool.create(), len(os.listdir('/proc/self/fd')) - before)\n"
    )
    result = subprocess.run(["unshare", "--user", "--map-root-user", sys.executable, "-c", probe],
                            capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert result.stdout == "[Errno 1] setns into the creator's network namespace failed: Operation not permitted\nNone 0\n", result.stderr


def test_no_pool_with_the_hosts_network_or_the_egress_proxy(tmp_path: Path):
    home = own_netns()
    with sandbox.Sandbox(sandbox.SandboxConfig(allow_network=True), tmp_path) as box:
        assert box._launcher.netns_pool is None
        assert run(box, "readlink /proc/self/ns/net").strip() == home  # the host's network, as asked
    with sandbox.Sandbox(sandbox.SandboxConfig(allow_hosts=("example.org:443",)), tmp_path) as box:
        assert box._launcher.netns_pool is None  # the proxy listens in each command's own namespace
        assert run(box, "readlink /proc/self/ns/net").strip() != home


def test_a_session_closes_its_pool(tmp_path: Path):
    before = open_fds()
    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path) as box:
        run(box, "true")
        assert box._launcher.netns_pool is not None and box._launcher.netns_pool._idle
    assert open_fds() == before


def test_a_namespace_that_cannot_be_entered_stops_the_command(tmp_path: Path):
    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path) as box:
        pool = box._launcher.netns_pool
        while pool._idle:
            pool._idle.pop().close()
        pool._idle.append(Netns(os.open("/dev/null", os.O_RDONLY), ()))  # lent next: no network namespace
        with pytest.raises(sandbox.SandboxSetupError) as err:
            box.run("touch ran", cwd=tmp_path, timeout_s=60)
    assert str(err.value).startswith(
        "Could not start the sandbox in its network namespace: [Errno 22] setns into the command's network namespace "
        "failed: Invalid argument; the command did not run.")
    assert not (tmp_path / "ran").exists()


def test_without_the_capability_no_namespace_is_made_and_it_says_why():
    probe = ("from sandbox.netpool import NetnsError, NetnsPool, _new_namespace\n"
             "try:\n    _new_namespace()\nexcept NetnsError as exc:\n    print(exc)\n"
             "print(NetnsPool.create())\n")
    result = subprocess.run(["setpriv", "--bounding-set", "-sys_admin", sys.executable, "-c", probe],
                            capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert result.stdout == "[Errno 1] unshare(CLONE_NEWNET) failed: Operation not permitted\nNone\n", result.stderr


def test_a_namespace_whose_pid_namespace_did_not_empty_in_time_is_closed_not_pooled(tmp_path: Path, monkeypatch):
    """A process of the command may still be alive after the teardown wait (the kernel did not
    empty its pid namespace within TEARDOWN_S): its network namespace must never be lent to the
    next command, where that process could reach the next command's loopback services."""
    from sandbox import launcher

    real_select = launcher._select

    def init_never_reaped(fds, timeout):  # the kernel's answer when the pid namespace did not empty in time
        return ([], [], []) if timeout == launcher.TEARDOWN_S else real_select(fds, timeout)

    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path) as box:
        pool = box._launcher.netns_pool
        first = run(box, "readlink /proc/self/ns/net")
        assert len(pool._idle) == 1
        held = 1 + len(pool._idle[0]._stats)   # its descriptors: the namespace and its sockstat files
        before = open_fds()
        monkeypatch.setattr(launcher, "_select", init_never_reaped)
        assert run(box, "readlink /proc/self/ns/net") == first   # lent the pooled one...
        assert pool._idle == [] and open_fds() == before - held   # ...and closed it, not pooled
        monkeypatch.setattr(launcher, "_select", real_select)
        assert run(box, "readlink /proc/self/ns/net") != first   # the next command gets a new one


def test_a_spawn_that_fails_gives_its_namespace_back(tmp_path: Path, monkeypatch):
    """Nothing ran in the namespace of a command whose bwrap could not be started: it goes back to
    the pool (not leaked: one namespace and its descriptors per failed start would add up)."""
    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path) as box:
        pool = box._launcher.netns_pool
        first = run(box, "readlink /proc/self/ns/net")
        before = open_fds()

        def no_fork(*args, **kwargs):
            raise OSError(11, "fork: Resource temporarily unavailable")
        with monkeypatch.context() as patch:
            patch.setattr(type(box._launcher), "_start_bwrap", no_fork)
            with pytest.raises(OSError, match="Resource temporarily unavailable"):
                box.run("touch ran", cwd=tmp_path, timeout_s=60)
        assert len(pool._idle) == 1 and open_fds() == before
        assert run(box, "readlink /proc/self/ns/net") == first and not (tmp_path / "ran").exists()
