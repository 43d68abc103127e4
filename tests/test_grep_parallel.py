"""Issue 18: the grep tool's fallback backend searches large file sets with forked workers; the answer
is the one a single process gives, byte for byte (order, caps, notes), and the workers open every file
through the tool's confined opener."""

from __future__ import annotations

import errno
import os

import pytest

from abhed.files import grepsearch
from abhed.tools import grep as grep_tool


@pytest.fixture
def forked(monkeypatch):
    """Returns run(tools, **args) -> (content, facts, fork_map calls) with the workers on or off."""
    calls = []
    real = grepsearch.fork_map
    monkeypatch.setattr(grepsearch, "fork_map", lambda *a: calls.append(a[2]) or real(*a))
    monkeypatch.setattr(grepsearch, "default_workers", lambda: 3)

    def run(tools, parallel, **args):
        monkeypatch.setattr(grepsearch, "PARALLEL_MIN_BYTES", 0 if parallel else 1 << 62)
        calls.clear()
        result = tools("grep", **args)
        return result.content, result.metadata, list(calls)
    return run


def _workspace(ws):
    """Over 1000 matching files (the files cap), files with over 50 and 100 matching lines (the
    content caps), a binary file, a file over max_file_bytes, and one that cannot be read."""
    for d in range(11):
        sub = ws / f"pkg{d:02}"
        sub.mkdir()
        for f in range(100):
            lines = [f"line {i}" for i in range(5)] + ["needle here"] * (1 + (d * f) % 4) + ["tail"]
            (sub / f"m{f:03}.txt").write_text("\n".join(lines) + "\n")
    (ws / "many.txt").write_text("".join(f"needle {i}\nctx\n" for i in range(130)))
    (ws / "bin.dat").write_bytes(b"needle\x00\x01")
    (ws / "big.txt").write_text("needle\n" + "x" * 6000)
    (ws / "locked.txt").write_text("needle\n")


@pytest.mark.parametrize("args", [
    {"pattern": "needle"},
    {"pattern": "needle", "output_mode": "count"},
    {"pattern": "needle", "output_mode": "content", "context": 1},
    {"pattern": "(?i)NEEDLE|line 3", "output_mode": "count"},
    {"pattern": "needle", "glob": "pkg0[13]/*"},
    {"pattern": "no such text anywhere"},
], ids=["files", "count", "content", "alternation", "glob", "nothing"])
def test_the_workers_answer_exactly_as_one_process(tools, ws, forked, monkeypatch, args):
    _workspace(ws)
    tools.settings.search.backend = "python"
    tools.settings.search.max_file_bytes = 5000
    real_check = grep_tool.check_regular

    def locked_out(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("locked.txt"):
            os.close(fd)
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_check(fd)
    monkeypatch.setattr(grep_tool, "check_regular", locked_out)
    one, one_facts, none = forked(tools, False, **args)
    many, many_facts, calls = forked(tools, True, **args)
    assert none == [] and calls == [3], "the second search did not fork its workers"
    assert many == one and many_facts == one_facts
    if args["pattern"] == "needle" and "glob" not in args:
        assert "(Permission denied)" in many and "locked.txt" in many
        assert "big.txt (5.9 KiB)" in many
        assert "1 binary file(s) matched and were skipped" in many
        assert "[truncated: showing" in many


def test_a_small_search_stays_in_one_process(tools, ws, forked):
    (ws / "a.txt").write_text("needle\n")
    (ws / "b.txt").write_text("needle\n")
    tools.settings.search.backend = "python"
    calls = []
    grepsearch.fork_map, real = (lambda *a: calls.append(a) or real(*a)), grepsearch.fork_map
    try:
        out = tools.ok("grep", pattern="needle")
    finally:
        grepsearch.fork_map = real
    assert out.splitlines() == [str(ws / "a.txt"), str(ws / "b.txt")] and calls == []
    assert grepsearch.search_workers(2, grepsearch.PARALLEL_MIN_BYTES - 1) == 1
    assert grepsearch.search_workers(1, 1 << 40) == 1
    least = grepsearch.PARALLEL_MIN_BYTES
    assert grepsearch.search_workers(2, least) == 2   # one per half of the threshold
    assert grepsearch.search_workers(9, least) == 2
    assert grepsearch.search_workers(9, 2 * least) == 3   # at most default_workers() (patched: 3)
    assert grepsearch.search_workers(2, 10 * least) == 2   # at most one per file


def test_every_file_is_opened_once_through_the_given_opener_in_the_workers(tmp_path):
    """The opener (the tool's confined one) is what the workers call: each file once, in a child."""
    log = tmp_path / "opened.log"
    files = []
    for i in range(40):
        p = tmp_path / f"f{i:02}.txt"
        p.write_text("needle\n" if i % 3 == 0 else "hay\n")
        files.append(str(p))

    def opener(path):
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {path}\n")
        return grepsearch.open_plain(path)
    hits = list(grepsearch.python_search(files, grepsearch.Query("needle", "count"), opener, workers=2))
    assert [h.path for h in hits] == files[::3] and all(h.count == 1 for h in hits)
    opened = [line.split(" ", 1) for line in log.read_text().splitlines()]
    assert sorted(path for _, path in opened) == files
    pids = {pid for pid, _ in opened}
    assert len(pids) == 2 and str(os.getpid()) not in pids
