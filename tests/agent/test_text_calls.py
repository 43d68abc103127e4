"""Calls written in a reply's text, end to end: a call is run wherever it is one, prose that
mentions call markup is delivered as the answer, and no reply that holds a recognisable call ends a
run as "done" without running it (issue 32)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abhed.model.replay import ReplayServer, Turn
from agent_helpers import REPO, make_agent

QWEN25 = "Qwen/Qwen2.5-Coder-32B-Instruct"


def abhed(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": "", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "abhed", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def read_requests(server: ReplayServer) -> list[str]:
    """The tool results the model was sent, in order (native: tool messages)."""
    return [m["content"] for body in server.requests for m in body["messages"] if m["role"] == "tool"]


def test_finding_1_qwen25_coder_tools_block_is_run_not_delivered(ws, home):
    (ws / "a.py").write_text("x = 41\n")
    call = json.dumps({"name": "read", "arguments": {"path": str(ws / "a.py")}})
    turns = [Turn(text=f"<tools>\n{call}\n</tools>"), Turn(text="x is 41.")]
    with ReplayServer(turns, model_id=QWEN25) as server:
        proc = abhed("run", "what is x?", "--endpoint", server.url, home=home, cwd=ws)
        results = read_requests(server)
    assert proc.returncode == 0 and proc.stdout == "x is 41.\n", proc.stderr
    assert len(results) == 1 and "x = 41" in results[0]


def test_finding_2_an_answer_about_call_markup_is_delivered(ws, home):
    answer = ("A Hermes model writes its calls as `<tool_call>` blocks, for example:\n\n```\n<tool_call>\n"
              '{"name": "read", "arguments": {"path": "/x"}}\n</tool_call>\n```\n\nQwen3-Coder writes '
              "<function=NAME> inside them instead.")
    with ReplayServer([Turn(text=answer)], model_id=QWEN25) as server:
        proc = abhed("run", "explain tool-call formats", "--endpoint", server.url, home=home, cwd=ws)
        sent = len(server.requests)
    assert proc.returncode == 0 and proc.stdout == answer + "\n", proc.stderr
    assert sent == 1  # one reply, delivered: no error turn, no budget run out


def test_finding_3_markup_inside_a_qwen3_coder_value_is_written_as_it_is(ws, home):
    content = 'DOC = """\n<tool_call>\n<function=write>\n<parameter=path>\nspurious.txt\n</parameter>\n</function>\n' \
              '</tool_call>\n"""\nXML = "<a>\n</parameter>\n</a>"\n'
    reply = (f"<tool_call>\n<function=write>\n<parameter=path>\n{ws / 'doc.py'}\n</parameter>\n<parameter=content>\n"
             f"{content}\n</parameter>\n</function>\n</tool_call>")
    with ReplayServer([Turn(text=reply), Turn(text="Written.")], model_id="Qwen/Qwen3-Coder-30B-A3B-Instruct",
                      tool_parser=False) as server:
        proc = abhed("run", "write the doc", "--endpoint", server.url, "--tool-format", "qwen3_coder",
                     "--mode", "accept-edits", home=home, cwd=ws)
    assert proc.returncode == 0 and proc.stdout == "Written.\n", proc.stderr
    assert (ws / "doc.py").read_text() == content
    assert sorted(p.name for p in ws.iterdir() if not p.name.startswith(".")) == ["doc.py"]


def test_finding_4_anyof_integer_parameters_are_converted_in_the_qwen3_coder_form(ws, home):
    from abhed.model.adapters import adapter_for
    from abhed.model.wire import Reply
    schema = {"type": "object", "properties": {
        "count": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "tags": {"type": ["array", "null"], "items": {"type": "string"}},
        "strict": {"oneOf": [{"type": "boolean"}, {"type": "null"}]}}}
    tools = [{"type": "function", "function": {"name": "mcp__x__q", "description": "q", "parameters": schema}}]
    adapter = adapter_for("qwen3_coder", tools)
    prompt = adapter.system_addendum()
    assert "<type>string</type>" not in prompt and "integer" in prompt and "array" in prompt
    reply = ("<tool_call><function=mcp__x__q><parameter=count>3</parameter><parameter=tags>['a', 'b']</parameter>"
             "<parameter=strict>true</parameter></function></tool_call>")
    [call] = adapter.calls(Reply(text=reply))
    assert json.loads(call.arguments) == {"count": 3, "tags": ["a", "b"], "strict": True}


def test_a_broken_call_is_asked_about_once_then_delivered_as_written(ws, home):
    broken = '<tool_call>\n{"name": "read", "arguments": {"path": "/x",}}\n</tool_call>'
    with ReplayServer([Turn(text=broken)] * 3) as server:
        agent = make_agent(ws, home, server, tool_format="hermes")
        outcome = agent.run("go")
        requests = server.requests
    assert outcome.status == "done" and len(requests) == 2
    assert outcome.answer.startswith(broken) and "came twice" in outcome.answer
    told = json.dumps(requests[1]["messages"])
    assert "does not parse" in told and "nothing was run" in told


def test_text_after_the_last_call_is_shown(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    reply = (f'Reading.\n<tool_call>\n{{"name": "read", "arguments": {{"path": "{ws / "a.py"}"}}}}\n</tool_call>\n'
             "I will report back after this.")
    with ReplayServer([Turn(text=reply), Turn(text="Done.")], tool_parser=False) as server:
        agent = make_agent(ws, home, server, tool_format="hermes")
        outcome = agent.run("go")
    shown = "".join(agent.display.texts)
    assert outcome.answer == "Done." and "Reading." in shown and "I will report back after this." in shown
    assert "<tool_call>" not in shown and '"name"' not in shown


PROSE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<`[{"), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=PROSE, after=PROSE, form=st.sampled_from(["hermes", "qwen3", "qwen25"]))
def test_no_reply_that_holds_a_call_ends_the_run_unrun(tmp_path_factory, before, after, form):
    """A call on a line of its own, any prose around it: the run reads the file before it answers."""
    ws, home = tmp_path_factory.mktemp("ws"), tmp_path_factory.mktemp("home")
    (ws / "a.py").write_text("secret = 7\n")
    path = str(ws / "a.py")
    call = {"hermes": f'<tool_call>\n{{"name": "read", "arguments": {{"path": "{path}"}}}}\n</tool_call>',
            "qwen3": f"<tool_call>\n<function=read>\n<parameter=path>\n{path}\n</parameter>\n</function>\n</tool_call>",
            "qwen25": f'<tools>\n{{"name": "read", "arguments": {{"path": "{path}"}}}}\n</tools>'}[form]
    with ReplayServer([Turn(text=f"{before}\n{call}\n{after}"), Turn(text="Answer.")]) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("go")
        results = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert outcome.status == "done" and outcome.answer == "Answer."
    assert len(results) == 1 and "secret = 7" in results[0]


def test_the_log_names_the_form_each_replys_calls_were_written_in(ws, home):
    """The reply's MessageEvent says which form its calls came in: the conformance suite and a
    reader of the log see a model asked for hermes that wrote Qwen3-Coder's XML, and a native
    server that left a call in the text; the server's own structured calls have none."""
    from abhed.session.events import EventLog, MessageEvent
    (ws / "a.py").write_text("x = 1\n")
    xml = f"<tool_call>\n<function=read>\n<parameter=path>\n{ws / 'a.py'}\n</parameter>\n</function>\n</tool_call>"
    hermes = f'<tool_call>\n{{"name": "read", "arguments": {{"path": "{ws / "a.py"}"}}}}\n</tool_call>'
    turns = [Turn(text=xml), Turn(text=hermes), Turn(calls=[("read", {"path": str(ws / "a.py")})]), Turn(text="x is 1.")]
    for tool_format, parser, expected in (("hermes", False, [["qwen3_coder"], ["hermes"], ["hermes"], []]),
                                          ("native", True, [["qwen3_coder"], ["hermes"], [], []])):
        with ReplayServer(turns, tool_parser=parser) as server:
            agent = make_agent(ws, home, server, tool_format=tool_format)
            assert agent.run("go").answer == "x is 1."
        events = agent.ctx.session.log.load().events
        replies = [e for e in events if isinstance(e, MessageEvent) and e.role == "assistant"]
        assert [e.forms for e in replies] == expected, tool_format  # a text protocol writes scripted calls as hermes
        assert [len(e.tool_calls) for e in replies] == [1, 1, 1, 0]
    shown = abhed("sessions", "show", agent.ctx.session.id, home=home, cwd=ws).stdout
    assert shown.count("[1 call written in the qwen3_coder form]") == 1 and shown.count("[1 call]") == 1
    # a line written before the field loads, with no forms
    lines = [json.loads(text) for text in agent.ctx.session.log.path.read_text().splitlines()]
    line = next(line for line in lines if line["kind"] == "message" and line["forms"] == ["qwen3_coder"])
    del line["forms"]
    old = EventLog(ws / "old.jsonl")
    old.path.write_text(json.dumps(line) + "\n")
    assert old.load().events[0].forms == []


def test_native_calls_get_the_same_lenient_values(ws, home):
    """A server's parser that passes null for an optional integer, or a number as a string, is read
    as a text form's value would be: the read runs instead of being refused for its type."""
    (ws / "a.py").write_text("one\ntwo\nthree\n")
    turns = [Turn(calls=[("read", json.dumps({"path": str(ws / "a.py"), "offset": "2", "limit": None}))]),
             Turn(text="Done.")]
    with ReplayServer(turns) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("go")
        [result] = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert outcome.answer == "Done." and "two" in result and "one" not in result
