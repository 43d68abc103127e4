"""The guest agent of the microvm backend: the VM's service, run by its init as root.

It is copied into the VM's initramfs by scripts/build-microvm and runs on the host's
python3 (the guest mounts the host's /usr read-only), so it uses the standard library only
and imports nothing from ``sandbox``. One agent per VM, single-threaded (a selector loop),
talking to the host over one virtio-serial port in frames (see ``frame``):

  host -> guest  S setup (json, once)    P spawn a command (json)    K kill a command
  guest -> host  H hello (protocol)      R setup done / E error      O output   C control
                 X exit (json: code, oom_kills)

Each command gets what the bwrap backend gives it, built here for the one process before
it execs the shell: its own cgroup (memory.max, pids.max; killing the cgroup kills
everything it started), its own mount namespace (a fresh size-capped /tmp, a minimal /dev,
no /sys, /proc/sys read-only, the protected workspace paths read-only, the agent's own
files hidden), the host user's uid with no capabilities and no_new_privs, the rlimits. Its
stdout+stderr go to one pipe and its control pipe (the wrapper's "R" and cwd report) to
another; both are relayed to the host as they come. The command has ended when the shell
has exited: its cgroup is then killed, the pipes read to their end, and only then is the
exit frame sent, so no output can arrive after it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import time

PROTOCOL = 2  # 2: the operator's root filesystem image (setup "rootfs"); an agent of 1 would ignore it
HEADER = struct.Struct(">IcI")  # channel, kind, payload length
MAX_FRAME = 1 << 20
# Where the command's shell finds the control pipe (the host's wrapper script names it). The
# agent puts it there just for the spawn (it is single-threaded; its own fds are all low).
CTL_FD = 250
PRIVATE = "/.abhed"  # the agent's own files (sysfs, cgroups, devices): hidden from every command
CGROUP_ROOT = f"{PRIVATE}/cgroup"
ROOTFS = f"{PRIVATE}/rootfs"  # the operator's image, bound read-only on each command's /usr

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 24, 22, 2
SIOCSIFFLAGS, IFF_UP = 0x8914, 0x1
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

libc = ctypes.CDLL(None, use_errno=True)


def frame(channel: int, kind: bytes, payload: bytes = b"") -> bytes:
    return HEADER.pack(channel, kind, len(payload)) + payload


def check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def mount_9p(tag: str, path: str, ro: bool, cache: str) -> None:
    os.makedirs(path, exist_ok=True)
    options = f"trans=virtio,version=9p2000.L,msize=512000,cache={cache}"
    mount(tag, path, "9p", (MS_RDONLY if ro else 0) | MS_NOSUID | MS_NODEV, options)


def filesystem_type(path: str) -> str | None:
    """"squashfs" or "ext4" by the superblock's magic at the start of `path`, else None (the host
    checks the operator's image with it before boot, the agent picks the type to mount)."""
    with open(path, "rb") as f:
        head = f.read(2048)
    if head[:4] == b"hsqs":
        return "squashfs"
    if head[1080:1082] == b"\x53\xef":
        return "ext4"
    return None


def mount_rootfs(device: str, target: str) -> None:
    """The operator's root filesystem image (the host attached it read-only), by its superblock."""
    fstype = filesystem_type(device)
    if fstype is None:
        raise OSError(f"{device}: neither a squashfs nor an ext4 filesystem")
    os.makedirs(target, exist_ok=True)
    mount(device, target, fstype, MS_RDONLY | MS_NOSUID | MS_NODEV, "noload" if fstype == "ext4" else None)


def bind_readonly(source: str, target: str) -> None:
    mount(source, target, None, MS_BIND)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


class Agent:
    def __init__(self, port: int) -> None:
        self.port = port
        self.inbox = bytearray()
        self.sel = selectors.DefaultSelector()
        self.setup: dict | None = None
        self.commands: dict[int, Command] = {}
        self.reaping: list[str] = []  # cgroups to remove once empty

    def send(self, channel: int, kind: bytes, payload: bytes = b"") -> None:
        data = memoryview(frame(channel, kind, payload))
        while data:
            data = data[os.write(self.port, data) :]

    def run(self) -> None:
        # The agent is pid 1: every orphan comes to it, so it reaps all children itself
        # (SIGCHLD wakes the loop) and hands the commands' shells their status.
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.sel.register(self.port, selectors.EVENT_READ, "port")
        self.sel.register(wake_r, selectors.EVENT_READ, "child")
        self.send(0, b"H", json.dumps({"protocol": PROTOCOL}).encode())
        while True:
            for key, _ in self.sel.select(1.0 if self.reaping else None):
                if key.data == "port":
                    self.read_port()
                elif key.data == "child":
                    os.read(wake_r, 4096)
                    self.reap_children()
                else:
                    key.data.on_pipe(key.fd)
            self.reap()

    def reap_children(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for command in list(self.commands.values()):
                if command.pid == pid:
                    command.on_exit(os.waitstatus_to_exitcode(status))

    def read_port(self) -> None:
        chunk = os.read(self.port, 65536)
        if not chunk:
            time.sleep(0.05)  # the host end is not connected (yet); a port never reports EOF for good
            return
        self.inbox += chunk
        while len(self.inbox) >= HEADER.size:
            channel, kind, length = HEADER.unpack_from(self.inbox)
            if length > MAX_FRAME or len(self.inbox) < HEADER.size + length:
                break
            payload = bytes(self.inbox[HEADER.size : HEADER.size + length])
            del self.inbox[: HEADER.size + length]
            self.handle(channel, kind, payload)

    def handle(self, channel: int, kind: bytes, payload: bytes) -> None:
        try:
            if kind == b"S":
                self.do_setup(json.loads(payload))
                self.send(0, b"R")
            elif kind == b"P":
                self.commands[channel] = Command.start(self, channel, json.loads(payload))
            elif kind == b"K" and channel in self.commands:
                self.commands[channel].kill()
        except Exception as exc:  # the host must hear why, never wait for an answer that will not come
            self.send(channel, b"E", f"{type(exc).__name__}: {exc}".encode())

    def do_setup(self, setup: dict) -> None:
        for share in setup["shares"]:
            mount_9p(share["tag"], share["path"], share["ro"], share["cache"])
        os.makedirs(f"{PRIVATE}/dev", exist_ok=True)
        mount("dev", f"{PRIVATE}/dev", "devtmpfs", MS_NOSUID)
        if setup.get("rootfs"):
            mount_rootfs(f"{PRIVATE}/dev/{setup['rootfs']}", ROOTFS)
        fd = os.open(f"{PRIVATE}/null", os.O_CREAT | os.O_WRONLY, 0)
        os.close(fd)
        os.chmod(f"{PRIVATE}/null", 0)
        os.makedirs(CGROUP_ROOT, exist_ok=True)
        mount("cgroup2", CGROUP_ROOT, "cgroup2", MS_NOSUID | MS_NODEV)
        with open(f"{CGROUP_ROOT}/cgroup.subtree_control", "w") as f:
            f.write("+memory +pids")
        # No nested user namespaces: a command could otherwise regain capabilities in one.
        with open("/proc/sys/user/max_user_namespaces", "w") as f:
            f.write("0")
        # The loopback interface up, as in bwrap's network namespace (the VM has no other).
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", IFF_UP))
        self.setup = setup

    def reap(self) -> None:
        for path in list(self.reaping):
            try:
                os.rmdir(path)
            except OSError:
                continue
            self.reaping.remove(path)


class Command:
    """One command: its shell, its cgroup, the two pipes being relayed."""

    def __init__(self, agent: Agent, channel: int, pid: int, cgroup: str, out_r: int, ctl_r: int) -> None:
        self.agent, self.channel, self.pid, self.cgroup = agent, channel, pid, cgroup
        self.open = {out_r: b"O", ctl_r: b"C"}
        self.code: int | None = None
        agent.sel.register(out_r, selectors.EVENT_READ, self)
        agent.sel.register(ctl_r, selectors.EVENT_READ, self)

    @classmethod
    def start(cls, agent: Agent, channel: int, spec: dict) -> Command:
        if agent.setup is None:
            raise RuntimeError("spawn before setup")
        cgroup = f"{CGROUP_ROOT}/cmd-{channel}"
        os.mkdir(cgroup)
        for name, value in (("memory.max", spec["memory_max"]), ("pids.max", spec["pids_max"])):
            with open(f"{cgroup}/{name}", "w") as f:
                f.write("max" if value is None else str(value))
        out_r, out_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        os.dup2(ctl_w, CTL_FD)
        os.close(ctl_w)
        ctl_w = CTL_FD
        try:
            # A plain fork (the agent is single-threaded): subprocess would wait for an exec
            # that only the grandchild does, blocking the agent for the command's whole run.
            pid = os.fork()
            if pid == 0:
                run_child(agent.setup, spec, cgroup, out_w)
        except BaseException:
            for fd in (out_r, ctl_r):
                os.close(fd)
            agent.reaping.append(cgroup)
            raise
        finally:
            os.close(out_w)
            os.close(ctl_w)
        return cls(agent, channel, pid, cgroup, out_r, ctl_r)

    def kill(self) -> None:
        try:
            with open(f"{self.cgroup}/cgroup.kill", "w") as f:
                f.write("1")
        except OSError:
            pass

    def on_exit(self, code: int) -> None:
        self.code = 128 - code if code < 0 else code
        self.kill()  # the command is over: nothing it started may stay
        self.maybe_done()

    def on_pipe(self, fd: int) -> None:
        data = os.read(fd, 65536)
        if data:
            self.agent.send(self.channel, self.open[fd], data)
            return
        self.agent.sel.unregister(fd)
        os.close(fd)
        del self.open[fd]
        self.maybe_done()

    def maybe_done(self) -> None:
        if self.code is not None and not self.open:
            self.agent.send(self.channel, b"X", json.dumps({"code": self.code, "oom_kills": self.oom_kills()}).encode())
            del self.agent.commands[self.channel]
            self.agent.reaping.append(self.cgroup)

    def oom_kills(self) -> int:
        try:
            with open(f"{self.cgroup}/memory.events") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except OSError:
            pass
        return 0


def run_child(setup: dict, spec: dict, cgroup: str, out_w: int) -> None:
    """In the forked child: stdin /dev/null, stdout+stderr the output pipe, the control pipe
    at CTL_FD, nothing else open; a new session; then confine and exec the shell. Never returns."""
    try:
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.closerange(3, CTL_FD)
        os.closerange(CTL_FD + 1, 65536)
        os.setsid()
    except BaseException as exc:
        os.write(2, f"abhed-agent: cannot start the command: {exc}\n".encode())
        os._exit(126)
    confine(setup, spec, cgroup)
    try:
        os.execve(spec["argv"][0], spec["argv"], spec["env"])
    except BaseException as exc:
        os.write(2, f"abhed-agent: cannot run {spec['argv'][0]}: {exc}\n".encode())
    os._exit(127)


def confine(setup: dict, spec: dict, cgroup: str) -> None:
    """In the command's process, before exec: everything in the module docstring, in order.

    This process (A) joins the cgroup and makes the new namespaces; its child (B) is pid 1
    of the new pid namespace, sets up the mounts and stays as the namespace's init; B's
    child (C) drops every privilege and returns here to exec the shell. A and B exit with
    C's status; when B exits the kernel kills whatever is left in the namespace. A failure
    ends the process with the reason on its output (the command never wrote "R", so the
    host reports that it did not run).
    """
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        with open(f"{cgroup}/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
        check(libc.unshare(CLONE_NEWNS | CLONE_NEWPID), "unshare")
        child = os.fork()
        if child:
            os._exit(wait_status(child))  # A: mirror B
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_IGN)  # B is init: the command cannot stop it early
        make_mounts(setup, spec)
        shell = os.fork()
        if shell:
            os._exit(init_loop(shell))
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        drop_privileges(setup, spec)
    except BaseException as exc:
        os.write(2, f"abhed-agent: cannot confine the command: {type(exc).__name__}: {exc}\n".encode())
        os._exit(126)


def wait_status(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def init_loop(shell: int) -> int:
    """pid 1 of a command's namespace: reap everything; the shell's status is the answer."""
    while True:
        pid, status = os.wait()
        if pid == shell:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


def make_mounts(setup: dict, spec: dict) -> None:
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    if setup.get("rootfs"):
        bind_readonly(ROOTFS, "/usr")  # the operator's image is all the command sees of /usr
    # The fresh /tmp would cover a bind that lies under /tmp: carry those over.
    under_tmp = sorted((s["path"] for s in setup["shares"] if s["path"].startswith("/tmp/")), key=lambda p: p.count("/"))
    for i, path in enumerate(under_tmp):
        os.makedirs(f"{PRIVATE}/keep/{i}", exist_ok=True)
        mount(path, f"{PRIVATE}/keep/{i}", None, MS_BIND | MS_REC)
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec['tmp_size']},mode=1777")
    for i, path in enumerate(under_tmp):
        os.makedirs(path, exist_ok=True)
        mount(f"{PRIVATE}/keep/{i}", path, None, MS_BIND | MS_REC)
    # The workspace: its directory in the shared tree, at its host path.
    workspace = spec["workspace"]
    os.makedirs(workspace, exist_ok=True)
    mount(f"{PRIVATE}/ws/{spec['workspace_in_share']}", workspace, None, MS_BIND | MS_NOSUID | MS_NODEV)
    for kind, path, source in spec["protect"]:
        protect(kind, path, source)
    for path in spec["hide"]:
        protect("empty-dir" if os.path.isdir(path) else "null-file", path, None)
    os.mkdir("/tmp/home", 0o700)
    os.chown("/tmp/home", setup["uid"], setup["gid"])
    mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "size=64k,mode=755")
    for name in DEVICES:
        open(f"/dev/{name}", "w").close()
        mount(f"{PRIVATE}/dev/{name}", f"/dev/{name}", None, MS_BIND)
    os.mkdir("/dev/shm", 0o1777)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | (1 << 3))  # this namespace's processes only (MS_NOEXEC)
    bind_readonly("/proc/sys", "/proc/sys")
    bind_readonly(f"{PRIVATE}/null", "/proc/sysrq-trigger")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY)  # the guest's root: nothing to write there
    mount("tmpfs", PRIVATE, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=555")


def drop_privileges(setup: dict, spec: dict) -> None:
    for res, soft, hard in spec["rlimits"]:
        resource.setrlimit(res, (soft, hard))
    os.chdir(spec["cwd"])
    os.setgroups([])
    os.setgid(setup["gid"])
    # The bounding set while still root: dropping it needs CAP_SETPCAP, which setuid() to
    # another uid takes away (the drops then failed, and a command kept a full bounding set).
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
            check(-1, f"drop capability {cap} from the bounding set")  # EINVAL: past the last one
    os.setuid(setup["uid"])
    drop_capabilities()
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    program = bytes.fromhex(setup["seccomp"])
    if program:
        buffer = ctypes.create_string_buffer(program, len(program))
        fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
        fprog_buffer = ctypes.create_string_buffer(fprog, len(fprog))
        check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog_buffer, 0, 0), "seccomp")
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def protect(kind: str, path: str, source: str | None) -> None:
    """One protection mount, as sandbox.protect plans it (see sandbox/hostview.Mount)."""
    if kind == "bind":
        mount(path, path, None, MS_BIND)  # a pin: a mount point cannot be renamed or replaced
    elif kind == "ro-bind":
        bind_readonly(source or path, path)
    elif kind == "empty-dir":
        os.makedirs(path, exist_ok=True)
        mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=555")
    elif kind == "null-file":
        if not os.path.lexists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0))
        bind_readonly(f"{PRIVATE}/null", path)
    else:
        raise ValueError(f"unknown protection {kind!r}")


def drop_capabilities() -> None:
    """capset(): empty effective, permitted and inheritable sets (uid 0 keeps none either)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    check(libc.capset(header, data), "capset")


def open_port() -> int:
    for name in sorted(os.listdir(f"{PRIVATE}/sys/class/virtio-ports")):
        with open(f"{PRIVATE}/sys/class/virtio-ports/{name}/name") as f:
            if f.read().strip() == "abhed":
                return os.open(f"/dev/{name}", os.O_RDWR)
    raise SystemExit("abhed-agent: no virtio-serial port named 'abhed'")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        Agent(open_port()).run()
    except BaseException as exc:  # pid 1's child: say why on the console, then power off
        print(f"abhed-agent: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    os.sync()
    libc.reboot(0x4321FEDC)  # RB_POWER_OFF
