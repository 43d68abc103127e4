"""Chat's /model (cli/modelswitch.py, Agent.use_model) and /init's request (cli/initcmd.py)."""

from __future__ import annotations

from abhed.cli import initcmd, modelswitch
from abhed.model.errors import ModelError
from abhed.model.replay import ReplayServer, Turn
from agent_helpers import Recorder, make_agent


def test_model_lists_the_served_models_and_a_switch_changes_the_next_request_and_its_window(ws, home):
    with ReplayServer([Turn(text="one"), Turn(text="two")], also_serves=["replay/small"]) as server:
        agent = make_agent(ws, home, server)
        agent.run("hi")
        assert modelswitch.listing(agent) == ["* replay/abhed-demo  (context 32768 tokens)",
                                              "  replay/small  (context 32768 tokens)",
                                              "[* in use; switch with /model ID, for this chat]"]
        old = agent.model.client
        lines = modelswitch.switch(agent, "replay/small", Recorder())
        assert lines[0].startswith("now using model replay/small at ") and "profile generic" in lines[0]
        assert lines[1] == "no conformance report saved for profile generic (abhed conformance --save checks it)"
        assert old is not agent.model.client
        agent.run("again")
    assert [r["model"] for r in server.requests] == ["replay/abhed-demo", "replay/small"]


def test_a_model_the_server_does_not_serve_leaves_the_one_in_use(ws, home):
    with ReplayServer([Turn(text="ok")]) as server:
        agent = make_agent(ws, home, server)
        lines = modelswitch.switch(agent, "nope", Recorder())
        agent.run("hi")
    assert "does not serve 'nope'; it serves: replay/abhed-demo" in lines[0]
    assert lines[0].endswith("The model in use is still replay/abhed-demo.")
    assert server.requests[-1]["model"] == "replay/abhed-demo"


def test_a_listing_that_fails_says_so(ws, home, monkeypatch):
    with ReplayServer([]) as server:
        agent = make_agent(ws, home, server)

    def down(**_):  # type: ignore[no-untyped-def]
        raise ModelError("Cannot connect to the model server (connection refused).")
    monkeypatch.setattr(agent.model.client, "models", down)
    assert modelswitch.listing(agent) == ["/model: could not list the models: Cannot connect to the model server "
                                          "(connection refused)."]


def test_init_writes_a_first_agents_md_through_the_model_and_refuses_to_replace_one(ws):
    prompt, refusal = initcmd.request(ws, "")
    assert refusal is None and f"write a first AGENTS.md for it, at {ws}/AGENTS.md, with the write tool" in prompt
    assert initcmd.request(ws, "improve") == (None, f"there is no {ws}/AGENTS.md to improve yet: /init writes a first one")
    (ws / "AGENTS.md").write_text("old\n")
    prompt, refusal = initcmd.request(ws, "")
    assert prompt is None and refusal.startswith(f"{ws}/AGENTS.md exists already, so /init changed nothing.")
    prompt, refusal = initcmd.request(ws, "improve")
    assert refusal is None and prompt.startswith(f"Read {ws}/AGENTS.md and check it")
    assert initcmd.request(ws, "now please")[1] == ("use /init (write a first AGENTS.md) or /init improve (review the "
                                                    "existing one)")
