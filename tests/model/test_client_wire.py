"""The model client against a server whose exact bytes a test writes: odd but real wire shapes.

A real socket server on 127.0.0.1 answers each connection with the bytes given (and, with `hold`,
keeps the connection open without a word more, as a stalled server does).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from abhed.model.client import ModelClient
from abhed.model.errors import ModelError
from test_client_faults import stall_message

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
LIMIT = 64 * 1024
SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


@contextmanager
def canned(*answers: bytes, hold: bool = False) -> Iterator[str]:
    """A server answering its n-th connection with answers[n]; yields its endpoint."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        for answer in answers:
            conn, _ = listener.accept()
            request = conn.recv(65536)
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:  # all of it: a socket closed with unread bytes sends a reset
                body += conn.recv(65536)
            conn.sendall(answer)
            if hold:
                held.append(conn)
            else:
                conn.shutdown(socket.SHUT_WR)
                conn.close()
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def delta(**fields: object) -> dict:
    return {"choices": [{"index": 0, "delta": fields}]}


def plain(status: int, body: object) -> bytes:
    data = json.dumps(body).encode()
    return b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (
        status, len(data), data)


# -- streams -----------------------------------------------------------------------------------------

def test_a_stall_in_the_middle_of_an_event_is_a_stall_not_a_malformed_event():
    """A stream ended by its connection stalls halfway through a `data:` line: when the watchdog shuts
    the socket, the half line arrives as the stream's last, which does not parse."""
    with canned(SSE + event(delta(content="hi")) + b'data: {"choices":[{"index":0,"delta":{"cont', hold=True) as url:
        with pytest.raises(ModelError) as caught:
            ModelClient(url, stall_s=0.4, attempts=1).chat(BODY)
    assert caught.value.message == stall_message(url, "0.4")


def test_done_without_a_finish_reason_ends_a_whole_reply():
    """Some servers send no finish_reason; [DONE] alone says the reply is whole."""
    with canned(SSE + event(delta(content="all")) + b"data: [DONE]\n\n", hold=True) as url:
        reply = ModelClient(url, stall_s=30, attempts=1).chat(BODY)
    assert reply.text == "all" and reply.finish_reason is None


def test_one_stream_line_may_hold_up_to_twice_the_bound_not_more():
    """A line is bounded at 2 x max_reply_bytes (JSON's escapes), whatever the text it carries: a
    line of padding under that is read, one over it is not held."""
    def padded(size: int) -> bytes:
        line = event({**delta(content="ok"), "pad": ""})
        return line.replace(b'"pad": ""', b'"pad": "' + b" " * (size - len(line)) + b'"')
    under = padded(2 * LIMIT - 100)
    with canned(SSE + under + event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})) as url:
        assert ModelClient(url, max_reply_bytes=LIMIT, attempts=1).chat(BODY).text == "ok"
    with canned(SSE + padded(2 * LIMIT + 100)) as url:
        with pytest.raises(ModelError) as caught:
            ModelClient(url, max_reply_bytes=LIMIT, attempts=1).chat(BODY)
    assert f"passed {LIMIT:,} bytes (model.max_reply_bytes)" in caught.value.message


# -- replies that are not streamed -------------------------------------------------------------------

def test_a_reply_not_streamed_takes_the_defaults_a_server_leaves_out():
    body = {"choices": [{"message": {"content": None, "tool_calls": [
        {"function": {"name": "read", "arguments": {"path": "/w/a"}}}]}, "finish_reason": "tool_calls"}]}
    with canned(plain(200, body), plain(200, {})) as url:
        client = ModelClient(url, attempts=1)
        reply = client.chat(BODY, stream=False)
        empty = client.chat(BODY, stream=False)
    [call] = reply.tool_calls
    assert reply.text == "" and call.name == "read" and json.loads(call.arguments) == {"path": "/w/a"}
    assert len(call.id) == 9 and reply.finish_reason == "tool_calls" and reply.usage is None
    assert empty.text == "" and empty.tool_calls == [] and empty.finish_reason is None


@pytest.mark.parametrize(("answer", "said"), [
    (plain(200, [1, 2]), "answered '[1, 2]', not a completion."),
    (plain(200, {"object": "error", "message": "engine died", "code": 400}), "reported an error mid-reply: engine died"),
    (plain(200, {"error": {"message": "engine died", "code": 400}}), "reported an error mid-reply: engine died"),
    (plain(401, {"error": {"message": "bad key"}}), "refused the credentials (HTTP 401: bad key)"),
])
def test_a_reply_not_streamed_that_is_no_completion_is_an_error(answer, said):
    with canned(answer) as url:
        with pytest.raises(ModelError) as caught:
            ModelClient(url, attempts=1).chat(BODY, stream=False)
    assert said in caught.value.message and url in caught.value.message


def test_a_reply_not_streamed_waits_for_a_server_answering_503():
    with canned(plain(503, {"error": {"message": "loading"}}), plain(200, {"choices": [{"message": {"content": "up"}}]})) \
            as url:
        told = []
        reply = ModelClient(url, attempts=1, backoff_s=0.01).chat(BODY, stream=False, on_retry=told.append)
    assert reply.text == "up" and [r.waiting for r in told] == [True]
