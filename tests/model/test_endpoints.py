"""model.endpoints (issue 37, item 5): several vLLM replicas, a session sticking to one, failover, Retry-After.

Every server is a real HTTP server on 127.0.0.1 (the replay server, a port nothing listens on, a
socket that accepts and never answers); the client and the agent are the real ones. Waits that only
their arithmetic matters for run on a fake clock.
"""

from __future__ import annotations

import random
import socket
from email.utils import formatdate
from pathlib import Path

import pytest

from abhed.agent.display import Display
from abhed.agent.loop import Agent, Budget, Limits
from abhed.files.paths import PathPolicy
from abhed.gate.approval import Gate, Policy
from abhed.model.client import ModelClient, Retry
from abhed.model.connect import connect
from abhed.model.endpoints import (DOWN_S, RETRY_AFTER_CAP_S, Health, Pool, check, check_all, choose, load_of,
                                   pick, retry_after, server_root, session_endpoint)
from abhed.model.errors import ModelError
from abhed.model.replay import ReplayServer, Turn
from abhed.session import config
from abhed.session.events import EndpointEvent
from abhed.session.store import SessionStore
from abhed.tools.base import ToolContext
from test_client import FakeTime
from test_client import _free_port as free_port

BODY = {"model": "replay/abhed-demo", "messages": [{"role": "user", "content": "hi"}]}


def http():  # type: ignore[no-untyped-def]
    from abhed.model.client import httpx
    return httpx.Client(trust_env=False)


def messages_bytes(raw: bytes) -> bytes:
    """The messages array of a request as sent: the client splices the encoded messages in last."""
    head, sep, tail = raw.partition(b'"messages":[')
    assert sep and tail.endswith(b"]}"), raw[:200]
    return tail[:-2]


def assert_append_only(raws: list[bytes]) -> None:
    """Each request's messages are the previous request's, byte for byte, and then new ones."""
    assert len(raws) >= 2
    for before, after in zip(raws, raws[1:]):
        old, new = messages_bytes(before), messages_bytes(after)
        assert new.startswith(old + b","), (old[-200:], new[:len(old) + 50][-250:])


class Notices:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)


# -- Retry-After, /metrics, the root ------------------------------------------------------------------

def test_retry_after_reads_seconds_and_http_dates_and_is_capped():
    assert retry_after("7") == 7.0
    assert retry_after(" 2.5 ") == 2.5
    assert retry_after("-3") == 0.0
    assert retry_after("86400") == RETRY_AFTER_CAP_S
    assert retry_after(formatdate(1000.0 + 30, usegmt=True), now=1000.0) == 30.0
    assert retry_after(formatdate(1000.0 - 30, usegmt=True), now=1000.0) == 0.0  # a date gone by: at once
    assert retry_after(None) is None and retry_after("") is None
    assert retry_after("soon") is None and retry_after("nan") is None


def test_the_load_is_running_plus_waiting_summed_over_label_sets_and_the_root_drops_v1():
    page = ("# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
            'vllm:num_requests_running{engine="1",model_name="m"} 1.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 4.0\n'
            'vllm:num_requests_waiting_by_reason{reason="x"} 100.0\n'
            "vllm:gpu_cache_usage_perc 0.5\n")
    assert load_of(page) == 8.0
    assert load_of("vllm:num_requests_running 2\n") == 2.0
    assert load_of("process_cpu_seconds_total 5\n") is None  # a router's page without the gauges
    assert server_root("http://gpu1:8000/v1") == "http://gpu1:8000"
    assert server_root("http://gpu1:8000/v1/") == "http://gpu1:8000"
    assert server_root("https://lb.site/vllm/a/v1") == "https://lb.site/vllm/a"
    assert server_root("http://gpu1:8000/api") == "http://gpu1:8000"  # not vLLM's layout: the host's root


# -- the health check ---------------------------------------------------------------------------------

def test_health_check_asks_models_and_reads_the_load_from_the_replicas_metrics(monkeypatch):
    import threading
    crashed: list[object] = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)
    with ReplayServer([]) as server, http() as client:
        server.waiting = 5
        health = check(server.url, client)
        assert health.up and health.load == 5.0
        server.metrics = False  # a router with no /metrics: up, load unknown
        assert check(server.url, client) == Health(server.url, None, None)
    assert crashed == []


def test_health_check_tells_why_an_endpoint_is_down_within_its_deadline(monkeypatch):
    import threading
    crashed: list[object] = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)  # a check's thread never dies of an error
    dead = f"http://127.0.0.1:{free_port()}/v1"
    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    mute = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
    try:
        with ReplayServer([], loading=5) as loading, ReplayServer([]) as wrong, http() as client:
            found = check_all([dead, mute, loading.url, wrong.url + "/nope"], client, deadline_s=0.3)
    finally:
        silent.close()
    assert [h.why_down for h in found] == ["connection refused", "no answer within 0.3 s",
                                           "GET /models answered HTTP 503", "GET /models answered HTTP 404"]
    assert crashed == []


def raw_server(answer, stop):  # type: ignore[no-untyped-def]
    """A server on 127.0.0.1 that calls answer(connection) for each connection; its URL's /v1."""
    import threading
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=answer, args=(conn,), daemon=True).start()
        listener.close()
    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/v1"


def test_the_health_deadline_bounds_a_whole_answer_and_a_page_is_read_only_so_far():
    import threading
    stop = threading.Event()

    def trickle(conn):  # type: ignore[no-untyped-def]
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
        while not stop.wait(0.05):  # a byte every 50 ms: each read is quick, the answer never ends
            try:
                conn.sendall(b" ")
            except OSError:
                return

    def hang_up(conn):  # type: ignore[no-untyped-def]
        conn.recv(65536)
        conn.close()

    def flood(conn):  # type: ignore[no-untyped-def]
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        try:
            conn.sendall(b'{"data": [' + b" " * (5 * 1024 * 1024))
        except OSError:
            pass
        conn.close()

    try:
        slow, big, rude = raw_server(trickle, stop), raw_server(flood, stop), raw_server(hang_up, stop)
        with http() as client:
            found = check_all([slow, big, rude], client, deadline_s=0.5)
    finally:
        stop.set()
    assert [h.why_down for h in found] == ["no answer within 0.5 s", "GET /models answered no model list",
                                           "Server disconnected without sending a response."]


def test_the_api_key_goes_to_each_servers_health_check():
    import threading
    stop, seen = threading.Event(), []

    def answer(conn):  # type: ignore[no-untyped-def]
        request = conn.recv(65536)
        seen.append(request.split(b"\r\n", 1)[0] + b" " + (b"key" if b"authorization: Bearer k3y" in request.replace(
            b"Authorization", b"authorization") else b"no key"))
        body = b'{"data": [{"id": "m"}]}'
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        conn.close()
    try:
        urls = [raw_server(answer, stop), raw_server(answer, stop)]
        session_endpoint(urls, None, "k3y", Notices(), rng=random.Random(0))
    finally:
        stop.set()
    assert sorted(seen) == [b"GET /metrics HTTP/1.1 key"] * 2 + [b"GET /v1/models HTTP/1.1 key"] * 2


# -- choosing a session's endpoint --------------------------------------------------------------------

def test_a_session_takes_the_least_loaded_replica_that_answers():
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with ReplayServer([]) as a, ReplayServer([]) as b, ReplayServer([]) as c, http() as client:
        a.waiting, b.waiting, c.waiting = 4, 1, 9
        for seed in range(4):  # wherever the rotation starts
            chosen, healths = choose([dead, a.url, b.url, c.url], client, rng=random.Random(seed))
            assert chosen == b.url
            assert [h.up for h in healths] == [False, True, True, True]


def test_without_load_figures_the_sessions_go_round():
    with ReplayServer([]) as a, ReplayServer([]) as b, ReplayServer([]) as c, http() as client:
        for server in (a, b, c):
            server.metrics = False
        picked = {choose([a.url, b.url, c.url], client, rng=random.Random(seed))[0] for seed in range(12)}
    assert picked == {a.url, b.url, c.url}
    # the rotation decides among equals (no figures counts as the busiest); one below the others wins
    ups = [Health("A", None, None), Health("B", None, 2.0), Health("C", None, 2.0)]
    assert pick(ups, 0) == "A" and pick(ups, 1) == "B" and pick([*ups[:2], Health("C", None, 0.0)], 0) == "C"
    assert pick([Health("A", "down")], 0) is None
    assert pick([Health("A", None), Health("B", "down"), Health("C", None)], 1) == "C"  # the round goes forward


def test_a_resumed_session_keeps_its_endpoint_even_when_another_is_less_loaded():
    with ReplayServer([]) as a, ReplayServer([]) as b:
        with http() as client:
            a.waiting = 50
            chosen, healths = choose([a.url, b.url], client, prefer=a.url)
            assert chosen == a.url and [h.endpoint for h in healths] == [a.url]  # the others were not even asked
        a.close()  # its endpoint is gone: the least loaded of the others
        with http() as client:  # (a kept connection would still reach a's handler thread)
            chosen, healths = choose([a.url, b.url], client, prefer=a.url)
        assert chosen == b.url and healths[0].why_down == "connection refused"
        with http() as client:  # a recorded endpoint the list no longer holds is never asked
            chosen, healths = choose([b.url], client, prefer=a.url)
        assert chosen == b.url and [h.endpoint for h in healths] == [b.url]


def test_one_endpoint_is_used_as_before_without_a_pool_or_a_health_check():
    notices = Notices()
    assert session_endpoint(["http://127.0.0.1:9/v1"], None, None, notices) == ("http://127.0.0.1:9/v1", None)
    assert notices.lines == []


def test_the_servers_found_down_at_start_are_told_once_and_passed_over():
    dead = f"http://127.0.0.1:{free_port()}/v1"
    notices = Notices()
    with ReplayServer([]) as up:
        chosen, pool = session_endpoint([dead, up.url], None, None, notices, rng=random.Random(0))
    assert chosen == up.url and pool is not None and pool.is_down(dead) and not pool.is_down(up.url)
    assert notices.lines == [f"model server {dead} does not answer (connection refused); sessions use the other "
                             "servers of model.endpoints"]


# -- failover -----------------------------------------------------------------------------------------

def pooled(servers: list[str], **kw) -> ModelClient:  # type: ignore[no-untyped-def]
    return ModelClient(servers[0], pool=Pool(list(servers)), backoff_s=0, **kw)


@pytest.mark.parametrize("fault", ["status:502", "status:503", "status:504"])
def test_a_request_finding_its_endpoint_down_goes_on_at_the_next_told_once(fault):
    told: list[Retry] = []
    with ReplayServer([Turn(fault=fault)]) as a, ReplayServer([Turn(text="from b")]) as b:
        with pooled([a.url, b.url]) as client:
            reply = client.chat(BODY, on_retry=told.append)
            assert reply.text == "from b" and client.endpoint == b.url
    assert len(told) == 1 and told[0].switched_to == b.url
    code = fault.split(":")[1]
    assert told[0].notice().startswith(f"The model server at {a.url} is down (")
    assert code in told[0].notice() and told[0].notice().endswith(f"this session goes on at {b.url} (model.endpoints).")


def test_a_refused_connection_fails_over_at_once_without_waiting():
    fake = FakeTime()
    dead = f"http://127.0.0.1:{free_port()}/v1"
    told: list[Retry] = []
    with ReplayServer([Turn(text="hello")]) as b:
        client = ModelClient(dead, pool=Pool([dead, b.url], clock=fake.clock), sleep=fake.sleep, clock=fake.clock)
        assert client.chat(BODY, on_retry=told.append).text == "hello"
    assert fake.waits == [] and [r.switched_to for r in told] == [b.url]
    assert told[0].notice() == (f"The model server at {dead} is down (connection refused); this session goes on at "
                                f"{b.url} (model.endpoints).")
    assert client.pool is not None and client.pool.is_down(dead)


def test_a_request_of_a_session_another_request_already_moved_follows_it_untold():
    told: list[Retry] = []
    client = ModelClient("http://A/v1", pool=Pool(["http://A/v1", "http://B/v1", "http://C/v1"]))
    client.endpoint = "http://B/v1"  # a parallel request (a subagent's) found A down and moved the session
    down = ModelError("A is down", unavailable="connection refused")
    assert client._fail_over(down, "http://A/v1", told.append, 4, 0.0) is True
    assert client.endpoint == "http://B/v1" and told == [] and client.pool is not None
    assert client.pool.is_down("http://A/v1") and not client.pool.is_down("http://B/v1")
    assert client._fail_over(down, "http://B/v1", told.append, 4, 0.0) is True  # then B goes down too: told
    assert client.endpoint == "http://C/v1" and [r.switched_to for r in told] == ["http://C/v1"]
    client.close()


def test_a_session_stays_on_its_endpoint_request_after_request():
    with ReplayServer([Turn(text="1"), Turn(text="2"), Turn(text="3")]) as a, ReplayServer([]) as b:
        with pooled([a.url, b.url]) as client:
            assert [client.chat(BODY).text for _ in range(3)] == ["1", "2", "3"]
        assert len(a.requests) == 3 and b.requests == []


def test_retry_after_on_503_marks_the_endpoint_for_that_long_and_the_notice_shows_it():
    fake = FakeTime()
    told: list[Retry] = []
    with ReplayServer([Turn(fault="status:503", retry_after="20")]) as a, ReplayServer([Turn(text="b")]) as b:
        pool = Pool([a.url, b.url], clock=fake.clock)
        client = ModelClient(a.url, pool=pool, sleep=fake.sleep, clock=fake.clock)
        assert client.chat(BODY, on_retry=told.append).text == "b"
    assert fake.waits == []  # another replica was up: no wait at all
    assert "(the server asked for 20 s: Retry-After)" in told[0].notice()
    fake.now = 19.9
    assert pool.is_down(a.url)
    fake.now = 20.1
    assert not pool.is_down(a.url)


def test_retry_after_on_429_is_honoured_before_the_retry_on_the_same_endpoint():
    fake = FakeTime()
    told: list[Retry] = []
    turns = [Turn(fault="status:429", retry_after="7"), Turn(fault="status:429", retry_after="9999"), Turn(text="ok")]
    with ReplayServer(turns) as a:
        client = ModelClient(a.url, backoff_s=1, sleep=fake.sleep, clock=fake.clock)
        assert client.chat(BODY, on_retry=told.append).text == "ok"
    assert fake.waits == [7.0, RETRY_AFTER_CAP_S]
    assert told[0].notice().endswith("Retrying in 7 s (the server asked for 7 s: Retry-After) (attempt 2 of 4).")
    with ReplayServer([Turn(fault="status:429", retry_after="0"), Turn(text="ok")]) as b:
        client = ModelClient(b.url, backoff_s=1, sleep=fake.sleep, clock=fake.clock)
        assert client.chat(BODY, on_retry=told.append).text == "ok"
    assert told[-1].notice().endswith("Retrying in 1 s (attempt 2 of 4).")  # "now" is no wait to show


def test_retry_after_as_an_http_date_on_a_lone_503_sets_the_wait():
    fake = FakeTime()
    told: list[Retry] = []
    import time
    when = formatdate(time.time() + 12, usegmt=True)
    with ReplayServer([Turn(fault="status:503", retry_after=when), Turn(text="ok")]) as a:
        client = ModelClient(a.url, backoff_s=1, sleep=fake.sleep, clock=fake.clock)
        assert client.chat(BODY, on_retry=told.append).text == "ok"
    assert 10 <= fake.waits[0] <= 12
    assert "Retry-After" in told[0].notice() and told[0].notice().startswith(f"Waiting for the model server at {a.url}")


def test_when_every_endpoint_is_down_the_error_names_each_one_and_why():
    fake = FakeTime()
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with ReplayServer([Turn(fault="status:503")] * 50) as busy, ReplayServer([Turn(fault="status:504")] * 50) as gw:
        pool = Pool([dead, busy.url, gw.url], clock=fake.clock)
        client = ModelClient(dead, pool=pool, max_request_s=30, sleep=fake.sleep, clock=fake.clock)
        told: list[Retry] = []
        with pytest.raises(ModelError) as caught:
            client.chat(BODY, on_retry=told.append)
    message = caught.value.message
    assert message.startswith(f"No model server of model.endpoints answers ({dead}: connection refused; {busy.url}: "
                              f"HTTP 503: replayed fault: HTTP 503; {gw.url}: HTTP 504 (a gateway timed out)).")
    assert "model.max_request_s = 30 s" in message and "`abhed doctor` asks each one" in message
    assert str(caught.value) == message
    assert [r.switched_to for r in told[:2]] == [busy.url, gw.url]  # each switch told once
    waits = [r for r in told if r.switched_to is None]
    assert waits and all(r.down is not None and r.notice().startswith("No model server of model.endpoints answers")
                         for r in waits)
    assert sum(fake.waits) <= 30


def test_every_endpoint_down_at_start_is_one_clear_error():
    dead = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    notices = Notices()
    chosen, pool = session_endpoint(dead, None, None, notices, rng=random.Random(1))
    assert len(notices.lines) == 2
    with pytest.raises(ModelError) as caught:
        connect(chosen, pool=pool, probe_attempts=1, backoff_s=0)
    assert caught.value.message.startswith(f"No model server of model.endpoints answers ({dead[0]}: connection "
                                           f"refused; {dead[1]}: connection refused). Cannot connect to the model "
                                           f"server at {chosen}")


def test_a_server_back_after_every_one_was_down_is_used_and_its_mark_cleared():
    fake = FakeTime()
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with ReplayServer([Turn(fault="status:503", retry_after="0"), Turn(text="back")]) as a:
        pool = Pool([a.url, dead], clock=fake.clock)
        client = ModelClient(a.url, pool=pool, sleep=fake.sleep, clock=fake.clock, backoff_s=1)
        told: list[Retry] = []
        assert client.chat(BODY, on_retry=told.append).text == "back"  # without on_retry too, below
    assert client.endpoint == a.url and not pool.is_down(a.url) and pool.is_down(dead)
    assert [r.switched_to for r in told] == [dead, a.url]  # Retry-After: 0 on a: a may be asked again at once
    assert "Retry-After" not in told[0].notice()  # it asked for no wait: none is shown as asked
    with ReplayServer([Turn(fault="status:502")]) as c, ReplayServer([Turn(text="d")]) as d:
        assert pooled([c.url, d.url]).chat(BODY).text == "d"


def test_a_request_that_is_refused_is_not_failed_over():
    with ReplayServer([Turn(fault="status:400")]) as a, ReplayServer([Turn(text="b")]) as b:
        with pooled([a.url, b.url]) as client, pytest.raises(ModelError) as caught:
            client.chat(BODY)
    assert caught.value.status == 400 and b.requests == []


# -- the agent: append-only requests, across a failover; the switch recorded ----------------------------

class Told(Display):
    def __init__(self, notices: list[str]) -> None:
        self.notices = notices

    def notice(self, message: str) -> None:
        self.notices.append(message)


def agent_on(ws: Path, home: Path, servers: list[str], notices: list[str]) -> Agent:
    settings = config.load({}, env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
    model = connect(servers[0], pool=Pool(list(servers)), backoff_s=0, profile="generic")
    session = SessionStore(home).create(ws)
    ctx = ToolContext(session, settings, PathPolicy.create(ws))
    display = Told(notices)
    return Agent(ctx, model, Gate(Policy.create("accept-edits", [], [], ws)), Budget(Limits(turns=20)),
                 display=display)


def test_requests_only_append_byte_for_byte_across_a_failover_and_the_switch_is_recorded(ws, home):
    (ws / "a.txt").write_text("alpha\n")
    notices: list[str] = []
    first = [Turn(calls=[("read", {"path": str(ws / "a.txt")})]), Turn(calls=[("glob", {"pattern": "*.txt"})])]
    later = [Turn(calls=[("grep", {"pattern": "alpha"})]), Turn(text="done")]
    with ReplayServer(first) as a, ReplayServer(later) as b:
        agent = agent_on(ws, home, [a.url, b.url], notices)
        a_raw = a.raw  # a serves two requests, then goes away mid-session
        original = a._http.RequestHandlerClass.do_POST

        def then_gone(handler):  # type: ignore[no-untyped-def]
            if len(a.raw) >= 2:
                handler._json(503, {"error": {"message": "draining", "code": 503}})
                return
            original(handler)
        a._http.RequestHandlerClass = type("Draining", (a._http.RequestHandlerClass,), {"do_POST": then_gone})
        outcome = agent.run("look at a.txt")
        assert outcome.status == "done" and outcome.answer == "done"
        raws = [*a_raw, *b.raw]
    assert len(a_raw) == 2 and len(b.raw) == 2
    assert_append_only(raws)
    switches = [n for n in notices if "this session goes on at" in n]
    assert switches == [f"The model server at {a.url} is down (HTTP 503: draining); this session goes on at "
                        f"{b.url} (model.endpoints)."]
    events = [e for e in agent.ctx.session.log.load().events if isinstance(e, EndpointEvent)]
    assert [(e.previous, e.endpoint) for e in events] == [(a.url, b.url)]
    stored = SessionStore(home).open(agent.ctx.session.id).state.options
    assert stored["endpoint"] == b.url


def test_requests_only_append_through_a_long_session_on_one_endpoint(ws, home):
    (ws / "x.py").write_text("print(1)\n")
    turns = [Turn(calls=[("read", {"path": str(ws / "x.py")})]),
             Turn(calls=[("edit", {"path": str(ws / "x.py"), "old_string": "1", "new_string": "2"})]),
             Turn(calls=[("todo", {"items": [{"content": "check"}]})]), Turn(text="all done")]
    with ReplayServer(turns) as a, ReplayServer([]) as b:
        agent = agent_on(ws, home, [a.url, b.url], [])
        assert agent.run("change it").status == "done"
    assert len(a.raw) >= 4 and b.raw == []
    assert_append_only(a.raw[:4])


# -- settings -----------------------------------------------------------------------------------------

def test_settings_take_a_list_or_one_endpoint_and_refuse_both():
    env = {"ABHED_CONFIG": "", "ABHED_ENDPOINTS": "http://gpu1:8000/v1, http://gpu2:8000/v1/ http://gpu3:8000/v1"}
    assert config.load({}, env=env).model.servers() == ["http://gpu1:8000/v1", "http://gpu2:8000/v1",
                                                        "http://gpu3:8000/v1"]
    assert config.load({}, env={"ABHED_CONFIG": ""}).model.servers() == ["http://127.0.0.1:8000/v1"]
    with pytest.raises(config.ConfigError) as both:
        config.load({"model": {"endpoint": "http://gpu9:8000/v1"}}, env=env)
    assert ("model.endpoint (http://gpu9:8000/v1) and model.endpoints (http://gpu1:8000/v1, http://gpu2:8000/v1, "
            "http://gpu3:8000/v1) are both set: set one.") in str(both.value)
    with pytest.raises(config.ConfigError) as bad:
        config.load({"model": {"endpoints": ["gpu1:8000/v1"]}}, env={"ABHED_CONFIG": ""})
    assert "'gpu1:8000/v1' is not an http:// or https:// URL" in str(bad.value)
    with pytest.raises(config.ConfigError) as twice:
        config.load({"model": {"endpoints": ["http://a/v1", "http://a/v1/"]}}, env={"ABHED_CONFIG": ""})
    assert "an endpoint is listed twice" in str(twice.value)


def test_the_next_endpoint_is_the_one_after_in_the_list():
    pool = Pool(["A", "B", "C"])
    assert pool.next_up("B") == "C" and pool.next_up("C") == "A" and pool.next_up("A") == "B"
    pool.mark_down("C", "connection refused")
    assert pool.next_up("B") == "A"


def test_a_down_mark_lasts_down_s_when_the_server_did_not_say():
    fake = FakeTime()
    pool = Pool(["A", "B"], clock=fake.clock)
    pool.mark_down("A", "connection refused")
    assert pool.next_up("B") is None and pool.next_up("A") == "B"
    assert pool.soonest() == ("B", None)  # B was never marked: it comes first
    pool.mark_down("B", "HTTP 503", 3.0)
    assert pool.soonest() == ("B", 3.0)
    fake.now = 3.0
    assert not pool.is_down("B")  # its wait is over at its end
    fake.now = 0.0
    pool.mark_up("B")  # a request it answered
    assert not pool.is_down("B") and pool.next_up("A") == "B"
    fake.now = DOWN_S + 0.1
    assert pool.next_up("B") == "A"
    assert pool.summary() == "A: connection refused; B: not tried"  # B answered since


def test_doctor_asks_every_server_of_the_list():
    from abhed.cli.doctor import _replicas
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with ReplayServer([]) as up:
        up.waiting = 3
        settings = config.load({"model": {"endpoints": [up.url, dead]}}, env={"ABHED_CONFIG": ""})
        found = [(c.status, c.name, c.message) for c in _replicas(settings)]
    assert found == [("OK", "endpoint 1", f"{up.url} answers; 3 requests running or waiting"),
                     ("FAIL", "endpoint 2", f"{dead} does not answer (connection refused); sessions go to the other "
                                            "servers of model.endpoints")]
