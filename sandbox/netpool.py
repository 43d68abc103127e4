"""Each command's own network namespace, taken from a pool instead of made anew by bwrap.

``bwrap --unshare-net`` makes a network namespace per command (its loopback device and
sysctl tables: about 1 ms of CPU on the 2-core test host) and the kernel frees it after
the command in a worker thread (``cleanup_net``, more CPU competing with the next one). As
host root the launcher keeps a pool instead: a command takes an idle namespace (a new one
when all are in use), bwrap is forked inside it (the launching thread enters it for the
fork, as with sandbox.limits.ThreadInCgroups, and goes back) and told ``--share-net``, and
the namespace returns to the pool once every process of the command is gone.

So commands running at the same time never share a namespace -- each has its own loopback,
ports and abstract Unix sockets, none of the host's -- while commands one after another
reuse one, and only one as good as new: its predecessor's sockets closed when its pid
namespace emptied, and the namespace goes back to the pool only when its own socket counts
(``/proc/net/sockstat``, ``sockstat6``) say no socket is left, not even a connection in
TIME_WAIT (which would keep its port from a server started again without SO_REUSEADDR);
else it is dropped and the next command gets a new one. Nobody in the sandbox has a
capability, so no address, route, firewall rule or sysctl of a namespace can have changed.
Only its traffic counters carry over.

Not used with ``allow_network`` (the host's network) or ``allow_hosts`` (the egress proxy
listens in each command's namespace), nor when this process may not make namespaces
(not root): bwrap then makes one per command as before.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913  # pragma: no mutate (0x8914, SIOCSIFFLAGS, sets lo's flags to 0 and the next call sets IFF_UP: the same end)
_SIOCSIFFLAGS, _IFF_UP = 0x8914, 0x1
_THREAD_NETNS = "/proc/thread-self/ns/net"

_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(OSError):
    """A namespace could not be made, entered or left."""


class Netns:
    """One network namespace: a descriptor of it, and of its socket counts."""

    def __init__(self, fd: int, stats: tuple[int, ...]) -> None:
        self.fd = fd
        self._stats = stats  # /proc/net/sockstat and sockstat6, opened inside: they count this namespace's sockets

    def unused(self) -> bool:
        """No socket at all in the namespace (TIME_WAIT ones included)?"""
        for fd in self._stats:
            os.lseek(fd, 0, os.SEEK_SET)  # pragma: no mutate (offset 1 drops the "s" of "sockets:", which is not read)
            counts = os.read(fd, 4096).split()  # pragma: no mutate (both files are a few hundred bytes)
            # "sockets: used N", "TCP: inuse N orphan N tw N alloc N mem N", "UDP6: inuse N" ...: orphan,
            # alloc and mem count the whole host; an orphan of ours is still "inuse".
            for name, value in zip(counts, counts[1:]):
                if name in (b"used", b"inuse", b"tw") and value != b"0":
                    return False
        return True

    def close(self) -> None:
        for fd in (self.fd, *self._stats):
            os.close(fd)


class NetnsPool:
    """Idle network namespaces, each lent to one command at a time."""

    def __init__(self) -> None:
        self._idle: list[Netns] = []
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def create(cls) -> NetnsPool | None:
        """A pool with one namespace ready, or None when this process cannot make one."""
        pool = cls()
        try:
            pool.give_back(_new_namespace())
        except NetnsError:
            return None
        return pool

    def take(self) -> Netns:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _new_namespace()

    def give_back(self, netns: Netns) -> None:
        """Return a namespace no process uses any more (its command's pid namespace is empty).

        Kept only when no socket is left in it; else closed (the kernel frees it).
        """
        try:
            reusable = netns.unused()
        except OSError:
            reusable = False
        with self._lock:
            if reusable and not self._closed:
                self._idle.append(netns)
                return
        netns.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for netns in idle:
            netns.close()


class ThreadInNetns:
    """The calling thread inside network namespace ``fd`` for a moment, so what it forks starts there."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._home: int | None = None

    def enter(self) -> None:
        home = os.open(_THREAD_NETNS, os.O_RDONLY)  # not inheritable (PEP 446): bwrap never gets it
        try:
            _setns(self.fd, "the command's")
        except BaseException:
            os.close(home)
            raise
        self._home = home

    def leave(self) -> str | None:
        """Back home; None, or why not (the caller must not go on: this thread's children would have no network)."""
        if self._home is None:
            return None
        try:
            _setns(self._home, "Abhed's own")
        except NetnsError as exc:
            return str(exc)
        finally:
            os.close(self._home)
            self._home = None
        return None  # pragma: no mutate (deleted, the function returns None all the same)


def _setns(fd: int, whose: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise NetnsError(err, f"setns into {whose} network namespace failed: {os.strerror(err)}")


def _new_namespace() -> Netns:
    """A new network namespace with its loopback up.

    Made by a short-lived thread (unshare changes only the calling thread's namespace),
    so this thread stays where it is.
    """
    outcome: list[Netns | NetnsError] = []

    def make() -> None:
        fds: list[int] = []
        try:
            home = os.open(_THREAD_NETNS, os.O_RDONLY)  # os.open's descriptors are not inheritable (PEP 446)
            try:
                if _libc.unshare(CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise NetnsError(err, f"unshare(CLONE_NEWNET) failed: {os.strerror(err)}")
                _loopback_up()
                for path in (_THREAD_NETNS, "/proc/thread-self/net/sockstat", "/proc/thread-self/net/sockstat6"):
                    fds.append(os.open(path, os.O_RDONLY))
                # The launching thread must be able to come back (root in a user namespace cannot
                # re-enter the host's network namespace): prove it here, where failing costs nothing.
                _setns(home, "the creator's")
            finally:
                os.close(home)
            outcome.append(Netns(fds[0], tuple(fds[1:])))
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            outcome.append(exc if isinstance(exc, NetnsError) else NetnsError(exc.errno, f"setting it up failed: {exc}"))

    thread = threading.Thread(target=make, name="abhed-sandbox-netns")
    thread.start()
    thread.join()
    if isinstance(outcome[0], NetnsError):
        raise outcome[0]
    return outcome[0]


def _loopback_up() -> None:
    """lo up: the kernel then gives it 127.0.0.1/8 and ::1, as bwrap's own set-up does."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)  # pragma: no mutate (SIOCGIFFLAGS ignores the flags passed in)
        flags = struct.unpack_from("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))
