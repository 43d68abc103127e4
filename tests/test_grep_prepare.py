"""The grep tool prepares any pattern in bounded time (issue 30, finding 9: "a grep call costs the
host an hour").

grep is read-only, so it runs unasked in every mode, plan included; its pattern was prepared in
Abhed's own process (fallback_grep's whole matcher, also when rg searched), in time cubic in its
length, and `(((a|b)*)*){0,1000}c` ended in RecursionError. Now: a pattern over 64 KiB is refused,
rg's calls build only a parse and a translation, fallback_grep's matcher is built only when it
searches (once per call), all of it under a deadline (grepsearch.PREPARE_SECONDS) that fails the
call with a teaching error, and what rg cannot compile is searched by fallback_grep.
These tests run the real attack through the real command line (`abhed tool grep`) and judge what
the host process did: its exit status, that no traceback reached stderr, what it answered.
"""

from __future__ import annotations

import json

import pytest
from test_grep import files, grep  # noqa: F401 - the fixture running each test on both backends

from abhed.files import grepsearch, ripgrep
from abhed.tools import grep as grep_tool
from abhed_testing import abhed

KIB = 1024
NESTED_300 = "(" * 300 + "needle" + ")" * 300      # RE2 nests 1000 groups, rg's regex engine 250
ATTACKS = {
    "a 64 KiB literal": ("abcdefghij" * 6600)[:64 * KIB - 16],
    "[[:alpha:]] x 5900": "[[:alpha:]]" * 5900,
    "an alternation of 9,000 words": "|".join(f"w{i:05d}" for i in range(9000)),
    "groups nested 999 deep, side by side": ("(" * 999 + "ab" + ")" * 999) * 32,
    "the issue's nested stars": "(((a|b)*)*){0,1000}c",
    "64 KiB of counted nested stars": "(((a|b)*)*){0,1000}c" * 3200,
    "\\pL x 2000": "\\pL" * 2000,
}


def cli_grep(ws, pattern: str, backend: str, **options) -> tuple[str, str]:
    proc = abhed("tool", "grep", json.dumps({"pattern": pattern, **options}), "--workspace", str(ws),
                 env={"ABHED_GREP_BACKEND": backend})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "Internal error" not in proc.stdout, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


@pytest.mark.parametrize("backend", ["python", "rg"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_64_kib_pathological_pattern_gets_a_result_or_a_teaching_error(ws, home, backend, attack):
    files(ws, **{"a.txt": "abc\nw00042\nabab\n", "b.txt": "nothing here\n"})
    pattern = ATTACKS[attack]
    assert len(pattern.encode()) <= grep_tool.MAX_PATTERN_BYTES
    out, _ = cli_grep(ws, pattern, backend)
    assert out.startswith((str(ws / "a.txt"), "[no matches for ")) or out.startswith(
        "invalid RE2 pattern: pattern too large") and "fix: shrink counted repetitions" in out, out[:500]
    assert len(out) < 4 * KIB, "an answer never repeats a long pattern whole"


def test_the_issues_patterns_find_their_lines(grep, ws):
    files(ws, **{"stars.txt": "x\nabbac\n", "alpha.txt": "A" * 2000 + "\n", "lit.txt": "7" * 2000 + "\n",
                 "other.txt": "1\n"})
    assert grep.ok("grep", pattern="(((a|b)*)*){0,1000}c") == str(ws / "stars.txt")
    assert grep.ok("grep", pattern="[[:alpha:]]" * 2000) == str(ws / "alpha.txt")
    assert grep.ok("grep", pattern="7" * 2000, output_mode="count").startswith(f"{ws / 'lit.txt'}:1\n")


def test_a_passed_budget_fails_the_call_clearly(grep, ws, monkeypatch, capsys):
    files(ws, **{"a.txt": "ab\n"})
    monkeypatch.setattr(grepsearch, "PREPARE_SECONDS", 0.0)
    pattern = "(?:ab|cd)" * 300
    result = grep("grep", pattern=pattern)
    assert result.is_error and result.metadata["error_kind"] == "tool_error"
    assert "pattern too complex: preparing it for the search took more than 0 s" in result.content
    assert "fix: simplify the pattern" in result.content and "split a long alternation" in result.content
    assert str(ws / "a.txt") not in result.content
    assert "Traceback" not in capsys.readouterr().err


def test_the_budget_also_bounds_the_translation_for_rg(ws, home, monkeypatch):
    from abhed_testing import Tools
    files(ws, **{"a.txt": "ab\n"})
    tools = Tools(ws, home)
    tools.settings.search.backend = "rg"
    calls = []
    real = ripgrep.rg_regex

    def late(tree, query):
        calls.append(query.pattern)
        monkeypatch.setattr(grepsearch, "PREPARE_SECONDS", 0.0)   # the parse passed; now the budget is spent
        monkeypatch.setattr(ripgrep, "PREPARE_SECONDS", 0.0)
        return real(tree, query)

    monkeypatch.setattr(ripgrep, "rg_regex", late)
    err = tools.err("grep", pattern="(?:ab|cd)" * 3000)
    assert calls and "pattern too complex" in err and "fix:" in err


@pytest.mark.parametrize("char, count, refused", [("a", 64 * KIB, False), ("a", 64 * KIB + 1, True),
                                                  ("\u00e9", 32 * KIB, False), ("\u00e9", 32 * KIB + 1, True)])
def test_the_pattern_limit_counts_bytes(grep, ws, char, count, refused):
    files(ws, **{"a.txt": "x\n"})
    pattern = char * count
    result = grep("grep", pattern=pattern)
    if not refused:
        assert not result.is_error and result.content.startswith("[no matches for ")
        assert f"... ({count:,} characters) in {ws}]" in result.content
        return
    assert result.is_error
    assert result.content == (f"The pattern is {len(pattern.encode()):,} bytes, over grep's limit of 65,536 bytes. "
                              "Search for a shorter, distinctive part of it (a few dozen characters of a literal "
                              "find the same lines), or split an alternation into several grep calls.")


def test_a_pattern_at_the_argument_limit_is_refused_at_once(grep, ws):
    # A call's arguments may be 4 MiB (agent.max_argument_bytes): the refusal parses none of it.
    files(ws, **{"a.txt": "x\n"})
    err = grep.err("grep", pattern="(" * (2048 * KIB - 64) + ")" * (2048 * KIB - 64))
    assert err.startswith("The pattern is 4,194,176 bytes, over grep's limit of 65,536 bytes.")


def counted_matchers(monkeypatch) -> list[str]:
    built = []
    real = grepsearch.Matcher

    def counting(pattern, **options):
        built.append(pattern)
        return real(pattern, **options)

    monkeypatch.setattr(grepsearch, "Matcher", counting)
    return built


def test_python_search_builds_a_matcher_only_when_it_is_not_given(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_text("needle\nneedly\nhay\n")
    given = grepsearch.Matcher("needle")
    built = counted_matchers(monkeypatch)
    query = grepsearch.Query("need(le|ly)", "count")
    assert [(h.path, h.count) for h in grepsearch.python_search([str(path)], query)] == [(str(path), 2)]
    assert built == ["need(le|ly)"]
    # A caller searching twice (the grep tool) hands over the one it built: it is what searches.
    hits = grepsearch.python_search([str(path)], query, matcher=given)
    assert [(h.path, h.count) for h in hits] == [(str(path), 1)] and built == ["need(le|ly)"]


@pytest.mark.parametrize("mode", ["files_with_matches", "count", "content"])
def test_rg_searching_builds_no_fallback_matcher(ws, home, monkeypatch, mode):
    from abhed_testing import Tools
    files(ws, **{"a.txt": "needle\n"})
    built = counted_matchers(monkeypatch)
    tools = Tools(ws, home)
    tools.settings.search.backend = "rg"
    result = tools("grep", pattern="need(le|ly)", output_mode=mode)
    assert not result.is_error and result.metadata["backend"] == "rg" and str(ws / "a.txt") in result.content
    assert built == []
    tools.settings.search.backend = "python"
    result = tools("grep", pattern="need(le|ly)", output_mode=mode)
    assert result.metadata["backend"] == "fallback_grep" and built == ["need(le|ly)"]   # once, for both searches


def test_fallback_grep_searches_what_rg_cannot(ws, home):
    files(ws, **{"a.txt": "a needle\n", "b.txt": "hay\n"})
    for mode, first in (("files_with_matches", str(ws / "a.txt")), ("content", str(ws / "a.txt") + "\n1:a needle")):
        out, _ = cli_grep(ws, NESTED_300, "rg", output_mode=mode)
        assert out.startswith(first)
        assert out.endswith("[searched with the built-in engine: rg could not search with this pattern (rg exit 2: "
                            "error: exceed the maximum number of nested parentheses/brackets (250))]\n")


def test_what_rg_cannot_search_and_fallback_grep_refuses_is_a_teaching_error(grep, ws, monkeypatch):
    files(ws, **{"a.txt": "x\n"})
    monkeypatch.setattr(grepsearch, "PREPARE_SECONDS", 600.0)  # the size limit, not a loaded machine's clock
    err = grep.err("grep", pattern="(" * 300 + "\\pL{1000}" + ")" * 300)
    assert "invalid RE2 pattern: pattern too large" in err and "fix: shrink counted repetitions" in err


def test_a_pattern_too_slow_to_prepare_after_rg_hands_over_is_a_teaching_error(ws, home, monkeypatch):
    """rg refuses the pattern during the walk and the built-in engine then runs out of its time to
    prepare it: the model gets the "too complex" instruction, not an internal error."""
    from abhed_testing import Tools
    files(ws, **{"a.txt": "x\n", "b.txt": "y\n"})
    tools = Tools(ws, home)
    tools.settings.search.backend = "rg"
    monkeypatch.setattr(grepsearch, "PREPARE_SECONDS", 600.0)  # the parse and rg's translation run in time
    real = grepsearch.Query.matcher

    def out_of_time(self):  # type: ignore[no-untyped-def]
        grepsearch.PREPARE_SECONDS = 0.0  # the built-in engine's program, built once rg has refused
        return real(self)
    monkeypatch.setattr(grepsearch.Query, "matcher", out_of_time)
    result = tools("grep", pattern="(" * 300 + "\\pL{1000}" + ")" * 300)
    assert result.is_error and "Internal error" not in result.content
    assert "pattern too complex: preparing it for the search took more than 0 s" in result.content
    assert "fix: simplify the pattern" in result.content


def test_a_translation_past_rg_max_pattern_is_searched_by_fallback_grep(ws, home, monkeypatch):
    from abhed_testing import Tools
    files(ws, **{"a.txt": "caf\u00e9\n"})
    monkeypatch.setattr(ripgrep, "RG_MAX_PATTERN", 100)
    tools = Tools(ws, home)
    tools.settings.search.backend = "rg"
    result = tools("grep", pattern="caf\\pL")          # \pL is 10 KB of explicit ranges for rg
    assert not result.is_error and result.metadata["backend"] == "fallback_grep"
    assert result.content == (f"{ws / 'a.txt'}\n[searched with the built-in engine: this pattern's translation "
                              "for rg is over 0 KiB (each class becomes explicit ranges)]")
    result = tools("grep", pattern="caf.")
    assert result.metadata["backend"] == "rg" and result.content == str(ws / "a.txt")


def test_a_long_translation_reaches_rg_on_its_standard_input(grep, ws):
    # 25,000 dashes are 150 KB for rg (each `\x{2D}`): over the 128 KiB a single argument may be.
    files(ws, **{"a.txt": "a needle\n", "b.txt": "hay\n"})
    pattern = "needle|" + "-" * 25_000
    assert len(ripgrep.rust_pattern(pattern)) > 2 * ripgrep.RG_ARG_MAX
    result = grep("grep", pattern=pattern, output_mode="content")
    assert result.content == f"{ws / 'a.txt'}\n1:a needle"
    assert result.metadata["backend"] == ("rg" if grep.settings.search.backend == "rg" else "fallback_grep")


def test_rg_gets_a_short_regex_as_an_argument_and_a_long_one_on_stdin():
    query = grepsearch.Query("x")
    short = ripgrep._argv(ripgrep.Path("/rg"), query, "x" * ripgrep.RG_ARG_MAX)
    assert short[short.index("-e") + 1] == "x" * ripgrep.RG_ARG_MAX and "--file" not in short
    long = ripgrep._argv(ripgrep.Path("/rg"), query, "x" * (ripgrep.RG_ARG_MAX + 1))
    assert long[long.index("--file") + 1] == "-" and "-e" not in long and "x" * 100 not in " ".join(long)


def test_rgs_reason_is_its_error_line_not_the_regex_it_echoes():
    stderr = b"rg: regex parse error:\n    (((((((a)))))))\n    ^^^^\nerror: exceed the maximum number (250)\n"
    assert ripgrep._reason(stderr, 2) == "rg exit 2: error: exceed the maximum number (250)"
    assert ripgrep._reason(b"rg: compiled regex exceeds size limit of 1024\n", 2) == \
        "rg exit 2: rg: compiled regex exceeds size limit of 1024"
    assert ripgrep._reason(b"", -9) == "rg exit -9: "
    assert len(ripgrep._reason(b"error: " + b"x" * 5000, 2)) == len("rg exit 2: ") + 300


def test_a_no_match_answer_repeats_at_most_200_characters_of_the_pattern(grep, ws):
    files(ws, **{"a.txt": "x\n"})
    assert grep.ok("grep", pattern="y" * 200) == f"[no matches for {'y' * 200} in {ws}]"
    assert grep.ok("grep", pattern="y" * 201) == f"[no matches for {'y' * 200}... (201 characters) in {ws}]"
