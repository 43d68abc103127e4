"""The model client against real servers that stall, restart, refuse, load, or send too much (issue 33 items 7, 8).

Every server here is a real HTTP server on 127.0.0.1 (model.replay, or one that is not there yet);
the client is the real one. Waits use small settings (stall_s, backoff_s, max_request_s) so that
each test takes seconds; a few use a fake clock where only the arithmetic of the waits is judged.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from abhed.model.client import MAX_REPLY_BYTES, ModelClient, Retry
from abhed.model.errors import ModelError
from abhed.model.replay import ReplayServer, Turn
from abhed.model.sse import LineTooLong, lines
from test_client import FakeTime
from test_client import _free_port as free_port

BODY = {"model": "replay/abhed-demo", "messages": [{"role": "user", "content": "hi"}]}
WITH_TOOLS = {**BODY, "tools": [{"type": "function", "function": {"name": "write", "parameters": {}}}],
              "tool_choice": "auto"}


def stall_message(url: str, stall_s: str) -> str:
    return (f"The model server at {url} stalled: its reply had begun, then nothing came for {stall_s} s. The server "
            "may be hung or overloaded; check the vLLM logs (and GPU health), or raise model.stall_s if it is merely "
            "slow between tokens.")


def too_large_message(url: str, limit: int) -> str:
    return (f"The reply from the model server at {url} passed {limit:,} bytes (model.max_reply_bytes): Abhed stopped "
            "reading it there and closed the connection; nothing of it was used or run. A reply is bounded by the "
            "request's max_tokens, far below that, so the server ignores max_tokens or a proxy between here and it "
            "sends something else: check the vLLM logs and the endpoint. Raise model.max_reply_bytes only if replies "
            "this long are meant.")


# -- stalls (item 7) ---------------------------------------------------------------------------------

@pytest.mark.parametrize("chunked", [False, True])
def test_a_stalled_stream_is_reported_as_a_stall_after_stall_s_whatever_ends_it(chunked):
    """The issue's fault: the reply begins, then nothing. A stream that ends with its connection
    (HTTP/1.0, some proxies) ended cleanly when the watchdog shut it, and was reported as "stopped
    mid-way ... may have restarted" after every try; it is a stall, told as one."""
    with ReplayServer([Turn(fault="stall_mid")], stall_s=30.0, chunked=chunked) as server:
        started = time.monotonic()
        with pytest.raises(ModelError) as caught:
            ModelClient(server.url, timeout_s=120, stall_s=0.5, attempts=1).chat(BODY)
        spent = time.monotonic() - started
    assert caught.value.message == stall_message(server.url, "0.5") and caught.value.retryable
    assert spent >= 0.5  # told after stall_s of silence, not before


def test_a_stall_on_a_connection_delimited_stream_is_retried_and_the_retry_says_stall():
    with ReplayServer([Turn(fault="stall_mid"), Turn(text="second try")], stall_s=30.0, chunked=False) as server:
        told: list[Retry] = []
        reply = ModelClient(server.url, timeout_s=120, stall_s=0.4, backoff_s=0).chat(BODY, on_retry=told.append)
    assert reply.text == "second try" and [r.notice() for r in told] == [
        stall_message(server.url, "0.4") + " Retrying in 0 s (attempt 2 of 4)."]


@pytest.mark.parametrize("chunked", [False, True])
def test_a_stall_after_the_finish_reason_keeps_the_whole_reply(chunked):
    """Only the usage chunk and [DONE] were missing: the reply is whole, asking again would redo it."""
    with ReplayServer([Turn(text="all of it", fault="stall_end")], stall_s=30.0, chunked=chunked) as server:
        told: list[Retry] = []
        reply = ModelClient(server.url, timeout_s=120, stall_s=0.4, attempts=1).chat(BODY, on_retry=told.append)
    assert reply.text == "all of it" and reply.finish_reason == "stop" and told == [] and len(server.requests) == 1


def test_a_stall_inside_a_tool_call_discards_the_partial_call_and_asks_again():
    """Arguments had begun to arrive when the stream stalled: the retry's reply is the one kept; the
    partial call is never returned (nothing runs before a reply is whole)."""
    args = {"path": "/w/a", "content": "x" * 60}
    with ReplayServer([Turn(calls=[("write", args)], fault="stall_in_call"), Turn(calls=[("write", args)])],
                      stall_s=30.0) as server:
        told: list[Retry] = []
        reply = ModelClient(server.url, timeout_s=120, stall_s=0.4, backoff_s=0).chat(WITH_TOOLS,
                                                                                       on_retry=told.append)
    [call] = reply.tool_calls
    assert json.loads(call.arguments) == args and len(told) == 1 and "stalled" in told[0].error.message


# -- a server that restarts or loads its model (item 7) --------------------------------------------

def test_a_server_that_refuses_then_comes_up_is_waited_for_and_used():
    port, servers = free_port(), []
    starter = threading.Timer(1.0, lambda: servers.append(ReplayServer([Turn(text="back again")],
                                                                        port=port).__enter__()))
    starter.start()  # nothing listens on the port for a second: connections are refused
    told: list[Retry] = []
    try:
        reply = ModelClient(f"http://127.0.0.1:{port}/v1", backoff_s=0.2, attempts=1,
                            max_request_s=120).chat(BODY, on_retry=told.append)
    finally:
        starter.join()
        for server in servers:
            server.close()
    assert reply.text == "back again" and len(told) >= 2  # refused for about a second, then served
    assert all(r.waiting and r.failures == 0 for r in told)  # attempts=1: a counted failure would have ended it
    assert told[0].notice() == (f"Waiting for the model server at http://127.0.0.1:{port}/v1 (connection refused): "
                                "0 s of 120 s (model.max_request_s); next try in 0.2 s. It may be restarting or "
                                "loading its model; Ctrl-C stops waiting.")



def test_a_shortened_last_pause_is_told_to_a_tenth_of_a_second():
    """The last pause before max_request_s is cut to end there: told as 1.2 s, not 1.23457 s."""
    wait = Retry(ModelError("down", unavailable="HTTP 503: loading"), "http://m/v1", 0, 4, 1.23456, 898.8, 900, True)
    assert "; next try in 1.2 s. " in wait.notice() and "899 s of 900 s" in wait.notice()

@pytest.mark.parametrize("status", [503, 502])
def test_a_server_answering_503_while_it_loads_is_waited_out_not_counted_as_failures(status):
    turns = [Turn(fault=f"status:{status}")] * 5 + [Turn(text="loaded")]
    with ReplayServer(turns) as server:
        told: list[Retry] = []
        reply = ModelClient(server.url, backoff_s=0.01, attempts=2).chat(BODY, on_retry=told.append)
    assert reply.text == "loaded" and len(told) == 5 and len(server.requests) == 6
    assert f"(HTTP {status}: replayed fault: HTTP {status}): " in told[-1].notice()
    assert [r.pause for r in told] == [0.01, 0.02, 0.04, 0.08, 0.16]


def test_a_server_that_never_comes_up_gives_a_clear_error_at_max_request_s():
    with ReplayServer(lambda body: Turn(fault="status:503")) as server:
        told: list[Retry] = []
        with pytest.raises(ModelError) as caught:
            ModelClient(server.url, backoff_s=0.1, max_request_s=1.0).chat(BODY, on_retry=told.append)
    message = caught.value.message
    tries = len(server.requests)
    assert message.startswith(f"The model server at {server.url} is not serving (HTTP 503: replayed fault: HTTP 503). "
                              "It may be restarting or still loading the model; check the vLLM logs. Abhed waited ")
    assert message.endswith(f"s for it to come back ({tries} tries; model.max_request_s = 1 s): start the server, or "
                            "raise model.max_request_s if loading its model takes longer.")
    assert tries == len(told) + 1 >= 4 and caught.value.status == 503


def test_waits_pause_at_most_wait_interval_and_stop_before_max_request_s():
    fake, tries = FakeTime(), []

    def down() -> None:
        tries.append(fake.now)
        raise ModelError("down", unavailable="connection refused")
    client = ModelClient("http://127.0.0.1:9/v1", attempts=1, backoff_s=1, max_request_s=20, sleep=fake.sleep,
                         clock=fake.clock)
    with pytest.raises(ModelError) as caught:
        client._retrying(down, None, wait=True)
    assert fake.waits == [1, 2, 4, 5, 5, 3] and tries == [0, 1, 3, 7, 12, 17, 20]  # the last pause ends at 20 s
    assert caught.value.message == ("down Abhed waited 20 s for it to come back (7 tries; model.max_request_s = 20 s): "
                                    "start the server, or raise model.max_request_s if loading its model takes longer.")


def test_a_failure_after_waiting_counts_and_says_how_often_it_was_tried():
    fake = FakeTime()
    errors = [ModelError("down", unavailable="HTTP 503: loading") for _ in range(2)] + [
        ModelError("broke", retryable=True) for _ in range(2)]
    seen: list[Retry] = []

    def attempt() -> None:
        raise errors.pop(0)
    client = ModelClient("http://127.0.0.1:9/v1", attempts=2, backoff_s=1, sleep=fake.sleep, clock=fake.clock)
    with pytest.raises(ModelError) as caught:
        client._retrying(attempt, seen.append, wait=True)
    assert caught.value.message == "broke (tried 4 times in 7 s)" and errors == []
    assert [(r.waiting, r.failures) for r in seen] == [(True, 0), (True, 0), (False, 1)]
    assert seen[2].notice() == "broke Retrying in 4 s (attempt 2 of 2)."


def test_models_at_start_up_does_not_wait_for_a_server_that_is_not_there():
    """The first question tells a wrong endpoint at once (issue 18): no wait, one try."""
    endpoint = f"http://127.0.0.1:{free_port()}/v1"
    told: list[Retry] = []
    with pytest.raises(ModelError) as caught:
        ModelClient(endpoint, backoff_s=0.2, max_request_s=60).models(on_retry=told.append, attempts=1)
    assert told == [] and caught.value.message.startswith(f"Cannot connect to the model server at {endpoint}")
    assert "waited" not in caught.value.message and "tried" not in caught.value.message


@pytest.mark.parametrize(("status", "retried"), [(408, True), (429, True), (500, True), (504, True), (400, False),
                                                 (422, False), (501, False), (505, False)])
def test_which_statuses_are_retried(status, retried):
    with ReplayServer([Turn(fault=f"status:{status}"), Turn(text="again")]) as server:
        told: list[Retry] = []
        if retried:
            assert ModelClient(server.url, backoff_s=0).chat(BODY, on_retry=told.append).text == "again"
        else:
            with pytest.raises(ModelError) as caught:
                ModelClient(server.url, backoff_s=0).chat(BODY, on_retry=told.append)
            assert f"rejected the request (HTTP {status}: replayed fault" in caught.value.message
    assert len(told) == retried and len(server.requests) == 1 + retried
    assert not told or not told[0].waiting


# -- a reply too large (item 8) ----------------------------------------------------------------------

LIMIT = 64 * 1024


@pytest.mark.parametrize("turn", [Turn(text="x" * 4_000_000), Turn(reasoning="y" * 4_000_000, text="z"),
                                  Turn(calls=[("write", json.dumps({"path": "/w/a", "content": "w" * 30_000_000}))])],
                         ids=["text", "reasoning", "arguments"])
def test_a_streamed_reply_past_max_reply_bytes_stops_reading_and_closes_the_connection(turn):
    with ReplayServer([turn], chunk_chars=1024) as server:
        shown: list[str] = []
        with pytest.raises(ModelError) as caught:
            ModelClient(server.url, max_reply_bytes=LIMIT).chat(WITH_TOOLS, on_text=shown.append,
                                                                  on_reasoning=shown.append)
        assert server.hung_up.wait(60)  # the server's write failed: the client closed the connection
    assert caught.value.message == too_large_message(server.url, LIMIT) and not caught.value.retryable
    assert len(server.requests) == 1 and sum(len(s) for s in shown) <= LIMIT  # nothing past the cap was shown
    # It stopped reading: the server could send what the sockets' buffers hold, not the rest.
    assert server.sent < 4_000_000 if turn.text or turn.reasoning else server.sent < 25_000_000


def test_tool_call_arguments_count_toward_the_bound():
    """Three fragments of 50,000 characters: each line is well under the line bound, their sum is
    over max_reply_bytes, so it is the count of arguments that stops the reply."""
    args = json.dumps({"path": "/w/a", "content": "w" * 150_000})
    with ReplayServer([Turn(text="writing", calls=[("write", args)])]) as server:
        with pytest.raises(ModelError) as caught:
            ModelClient(server.url, max_reply_bytes=LIMIT).chat(WITH_TOOLS)
    assert caught.value.message == too_large_message(server.url, LIMIT)


def test_the_count_is_of_utf8_bytes():
    text = "é" * (LIMIT // 2 + 1)  # LIMIT / 2 + 1 characters, LIMIT + 2 bytes
    with ReplayServer([Turn(text=text)], chunk_chars=512) as server:
        with pytest.raises(ModelError) as caught:
            ModelClient(server.url, max_reply_bytes=LIMIT).chat(BODY)
    assert "passed 65,536 bytes (model.max_reply_bytes)" in caught.value.message
    with ReplayServer([Turn(text=text[:-1])], chunk_chars=512) as server:
        assert ModelClient(server.url, max_reply_bytes=LIMIT).chat(BODY).text == text[:-1]  # exactly LIMIT bytes


def test_one_stream_line_past_twice_the_bound_is_not_held():
    """A server that sends one endless line: it is refused once it passes 2 x max_reply_bytes."""
    with ReplayServer([Turn(text="q" * 400_000)], chunk_chars=400_000) as server:
        with pytest.raises(ModelError) as caught:
            ModelClient(server.url, max_reply_bytes=LIMIT).chat(BODY)
    assert caught.value.message == too_large_message(server.url, LIMIT)


def test_a_reply_just_under_the_bound_is_whole():
    with ReplayServer([Turn(text="a" * (LIMIT - 10), reasoning="b" * 10)], chunk_chars=4096) as server:
        reply = ModelClient(server.url, max_reply_bytes=LIMIT).chat(BODY)
    assert len(reply.text) + len(reply.reasoning) == LIMIT


def test_a_reply_that_is_not_streamed_is_bounded_by_its_body():
    with ReplayServer([Turn(text="n" * 200_000)]) as server:
        with pytest.raises(ModelError) as caught:
            ModelClient(server.url, max_reply_bytes=LIMIT).chat(BODY, stream=False)
    assert caught.value.message == too_large_message(server.url, LIMIT)
    with ReplayServer([Turn(text="n" * 1000)]) as server:
        assert ModelClient(server.url, max_reply_bytes=LIMIT).chat(BODY, stream=False).text == "n" * 1000


def test_an_error_body_is_read_only_up_to_its_bound():
    """A 500 whose body is 5 MB: the error quotes its start, and reading stopped at 64 KiB."""
    huge = "E" * 5_000_000
    with ReplayServer(lambda body: Turn(fault="status:500")) as server:
        import abhed.model.replay as replay_module
        original = replay_module.error_body
        replay_module.error_body = lambda message, status, kind="", flat=False: {"error": {"message": huge}}
        try:
            with pytest.raises(ModelError) as caught:
                ModelClient(server.url, attempts=1).chat(BODY)
        finally:
            replay_module.error_body = original
    assert "failed (HTTP 500: " in caught.value.message and len(caught.value.message) < 70_000


def test_max_reply_bytes_is_a_model_setting_that_reaches_the_client():
    from abhed.cli.display import Progress
    from abhed.cli.launch import open_model
    from abhed.session import config
    assert config.ModelConfig().max_reply_bytes == MAX_REPLY_BYTES == 16 * 1024 * 1024
    with pytest.raises(config.ConfigError):
        config.load({"model": {"max_reply_bytes": 1000}}, env={"ABHED_CONFIG": ""})  # under 64 KiB
    with ReplayServer([]) as server:
        settings = config.load({"model": {"endpoint": server.url, "max_reply_bytes": 100_000}},
                               env={"ABHED_CONFIG": ""})
        model = open_model(settings, Progress())
        assert model.client.max_reply_bytes == 100_000
        model.client.close()


# -- the lines of a stream -------------------------------------------------------------------------

@pytest.mark.parametrize("chunks", [[b"a\r\nb\n\nc"], [b"a\r", b"\nb\n", b"\nc"], [b"a", b"\r", b"\n", b"b\n\nc"],
                                    [b"a\rb\r\rc"], [b"a\r", b"b\r", b"\r", b"c"]])
def test_lines_end_at_crlf_lf_or_cr_wherever_the_chunks_are_cut(chunks):
    assert list(lines(chunks, 100)) == ["a", "b", "", "c"]


def test_lines_at_the_edges_of_a_stream():
    assert list(lines([b"\nA"], 100)) == ["", "A"]  # an LF first is a line of its own (no CR came before)
    assert list(lines([b"a\n"], 100)) == ["a"]  # a stream ended with its line yields no empty one after
    assert list(lines([], 100)) == []


def test_lines_decode_utf8_and_replace_what_is_not():
    euro = "€".encode()
    assert list(lines(["é\n".encode(), b"\xff\n", euro[:2], euro[2:]], 100)) == ["é", "\ufffd", "€"]


def test_a_line_is_held_only_up_to_the_limit():
    assert list(lines([b"x" * 10 + b"\n" + b"y" * 10], 10)) == ["x" * 10, "y" * 10]
    with pytest.raises(LineTooLong):
        list(lines([b"x" * 6, b"x" * 5], 10))  # never ended: refused as it grows
    with pytest.raises(LineTooLong):
        list(lines([b"x" * 6, b"x" * 5 + b"\n"], 10))  # ended in the chunk that passes the limit
