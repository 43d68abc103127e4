"""A server on the host for network confinement tests: it counts the connections it accepted and
keeps what it was sent, so a test judges reachability on the host, not by what a client printed."""

from __future__ import annotations

import socket
import threading


class HostServer:
    """Listens on ``address`` (a free port); answers each request head with one HTTP/1.0 reply."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        self.sock = socket.create_server((address, 0))
        self.port = self.sock.getsockname()[1]
        self.body = f"secret from port {self.port}\n"
        self.accepted = 0
        self.received = b""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            with conn:
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            self.received += data
            body = self.body.encode()
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
