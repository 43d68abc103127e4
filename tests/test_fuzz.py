"""Bad input from the model never raises, never shows a traceback, and never loses data (hypothesis)."""

from __future__ import annotations

import json
from contextlib import contextmanager
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from abhed.agent.dispatch import INTERNAL
from abhed_testing import Tools

FILES = {
    "a.txt": b"alpha\nbeta\nalpha\n",
    "crlf.txt": b"one\r\ntwo\r\n",
    "bom.txt": b"\xef\xbb\xbfhead\nbody\n",
    "latin.txt": b"caf\xe9\nok\n",
    "empty.txt": b"",
    "prog": b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 16,
    "sub/deep.py": b"def f():\n\treturn 1\n",
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)
# Substrings of FILES make edits that match; the rest make edits that must fail cleanly.
texts = st.one_of(st.text(max_size=40), matching := st.sampled_from([
    "alpha", "alpha\n", "beta", "beta\n", "a\nbeta", "one\r\ntwo", "one\ntwo", "\treturn 1", "    return 1", "",
    "café", "caf", "head", "body", "\ud800", "\udce9", "two\r\n", "ok", "def f():", "x" * 300]))


def path_strings(ws: str):
    known = [f"{ws}/{name}" for name in FILES] + [ws, f"{ws}/sub", f"{ws}/new.txt", f"{ws}/no/such/dir/f",
                                                  "a.txt", "../x", "~/x", "", "/etc/passwd", f"{ws}/../x",
                                                  f"{ws}/a.txt\x00", f"{ws}/sub/../a.txt"]
    likely = [f"{ws}/{name}" for name in ("a.txt", "crlf.txt", "bom.txt", "latin.txt", "sub/deep.py", "new.txt")]
    return st.one_of(st.sampled_from(likely), st.sampled_from(likely), st.sampled_from(known), st.text(max_size=20))


def well_typed(tool: str, ws: str):
    """Arguments of the right shape with hostile values: the path most bugs hide behind."""
    optional_int = st.none() | st.integers(-3, 30) | st.integers()
    shapes = {
        "read": st.fixed_dictionaries({"path": path_strings(ws)}, optional={"offset": optional_int,
                                                                          "limit": optional_int}),
        "write": st.fixed_dictionaries({"path": path_strings(ws), "content": texts}),
        "edit": st.fixed_dictionaries({"path": path_strings(ws), "old_string": matching | texts, "new_string": texts},
                                      optional={"replace_all": st.none() | st.booleans()}),
    }
    return shapes[tool].map(json.dumps)


def ill_typed(ws: str):
    """Any field names and value types, and text that is not JSON at all."""
    fields = {"path": path_strings(ws) | json_values, "content": texts | json_values,
              "old_string": texts | json_values, "new_string": texts | json_values,
              "replace_all": json_values, "offset": json_values, "limit": json_values}
    args = st.fixed_dictionaries({}, optional=fields)
    extra = st.dictionaries(st.text(max_size=6), json_values, max_size=2)
    objects = st.builds(lambda a, e: {**e, **a}, args, extra).map(json.dumps)
    return st.one_of(objects, st.text(max_size=30), json_values.map(json.dumps))


def arguments(tool: str, ws: str):
    return st.one_of(well_typed(tool, ws), well_typed(tool, ws), well_typed(tool, ws), ill_typed(ws))


@contextmanager
def fresh_workspace(tmp_path_factory):
    """A new workspace holding FILES and a session on it, for one hypothesis example."""
    base = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp()))
    try:
        ws = (base / "ws").resolve()
        for name, content in FILES.items():
            (ws / name).parent.mkdir(parents=True, exist_ok=True)
            (ws / name).write_bytes(content)
        yield ws, Tools(ws, base / "home")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def snapshot(ws: Path) -> dict[str, bytes]:
    return {str(p.relative_to(ws)): p.read_bytes() for p in ws.rglob("*") if p.is_file()}


def expected_after(tool: str, args: dict, before: dict[str, bytes], ws: Path, result_text: str) -> dict[str, bytes]:
    """What the workspace must hold after a successful call, computed independently of the tools."""
    after = dict(before)
    if tool == "read":
        return after
    rel = str(Path(args["path"]).resolve().relative_to(ws))
    if tool == "write":
        data = args["content"].encode("utf-8", "surrogateescape")
        old = before.get(rel, b"")
        after[rel] = (b"\xef\xbb\xbf" + data) if old.startswith(b"\xef\xbb\xbf") and not data.startswith(
            b"\xef\xbb\xbf") else data
        return after
    text = before.get(rel, b"").decode("utf-8", "surrogateescape")
    if args["old_string"] == "":
        after[rel] = args["new_string"].encode("utf-8", "surrogateescape")
    else:
        count = -1 if args.get("replace_all") else 1
        after[rel] = text.replace(args["old_string"], args["new_string"], count).encode("utf-8", "surrogateescape")
    return after


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), tool=st.sampled_from(["read", "write", "edit"]), pre_read=st.sets(st.sampled_from(sorted(FILES))))
def test_any_input_gives_an_observation_and_loses_no_data(tmp_path_factory, data, tool, pre_read):
    with fresh_workspace(tmp_path_factory) as (ws, tools):
        for name in pre_read:
            tools("read", path=str(ws / name))
        before = snapshot(ws)
        raw = data.draw(arguments(tool, str(ws)))
        result = tools(tool, raw=raw)
        event(f"{tool}: {result.metadata.get('error_kind') or result.metadata.get('action') or 'ok'} {result.metadata.get('reason', '')}")
        assert isinstance(result.content, str) and result.content.strip()
        assert "Traceback" not in result.content and result.metadata.get("error_kind") != INTERNAL, result.content
        after = snapshot(ws)
        if result.is_error:
            assert after == before, result.content
        else:
            assert after == expected_after(tool, json.loads(raw), before, ws, result.content), result.content
        assert not any(".abhed-tmp-" in name for name in after)


TEXT_FILES = ["a.txt", "crlf.txt", "bom.txt", "latin.txt", "sub/deep.py", "empty.txt"]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), name=st.sampled_from(TEXT_FILES), replace_all=st.none() | st.booleans(),
       new=texts, tool=st.sampled_from(["edit", "edit", "write"]))
def test_plausible_edits_change_exactly_what_they_say(tmp_path_factory, data, name, replace_all, new, tool):
    """Slices of the real file as old_string, so most edits apply: the result must be exact."""
    with fresh_workspace(tmp_path_factory) as (ws, tools):
        tools("read", path=str(ws / name))
        text = FILES[name].decode("utf-8", "surrogateescape")
        lo = data.draw(st.integers(0, len(text)))
        old = text[lo : data.draw(st.integers(min(lo + 1, len(text)), len(text)))]
        args = ({"path": str(ws / name), "old_string": old, "new_string": new, "replace_all": replace_all}
                if tool == "edit" else {"path": str(ws / name), "content": new})
        before = snapshot(ws)
        result = tools(tool, raw=json.dumps(args))
        event(f"{tool}: {result.metadata.get('action') or result.metadata.get('reason')}")
        assert result.metadata.get("error_kind") != INTERNAL, result.content
        after = snapshot(ws)
        if result.is_error:
            assert after == before, result.content
        else:
            assert after == expected_after(tool, args, before, ws, result.content), result.content
            if tool == "edit":  # issue 33 #9: the count is exactly what was replaced
                assert result.metadata["replacements"] == (text.count(old) if replace_all else 1), result.content


# -- issue 33 #5: every path argument of every tool, over the system's limits -------------------------

PATH_FIELDS = [("read", "path"), ("write", "path"), ("edit", "path"), ("glob", "path"), ("glob", "pattern"),
               ("grep", "path"), ("grep", "glob")]  # bash has no path argument (its cwd is the session's)
ODD = ["\x00", "\n", "\r", "\t", "\x1b", "\x7f", "\udce9", "\udcff", "\ud800", "\udfff", "\ufffd", "\u2028", "/", ".."]


def hostile_paths(ws: str):
    """Long names (at and over NAME_MAX, in bytes), long totals (around PATH_MAX), NUL, line breaks
    and other control characters, undecodable bytes (surrogate escapes) and lone surrogates, mixed
    into real paths of the workspace."""
    names = st.one_of(
        st.sampled_from(["a.txt", "sub", "deep.py", "new.txt", "x" * 255, "é" * 127, "é" * 128, "日" * 85, "日" * 86]),
        st.integers(240, 6000).map(lambda n: "n" * n),
        st.text(max_size=12),
    )
    with_odd = st.builds(lambda name, odd, at: name[:at] + odd + name[at:], names, st.sampled_from(ODD),
                         st.integers(0, 12))
    parts = st.lists(st.one_of(names, with_odd), min_size=1, max_size=4)
    nested = parts.map(lambda p: f"{ws}/" + "/".join(p))
    total = st.builds(lambda n, size, tail: f"{ws}/" + "/".join(["d" * size] * n) + tail,
                      st.integers(14, 40), st.integers(100, 255), st.sampled_from(["", "/a.txt", "/*.py"]))
    return st.one_of(nested, nested, total, with_odd, st.sampled_from(["a.txt" + odd for odd in ODD]))


def call_with(tool: str, field: str, path: str, ws: Path) -> dict:
    base = {"read": {}, "write": {"content": "new\n"}, "edit": {"old_string": "alpha\n", "new_string": "ALPHA\n"},
            "glob": {"pattern": "*"}, "grep": {"pattern": "alpha"}}[tool]
    return {**base, field: path}


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), where=st.sampled_from(PATH_FIELDS))
def test_hostile_paths_in_every_tool_give_an_instruction_and_touch_nothing_else(tmp_path_factory, data, where):
    tool, field = where
    with fresh_workspace(tmp_path_factory) as (ws, tools):
        outside = ws.parent / "outside"
        outside.mkdir()
        (outside / "keep.txt").write_bytes(b"outside\n")
        for name in FILES:
            tools("read", path=str(ws / name))
        before, before_outside = snapshot(ws), snapshot(outside)
        args = call_with(tool, field, data.draw(hostile_paths(str(ws))), ws)
        result = tools(tool, raw=json.dumps(args))
        event(f"{tool}.{field}: {result.metadata.get('error_kind') or 'ok'} {result.metadata.get('reason', '')}")
        assert isinstance(result.content, str) and result.content.strip()
        assert "Traceback" not in result.content and result.metadata.get("error_kind") != INTERNAL, result.content
        assert len(result.content) <= tools.settings.files.max_output_chars + 200
        assert snapshot(outside) == before_outside
        after = snapshot(ws)
        changed = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
        if result.is_error or tool in ("read", "glob", "grep"):
            assert changed == set(), result.content
        else:  # a write or edit that was allowed changed its own target only
            assert changed <= {str(Path(args["path"]).resolve().relative_to(ws))}, (changed, result.content)
        assert not any(".abhed-tmp-" in name for name in after)
