"""abhed/session/undo.py in-process: the checkpoint table, the plan shown before an undo, the
refusals, the report and the note for the model (issue 16). Real git, real files, real sessions;
tests/test_checkpoint.py drives the same code through the `abhed` command line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from abhed.session import undo as undoing
from abhed.session.checkpoint import Checkpoints, CheckpointError, Shadow, UndoRefused
from abhed.session.events import MessageEvent
from abhed.session.store import SessionStore
from abhed_testing import Tools


@pytest.fixture
def t(ws: Path, home: Path) -> Tools:
    made = Tools(ws, home)
    made.ctx.checkpoints = Checkpoints(Shadow(home, ws))
    yield made
    made.ctx.close()


def undo(t: Tools, number: int | None = None, *, force: bool = False, answer: bool = True, tell=None,
         shown: list[str] | None = None) -> str:
    def confirm(text: str) -> bool:
        if shown is not None:
            shown.append(text)
        return answer
    return undoing.undo(t.ctx.checkpoints, t.session, number, force=force, confirm=confirm, tell=tell)


def table(t: Tools) -> list[str]:
    return undoing.table(undoing.rows(t.ctx.checkpoints, t.session), t.session.id).splitlines()


def test_the_table_names_each_call_and_what_it_changed(t: Tools, ws: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    t.ok("read", path=str(ws / "a.txt"))
    t.ok("edit", path=str(ws / "a.txt"), old_string="a", new_string="b")
    t.ok("bash", command="rm a.txt;   touch  b c d e", description="tidy")
    undo(t)
    rows = table(t)
    assert len(rows) == 4
    assert rows[0].startswith("   1  ") and f" main     edit {str(ws)[:40]}" in rows[0] and rows[0].endswith("  1 (M a.txt)")
    # whitespace of the command collapsed; more than three changes: three named, then ", ..."
    assert " main     bash rm a.txt; touch b c d e " in rows[1]
    assert rows[1].endswith("  5 (D a.txt, A b, A c, ...)")
    assert rows[2].startswith("   3  ") and " human    undo to before checkpoint 2 " in rows[2]
    assert rows[2].endswith("  5 (A a.txt, D b, D c, ...)")
    assert rows[3] == (f"Undo the last call: abhed undo {t.session.id}; back to before checkpoint N: abhed undo --to N "
                       f"{t.session.id} (N from 1 to 3).")


def test_a_long_call_is_cut_to_sixty_characters_and_a_call_that_never_ended_is_marked(t: Tools, ws: Path) -> None:
    exactly = "echo " + "x" * 46 + " > a"  # "bash " and this: 60 characters, shown whole
    longer = "echo " + "y" * 70 + " > b"
    t.ok("bash", command=exactly, description="x")
    t.ok("bash", command=longer, description="x")
    shadow = t.ctx.checkpoints.shadow
    shadow.snapshot(t.session.id, "before", {"call": "killed", "tool": "write", "agent_id": "sub-1"})  # no "after"
    rows = table(t)
    assert f" main     bash {exactly}  1 (A a)" in rows[0]
    assert f" main     bash {longer[:52]}...  1 (A b)" in rows[1]
    assert rows[2].startswith("   3  ") and " sub-1    write " in rows[2] and rows[2].endswith("  ? (the call never finished)")


def test_no_checkpoints_is_said_in_words(t: Tools) -> None:
    assert undoing.table([], "s1") == ("[session s1 has no checkpoints: none of its calls changed the workspace, or "
                                       "checkpoints were off]")
    with pytest.raises(CheckpointError, match=f"Session {t.session.id} has no checkpoints, so there is nothing to undo"):
        undo(t)


def test_the_plan_shown_first_lists_every_change_and_a_no_changes_nothing(t: Tools, ws: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    t.ok("bash", command="echo b > a.txt; echo new > n.txt; rm -f gone", description="x")
    shown: list[str] = []
    assert undo(t, answer=False, shown=shown) == "Undo cancelled; nothing was changed."
    assert shown == [f"Undo to before checkpoint 1 changes 2 files in {ws}:\n  restore a.txt\n  delete n.txt\n"
                     "Files not covered by checkpoints (ignored, excluded or too large) are left as they are."]
    assert (ws / "a.txt").read_text() == "b\n" and (ws / "n.txt").exists()
    t.ok("read", path=str(ws / "n.txt"))
    t.ok("write", path=str(ws / "n.txt"), content="only this\n")
    shown.clear()
    undo(t, 2, shown=shown)
    assert shown[0].startswith(f"Undo to before checkpoint 2 changes 1 file in {ws}:\n  restore n.txt\n")


def test_the_report_counts_what_was_restored_recreated_and_deleted_and_the_model_is_told(t: Tools, ws: Path) -> None:
    for name in ("a", "b", "c"):
        (ws / name).write_text(name)
    t.ok("bash", command="echo x > a; rm b c; echo n > n", description="x")
    told: list[str] = []
    report = undo(t, tell=told.append)
    assert report == (f"Undone: the workspace is as it was before checkpoint 1 (1 restored, 2 recreated, 1 deleted). "
                      f"This undo is checkpoint 2: `abhed undo --to 2 {t.session.id}` takes it back.")
    assert told == ["[Abhed: the user undid the changes since checkpoint 1: the workspace is back to its state before "
                    "that call (1 restored, 2 recreated, 1 deleted). Files you read or wrote since may differ now: read "
                    "them again before editing.]"]
    assert not [e for e in t.session.log.load().events if isinstance(e, MessageEvent) and e.origin == "undo"]
    # without a running chat to tell, the note goes into the log for the next run
    report = undo(t)
    assert report.startswith("Undone: the workspace is as it was before checkpoint 2 (1 restored, 1 recreated, "
                             "2 deleted). This undo is checkpoint 3")
    notes = [e.content for e in t.session.log.load().events if isinstance(e, MessageEvent) and e.origin == "undo"]
    assert len(notes) == 1 and "since checkpoint 2" in notes[0]
    assert sorted(p.name for p in ws.iterdir() if not p.name.startswith(".")) == ["a", "n"] and (ws / "a").read_text() == "x\n"


def test_an_undo_with_nothing_to_do_says_so_and_takes_no_checkpoint(t: Tools, ws: Path) -> None:
    t.ok("write", path=str(ws / "a.txt"), content="x")
    (ws / "a.txt").unlink()  # the human took it back by hand
    assert undo(t) == "Nothing to undo: the workspace already is as it was before checkpoint 1."
    assert [r.number for r in undoing.rows(t.ctx.checkpoints, t.session)] == [1]


def test_a_refusal_lists_at_most_fifty_paths_and_counts_the_rest(t: Tools, ws: Path) -> None:
    t.ok("bash", command="for i in $(seq 10 62); do echo agent > f$i; done", description="x")
    for i in range(10, 63):
        (ws / f"f{i}").write_text("the human's\n")
    with pytest.raises(UndoRefused) as refused:
        undo(t)
    message = str(refused.value)
    assert message.startswith("Undo refused: 53 of the files it would change were changed by someone other than "
                              "this session's agent (you, or another session) since checkpoint 1:\n  f10\n")
    assert "  f59\n  ... and 3 more\nNothing was changed." in message and "f60" not in message
    assert len(refused.value.paths) == 53
    assert all((ws / f"f{i}").read_text() == "the human's\n" for i in range(10, 63))
    assert undo(t, force=True).startswith("Undone")
    assert [p.name for p in ws.iterdir() if not p.name.startswith(".")] == []


def test_a_workspace_that_changes_while_the_human_decides_is_not_undone(t: Tools, ws: Path) -> None:
    t.ok("write", path=str(ws / "a.txt"), content="agent\n")

    def meanwhile(text: str) -> bool:
        (ws / "b.txt").write_text("arrived while the question was open\n")
        return True
    with pytest.raises(CheckpointError, match="The workspace changed while the undo waited for your answer; nothing "
                                              "was changed. Run the undo again"):
        undoing.undo(t.ctx.checkpoints, t.session, None, force=False, confirm=meanwhile)
    assert (ws / "a.txt").read_text() == "agent\n" and (ws / "b.txt").exists()


def test_the_range_abhed_run_prints(t: Tools) -> None:
    assert undoing.run_range(4, 3, "s") is None  # the run took no checkpoint
    assert undoing.run_range(3, 3, "s") == "checkpoint 3 (undo this run: abhed undo --to 3 s)"
    assert undoing.run_range(1, 3, "s") == "checkpoints 1-3 (undo this run: abhed undo --to 1 s)"


def test_the_default_session_is_the_newest_in_the_workspace_and_a_damaged_one_is_passed_over(ws: Path, home: Path,
                                                                                             tmp_path: Path) -> None:
    store = SessionStore(home)
    assert undoing.latest_session(store, ws) is None
    other = tmp_path / "other"
    other.mkdir()
    store.create(ws, "a-first")
    store.create(other, "b-elsewhere")
    store.create(ws, "c-newest")
    store.create(other, "d-elsewhere-later")
    assert undoing.latest_session(store, ws) == "c-newest"
    store.create(ws, "0-damaged")  # newer still, and first in the store's order
    (home / "sessions" / "0-damaged" / "state.json").write_text("{not json")
    assert undoing.latest_session(store, ws) == "c-newest"


def test_sandboxed_processes_that_cannot_be_stopped_stop_the_undo_before_any_change(t: Tools, ws: Path,
                                                                                    monkeypatch) -> None:
    """The freeze is what keeps a running job from rearranging the workspace under the restore: when
    it fails (the host refused to stop a process, or they kept forking), nothing is restored."""
    from sandbox import freeze
    (ws / "a.txt").write_text("a\n")
    t.ok("bash", command="echo b > a.txt", description="change")

    def refuse(workspace):
        raise freeze.FreezeError(f"3 sandboxed processes of {workspace} did not stop within 5 s")
    monkeypatch.setattr(freeze, "freeze", refuse)
    with pytest.raises(CheckpointError) as stopped:
        undo(t)
    assert str(stopped.value) == (f"Undo stopped before changing anything: 3 sandboxed processes of {ws} did not "
                                  "stop within 5 s")
    assert (ws / "a.txt").read_text() == "b\n"  # nothing restored
