"""The wire of `abhed acp`: newline-delimited JSON-RPC frames on the editor's stdin and stdout.

The process's stdout belongs to the protocol alone: `take_stdio` moves the editor's pipes to
private descriptors and points fds 0 and 1 at /dev/null and stderr, so nothing Abhed or a child
of it prints (a warning, a hook's output, a library's print) can corrupt a frame. Logs go to stderr.

`Frames` is the SDK's message transport (acp._transport.Transport) with the checks the SDK leaves
out: a line that is not JSON gets a JSON-RPC parse error (-32700), a JSON value that is not a
request, notification or response gets an invalid-request error (-32600), an over-long line is
skipped and answered the same way; none reaches the SDK (whose receive loop a non-object or an
unhashable id would end) and none is answered with a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import Any

MAX_FRAME = 50 * 1024 * 1024  # the SDK's own stdio limit: a prompt may embed whole files


def take_stdio() -> tuple[int, int]:
    """The editor's stdin and stdout as private descriptors (not inherited by children); fd 0
    becomes /dev/null and fd 1 a copy of stderr."""
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return proto_in, proto_out


class _NoTraceback(logging.Formatter):
    """A log line says what failed in one line: an exception's type and message, never its traceback."""

    def formatException(self, ei: Any) -> str:  # noqa: N802 (logging's name)
        return f"{ei[0].__name__}: {ei[1]}" if ei and ei[0] else ""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text.replace("\n", " | ")


def log_to_stderr() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_NoTraceback("abhed acp: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)


def error_frame(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def problem(message: Any) -> tuple[Any, str] | None:
    """Why a decoded frame is not JSON-RPC 2.0 that the connection can take, with the id to answer
    (None when it has none usable), or None when it is fine."""
    if not isinstance(message, dict):
        return None, f"a frame must be a JSON object, not {type(message).__name__}"
    request_id = message.get("id")
    usable = request_id if isinstance(request_id, (str, int)) and not isinstance(request_id, bool) else None
    if "id" in message and request_id is not None and usable is None:
        return None, "id must be a string, a number or null"
    if message.get("jsonrpc") != "2.0":
        return usable, 'jsonrpc must be "2.0"'
    if "method" in message:
        if not isinstance(message["method"], str):
            return usable, "method must be a string"
        if "params" in message and not isinstance(message["params"], (dict, list, type(None))):
            return usable, "params must be an object or an array"
        return None
    if "id" not in message or not ("result" in message or "error" in message):
        return usable, "a frame without a method must be a response: an id with a result or an error"
    return None


class Frames:
    """One JSON object a line each way; bad lines are answered here and skipped."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._lock = asyncio.Lock()  # one frame written whole before the next
        self._unanswered: set[Any] = set()  # ids of the editor's requests not answered yet
        self._answered = asyncio.Event()

    async def drained(self, timeout: float) -> None:
        """Wait (at most `timeout`) until every request the editor sent has its answer written: at
        the end of input, so that work already asked for is not dropped unanswered."""
        if self._unanswered:
            self._answered.clear()
            try:
                await asyncio.wait_for(self._answered.wait(), timeout)
            except asyncio.TimeoutError:
                logging.warning("%d requests left unanswered at the end of input", len(self._unanswered))

    async def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8",
                                                                                            "surrogatepass")
        async with self._lock:
            self._writer.write(data)
            await self._writer.drain()
        if "method" not in message and message.get("id") in self._unanswered:
            self._unanswered.discard(message["id"])
            if not self._unanswered:
                self._answered.set()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._line()
            if line is None:
                return None
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except (ValueError, RecursionError) as exc:
                await self._refuse(None, -32700, f"Parse error: the line is not JSON ({exc})")
                continue
            wrong = problem(message)
            if wrong is None:
                if "method" in message and "id" in message:
                    self._unanswered.add(message["id"])
                return message
            await self._refuse(wrong[0], -32600, f"Invalid request: {wrong[1]}")

    async def _line(self) -> bytes | None:
        """The next line; None at the end of input. An over-long line is answered and skipped."""
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial or None
        except asyncio.LimitOverrunError:
            while True:  # drop the rest of this line
                try:
                    await self._reader.readuntil(b"\n")
                    break
                except asyncio.LimitOverrunError as more:
                    await self._reader.readexactly(more.consumed)
                except asyncio.IncompleteReadError:
                    break
            await self._refuse(None, -32600, f"Invalid request: a frame longer than {MAX_FRAME} bytes")
            return b""

    async def _refuse(self, request_id: Any, code: int, message: str) -> None:
        logging.warning("%s", message)
        try:
            await self.send(error_frame(request_id, code, message))
        except (ConnectionError, OSError):
            pass  # the editor is gone: the end of input follows

    async def close(self) -> None:
        try:
            self._writer.close()
        except (ConnectionError, OSError):
            pass


async def open_frames(proto_in: int, proto_out: int) -> Frames:
    """Frames over the descriptors take_stdio kept."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_FRAME)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(proto_in, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(lambda: asyncio.streams.FlowControlMixin(),
                                                        os.fdopen(proto_out, "wb", 0))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return Frames(reader, writer)
