"""Issue 33 #5: names and paths over the system's limits, and new names with control characters, get
an instruction in every tool that takes a path (what failed, why, what to do), never a traceback."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from abhed.common.errors import explain_oserror
from abhed.files import namelimits
from abhed_testing import abhed

LONG = "a" * 5000
# (tool, field, the other arguments): every path argument of every tool (bash takes none).
PATH_ARGS = [("read", "path", {}), ("write", "path", {"content": "x\n"}),
             ("edit", "path", {"old_string": "", "new_string": "x\n"}), ("glob", "path", {"pattern": "*"}),
             ("grep", "path", {"pattern": "x"})]


def _call(tools, tool, field, path, extra):
    return tools(tool, **{**extra, field: path})


@pytest.mark.parametrize("tool, field, extra", PATH_ARGS)
def test_a_5000_character_name_is_named_with_its_size_the_limit_and_the_fix(tools, ws, tool, field, extra):
    result = _call(tools, tool, field, f"{ws}/{LONG}/f.txt", extra)
    assert result.is_error and result.metadata["error_kind"] == "tool_error", result.content
    assert result.content == (
        f"`{field}` holds a name of 5000 bytes ('{'a' * 40}...', in {ws}), but a file or directory name may have at "
        "most 255 bytes, so no file can have that path; nothing was read or written. Use a shorter name (at most "
        "255 bytes), or split it into directories.")
    assert result.metadata["reason"] == "name_too_long" and result.metadata["bytes"] == 5000
    assert list(ws.iterdir()) == []


@pytest.mark.parametrize("tool, field, extra", PATH_ARGS)
def test_a_path_over_path_max_is_named_with_its_size_the_limit_and_the_fix(tools, ws, tool, field, extra):
    path = f"{ws}/" + "/".join(["d" * 200] * 25)
    result = _call(tools, tool, field, path, extra)
    assert result.is_error and result.metadata["reason"] == "path_too_long", result.content
    assert result.content == (
        f"`{field}` is {len(path)} bytes long ('{path[:40]}...'), but a path may have at most 4095 bytes, so the "
        "system cannot open it; nothing was read or written. Use a shorter path: fewer or shorter directories.")
    assert list(ws.iterdir()) == []


def test_names_are_counted_in_bytes_as_the_kernel_counts_them(tools, ws):
    fits, over = ws / ("é" * 127), ws / ("é" * 128)  # 254 and 256 bytes
    assert tools.ok("write", path=str(fits), content="x").startswith(f"Created {fits}")
    err = tools.err("write", path=str(over), content="x")
    assert err.startswith("`path` holds a name of 256 bytes")
    assert tools.ok("write", path=str(ws / ("n" * 255)), content="x").startswith("Created")  # the limit itself fits
    tools.ok("read", path=str(ws / ("n" * 255)))  # and its temporary file's name too, when it is replaced
    assert tools.ok("write", path=str(ws / ("n" * 255)), content="y").startswith("Overwrote")
    assert sorted(p.name for p in ws.iterdir()) == sorted([fits.name, "n" * 255])
    assert (ws / ("n" * 255)).read_text() == "y"


def test_a_symlink_that_makes_the_resolved_path_too_long_is_refused_before_any_open(tools, ws):
    deep = ws / "/".join(["d" * 250] * 15)
    deep.mkdir(parents=True)
    (ws / "s").symlink_to(deep)
    err = tools.err("read", path=f"{ws}/s/{'f' * 250}/{'g' * 250}/x")
    assert err.startswith("`path` is ") and "at most 4095 bytes" in err


def test_the_limits_at_their_edges():
    assert namelimits.too_long("/" + "n" * 255) is None
    assert namelimits.too_long("/" + "n" * 256).metadata == {"reason": "name_too_long", "bytes": 256, "limit": 255}
    edge = "/" + "/".join(["d" * 254] * 16)  # 4080 bytes
    fill = "/" + "f" * (4095 - len(edge) - 1)
    assert namelimits.too_long(edge + fill) is None  # 4095 bytes: the longest path the kernel takes
    assert namelimits.too_long(edge + fill + "g").metadata == {"reason": "path_too_long", "bytes": 4096, "limit": 4095}
    at_edge = namelimits.too_long("/" + "w" * 199 + "/" + "v" * 256).message  # 200 characters shown whole
    assert f"('{'v' * 40}...', in /{'w' * 199})" in at_edge
    where = namelimits.too_long("/" + "/".join(["w" * 100] * 3) + "/" + LONG, field="cwd").message
    assert where.startswith(f"`cwd` holds a name of 5000 bytes ('{'a' * 40}...', in /{'w' * 100}/{'w' * 98}...)")


@pytest.mark.parametrize("tool", ["write", "edit"])
def test_a_new_name_with_a_line_break_is_refused_with_the_likely_path(make_tools, ws, tool):
    tools = make_tools(create_parents=True)
    args = {"content": "x"} if tool == "write" else {"old_string": "", "new_string": "x"}
    err = tools.err(tool, path=f"{ws}/notes.md\nand more", **args)
    assert err.startswith(f"Refused to create the file '{ws}/notes.md\\nand more': its name 'notes.md\\nand more' "
                          "holds the control character '\\n' at position 8;")
    assert f"Nothing was written. Did you mean {ws}/notes.md? Send the path without control characters." in err
    err = tools.err(tool, path=f"{ws}/new\tdir/deeper/f.txt", **args)  # no directory is made either
    assert err.startswith(f"Refused to create the directory '{ws}/new\\tdir':") and "Did you mean" in err
    assert list(ws.iterdir()) == []
    err = tools.err(tool, path=f"{ws}/\x1bf", **args)
    assert "control character '\\x1b' at position 0" in err and "Did you mean" not in err


def test_an_existing_file_with_a_line_break_stays_usable(tools, ws):
    odd = ws / "two\nlines.txt"
    odd.write_text("old\n")
    assert tools.ok("read", path=str(odd)).startswith("     1\told")
    tools.ok("edit", path=str(odd), old_string="old", new_string="new")
    assert odd.read_text() == "new\n"


def test_a_missing_path_with_a_line_break_points_at_the_path_before_it(tools, ws):
    (ws / "a.txt").write_text("x\n")
    err = tools.err("read", path=f"{ws}/a.txt\n")
    assert err == (f"File not found: '{ws}/a.txt\\n': the path holds the control character '\\n' at position "
                   f"{len(str(ws)) + 6}, which file names seldom do. Did you mean {ws}/a.txt? Send the path without it.")


def test_a_name_too_long_for_its_filesystem_is_explained():
    error = explain_oserror(OSError(errno.ENAMETOOLONG, "File name too long"), Path("/w/" + "n" * 200), "writing",
                            unchanged=True)
    assert error.message == (f"A name in /w/{'n' * 117}..., or the whole path, is too long for its filesystem (errno "
                             f"{errno.ENAMETOOLONG}) while writing it. The original /w/{'n' * 200} is unchanged. Use a "
                             "shorter file name or path.")
    short = explain_oserror(OSError(errno.ENAMETOOLONG, "x"), Path("/w/f"), "reading").message
    assert short.startswith("A name in /w/f, or the whole path,")


@pytest.mark.parametrize("tool", ["glob", "grep"])
def test_a_search_root_that_cannot_be_examined_is_explained(ws, home, tool):
    """A parent Abhed may not search (EACCES on the stat) was a traceback in glob and grep."""
    locked = ws / "locked"
    (locked / "inner").mkdir(parents=True)
    locked.chmod(0o000)
    try:
        args = {"pattern": "*" if tool == "glob" else "x", "path": str(locked / "inner")}
        proc = abhed("tool", tool, json.dumps(args), "--workspace", str(ws), "--json", obey_permissions=True)
    finally:
        locked.chmod(0o755)
    result = json.loads(proc.stdout)
    assert result["is_error"] and "Internal error" not in result["content"], result
    assert result["content"].startswith(f"Permission denied searching {locked / 'inner'}")
