"""§0: one test per rule that applies to every tool."""

from __future__ import annotations

import re

import pytest

# rule 1 -------------------------------------------------------------------------------------------
# Every error says what failed (names the path or field), why, and what to do instead.
INSTRUCTIVE = re.compile(r"\b(Use|use|Call|call|Send|send|Did you mean|retry|Retry|Read|read it|Give|give|Choose|"
                         r"Create|Include|Put|Copy|Work on|omit|Inspect|extract|Convert|Change|ask)\b")


def _error_cases(ws):
    (ws / "f.txt").write_text("one\none\n")
    (ws / "d").mkdir()
    (ws / "bin").write_bytes(b"\x7fELF\x00\x00")
    yield "read", {"path": "rel.txt"}
    yield "read", {"path": "/etc/hostname"}
    yield "read", {"path": str(ws / "missing.txt")}
    yield "read", {"path": str(ws / "d")}
    yield "read", {"path": str(ws / "bin")}
    yield "read", {"path": str(ws / "f.txt"), "offset": 99}
    yield "read", {"path": str(ws / "f.txt"), "offset": 0}
    yield "read", {"pathh": str(ws / "f.txt")}
    yield "write", {"path": str(ws / "f.txt"), "content": "x"}
    yield "write", {"path": str(ws / "no" / "f.txt"), "content": "x"}
    yield "edit", {"path": str(ws / "f.txt"), "old_string": "one", "new_string": "two"}
    yield "edit", {"path": str(ws / "f.txt"), "old_string": "one", "new_string": "one"}
    yield "edit", {"path": str(ws / "f.txt"), "old_string": "", "new_string": "x"}
    yield "edit", {"path": str(ws / "f.txt"), "old_string": 5, "new_string": "x"}
    yield "nope", {}


def test_rule1_errors_are_instructions(tools, ws):
    for name, args in _error_cases(ws):
        content = tools.err(name, **args)
        assert INSTRUCTIVE.search(content), (name, args, content)
        assert "Traceback" not in content
        named = args.get("path") or next(iter(args), name)
        assert str(named) in content or name in content, (name, args, content)


def test_rule1_after_read_the_edit_errors_teach_too(tools, ws):
    (ws / "f.txt").write_text("one\none\n")
    tools.ok("read", path=str(ws / "f.txt"))
    several = tools.err("edit", path=str(ws / "f.txt"), old_string="one", new_string="two")
    assert "2 times" in several and "lines 1, 2" in several and "replace_all" in several


# rule 2 -------------------------------------------------------------------------------------------
def test_rule2_no_silent_success(tools, ws):
    created = tools.ok("write", path=str(ws / "a.txt"), content="x\n")
    unchanged = tools.ok("write", path=str(ws / "a.txt"), content="x\n")
    edited = tools.ok("edit", path=str(ws / "a.txt"), old_string="x", new_string="y")
    assert created.startswith("Created") and "bytes" in created
    assert unchanged.startswith("Unchanged") and "nothing was written" in unchanged
    assert edited.startswith("Edited") and "1 occurrence" in edited and "\ty" in edited
    (ws / "e.txt").write_text("")
    assert tools.ok("read", path=str(ws / "e.txt")) == "[file exists but is empty]"


# rule 3 -------------------------------------------------------------------------------------------
def test_rule3_same_input_same_output(tools, ws):
    (ws / "f.txt").write_text("".join(f"{i}\n" for i in range(3000)))
    for args in ({"path": str(ws / "f.txt")}, {"path": str(ws / "f.txt"), "offset": 5, "limit": 3},
                 {"path": str(ws / "nope.txt")}, {"path": "rel"}):
        assert tools("read", **args).content == tools("read", **args).content


# rule 4 -------------------------------------------------------------------------------------------
def test_rule4_every_output_is_bounded_and_says_so(make_tools, ws):
    tools = make_tools(max_output_chars=20_000)
    (ws / "wide.txt").write_text(("w" * 5000 + "\n") * 3000)
    out = tools.ok("read", path=str(ws / "wide.txt"))
    assert len(out) <= 20_000 and "[truncated: showing lines 1-" in out and "[...line truncated]" in out
    text = "".join(f"dup\n" for _ in range(5000))
    (ws / "dups.txt").write_text(text)
    tools.ok("read", path=str(ws / "dups.txt"))
    err = tools.err("edit", path=str(ws / "dups.txt"), old_string="dup", new_string="x")
    assert len(err) < 2000 and "and 4950 more" in err


# rule 5 -------------------------------------------------------------------------------------------
ABSOLUTE_OR_NONE = re.compile(r"(?<![\w/.])(?:\.{1,2}/|[\w-]+/[\w.-]+)")


def test_rule5_absolute_paths_in_and_out(tools, ws):
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("x = 1\n")
    assert "must be an absolute path" in tools.err("read", path="src/a.py")
    outputs = [
        tools.ok("write", path=str(ws / "src" / "b.py"), content="y\n"),
        tools.err("read", path=str(ws / "src" / "c.py")),
        tools.err("read", path=str(ws / "src")),
    ]
    for out in outputs:
        for path in re.findall(r"/[\w./-]+", out):
            assert path.startswith("/"), out
        assert str(ws) in out


# rule 6 -------------------------------------------------------------------------------------------
def test_rule6_retrying_after_an_ambiguous_failure_is_safe(tools, ws):
    path = str(ws / "f.txt")
    first = tools.ok("write", path=path, content="v1\n")
    again = tools.ok("write", path=path, content="v1\n")
    assert first.startswith("Created") and again.startswith("Unchanged")
    tools.ok("edit", path=path, old_string="v1\n", new_string="version two\n")
    retry = tools.err("edit", path=path, old_string="v1\n", new_string="version two\n")
    assert "already have been applied" in retry and (ws / "f.txt").read_text() == "version two\n"
    assert tools("read", path=path).content == tools("read", path=path).content


# rule 7 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, raw", [("read", '{"path": "/x"}'), ("edit", "{}"), ("zzz", "{}"), ("read", "[1")])
def test_rule7_every_call_is_persisted_as_two_events(tools, name, raw):
    before = len(tools.session.log.load().events)
    tools(name, raw=raw)
    after = tools.session.log.load().events
    assert len(after) == before + 2 and after[-2].kind == "action" and after[-1].kind == "observation"
