"""A Model Context Protocol client: JSON-RPC 2.0 to one server, over its stdio or streamable HTTP.

Only what a tool gateway needs, following the spec's messages exactly (revision 2025-06-18, also
accepting servers that answer 2025-03-26 or 2024-11-05):

    initialize -> result {protocolVersion, capabilities, serverInfo}; then notifications/initialized
    tools/list {cursor?} -> {tools, nextCursor?}     (every page, up to MAX_PAGES)
    tools/call {name, arguments} -> {content, structuredContent?, isError?}
    server -> client: ping is answered {}; any other request gets -32601 (we offer no sampling,
    roots or elicitation); notifications/tools/list_changed is remembered (`tools_changed`), other
    notifications (logging, progress) are read past. A request that times out is followed by
    notifications/cancelled.

Every way a server can fail (it will not start, exits, hangs, sends something that is not a
JSON-RPC message, sends more than `max_message_bytes` at once) raises McpError, whose message says
what happened and what to do; nothing else escapes. Thread-safe: subagents share a connection.
"""

from __future__ import annotations

import json
import os
import select
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import httpx

from abhed import __version__

PROTOCOL_VERSION = "2025-06-18"
SUPPORTED_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
MAX_PAGES = 100  # tools/list pages: a server paging forever is a broken server
METHOD_NOT_FOUND = -32601
STDERR_TAIL = 2000  # characters of a server's stderr quoted when it fails


class McpError(Exception):
    """A server could not be used or a request failed; `message` is an instruction.

    `kind`: "rpc" (the server answered with a JSON-RPC error), "timeout", "exited", "malformed",
    "too_large", "start" (it did not start), "http" (the HTTP exchange failed).
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.message, self.kind = message, kind


def request_message(request_id: int, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def answer_server_request(message: dict[str, Any]) -> dict[str, Any]:
    """Our reply to a request the server sent us: ping is answered, nothing else is offered."""
    if message.get("method") == "ping":
        return {"jsonrpc": "2.0", "id": message["id"], "result": {}}
    return {"jsonrpc": "2.0", "id": message["id"],
            "error": {"code": METHOD_NOT_FOUND, "message": f"Method not found: {str(message.get('method'))[:100]}"}}


def kind_of(message: Any) -> str:
    """"response", "request", "notification", or "invalid" (not a JSON-RPC 2.0 message)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return "invalid"
    if "method" in message:
        if not isinstance(message["method"], str):
            return "invalid"
        return "request" if "id" in message else "notification"
    if "id" in message and (("result" in message) != ("error" in message)):
        return "response"
    return "invalid"


def result_of(message: dict[str, Any], method: str, server: str) -> dict[str, Any]:
    """The result of a response, or McpError for an error response or a result that is not an object."""
    if "error" in message:
        error = message["error"]
        if not isinstance(error, dict):
            raise McpError(f"The MCP server {server} answered {method} with a malformed error: "
                           f"{_shown(error)}.", "malformed")
        data = f" ({_shown(error.get('data'))})" if error.get("data") is not None else ""
        raise McpError(f"The MCP server {server} answered {method} with error {error.get('code')}: "
                       f"{str(error.get('message'))[:1000]}{data}", "rpc")
    result = message["result"]
    if not isinstance(result, dict):
        raise McpError(f"The MCP server {server} answered {method} with a result that is not an object: "
                       f"{_shown(result)}. The server is broken; tell the operator.", "malformed")
    return result


def _shown(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[:limit] + "..."


# -- the session common to both transports ----------------------------------------------------


@dataclass
class ServerInfo:
    protocol_version: str
    name: str
    version: str
    capabilities: dict[str, Any]
    instructions: str | None


class Connection:
    """One initialized MCP session. Subclasses move messages: `_exchange` sends a request and
    returns its response message (answering server requests meanwhile), `_send` sends one
    message that expects no reply."""

    def __init__(self, name: str, timeout_s: float, max_message_bytes: int) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes
        self.info: ServerInfo | None = None
        self.tools_changed = False  # the server said notifications/tools/list_changed
        self._ids = count(1)
        self._id_lock = threading.Lock()

    # -- the protocol ----------------------------------------------------------------------------

    def initialize(self) -> ServerInfo:
        params = {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                  "clientInfo": {"name": "abhed", "version": __version__}}
        result = self.request("initialize", params)
        version = result.get("protocolVersion")
        if version not in SUPPORTED_VERSIONS:
            raise McpError(f"The MCP server {self.name} speaks protocol version {_shown(version)}; Abhed speaks "
                           f"{', '.join(SUPPORTED_VERSIONS)}. Use a server release that supports one of these.",
                           "malformed")
        server = _v if isinstance(_v := result.get("serverInfo"), dict) else {}
        capabilities = _v if isinstance(_v := result.get("capabilities"), dict) else {}
        instructions = result.get("instructions")
        self.info = ServerInfo(version, str(server.get("name", "")), str(server.get("version", "")), capabilities,
                               instructions if isinstance(instructions, str) else None)
        self.negotiated(version)
        self._send(notification("notifications/initialized"))
        return self.info

    def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the server lists, all pages. Entries are the server's objects, unchecked."""
        tools: list[Any] = []
        cursor: Any = None
        for _ in range(MAX_PAGES):
            result = self.request("tools/list", {"cursor": cursor} if cursor is not None else {})
            page = result.get("tools")
            if not isinstance(page, list):
                raise McpError(f"The MCP server {self.name} answered tools/list without a `tools` array: "
                               f"{_shown(result)}. The server is broken; tell the operator.", "malformed")
            tools.extend(page)
            cursor = result.get("nextCursor")
            if cursor is None:
                self.tools_changed = False
                return tools
        raise McpError(f"The MCP server {self.name} kept paging tools/list past {MAX_PAGES} pages "
                       f"({len(tools)} tools so far). The server is broken; tell the operator.", "malformed")

    def call_tool(self, name: str, arguments: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": arguments}, timeout_s)

    def request(self, method: str, params: dict[str, Any] | None, timeout_s: float | None = None) -> dict[str, Any]:
        with self._id_lock:
            request_id = next(self._ids)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            response = self._exchange(request_message(request_id, method, params), timeout)
        except McpError as exc:
            if exc.kind == "timeout":
                self._cancel(request_id, f"no answer within {timeout:g} s")
            raise
        return result_of(response, method, self.name)

    def negotiated(self, version: str) -> None:
        """Called once the protocol version is known (HTTP sends it as a header)."""

    def _cancel(self, request_id: int, reason: str) -> None:
        try:
            self._send(notification("notifications/cancelled", {"requestId": request_id, "reason": reason}))
        except McpError:
            pass  # a server that cannot take the cancellation is already failing the call

    def _incoming(self, message: dict[str, Any], kind: str) -> dict[str, Any] | None:
        """A notification or a server request: remember what matters; the reply to send, if any."""
        if kind == "notification":
            if message["method"] == "notifications/tools/list_changed":
                self.tools_changed = True
            return None
        return answer_server_request(message)

    # -- the transport ---------------------------------------------------------------------------

    def _exchange(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        raise NotImplementedError

    def _send(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        return True


def encode(message: dict[str, Any]) -> bytes:
    # ensure_ascii: no raw newline or separator can end up inside a stdio frame
    return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii")


# -- stdio --------------------------------------------------------------------------------------


@dataclass
class _Waiting:
    done: threading.Event = field(default_factory=threading.Event)
    response: dict[str, Any] | None = None
    error: McpError | None = None


class StdioConnection(Connection):
    """A server started as a process: newline-delimited JSON-RPC on its stdin and stdout.

    `stdin_w` and `stdout_r` are our ends of its pipes; `stop()` ends the process (and everything
    it started); `exit_status()` says how it ended, or None while it runs; `stderr_tail()` gives
    the last of what it wrote to stderr, quoted when it fails.
    """

    def __init__(self, name: str, stdin_w: int, stdout_r: int, *, stop: Callable[[], None],
                 exit_status: Callable[[], int | None], stderr_tail: Callable[[], str], timeout_s: float,
                 max_message_bytes: int) -> None:
        super().__init__(name, timeout_s, max_message_bytes)
        self._in, self._out = stdin_w, stdout_r
        self._stop, self._exit_status, self._stderr_tail = stop, exit_status, stderr_tail
        self._waiting: dict[Any, _Waiting] = {}
        self._lock = threading.Lock()  # _waiting and _closed
        self._write_lock = threading.Lock()  # one message at a time on stdin
        self._closed: McpError | None = None  # why no more answers will come
        os.set_blocking(self._in, False)
        self._reader = threading.Thread(target=self._read, name=f"abhed-mcp-{name}", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._closed is None

    def _exchange(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        slot = _Waiting()
        with self._lock:
            if self._closed is not None:
                raise self._closed
            self._waiting[message["id"]] = slot
        try:
            self._write(message, time.monotonic() + timeout_s)
            if not slot.done.wait(timeout_s):
                raise McpError(f"The MCP server {self.name} did not answer {message['method']} within {timeout_s:g} "
                               "seconds; the request was cancelled. It may be hung or the work too large: try a "
                               "smaller request, or tell the operator (timeout_s in its [mcp.servers] entry).",
                               "timeout")
        finally:
            with self._lock:
                self._waiting.pop(message["id"], None)
        if slot.error is not None:
            raise slot.error
        assert slot.response is not None
        return slot.response

    def _send(self, message: dict[str, Any]) -> None:
        self._write(message, time.monotonic() + self.timeout_s)

    def _write(self, message: dict[str, Any], deadline: float) -> None:
        data = encode(message) + b"\n"
        with self._write_lock:
            while data:
                if self._closed is not None:
                    raise self._closed
                _, ready, _ = select.select([], [self._in], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    raise McpError(f"The MCP server {self.name} stopped reading its input: a request could not be "
                                   f"sent within {self.timeout_s:g} seconds. It is hung; tell the operator.",
                                   "timeout")
                try:
                    data = data[os.write(self._in, data):]
                except BlockingIOError:
                    continue
                except OSError:  # EPIPE: it exited; the reader reports how
                    self._reader.join(5)
                    raise self._closed or self._exited("exited")

    def _read(self) -> None:
        """The reader thread: one message a line, each handed to whoever waits for it."""
        buffer = bytearray()
        skipping = False  # inside a line over the size bound: drop until its end
        while True:
            try:
                chunk = os.read(self._out, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            while chunk:
                cut = chunk.find(b"\n")
                part, chunk = (chunk, b"") if cut < 0 else (chunk[:cut], chunk[cut + 1:])
                if not skipping:
                    buffer += part
                if len(buffer) > self.max_message_bytes and not skipping:
                    skipping = True
                    buffer.clear()
                    self._fail_waiting(McpError(
                        f"The MCP server {self.name} sent a message of more than {self.max_message_bytes:,} bytes "
                        "(max_message_bytes); it was not read. Ask for less at once (narrower arguments), or tell "
                        "the operator.", "too_large"))
                if cut >= 0:
                    if not skipping:
                        self._line(bytes(buffer))
                    buffer.clear()
                    skipping = False
        self._finish(self._exited("exited"))

    def _line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            self._fail_waiting(McpError(
                f"The MCP server {self.name} wrote a line on stdout that is not JSON "
                f"({line[:200].decode('utf-8', 'replace')!r}); the MCP stdio transport carries only JSON-RPC "
                "messages there. The server is broken or misconfigured; tell the operator.", "malformed"))
            return
        kind = kind_of(message)
        if kind == "response":
            with self._lock:
                slot = self._waiting.get(message["id"])
            if slot is not None:
                slot.response = message
                slot.done.set()
            return  # an answer to a request that timed out: dropped
        if kind == "invalid":
            self._fail_waiting(McpError(
                f"The MCP server {self.name} sent something that is not a JSON-RPC 2.0 message: {_shown(message)}. "
                "The server is broken; tell the operator.", "malformed"))
            return
        reply = self._incoming(message, kind)
        if reply is not None:
            threading.Thread(target=self._reply, args=(reply,), daemon=True).start()  # never block the reader

    def _reply(self, message: dict[str, Any]) -> None:
        try:
            self._send(message)
        except McpError:
            pass

    def _fail_waiting(self, error: McpError) -> None:
        with self._lock:
            waiting = list(self._waiting.values())
        for slot in waiting:
            if not slot.done.is_set():
                slot.error = error
                slot.done.set()

    def _finish(self, error: McpError) -> None:
        with self._lock:
            if self._closed is None:
                self._closed = error
        self._fail_waiting(self._closed)

    def _exited(self, kind: str) -> McpError:
        status: int | None = None
        for _ in range(50):  # the process is ending: its status follows its stdout's EOF closely
            status = self._exit_status()
            if status is not None:
                break
            time.sleep(0.01)
        how = f"exited with status {status}" if status is not None else "closed its output"
        tail = self._stderr_tail().strip()
        said = f" Its last words on stderr: {tail[-STDERR_TAIL:]!r}." if tail else ""
        return McpError(f"The MCP server {self.name} {how}, so the call did not complete.{said} The next call "
                        "starts it again; if it keeps failing, tell the operator (`abhed mcp test "
                        f"{self.name}`).", kind)

    def close(self) -> None:
        self._finish(McpError(f"The MCP server {self.name} was stopped (the session is ending).", "exited"))
        try:
            self._stop()
            self._reader.join(5)  # it reads until EOF, which the stop brings: then its descriptor can go
        finally:
            for fd in (self._in, self._out):
                try:
                    os.close(fd)
                except OSError:
                    pass


# -- streamable HTTP ----------------------------------------------------------------------------


class HttpConnection(Connection):
    """A server at a URL the operator listed: every message is a POST there (streamable HTTP).

    The reply is JSON or an event stream carrying the response (and maybe server requests and
    notifications first). Redirects are refused: Abhed talks to the listed URL only, and takes no
    proxy from the environment.
    """

    def __init__(self, name: str, url: str, headers: dict[str, str], *, timeout_s: float,
                 max_message_bytes: int) -> None:
        super().__init__(name, timeout_s, max_message_bytes)
        self.url = url
        self._headers = {**headers, "Accept": "application/json, text/event-stream",
                         "Content-Type": "application/json"}
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)),
                                  follow_redirects=False, trust_env=False)
        self._ended = False  # the server forgot the session (HTTP 404): the gateway starts a new one

    @property
    def alive(self) -> bool:
        return not self._ended

    def negotiated(self, version: str) -> None:
        if version != "2024-11-05":
            self._headers["MCP-Protocol-Version"] = version

    def _exchange(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        try:
            with self._post(message, timeout_s) as response:
                if message["method"] == "initialize" and response.headers.get("mcp-session-id"):
                    self._headers["Mcp-Session-Id"] = response.headers["mcp-session-id"]
                for incoming in self._messages(response, deadline):
                    kind = kind_of(incoming)
                    if kind == "response" and incoming.get("id") == message["id"]:
                        return incoming
                    if kind in ("request", "notification"):
                        reply = self._incoming(incoming, kind)
                        if reply is not None:
                            self._send(reply)
                    elif kind == "invalid":
                        raise McpError(f"The MCP server {self.name} sent something that is not a JSON-RPC 2.0 "
                                       f"message: {_shown(incoming)}. The server is broken; tell the operator.",
                                       "malformed")
        except httpx.TimeoutException:
            raise McpError(f"The MCP server {self.name} at {self.url} did not answer {message['method']} within "
                           f"{timeout_s:g} seconds; the request was cancelled. Try a smaller request, or tell the "
                           "operator (timeout_s in its [mcp.servers] entry).", "timeout") from None
        except httpx.HTTPError as exc:
            raise McpError(f"The MCP server {self.name} at {self.url} could not be reached ({type(exc).__name__}: "
                           f"{exc}). Check that it runs and the URL in its [mcp.servers] entry.", "http") from None
        raise McpError(f"The MCP server {self.name} at {self.url} ended its reply to {message['method']} without "
                       "the response. The server is broken; tell the operator.", "malformed")

    def _send(self, message: dict[str, Any]) -> None:
        try:
            with self._post(message, self.timeout_s):
                pass
        except httpx.HTTPError as exc:
            raise McpError(f"The MCP server {self.name} at {self.url} could not be reached ({type(exc).__name__}). "
                           "Check that it runs.", "http") from None

    def _post(self, message: dict[str, Any], timeout_s: float) -> Any:
        return _Checked(self, self._http.stream("POST", self.url, content=encode(message), headers=self._headers,
                                                timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0))))

    def _messages(self, response: httpx.Response, deadline: float) -> Iterator[Any]:
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if response.status_code == 202:
            return
        if kind == "application/json":
            yield self._parse(self._bounded(response.iter_bytes(), deadline))
            return
        if kind != "text/event-stream":
            raise McpError(f"The MCP server {self.name} at {self.url} answered with content type {kind!r}; the "
                           "streamable HTTP transport uses application/json or text/event-stream. Is the URL the "
                           "server's MCP endpoint?", "malformed")
        data: list[bytes] = []
        size = 0
        for line in response.iter_lines():
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout("deadline")
            if not line:
                if data:
                    yield self._parse(b"\n".join(data))
                    data, size = [], 0
                continue
            if line.startswith("data:"):
                value = line[5:].removeprefix(" ").encode("utf-8")
                size += len(value)
                if size > self.max_message_bytes:
                    raise self._too_large()
                data.append(value)
        if data:
            yield self._parse(b"\n".join(data))

    def _bounded(self, chunks: Iterator[bytes], deadline: float) -> bytes:
        body = bytearray()
        for chunk in chunks:
            body += chunk
            if len(body) > self.max_message_bytes:
                raise self._too_large()
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout("deadline")
        return bytes(body)

    def _too_large(self) -> McpError:
        return McpError(f"The MCP server {self.name} sent a message of more than {self.max_message_bytes:,} bytes "
                        "(max_message_bytes); it was not read. Ask for less at once (narrower arguments), or tell "
                        "the operator.", "too_large")

    def _parse(self, data: bytes) -> Any:
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            raise McpError(f"The MCP server {self.name} at {self.url} sent a body that is not JSON "
                           f"({data[:200].decode('utf-8', 'replace')!r}). The server is broken; tell the operator.",
                           "malformed") from None

    def close(self) -> None:
        session = self._headers.get("Mcp-Session-Id")
        try:
            if session:  # the spec's way to end a session; a server may refuse with 405
                self._http.delete(self.url, headers=self._headers, timeout=5.0)
        except httpx.HTTPError:
            pass
        finally:
            self._http.close()


class _Checked:
    """A streamed response whose status is checked on entry: 2xx goes on, the rest is an McpError."""

    def __init__(self, connection: HttpConnection, stream: Any) -> None:
        self.connection, self.stream = connection, stream

    def __enter__(self) -> httpx.Response:
        response = self.stream.__enter__()
        if 200 <= response.status_code < 300:
            return response
        c = connection = self.connection
        try:
            body = response.read()[:300].decode("utf-8", "replace")
        except httpx.HTTPError:
            body = ""
        finally:
            self.stream.__exit__(None, None, None)
        if 300 <= response.status_code < 400:
            raise McpError(f"The MCP server {c.name} at {c.url} redirected to "
                           f"{response.headers.get('location', '(nowhere)')!r}; Abhed talks only to the URL the "
                           "operator listed and does not follow redirects. Put the final URL in its [mcp.servers] "
                           "entry.", "http")
        if response.status_code == 404 and "Mcp-Session-Id" in connection._headers:
            connection._headers.pop("Mcp-Session-Id")
            connection._ended = True
            raise McpError(f"The MCP server {c.name} at {c.url} ended the session (HTTP 404). The next call starts "
                           "a new one.", "exited")
        raise McpError(f"The MCP server {c.name} at {c.url} answered HTTP {response.status_code}: {body!r}. Check "
                       "the URL and the headers in its [mcp.servers] entry (a token in an environment variable?).",
                       "http")

    def __exit__(self, *exc: object) -> None:
        self.stream.__exit__(*exc)


def read_tail(path: Path, limit: int = STDERR_TAIL) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
