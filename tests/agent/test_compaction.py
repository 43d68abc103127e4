"""Compaction: a long session survives several; the overflow 400 compacts and retries once; the log
rebuilds exactly the conversation the loop holds."""

from __future__ import annotations

import json

from abhed.agent.compaction import SUMMARY_MARK
from abhed.agent.conversation import rebuild
from abhed.session.events import CompactionEvent
from abhed.model.replay import ReplayServer, Turn
from agent_helpers import make_agent


class LongSession:
    """Plans, then reads one big file per turn for `reads` turns, then answers; summarises on request."""

    def __init__(self, ws, reads: int, summary_fault: str | None = None) -> None:
        self.ws, self.reads, self.summary_fault = ws, reads, summary_fault
        self.step = self.summaries = 0

    def __call__(self, body):  # type: ignore[no-untyped-def]
        if body["messages"][0]["content"].startswith(SUMMARY_MARK):
            self.summaries += 1
            if self.summary_fault:
                return Turn(fault=self.summary_fault)
            return Turn(text=f"Summary {self.summaries}: read the modules one by one, nothing changed yet.")
        self.step += 1
        if self.step == 1:
            return Turn(calls=[("plan", {"goal": "Survey every module", "steps": ["Read each module", "Report"]}),
                               ("todo", {"items": [{"content": "Read modules", "status": "in_progress"}]})])
        if self.step <= self.reads + 1:
            return Turn(text=f"Reading module {self.step - 1}.",
                        calls=[("read", {"path": str(self.ws / f"mod{self.step - 1}.py")})])
        return Turn(text="Surveyed all modules.")


def big_files(ws, count: int) -> None:
    for n in range(1, count + 1):
        (ws / f"mod{n}.py").write_text("".join(f"def f{n}_{i}(x):\n    return x * {i}  # padding padding\n"
                                               for i in range(60)))


def test_a_long_session_survives_several_compactions_with_plan_and_todos_kept(ws, home):
    big_files(ws, 16)
    script = LongSession(ws, reads=16)
    with ReplayServer(script, max_model_len=9000) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("Survey the modules.")
    assert outcome.status == "done" and outcome.answer == "Surveyed all modules."
    compactions = [e for e in agent.ctx.session.log.load().events if isinstance(e, CompactionEvent)]
    assert len(compactions) >= 3 and script.summaries == len(compactions)
    assert all(c.method == "model" and c.tokens_after < c.tokens_before for c in compactions)
    assert server.refused == []  # compaction came before the server had to refuse anything
    final = server.requests[-1]["messages"]
    block = next(m["content"] for m in final if m["role"] == "user" and "were compacted" in m["content"])
    assert f"Summary {len(compactions)}:" in block and "1. Survey the modules." in block
    assert "Goal: Survey every module" in block and "[>] t1 Read modules" in block
    assert str(ws / "mod1.py") in block  # the files read, listed
    assert json.dumps(final).count("were compacted") == 1  # the older block was folded into the newer one


def test_the_log_rebuilds_exactly_the_conversation_the_loop_holds(ws, home):
    big_files(ws, 8)
    with ReplayServer(LongSession(ws, reads=8), max_model_len=9000) as server:
        agent = make_agent(ws, home, server)
        agent.run("Survey the modules.")
    rebuilt = rebuild(agent.ctx.session.log.load().events, "main", agent.cap)
    shape = lambda msgs: [(m.role, m.content, m.tool_call_id, [(c.id, c.name, c.arguments) for c in m.tool_calls])
                          for m in msgs]
    assert shape(rebuilt) == shape(agent.messages)


def test_a_context_length_400_compacts_and_retries_once(ws, home):
    big_files(ws, 2)

    def script(body):  # type: ignore[no-untyped-def]
        if body["messages"][0]["content"].startswith(SUMMARY_MARK):
            return Turn(text="Read mod1 and mod2.")
        replies = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if replies < 2:
            return Turn(calls=[("read", {"path": str(ws / f"mod{replies + 1}.py")})])
        if not any("were compacted" in (m.get("content") or "") for m in body["messages"]):
            return Turn(fault="overflow")  # the server counts differently than we estimate
        return Turn(text="Both read.")

    with ReplayServer(script) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("read both")
    assert outcome.answer == "Both read."
    assert any(isinstance(e, CompactionEvent) for e in agent.ctx.session.log.load().events)


def test_an_overflow_that_compaction_cannot_cure_fails_clearly(ws, home):
    big_files(ws, 1)

    asked = []

    def script(body):  # type: ignore[no-untyped-def]
        if body["messages"][0]["content"].startswith(SUMMARY_MARK):
            return Turn(text="summary")
        asked.append(body)
        return Turn(calls=[("read", {"path": str(ws / "mod1.py")})]) if len(asked) == 1 else Turn(fault="overflow")

    with ReplayServer(script) as server:
        outcome = make_agent(ws, home, server).run("go")
    assert outcome.status == "failed" and "Compaction could not make the conversation fit" in outcome.detail
    assert "--max-model-len" in outcome.detail


def test_when_the_model_cannot_summarise_a_mechanical_summary_stands_in(ws, home):
    big_files(ws, 8)
    with ReplayServer(LongSession(ws, reads=8, summary_fault="status:400"), max_model_len=9000) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("Survey the modules.")
    assert outcome.status == "done"
    compactions = [e for e in agent.ctx.session.log.load().events if isinstance(e, CompactionEvent)]
    assert compactions and all(c.method == "mechanical" for c in compactions)
    assert "could not summarise" in compactions[0].content and "called read" in compactions[0].content
    assert any("could not write the summary" in n for n in agent.display.notices)
