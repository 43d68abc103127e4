"""The loop against a real HTTP fake of vLLM: calls, results, adapters, malformed calls, guard, budgets."""

from __future__ import annotations

import json
import threading

import pytest

from abhed.agent.loop import Budget, Limits
from abhed.session.config import AgentConfig
from abhed.session.events import ActionEvent, MessageEvent, ObservationEvent, RunEvent
from abhed.model.replay import ReplayServer, Turn
from abhed.tools import BY_NAME
from agent_helpers import kinds, make_agent, tool_messages


def test_a_plain_answer_ends_the_run_and_is_recorded(ws, home):
    with ReplayServer([Turn(text="Nothing to do: the code is fine.")]) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("Is the code fine?")
    assert outcome.status == "done" and outcome.exit_code == 0 and outcome.answer == "Nothing to do: the code is fine."
    assert kinds(agent) == ["session", "run", "message:user", "message:assistant", "run"]  # from its creation on
    request = server.requests[0]
    assert request["messages"][0]["role"] == "system" and str(ws) in request["messages"][0]["content"]
    assert request["tool_choice"] == "auto" and {t["function"]["name"] for t in request["tools"]} >= {"plan", "todo"}
    assert request["max_tokens"] <= 4096 and request["temperature"] == 0.2  # the generic profile


def test_results_go_back_with_their_tool_call_id(ws, home):
    (ws / "a.py").write_text("print('a')\n")
    with ReplayServer([Turn(calls=[("read", {"path": str(ws / "a.py")})]), Turn(text="It prints a.")]) as server:
        agent = make_agent(ws, home, server)
        assert agent.run("What does a.py do?").answer == "It prints a."
    second = server.requests[1]["messages"]
    call = second[-2]["tool_calls"][0]
    assert second[-1] == {"role": "tool", "tool_call_id": call["id"], "content": "     1\tprint('a')"}
    action, observation = [e for e in agent.ctx.session.log.load().events if e.kind in ("action", "observation")]
    assert action.tool_call_id == call["id"] and observation.action_id == action.id


def test_project_notes_are_in_the_system_prompt(ws, home):
    (ws / "ABHED.md").write_text("Always run `make check` before answering.\n")
    with ReplayServer([Turn(text="ok")]) as server:
        make_agent(ws, home, server).run("hi")
    assert "Always run `make check` before answering." in server.requests[0]["messages"][0]["content"]


def test_read_only_calls_in_one_reply_run_in_parallel_and_results_keep_their_order(ws, home, monkeypatch):
    for name in "abc":
        (ws / name).write_text(f"{name}\n")
    barrier = threading.Barrier(3, timeout=30)  # only three reads running at once get past it
    real = BY_NAME["read"].run

    def meeting(args, ctx):  # type: ignore[no-untyped-def]
        barrier.wait()
        return real(args, ctx)

    monkeypatch.setattr(BY_NAME["read"], "run", meeting)
    turns = [Turn(calls=[("read", {"path": str(ws / n)}) for n in "abc"]), Turn(text="done")]
    with ReplayServer(turns) as server:
        make_agent(ws, home, server).run("read them")
    assert [m["content"] for m in tool_messages(server.requests[1])] == ["     1\ta", "     1\tb", "     1\tc"]


def test_malformed_calls_become_teaching_errors_and_the_loop_goes_on(ws, home):
    turns = [Turn(calls=[("read", '{"path": "' + str(ws) + '/a.py", '), ("raed", {"path": "/x"}),
                         ("read", {"path": 12}), ("glob", "")]),
             Turn(text="I give up.")]
    with ReplayServer(turns) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("go")
    assert outcome.status == "done"
    bad_json, unknown, invalid, empty = [m["content"] for m in tool_messages(server.requests[1])]
    assert "not valid JSON" in bad_json and "e.g." in bad_json
    assert "no tool named `raed`" in unknown and "Did you mean `read`" in unknown
    assert "`path`" in invalid and "a string" in invalid
    assert "`pattern` is required" in empty
    # history sent back stays acceptable to the server: arguments are always a JSON object
    for call in server.requests[1]["messages"][-5]["tool_calls"]:
        assert isinstance(json.loads(call["function"]["arguments"]), dict)


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_coder"])
def test_text_protocol_for_a_server_without_tool_parser(ws, home, fmt):
    (ws / "a.py").write_text("x = 1\n")
    turns = [Turn(text="Reading.", calls=[("read", {"path": str(ws / "a.py"), "limit": 5})]), Turn(text="x is 1.")]
    with ReplayServer(turns, tool_parser=False) as server:
        agent = make_agent(ws, home, server, tool_format=fmt)
        outcome = agent.run("what is x?")
    assert outcome.answer == "x is 1." and agent.display.tools == [("read", False)]
    first, second = server.requests
    assert "tools" not in first and "<tools>" in first["messages"][0]["content"]
    assert second["messages"][-1] == {"role": "user", "content": "<tool_response>\n     1\tx = 1\n</tool_response>"}
    assert "<tool_call>" in second["messages"][-2]["content"]  # the model's own words, markup included
    assert "".join(agent.display.texts) == "Reading.\nx is 1."  # the human never sees the markup


def test_auto_format_falls_back_to_the_profiles_text_protocol_when_the_server_refuses_tools(ws, home):
    turns = [Turn(calls=[("glob", {"pattern": "*.md"})]), Turn(text="No markdown files.")]
    with ReplayServer(turns, tool_parser=False, model_id="Qwen/Qwen3-Coder-30B-A3B-Instruct") as server:
        agent = make_agent(ws, home, server, profile=None)
        outcome = agent.run("any docs?")
    assert outcome.answer == "No markdown files." and agent.model.tool_format == "qwen3_coder"
    assert any("no tool-call parser" in n and "--tool-call-parser qwen3_coder" in n for n in agent.display.notices)
    assert "<function=" in server.requests[-1]["messages"][0]["content"]


def test_a_text_call_that_does_not_parse_is_answered_with_how_to_write_it(ws, home):
    turns = [Turn(text='<tool_call>{"name": "read", "arguments": {"path": }</tool_call>'), Turn(text="Sorry.")]
    with ReplayServer(turns, tool_parser=False) as server:
        agent = make_agent(ws, home, server, tool_format="hermes")
        agent.run("go")
    reply = server.requests[1]["messages"][-1]["content"]
    assert "The JSON in your <tool_call> block does not parse" in reply and "nothing was run" in reply
    action = next(e for e in agent.ctx.session.log.load().events if isinstance(e, ActionEvent))
    observation = next(e for e in agent.ctx.session.log.load().events if isinstance(e, ObservationEvent))
    assert action.tool == "read" and observation.metadata["error_kind"] == "malformed_call"


def test_the_loop_guard_hints_after_the_same_failing_call_three_times(ws, home):
    bad = ("read", {"path": str(ws / "missing.py")})
    turns = [Turn(calls=[bad]), Turn(calls=[bad]), Turn(calls=[bad]), Turn(text="It does not exist.")]
    with ReplayServer(turns) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("read missing.py")
    assert outcome.status == "done"
    assert "loop guard" not in json.dumps(server.requests[2]["messages"])
    last = server.requests[3]["messages"][-1]
    assert last["role"] == "user" and "made this exact read call 3 times" in last["content"]
    guard = [e for e in agent.ctx.session.log.load().events if isinstance(e, MessageEvent) and e.origin == "loop_guard"]
    assert len(guard) == 1


def test_the_turn_budget_stops_the_run_with_where_it_stopped(ws, home):
    looping = [Turn(text="Looking around.", calls=[("glob", {"pattern": f"*{i}"})]) for i in range(5)]
    with ReplayServer(looping) as server:
        agent = make_agent(ws, home, server, limits=Limits(turns=2))
        agent.ctx.session.state.todos = []
        outcome = agent.run("explore")
    assert outcome.status == "budget" and outcome.exit_code == 3 and len(server.requests) == 2
    assert "the turn budget is exhausted (2 of 2 model replies)" in outcome.answer
    assert "Last step: Looking around." in outcome.answer and f"abhed resume {agent.ctx.session.id}" in outcome.answer
    run_end = agent.ctx.session.log.load().events[-1]
    assert isinstance(run_end, RunEvent) and run_end.status == "budget"


def test_token_and_time_budgets(ws, home):
    with ReplayServer([Turn(calls=[("glob", {"pattern": "*"})])] * 3) as server:
        agent = make_agent(ws, home, server, limits=Limits(tokens=1000))
        assert "token budget is exhausted" in agent.run("go").answer
    now = [0.0]
    budget = Budget(Limits(seconds=10), clock=lambda: now[0])
    now[0] = 10.5
    assert budget.exhausted() == "the time budget is exhausted (10 of 10 seconds)"  # 10.5 shown rounded


def test_budgets_are_hierarchical():
    parent = Budget(Limits(turns=5))
    child = parent.child(Limits(turns=10))
    child.charge(turns=5, tokens=100)
    assert parent.turns == 5 and parent.tokens == 100
    assert child.exhausted() == "the turn budget is exhausted (5 of 5 model replies)"


def test_spawned_subagents_run_the_same_loop_with_a_fresh_context_and_charge_the_parent(ws, home):
    with ReplayServer([Turn(text="Parent answer."), Turn(text="Child answer.")]) as server:
        agent = make_agent(ws, home, server)
        agent.run("parent task")
        outcome = agent.spawn("child task", max_turns=3)
    assert outcome.answer == "Child answer." and agent.budget.turns == 2
    child_request = server.requests[1]["messages"]
    assert [m["role"] for m in child_request] == ["system", "user"] and child_request[1]["content"] == "child task"
    child_events = [e for e in agent.ctx.session.log.load().events if e.agent_id == "main.1"]
    assert child_events and all(e.parent_id == "main" for e in child_events)


def test_a_failing_model_server_ends_the_run_as_failed(ws, home):
    with ReplayServer([Turn(fault="status:401")]) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("go")
    assert outcome.status == "failed" and outcome.exit_code == 1 and "API key" in outcome.detail


def test_transient_faults_mid_run_are_retried_and_announced(ws, home):
    turns = [Turn(fault="cut"), Turn(fault="error_event"), Turn(text="Fine now.")]
    with ReplayServer(turns) as server:
        agent = make_agent(ws, home, server)
        assert agent.run("go").answer == "Fine now."
    assert len(agent.display.notices) == 2 and "Retrying" in agent.display.notices[0]


def test_empty_replies_are_nudged_then_given_up(ws, home):
    with ReplayServer([Turn(text=""), Turn(text="Here it is.")]) as server:
        agent = make_agent(ws, home, server)
        assert agent.run("go").answer == "Here it is."
    assert "your reply was empty" in server.requests[1]["messages"][-1]["content"]
    with ReplayServer([Turn(text="")] * 3) as server:
        outcome = make_agent(ws, home, server).run("go")
    assert outcome.status == "failed" and "3 empty replies" in outcome.detail


def test_a_reply_cut_at_the_output_limit_is_explained(ws, home):
    turns = [Turn(calls=[("write", '{"path": "' + str(ws / "big.py") + '", "content": "abc')], finish_reason="length"),
             Turn(text="ok")]
    with ReplayServer(turns) as server:
        make_agent(ws, home, server).run("write it")
    last = server.requests[1]["messages"][-1]
    assert last["role"] == "user" and "cut off at the output limit" in last["content"]


def test_todo_updates_are_shown_live(ws, home):
    turns = [Turn(calls=[("todo", {"items": [{"content": "A", "status": "in_progress"}]})]), Turn(text="ok")]
    with ReplayServer(turns) as server:
        agent = make_agent(ws, home, server)
        agent.run("go")
    assert agent.display.todo_updates == 1


def test_plan_mode_refusals_reach_the_model_as_instructions(ws, home):
    turns = [Turn(calls=[("write", {"path": str(ws / "x.py"), "content": "x"})]), Turn(text="I may not write.")]
    with ReplayServer(turns) as server:
        make_agent(ws, home, server, mode="plan").run("write x")
    refusal = tool_messages(server.requests[1])[0]["content"]
    assert refusal.startswith("Not run: write was refused (plan mode allows read-only tools only)")
    assert not (ws / "x.py").exists()


def test_a_non_streaming_server_works_too(ws, home):
    with ReplayServer([Turn(calls=[("glob", {"pattern": "*"})]), Turn(text="empty dir")]) as server:
        agent = make_agent(ws, home, server)
        agent.model.stream = False
        assert agent.run("list").answer == "empty dir"
    assert server.requests[0]["stream"] is False


def test_config_budget_defaults_are_sane():
    assert AgentConfig().max_turns == 150 and AgentConfig().compact_at == 0.8


def test_agents_md_is_read_as_well_as_abhed_md_each_under_its_name(ws, home):
    (ws / "ABHED.md").write_text("Always run `make check` before answering.\n")
    (ws / "AGENTS.md").write_text("Use tabs in Go files.\n")
    with ReplayServer([Turn(text="ok"), Turn(text="ok")]) as server:
        make_agent(ws, home, server).run("hi")
        (ws / "ABHED.md").unlink()
        make_agent(ws, home, server).run("hi")
    both, only = (r["messages"][0]["content"] for r in server.requests)
    assert "## ABHED.md\nAlways run `make check` before answering.\n\n## AGENTS.md\nUse tabs in Go files." in both
    assert "## AGENTS.md\nUse tabs in Go files." in only and "ABHED.md" not in only
