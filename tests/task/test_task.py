"""The task tool against a real-HTTP fake vLLM: profiles, fresh context, the refusal of prompts that
are not self-contained, bounded summaries, parallel subagents and their cap, the hierarchical
budget, nesting, and the events of subagents in the session's log."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from abhed.agent.loop import Budget, Limits
from abhed.session.config import AgentConfig
from abhed.session.events import MessageEvent, RunEvent
from abhed.model.replay import ReplayServer, Turn
from abhed.tools import BY_NAME
from abhed.tools.task import PROFILES, SUMMARY_CHARS, summary
from abhed_testing import abhed
from subagent_helpers import Script, make_agent, results, task

PROMPT = "List the Python files under {ws} and report their absolute paths."


def answer(text: str):  # type: ignore[no-untyped-def]
    return lambda seen: Turn(text=text)


def parent(*calls, final: str = "All done."):  # type: ignore[no-untyped-def]
    """The top-level agent: makes `calls` in one reply, then answers."""
    return lambda seen: Turn(calls=list(calls)) if seen.step == 0 else Turn(text=final)


@pytest.mark.parametrize("profile,tools", [
    ("explore", ["glob", "grep", "read"]),
    ("test", ["bash", "glob", "grep", "read"]),
    ("review", ["glob", "grep", "plan", "read", "todo"]),
    ("general", ["bash", "edit", "glob", "grep", "plan", "read", "todo", "write"]),
])
def test_each_profile_gives_its_tools_and_role_and_a_fresh_context(ws, home, profile, tools):
    prompt = PROMPT.format(ws=ws)
    script = Script({"top task": parent(task(prompt, "List Python files", agent_type=profile)),
                     "List the Python": answer("There are none.")})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("top task")
    assert outcome.status == "done"
    [child] = script.of("List the Python")
    assert child.tools == tools
    assert [m["role"] for m in child.body["messages"]] == ["system", "user"]  # none of the parent's turns
    assert child.prompt == prompt and "top task" not in json.dumps(child.body["messages"])
    assert f"Subagent profile: {profile}." in child.system and "You are a subagent" in child.system
    [result] = results(agent)
    assert not result.is_error and result.content.startswith(f'Subagent main.1 ({profile}, "List Python files") '
                                                             "finished (1 replies, 0 tool calls).")
    assert result.content.endswith("\n\nThere are none.") and result.metadata["agent_id"] == "main.1"


def test_the_default_profile_is_general_and_the_project_notes_reach_the_subagent(ws, home):
    (ws / "ABHED.md").write_text("Run the tests with make check.\n")
    script = Script({"top task": parent(task(PROMPT.format(ws=ws))), "List the Python": answer("None.")})
    with ReplayServer(script) as server:
        make_agent(ws, home, server).run("top task")
    [child] = script.of("List the Python")
    assert "Subagent profile: general." in child.system and "Run the tests with make check." in child.system


def test_an_unknown_profile_is_refused_with_the_list_and_nothing_starts(ws, home):
    script = Script({"top task": parent(task(PROMPT.format(ws=ws), agent_type="coder"))})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        agent.run("top task")
    [result] = results(agent)
    assert result.is_error and "agent_type 'coder' is not a subagent profile; nothing was started" in result.content
    assert all(name in result.content for name in PROFILES)
    assert len(script.seen) == 2  # the parent's two replies: no subagent asked the model anything


def test_a_prompt_that_is_not_self_contained_is_refused_with_guidance(ws, home):
    script = Script({"top task": parent(task("Fix the bug in the file we discussed.", "Fix the bug"))})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        agent.run("top task")
    [result] = results(agent)
    assert result.is_error and result.metadata["reason"] == "not_self_contained"
    assert '"the file we discussed"' in result.content and "Restate the task so it stands alone" in result.content
    assert len(script.seen) == 2


@pytest.mark.parametrize("args,fact", [
    ({"prompt": "  ", "description": "Nothing"}, "`prompt` is empty; nothing was started"),
    ({"prompt": "List the files under /tmp.", "description": ""}, "`description` is a 3-5 word label"),
    ({"prompt": "List the files under /tmp.", "description": "List every file under the temporary directory "
      "and report each one with its size"}, "this one has 14 words"),
])
def test_empty_prompts_and_descriptions_that_are_not_labels_are_refused(ws, home, args, fact):
    script = Script({"top task": parent(("task", args))})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        agent.run("top task")
    [result] = results(agent)
    assert result.is_error and fact in result.content


def test_outside_an_agent_task_says_it_needs_one(ws, home):
    proc = abhed("tool", "task", json.dumps({"prompt": "List the files under /tmp.", "description": "List files"}),
                 "--workspace", str(ws), env={"ABHED_HOME": str(home)})
    assert proc.returncode == 0
    assert "task starts a subagent, which needs a running agent (abhed run or abhed chat)" in proc.stdout


def test_a_long_report_is_cut_to_about_2000_tokens_with_a_note(ws, home):
    long = "".join(f"finding {n}: {'x' * 80}\n" for n in range(300))  # about 28 000 characters
    script = Script({"top task": parent(task(PROMPT.format(ws=ws))), "List the Python": answer(long)})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        agent.run("top task")
    [result] = results(agent)
    assert not result.is_error and result.metadata["summary_cut"] is True
    assert len(result.content) < SUMMARY_CHARS + 600
    assert "finding 0:" in result.content and "finding 299:" in result.content  # head and tail kept
    assert f"the subagent's report was {len(long.strip())} characters" in result.content
    assert "near 2000 tokens" in result.content


def test_summary_keeps_short_reports_whole():
    assert summary("short") == ("short", False)
    text, cut = summary("a" * 100, limit=50)
    assert cut and text.startswith("a" * 25) and "50 were cut from the middle" in text


def reads_file(path: str, then: str):  # type: ignore[no-untyped-def]
    def handler(seen):  # type: ignore[no-untyped-def]
        return Turn(calls=[("read", {"path": path})]) if seen.step == 0 else Turn(text=then)
    return handler


def test_task_calls_of_one_reply_run_side_by_side_and_results_keep_their_order(ws, home, monkeypatch):
    for name in "abc":
        (ws / f"{name}.txt").write_text(name + "\n")
    barrier = threading.Barrier(3, timeout=60)  # only three subagents reading at once get past it
    real = BY_NAME["read"].run

    def meeting(args, ctx):  # type: ignore[no-untyped-def]
        barrier.wait()
        return real(args, ctx)

    monkeypatch.setattr(BY_NAME["read"], "run", meeting)
    calls = [task(f"Read {ws}/{n}.txt and report its content.", f"Read {n}") for n in "abc"]
    handlers = {f"{ws}/{n}.txt": reads_file(str(ws / f"{n}.txt"), f"It says {n}.") for n in "abc"}
    script = Script({"top task": parent(*calls), **handlers})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        assert agent.run("top task").status == "done"
    reports = [r.content.rsplit("\n", 1)[-1] for r in results(agent)]
    assert sorted(reports) == ["It says a.", "It says b.", "It says c."]
    task_results = [m["content"] for m in script.of("top task")[-1].body["messages"] if m["role"] == "tool"]
    assert [r.rsplit("\n", 1)[-1] for r in task_results] == ["It says a.", "It says b.", "It says c."]


def test_no_more_than_max_parallel_subagents_run_at_once(ws, home, monkeypatch):
    for name in "abcde":
        (ws / f"{name}.txt").write_text(name + "\n")
    running, peak, lock = [0], [0], threading.Lock()
    real = BY_NAME["read"].run

    def counted(args, ctx):  # type: ignore[no-untyped-def]
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            return real(args, ctx)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(BY_NAME["read"], "run", counted)
    calls = [task(f"Read {ws}/{n}.txt and report its content.", f"Read {n}") for n in "abcde"]
    handlers = {f"{ws}/{n}.txt": reads_file(str(ws / f"{n}.txt"), f"It says {n}.") for n in "abcde"}
    with ReplayServer(Script({"top task": parent(*calls), **handlers})) as server:
        agent = make_agent(ws, home, server, agent_config=AgentConfig(max_parallel_subagents=2))
        agent.run("top task")
    assert peak[0] <= 2 and len(results(agent)) == 5 and not any(r.is_error for r in results(agent))


def looping(seen):  # type: ignore[no-untyped-def]
    return Turn(text="Still looking.", calls=[("glob", {"pattern": f"*{seen.step}"})])


def meet_once(monkeypatch, parties: int) -> None:  # type: ignore[no-untyped-def]
    """Each subagent's first glob waits for the others': all of them are running before any goes on."""
    barrier, met, real = threading.Barrier(parties, timeout=60), set(), BY_NAME["glob"].run

    def meeting(args, ctx):  # type: ignore[no-untyped-def]
        if id(ctx.session) not in met:
            met.add(id(ctx.session))
            barrier.wait()
        return real(args, ctx)

    monkeypatch.setattr(BY_NAME["glob"], "run", meeting)


def test_when_the_parents_budget_runs_out_running_subagents_stop_and_spawns_fail_cleanly(ws, home, monkeypatch):
    meet_once(monkeypatch, 2)
    calls = [task(f"Search {ws} for config files, round {n}, and report them.", f"Search round {n}")
             for n in range(3)]
    script = Script({"top task": parent(*calls), "config files": looping})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server, limits=Limits(turns=7),
                           agent_config=AgentConfig(max_parallel_subagents=2))
        outcome = agent.run("top task")
    assert outcome.status == "budget" and agent.budget.turns == 7  # the parent's reply and six of its subagents'
    first, second, third = results(agent)  # the first two ran side by side; the third waited for a free place
    for stopped in (first, second):
        assert stopped.is_error and stopped.content.startswith("Budget limit reached: the turn budget is exhausted "
                                                               "(7 of 7 model replies); Subagent main.")
        assert "was stopped" in stopped.content and "What it reported before it stopped:" in stopped.content
        assert stopped.metadata["status"] == "budget"
    assert third.is_error and third.content == (
        "Budget limit reached: the turn budget is exhausted (7 of 7 model replies). No subagent was started. Finish "
        "with what you know, or stop and tell the user what is left.")
    assert "main.3" not in {e.agent_id for e in agent.ctx.session.log.load().events}


def test_a_subagent_stopped_by_its_own_max_turns_says_so(ws, home):
    script = Script({"top task": parent(task(f"Search {ws} for config files and report them.", "Find configs",
                                             max_turns=2)),
                     "config files": looping})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("top task")
    assert outcome.status == "done" and len(script.of("config files")) == 2
    [result] = results(agent)
    assert result.is_error and "stopped at its own limit of 2 replies before finishing" in result.content
    assert "Call task again with a larger max_turns" in result.content and "Last step: Still looking." in result.content
    assert "abhed resume" not in result.content  # a subagent is not resumed on its own


def test_subagent_spend_counts_against_the_parent_token_budget(ws, home):
    script = Script({"top task": parent(task(f"Search {ws} for config files and report them.", "Find configs")),
                     "config files": looping})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server, limits=Limits(tokens=20_000))
        outcome = agent.run("top task")
    assert outcome.status == "budget" and "token budget is exhausted" in outcome.detail
    [result] = results(agent)
    assert result.content.startswith("Budget limit reached: the token budget is exhausted")
    assert agent.budget.tokens >= 20_000 and agent.budget.turns == 1 + result.metadata["turns"]


def test_budget_stop_reaches_every_budget_below():
    top = Budget(Limits(turns=100))
    group = top.child(Limits())
    child = group.child(Limits(turns=5))
    assert child.exhausted() is None
    group.stop("interrupted")
    assert child.exhausted() == "interrupted" and top.exhausted() is None


def test_interrupting_the_parent_stops_its_subagents_before_it_returns(ws, home, monkeypatch):
    real = BY_NAME["grep"].run

    def interrupting(args, ctx):  # type: ignore[no-untyped-def]
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: Linux hands it to the main thread, the parent's
        return real(args, ctx)

    monkeypatch.setattr(BY_NAME["grep"], "run", interrupting)
    script = Script({"top task": parent(task(f"Grep {ws} for TODO and report.", "Grep TODOs"),
                                        task(f"Search {ws} for config files and report them.", "Find configs")),
                     "Grep": lambda seen: Turn(calls=[("grep", {"pattern": "TODO"})]),
                     "config files": looping})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("top task")
    monkeypatch.setattr(BY_NAME["grep"], "run", real)
    assert outcome.status == "interrupted"
    runs = {e.agent_id: e for e in agent.ctx.session.log.load().events if isinstance(e, RunEvent)
            and e.status != "started"}
    for child in ("main.1", "main.2"):  # both had stopped by the time run() returned
        assert runs[child].status == "budget"
        assert "the agent that started this subagent was interrupted" in runs[child].detail


def test_subagents_cannot_start_subagents_by_default(ws, home):
    inner = task(f"Read {ws}/a.txt and report it.", "Read a")
    script = Script({"top task": parent(task(f"Delegate: list the files under {ws}.", "Delegate")),
                     "Delegate": lambda seen: Turn(calls=[inner]) if seen.step == 0 else Turn(text="Could not.")})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        agent.run("top task")
    child = script.of("Delegate")[-1]
    assert "task" not in child.tools
    refusal = [m["content"] for m in child.body["messages"] if m["role"] == "tool"][0]
    assert refusal.startswith("`task` is not available to a subagent: subagents cannot start subagents of their own "
                              "(agent.max_subagent_depth is 1).")


def test_nesting_is_allowed_when_the_operator_raises_the_depth(ws, home):
    (ws / "a.txt").write_text("alpha\n")
    inner = task(f"Read {ws}/a.txt and report its content.", "Read a", agent_type="explore")
    script = Script({"top task": parent(task(f"Delegate: report what {ws}/a.txt says.", "Delegate")),
                     "Delegate": lambda seen: Turn(calls=[inner]) if seen.step == 0 else Turn(text="It says alpha."),
                     "Read /": reads_file(str(ws / "a.txt"), "alpha")})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server, agent_config=AgentConfig(max_subagent_depth=2))
        agent.run("top task")
    assert "task" in script.of("Delegate")[0].tools and "task" not in script.of("Read /")[0].tools
    grandchild = {e.agent_id: e.parent_id for e in agent.ctx.session.log.load().events}
    assert grandchild["main.1.1"] == "main.1" and grandchild["main.1"] == "main"


def test_a_subagent_has_a_read_set_of_its_own(ws, home):
    target = ws / "notes.txt"
    target.write_text("one\n")
    edit = ("edit", {"path": str(target), "old_string": "one", "new_string": "two"})
    script = Script({"top task": lambda seen: (Turn(calls=[("read", {"path": str(target)})]) if seen.step == 0 else
                                               Turn(calls=[task(f"In {target} replace one by two.", "Edit notes")])
                                               if seen.step == 1 else Turn(text="ok")),
                     "replace one": lambda seen: Turn(calls=[edit]) if seen.step == 0 else Turn(text="Refused.")})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        agent.run("top task")
    [refused] = results(agent, "edit")
    assert refused.is_error and "You have not read" in refused.content and target.read_text() == "one\n"
    assert str(target) in agent.ctx.session.state.reads  # the parent's read is still its own


def writer(path: str, content: str):  # type: ignore[no-untyped-def]
    def handler(seen):  # type: ignore[no-untyped-def]
        if seen.step == 0:
            return Turn(calls=[("read", {"path": path})])
        if seen.step == 1:
            return Turn(calls=[("write", {"path": path, "content": content})])
        return Turn(text=f"write said: {seen.results[-1]}")
    return handler


def test_parallel_subagents_writing_one_file_cannot_silently_overwrite_each_other(ws, home, monkeypatch):
    target = ws / "shared.txt"
    target.write_text("original\n")
    barrier = threading.Barrier(2, timeout=60)  # both read the original before either writes
    real = BY_NAME["read"].run

    def together(args, ctx):  # type: ignore[no-untyped-def]
        result = real(args, ctx)
        barrier.wait()
        return result

    monkeypatch.setattr(BY_NAME["read"], "run", together)
    calls = [task(f"Write version {v} into {target}.", f"Write version {v}") for v in "AB"]
    script = Script({"top task": parent(*calls), "version A": writer(str(target), "version A\n"),
                     "version B": writer(str(target), "version B\n")})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        agent.run("top task")
    writes = results(agent, "write")
    assert sorted(w.is_error for w in writes) == [False, True]
    won, lost = sorted(writes, key=lambda w: w.is_error)
    assert won.content.startswith(f"Overwrote {target}")
    assert f"{target} changed on disk since you read it" in lost.content and "Read it again" in lost.content
    actions = {e.id: e for e in agent.ctx.session.log.load().events if e.kind == "action"}
    assert target.read_text() == actions[won.action_id].input["content"]  # the winner's, and only it


def editor(path: str, old: str, new: str):  # type: ignore[no-untyped-def]
    def handler(seen):  # type: ignore[no-untyped-def]
        if seen.step == 0:
            return Turn(calls=[("read", {"path": path})])
        if seen.step == 1:
            return Turn(calls=[("edit", {"path": path, "old_string": old, "new_string": new})])
        return Turn(text=f"edit said: {seen.results[-1]}")
    return handler


def test_parallel_subagents_editing_one_file_see_each_others_changes(ws, home, monkeypatch):
    target = ws / "config.ini"
    target.write_text("host = a\nport = 1\n")
    barrier = threading.Barrier(3, timeout=60)  # all three read the original before any edits
    real = BY_NAME["read"].run

    def together(args, ctx):  # type: ignore[no-untyped-def]
        result = real(args, ctx)
        barrier.wait()
        return result

    monkeypatch.setattr(BY_NAME["read"], "run", together)
    calls = [task(f"In {target} set the host to b.", "Set host"), task(f"In {target} set the port to 2.", "Set port"),
             task(f"In {target} set the host to c.", "Set host again")]
    script = Script({"host to b": editor(str(target), "host = a", "host = b"),
                     "port to 2": editor(str(target), "port = 1", "port = 2"),
                     "host to c": editor(str(target), "host = a", "host = c"), "top task": parent(*calls)})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        agent.run("top task")
    actions = {e.id: e for e in agent.ctx.session.log.load().events if e.kind == "action"}
    edits = {actions[e.action_id].input["new_string"]: e for e in results(agent, "edit")}  # ids follow start order
    host_b, port, host_c = edits["host = b"], edits["port = 2"], edits["host = c"]
    assert sorted(e.is_error for e in (host_b, host_c)) == [False, True]  # one host edit won, the other was told
    loser = host_b if host_b.is_error else host_c
    assert f"{target} changed on disk since you read it" in loser.content and "now matches 0 times" in loser.content
    assert not port.is_error
    landed_after = [e for e in (host_b, port, host_c) if not e.is_error and e.content.startswith("Note:")]
    assert landed_after and "had changed on disk since you read it" in landed_after[0].content
    assert target.read_text() in ("host = b\nport = 2\n", "host = c\nport = 2\n")


def test_subagent_events_carry_their_parent_and_the_log_shows_the_tree(ws, home):
    for name in "ab":
        (ws / f"{name}.txt").write_text(name + "\n")
    calls = [task(f"Read {ws}/{n}.txt and report its content.", f"Read {n}") for n in "ab"]
    handlers = {f"{ws}/{n}.txt": reads_file(str(ws / f"{n}.txt"), f"It says {n}.") for n in "ab"}
    with ReplayServer(Script({"top task": parent(*calls), **handlers})) as server:
        agent = make_agent(ws, home, server)
        agent.run("top task")
    events = agent.ctx.session.log.load().events
    assert {e.parent_id for e in events if e.agent_id.startswith("main.")} == {"main"}
    assert all(e.parent_id is None for e in events if e.agent_id == "main")
    proc = abhed("sessions", "show", agent.ctx.session.id, env={"ABHED_HOME": str(home)})
    lines = proc.stdout.splitlines()
    tagged = [(len(line) - len(line.lstrip()), line.strip().split("] ")[0].split("[")[-1]) for line in lines
              if "[main" in line]
    # each subagent's lines come together, one level in, right after the task call that started it
    agents = [agent_id for _, agent_id in tagged]
    assert agents.count("main.1") == 6 and agents.count("main.2") == 6
    first_task = next(i for i, line in enumerate(lines) if "[main] task" in line)
    assert agents[agents.index("main.1"):agents.index("main.1") + 5] == ["main.1"] * 5
    assert all(indent == 2 for indent, agent_id in tagged if agent_id in ("main.1", "main.2"))
    assert all(indent == 0 for indent, agent_id in tagged if agent_id == "main")
    second_task = next(i for i, line in enumerate(lines) if "[main] task" in line and i > first_task)
    started = {lines[first_task + 1].split("] ")[0].split("[")[-1], lines[second_task + 1].split("] ")[0].split("[")[-1]}
    assert started == {"main.1", "main.2"} and "run started" in lines[first_task + 1]
    assert proc.stdout.count("-> ok") >= 4


def test_subagent_messages_are_marked_as_the_subagents_in_the_log(ws, home):
    script = Script({"top task": parent(task(PROMPT.format(ws=ws))), "List the Python": answer("None here.")})
    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        agent.run("top task")
    child = [e for e in agent.ctx.session.log.load().events if isinstance(e, MessageEvent) and e.agent_id == "main.1"]
    assert [(m.role, m.origin) for m in child] == [("user", "user"), ("assistant", "model")]
