"""The streamable-HTTP client against a server of ours that answers as the spec allows (JSON, an
event stream carrying a ping first, a session id) and as it does not (redirects, errors, garbage,
oversized bodies, silence). Real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from abhed.mcp.client import HttpConnection, McpError

ECHO = {"name": "echo", "description": "Echo.", "inputSchema": {"type": "object"}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    behaviour = "json"
    seen: list[tuple[dict, dict]] = []
    pong: list[dict] = []

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_DELETE(self) -> None:
        type(self).seen.append(({"method": "DELETE"}, dict(self.headers)))
        self._reply(200, b"", "application/json")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((body, dict(self.headers)))
        if "id" not in body or "method" not in body:
            if "result" in body:
                type(self).pong.append(body)
            return self._reply(202, b"", "application/json")
        mode = self.behaviour
        if body["method"] == "initialize":
            result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "http-test", "version": "1"}}
            return self._json({"jsonrpc": "2.0", "id": body["id"], "result": result}, {"Mcp-Session-Id": "s-42"})
        if self.headers.get("Mcp-Session-Id") != "s-42":
            return self._reply(400, b"missing session", "text/plain")
        if mode == "redirect":
            return self._reply(307, b"", "text/plain", {"Location": "http://elsewhere.example/mcp"})
        if mode == "unauthorized":
            return self._reply(401, b'{"error": "bad token"}', "application/json")
        if mode == "html":
            return self._reply(200, b"<html>login</html>", "text/html")
        if mode == "garbage":
            return self._reply(200, b"{not json", "application/json")
        if mode == "huge":
            return self._reply(200, b'{"x": "' + b"y" * 200_000 + b'"}', "application/json")
        if mode == "silent":
            time.sleep(3)
            return self._reply(200, b"", "application/json")
        result = {"tools": [ECHO]} if body["method"] == "tools/list" else \
            {"content": [{"type": "text", "text": f"echo {body['params']['arguments'].get('text')}"}]}
        answer = {"jsonrpc": "2.0", "id": body["id"], "result": result}
        if mode == "sse":
            events = [{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}},
                      {"jsonrpc": "2.0", "id": 900, "method": "ping"}, answer]
            data = b"".join(b": keep-alive\n\nevent: message\ndata: " + json.dumps(e).encode() + b"\n\n"
                            for e in events)
            return self._reply(200, data, "text/event-stream")
        return self._json(answer)

    def _json(self, message: dict, headers: dict | None = None) -> None:
        self._reply(200, json.dumps(message).encode(), "application/json", headers)

    def _reply(self, status: int, data: bytes, kind: str, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up first (the oversized and silent cases): as intended


@pytest.fixture
def server():
    Handler.behaviour, Handler.seen, Handler.pong = "json", [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    httpd.shutdown()
    httpd.server_close()


def connect(url: str, **kw) -> HttpConnection:
    connection = HttpConnection("site", url, {"Authorization": "Bearer t0ken"}, timeout_s=kw.pop("timeout_s", 10),
                                max_message_bytes=kw.pop("max_message_bytes", 65536))
    connection.initialize()
    return connection


def test_json_replies_a_session_id_and_the_protocol_header(server):
    connection = connect(server)
    try:
        assert connection.info.name == "http-test" and connection.info.protocol_version == "2025-06-18"
        assert connection.list_tools() == [ECHO]
        assert connection.call_tool("echo", {"text": "a"})["content"][0]["text"] == "echo a"
    finally:
        connection.close()
    initialize, headers = Handler.seen[0]
    assert initialize["params"]["protocolVersion"] == "2025-06-18" and initialize["params"]["capabilities"] == {}
    assert headers["Accept"] == "application/json, text/event-stream" and headers["Authorization"] == "Bearer t0ken"
    assert Handler.seen[1][0] == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    later = Handler.seen[2][1]
    assert later["Mcp-Session-Id"] == "s-42" and later["MCP-Protocol-Version"] == "2025-06-18"
    assert Handler.seen[-1][0] == {"method": "DELETE"}  # the session is ended at close


def test_an_event_stream_with_a_ping_before_the_answer(server):
    connection = connect(server)
    Handler.behaviour = "sse"
    try:
        assert connection.call_tool("echo", {"text": "b"})["content"][0]["text"] == "echo b"
    finally:
        connection.close()
    assert Handler.pong == [{"jsonrpc": "2.0", "id": 900, "result": {}}]


@pytest.mark.parametrize("behaviour, expected", [
    ("redirect", "redirected to 'http://elsewhere.example/mcp'; Abhed talks only to the URL the operator listed"),
    ("unauthorized", "answered HTTP 401: '{\"error\": \"bad token\"}'. Check the URL and the headers"),
    ("html", "answered with content type 'text/html'; the streamable HTTP transport uses application/json or "
             "text/event-stream"),
    ("garbage", "sent a body that is not JSON ('{not json')"),
    ("huge", "sent a message of more than 65,536 bytes (max_message_bytes)"),
    ("silent", "did not answer tools/call within 1 seconds"),
])
def test_what_a_server_gets_wrong_is_an_instruction(server, behaviour, expected):
    connection = connect(server, timeout_s=1)
    Handler.behaviour = behaviour
    try:
        with pytest.raises(McpError) as caught:
            connection.call_tool("echo", {"text": "c"})
    finally:
        connection.close()
    assert expected in caught.value.message
    assert f"{server}" in caught.value.message or behaviour in ("huge",)


def test_nothing_listens(server):
    with pytest.raises(McpError) as caught:
        connect("http://127.0.0.1:9/mcp", timeout_s=2)
    assert "could not be reached (ConnectError" in caught.value.message and "Check that it runs" in caught.value.message
