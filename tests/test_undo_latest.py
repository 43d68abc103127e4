"""`undo` without a number (issue 36 item 5): back to before the latest checkpoint whose call
changed the workspace, a test run after it passed over; the call named, the files restored; and
what to do when no call changed anything. Real git, real files, real sessions, as test_undo.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from abhed.session import undo as undoing
from abhed.session.checkpoint import Checkpoints, CheckpointError, Shadow
from abhed_testing import Tools


@pytest.fixture
def t(ws: Path, home: Path) -> Tools:
    made = Tools(ws, home)
    made.ctx.checkpoints = Checkpoints(Shadow(home, ws))
    yield made
    made.ctx.close()


def latest(t: Tools, shown: list[str] | None = None, answer: bool = True) -> str:
    def confirm(text: str) -> bool:
        if shown is not None:
            shown.append(text)
        return answer
    return undoing.undo_latest(t.ctx.checkpoints, t.session, force=False, confirm=confirm)


def test_calls_that_changed_nothing_are_passed_over_and_named(t: Tools, ws: Path) -> None:
    t.ok("write", path=str(ws / "a.txt"), content="one\n")
    t.ok("bash", command="sh -c 'exit 0'", description="tests")
    t.ok("bash", command="sh -c 'echo ok'", description="tests again")  # read-only: no checkpoint
    found = undoing.latest_change(t.ctx.checkpoints, t.session)
    assert isinstance(found, undoing.Latest) and found.number == 1
    assert found.passed == ["bash sh -c 'exit 0'"]
    shown: list[str] = []
    report = latest(t, shown)
    assert shown[0].startswith(f"The last change, checkpoint 1's call: write {ws / 'a.txt'}; the 1 call after it "
                               "changed nothing (bash sh -c 'exit 0').\n"
                               f"Undo to before checkpoint 1 changes 1 file in {ws}:\n  delete a.txt\n")
    assert report == (f"Undone: the workspace is as it was before checkpoint 1 (1 deleted: {ws / 'a.txt'}). It undid "
                      f"the last change, checkpoint 1's call: write {ws / 'a.txt'}; the 1 call after it changed nothing "
                      f"(bash sh -c 'exit 0'). This undo is checkpoint 3: `abhed undo --to 3 {t.session.id}` takes it "
                      "back.")
    assert not (ws / "a.txt").exists()
    # the undo changed the workspace: the next undo without a number takes it back
    again = latest(t)
    assert again.startswith("Undone: the workspace is as it was before checkpoint 3 (1 recreated: ")
    assert "It undid the last change, checkpoint 3's call: undo to before checkpoint 1. " in again
    assert (ws / "a.txt").read_text() == "one\n"


def test_nothing_changed_says_so_and_what_lists_and_forces_it(t: Tools, ws: Path) -> None:
    with pytest.raises(CheckpointError, match="has no checkpoints, so there is nothing to undo"):
        latest(t)
    t.ok("bash", command="sh -c 'exit 0'", description="tests")
    t.ok("bash", command="sh -c 'exit 1'", description="tests")
    shown: list[str] = []
    sid = t.session.id
    assert latest(t, shown) == (
        f"Nothing to undo: none of the 2 calls checkpointed in session {sid} changed the workspace (the last, "
        f"checkpoint 2: bash sh -c 'exit 1'). `abhed checkpoints {sid}` lists them with what each changed; `/undo N` "
        f"in the chat (`abhed undo --to N {sid}`) takes the workspace back to before checkpoint N all the same.")
    assert shown == []


def test_a_call_that_never_ended_counts_as_a_change(t: Tools, ws: Path) -> None:
    t.ok("write", path=str(ws / "a.txt"), content="one\n")
    t.ctx.checkpoints.shadow.snapshot(t.session.id, "before", {"call": "killed", "tool": "bash", "agent_id": "main"})
    found = undoing.latest_change(t.ctx.checkpoints, t.session)
    assert isinstance(found, undoing.Latest) and found.number == 2 and found.passed == []


def test_a_long_list_of_passed_calls_and_a_long_call_are_bounded() -> None:
    passed = [f"bash sh -c 'exit 0' # run {n} " + "x" * 300 for n in range(5)]
    words = undoing.Latest(1, "write /ws/a.txt", passed).words()
    assert words.startswith("the last change, checkpoint 1's call: write /ws/a.txt; the 5 calls after it changed "
                            "nothing (..., bash sh -c 'exit 0' # run 2 ")
    assert words.count(" [...]") == 3 and len(words) < 800


def test_an_explicit_number_and_the_api_default_keep_their_words(t: Tools, ws: Path) -> None:
    """undo() (abhed run's callers, the tests of issue 16) reports as before; its default is the
    latest change too."""
    t.ok("write", path=str(ws / "a.txt"), content="one\n")
    t.ok("bash", command="sh -c 'exit 0'", description="tests")
    report = undoing.undo(t.ctx.checkpoints, t.session, None, force=False, confirm=lambda _: True)
    assert report.startswith("Undone: the workspace is as it was before checkpoint 1 (1 deleted). This undo is "
                             "checkpoint 3")


def test_a_call_that_changed_only_modes_or_the_repository_counts_as_a_change(t: Tools, ws: Path) -> None:
    """What a call changed is the whole state a checkpoint keeps: files, exact modes, the git
    repository's own state; a chmod or a commit alone is a change to undo."""
    subprocess.run(["git", "init", "-q", str(ws)], check=True, timeout=30)
    t.ok("write", path=str(ws / "a.sh"), content="echo\n")
    t.ok("bash", command="chmod 600 a.sh", description="mode")
    found = undoing.latest_change(t.ctx.checkpoints, t.session)
    assert isinstance(found, undoing.Latest) and found.number == 2 and found.call == "bash chmod 600 a.sh"
    t.ok("bash", command="git add a.sh && git -c user.name=a -c user.email=a@b commit -qm one",
         description="repo")
    found = undoing.latest_change(t.ctx.checkpoints, t.session)
    assert isinstance(found, undoing.Latest) and found.number == 3
