"""What a compromised image or PDF decoder tries: each function runs in the decoder's place, in
the confined child of isolate.run, and reports what every attempt gave. Standard library only, so
that tests/sandbox/test_decoder_as_user.py can run them as an unprivileged user with the system's
Python. The tests judge the host, not these reports."""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import socket
import uuid

LIBC = ctypes.CDLL(None, use_errno=True)
# Syscall numbers the attacks make by hand (no Python wrapper), per machine.
NUMBERS = {"x86_64": {"openat2": 437, "io_uring_setup": 425, "fchmodat2": 452, "pidfd_open": 434, "pidfd_getfd": 438,
                      "process_vm_readv": 310, "ptrace": 101, "prctl": 157, "socket": 41, "clone3": 435,
                      "clock_nanosleep": 230, "nanosleep": 35},
           "aarch64": {"openat2": 437, "io_uring_setup": 425, "fchmodat2": 452, "pidfd_open": 434, "pidfd_getfd": 438,
                       "process_vm_readv": 270, "ptrace": 117, "prctl": 167, "socket": 198, "clone3": 435,
                       "clock_nanosleep": 115, "nanosleep": 101}}  # fmt: skip
NR = NUMBERS.get(platform.machine(), NUMBERS["aarch64"])  # riscv64 shares the generic table


@contextlib.contextmanager
def listeners(prefix: str):
    """What an attack may try to reach on the host: a TCP and a UDP listener on the loopback and an
    abstract Unix socket, all non-blocking (a connection that got through waits in one of them).
    Gives (tcp, udp, unix, the abstract name)."""
    abstract = f"{prefix}-{uuid.uuid4().hex}"
    with socket.create_server(("127.0.0.1", 0)) as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, \
            socket.socket(socket.AF_UNIX) as unix:
        udp.bind(("127.0.0.1", 0))
        unix.bind("\0" + abstract)
        unix.listen()
        for listener in (tcp, udp, unix):
            listener.setblocking(False)
        yield tcp, udp, unix, abstract


def outcome(attempt) -> str:
    """What one attempt gave: "ok: <value>" or the error's name."""
    try:
        value = attempt()
    except OSError as exc:
        return f"{type(exc).__name__} errno {exc.errno}"
    except Exception as exc:  # noqa: BLE001 - any refusal will do; the host decides
        return type(exc).__name__
    return f"ok: {value!r}"[:300]


def raw(name: str, *args) -> int:
    """A syscall by number; -errno on failure."""
    result = LIBC.syscall(NR[name], *args)
    return result if result >= 0 else -ctypes.get_errno()


def tried(outcomes: dict[str, str]) -> list[str]:
    """The attempts that were not refused."""
    return [f"{name}: {what}" for name, what in outcomes.items() if what.startswith("ok") or what == "0"]


def write_everywhere(directory: str) -> dict[str, str]:
    new, existing = os.path.join(directory, "new"), os.path.join(directory, "existing")
    how = (os.O_WRONLY | os.O_CREAT).to_bytes(8, "little") + (0o644).to_bytes(8, "little") + bytes(8)
    return {
        "open": outcome(lambda: open(new, "w").write("pwned")),
        "os.open O_CREAT": outcome(lambda: os.open(new, os.O_WRONLY | os.O_CREAT, 0o644)),
        "openat2": str(raw("openat2", -100, new.encode(), how, 24)),
        "append": outcome(lambda: open(existing, "a").write("pwned")),
        "truncate": outcome(lambda: os.truncate(existing, 0)),
        "rename": outcome(lambda: os.rename(existing, new)),
        "unlink": outcome(lambda: os.unlink(existing)),
        "mkdir": outcome(lambda: os.mkdir(new)),
        "symlink": outcome(lambda: os.symlink(existing, new)),
        "link": outcome(lambda: os.link(existing, new)),
        "mkfifo": outcome(lambda: os.mkfifo(new)),
        "utime": outcome(lambda: os.utime(existing, (0, 0))),
        "chown": outcome(lambda: os.chown(existing, 1, 1)),
        "setxattr": outcome(lambda: os.setxattr(existing, "user.pwned", b"1")),
        "io_uring_setup": str(raw("io_uring_setup", 4, ctypes.create_string_buffer(120))),
        "exec": outcome(lambda: os.execv("/bin/sh", ["sh", "-c", f"echo pwned > {new}"])),
    }


def read_everything(path: str, home: str, held: int) -> dict[str, str]:
    ppid = os.getppid()
    found = {
        "open": outcome(lambda: open(path).read()),
        "listdir home": outcome(lambda: os.listdir(home)),
        "stat": outcome(lambda: os.stat(path).st_size),
        "parent's descriptor by /proc": outcome(lambda: open(f"/proc/{ppid}/fd/{held}").read()),
        "parent's memory": outcome(lambda: open(f"/proc/{ppid}/mem", "rb").read(1)),
        "pidfd_open": str(raw("pidfd_open", ppid, 0)),
        "ptrace seize": str(raw("ptrace", 0x4206, ppid, 0, 0)),  # PTRACE_SEIZE: attach without stopping Abhed
        "process_vm_readv": str(raw("process_vm_readv", ppid, 0, 0, 0, 0, 0)),
    }
    if found["ptrace seize"] == "0":
        raw("ptrace", 17, ppid, 0, 0)  # PTRACE_DETACH: the test reports it rather than leave Abhed traced
    for fd in range(1024):  # every descriptor this process might have been left
        found[f"fd {fd}"] = outcome(lambda: os.read(fd, 4096))
    return found


def connect(tcp_port: int, udp_port: int, abstract: str) -> dict[str, str]:
    def udp():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            return sock.sendto(b"leak", ("127.0.0.1", udp_port))

    def unix():
        with socket.socket(socket.AF_UNIX) as sock:
            return sock.connect("\0" + abstract)

    return {"tcp": outcome(lambda: socket.create_connection(("127.0.0.1", tcp_port), timeout=5)),
            "udp": outcome(udp), "abstract unix": outcome(unix), "socketpair": outcome(socket.socketpair),
            "raw socket": str(raw("socket", socket.AF_INET, socket.SOCK_STREAM, 0))}


def set_id_bits(tool: str, directory: str) -> dict[str, str]:
    found = {"chmod": outcome(lambda: os.chmod(tool, 0o4755)),
             "chmod setgid dir": outcome(lambda: os.chmod(directory, 0o2755)),
             "fchmodat2": str(raw("fchmodat2", -100, tool.encode(), 0o6755, 0)),
             "create set-uid": outcome(lambda: os.open(os.path.join(directory, "s"), os.O_CREAT | os.O_WRONLY,
                                                        0o4755)),
             "mknod set-uid": outcome(lambda: os.mknod(os.path.join(directory, "m"), 0o100000 | 0o4755))}
    for fd in range(3, 1024):  # Abhed's own descriptors, had they been left open (not 0-2: /dev/null)
        found[f"fchmod {fd}"] = outcome(lambda: os.fchmod(fd, 0o4755))
    return found
