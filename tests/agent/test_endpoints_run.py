"""`abhed run` and `abhed resume` with model.endpoints (issue 37, item 5): the real command in processes of its
own against several replay servers on loopback; judged by which server got which request, the session's
record, and what stderr says."""

from __future__ import annotations

import json
import re
import socket

import pytest

from abhed.model.replay import ReplayServer, Turn
from abhed.session.store import SessionStore
from test_cli_agent import abhed


def free_port() -> int:
    with socket.socket() as sock:  # nothing listens there once it is closed
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def session_of(stderr: str) -> str:
    found = re.search(r"abhed: session ([0-9a-f]{32});", stderr)
    assert found, stderr
    return found.group(1)


@pytest.mark.slow  # three runs of the real command line
def test_a_session_keeps_its_replica_on_resume_and_moves_only_when_it_is_gone(ws, home):
    script = lambda body: Turn(text="answered")  # noqa: E731
    with ReplayServer(script) as a, ReplayServer(script) as b:
        env = {"ABHED_ENDPOINTS": f"{a.url},{b.url}"}
        b.waiting = 7  # b is busy: the new session takes a
        first = abhed("run", "hello", "--workspace", str(ws), "--json", home=home, env=env)
        assert first.returncode == 0, first.stderr
        session = json.loads(first.stdout)["session"]
        assert len(a.requests) == 1 and b.requests == [] and f"at {a.url};" in first.stderr
        assert SessionStore(home).open(session).state.options["endpoint"] == a.url

        a.waiting, b.waiting = 9, 0  # now a is the busier: the session still goes back to a (its prefix is cached there)
        again = abhed("resume", session, "go on", "--workspace", str(ws), home=home, env=env)
        assert again.returncode == 0, again.stderr
        assert len(a.requests) == 2 and b.requests == []
        assert a.raw[1].startswith(a.raw[0].partition(b'"messages":[')[0])  # the same request fields
        assert a.raw[1].partition(b'"messages":[')[2].startswith(a.raw[0].partition(b'"messages":[')[2][:-2] + b",")

        a.close()  # a is gone: the session is told and goes on at b, which it keeps from then on
        moved = abhed("resume", session, "and now?", "--workspace", str(ws), home=home, env=env)
    assert moved.returncode == 0, moved.stderr
    assert len(b.requests) == 1
    assert f"model server {a.url} does not answer (connection refused)" in moved.stderr
    assert SessionStore(home).open(session).state.options["endpoint"] == b.url


def test_run_names_every_endpoint_when_none_answers(ws, home):
    dead = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    proc = abhed("run", "hello", "--workspace", str(ws), home=home, env={"ABHED_ENDPOINTS": " ".join(dead)})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (f"No model server of model.endpoints answers ({dead[0]}: connection refused; {dead[1]}: connection "
            "refused).") in proc.stderr


def test_run_refuses_endpoint_and_endpoints_both_set(ws, home):
    proc = abhed("run", "hello", "--workspace", str(ws), home=home,
                 env={"ABHED_ENDPOINTS": "http://127.0.0.1:10/v1,http://127.0.0.1:11/v1",
                      "ABHED_ENDPOINT": "http://127.0.0.1:9/v1"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert ("model.endpoint (http://127.0.0.1:9/v1) and model.endpoints (http://127.0.0.1:10/v1, "
            "http://127.0.0.1:11/v1) are both set: set one.") in proc.stderr


def test_the_endpoint_flag_uses_that_one_server_for_the_command(home, monkeypatch):
    from abhed.cli import launch
    monkeypatch.setenv("ABHED_ENDPOINTS", "http://127.0.0.1:10/v1,http://127.0.0.1:11/v1")
    assert launch.settings().model.servers() == ["http://127.0.0.1:10/v1", "http://127.0.0.1:11/v1"]
    assert launch.settings(endpoint="http://127.0.0.1:9/v1").model.servers() == ["http://127.0.0.1:9/v1"]
