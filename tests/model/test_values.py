"""values.convert: argument values read by the tool's schema, as vLLM's qwen3_coder parser reads
them, and where it deliberately does not (values.py's docstring lists both)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from abhed.agent.dispatch import BY_NAME
from abhed.common.errors import ToolError
from abhed.mcp.gateway import McpTool
from abhed.mcp.pins import Pin
from abhed.model.adapters import adapter_for
from abhed.model.textcalls.values import MAX_LITERAL, convert, type_name
from abhed.tools.base import explain_invalid

INT_ = {"type": "integer"}
SAME = object()  # the value comes back as given: text the schema check will refuse (or a string kept)

DEFS = {
    "Count": {"type": "integer", "description": "a count"},
    "Names": {"type": "array", "items": {"type": "string"}},
    "Loop": {"$ref": "#/$defs/Loop"},
    "Hop": {"$ref": "#/$defs/Count"},
    "Twice": {"anyOf": [{"$ref": "#/$defs/Twice"}, {"$ref": "#/$defs/Twice"}, INT_]},  # 2**depth branches
}
DEFINITIONS = {"Flags": {"type": "object"}}


def one(prop: Any, value: Any, texts: bool = True) -> Any:
    """`value` for a required parameter `v` of schema `prop` (required: a null is never dropped)."""
    schema = {"type": "object", "properties": {"v": prop}, "required": ["v"], "$defs": DEFS,
              "definitions": DEFINITIONS}
    return convert({"v": value}, schema, texts)["v"]


INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}
ARR = {"type": "array", "items": {"type": "string"}}
OBJ = {"type": "object"}
STR = {"type": "string"}
DEEP = 200

TEXT_ROWS = [
    # strings: kept byte for byte, whatever they look like
    (STR, "  two\nlines \n", SAME),
    (STR, "null", SAME),
    (STR, "NULL", SAME),
    (STR, "20", SAME),
    (STR, "true", SAME),
    (STR, "['a', 'b']", SAME),
    ({"type": "str"}, " 5 ", SAME),
    ({"anyOf": [STR, {"type": "null"}]}, "null", SAME),
    ({"type": ["string", "integer"]}, "5", SAME),
    ({}, "5", SAME),  # no type: vLLM keeps text too
    ({"description": "untyped"}, "true", SAME),
    ({"type": "frob"}, "5", SAME),  # a type name neither JSON Schema's nor vLLM's
    # null, any case, for a type that is not string
    (INT, "null", None),
    (INT, "NULL", None),
    (INT, " null\n", None),
    (INT, "None", None),
    (ARR, "none", None),
    (BOOL, "Null", None),
    ({"type": "null"}, "null", None),
    ({"type": "null"}, "nil", SAME),
    # integer
    (INT, "20", 20),
    (INT, " 20\n", 20),
    (INT, "2_000", 2000),
    (INT, "+5", 5),
    (INT, "-3", -3),
    (INT, "007", 7),
    (INT, "5.0", 5),
    (INT, "5.", 5),
    (INT, "12345678901234567891", 12345678901234567891),
    (INT, "5.5", SAME),
    (INT, "0x1F", SAME),
    (INT, "1e3", SAME),
    (INT, "2__000", SAME),
    (INT, "_2", SAME),
    (INT, "2_", SAME),
    (INT, "1,000", SAME),
    (INT, "\u0661\u0662", SAME),  # Arabic-Indic digits: int() reads them, this does not
    (INT, "", SAME),
    (INT, "twenty", SAME),
    (INT, "true", SAME),
    (INT, "9" * 5000, SAME),  # more digits than Python reads from text
    ({"type": "int64"}, "5", 5),  # vLLM's prefixes
    ({"type": "uint8"}, "5", 5),
    # number: a whole value becomes an int, as vLLM does
    (NUM, "2.5", 2.5),
    (NUM, "3.0", 3),
    (NUM, "1e3", 1000),
    (NUM, "-.5", -0.5),
    (NUM, "1_000.5", 1000.5),
    (NUM, "20", 20),
    (NUM, "12345678901234567891", 12345678901234567891),  # exact, not through a float
    (NUM, "inf", SAME),
    (NUM, "-Infinity", SAME),
    (NUM, "nan", SAME),
    (NUM, "1e400", SAME),
    (NUM, "0x10", SAME),
    (NUM, "2.5.1", SAME),
    ({"type": "float"}, "0.25", 0.25),
    # boolean: true/false, yes/no, 1/0; anything else stays text (vLLM makes it false)
    (BOOL, "true", True),
    (BOOL, "False", False),
    (BOOL, "TRUE", True),
    (BOOL, " true\n", True),
    (BOOL, "yes", True),
    (BOOL, "No", False),
    (BOOL, "1", True),
    (BOOL, "0", False),
    (BOOL, "maybe", SAME),
    (BOOL, "t", SAME),
    (BOOL, "", SAME),
    ({"type": "bool"}, "yes", True),
    # array: JSON, else a Python literal; never eval
    (ARR, '["a", "b"]', ["a", "b"]),
    (ARR, "['a', 'b']", ["a", "b"]),
    (ARR, "\n['a',\n 'b']\n", ["a", "b"]),
    (ARR, "[1, True, None]", [1, True, None]),
    (ARR, "('a', 'b')", ["a", "b"]),
    (ARR, "[[1, (2, 3)]]", [[1, [2, 3]]]),
    (ARR, '"[\\"a\\"]"', ["a"]),  # a JSON string holding the array
    (ARR, "[1_000]", [1000]),
    (ARR, "[]", []),
    (ARR, "a.py", SAME),
    (ARR, "5", SAME),  # vLLM: 5
    (ARR, "{'a': 1}", SAME),
    (ARR, "{1, 2}", SAME),  # a set: JSON has none
    (ARR, "[b'x']", SAME),
    (ARR, "[1j]", SAME),
    (ARR, "[NaN]", SAME),
    (ARR, "[1e400]", SAME),
    (ARR, "[float('nan')]", SAME),
    (ARR, "__import__('os').system('false')", SAME),
    (ARR, "[" * DEEP + "]" * DEEP, SAME),
    (ARR, "(" * DEEP + "1" + ",)" * DEEP, SAME),
    (ARR, "(" * 50 + ")" * 50, []),  # parentheses that only group: the empty tuple
    (ARR, "[" * 100_000, SAME),
    (ARR, "[" + "-" * 3000 + "1]", SAME),  # RecursionError in ast.literal_eval
    (ARR, "[" + "-" * 10_000 + "1]", SAME),  # MemoryError in its parser
    (ARR, "[" + ", ".join(["'a'"] * (MAX_LITERAL // 4)) + "]", SAME),  # too long a literal
    (ARR, json.dumps(["a"] * (MAX_LITERAL // 4)), ["a"] * (MAX_LITERAL // 4)),  # JSON is bounded elsewhere
    ({"type": "list"}, "['a']", ["a"]),
    # object
    (OBJ, '{"a": 1}', {"a": 1}),
    (OBJ, "{'a': 1, 'b': [True, None]}", {"a": 1, "b": [True, None]}),
    (OBJ, "{'a': (1, 2)}", {"a": [1, 2]}),
    (OBJ, "{1: 'a'}", SAME),
    (OBJ, "[1]", SAME),
    (OBJ, "{'a': " * 70 + "1" + "}" * 70, SAME),  # deeper than MAX_DEPTH
    ({"type": "dict"}, "{'a': 1}", {"a": 1}),
    # anyOf / oneOf / a list of types: the first type the text fits
    ({"anyOf": [INT, {"type": "null"}]}, "20", 20),
    ({"anyOf": [INT, {"type": "null"}]}, "null", None),
    ({"anyOf": [INT, {"type": "null"}]}, "twenty", SAME),
    ({"oneOf": [{"type": "null"}, BOOL]}, "yes", True),
    ({"type": ["array", "null"]}, "['a']", ["a"]),
    ({"type": ["null", "integer"]}, "NULL", None),
    ({"type": ["null", "integer"]}, "4", 4),
    ({"anyOf": [INT, STR]}, "7", 7),
    ({"anyOf": [INT, STR]}, "abc", SAME),
    ({"anyOf": [INT, STR]}, "null", None),  # its first type is not string
    ({"anyOf": [STR, INT]}, "7", SAME),
    ({"anyOf": [INT, BOOL]}, "true", True),
    ({"anyOf": [{"anyOf": [INT]}, {"type": "null"}]}, "3", 3),
    ({"allOf": [{"description": "d"}, {"$ref": "#/$defs/Count"}]}, "3", 3),
    # $ref into $defs / definitions
    ({"$ref": "#/$defs/Count"}, "4", 4),
    ({"$ref": "#/$defs/Hop"}, "4", 4),
    ({"$ref": "#/$defs/Names"}, "['x']", ["x"]),
    ({"$ref": "#/definitions/Flags"}, "{'x': True}", {"x": True}),
    ({"anyOf": [{"$ref": "#/$defs/Count"}, {"type": "null"}]}, "4", 4),
    ({"$ref": "#/$defs/Count", "type": "boolean"}, "yes", True),  # the keywords beside a $ref win
    ({"$ref": "#/$defs/Loop"}, "4", SAME),
    ({"$ref": "#/$defs/Twice"}, "4", SAME),  # bounded: the types it names are not all looked at
    ({"$ref": "#/$defs/Missing"}, "4", SAME),
    ({"$ref": "https://example.com/count.json"}, "4", SAME),
    # only an enum or a const: the types of its values
    ({"enum": [1, 2, 3]}, "2", 2),
    ({"enum": ["a", "b"]}, "a", SAME),
    ({"const": True}, "yes", True),
]


@pytest.mark.parametrize(("prop", "text", "expected"), TEXT_ROWS, ids=[f"{i}" for i in range(len(TEXT_ROWS))])
def test_text_values_are_read_by_their_schema(prop, text, expected):
    got = one(prop, text)
    if expected is SAME:
        assert got is text
    else:
        assert got == expected and type(got) is type(expected)


JSON_ROWS = [
    # what JSON cannot say, or models get wrong
    (ARR, "['a', 'b']", ["a", "b"]),
    (ARR, '["a"]', ["a"]),
    (OBJ, "{'a': 1}", {"a": 1}),
    (BOOL, "yes", True),
    (BOOL, "no", False),
    (BOOL, "true", True),
    (INT, "2_000", 2000),
    (INT, "20", 20),
    (NUM, "2.5", 2.5),
    ({"anyOf": [INT, {"type": "null"}]}, "20", 20),
    # the rest as given
    (STR, "  5 ", SAME),
    (STR, "['a']", SAME),
    ({"anyOf": [INT, STR]}, "5", SAME),  # a string fits: it is what the model meant
    ({}, "5", SAME),
    (INT, "null", SAME),
    (INT, "twenty", SAME),
    (BOOL, "maybe", SAME),
    (ARR, "a.py", SAME),
    (INT, 5.0, SAME),
    (BOOL, 1, SAME),
    (ARR, ["a"], SAME),
    (STR, 5, SAME),
]


@pytest.mark.parametrize(("prop", "value", "expected"), JSON_ROWS, ids=[f"{i}" for i in range(len(JSON_ROWS))])
def test_json_values_are_read_only_where_json_cannot_say_it(prop, value, expected):
    got = one(prop, value, texts=False)
    if expected is SAME:
        assert got is value
    else:
        assert got == expected and type(got) is type(expected)


# -- null for an optional parameter ---------------------------------------------------------------

NULLS = {"type": "object", "required": ["path"], "$defs": {"N": {"type": ["integer", "null"]}}, "properties": {
    "path": STR, "limit": INT, "maybe": {"anyOf": [INT, {"type": "null"}]}, "listed": {"type": ["integer", "null"]},
    "anything": {}, "referred": {"$ref": "#/$defs/N"}, "named": STR}}


@pytest.mark.parametrize("texts", [True, False])
def test_null_for_an_optional_parameter_that_takes_none_is_left_out(texts):
    null = "null" if texts else None
    args = {"path": "/x", "limit": null, "maybe": null, "listed": null, "anything": None, "referred": null,
            "named": None, "extra": None}
    assert convert(args, NULLS, texts) == {"path": "/x", "maybe": None, "listed": None, "anything": None,
                                           "referred": None, "extra": None}


@pytest.mark.parametrize("texts", [True, False])
def test_null_for_a_required_parameter_stays_for_the_check_to_refuse(texts):
    schema = {"type": "object", "properties": {"limit": INT}, "required": ["limit"]}
    assert convert({"limit": "null" if texts else None}, schema, texts) == {"limit": None}


def test_a_schema_that_is_a_ref_is_followed():
    schema = {"$ref": "#/$defs/Args", "$defs": {"Args": {"type": "object", "required": ["n"],
                                                         "properties": {"n": INT, "m": INT}}}}
    assert convert({"n": "1", "m": "null"}, schema, True) == {"n": 1}


def test_convert_keeps_order_and_does_not_change_its_input():
    args = {"b": "1", "a": "2", "c": None}
    schema = {"type": "object", "properties": {"a": INT, "b": INT, "c": INT}}
    assert list(convert(args, schema, True).items()) == [("b", 1), ("a", 2)]
    assert args == {"b": "1", "a": "2", "c": None}


# -- what the schema check says about what is left ------------------------------------------------


def refusal(tool_name: str, args: dict[str, Any], texts: bool) -> str:
    tool = BY_NAME[tool_name]
    with pytest.raises(ValidationError) as caught:
        tool.validate(convert(args, tool.parameters(), texts))
    return explain_invalid(tool, caught.value, Path("/ws"))


def test_native_tools_take_converted_values_and_leave_out_optional_nulls():
    read = BY_NAME["read"]
    args = read.validate(convert({"path": "/x", "limit": "20", "offset": "null"}, read.parameters(), True))
    assert (args.path, args.limit, args.offset) == ("/x", 20, None)
    edit = BY_NAME["edit"]
    args = edit.validate(convert({"path": "/x", "old_string": " a ", "new_string": "null", "replace_all": "yes"},
                                 edit.parameters(), True))
    assert (args.old_string, args.new_string, args.replace_all) == (" a ", "null", True)
    plan = BY_NAME["plan"]
    args = plan.validate(convert({"goal": "g", "steps": "['one', 'two']", "notes": None}, plan.parameters(), False))
    assert args.steps == ["one", "two"] and args.notes is None


def test_native_refusals_name_the_field_and_the_type_expected():
    said = refusal("read", {"path": "/x", "limit": "twenty"}, True)
    assert "`limit`" in said and "Expected an integer" in said and '"twenty"' in said
    said = refusal("edit", {"path": "/x", "old_string": "a", "new_string": "b", "replace_all": "maybe"}, True)
    assert "`replace_all`" in said and "Expected true or false" in said
    said = refusal("read", {"path": None}, False)
    assert "`path`" in said and "Expected a string" in said
    said = refusal("plan", {"goal": "g", "steps": "a, b"}, True)
    assert "`steps`" in said and "Expected an array" in said


MCP_SCHEMA = {"type": "object", "required": ["query"], "properties": {
    "query": {"type": "string"},
    "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
    "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
    "mode": {"$ref": "#/$defs/Mode"}},
    "$defs": {"Mode": {"type": "string", "enum": ["fast", "full"]}}}


def mcp_tool() -> McpTool:
    return McpTool(SimpleNamespace(name="srv"), Pin.of("search", "Search.", MCP_SCHEMA))  # type: ignore[arg-type]


def test_an_mcp_tool_s_optional_integer_arrives_as_an_integer():
    tool = mcp_tool()
    args = convert({"query": " x ", "limit": "20", "tags": "['a', 'b']", "mode": "fast"}, tool.parameters(), True)
    assert tool.validate(args) == {"query": " x ", "limit": 20, "tags": ["a", "b"], "mode": "fast"}
    assert tool.validate(convert({"query": "x", "limit": "null"}, tool.parameters(), True)) == {"query": "x",
                                                                                               "limit": None}


def test_mcp_refusals_name_the_field_and_the_type_expected():
    tool = mcp_tool()
    with pytest.raises(ToolError) as caught:
        tool.validate(convert({"query": "x", "limit": "twenty"}, tool.parameters(), True))
    assert "`limit`" in caught.value.message and "must be integer" in caught.value.message
    with pytest.raises(ToolError) as caught:
        tool.validate(convert({"query": None}, tool.parameters(), False))
    assert "`query` must be string; got null" in caught.value.message


# -- the type the prompt shows ---------------------------------------------------------------------


@pytest.mark.parametrize(("prop", "name"), [
    (INT, "integer"),
    ({"type": "string", "enum": ["a"]}, "string"),
    (ARR, "array of string"),
    ({"type": "array"}, "array"),
    ({"type": "array", "items": {}}, "array"),
    ({"type": "array", "items": {"type": "array", "items": INT}}, "array of array of integer"),
    ({"type": "array", "items": {"type": ["integer", "null"]}}, "array of (integer or null)"),
    ({"anyOf": [INT, {"type": "null"}]}, "integer or null"),
    ({"oneOf": [STR, {"type": "array", "items": STR}]}, "string or array of string"),
    ({"type": ["array", "null"], "items": STR}, "array of string or null"),
    ({"$ref": "#/$defs/Names"}, "array of string"),
    ({"anyOf": [{"$ref": "#/$defs/Count"}, {"type": "null"}]}, "integer or null"),
    ({"anyOf": [INT, INT]}, "integer"),
    ({"enum": [1, "a", None]}, "integer or string or null"),
    ({}, "any"),
    ({"$ref": "#/$defs/Loop"}, "any"),
    ({"$ref": "#/$defs/Twice"}, "any or integer"),  # the walk stops deep down: "any" first
    ("not a schema", "any"),
])
def test_type_name_says_every_type_a_parameter_takes(prop, name):
    assert type_name(prop, {"$defs": DEFS}) == name


def test_the_qwen3_coder_prompt_shows_an_optional_mcp_parameter_s_real_type():
    tool = mcp_tool()
    addendum = adapter_for("qwen3_coder", [tool.definition()]).system_addendum()
    assert "<name>limit</name>\n<type>integer or null</type>" in addendum
    assert "<name>tags</name>\n<type>array of string or null</type>" in addendum
    assert "<name>mode</name>\n<type>string</type>" in addendum
    read = adapter_for("qwen3_coder", [BY_NAME["read"].definition()]).system_addendum()
    assert "<name>limit</name>\n<type>integer</type>" in read


# -- never raises; strings stay strings ------------------------------------------------------------

NAMES = ["string", "integer", "number", "boolean", "array", "object", "null", "int", "float", "bool", "list", "dict",
         "frob"]
leaves = st.one_of(
    st.builds(lambda t: {"type": t}, st.sampled_from([*NAMES, 5, None, ""])),
    st.sampled_from([{}, {"$ref": "#/$defs/A"}, {"$ref": "#/$defs/Loop"}, {"$ref": "#/$defs/Twice"},
                     {"$ref": "#/nowhere"}, {"$ref": 5}, {"$ref": "#"}, {"$ref": "#/properties/a"},
                     {"enum": [1, "a", None]}, {"enum": []}, {"const": {}},
                     {"enum": [1.5, [1], {"a": 1}, True]}, {"anyOf": []}, {"anyOf": "x"}, {"allOf": [5]}]),
    st.sampled_from([True, False, None, 3, "string", ["integer"]]),
)
props = st.recursive(leaves, lambda inner: st.one_of(
    st.builds(lambda xs: {"anyOf": xs}, st.lists(inner, max_size=3)),
    st.builds(lambda xs: {"oneOf": xs}, st.lists(inner, max_size=3)),
    st.builds(lambda xs: {"allOf": xs}, st.lists(inner, max_size=3)),
    st.builds(lambda ts: {"type": ts}, st.lists(st.sampled_from([*NAMES, 3]), max_size=3)),
    st.builds(lambda i: {"type": "array", "items": i}, inner),
    st.builds(lambda i: {"$ref": "#/$defs/A", "items": i}, inner),
), max_leaves=8)

NASTY = ["[" * n + "]" * n for n in (1, 63, 64, 65, 100, 199, 200, 1000)] + [
    "(" * 300 + ")" * 300, "-" * 3000 + "1", "not " * 10_000 + "1", "{'a':" * 100 + "1" + "}" * 100, "[" * 100_000, "-" * 100_000 + "1", "[" + "9" * 5000 + "]",
    "1e999999", "9" * 5000, "[1e400]", "{1: 2}", "{1, 2}", "b'x'", "1j", "...", "'\ud800'", "'\x00'", "\"\\ud800\"",
    "[True, None, (1,)]", "NaN", "-Infinity", "\u0661", "0x1F", "2_000", " yes ", "None", "null", "\"[\\\"a\\\"]\"",
    "\"\\\"x\\\"\"", "[" * 5000 + "'", "[" + "1," * (MAX_LITERAL // 2) + "]",
]
texts_ = st.one_of(st.text(max_size=40), st.sampled_from(NASTY),
                   st.from_regex(r"[-+ ]?[0-9_.eE]{1,12}", fullmatch=True),
                   st.from_regex(r"[\[({'\"a-z0-9,: )\]}]{0,30}", fullmatch=True))
jsons = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | texts_, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                          max_size=3), max_leaves=6)


def schema_of(properties: dict[str, Any], required: list[str], a: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required,
            "$defs": {"A": a, "Loop": DEFS["Loop"], "Twice": DEFS["Twice"]}}


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from("abcd"), props, max_size=4), props, st.lists(st.sampled_from("abcde")),
       st.dictionaries(st.sampled_from("abcde"), texts_, max_size=5))
def test_convert_never_raises_on_text_and_gives_json(properties, a, required, args):
    schema = schema_of(properties, required, a)
    out = convert(args, schema, True)
    json.dumps(out, allow_nan=False)  # what comes out, JSON holds (surrogates aside: dispatch refuses those)
    assert set(out) <= set(args)
    for name, prop in properties.items():
        type_name(prop, schema)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from("abcd"), props, max_size=4), props, st.lists(st.sampled_from("abcde")),
       st.dictionaries(st.sampled_from("abcde"), jsons, max_size=5))
def test_convert_never_raises_on_json_values(properties, a, required, args):
    out = convert(args, schema_of(properties, required, a), False)
    json.dumps(out, allow_nan=False)
    for key, value in out.items():  # only strings are read; every other value is the one given
        assert value is args[key] or isinstance(args[key], str)


@given(st.one_of(st.none(), st.booleans(), st.integers(), st.text(), st.lists(st.integers()),
                 st.dictionaries(st.text(), st.integers())),
       st.one_of(st.none(), st.text(), st.dictionaries(st.text(), st.integers()), props))
def test_convert_never_raises_on_arguments_or_schemas_of_any_shape(args, schema):
    convert(args, schema, True)  # type: ignore[arg-type]
    convert({"a": "1"}, schema, True)  # type: ignore[arg-type]
    convert({"a": "1"}, {"properties": schema}, False)
    type_name(schema, schema)


STRINGS = [STR, {"type": "string", "description": "d"}, {"$ref": "#/$defs/A"}, {"anyOf": [STR, {"type": "null"}]},
           {"type": ["string", "null"]}, {"type": ["null", "string", "integer"]}, {"oneOf": [STR, INT]},
           {"enum": ["a", 1]}, {"allOf": [STR]}, {"type": "text"}]


@given(st.sampled_from(STRINGS), st.one_of(st.text(), st.sampled_from(NASTY)), st.booleans(), st.booleans())
def test_a_string_property_gets_its_text_unchanged(prop, text, texts, required):
    schema = schema_of({"s": prop}, ["s"] if required else [], STR)
    assert convert({"s": text}, schema, texts)["s"] is text


def test_a_schema_whose_branches_double_at_each_level_is_walked_in_bounded_steps(monkeypatch):
    from abhed.model.textcalls import values
    walk, calls = values._walk, [0]

    def counted(*args: Any) -> Any:
        calls[0] += 1
        assert calls[0] < 10 * values.MAX_BRANCHES, "the walk is not bounded"
        return walk(*args)

    monkeypatch.setattr(values, "_walk", counted)
    schema = {"type": "object", "properties": {"v": {"$ref": "#/$defs/Thrice"}},
              "$defs": {"Thrice": {"oneOf": [{"$ref": "#/$defs/Thrice"}] * 3}}}
    assert convert({"v": "4"}, schema, True) == {"v": "4"}
    assert type_name(schema["properties"]["v"], schema) == "any"
