"""The microvm backend: every command of a session runs in one virtual machine of its own.

The VM (qemu ``-M microvm``; the ``Vmm`` layer is where firecracker or cloud-hypervisor
would go) boots a Debian kernel and the initramfs scripts/build-microvm makes, whose agent
(sandbox/vm_agent.py) runs each command with the bwrap backend's semantics: the same
wrapper script (fresh shell per call, cwd reported on the control pipe), the same
protection plan (sandbox.protect), combined output relayed as it comes, exit code,
timeout, background jobs. The host side here turns the agent's frames back into what
``sandbox.launcher.collect`` reads from a bwrap process (an output pipe, a control pipe,
a readable fd at exit), so ``Sandbox`` runs both backends with the same code.

What the guest sees (all 9p, served by qemu on the host, which enforces the read-only ones
whatever the guest kernel does):

- the workspace read-write at its host path; protected paths read-only (per command, from
  a second, read-only export of the workspace);
- the host's ``/usr`` (and ``/bin``, ``/lib``... as the host has them) read-only; or, for the
  commands, the operator's image (``MicrovmConfig.rootfs``: ext4 or squashfs, a read-only
  virtio-blk disk the agent binds read-only on each command's ``/usr``);
- ``/etc`` read-only: a copy of the host's world-readable ``/etc`` made at session start
  (so the secrets are not even in the VM's reach);
- the operator's ``ro_binds``/``rw_binds`` (directories);
- no network device unless ``allow_network`` (then qemu's user-mode network);
- memory and vCPUs from ``MicrovmConfig``; per command a cgroup (``limits.memory_bytes``,
  ``limits.processes``) and the rlimits.

qemu itself is confined (``jailed``): its own seccomp filter (``-sandbox``) inside bwrap, with
no capabilities and namespaces of its own that hold only what it serves.

Lifetime: one VM per Sandbox, booted on first use (or at session start), powered off at
close. qemu's bwrap runs with PR_SET_PDEATHSIG=SIGKILL from a thread that lives as long as
the Sandbox, and qemu dies with its bwrap (--die-with-parent, its pid namespace), so it dies
with Abhed even on kill -9.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import NoReturn

from sandbox import vm_agent
from sandbox.bwrap import locate_bwrap
from sandbox.config import MicrovmConfig, SandboxConfig
from sandbox.errors import BackendUnavailable, ConfigError, SandboxSetupError
from sandbox.hostview import scan_host
from sandbox.limits import effective_rlimits, runs_as_host_root
from sandbox.protect import protection_mounts
from sandbox.seccomp import syscall_filter
from sandbox.shell import SANDBOX_HOME, find_shell, sandbox_env, wrapper_script

VMM_PATHS = (Path("/usr/bin/qemu-system-x86_64"), Path("/usr/local/bin/qemu-system-x86_64"))
IMAGE_FILES = ("vmlinux", "initramfs.img")
# Where an image is looked for when the configuration names none: a source checkout's
# build directory, then where the USB bundle's install.sh puts it (PREFIX/share/abhed/microvm).
IMAGE_DIRS = (
    Path(__file__).resolve().parent.parent / "build" / "microvm",
    Path(sys.argv[0]).resolve().parent.parent / "share" / "abhed" / "microvm",  # PREFIX/bin/abhed from the bundle
)
TCG_SLOWDOWN = "commands run about 5 to 20 times slower than under KVM; boot takes tens of seconds"
# A killed command's cgroup is emptied by the guest at once; the bound guards a stuck VM
# (generous: under TCG on a loaded host the guest gets little CPU, and giving up powers the
# VM off, ending every background job of the session).
TEARDOWN_S = 120.0
# How long the relay waits for the reader of a command's output before dropping it (the
# reader has given up: the command timed out and its drain time passed).
STALL_S = 0.1
PR_SET_PDEATHSIG = 1


# -- the image --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    directory: Path
    kernel_release: str
    agent_protocol: int

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinux"

    @property
    def initramfs(self) -> Path:
        return self.directory / "initramfs.img"


def find_image_dir(config: MicrovmConfig, environ: Mapping[str, str]) -> Path:
    if config.image_dir is not None:
        return config.image_dir
    if environ.get("ABHED_MICROVM_IMAGE"):
        return Path(environ["ABHED_MICROVM_IMAGE"])
    for candidate in IMAGE_DIRS:
        if (candidate / "manifest.json").is_file():
            return candidate
    raise BackendUnavailable(
        "microvm backend not available on this host: no VM image found (looked in "
        + ", ".join(str(d) for d in IMAGE_DIRS)
        + "). Build one with scripts/build-microvm, install the USB bundle's, or set microvm.image_dir "
        "(or ABHED_MICROVM_IMAGE) to the directory holding vmlinux, initramfs.img and manifest.json."
    )


def load_image(directory: Path) -> Image:
    """The image in ``directory``, every file checked against manifest.json (fail closed)."""
    manifest_path = directory / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
        release, protocol = manifest["kernel_release"], manifest["agent_protocol"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BackendUnavailable(
            f"microvm image {directory} is unusable: cannot read {manifest_path} ({exc}). Rebuild it with "
            "scripts/build-microvm."
        ) from None
    for name in IMAGE_FILES:
        actual = file_sha256(directory / name)
        if actual is None or actual != files.get(name):
            raise BackendUnavailable(
                f"microvm image {directory} is unusable: {name} "
                + ("is missing" if actual is None else f"does not match manifest.json (sha256 {actual})")
                + ". Rebuild it with scripts/build-microvm, or reinstall it from the signed bundle."
            )
    if protocol != vm_agent.PROTOCOL:
        raise BackendUnavailable(
            f"microvm image {directory} holds guest agent protocol {protocol}, this Abhed speaks "
            f"{vm_agent.PROTOCOL}. Rebuild the image with scripts/build-microvm from this version."
        )
    return Image(directory, str(release), int(protocol))


def file_sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


# -- the VMM ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    """A host directory the guest mounts over 9p at ``path`` (its tag names it to qemu)."""

    tag: str
    host: Path
    path: str
    ro: bool
    cache: str = "mmap"  # coherent with the host's edits; "loose" for what never changes


@dataclass(frozen=True)
class VmSpec:
    image: Image
    memory_mib: int
    vcpus: int
    kvm: bool
    shares: tuple[Share, ...]
    links: tuple[tuple[str, str], ...]  # top-level symlinks to recreate (bin -> usr/bin)
    socket_path: Path
    console_path: Path
    network: bool
    rootfs: Path | None = None  # the operator's /usr image, attached read-only as virtio-blk (vda)


class Qemu:
    """qemu-system-x86_64 -M microvm: the VMM this backend ships. A firecracker or
    cloud-hypervisor class would offer the same ``argv`` (virtio-serial -> vsock, 9p -> virtio-fs)."""

    name = "qemu"

    def __init__(self, path: Path) -> None:
        self.path = path

    def argv(self, spec: VmSpec) -> list[str]:
        cmdline = ["console=ttyS0", "panic=-1", "quiet", "loglevel=3"]
        if not spec.kvm:
            # Under TCG the kernel cannot calibrate the TSC against the PIT and hangs; give it the rate.
            khz = host_tsc_khz()
            cmdline += [f"tsc_early_khz={khz}", f"lpj={khz * 4}"]
        cmdline.append("abhed.links=" + ",".join(f"{name}:{target}" for name, target in spec.links))
        argv = [
            str(self.path), "-M", "microvm", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-accel", "kvm" if spec.kvm else "tcg", "-cpu", "host" if spec.kvm else "max",
            "-m", str(spec.memory_mib), "-smp", str(spec.vcpus),
            "-kernel", str(spec.image.kernel), "-initrd", str(spec.image.initramfs), "-append", " ".join(cmdline),
            "-serial", f"file:{spec.console_path}",
            "-device", "virtio-serial-device",
            "-chardev", f"socket,id=abhed,path={opt(spec.socket_path)}",
            "-device", "virtserialport,chardev=abhed,name=abhed",
        ]  # fmt: skip
        for share in spec.shares:
            readonly = ",readonly=on" if share.ro else ""
            argv += ["-fsdev", f"local,id={share.tag},path={opt(share.host)},security_model=none,multidevs=remap{readonly}"]
            argv += ["-device", f"virtio-9p-device,fsdev={share.tag},mount_tag={share.tag}"]
        if spec.network:
            argv += ["-netdev", "user,id=net0", "-device", "virtio-net-device,netdev=net0"]
        if spec.rootfs is not None:
            argv += ["-drive", f"file={opt(spec.rootfs)},if=none,id=rootfs,format=raw,readonly=on",
                     "-device", "virtio-blk-device,drive=rootfs"]
        # qemu's own seccomp filter: no obsolete syscalls, no setuid/setgid, no fork/exec, no
        # scheduler or affinity changes (the guest cannot make qemu do any of these).
        argv += ["-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"]
        return argv


def opt(path: Path) -> str:
    """A path as the value of a qemu option: a comma there would end the value and start another
    option (a workspace named "ws,readonly=off"); qemu reads ",," as one comma."""
    return str(path).replace(",", ",,")


def jailed(bwrap: Path, spec: VmSpec, argv: list[str]) -> list[str]:
    """``argv`` (the VMM) run by bwrap in namespaces of its own, seeing only what it serves.

    A guest that took over qemu (a 9p or virtio bug) holds a process with no capabilities,
    no_new_privs, qemu's seccomp filter, and a mount namespace holding only: /usr (and the
    host's top-level links into it) read-only, the image read-only, the VM's state directory
    (its /etc copy, control socket, console log), the shared directories, a minimal /dev
    (plus /dev/kvm under KVM), its own /proc and /tmp. No home, no host /etc, no other
    process (own pid namespace), no network namespace but its own unless allow_network.
    """
    state = spec.socket_path.parent
    # One bind per host directory: writable if any share of it is (qemu's readonly=on
    # enforces the read-only exports of the same tree, e.g. the workspace's "wsro").
    binds: dict[Path, bool] = {}
    for share in spec.shares:
        binds[share.host] = binds.get(share.host, False) or not share.ro
    out = [str(bwrap), "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    if spec.network:
        out.append("--share-net")
    out += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]  # first: the binds below may lie in /tmp
    for host, writable in binds.items():
        out += ["--bind" if writable else "--ro-bind", str(host), str(host)]
    for name, target in spec.links:
        out += ["--symlink", target, f"/{name}"]
    out += ["--ro-bind", str(spec.image.directory), str(spec.image.directory)]
    if spec.rootfs is not None:
        out += ["--ro-bind", str(spec.rootfs), str(spec.rootfs)]
    out += ["--bind", str(state), str(state), "--ro-bind", str(state / "etc"), "/etc"]
    if spec.kvm:
        out += ["--dev-bind", "/dev/kvm", "/dev/kvm"]
    return [*out, "--", *argv]


def host_tsc_khz() -> int:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return int(float(line.split(":")[1]) * 1000)
    except (OSError, ValueError):
        pass
    return 2_000_000


def check_rootfs(path: Path) -> None:
    """The operator's root filesystem image must be an ext4 or squashfs file we can read (fail early:
    the guest would only say so at boot)."""
    try:
        fstype = vm_agent.filesystem_type(str(path))
    except OSError as exc:
        raise ConfigError(
            f"microvm.rootfs {path} cannot be read ({exc.strerror}). Give the absolute path of a read-only ext4 or "
            "squashfs image holding what commands see as /usr (e.g. mksquashfs ROOT/usr usr.img), or remove the setting."
        ) from None
    if fstype is None:
        raise ConfigError(
            f"microvm.rootfs {path} is neither a squashfs nor an ext4 image. Make one from the tree commands should "
            "see as /usr: mksquashfs ROOT/usr usr.img, or mkfs.ext4 -d ROOT/usr usr.img SIZE."
        )


def find_vmm(config: MicrovmConfig) -> Path:
    candidates = (config.vmm_path,) if config.vmm_path is not None else VMM_PATHS
    for path in candidates:
        if path is not None and os.access(path, os.X_OK):
            return path
    raise BackendUnavailable(
        "microvm backend not available on this host: no qemu-system-x86_64 at "
        + ", ".join(str(p) for p in candidates)
        + ". Install it (Debian: apt-get install qemu-system-x86; scripts/build-microvm does) or set microvm.vmm_path."
    )


def kvm_usable() -> str | None:
    """None when /dev/kvm can be opened read-write here, else why not."""
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC))
    except FileNotFoundError:
        return "no /dev/kvm (KVM is not enabled, or this host is a VM without nested virtualisation)"
    except OSError as exc:
        return f"/dev/kvm cannot be opened ({exc.strerror}; add the user to the 'kvm' group)"
    return None


# A guest that hangs under KVM (seen on hosts that are themselves VMs) hangs every session;
# the verdict is kept for the life of the process.
_kvm_verdict: dict[str, str | None] = {}


def missing_requirements(config: MicrovmConfig | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """What this host lacks for the microvm backend (empty: it can boot VMs)."""
    config = config or MicrovmConfig()
    missing = []
    try:
        find_vmm(config)
    except BackendUnavailable as exc:
        missing.append(str(exc))
    try:
        load_image(find_image_dir(config, os.environ if environ is None else environ))
    except BackendUnavailable as exc:
        missing.append(str(exc))
    return missing


def check_host(config: SandboxConfig) -> tuple[list[str], list[str]]:
    """The backend's host check (sandbox.backends: its row's host_check): host_report of its settings."""
    return host_report(config.microvm)


def host_report(config: MicrovmConfig, environ: Mapping[str, str] | None = None) -> tuple[list[str], list[str]]:
    """For `abhed doctor`: (what is missing, what is there): the VMM, KVM, the image and its manifest."""
    problems, facts = [], []
    try:
        vmm = find_vmm(config)
        facts.append(f"VMM {vmm}")
    except BackendUnavailable as exc:
        problems.append(str(exc))
    kvm = kvm_usable()
    if kvm is None:
        facts.append("KVM: /dev/kvm opens (a guest that does not answer within "
                     f"{config.kvm_probe_s:.0f} s at the first boot means TCG after all)")
    elif config.accel == "kvm":
        problems.append(f"accel 'kvm' is configured but {kvm}")
    else:
        facts.append(f"KVM not usable ({kvm}): the VM runs under TCG, {TCG_SLOWDOWN}")
    try:
        image = load_image(find_image_dir(config, os.environ if environ is None else environ))
        facts.append(f"image {image.directory} matches its manifest (kernel {image.kernel_release}, agent protocol {image.agent_protocol})")
    except BackendUnavailable as exc:
        problems.append(str(exc))
    return problems, facts


# -- the control channel ----------------------------------------------------------------------


class Channel:
    """The host end of the virtio-serial port: frames out (locked), one reader thread in."""

    def __init__(self, sock: socket.socket, on_frame, on_close) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.on_frame, self.on_close = on_frame, on_close
        self.reader = threading.Thread(target=self._read_loop, name="abhed-microvm-reader", daemon=True)
        self.reader.start()

    def send(self, channel: int, kind: bytes, payload: bytes = b"") -> None:
        with self.lock:
            self.sock.sendall(vm_agent.frame(channel, kind, payload))

    def _read_loop(self) -> None:
        buffer = bytearray()
        header = vm_agent.HEADER
        try:
            while True:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    break
                buffer += chunk
                while len(buffer) >= header.size:
                    channel, kind, length = header.unpack_from(buffer)
                    if len(buffer) < header.size + length:
                        break
                    payload = bytes(buffer[header.size : header.size + length])
                    del buffer[: header.size + length]
                    self.on_frame(channel, kind, payload)
        except OSError:
            pass
        finally:
            self.on_close()


# -- one command in the VM, as collect() sees it ----------------------------------------------


@dataclass
class VmSpawned:
    """A command running in the VM, with the interface of launcher.Spawned.

    ``exit_pidfd`` is the read end of a pipe that becomes readable when the agent reports
    the command over (the name is collect()'s: for bwrap it is a pidfd).
    """

    vm: Vm
    channel: int
    out_w: int  # where its output goes (a pipe collect() reads, or a background log)
    ctl_r: int
    ctl_w: int
    exit_pidfd: int
    exit_w: int
    out_cap: int | None = None  # a background log stops growing here (limits.file_size_bytes)
    returncode: int | None = field(default=None)
    exit_code: int | None = None  # as the agent reported it (None: it never did)
    oom_kills: int = 0
    error: str | None = None
    written: int = 0
    abandoned: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def reached(self) -> tuple[tuple[str, int], ...]:
        """The limits the command ran into (launcher.Spawned.reached): its guest memory cgroup's OOM kills.
        The session's total is the VM's memory, which the guest kernel enforces."""
        return (("memory_bytes", self.oom_kills),) if self.oom_kills else ()

    def has_exited(self) -> bool:
        return self.done.is_set()

    def kill(self) -> None:
        if not self.done.is_set():
            self.vm.send_kill(self.channel)

    def finish(self) -> int:
        if self.returncode is None:
            self.kill()
            self.abandoned = True
            if not self.done.wait(TEARDOWN_S):
                self.vm.stop()  # the VM does not answer: power it off, which ends the command
                self.done.wait(TEARDOWN_S)
            self.returncode = 137 if self.exit_code is None else self.exit_code
            for fd in (self.exit_pidfd, self.ctl_r):
                _close(fd)
            self.exit_pidfd = self.ctl_r = -1
        return self.returncode

    # -- called by the reader thread ---------------------------------------------------------

    def on_output(self, data: bytes) -> None:
        if self.out_cap is not None:
            room = self.out_cap - self.written
            if room <= 0:
                return
            if len(data) > room:
                data = data[:room]
                self.kill()  # as RLIMIT_FSIZE would: the writer of an oversized log is stopped
        self.written += len(data)
        _write_all(self.out_w, data, lambda: self.abandoned)

    def on_control(self, data: bytes) -> None:
        _write_all(self.ctl_w, data, lambda: self.abandoned)

    def on_end(self, code: int | None, oom_kills: int = 0, error: str | None = None) -> None:
        if self.done.is_set():
            return
        if error is not None:
            _write_all(self.out_w, error.encode(), lambda: self.abandoned)
        self.exit_code, self.oom_kills, self.error = code, oom_kills, error
        for fd in (self.out_w, self.ctl_w):
            _close(fd)
        self.out_w = self.ctl_w = -1
        _write_all(self.exit_w, b"x", lambda: True)
        _close(self.exit_w)
        self.exit_w = -1
        self.done.set()


def _write_all(fd: int, data: bytes, give_up) -> None:
    """Write to a non-blocking fd; while the reader is slow, wait, unless ``give_up()``."""
    view = memoryview(data)
    while view and fd >= 0:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            if give_up():
                return
            select.select([], [fd], [], STALL_S)
        except OSError:
            return  # the reader closed its end (a background job's control pipe, once started)


def _close(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


# -- the VM -----------------------------------------------------------------------------------


class Vm:
    """One booted guest: qemu, its console log, the control channel, the commands in flight."""

    def __init__(self, argv: list[str], spec: VmSpec, setup: dict, launch_thread: ThreadPoolExecutor, timeout_s: float, state: Path) -> None:
        self.spec = spec
        self.state = state  # its /etc copy, control socket and console log; removed at stop()
        self.commands: dict[int, VmSpawned] = {}
        self.lock = threading.Lock()
        self.numbers = count(1)
        self.hello = threading.Event()
        self.ready = threading.Event()
        self.setup_error: str | None = None
        self.closed = False
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        listener.bind(str(spec.socket_path))
        listener.listen(1)
        try:
            # Started from the launcher's own long-lived thread: PR_SET_PDEATHSIG follows the thread.
            self.process = launch_thread.submit(_launch, argv, state / "qemu.log").result()
            self.channel = Channel(self._accept(listener, timeout_s), self._on_frame, self._on_close)
        finally:
            listener.close()
        if not self.hello.wait(max(0.0, timeout_s)) or self.closed:
            self._fail(f"did not start its agent within {timeout_s:.0f} s" if not self.closed else "stopped while booting")
        try:
            self.channel.send(0, b"S", json.dumps(setup).encode())
        except OSError as exc:
            self._fail(f"stopped while booting ({exc})")
        if not self.ready.wait(60) or self.setup_error is not None:
            self._fail(f"could not mount the shared directories ({self.setup_error or 'no answer'})")

    def _accept(self, listener: socket.socket, timeout_s: float) -> socket.socket:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([listener], [], [], 0.2)
            if ready:
                sock, _ = listener.accept()
                return sock
            if self.process.poll() is not None:
                break
        self._fail("never connected its control channel")

    def _fail(self, what: str) -> NoReturn:
        message = self._failure(what)  # before stop() removes the console log
        self.stop()
        raise SandboxSetupError(message)

    def _failure(self, what: str) -> str:
        return (
            f"The session's microVM {what}; no command ran. image {self.spec.image.directory}, "
            f"{'KVM' if self.spec.kvm else 'TCG'}. qemu said: {console_tail(self.state / 'qemu.log', 300)!r}; "
            f"last console lines: {console_tail(self.spec.console_path)!r}. "
            "Run 'abhed doctor'; rebuild the image with scripts/build-microvm if it is stale."
        )

    @property
    def alive(self) -> bool:
        return not self.closed and self.process.poll() is None

    def spawn(self, spec: dict, out_fd: int, out_cap: int | None) -> VmSpawned:
        ctl_r, ctl_w = os.pipe2(os.O_CLOEXEC)
        exit_r, exit_w = os.pipe2(os.O_CLOEXEC)
        out_w = os.dup(out_fd)
        for fd in (out_w, ctl_w):
            os.set_blocking(fd, False)
        with self.lock:
            number = next(self.numbers)
            spawned = VmSpawned(self, number, out_w, ctl_r, ctl_w, exit_r, exit_w, out_cap=out_cap)
            self.commands[number] = spawned
            closed = self.closed
        if closed:
            spawned.on_end(None, error="the session's microVM has stopped")
            return spawned
        try:
            self.channel.send(number, b"P", json.dumps(spec).encode())
        except OSError as exc:
            spawned.on_end(None, error=f"the session's microVM does not take commands ({exc})")
        return spawned

    def send_kill(self, number: int) -> None:
        try:
            self.channel.send(number, b"K")
        except OSError:
            pass

    def _on_frame(self, number: int, kind: bytes, payload: bytes) -> None:
        if number == 0:
            if kind == b"H":
                self.hello.set()
            elif kind in (b"R", b"E"):
                self.setup_error = payload.decode("utf-8", "replace") if kind == b"E" else None
                self.ready.set()
            return
        with self.lock:
            spawned = self.commands.get(number)
        if spawned is None:
            return
        if kind == b"O":
            spawned.on_output(payload)
        elif kind == b"C":
            spawned.on_control(payload)
        elif kind in (b"X", b"E"):
            if kind == b"X":
                report = json.loads(payload)
                spawned.on_end(int(report["code"]), int(report.get("oom_kills", 0)))
            else:
                spawned.on_end(None, error=f"the microVM's agent could not start the command: {payload.decode('utf-8', 'replace')}")
            with self.lock:
                self.commands.pop(number, None)

    def _on_close(self) -> None:
        """The VM is gone (powered off, crashed, killed): every command in flight ends."""
        self.closed = True
        with self.lock:
            pending = list(self.commands.values())
            self.commands.clear()
        for spawned in pending:
            spawned.on_end(None, error=f"the session's microVM stopped while the command ran: {console_tail(self.spec.console_path)!r}")
        self.hello.set()
        self.ready.set()

    def stop(self) -> None:
        """Power the VM off (SIGKILL: nothing in it must outlive the session) and wait for qemu."""
        self.closed = True
        if not hasattr(self, "process"):
            shutil.rmtree(self.state, ignore_errors=True)
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        channel = getattr(self, "channel", None)
        if channel is not None:
            channel.sock.close()
            channel.reader.join(5)
        shutil.rmtree(self.state, ignore_errors=True)


def _launch(argv: list[str], log: Path) -> subprocess.Popen:
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def die_with_us() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # we died before the prctl took effect
            os._exit(1)

    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, preexec_fn=die_with_us)


def console_tail(path: Path, limit: int = 600) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return "(no console log)"


# -- the launcher -----------------------------------------------------------------------------


class MicrovmLauncher:
    """Spawns commands in the session's VM: sandbox.backends.Launcher, without pipes (Capabilities.pipes)."""

    def __init__(self, config: SandboxConfig, workspace: Path, environ: Mapping[str, str],
                 on_refusal: Callable[[str], None] = lambda message: None) -> None:  # no proxy (allow_hosts refused)
        self.config = config
        self.workspace = workspace
        if config.allow_hosts:
            raise ConfigError(
                f"allow_hosts ({', '.join(config.allow_hosts)}) is filtered per host by the bwrap backend only; the "
                "microvm backend would give the whole network or none. Use backend 'bwrap' for this program, or "
                "remove allow_hosts (it then has no network)."
            )
        self.vmm = Qemu(find_vmm(config.microvm))
        rw_roots = (workspace, *(Path(os.path.realpath(p)) for p in config.rw_binds))
        self.bwrap = locate_bwrap(config.bwrap_path, writable_roots=rw_roots)  # qemu runs in it (jailed)
        self.image = load_image(find_image_dir(config.microvm, environ))
        for kind in ("ro_binds", "rw_binds"):
            for path in getattr(config, kind):
                if not path.is_dir():
                    raise ConfigError(
                        f"{kind} entry {path} is not a directory: the microvm backend shares directories only. "
                        "Share its directory instead, or use backend 'bwrap'."
                    )
        if config.microvm.rootfs is not None:
            check_rootfs(config.microvm.rootfs)
        self.shell = find_shell()
        self.env = sandbox_env(config, home=SANDBOX_HOME, tmpdir="/tmp", environ=environ)
        self.rlimits = effective_rlimits(config.limits, include_processes=False, include_memory=False)
        self.view = scan_host(config.hidden_paths, as_root=runs_as_host_root())
        self.extra_protected: tuple[str, ...] = ()
        self.accel_note: str | None = None
        pool = next((p for p in reversed(_pools) if p.serves(workspace)), None)
        self._pool = pool
        self.share_root = pool.root if pool is not None else workspace
        self._launch_thread = None if pool is not None else ThreadPoolExecutor(max_workers=1, thread_name_prefix="abhed-microvm")
        self._vm: Vm | None = None
        self._boot_lock = threading.Lock()
        self._closed = False
        if config.microvm.boot == "session-start":
            self._ensure_vm()

    def describe(self) -> list[str]:
        mc = self.config.microvm
        kvm = _kvm_verdict.get("kvm", "not probed yet (probed at the first boot)")
        return [
            f"vmm: {self.vmm.path} (qemu -M microvm)",
            f"image: {self.image.directory} (kernel {self.image.kernel_release}, agent protocol {self.image.agent_protocol}, checked against manifest.json)",
            f"accel: {mc.accel}; KVM: {'usable' if kvm is None else kvm}" + (f"; {self.accel_note}" if self.accel_note else ""),
            f"vm: {mc.memory_mib} MiB, {mc.vcpus} vCPUs, boot at {mc.boot}",
            f"/usr: {f'the image {mc.rootfs} (read-only)' if mc.rootfs is not None else 'the host /usr (read-only)'}",
            f"shell: {self.shell.path}",
            f"network: {'qemu user-mode network (allow_network)' if self.config.allow_network else 'none (no network device)'}",
            f"memory limit: {self.config.limits.memory_bytes} bytes per command (guest memory cgroup)",
            f"process limit: {self.config.limits.processes} (guest pids cgroup)",
        ]

    def close(self) -> None:
        with self._boot_lock:
            self._closed = True
            if self._vm is not None and self._pool is None:
                self._vm.stop()
            self._vm = None
        if self._launch_thread is not None:
            self._launch_thread.shutdown(wait=True)

    def prepare(self) -> None:
        self._ensure_vm()

    def spawn(self, command: str, *, cwd: Path, out_fd: int, report_cwd: bool, in_fd: int | None = None,
              err_fd: int | None = None) -> VmSpawned:
        if in_fd is not None or err_fd is not None:  # Sandbox.start_server refuses first (Capabilities.pipes)
            raise BackendUnavailable("the microvm backend cannot hand a command the caller's pipes; nothing was started.")
        vm = self._ensure_vm()
        protect = []
        for mount in protection_mounts(self.workspace, self.config.protected_paths + self.extra_protected):
            source = None
            if mount.kind == "ro-bind" and mount.source is not None:
                source = f"{vm_agent.PRIVATE}/wsro/{mount.source.relative_to(self.share_root)}"
            protect.append((mount.kind, str(mount.path), source))
        hide = [str(m.path) for m in self.view.hidden if not str(m.path).startswith("/etc/") and os.path.lexists(m.path)]
        script = wrapper_script(self.shell, ctl_fd=vm_agent.CTL_FD, report_cwd=report_cwd)
        spec = {
            "argv": self.shell.argv(script, command),
            "env": self.env,
            "cwd": str(cwd),
            "workspace": str(self.workspace),
            "workspace_in_share": str(self.workspace.relative_to(self.share_root)),
            "protect": protect,
            "hide": hide,
            "rlimits": [(res, value, value) for res, value in self.rlimits],
            "memory_max": self.config.limits.memory_bytes,
            "pids_max": self.config.limits.processes,
            "tmp_size": self.config.tmp_size_bytes,
        }
        out_cap = None if report_cwd else self.config.limits.file_size_bytes
        return vm.spawn(spec, out_fd, out_cap)

    def setup_failure(self, diagnostic: str) -> Exception:
        return SandboxSetupError(f"The microVM did not start the command: {diagnostic.strip()[:2000]}", detail=diagnostic)

    def _ensure_vm(self) -> Vm:
        with self._boot_lock:
            if self._closed:
                raise SandboxSetupError("This sandbox session is closed; create a new Sandbox to run more commands.")
            if self._vm is None or not self._vm.alive:
                if self._pool is not None:
                    self._vm = self._pool.vm_for(self)
                else:
                    if self._vm is not None:
                        self._vm.stop()  # it died (crashed, or powered itself off): boot a fresh one
                    assert self._launch_thread is not None  # made in __init__ whenever there is no pool
                    self._vm = self.boot(self._launch_thread)
            return self._vm

    def boot(self, launch_thread: ThreadPoolExecutor) -> Vm:
        """A new VM for this launcher's configuration: KVM when it works (see MicrovmConfig.accel), else TCG."""
        mc = self.config.microvm
        if mc.accel == "tcg":
            return self._boot_with(launch_thread, kvm=False, timeout_s=mc.boot_timeout_s)
        reason = kvm_usable() or _kvm_verdict.get("kvm")
        if reason is None:
            try:
                vm = self._boot_with(launch_thread, kvm=True, timeout_s=mc.kvm_probe_s if mc.accel == "auto" else mc.boot_timeout_s)
                _kvm_verdict["kvm"] = None
                return vm
            except SandboxSetupError as exc:
                if mc.accel == "kvm":
                    raise
                reason = f"a guest did not boot under KVM within {mc.kvm_probe_s:.0f} s ({str(exc)[:300]})"
        if mc.accel == "kvm":
            raise BackendUnavailable(f"microvm backend: accel 'kvm' was configured but KVM is not usable here: {reason}.")
        _kvm_verdict["kvm"] = reason
        self.accel_note = f"the microVM runs under TCG software emulation, not KVM ({reason}): {TCG_SLOWDOWN}."
        warnings.warn(self.accel_note, RuntimeWarning, stacklevel=2)
        return self._boot_with(launch_thread, kvm=False, timeout_s=mc.boot_timeout_s)

    def _boot_with(self, launch_thread: ThreadPoolExecutor, *, kvm: bool, timeout_s: float) -> Vm:
        mc = self.config.microvm
        state = Path(tempfile.mkdtemp(prefix="abhed-microvm-"))
        try:
            copy_world_readable_etc(state / "etc", {str(m.path) for m in self.view.hidden})
            shares, links = self._shares(state / "etc")
            spec = VmSpec(
                image=self.image, memory_mib=mc.memory_mib, vcpus=mc.vcpus, kvm=kvm, shares=shares, links=links,
                socket_path=state / "control.sock", console_path=state / "console.log", network=self.config.allow_network,
                rootfs=mc.rootfs,
            )  # fmt: skip
            setup = {
                "shares": [{"tag": s.tag, "path": s.path, "ro": s.ro, "cache": s.cache} for s in shares if s.tag != "usr"],
                "uid": os.geteuid(),
                "gid": os.getegid(),
                "seccomp": syscall_filter().hex(),  # the bwrap backend's filter, loaded by the agent
                "rootfs": "vda" if mc.rootfs is not None else None,  # the first (only) virtio-blk disk
            }
            return Vm(jailed(self.bwrap, spec, self.vmm.argv(spec)), spec, setup, launch_thread, timeout_s, state)
        except BaseException:
            shutil.rmtree(state, ignore_errors=True)
            raise

    def _shares(self, etc: Path) -> tuple[tuple[Share, ...], tuple[tuple[str, str], ...]]:
        shares = [Share("usr", Path("/usr"), "/usr", True, "loose")]
        links = []
        for mount in self.view.system:
            name = str(mount.path)
            if name in ("/usr", "/etc"):
                continue
            if mount.kind == "symlink":
                links.append((name.lstrip("/"), str(mount.source)))
            else:
                shares.append(Share(f"sys{len(shares)}", mount.path, name, True, "loose"))
        shares.append(Share("etc", etc, "/etc", True, "loose"))
        # The workspace's tree (the workspace itself, or a VmPool's root), mounted per command.
        shares.append(Share("ws", self.share_root, f"{vm_agent.PRIVATE}/ws", False))
        shares.append(Share("wsro", self.share_root, f"{vm_agent.PRIVATE}/wsro", True))
        for i, path in enumerate(self.config.ro_binds):
            shares.append(Share(f"ro{i}", Path(os.path.realpath(path)), str(path), True))
        for i, path in enumerate(self.config.rw_binds):
            shares.append(Share(f"rw{i}", Path(os.path.realpath(path)), str(path), False))
        return tuple(shares), tuple(links)


class VmPool:
    """Booted VMs kept across Sandboxes whose workspaces lie under ``root``, one per configuration.

    For test suites only (``shared_vms``): a boot costs tens of seconds under TCG, and a
    suite makes a workspace per test. The VM shares all of ``root``; each command still
    sees only its own workspace (the agent mounts just that one at its path).
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))
        self.vms: dict[tuple, Vm] = {}
        self.lock = threading.Lock()
        self.launch_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="abhed-microvm-pool")

    def serves(self, workspace: Path) -> bool:
        return workspace == self.root or self.root in workspace.parents

    def vm_for(self, launcher: MicrovmLauncher) -> Vm:
        with self.lock:
            key = vm_key(launcher.config)
            if os.path.ismount(launcher.workspace):
                # Its own filesystem, maybe mounted after a VM booted: qemu's view of the tree
                # (its bwrap mount namespace) was fixed at boot and would show what lies under it.
                key += (launcher.workspace,)
            vm = self.vms.get(key)
            if vm is None or not vm.alive:
                if vm is not None:
                    vm.stop()
                vm = self.vms[key] = launcher.boot(self.launch_thread)
            return vm

    def close(self) -> None:
        with self.lock:
            for vm in self.vms.values():
                vm.stop()
            self.vms.clear()
        self.launch_thread.shutdown(wait=True)


def vm_key(config: SandboxConfig) -> tuple:
    """What a booted VM depends on: configurations equal in these share one (the limits, protected
    paths and environment are applied per command, by the agent)."""
    return (config.microvm, config.bwrap_path, config.allow_network, config.ro_binds, config.rw_binds, config.hidden_paths)


_pools: list[VmPool] = []  # the shared_vms() in force, innermost last


@contextmanager
def shared_vms(root: Path):
    """While active, microvm Sandboxes with workspaces under ``root`` share booted VMs (tests)."""
    pool = VmPool(root)
    _pools.append(pool)  # nested: an outer pool (a session's) keeps serving its own workspaces
    try:
        yield pool
    finally:
        _pools.remove(pool)
        pool.close()


def copy_world_readable_etc(target: Path, hidden: set[str], source: Path = Path("/etc")) -> None:
    """``source`` as everyone may read it, copied to ``target`` (symlinks kept as symlinks).

    The guest gets this copy, never the host's /etc: a secret that is not there cannot leak,
    whatever happens inside the VM. What is hidden (not world-readable, or in ``hidden``)
    stands there as an empty mode-000 placeholder, so commands see "Permission denied" as
    under bwrap.
    """
    target.mkdir(mode=0o755)
    for root, dirs, files in os.walk(source):
        dest_root = target / os.path.relpath(root, source)
        keep = []
        for name in dirs:
            path = os.path.join(root, name)
            if os.path.islink(path):
                _copy_link(path, dest_root / name)
            elif path not in hidden and os.stat(path).st_mode & 0o005 == 0o005:
                (dest_root / name).mkdir(mode=0o755)
                keep.append(name)
            else:
                (dest_root / name).mkdir(mode=0)
        dirs[:] = keep
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path):
                _copy_link(path, dest_root / name)
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not os.path.isfile(path):
                continue
            if path not in hidden and st.st_mode & 0o004:
                try:
                    shutil.copyfile(path, dest_root / name)
                    os.chmod(dest_root / name, st.st_mode & 0o755)
                    continue
                except OSError:
                    pass
            (dest_root / name).touch(mode=0)
            os.chmod(dest_root / name, 0)


def _copy_link(path: str, dest: Path) -> None:
    try:
        os.symlink(os.readlink(path), dest)
    except OSError:
        pass


def unavailable() -> BackendUnavailable:
    """Why the microvm backend cannot run here (kept for callers that only want the reason)."""
    reasons = missing_requirements()
    return BackendUnavailable("microvm backend not available on this host: " + ("; ".join(reasons) or "unknown reason"))

