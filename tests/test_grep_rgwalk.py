"""rg walking by itself in the read-only view (abhed/files/rgwalk.py): the same answer, notes and
facts as the Python walk's path on tricky ignore trees, the fallback wherever rg's walk could differ
or cannot say what a note needs, and the rg behaviour the walk relies on, pinned."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from abhed.files import rgwalk, ripgrep
from abhed.tools import grep as grep_tool
from abhed_testing import Tools

MODES = ("files_with_matches", "count", "content")


def _tools(ws: Path, home: Path, backend: str = "bwrap") -> Tools:
    tools = Tools(ws, home)
    tools.settings.search.backend = "rg"
    tools.settings.sandbox.backend = backend
    return tools


def _both(ws: Path, home: Path, monkeypatch, walked: bool = True, max_file_bytes: int | None = None, **args):
    """The call on rg's own walk and on the Python walk (RG_WALK off): the same content and facts;
    `walked`: whether rg's walk answered (else it fell back). Returns rg's walk's result."""
    results = []
    for on in (True, False):
        monkeypatch.setattr(grep_tool, "RG_WALK", on)
        tools = _tools(ws, home)
        if max_file_bytes is not None:
            tools.settings.search.max_file_bytes = max_file_bytes
        results.append(tools("grep", **args))
    mine, theirs = results
    assert mine.metadata["rg_walk"] is walked and theirs.metadata["rg_walk"] is False
    assert mine.content == theirs.content
    assert {k: v for k, v in mine.metadata.items() if k != "rg_walk"} == \
        {k: v for k, v in theirs.metadata.items() if k != "rg_walk"}
    return mine


def _write(ws: Path, files: dict[str, str | bytes]) -> None:
    for rel, text in files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())


@pytest.fixture
def tricky(ws: Path) -> Path:
    """Negation, nested .gitignore overriding a shallower one, dir-only and anchored rules, an
    exclusion at depth, hidden (dot) files and directories, a symlink, a binary file, a .git,
    .ignore and .rgignore files (filewalk reads neither)."""
    _write(ws, {
        ".gitignore": "*.log\n!keep.log\nbuild/\n/top.txt\nsub/deep/*.gen\ndocs/**/tmp\n",
        ".git/info/exclude": "secret.txt\n",
        ".git/HEAD": "needle in git\n",
        "a.log": "needle\n", "keep.log": "needle\n", "top.txt": "needle\n", "x/top.txt": "needle\n",
        "secret.txt": "needle\n", "x/secret.txt": "needle\n",
        "build/out.c": "needle\n", "x/build/out.c": "needle\n",
        "sub/.gitignore": "!a.log\nlocal.c\n", "sub/a.log": "needle\n", "sub/local.c": "needle\n",
        "sub/deep/x.gen": "needle\n", "sub/deep/y.c": "needle\n", "sub/deep/.hidden.c": "needle\n",
        "docs/a/tmp/t.md": "needle\n", "docs/a/ok.md": "needle\n",
        "deep/er/node_modules/m.js": "needle\n", "deep/er/__pycache__/m.pyc": "needle\n",
        ".config/c.toml": "needle = 1\n", ".env": "needle\n",
        "bin.dat": b"needle\0\n", "plain.c": "int needle;\nint needle2;\n" + "hay\n" * 30 + "needle\n",
        "empty.txt": "", ".ignore": "plain.c\n", "sub/.rgignore": "deep/\n",   # (rg's own files: not read)
    })
    os.symlink("plain.c", ws / "link.c")
    os.symlink("/etc", ws / "etc-link")
    return ws


@pytest.mark.parametrize("mode", MODES)
def test_the_walk_answers_as_the_python_walk_on_a_tricky_ignore_tree(tricky, home, monkeypatch, mode):
    result = _both(tricky, home, monkeypatch, pattern="needle", output_mode=mode)
    assert "not searched, ignored by .gitignore" in result.content and "binary file(s) matched" in result.content
    for shown in ("keep.log", "sub/a.log", "x/top.txt", "sub/deep/y.c", "sub/deep/.hidden.c", ".config/c.toml", ".env"):
        assert f"{tricky}/{shown}" in result.content, shown
    named = {line.split(":")[0] for line in result.content.splitlines()}
    for hidden in ("a.log", "top.txt", "secret.txt", "build/out.c", "x/build/out.c", "sub/local.c", "sub/deep/x.gen",
                   "docs/a/tmp/t.md", "deep/er/node_modules/m.js", ".git/HEAD", "link.c"):
        assert f"{tricky}/{hidden}" not in named, hidden


@pytest.mark.parametrize("args", [{"path": "sub"}, {"path": "sub/deep"}, {"path": "build"}, {"path": "docs/a/tmp"}])
def test_a_subdirectory_and_an_ignored_root_answer_as_the_python_walk(tricky, home, monkeypatch, args):
    """A subdirectory: the root's .gitignore and .git/info/exclude are its parents' rules (in the
    view); a searched directory the rules ignore is searched (asking for it is how to include it)."""
    _both(tricky, home, monkeypatch, pattern="needle", path=str(tricky / args["path"]))


@pytest.mark.parametrize("glob", ["*.log", "!*.log", "*.{c,md}", "**/*.c", "sub/*.log", "[ab].log"])
def test_a_glob_is_listed_by_the_python_walk(tricky, home, monkeypatch, glob):
    """rg's --glob overrides .gitignore, and as a file type rg logs every file it leaves out (80 us
    a line): the Python walk lists the files of a call with a glob."""
    _both(tricky, home, monkeypatch, walked=False, pattern="needle", glob=glob)


def test_a_root_whose_walk_logs_many_left_out_entries_goes_to_the_python_walk(ws, home, monkeypatch):
    """A built tree (every object file ignored): rg's log of them costs more than the Python walk;
    the next calls on that root take the Python walk for a while."""
    monkeypatch.setattr(rgwalk, "NOISY_ENTRIES", 5)
    monkeypatch.setattr(rgwalk, "_noisy_roots", {})
    _write(ws, {".gitignore": "*.o\n", **{f"m{i}.o": "needle\n" for i in range(6)}, "m.c": "needle\n"})
    assert _both(ws, home, monkeypatch, pattern="needle").metadata["rg_walk"]
    _both(ws, home, monkeypatch, walked=False, pattern="needle")
    monkeypatch.setattr(rgwalk, "NOISY_FOR_S", 0.0)
    assert _both(ws, home, monkeypatch, pattern="needle").metadata["rg_walk"]


def test_no_match_says_how_many_files_were_searched_and_what_was_not(tricky, home, monkeypatch):
    result = _both(tricky, home, monkeypatch, max_file_bytes=20, pattern="nowhere-to-be-found")
    assert "NOT searched, over grep's limit" in result.content and str(tricky / "plain.c") in result.content
    assert f"no matches for nowhere-to-be-found in the {result.metadata['files_searched']} file(s) searched" \
        in result.content


def test_files_over_the_limit_and_mapped_files_as_the_python_walk(ws, home, monkeypatch):
    monkeypatch.setattr(ripgrep, "MMAP_FROM", 200)
    _write(ws, {f"d{i}/f.txt": "needle\n" * (10 + 30 * i) for i in range(6)})   # 70 .. 1060 bytes
    for mode in MODES:
        result = _both(ws, home, monkeypatch, max_file_bytes=800, pattern="needle", output_mode=mode)
        assert "2 file(s) NOT searched, over grep's limit of " in result.content
        assert mode == "content" or f"{ws}/d3/f.txt" in result.content   # 700 bytes: searched mapped, by name


def test_names_with_newlines_and_not_utf8_answer_as_the_python_walk(ws, home, monkeypatch):
    """A name rg's log cannot carry (a newline splits its line; not UTF-8 prints as U+FFFD) falls
    back where the log holds it; in the results (NUL-separated, raw bytes) it is exact."""
    _write(ws, {"a\nb.txt": "needle\n", "ok.txt": "needle\n"})
    (ws / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"needle\n")
    for mode in ("files_with_matches", "count"):
        _both(ws, home, monkeypatch, pattern="needle", output_mode=mode)
    (ws / ".gitignore").write_text("*.txt\n!ok.txt\n")
    _both(ws, home, monkeypatch, walked=False, pattern="needle")   # ignored: the names are in rg's log
    os.unlink(ws / "a\nb.txt")
    result = _both(ws, home, monkeypatch, walked=False, pattern="needle")   # the one not UTF-8 alone
    assert "exclusions: 1 file. To include one" in result.content


def test_rules_above_the_root_fall_back_to_the_python_walk(tmp_path, home, monkeypatch):
    """A parent's .gitignore is not in the view (binding it would put a file outside the roots
    within reach of a swapped name): the Python walk reads it."""
    (tmp_path / "repo" / "ws").mkdir(parents=True)
    (tmp_path / "repo" / ".gitignore").write_text("*.log\n")
    ws = (tmp_path / "repo" / "ws").resolve()
    _write(ws, {"a.log": "needle\n", "b.txt": "needle\n"})
    result = _both(ws, home, monkeypatch, walked=False, pattern="needle")
    assert f"{ws}/a.log" not in result.content


def test_a_nested_repositorys_exclude_file_falls_back(tricky, home, monkeypatch):
    """rg reads .git/info/exclude in every directory, the Python walk at the root and above: a
    nested repository's is seen in rg's log (its .git left out) and the Python walk answers."""
    _write(tricky, {"nested/.git/info/exclude": "inner.c\n", "nested/inner.c": "needle\n"})
    _write(tricky, {"other/.git/info/exclude": "# comments only, as git init writes it\n", "other/o.c": "needle\n"})
    assert _both(tricky, home, monkeypatch, pattern="needle", path=str(tricky / "other")).metadata["rg_walk"]
    result = _both(tricky, home, monkeypatch, walked=False, pattern="needle")
    assert f"{tricky}/nested/inner.c" in result.content


def test_an_unreadable_directory_falls_back(ws, home, monkeypatch):
    """rg in the view holds no capability: a directory it cannot list (which host root's walk may
    list) is said on its standard error, and the Python walk answers, naming it if it cannot either."""
    _write(ws, {"a/f.txt": "needle\n", "b/g.txt": "needle\n"})
    os.chmod(ws / "a", 0)
    try:
        result = _both(ws, home, monkeypatch, walked=False, pattern="needle")
    finally:
        os.chmod(ws / "a", 0o755)
    assert f"{ws}/b/g.txt" in result.content


def test_an_operator_exclusion_that_is_not_a_plain_name_falls_back(tricky, home, monkeypatch):
    for on in (True, False):
        monkeypatch.setattr(grep_tool, "RG_WALK", on)
        tools = _tools(tricky, home)
        tools.settings.search.exclude = [*tools.settings.search.exclude, "sub/deep"]
        result = tools("grep", pattern="needle")
        assert result.metadata["rg_walk"] is False and f"{tricky}/sub/deep/y.c" not in result.content


def test_a_pattern_rg_refuses_is_searched_by_the_built_in_engine(tricky, home, monkeypatch):
    nested = "(" * 300 + "needle" + ")" * 300   # RE2 nests 1000 groups, rg's engine 250
    monkeypatch.setattr(grep_tool, "RG_WALK", True)
    result = _tools(tricky, home)("grep", pattern=nested, output_mode="count")
    assert "rg could not search with this pattern" in result.content and f"{tricky}/plain.c:3" in result.content


def test_without_bwrap_there_is_no_rg_walk(tricky, home, monkeypatch):
    monkeypatch.setattr(grep_tool, "RG_WALK", True)
    for backend in ("none", "microvm"):
        result = _tools(tricky, home, backend)("grep", pattern="needle")
        assert result.metadata["rg_walk"] is False and result.metadata["rg_jail"] is False


# -- the rg behaviour the walk relies on (an rg upgrade that changes it fails here) ----------------

def _rg(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ripgrep.find_rg()), "--no-config", *args], cwd=cwd, capture_output=True)


def test_rg_logs_what_the_walk_reads(tmp_path):
    _write(tmp_path, {".gitignore": "*.log\n", "a.log": "x\n", "big.txt": "x\n" * 100, "b.txt": "x\n",
                      "n/skip.me": "x\n"})
    proc = _rg(tmp_path, "--debug", "--stats", "--null", "-l", "--no-require-git", "--glob=!n", "--hidden",
               "--max-filesize=50", "x", "./")
    log = proc.stderr.decode()
    assert "rg: DEBUG|ignore::walk|" in log
    said = [line.split("|", 2)[2].partition(": ")[2] for line in log.splitlines()
            if line.startswith("rg: DEBUG|ignore::walk|")]
    assert "ignoring ./big.txt: 200 bytes" in said
    assert any(rgwalk.RULE_LINE.match(s) and rgwalk.RULE_LINE.match(s).group(1, 2) == ("a.log", "Gitignore")
               for s in said), said
    assert any(rgwalk.RULE_LINE.match(s) and rgwalk.RULE_LINE.match(s).group(1, 2) == ("n", "Override")
               for s in said), said
    stats = rgwalk.STATS.search(proc.stdout)
    assert stats and stats.group(2) == b"2" and proc.stdout[:stats.start()] == b"./b.txt\0"   # (and .gitignore)


# -- races on rg's own walk -------------------------------------------------------------------------

def test_a_stalled_walk_is_answered_by_the_python_walk(tricky, home, monkeypatch):
    """rg stuck (a FIFO swapped in during its walk: rgjail.Watch) is killed, and the Python walk's
    path (descriptors for what rg cannot read) answers the call."""
    from abhed.common import hostproc

    real = hostproc.run
    stalled = []

    def stall(argv, **kwargs):
        if "--debug" in argv:
            stalled.append(argv)
            raise hostproc.Stuck("`bwrap` was stopped: it could not go on")
        return real(argv, **kwargs)
    monkeypatch.setattr(rgwalk.hostproc, "run", stall)
    result = _both(tricky, home, monkeypatch, walked=False, pattern="needle", output_mode="count")
    assert stalled and f"{tricky}/plain.c:3" in result.content


def test_a_fifo_in_the_tree_is_skipped_as_the_python_walk_skips_it(tricky, home, monkeypatch):
    os.mkfifo(tricky / "sub" / "pipe.c")
    result = _both(tricky, home, monkeypatch, pattern="needle", output_mode="count")
    assert "pipe.c" not in result.content


@pytest.mark.slow
def test_swapper_loop_through_rgs_own_walk_never_leaks(tmp_path, home):
    """A directory and a symlink to a secret outside exchanged in a loop while rg walks: no byte of
    the secret, and rg's own walk answered some of the calls (the race was run on it)."""
    from test_grep_jail import CALLS, SECRET, SWAPPER, _stop, _swapper

    ws = (tmp_path / "ws").resolve()
    outside = tmp_path / "outside"
    _write(outside, {"f.txt": f"{SECRET} inside\n", "g.txt": f"{SECRET} inside\n"})
    _write(ws, {"d/f.txt": "inside one\n", "d/g.txt": "inside two\n", "e/h.txt": "inside three\n"})
    (ws / "link").symlink_to(outside)
    proc = _swapper(SWAPPER, ws / "d", ws / "link")
    try:
        tools = _tools(ws, home)
        answers = [tools("grep", pattern="SECRET|inside", output_mode=MODES[n % 3]) for n in range(CALLS)]
    finally:
        _stop(proc)
    assert SECRET not in "\n".join(a.content for a in answers)
    assert any(a.metadata["rg_walk"] for a in answers)


def test_a_walk_past_the_deadline_is_an_error_that_says_what_to_do(tricky, home, monkeypatch):
    from abhed.common import hostproc

    def late(argv, **kwargs):
        raise hostproc.Timeout(argv, kwargs["timeout"])
    monkeypatch.setattr(rgwalk.hostproc, "run", late)
    monkeypatch.setattr(grep_tool, "RG_WALK", True)
    result = _tools(tricky, home)("grep", pattern="needle")
    assert result.is_error and "did not finish within 300 s" in result.content
    assert f"walking {tricky}" in result.content and "a path or glob" in result.content


@pytest.mark.parametrize("cap", [1 << 20, 10])
def test_content_mode_in_one_run_or_after_a_listing_answers_as_the_python_walk(tricky, home, monkeypatch, cap):
    """Content mode: the walk's own run prints the lines when they are few; past CONTENT_WALK_BYTES
    it is stopped, and a files_with_matches walk, then the lines of the first files, answer."""
    _write(tricky, {f"many/f{i:03d}.c": "needle\n" * (i % 60) + "hay\n" for i in range(130)})
    monkeypatch.setattr(grep_tool, "CONTENT_WALK_BYTES", cap)
    runs = []
    real = rgwalk.walk
    monkeypatch.setattr(rgwalk, "walk", lambda rg, jail, regex, cwd, query, *rest: (
        runs.append(query.mode), real(rg, jail, regex, cwd, query, *rest))[1])
    for context in (0, 2):
        result = _both(tricky, home, monkeypatch, pattern="needle", output_mode="content", context=context or None)
        assert "[truncated: showing 100 matching lines from" in result.content
        assert "[more matches in this file not shown" in result.content
    assert runs == (["content"] * 2 if cap > 10 else ["content", "files_with_matches"] * 2)

