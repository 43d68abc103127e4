"""Issue 34 (stop 44): the first checkpoint's work ahead of the first call (Shadow.prepare) makes its
trees once, and runs the survey's git listing beside the capture and the specials.

Judged by what the store holds (the trees, the survey) against the order that did one thing after
the other, and by the git children run (how many, with the store's lock).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from abhed.session import checkpoint, gitindex, seed, uncovered
from abhed.session.checkpoint import CheckpointError, Shadow
from test_checkpoint_seed import git, no_user_config, repository, commit, settled_ctimes  # noqa: F401 (fixtures)


def workspace(tmp_path: Path) -> Path:
    """A committed repository with a tracked directory the default exclusions leave out (`target/`,
    as the Linux tree's), ignored untracked files and an ignored directory (what the survey lists)."""
    ws = tmp_path / "ws"
    repository(ws)
    (ws / "target").mkdir()
    (ws / "target" / "t.c").write_text("int t;\n")
    (ws / ".gitignore").write_text("*.o\nbuild/\n")
    commit(ws)
    (ws / "x.o").write_text("object\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.bin").write_text("built\n")
    (ws / "new.txt").write_text("untracked\n")
    return ws


def recording(monkeypatch: pytest.MonkeyPatch, threads: list[str] | None = None
              ) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """The git children run (argv, the descriptors passed); `threads`: the name of the thread that ran each."""
    seen: list[tuple[tuple[str, ...], tuple[int, ...]]] = []
    real = checkpoint.hostproc.run

    def run(argv, **kw):
        seen.append((tuple(argv), tuple(kw.get("pass_fds", ()))))
        if threads is not None:
            threads.append(threading.current_thread().name)
        return real(argv, **kw)
    monkeypatch.setattr(checkpoint.hostproc, "run", run)
    return seen


def test_prepare_makes_the_trees_once_and_the_same_snapshot_as_taking_it_at_the_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = workspace(tmp_path)
    seen = recording(monkeypatch)
    shadow = Shadow(tmp_path / "home", ws, exclude=("target",))
    capture = shadow.prepare()
    assert sum("index-pack" in argv for argv, _fds in seen) == 1  # the exclusions were known first
    listing = shadow.git("ls-tree", "-r", "--name-only", capture.tree).decode().split()
    assert "target/t.c" not in listing and "new.txt" in listing and "src/lib/a.py" in listing
    assert shadow.git("fsck", "--connectivity-only", "--no-dangling", check=False).count(b"missing tree") == 0
    plain = Shadow(tmp_path / "plain", ws, exclude=("target",))
    plain.started_ns = 0  # trusts nothing from the repository: every file read and hashed
    _snap, hashed = plain.snapshot("s1", "before", {"call": "c1", "tool": "bash"}, watch=True)
    assert capture.tree == hashed.tree
    # The survey taken beside the capture is the one taken after it.
    early = shadow.later.survey
    assert early is not None
    after = uncovered.survey(str(ws), [n for n in shadow.git(*Shadow.SURVEY_LISTING).decode().split("\0") if n],
                             (".abhed",))
    assert early.tops == after.tops and early.tops  # x.o and build/ (ignored, untracked)
    assert gitindex.checksum(shadow.git_dir / "index") is not None


def test_the_survey_listing_runs_holding_the_store_s_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its git child gets the lock's descriptor as every other does (journal.py: a killed Abhed's children
    keep the store locked until they are gone too), though it runs in another thread."""
    ws = workspace(tmp_path)
    threads: list[str] = []
    seen = recording(monkeypatch, threads)
    Shadow(tmp_path / "home", ws).prepare()
    listings = [fds for argv, fds in seen if argv[-len(Shadow.SURVEY_LISTING):] == Shadow.SURVEY_LISTING]
    assert len(listings) == 1 and len(listings[0]) == 1
    ran_in = {name for (argv, _fds), name in zip(seen, threads) if argv[-len(Shadow.SURVEY_LISTING):] ==
              Shadow.SURVEY_LISTING}
    assert ran_in == {"abhed-survey-listing"}  # beside the capture, not after it
    others = {fds for argv, fds in seen if "ls-files" in argv}
    assert others == {listings[0]}  # the same descriptor as the capture's own listing


def test_a_survey_listing_that_fails_fails_prepare_and_leaves_no_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = workspace(tmp_path)
    real = Shadow.git

    def git_failing(self, *args, **kw):
        if args == Shadow.SURVEY_LISTING:
            raise CheckpointError("git ls-files failed in the shadow repository (exit 128): boom")
        return real(self, *args, **kw)
    monkeypatch.setattr(Shadow, "git", git_failing)
    shadow = Shadow(tmp_path / "home", ws)
    with pytest.raises(CheckpointError, match="boom"):
        shadow.prepare()
    assert not [t for t in threading.enumerate() if t.name == "abhed-survey-listing"]
    monkeypatch.setattr(Shadow, "git", real)
    assert shadow.prepare().tree  # the next one does it all again (the store was left consistent)


def test_a_later_prepare_with_a_survey_to_start_from_starts_no_listing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = workspace(tmp_path)
    shadow = Shadow(tmp_path / "home", ws)
    shadow.prepare()
    assert shadow.later.survey is not None
    started: list[str] = []
    monkeypatch.setattr(checkpoint._Early, "start", lambda self: started.append("started"))
    shadow.prepare()
    assert started == []


def test_trees_are_made_once_without_exclusions_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    repository(ws)
    made: list[int] = []
    real = seed.trees_of
    def counted(entries):
        made.append(len(entries))
        return real(entries)
    monkeypatch.setattr(seed, "trees_of", counted)
    shadow = Shadow(tmp_path / "home", ws)
    capture = shadow.prepare()
    assert made == [6]
    assert capture.tree == git(ws, "rev-parse", "HEAD^{tree}").strip()


def test_a_capture_that_fails_leaves_no_listing_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing's git child holds the store's lock: prepare does not return, even failing, while it runs."""
    ws = workspace(tmp_path)

    real = Shadow.git

    def git_slow(self, *args, **kw):
        if args == Shadow.SURVEY_LISTING:
            time.sleep(0.5)  # still running when the specials fail
        return real(self, *args, **kw)

    def specials_failing(self, since=None):
        raise CheckpointError("the specials could not be listed")
    monkeypatch.setattr(Shadow, "git", git_slow)
    monkeypatch.setattr(Shadow, "_specials", specials_failing)
    with pytest.raises(CheckpointError, match="specials"):
        Shadow(tmp_path / "home", ws).prepare()
    assert not [t for t in threading.enumerate() if t.name == "abhed-survey-listing"]
