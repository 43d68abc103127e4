"""Network by name: a sandbox without network but for a proxy that admits only the listed hosts.

    process in the sandbox --HTTP(S)_PROXY--> 127.0.0.1:3128 in the sandbox's own network namespace
        (a listening socket this process made there and holds; nothing runs in the sandbox for it)
    --> CONNECT host:port (or GET http://host:port/...) --> listed? resolve on the host, connect, relay
                                                       --> not listed: 403, and the refusal is reported

The sandbox keeps its own network namespace (loopback only): a program that ignores the proxy
variables, or opens a raw socket, reaches nothing at all. The proxy matches the requested host
exactly (no suffixes, no wildcards) with one of the listed ports; only a listed name is resolved,
on the host, and an IP address is reached only when that literal address is listed.
"""

from __future__ import annotations

import ctypes
import fcntl
import ipaddress
import os
import re
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sandbox.errors import ConfigError, SandboxSetupError

PROXY_PORT = 3128  # inside the sandbox's own network namespace, which has nothing else
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
# What a client needs to find the proxy (curl, wget, Python's urllib and httpx, requests, Node's
# undici with a global agent, Go's net/http read these); NO_PROXY empty: nothing goes direct.
_PROXIED = {"http_proxy": PROXY_URL, "https_proxy": PROXY_URL, "all_proxy": PROXY_URL, "no_proxy": ""}
PROXY_ENV = {**_PROXIED, **{name.upper(): value for name, value in _PROXIED.items()}}

HEAD_LIMIT = 16 * 1024  # a request head larger than this is refused
MAX_CONNECTIONS = 64  # at once, per sandbox: beyond it a connection is refused (the host's threads are ours)
CONNECT_TIMEOUT_S = 15.0
HEAD_TIMEOUT_S = 30.0
LISTEN_TIMEOUT_S = 30.0  # for the forked child to make the listening socket (it takes a millisecond)
LINGER_S = 2.0  # after a refusal, how long the client has to read it before the connection is closed
CLOSE_WAIT_S = 2.0  # at the sandbox's close, how long its connections' threads have to report
_NS_GET_USERNS = 0xB701  # ioctl on a namespace fd: the user namespace that owns it
_IP_FREEBIND = 15
_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,62})(?:\.[a-z0-9_](?:[a-z0-9_-]{0,62}))*")


@dataclass(frozen=True)
class Endpoint:
    host: str  # a lower-case name without the trailing dot, or an IP address in its canonical form
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoint(text: str) -> Endpoint | None:
    """``host:port`` or ``[v6]:port`` in canonical form; None when it is not one."""
    if not isinstance(text, str) or len(text) > 300:
        return None
    if text.startswith("["):
        host, _, port = text[1:].partition("]:")  # no "]:": port is empty, refused below
    else:
        host, sep, port = text.rpartition(":")
        if not sep or ":" in host:
            return None
    if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    try:
        return Endpoint(ipaddress.ip_address(host).compressed, int(port))
    except ValueError:
        pass
    if text.startswith("["):
        return None  # brackets hold only an IPv6 address
    name = host.lower().removesuffix(".")
    return Endpoint(name, int(port)) if _NAME.fullmatch(name) else None


def parse_allowed(entries: tuple[str, ...] | list[str]) -> tuple[Endpoint, ...]:
    """The operator's ``allow_hosts``, each ``host:port``; ConfigError naming a bad one."""
    allowed = []
    for entry in entries:
        endpoint = parse_endpoint(entry)
        if endpoint is None:
            raise ConfigError(
                f"allow_hosts entry {entry!r} is not host:port. Give the exact host and the port the program needs, "
                "one entry per port, e.g. \"jira.corp:443\", \"10.0.0.5:8080\" or \"[fd00::5]:443\" (no scheme, no "
                "path, no wildcards)."
            )
        allowed.append(endpoint)
    return tuple(dict.fromkeys(allowed))


def shown(text: str, limit: int = 120) -> str:
    """What a sandboxed client asked for, made harmless to print (it chose every byte)."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in ".-_:[]/ ") else "?" for c in text[:limit])
    return safe + ("..." if len(text) > limit else "")


# -- the listening socket inside the sandbox's network namespace ------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def listen_in(pid: int, port: int = PROXY_PORT) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:``port`` in the network namespace of process ``pid``.

    A forked child enters the namespace (first the user namespace that owns it, where this
    process's user has every capability, as its creator's), makes the socket, and sends it back;
    the socket stays in that namespace whoever holds it. Nothing is run inside the sandbox.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        child = os.fork()
        if child == 0:  # pragma: no cover  (runs in the forked child; the parent sees its outcome)
            ours.close()
            os._exit(_make_listener(pid, port, theirs))
        theirs.close()
        ours.settimeout(LISTEN_TIMEOUT_S)
        try:
            message, fds, _, _ = socket.recv_fds(ours, 512, 1)
        except OSError as exc:  # it hung (a timeout): it must not linger
            os.kill(child, signal.SIGKILL)
            message, fds = f"no answer: {exc}".encode(), []
        finally:
            _, status = os.waitpid(child, 0)
        if fds:
            return socket.socket(fileno=fds[0])
        raise SandboxSetupError(
            "The sandbox's egress proxy could not listen inside the sandbox's network namespace "
            f"({message.decode('utf-8', 'replace') or f'status {status}'}), so the program did not start. Run "
            "'abhed doctor'; without it, remove allow_hosts (the program then has no network)."
        )
    finally:
        ours.close()
        theirs.close()


def _make_listener(pid: int, port: int, channel: socket.socket) -> int:  # pragma: no cover  (forked child)
    try:
        net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        owner = fcntl.ioctl(net, _NS_GET_USERNS)
        for fd, what in ((owner, "user"), (net, "network")):
            if _libc.setns(fd, 0) != 0:
                raise OSError(ctypes.get_errno(), f"setns into the {what} namespace: {os.strerror(ctypes.get_errno())}")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # The loopback may not be up yet (bwrap brings it up while it builds the sandbox).
        listener.setsockopt(socket.IPPROTO_IP, _IP_FREEBIND, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(MAX_CONNECTIONS)
        socket.send_fds(channel, [b"ok"], [listener.fileno()])
        return 0
    except BaseException as exc:  # reported to the parent, which raises
        try:
            channel.sendall(str(exc).encode()[:500])
        except OSError:
            pass
        return 1


# -- the proxy --------------------------------------------------------------------------------


class Egress:
    """The allowed endpoints of one sandbox configuration, and whom to tell about refusals."""

    def __init__(self, allowed: tuple[Endpoint, ...], on_refusal: Callable[[str], None]) -> None:
        self.allowed = allowed
        self.on_refusal = on_refusal

    def describe(self) -> str:
        return ", ".join(map(str, self.allowed))

    def serve(self, listener: socket.socket) -> Relay:
        relay = Relay(self, listener)
        relay.start()
        return relay

    def refuse(self, client: socket.socket, target: str, why: str, status: str = "403 Forbidden") -> None:
        """Answer ``status`` to the client, and report the refusal (``why`` completes the sentence)."""
        said = f"the sandbox's network proxy refused {shown(target)}: {why}"
        self.on_refusal(said)
        body = f"{said}. Reachable from this sandbox: {self.describe()} (allow_hosts).\n".encode()
        try:
            client.sendall(f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                           "Connection: close\r\n\r\n".encode() + body)
            _linger(client)
        except OSError:
            pass


class Relay:
    """One sandbox's proxy: accepts on the listener until closed, one thread per connection."""

    def __init__(self, egress: Egress, listener: socket.socket) -> None:
        self.egress, self.listener = egress, listener
        self._stop_r, self._stop_w = os.pipe()
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._servers: set[threading.Thread] = set()  # one per client connection, while it runs
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="abhed-egress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop accepting and cut every connection (idempotent); the namespace's last socket goes.
        A request the program made as it ended (still in the listener's backlog, or read by nobody
        yet) is served and its refusal reported before this returns, within CLOSE_WAIT_S (it was lost
        when the threads serving it ran after the sandbox had closed)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        os.write(self._stop_w, b"x")
        self._thread.join()  # it admitted the backlog first
        with self._lock:
            connections, servers = list(self._connections), list(self._servers)
        for conn in connections:
            _shut(conn)
        deadline = time.monotonic() + CLOSE_WAIT_S
        for server in servers:
            server.join(max(0.0, deadline - time.monotonic()))
        self.listener.close()
        os.close(self._stop_r)
        os.close(self._stop_w)

    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self.listener, selectors.EVENT_READ)
            sel.register(self._stop_r, selectors.EVENT_READ)
            while True:
                if any(key.fd == self._stop_r for key, _ in sel.select()):
                    self.listener.setblocking(False)
                    while self._accept():  # the backlog: connections the program made before it ended
                        pass
                    return
                self._accept()

    def _accept(self) -> bool:
        """Admit one connection (False when none could be taken: none waits, or accept failed)."""
        try:
            client, _ = self.listener.accept()
        except OSError:
            return False
        client.setblocking(True)  # (accepted from a non-blocking listener, it would not be)
        with self._lock:
            full = len(self._connections) >= 2 * MAX_CONNECTIONS  # a client and an upstream each
            if not full:
                self._connections.add(client)
        if full:
            self.egress.refuse(client, "a connection", f"more than {MAX_CONNECTIONS} connections at once",
                               "503 Service Unavailable")
            client.close()
            return True
        server = threading.Thread(target=self._serve, args=(client,), name="abhed-egress-conn", daemon=True)
        with self._lock:
            self._servers = {s for s in self._servers if s.is_alive()}
            self._servers.add(server)
        server.start()
        return True

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._connections.add(sock)
            return True

    def _forget(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                self._connections.discard(sock)
        for sock in socks:
            sock.close()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            client.settimeout(HEAD_TIMEOUT_S)
            head, rest = _read_head(client)
            if head is None:
                self.egress.refuse(client, "a request", "its head was not a complete HTTP request head "
                                   f"within {HEAD_LIMIT} bytes", "400 Bad Request")
                return
            request = _parse_head(head)
            if request is None:
                self.egress.refuse(client, head.split(b"\r\n", 1)[0].decode("latin-1"),
                                   "not a CONNECT or an absolute-URI HTTP request (use it as an HTTP proxy)",
                                   "400 Bad Request")
                return
            target, forward = request
            endpoint = parse_endpoint(target)
            if endpoint is None or endpoint not in self.egress.allowed:
                self.egress.refuse(client, target, "not in allow_hosts")
                return
            try:
                upstream = socket.create_connection((endpoint.host, endpoint.port), timeout=CONNECT_TIMEOUT_S)
            except OSError as exc:
                self.egress.refuse(client, target, f"it is allowed, but connecting to it from the host failed "
                                   f"({exc.strerror or exc})", "502 Bad Gateway")
                return
            if not self._track(upstream):
                return
            client.settimeout(None)
            upstream.settimeout(None)
            if forward is None:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.sendall(forward)
            if rest:
                upstream.sendall(rest)
            _pump(client, upstream)
        except OSError:
            pass
        finally:
            self._forget(client, *([upstream] if upstream is not None else []))


def _read_head(client: socket.socket) -> tuple[bytes | None, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > HEAD_LIMIT:
            return None, b""
        chunk = client.recv(4096)
        if not chunk:
            return None, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return (head, rest) if len(head) <= HEAD_LIMIT else (None, b"")


def _parse_head(head: bytes) -> tuple[str, bytes | None] | None:
    """(host:port asked for, the request to send upstream: None for CONNECT); None if neither."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    method, target, version = parts
    if method == "CONNECT":
        return target, None
    match = re.fullmatch(r"http://([^/?#@]+)([/?][^#]*)?", target, re.IGNORECASE)
    if match is None:
        return None
    authority, path = match.group(1), match.group(2) or "/"
    if not path.startswith("/"):
        path = "/" + path
    if not re.search(r":\d+$", authority):
        authority += ":80"
    # The upstream gets an origin-form request; one request per connection (Connection: close).
    headers = [line for line in lines[1:] if line.split(":", 1)[0].strip().lower()
               not in ("proxy-connection", "proxy-authorization", "connection", "keep-alive")]
    forward = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close", "", ""])
    return authority, forward.encode("latin-1")


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both directions ended (a half-close is passed on)."""
    peers = {a: b, b: a}
    open_ = {a, b}
    with selectors.DefaultSelector() as sel:
        for sock in open_:
            sel.register(sock, selectors.EVENT_READ, sock)  # data: the socket, typed (fileobj is any fd)
        while open_:
            for key, _ in sel.select():
                sock = key.data
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if data:
                    try:
                        peers[sock].sendall(data)
                    except OSError:
                        return
                    continue
                sel.unregister(sock)
                open_.discard(sock)
                try:
                    peers[sock].shutdown(socket.SHUT_WR)
                except OSError:
                    pass


def _linger(client: socket.socket) -> None:
    """End our side, then read what the client still sends: closing with unread bytes would reset
    the connection, and the reset can destroy the answer before the client has read it."""
    client.shutdown(socket.SHUT_WR)
    client.settimeout(LINGER_S)
    drained = 0
    while drained < HEAD_LIMIT:
        chunk = client.recv(4096)
        if not chunk:
            return
        drained += len(chunk)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes the thread relaying it, which then closes it
    except OSError:
        pass  # already closed or never connected
