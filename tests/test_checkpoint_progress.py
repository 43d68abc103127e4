"""A snapshot that reads many files says how far it has got while it runs (session/hashing.py, issue
34): a few times a second at most, only above Shadow.FIRST_NOTE_FILES, shown by the displays."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from abhed.cli import display
from abhed.model.wire import ToolCall
from abhed.session import gitindex, hashing, seed
from abhed.session.checkpoint import Shadow
from abhed.session.hashing import Hashing, Ticker


def files(ws: Path, count: int) -> None:
    ws.mkdir(exist_ok=True)
    for i in range(count):
        (ws / f"f{i:04}.txt").write_text(f"{i}\n")


def snapshot(tmp_path: Path, ws: Path, kind: str = "before") -> list[Hashing]:
    seen: list[Hashing] = []
    Shadow(tmp_path / "home", ws).snapshot("s1", kind, {"call": "c1", "tool": "bash", "number": 1},
                                           report=seen.append)
    return seen


def test_the_ticker_reports_increasing_counts_a_few_times_a_second_and_its_end():
    now = [0.0]
    seen: list[Hashing] = []
    ticker = Ticker(seen.append, total=100, first=True, every=0.25, clock=lambda: now[0])
    for _ in range(100):
        now[0] += 0.01  # a file every 10 ms: 1 s in all
        ticker.tick(1000)
    assert [h.done for h in seen] == [25, 50, 75, 100]  # every 0.25 s, not every file
    ticker.end()
    assert seen[-1].finished and seen[-1].size == 100_000 and len(seen) == 5
    quick: list[Hashing] = []
    ticker = Ticker(quick.append, total=100, first=True, every=0.25, clock=lambda: now[0])
    for _ in range(100):
        ticker.tick(10)  # all within 0.25 s
    ticker.end()
    assert quick == []  # done before the first report was due: no line flashes, none to take down


def test_a_first_snapshot_of_many_files_reports_as_it_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(Shadow, "FIRST_NOTE_FILES", 30)
    monkeypatch.setattr(hashing, "EVERY_S", 0.0)  # every file reported: the counts can be checked
    files(tmp_path / "ws", 30)  # exactly the threshold
    seen = snapshot(tmp_path, tmp_path / "ws")
    done = [h.done for h in seen]
    assert done == sorted(done) and done[0] >= 1 and done[-1] == 30 and len(done) >= 30
    assert {h.total for h in seen} == {30} and all(h.first for h in seen) and seen[-1].finished
    assert seen[-1].size == sum(len(f"{i}\n") for i in range(30))
    assert seen[-1].words() == ("first checkpoint of this workspace: hashing 30 / 30 files (80 B) - later "
                                "calls only read what changed")


def test_nothing_is_reported_below_the_threshold_nor_by_a_later_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(Shadow, "FIRST_NOTE_FILES", 30)
    monkeypatch.setattr(hashing, "EVERY_S", 0.0)
    files(tmp_path / "small", 29)
    assert snapshot(tmp_path / "a", tmp_path / "small") == []
    files(tmp_path / "ws", 40)
    monkeypatch.setattr(gitindex, "RACY_S", -10)  # files written just now are not read again (seed's tests say why)
    assert snapshot(tmp_path / "b", tmp_path / "ws")  # the first
    assert snapshot(tmp_path / "b", tmp_path / "ws", "after") == []  # nothing changed: nothing read


def test_a_repository_s_tracked_files_are_not_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from test_checkpoint_seed import age, commit, repository
    monkeypatch.setattr(gitindex, "RACY_S", -10)
    monkeypatch.setattr(seed, "_read_host", lambda path: None)
    monkeypatch.setattr(Shadow, "FIRST_NOTE_FILES", 30)
    monkeypatch.setattr(hashing, "EVERY_S", 0.0)
    ws = tmp_path / "ws"
    repository(ws)
    files(ws / "tracked", 40)
    commit(ws)
    age(ws)
    files(ws / "untracked", 31)
    seen = snapshot(tmp_path, ws)
    assert seen and {h.total for h in seen} == {31}  # only what the repository's index could not vouch for


def test_the_chat_status_line_shows_it_and_takes_it_down():
    chat = display.Chat(Console(file=io.StringIO(), width=200, force_terminal=False))
    chat.tool_started(ToolCall(id="c1", name="bash", arguments='{"command": "make"}'))
    chat.hashing(Hashing(12_345, 78_000, int(1.2 * (1 << 30)), True))
    line = chat.activity.line()
    assert line.startswith("running bash 0s · first checkpoint of this workspace: hashing 12,345 / 78,000 files (1.2 GB)")
    assert "later calls only read what changed" in line
    chat.hashing(Hashing(78_000, 78_000, 1 << 31, True))
    assert "hashing" not in chat.activity.line()


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_abhed_run_prints_it_every_few_seconds_on_a_terminal_and_never_into_a_file(
        monkeypatch: pytest.MonkeyPatch):
    now = [100.0]
    monkeypatch.setattr(display.time, "monotonic", lambda: now[0])
    out = Tty()
    progress = display.Progress(out)
    for done in range(0, 2000, 100):
        now[0] += 0.5  # a report every 0.5 s for 10 s
        progress.hashing(Hashing(done, 3000, done * 10, True))
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0] == ("   first checkpoint of this workspace: hashing 0 / 3,000 files (0 B) - "
                                            "later calls only read what changed")
    logged = io.StringIO()
    display.Progress(logged).hashing(Hashing(10, 3000, 100, True))
    assert logged.getvalue() == ""
