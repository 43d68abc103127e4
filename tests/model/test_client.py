"""The model client against a real HTTP server speaking vLLM's wire format: chunks, usage, faults."""

from __future__ import annotations

import datetime
import json
import socket
import ssl
import threading
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from abhed.model.client import ModelClient
from abhed.model.errors import ContextOverflow, ModelError, ToolsUnsupported
from abhed.model.replay import ReplayServer, Turn

BODY = {"model": "replay/abhed-demo", "messages": [{"role": "user", "content": "hi"}]}
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in ("read", "glob")]
WITH_TOOLS = {**BODY, "tools": TOOLS, "tool_choice": "auto"}


def client(server: ReplayServer, **kw) -> ModelClient:
    return ModelClient(server.url, backoff_s=0, **kw)


def test_streamed_text_arrives_in_deltas_and_usage_comes_from_the_last_chunk():
    with ReplayServer([Turn(text="Hello there, this is streamed text.")], chunk_chars=5) as server:
        deltas: list[str] = []
        reply = client(server).chat(BODY, on_text=deltas.append)
    assert reply.text == "Hello there, this is streamed text." and len(deltas) > 3
    assert reply.finish_reason == "stop" and reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    request = server.requests[0]
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}


def test_tool_call_fragments_are_joined_by_index_including_the_one_in_the_finish_chunk():
    args_a = {"path": "/w/a.py", "limit": 20}
    args_b = {"pattern": "**/*.py"}
    with ReplayServer([Turn(text="Reading.", calls=[("read", args_a), ("glob", args_b)])]) as server:
        reply = client(server).chat(WITH_TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [("read", args_a), ("glob", args_b)]
    assert all(c.id.startswith("chatcmpl-tool-") for c in reply.tool_calls) and reply.finish_reason == "tool_calls"


def test_reasoning_deltas_are_kept_apart_from_the_text():
    with ReplayServer([Turn(text="Done.", reasoning="Thinking about it.")]) as server:
        thoughts: list[str] = []
        reply = client(server).chat(BODY, on_reasoning=thoughts.append)
    assert reply.text == "Done." and reply.reasoning == "Thinking about it." and "".join(thoughts) == reply.reasoning


def test_the_non_streaming_path_gives_the_same_reply():
    with ReplayServer([Turn(text="Plain.", calls=[("read", {"path": "/w/x"})])]) as server:
        reply = client(server).chat(WITH_TOOLS, stream=False)
    assert reply.text == "Plain." and reply.tool_calls[0].name == "read" and reply.usage.prompt_tokens > 0
    assert server.requests[0]["stream"] is False and "stream_options" not in server.requests[0]


def test_models_lists_ids_and_the_context_window():
    with ReplayServer([], model_id="Qwen/Qwen2.5-Coder-7B-Instruct", max_model_len=16384) as server:
        [served] = client(server).models()
    assert served.id == "Qwen/Qwen2.5-Coder-7B-Instruct" and served.max_model_len == 16384


@pytest.mark.parametrize("fault", ["status:503", "status:502", "status:429", "flat:500", "reset", "cut", "cut_clean",
                                   "error_event", "garbage"])
def test_transient_faults_are_retried_and_the_retry_is_reported(fault):
    with ReplayServer([Turn(fault=fault), Turn(text="recovered")]) as server:
        retries = []
        reply = client(server).chat(BODY, on_retry=lambda r: retries.append((r.failures, r.error.message)))
    assert reply.text == "recovered" and len(retries) == 1 and server.url in retries[0][1]


def test_a_stall_past_the_read_timeout_is_retried():
    with ReplayServer([Turn(fault="stall"), Turn(text="late but fine")], stall_s=1.0) as server:
        retries = []
        reply = client(server, timeout_s=0.2).chat(BODY, on_retry=lambda r: retries.append(r.error.message))
    assert reply.text == "late but fine" and "sent nothing for 0.2 s" in retries[0]


def test_persistent_5xx_gives_up_with_the_endpoint_the_status_and_the_attempts():
    with ReplayServer([Turn(fault="status:500")] * 3) as server:
        with pytest.raises(ModelError) as caught:
            client(server, attempts=3).chat(BODY)
    message = caught.value.message
    assert server.url in message and "HTTP 500" in message and "tried 3 times" in message and "vLLM logs" in message


def _free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    return port


def test_connection_refused_is_waited_out_up_to_max_request_s_then_names_the_endpoint_and_what_to_check():
    endpoint = f"http://127.0.0.1:{_free_port()}/v1"
    fake, told = FakeTime(), []
    with pytest.raises(ModelError) as caught:
        ModelClient(endpoint, backoff_s=0.5, attempts=3, max_request_s=30, sleep=fake.sleep,
                    clock=fake.clock).chat(BODY, on_retry=told.append)
    assert fake.waits == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 2.5]  # backoff, capped, the last up to the bound
    assert caught.value.message == (
        f"Cannot connect to the model server at {endpoint} (connection refused). Check that vLLM is running and "
        "listening there, and that the endpoint is right (--endpoint, ABHED_ENDPOINT or model.endpoint; vLLM serves "
        "http://HOST:8000/v1 by default). Abhed waited 30 s for it to come back (10 tries; model.max_request_s = 30 s): "
        "start the server, or raise model.max_request_s if loading its model takes longer.")
    assert [r.notice() for r in told][-1] == (
        f"Waiting for the model server at {endpoint} (connection refused): 28 s of 30 s (model.max_request_s); "
        "next try in 2.5 s. It may be restarting or loading its model; Ctrl-C stops waiting.")
    assert len(told) == 9 and all(r.waiting and r.failures == 0 for r in told)  # not counted against attempts


def test_a_host_that_drops_packets_is_given_up_on_after_the_startup_connect_bound(silent_endpoint):
    client = ModelClient(silent_endpoint, connect_s=30, attempts=4, backoff_s=0)
    retries = []
    with pytest.raises(ModelError) as caught:
        client.models(attempts=1, connect_s=0.2, on_retry=retries.append)
    message = caught.value.message
    assert message.startswith(f"No connection to the model server at {silent_endpoint} within 0.2 s "
                              "(model.startup_connect_s): nothing answered")
    assert "firewall" in message and "raise model.startup_connect_s" in message
    assert retries == [] and "tried" not in message  # gave up at once: one try, the short bound, not 30 s


def test_mid_session_requests_keep_their_own_connect_bound_and_wait(silent_endpoint):
    fake = FakeTime()
    client = ModelClient(silent_endpoint, connect_s=0.2, attempts=2, backoff_s=0.5, max_request_s=2, sleep=fake.sleep,
                         clock=fake.clock)
    with pytest.raises(ModelError) as caught:
        client.chat(BODY)
    message = caught.value.message
    assert "within 0.2 s (model.connect_s)" in message and "waited 2 s for it to come back (4 tries;" in message
    assert fake.waits == [0.5, 1.0, 0.5]  # waited for, as a drop mid-session should be


def test_connect_keeps_the_sessions_connect_bound_after_a_short_probe():
    from abhed.model.connect import connect
    with ReplayServer([]) as server:
        model = connect(server.url, connect_s=7, probe_connect_s=0.5)
        assert model.client.connect_s == 7 and model.client._http.timeout.connect == 7
        model.client.close()


def test_context_length_400_is_a_context_overflow_with_the_limit_and_is_not_retried():
    with ReplayServer([Turn(fault="overflow")], max_model_len=4096) as server:
        with pytest.raises(ContextOverflow) as caught:
            client(server).chat(BODY)
    assert caught.value.limit == 4096 and caught.value.requested is not None and len(server.requests) == 1


def test_a_request_over_max_model_len_is_refused_like_vllm_does():
    with ReplayServer([Turn(text="never")], max_model_len=2000) as server:
        with pytest.raises(ContextOverflow) as caught:
            client(server).chat({**BODY, "max_tokens": 1995})
    assert caught.value.limit == 2000 and "maximum context length is 2000 tokens" in caught.value.message


def test_a_server_without_a_tool_parser_is_explained():
    with ReplayServer([Turn(text="x")], tool_parser=False) as server:
        with pytest.raises(ToolsUnsupported) as caught:
            client(server).chat({**BODY, "tools": [{"type": "function", "function": {"name": "read"}}],
                                 "tool_choice": "auto"})
    message = caught.value.message
    assert "--enable-auto-tool-choice" in message and "abhed models" in message and 'tool_format = "hermes"' in message


def test_client_errors_are_not_retried_and_say_what_to_check():
    with ReplayServer([Turn(fault="status:401")]) as server:
        with pytest.raises(ModelError) as caught:
            client(server).chat(BODY)
    assert "API key" in caught.value.message and "ABHED_API_KEY" in caught.value.message and not caught.value.retryable
    assert len(server.requests) == 1


@pytest.mark.parametrize("path", ["", "/v2", "/api/v1/"])
def test_a_wrong_path_suggests_the_roots_v1_when_it_answers(path):
    """Connecting names the endpoint where the API answers (the server's root + /v1; it suggested
    /v2/v1 for /v2); the client alone says what it saw."""
    from abhed.model.connect import connect
    from abhed.model.errors import NotAnApi
    with ReplayServer([]) as server:
        root = server.url.removesuffix("/v1")
        with pytest.raises(NotAnApi) as alone:
            ModelClient(root + path, backoff_s=0).models()
        with pytest.raises(NotAnApi) as caught:
            connect(root + path, backoff_s=0)
    assert alone.value.message == (f"{(root + path).rstrip('/')} does not answer as an OpenAI-compatible API: GET "
                                   f"{(root + path).rstrip('/')}/models answered HTTP 404 (Not Found: "
                                   f"{path.rstrip('/')}/models).")
    assert caught.value.message == (f"{alone.value.message} The API answers at {server.url} (serving "
                                    f"{server.model_id}): set the endpoint to it (--endpoint, ABHED_ENDPOINT or "
                                    "model.endpoint).")


def test_an_endpoint_without_a_scheme_is_explained():
    with pytest.raises(ModelError) as caught:
        ModelClient("localhost:8000/v1", backoff_s=0).models()
    assert "not an http:// or https:// URL" in caught.value.message


def test_the_script_running_out_is_a_clear_non_retried_error():
    with ReplayServer([]) as server:
        with pytest.raises(ModelError) as caught:
            client(server).chat(BODY)
    assert "replay script exhausted" in caught.value.message and len(server.requests) == 1


# -- stalls, slow answers and the bound on one failing request (issue 14 item 9) ---------------------

def test_a_stream_that_stops_midway_is_detected_as_a_stall_and_retried():
    """A real server sends the start of a reply, then nothing: after stall_s the client gives up on
    that try (long before timeout_s) and retries."""
    with ReplayServer([Turn(fault="stall_mid"), Turn(text="second try")], stall_s=30.0) as server:
        retries: list[str] = []
        reply = client(server, timeout_s=120, stall_s=0.5).chat(BODY, on_retry=lambda r: retries.append(r.error.message))
    assert reply.text == "second try" and len(retries) == 1
    assert retries[0] == (f"The model server at {server.url} stalled: its reply had begun, then nothing came for 0.5 s. "
                          "The server may be hung or overloaded; check the vLLM logs (and GPU health), or raise "
                          "model.stall_s if it is merely slow between tokens.")


def test_a_stall_on_every_try_gives_up_naming_the_stall_and_the_tries():
    with ReplayServer([Turn(fault="stall_mid")] * 2, stall_s=30.0) as server:
        with pytest.raises(ModelError) as caught:
            client(server, timeout_s=120, stall_s=0.3, attempts=2).chat(BODY)
    assert "stalled: its reply had begun, then nothing came for 0.3 s" in caught.value.message
    assert "(tried 2 times in " in caught.value.message and len(server.requests) == 2


def test_a_slow_long_answer_is_not_a_stall():
    """Chunks every 0.1 s for well over stall_s in total: streaming steadily is never cut."""
    text = "a slow but steady answer " * 4
    with ReplayServer([Turn(text=text)], chunk_chars=4, delay_s=0.1) as server:
        retries: list[str] = []
        reply = client(server, stall_s=1.0).chat(BODY, on_retry=lambda r: retries.append(r.error.message))
    assert reply.text == text and retries == []  # 27 chunks, about 2.7 s in all


def test_a_late_first_token_waits_for_timeout_s_not_stall_s():
    """Headers at once, then nothing for longer than stall_s before the reply begins (a queue, a
    prefill): that is timeout_s's to bound, not a stall."""
    with ReplayServer([Turn(fault="late_start", text="after a long prefill")], stall_s=1.5) as server:
        retries: list[str] = []
        reply = client(server, timeout_s=60, stall_s=0.3).chat(BODY, on_retry=lambda r: retries.append(r.error.message))
    assert reply.text == "after a long prefill" and retries == []


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def test_max_request_s_bounds_all_the_tries_of_one_failing_request():
    fake = FakeTime()
    tries = []

    def failing() -> None:
        tries.append(fake.now)
        fake.now += 100  # each try burns 100 s (a read timeout, say)
        raise ModelError("The model server at X sent nothing for 100 s.", retryable=True)
    mc = ModelClient("http://127.0.0.1:9/v1", attempts=10, backoff_s=5, max_request_s=300, sleep=fake.sleep,
                     clock=fake.clock)
    with pytest.raises(ModelError) as caught:
        mc._retrying(failing, None)
    # tries at 0, 105, 215: after the third 315 s are spent, no fourth begins
    assert tries == [0, 105, 215] and fake.waits == [5, 10]
    assert caught.value.message == ("The model server at X sent nothing for 100 s. (tried 3 times in 315 s; gave up: "
                                    "model.max_request_s bounds one request to 300 s)")


def test_a_retry_that_could_not_start_in_time_is_not_attempted():
    fake = FakeTime()
    tries = []

    def failing() -> None:
        tries.append(fake.now)
        fake.now += 8
        raise ModelError("down", retryable=True)
    mc = ModelClient("http://127.0.0.1:9/v1", attempts=5, backoff_s=2, max_request_s=10, sleep=fake.sleep,
                     clock=fake.clock)
    with pytest.raises(ModelError) as caught:
        mc._retrying(failing, None)
    assert tries == [0] and fake.waits == []  # 8 s spent + 2 s wait reaches 10 s: no second try
    assert caught.value.message == "down (tried 1 time in 8 s; gave up: model.max_request_s bounds one request to 10 s)"
    ok = ModelClient("http://127.0.0.1:9/v1", attempts=2, max_request_s=10, sleep=fake.sleep, clock=fake.clock)
    assert ok._retrying(lambda: "fine", None) == "fine"


def test_the_stall_settings_reach_the_client_from_the_config():
    from abhed.session import config
    from abhed.model.connect import connect
    settings = config.load({"model": {"stall_s": 7, "max_request_s": 70}}, env={"ABHED_CONFIG": ""})
    assert (settings.model.stall_s, settings.model.max_request_s) == (7, 70)
    assert (config.ModelConfig().stall_s, config.ModelConfig().max_request_s) == (60.0, 900.0)
    with ReplayServer([]) as server:
        model = connect(server.url, stall_s=7, max_request_s=70)
        assert (model.client.stall_s, model.client.max_request_s) == (7, 70)
        model.client.close()


def test_a_malformed_stream_event_says_what_to_check():
    with ReplayServer([Turn(fault="garbage")] * 2) as server:
        with pytest.raises(ModelError) as caught:
            client(server, attempts=2).chat(BODY)
    message = caught.value.message
    assert f"The model server at {server.url} sent a malformed stream event: '{{not json'." in message
    assert "`data: {json}` lines ending with `data: [DONE]`" in message and "(ending in /v1)" in message
    assert "no proxy between here and it rewrites or buffers the stream" in message


def test_streamed_arguments_past_the_wire_limit_are_counted_not_kept(monkeypatch):
    """A server streaming more arguments than any call may have: memory stays bounded, and the call
    comes back refused with a message the model can act on."""
    from abhed.model import client as client_module
    monkeypatch.setattr(client_module, "WIRE_ARGUMENT_LIMIT", 1000)
    huge = json.dumps({"path": "/w/a", "content": "x" * 5000})
    with ReplayServer([Turn(calls=[("write", huge), ("read", {"path": "/w/b"})])]) as server:
        reply = client(server).chat(WITH_TOOLS)
    refused, fine = reply.tool_calls
    assert refused.name == "write" and len(refused.arguments) <= 1000 and refused.error == (
        f"The arguments of your `write` call were {len(huge):,} characters, over the 1,000 Abhed reads of one call; "
        "nothing was run. Send smaller calls: write a large file in parts (write the start, then add the rest with "
        "edit).")
    assert fine.error is None and json.loads(fine.arguments) == {"path": "/w/b"}



def _tls_context(client: ModelClient) -> ssl.SSLContext:
    return client._http._transport._pool._ssl_context  # type: ignore[attr-defined]  (the context httpx will use)


def _self_signed_server(folder: Path) -> ssl.SSLContext:
    """A TLS server context with a fresh self-signed certificate for localhost."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    pem = folder / "server.pem"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem)
    return context


def test_an_http_endpoint_skips_the_ca_bundle_with_a_context_that_trusts_nothing(tmp_path):
    """Start-up (issue 18): an http:// endpoint does not load the CA bundle. Its client would still
    refuse any TLS server, and an https:// endpoint verifies against the bundle as before."""
    plain, secure = _tls_context(ModelClient("http://gpu1:8000/v1")), _tls_context(ModelClient("https://gpu1:8000/v1"))
    assert plain.cert_store_stats()["x509_ca"] == 0 and secure.cert_store_stats()["x509_ca"] > 0
    assert all(c.verify_mode == ssl.CERT_REQUIRED and c.check_hostname for c in (plain, secure))
    server_context = _self_signed_server(tmp_path)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        try:
            server_context.wrap_socket(connection, server_side=True).close()
        except (ssl.SSLError, OSError):
            pass  # the client refused the handshake
        finally:
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            ModelClient(f"http://localhost:{port}/v1")._http.get(f"https://localhost:{port}/v1/models")
    finally:
        thread.join(10)
        listener.close()


def test_a_proxy_in_the_environment_is_not_used(monkeypatch):
    """Abhed talks to the configured endpoint only: HTTP_PROXY and friends (here a port nothing
    listens on) are ignored, and the request reaches the server directly."""
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with ReplayServer([Turn(text="direct")]) as server:
        assert client(server).chat(BODY).text == "direct"
    assert len(server.requests) == 1
