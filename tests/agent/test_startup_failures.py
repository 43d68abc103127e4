"""Failures of the model server as a person meets them (issue 17, item 12): a wrong endpoint at
start-up is told once, at once; a drop mid-session is retried; a failed run's summary is its own."""

from __future__ import annotations

from abhed.model.replay import ReplayServer, Turn
from abhed.session.store import SessionStore
from agent_helpers import make_agent
from test_cli_agent import abhed


def test_a_wrong_endpoint_at_start_up_fails_with_one_message_and_no_retries(ws, home):
    proc = abhed("run", "hi", "--endpoint", "http://127.0.0.1:9/v1", "--workspace", str(ws), home=home)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("Cannot connect to the model server at http://127.0.0.1:9/v1") == 1
    assert "Retrying" not in proc.stderr and "tried" not in proc.stderr
    assert SessionStore(home).ids() == []


def test_a_host_that_drops_packets_at_start_up_is_given_up_on_after_the_short_connect_bound(ws, home, tmp_path,
                                                                                             silent_endpoint):
    proc = abhed("run", "hi", "--endpoint", silent_endpoint, "--workspace", str(ws), home=home)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count(f"No connection to the model server at {silent_endpoint} within 2 s "
                             "(model.startup_connect_s)") == 1  # the default: not the 10 s of later requests
    assert "Retrying" not in proc.stderr and "tried" not in proc.stderr
    config = tmp_path / "config.toml"
    config.write_text("[model]\nstartup_connect_s = 0.5\n")
    proc = abhed("chat", "--endpoint", silent_endpoint, "--workspace", str(ws), home=home,
                 env={"ABHED_CONFIG": str(config)})
    assert proc.returncode == 1 and proc.stderr.count("within 0.5 s (model.startup_connect_s)") == 1
    assert SessionStore(home).ids() == []


def test_a_server_that_drops_mid_session_is_still_retried(ws, home):
    with ReplayServer([Turn(fault="status:503"), Turn(text="Back again.")]) as server:
        proc = abhed("run", "hi", "--endpoint", server.url, "--workspace", str(ws), home=home)
    assert proc.returncode == 0 and proc.stdout == "Back again.\n"
    assert proc.stderr.count(f"abhed: Waiting for the model server at {server.url} (HTTP 503: replayed fault: HTTP "
                             "503): 0 s of 900 s (model.max_request_s); next try in 1 s.") == 1  # issue 33: waited


def test_a_server_still_loading_its_model_at_start_up_is_waited_for_and_each_wait_told(ws, home):
    """Issue 33, finding 7: 503 from /models is a server that is there and loading (a proxy before
    vLLM, which opens its port once loaded): `abhed run` waits, telling stderr, then runs. A refused
    connection is still told at once (the test above): that is how a wrong endpoint looks too."""
    with ReplayServer([Turn(text="Loaded and answering.")], loading=2) as server:
        proc = abhed("run", "hi", "--endpoint", server.url, "--workspace", str(ws), home=home)
    assert proc.returncode == 0 and proc.stdout == "Loaded and answering.\n"
    waits = [line for line in proc.stderr.splitlines() if "Waiting for the model server" in line]
    assert len(waits) == 2 and all(f"at {server.url} (HTTP 503: Service Unavailable: the model is loading)" in w
                                   and "of 900 s (model.max_request_s)" in w for w in waits)


def test_doctor_says_a_loading_server_is_not_serving_rather_than_wait(ws, home):
    with ReplayServer([Turn(text="unused")], loading=1000) as server:
        proc = abhed("doctor", "--endpoint", server.url, home=home)
    assert "is not serving (HTTP 503: Service Unavailable: the model is loading)" in proc.stdout + proc.stderr
    assert "Waiting" not in proc.stdout + proc.stderr and server.loading >= 998  # asked once or twice, not waited

def test_after_a_failure_the_summary_is_of_this_run_not_an_earlier_one(ws, home):
    (ws / "a.txt").write_text("a\n")
    turns = [Turn(calls=[("write", {"path": str(ws / "b.txt"), "content": "b\n"})]), Turn(text="Wrote b.txt."),
             Turn(fault="status:400")]
    with ReplayServer(turns) as server:
        agent = make_agent(ws, home, server)
        first = agent.run("write b.txt")
        second = agent.run("now something else")
    assert first.status == "done" and second.status == "failed"
    assert "Wrote b.txt." not in second.answer and "Last step" not in second.answer
    assert "Files changed" not in second.answer and second.changed == []
    assert second.answer.startswith("Stopped before finishing: the model server failed.")
