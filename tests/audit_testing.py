"""A syslog daemon's socket for the central audit's tests: a listening unix datagram socket, and a
parser of the RFC 5424 frames it receives."""

from __future__ import annotations

import json
import re
import socket
import threading
from datetime import datetime
from pathlib import Path
from typing import Any


class Daemon:
    """A listening unix datagram socket, read as it comes (a datagram queue holds only ten): what
    rsyslog's imuxsock or journald's /dev/log is."""

    def __init__(self, path: Path) -> None:
        self.path, self.got = path, []  # type: ignore[var-annotated]
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            data = self.sock.recv(70_000)
            if data == b"end":
                return
            self.got.append(data)

    def frames(self) -> list[bytes]:
        """What arrived so far (every datagram sent before this call: the end mark comes after them)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.sendto(b"end", str(self.path))
        self.thread.join()
        return self.got

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)


RFC5424 = re.compile(rb"<(\d{1,3})>1 (\S+) (\S+) (\S+) (\S+) (\S+) (\[(?:[^\]\\]|\\.)*\]) (.*)", re.DOTALL)


def parse5424(frame: bytes) -> dict[str, Any]:
    match = RFC5424.fullmatch(frame)
    assert match, frame[:300]
    pri, stamp, host, app, procid, msgid, sd, msg = match.groups()
    assert sd.startswith(b"[abhed@32473 ")
    params = {k.decode(): re.sub(rb"\\(.)", rb"\1", v).decode()
              for k, v in re.findall(rb'(\w+)="((?:[^"\\]|\\.)*)"', sd)}
    return {"facility": int(pri) // 8, "severity": int(pri) % 8, "time": datetime.fromisoformat(stamp.decode()),
            "host": host.decode(), "app": app.decode(), "procid": procid.decode(), "msgid": msgid.decode(),
            "sd": params, "record": json.loads(msg)}
