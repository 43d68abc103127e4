"""plan and todo (spec §9): persisted in the session, exactly one item in progress, errors that teach."""

from __future__ import annotations

import json

from abhed.session.store import SessionStore, rebuild_state
from abhed.tools.todo import render_todos


def test_plan_is_saved_replaced_whole_and_versioned(tools):
    first = tools.ok("plan", goal="Fix the bug", steps=["Reproduce", "Fix", "Test"])
    assert first.startswith("Saved the plan.") and "1. Reproduce\n2. Fix\n3. Test" in first
    second = tools.ok("plan", goal="Fix the bug", steps=["Reproduce", "Fix it properly"], notes="use edit")
    assert second.startswith("Updated the plan (version 1 replaced).") and "Plan (version 2)" in second
    plan = tools.session.state.plan
    assert plan.steps == ["Reproduce", "Fix it properly"] and plan.notes == "use edit" and plan.version == 2


def test_plan_unchanged_says_so(tools):
    tools.ok("plan", goal="g", steps=["a"])
    again = tools.ok("plan", goal="g", steps=["a"])
    assert again.startswith("Unchanged: the plan already says exactly this.")
    assert tools.session.state.plan.version == 1


def test_plan_errors_name_every_problem_and_change_nothing(tools):
    message = tools.err("plan", goal=" ", steps=["ok", "", "x" * 1200])
    assert "`goal` is empty" in message and "step 2 is empty" in message and "step 3 exceeds 1000" in message
    assert "Call plan again" in message and tools.session.state.plan is None
    assert "`steps` is empty" in tools.err("plan", goal="g", steps=[])


def test_plan_with_a_wrong_type_gets_the_schema_error(tools):
    message = tools.err("plan", goal="g", steps="do it all")
    assert "`steps`" in message and "an array" in message and "e.g." in message


def test_todo_adds_items_with_stable_ids_and_renders_the_list(tools):
    out = tools.ok("todo", items=[{"content": "Reproduce"}, {"content": "Fix", "status": "in_progress"}])
    assert out.splitlines()[0] == "Updated: added t1; added t2 (in_progress)."
    assert "[ ] t1 Reproduce" in out and "[>] t2 Fix" in out and "0 of 2 done, 1 in progress" in out
    tools.ok("todo", remove=["t1"])
    out = tools.ok("todo", items=[{"content": "Test"}])
    assert "t3 Test" in out  # a removed id is never reused


def test_todo_updates_only_named_fields(tools):
    tools.ok("todo", items=[{"content": "A"}, {"content": "B"}])
    out = tools.ok("todo", items=[{"id": "t1", "status": "done"}, {"id": "t2", "status": "in_progress"}])
    assert "t1 pending -> done; t2 pending -> in_progress" in out and "[x] t1 A" in out and "[>] t2 B" in out


def test_two_in_progress_is_refused_naming_both_and_nothing_changes(tools):
    tools.ok("todo", items=[{"content": "Write the fix", "status": "in_progress"}, {"content": "Run the tests"}])
    message = tools.err("todo", items=[{"id": "t2", "status": "in_progress"}])
    assert "2 items in_progress: t1 (Write the fix) and t2 (Run the tests)" in message
    assert "set the one you finished to done" in message
    assert [i.status for i in tools.session.state.todos] == ["in_progress", "pending"]
    ok = tools.ok("todo", items=[{"id": "t1", "status": "done"}, {"id": "t2", "status": "in_progress"}])
    assert "1 of 2 done, 1 in progress" in ok


def test_todo_error_cases_teach(tools):
    tools.ok("todo", items=[{"content": "A"}])
    assert "no todo item 't9'; the ids are: t1" in tools.err("todo", items=[{"id": "t9", "status": "done"}])
    assert "no id and no content" in tools.err("todo", items=[{"status": "done"}])
    assert "changes nothing" in tools.err("todo", items=[{"id": "t1"}])
    assert "appears twice" in tools.err("todo", items=[{"id": "t1", "status": "done"}, {"id": "t1", "content": "x"}])
    assert "remove: there is no todo item 'x'" in tools.err("todo", remove=["x"])
    assert "`content` is empty" in tools.err("todo", items=[{"content": "  "}])
    assert "both updated and removed" in tools.err("todo", items=[{"id": "t1", "status": "done"}], remove=["t1"])
    wrong = tools.err("todo", items=[{"id": "t1", "status": "finished"}])
    assert "pending" in wrong and "in_progress" in wrong


def test_todo_without_arguments_shows_the_list_and_unchanged_says_so(tools):
    assert tools.ok("todo") == "Todos: [the list is empty]"
    tools.ok("todo", items=[{"content": "A", "status": "done"}])
    assert tools.ok("todo").endswith("[all items are done]")
    assert tools.ok("todo", items=[{"id": "t1", "status": "done"}]).startswith("Unchanged:")


def test_render_notes_when_nothing_is_in_progress(tools):
    tools.ok("todo", items=[{"content": "A"}])
    assert "no item is in_progress" in render_todos(tools.session.state.todos)


def test_plan_and_todos_persist_and_are_rebuilt_from_the_log(tools, home):
    tools.ok("plan", goal="g", steps=["a", "b"])
    tools.ok("todo", items=[{"content": "A", "status": "in_progress"}])
    state = json.loads((tools.session.dir / "state.json").read_text())
    assert state["plan"]["goal"] == "g" and state["todos"][0]["id"] == "t1"
    session = SessionStore(home).open(tools.session.id)
    blank = session.state.model_copy(update={"plan": None, "todos": [], "next_todo_id": 1})
    rebuilt = rebuild_state(blank, session.log.load().events)  # as if state.json had missed both saves
    assert rebuilt.plan.steps == ["a", "b"] and [t.content for t in rebuilt.todos] == ["A"]
    assert rebuilt.next_todo_id == 2


def test_plan_and_todo_are_allowed_in_plan_mode(ws, home):
    from abhed.gate.approval import Gate, Policy
    from abhed_testing import Tools
    tools = Tools(ws, home, gate=Gate(Policy.create("plan", [], [], ws)))
    tools.ok("plan", goal="g", steps=["a"])
    tools.ok("todo", items=[{"content": "A"}])


def test_the_read_set_is_rebuilt_from_the_log_when_state_json_missed_the_last_save(tools, ws, home):
    (ws / "f.txt").write_text("one\n")
    tools.ok("read", path=str(ws / "f.txt"))
    session = SessionStore(home).open(tools.session.id)
    stale = session.state.model_copy(update={"reads": {}})  # the crash came between the event and the save
    rebuilt = rebuild_state(stale, session.log.load().events)
    assert rebuilt.reads[str(ws / "f.txt")] == tools.session.state.reads[str(ws / "f.txt")]


def test_a_call_that_changes_no_state_records_no_changes(tools, ws):
    tools.err("read", path=str(ws / "missing"))
    observation = tools.session.log.load().events[-1]
    assert "state" not in observation.metadata
