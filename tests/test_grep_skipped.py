"""Issue 14 item 6: grep never answers "no matches" for a file it did not search, and rg's memory
and output stay bounded on a very long line."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["rg", "python"])
def grep(tools, request):
    tools.settings.search.backend = request.param
    tools.settings.search.max_file_bytes = 1000
    return tools


def test_a_skipped_target_file_is_not_reported_as_no_match(grep, ws):
    big = ws / "big.txt"
    big.write_text("x" * 3000 + " needle\n")
    out = grep.ok("grep", pattern="needle", path=str(big))
    assert "no matches" not in out
    assert f"[{big} was NOT searched (see below): this is not a \"no match\"" in out
    assert f"1 file(s) NOT searched, over grep's limit of 1000 bytes per file (search.max_file_bytes): {big} (2.9 KiB)" in out
    assert "rg -n --max-columns 300 --max-columns-preview 'PATTERN' FILE" in out


def test_a_search_with_skipped_files_says_its_no_match_is_partial(grep, ws):
    (ws / "big.txt").write_text("x" * 3000 + " needle\n")
    (ws / "small.txt").write_text("hay\n")
    out = grep.ok("grep", pattern="needle")
    assert f"[no matches for needle in the 1 file(s) searched in {ws}; some files were NOT searched (see below)]" in out
    assert f"{ws / 'big.txt'} (2.9 KiB)" in out


def test_matches_elsewhere_still_list_the_skipped_file(grep, ws):
    (ws / "big.txt").write_text("x" * 3000 + " needle\n")
    (ws / "small.txt").write_text("needle\n")
    out = grep.ok("grep", pattern="needle")
    assert str(ws / "small.txt") in out and "1 file(s) NOT searched" in out


def test_a_very_long_line_is_shown_cut_by_both_backends(tools, ws):
    (ws / "long.txt").write_text("short needle\n" + "y" * 300_000 + " needle " + "z" * 300_000 + "\n")
    outs = []
    for backend in ("rg", "python"):
        tools.settings.search.backend = backend
        out = tools.ok("grep", pattern="needle", output_mode="content")
        assert "1:short needle" in out and "2:" + "y" * 100 in out and "[...line truncated]" in out
        assert len(out) < 5000
        outs.append(out)
    assert outs[0] == outs[1]


def test_a_file_swapped_for_a_symlink_after_the_walk_leaks_not_even_its_size(grep, ws, tmp_path, monkeypatch):
    """A command in the sandbox swaps a listed file for a symlink to a big file outside between the
    walk and the size check: the size check must not follow it (it would name the outside file's
    size in the note), and the search then refuses the link."""
    from abhed.tools import grep as grep_tool

    outside = tmp_path / "outside-secret.log"
    outside.write_text("needle " + "y" * 70000 + "\n")
    victim = ws / "victim.txt"
    victim.write_text("hay\n")
    listed = grep_tool.walk_checked

    def walk_then_swap(*args, **kwargs):
        listing = listed(*args, **kwargs)
        victim.unlink()
        victim.symlink_to(outside)   # what a racing `ln -sf` in the sandbox does
        return listing
    monkeypatch.setattr(grep_tool, "walk_checked", walk_then_swap)
    monkeypatch.setattr(grep_tool, "RG_WALK", False)   # (the Python walk's path: rg's own has no "after the walk")
    result = grep("grep", pattern="needle")
    assert "68.4 KiB" not in result.content and "over grep's limit" not in result.content
    assert "needle " + "y" * 10 not in result.content and str(outside) not in result.content
    assert f"could not be read: {victim} (a component of its path became a symbolic link" in result.content
