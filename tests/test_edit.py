"""edit (spec §4): one test per semantic bullet and per error case, nearest-match descriptions included."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from abhed_testing import REPO, abhed

SOURCE = "def add(a, b):\n\treturn a - b\n\n\ndef sub(a, b):\n\treturn a - b\n"


@pytest.fixture
def src(tools, ws):
    path = ws / "calc.py"
    path.write_text(SOURCE)
    tools.ok("read", path=str(path))
    return path


def edit(tools, path, old, new, **extra):
    return tools("edit", path=str(path), old_string=old, new_string=new, **extra)


def test_replaces_exactly_and_shows_the_changed_region_with_line_numbers(tools, src):
    result = edit(tools, src, "def add(a, b):\n\treturn a - b", "def add(a, b):\n\treturn a + b")
    assert not result.is_error
    assert result.content.startswith(f"Edited {src}: replaced 1 occurrence at line 1 (2 lines replaced by 2 lines).")
    assert "     1\tdef add(a, b):\n     2\t\treturn a + b\n     3\t\n     4\t\n     5\tdef sub(a, b):" in result.content
    assert src.read_text() == SOURCE.replace("return a - b", "return a + b", 1)


def test_requires_a_prior_read(tools, ws):
    (ws / "f.py").write_text("x = 1\n")
    err = tools.err("edit", path=str(ws / "f.py"), old_string="x = 1", new_string="x = 2")
    assert f"You have not read {ws / 'f.py'} in this session" in err and "Call read" in err
    assert (ws / "f.py").read_text() == "x = 1\n"


def test_several_matches_give_the_count_and_every_line(tools, src):
    result = edit(tools, src, "\treturn a - b", "\treturn 0")
    assert result.is_error
    assert f"old_string matches 2 times in {src} (at lines 2, 6); nothing was changed." in result.content
    assert "more surrounding lines" in result.content and "replace_all" in result.content
    assert src.read_text() == SOURCE


def test_overlapping_occurrences_count_as_ambiguous(tools, ws):
    (ws / "a.txt").write_text("aaa\n")
    tools.ok("read", path=str(ws / "a.txt"))
    err = tools.err("edit", path=str(ws / "a.txt"), old_string="aa", new_string="b")
    assert "matches 2 times" in err and "(at lines 1, 1)" in err


def test_replace_all_changes_every_occurrence(tools, src):
    out = edit(tools, src, "return a - b", "return 0", replace_all=True).content
    assert out.startswith(f"Edited {src}: replaced 2 occurrences at lines 2, 6")
    assert "more changed regions" not in out and " more (" not in out  # all shown: no note of more
    assert src.read_text().count("return 0") == 2


def test_identical_old_and_new_is_an_error(tools, src):
    err = edit(tools, src, "\treturn a - b", "\treturn a - b").content
    assert "identical" in err and "would change nothing" in err


def test_empty_old_string_on_an_existing_file_is_an_error(tools, src):
    err = edit(tools, src, "", "x").content
    assert f"old_string is empty, which is only valid to create a new file, but {src} exists (6 lines)" in err
    assert "use write" in err


def test_empty_old_string_creates_a_new_file(tools, ws):
    out = tools.ok("edit", path=str(ws / "new.py"), old_string="", new_string="print(1)\n")
    assert out.startswith(f"Created {ws / 'new.py'}: wrote 9 bytes, 1 lines.")
    assert (ws / "new.py").read_text() == "print(1)\n"


def test_missing_file_suggests_paths_and_write(tools, src):
    err = tools.err("edit", path=str(src.with_name("calc.pyy")), old_string="x", new_string="y")
    assert f"File not found: {src.with_name('calc.pyy')}" in err and str(src) in err and "use write" in err


def test_no_match_reports_tabs_versus_spaces_with_the_line(tools, src):
    err = edit(tools, src, "def sub(a, b):\n    return a - b", "x").content
    assert err.startswith(f"old_string was not found in {src}; nothing was changed.")
    assert "The nearest partial match is at lines 5-6" in err
    assert "Line 6: indentation differs (tabs vs spaces): the file has 1 tab, old_string has 4 spaces." in err
    assert "     5\tdef sub(a, b):" in err  # the file's text, numbered, to copy from


def test_no_match_reports_trailing_whitespace(tools, ws):
    (ws / "t.py").write_text("x = 1   \ny = 2\n")
    tools.ok("read", path=str(ws / "t.py"))
    err = tools.err("edit", path=str(ws / "t.py"), old_string="x = 1\ny = 2", new_string="z")
    assert 'Line 1: trailing whitespace differs: the file line is "x = 1   ", old_string has "x = 1".' in err


def test_no_match_reports_crlf_line_endings(tools, ws):
    (ws / "d.txt").write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    tools.ok("read", path=str(ws / "d.txt"))
    err = tools.err("edit", path=str(ws / "d.txt"), old_string="alpha\nbeta", new_string="x")
    assert "The file uses CRLF (\\r\\n) line endings and your old_string uses \\n" in err


def test_no_match_reports_different_indentation_depth(tools, ws):
    (ws / "i.py").write_text("class A:\n        def f(self):\n            pass\n")
    tools.ok("read", path=str(ws / "i.py"))
    err = tools.err("edit", path=str(ws / "i.py"), old_string="    def f(self):\n        pass", new_string="x")
    assert "Line 2: indentation differs: the file has 8 spaces, old_string has 4 spaces." in err
    assert "Line 3: indentation differs: the file has 12 spaces, old_string has 8 spaces." in err


def test_no_match_reports_the_line_and_column_that_differ(tools, ws):
    text = "".join(f"value_{i} = compute({i})\n" for i in range(200))
    (ws / "v.py").write_text(text)
    tools.ok("read", path=str(ws / "v.py"))
    err = tools.err("edit", path=str(ws / "v.py"),
                    old_string="value_120 = compute(120)\nvalue_121 = compute[121]\nvalue_122 = compute(122)",
                    new_string="x")
    assert "nearest partial match is at lines 121-123" in err
    assert ('Line 122 differs from column 20: the file has "value_121 = compute(121)", '
            'old_string has "value_121 = compute[121]".') in err


def test_no_match_reports_a_missing_line(tools, ws):
    (ws / "m.py").write_text("def f():\n    a = 1\n    b = 2\n    return a + b\n")
    tools.ok("read", path=str(ws / "m.py"))
    err = tools.err("edit", path=str(ws / "m.py"), old_string="def f():\n    a = 1\n    return a + b", new_string="x")
    assert 'The file has line 3: "    b = 2", which old_string lacks.' in err


def test_no_match_reports_an_extra_line(tools, ws):
    (ws / "m.py").write_text("def f():\n    a = 1\n    return a\n")
    tools.ok("read", path=str(ws / "m.py"))
    err = tools.err("edit", path=str(ws / "m.py"), old_string="def f():\n    a = 1\n    a += 1\n    return a",
                    new_string="x")
    assert 'old_string has the line "    a += 1", which is not in the file near line 3.' in err


def test_no_match_reports_typographic_quotes(tools, ws):
    (ws / "q.py").write_text("print('it’s here')\n")
    tools.ok("read", path=str(ws / "q.py"))
    err = tools.err("edit", path=str(ws / "q.py"), old_string="print('it's here')", new_string="x")
    assert "Line 1: the file has \"’\" (U+2019) where old_string has \"'\" (U+0027)." in err


def test_no_match_reports_double_escaping(tools, ws):
    (ws / "e.py").write_text("a = 1\nb = 2\n")
    tools.ok("read", path=str(ws / "e.py"))
    err = tools.err("edit", path=str(ws / "e.py"), old_string="a = 1\\nb = 2", new_string="x")
    assert "escaped twice" in err


def test_no_match_with_nothing_similar_says_so(tools, src):
    err = edit(tools, src, "completely unrelated text that is nowhere", "x").content
    assert "No similar text exists in the file (6 lines)" in err and "Read the file again" in err


def test_retrying_an_applied_edit_says_it_may_already_be_applied(tools, src):
    edit(tools, src, "def sub(a, b):\n\treturn a - b", "def sub(a, b):\n\treturn b - a")
    err = edit(tools, src, "def sub(a, b):\n\treturn a - b", "def sub(a, b):\n\treturn b - a").content
    assert "new_string already appears at line 5" in err and "already have been applied" in err


def test_changed_file_with_a_still_unique_match_is_applied_with_a_note(tools, src):
    src.write_text(SOURCE + "\n# added by someone else\n")
    out = edit(tools, src, "def add(a, b):", "def add(x, y):").content
    assert out.startswith(f"Note: {src} had changed on disk since you read it; old_string still matched exactly once")
    assert src.read_text().startswith("def add(x, y):") and src.read_text().endswith("# added by someone else\n")


def test_changed_file_without_a_unique_match_is_refused(tools, src):
    src.write_text("def add(a, b):\n    pass\ndef add(a, b):\n    pass\n")
    err = edit(tools, src, "def add(a, b):", "def plus(a, b):").content
    assert f"{src} changed on disk since you read it" in err and "now matches 2 times" in err and "Read the file again" in err


def test_consecutive_edits_need_no_reread(tools, src):
    assert not edit(tools, src, "def add", "def plus").is_error
    assert not edit(tools, src, "def sub", "def minus").is_error


def test_crlf_and_bom_are_kept(tools, ws):
    path = ws / "w.txt"
    path.write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\nthree\r\n")
    tools.ok("read", path=str(path))
    tools.ok("edit", path=str(path), old_string="two", new_string="TWO")
    assert path.read_bytes() == b"\xef\xbb\xbfone\r\nTWO\r\nthree\r\n"


def test_invalid_utf8_bytes_elsewhere_survive_an_edit(tools, ws):
    path = ws / "l.txt"
    path.write_bytes(b"caf\xe9\nkeep \xff\xfe bytes\nchange me\n")
    tools.ok("read", path=str(path))
    tools.ok("edit", path=str(path), old_string="change me", new_string="changed")
    assert path.read_bytes() == b"caf\xe9\nkeep \xff\xfe bytes\nchanged\n"


def test_mode_is_preserved(tools, ws):
    path = ws / "x.sh"
    path.write_text("echo a\n")
    path.chmod(0o700)
    tools.ok("read", path=str(path))
    tools.ok("edit", path=str(path), old_string="echo a", new_string="echo b")
    assert path.stat().st_mode & 0o777 == 0o700


def test_binary_file_is_refused(tools, ws):
    (ws / "b.bin").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    err = tools.err("edit", path=str(ws / "b.bin"), old_string="PNG", new_string="JPG")
    assert "PNG image" in err


def test_oversized_file_is_refused_with_an_alternative(make_tools, ws):
    tools = make_tools(edit_max_bytes=1024)
    (ws / "big.txt").write_text("x" * 2000)
    err = tools.err("edit", path=str(ws / "big.txt"), old_string="x", new_string="y")
    assert "over the 1.0 KiB limit" in err and "sed -i" in err and "files.edit_max_bytes" in err


def test_permission_denied_leaves_the_file_and_says_so(ws, home):
    path = ws / "ro.py"
    path.write_text("x = 1\n")
    ws.chmod(0o555)  # the temporary file cannot be created beside the target
    try:
        env = {"ABHED_HOME": str(home)}
        session = ["--workspace", str(ws), "--session", "perm"]
        abhed("tool", "read", f'{{"path": "{path}"}}', *session, env=env)
        proc = abhed("tool", "edit", f'{{"path": "{path}", "old_string": "x = 1", "new_string": "x = 2"}}', *session,
                     env=env, obey_permissions=True)
    finally:
        ws.chmod(0o755)
    assert f"Permission denied editing {path}" in proc.stdout and f"The original {path} is unchanged" in proc.stdout
    assert path.read_text() == "x = 1\n"


DISK_FULL = r"""
set -e
mount -t tmpfs -o size=64k tmpfs "$1"
a=$(head -c 40000 /dev/zero | tr '\0' 'a'); b=$(head -c 40000 /dev/zero | tr '\0' 'b')
printf %s "$a" > "$1/f.txt"
"$2" -m abhed tool read "{\"path\": \"$1/f.txt\"}" --workspace "$1" --session full >/dev/null
"$2" -m abhed tool edit "{\"path\": \"$1/f.txt\", \"old_string\": \"$a\", \"new_string\": \"$b\"}" --workspace "$1" --session full
echo "AFTER: $(tr -d a < "$1/f.txt" | wc -c) non-a bytes, $(wc -c < "$1/f.txt") in all"
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare(1) is needed to mount a small tmpfs")
def test_disk_full_leaves_the_original_intact(tmp_path, home):
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", DISK_FULL, "sh", str(mnt), sys.executable],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"No space left on the device while editing {mnt / 'f.txt'}" in proc.stdout
    assert f"The original {mnt / 'f.txt'} is unchanged" in proc.stdout
    assert "AFTER: 0 non-a bytes, 40000 in all" in proc.stdout


def test_a_file_that_grows_past_the_limit_while_read_is_refused_not_cut(make_tools, ws):
    """The size check uses what was read, not only the stat: a file growing meanwhile is never cut."""
    import os

    from abhed.files import textfile
    path = ws / "grows.txt"
    path.write_text("x\n" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        path.write_text("x\n" * 1000)  # grew after the stat
        with pytest.raises(Exception) as err:
            textfile.load(fd, st, path, 1024, "editing")
    finally:
        os.close(fd)
    assert "over the 1.0 KiB limit for editing" in str(err.value)


def test_edit_of_a_file_in_a_missing_directory_creates_nothing(make_tools, ws):
    err = make_tools(create_parents=True).err("edit", path=str(ws / "missing" / "f.txt"), old_string="a",
                                              new_string="b")
    assert f"File not found: {ws / 'missing' / 'f.txt'}." in err and "To create a new file, use write" in err
    assert not (ws / "missing").exists()


def test_very_many_matches_are_counted_up_to_a_bound_and_replace_all_still_changes_every_one(tools, ws):
    """The ambiguity scan stops at 10 000 positions (bounded work and output); it says "at least", and
    replace_all is not bounded by it: every occurrence changes."""
    path = ws / "many.txt"
    path.write_text("x\n" * 12_000)
    tools.ok("read", path=str(path))
    err = tools.err("edit", path=str(path), old_string="x", new_string="y")
    assert "old_string matches at least 10000 times" in err and "(at lines 1, 2, 3," in err
    assert "50 and 9950 more)" in err and path.read_text() == "x\n" * 12_000
    tools.ok("edit", path=str(path), old_string="x", new_string="y", replace_all=True)
    assert path.read_text() == "y\n" * 12_000


def test_replace_all_reports_the_exact_count_beyond_any_bound(tools, ws):
    """Issue 33 #9: the count was the ambiguity scan's, capped at 10 000; it is str.replace's own."""
    path = ws / "many.txt"
    path.write_text("x\n" * 12_345)
    tools.ok("read", path=str(path))
    result = tools("edit", path=str(path), old_string="x", new_string="yy", replace_all=True)
    lines = ", ".join(map(str, range(1, 51)))
    assert result.content.startswith(f"Edited {path}: replaced 12345 occurrences at lines {lines} and 12295 more "
                                      "(1 line replaced by 1 line).")
    assert result.content.endswith("[... 12340 more changed regions not shown]")
    assert result.metadata["replacements"] == 12_345 and path.read_text() == "yy\n" * 12_345


@pytest.mark.parametrize("text, old, count, after", [
    ("aaaa\n", "aa", 2, "bb\n"),  # 3 overlapping matches, 2 replaced
    ("aaa\n", "aa", 1, "ba\n"),  # 2 overlapping (ambiguous without replace_all), 1 replaced
    ("ababa\nababa\n", "aba", 2, "Xba\nXba\n"),
    ("x\ny\n", "x\ny", 1, "X\n"),
])
def test_replace_all_counts_what_it_replaced_not_overlapping_matches(tools, ws, text, old, count, after):
    path = ws / "o.txt"
    path.write_text(text)
    tools.ok("read", path=str(path))
    new = "X" if "\n" in old else ("b" if old == "aa" else "X")
    result = tools("edit", path=str(path), old_string=old, new_string=new, replace_all=True)
    assert result.metadata["replacements"] == count, result.content
    word = "occurrence" if count == 1 else "occurrences"
    assert result.content.startswith(f"Edited {path}: replaced {count} {word} at line")
    assert path.read_text() == after


def test_a_changed_file_matching_beyond_the_bound_says_at_least(tools, ws):
    path = ws / "many.txt"
    path.write_text("x\n")
    tools.ok("read", path=str(path))
    path.write_text("x\n" * 10_001)
    err = tools.err("edit", path=str(path), old_string="x", new_string="y")
    assert "changed on disk since you read it" in err and "old_string now matches at least 10000 times" in err
