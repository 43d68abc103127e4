"""Argument values converted by the tool's JSON schema.

A model that writes its calls as XML (Qwen3-Coder: `<parameter=limit>20</parameter>`) gives every
value as text; the property's schema says what the text stands for. `convert` reads it as vLLM's
qwen3_coder parser does (`_convert_param_value`), by the property's type:

  string      the text as it is, byte for byte (also "null": a string property keeps the word)
  integer     decimal digits, a sign, `_` between digits (`2_000`, `+5`, `007`), a whole `5.0`
  number      the same and decimals and exponents (`2.5`, `1e3`); a whole value becomes an int
  boolean     true/false, yes/no, 1/0 in any case
  array       JSON, else a Python literal (`['a', 'b']`, `True`, `None` inside) by ast.literal_eval
  object      likewise (`{'a': 1}`); never eval
  null        "null" or "None" in any case, for every property whose first type is not string

A property with `anyOf`/`oneOf`, a list of types (`["array", "null"]`), an `allOf`, a `$ref`
into the schema (`#/$defs/...`, `#/definitions/...`) or only an `enum`/`const` has the types of
its branches in order; the text is read as the first of them it fits.

Where vLLM and this differ, on purpose, a value that is wrong stays wrong, so that the schema check
refuses it naming the field and the type it expected, instead of becoming some other value:
  - a value that is not of the type stays text: vLLM makes any boolean it does not know `false`;
  - yes/no and 1/0 are booleans too; `_` and a whole `5.0` are integers (vLLM: text);
  - `0x1F` and `1e3` are not integers (nor for vLLM), nor digits outside ASCII (vLLM's int() reads them);
  - `inf` and `nan` are not numbers (vLLM crashes or keeps text), nor is a number too large to hold;
  - an array must come out a list and an object a dict (vLLM keeps whatever the literal is, `5` for
    an array); tuples become lists; sets, bytes, complex numbers, non-text keys and NaN are not
    values JSON holds, so such a literal stays text; a JSON string holding the array is read again;
  - a literal longer than MAX_LITERAL characters, or nested deeper than MAX_DEPTH, stays text
    (ast.literal_eval takes memory in proportion, and fails with MemoryError or RecursionError);
  - a type name neither JSON Schema's nor one of vLLM's (`int64`, `float32`, `dict[str, int]` are) is
    "any", kept as text (vLLM: string, or for the coder parser a Python literal);
  - a nullable string (`anyOf` string/null) keeps "null" as text (newer vLLM makes it None);
  - a property whose schema names more than MAX_BRANCHES schemas (`anyOf` of $refs to itself) has
    "any" where the walk stopped (vLLM looks at `type` and a flat `anyOf` only, no $ref).

Values from a JSON form (texts=False) are already typed; only what JSON cannot say or a model
commonly gets wrong is read: text for a property no string fits, holding a list or dict (Python
or JSON), a yes/no/true/false/1/0, or a number (not "null": JSON has null). A value that fits a
string, and every value that is not text, stays as given.

Either way, a `None` for a parameter that is not required and whose schema does not admit null is
dropped, as if the model had left it out (models write `"limit": null` for "no limit"); a `None`
for a required parameter stays, so the check refuses it naming the type expected.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

from abhed.common.jsonref import local

MAX_LITERAL = 32_768  # characters read by ast.literal_eval (JSON is bounded by dispatch instead)
MAX_DEPTH = 64  # nesting of a converted array or object; also $refs and branches followed
MAX_BRANCHES = 256  # schemas looked at for one property's types: anyOf of $refs to themselves doubles each level

# vLLM's names for types beside JSON Schema's (it matches prefixes; these are the ones seen).
_ALIASES = {
    "string": "string", "str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
    "integer": "integer", "int": "integer", "long": "integer", "short": "integer", "uint": "integer",
    "unsigned": "integer", "number": "number", "num": "number", "float": "number",
    "boolean": "boolean", "bool": "boolean", "binary": "boolean", "array": "array", "arr": "array",
    "list": "array", "sequence": "array", "object": "object", "dict": "object", "null": "null",
}
_PREFIXES = (("int", "integer"), ("uint", "integer"), ("long", "integer"), ("short", "integer"),
             ("unsigned", "integer"), ("num", "number"), ("float", "number"), ("dict", "object"), ("list", "array"))
_NULLS = ("null", "none")
_BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_DIGITS = r"[0-9]+(?:_[0-9]+)*"  # ASCII only: int() would also read other scripts' digits
_INTEGER = re.compile(rf"[-+]?{_DIGITS}(?:\.0*)?")
_NUMBER = re.compile(rf"[-+]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][-+]?{_DIGITS})?")


class _Unfit(ValueError):
    """The text is not a value of the type."""


def convert(args: dict[str, Any], schema: dict[str, Any], texts: bool) -> dict[str, Any]:
    """`args` with each value read by its property in `schema` (the tool's `parameters`); `texts`:
    the values arrived as text (XML forms). Never raises; a value it cannot read is left as it is."""
    if not isinstance(args, dict):
        return args
    root = schema if isinstance(schema, dict) else {}
    top = _deref(root, root)
    props = _v if isinstance(_v := top.get("properties"), dict) else {}
    required = _v if isinstance(_v := top.get("required"), list) else []
    out: dict[str, Any] = {}
    for key, value in args.items():
        if key not in props:  # not a parameter: left for the schema check to name
            out[key] = value
            continue
        kinds = [kind for kind, _ in _branches(props[key], root)]
        if isinstance(value, str):
            value = _from_text(value, kinds) if texts else _from_json_text(value, kinds)
        if value is None and key not in required and "null" not in kinds and "any" not in kinds:
            continue  # an optional parameter given as null: absent
        out[key] = value
    return out


def convert_json(arguments: str, schema: dict[str, Any]) -> str:
    """Arguments given as JSON text (a native call, or a JSON string in a text form) converted as
    `convert` converts a JSON form's; the text as it came when it is no JSON object (dispatch then
    says what is wrong with it) or nothing changes."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):
        return arguments
    if not isinstance(value, dict):
        return arguments
    converted = convert(value, schema, texts=False)
    return arguments if converted == value else json.dumps(converted, ensure_ascii=False)


def type_name(prop: Any, schema: Any) -> str:
    """The type(s) a property takes, in words for a prompt: "integer", "array of string",
    "integer or null", "any" (a property that constrains none)."""
    return _describe(prop, schema if isinstance(schema, dict) else {}, 0)


def _describe(prop: Any, root: dict[str, Any], depth: int) -> str:
    words: list[str] = []
    for kind, node in _branches(prop, root):
        word = kind
        items = node.get("items")
        if kind == "array" and isinstance(items, dict) and depth < 4:
            inner = _describe(items, root, depth + 1)
            word = "array" if inner == "any" else f"array of ({inner})" if " or " in inner else f"array of {inner}"
        words.append(word)  # one per type: _branches names each once
    return " or ".join(words)


# -- a property's types ---------------------------------------------------------------------------


def _branches(prop: Any, root: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each JSON type `prop` admits, in the order it names them, with the schema that names it
    (where an array's `items` are). "any": a branch that constrains nothing (or that this cannot
    follow: a remote $ref, a cycle, more than MAX_BRANCHES schemas). Never empty."""
    return _walk(prop, root, 0, [MAX_BRANCHES])


def _walk(prop: Any, root: dict[str, Any], depth: int, left: list[int]) -> list[tuple[str, dict[str, Any]]]:
    left[0] -= 1
    if depth > MAX_DEPTH or left[0] < 0 or not isinstance(prop, dict):
        return [("any", {})]
    node = _deref(prop, root)
    kind = node.get("type")
    if isinstance(kind, str):
        return [(_alias(kind), node)]
    if isinstance(kind, list) and any(isinstance(k, str) for k in kind):
        return _unique([(_alias(k), node) for k in kind if isinstance(k, str)])
    for key in ("anyOf", "oneOf"):
        options = node.get(key)
        if isinstance(options, list) and options:
            return _unique([found for option in options for found in _walk(option, root, depth + 1, left)])
    options = node.get("allOf")
    if isinstance(options, list):  # every branch holds: the first that names a type says it
        for option in options:
            found = _walk(option, root, depth + 1, left)
            if found[0][0] != "any":
                return found
    values = node.get("enum") if isinstance(node.get("enum"), list) and node.get("enum") else (
        [node["const"]] if "const" in node else None)
    if values:
        return _unique([(_json_type(v), node) for v in values])
    return [("any", node)]


def _alias(name: str) -> str:
    name = name.strip().lower()
    if name in _ALIASES:
        return _ALIASES[name]
    return next((kind for prefix, kind in _PREFIXES if name.startswith(prefix)), "any")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    for kind, types in (("boolean", bool), ("integer", int), ("number", float), ("string", str), ("array", list),
                        ("object", dict)):
        if isinstance(value, types):
            return kind
    return "any"


def _unique(found: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    kinds: list[str] = []
    out = []
    for kind, node in found:
        if kind not in kinds:
            kinds.append(kind)
            out.append((kind, node))
    return out


def _deref(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """`node` with its local `$ref` (`#/$defs/X`, `#/definitions/X`, `#`) followed; the keywords
    beside the $ref win. A $ref that leads nowhere (remote, missing, a cycle) leaves none of it."""
    for _ in range(MAX_DEPTH):
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return node
        rest = {key: value for key, value in node.items() if key != "$ref"}
        target = root if ref == "#" else local(root, ref)
        if target is None:
            return rest
        node = {**target, **rest}
    return {}


# -- reading a value ------------------------------------------------------------------------------


def _from_text(text: str, kinds: list[str]) -> Any:
    """A value written as text (XML forms): the first type it fits; else the text itself."""
    word = text.strip()
    first = next((kind for kind in kinds if kind != "null"), "null")
    if first not in ("string", "any") and word.lower() in _NULLS:
        return None
    for kind in kinds:
        if kind in ("string", "any"):
            return text
        try:
            return _READERS[kind](word)
        except _Unfit:
            continue
    return text


def _from_json_text(text: str, kinds: list[str]) -> Any:
    """A string a JSON form gave: read only for a property no string fits."""
    if "string" in kinds or "any" in kinds:
        return text
    return _from_text(text, kinds) if text.strip().lower() not in _NULLS else text


def _integer(word: str) -> int:
    if not _INTEGER.fullmatch(word):
        raise _Unfit
    try:
        return int(word.split(".")[0].replace("_", ""))
    except ValueError:  # more digits than Python reads from text (4300)
        raise _Unfit from None


def _number(word: str) -> int | float:
    if _INTEGER.fullmatch(word) and "." not in word:
        return _integer(word)  # exactly: a float would round a long one
    if not _NUMBER.fullmatch(word):
        raise _Unfit
    value = float(word.replace("_", ""))
    if not math.isfinite(value):
        raise _Unfit  # too large for a float (JSON has no inf)
    return int(value) if value.is_integer() else value


def _boolean(word: str) -> bool:
    try:
        return _BOOLEANS[word.lower()]
    except KeyError:
        raise _Unfit from None


def _array(word: str) -> list[Any]:
    value = _literal(word)
    if not isinstance(value, list):
        raise _Unfit
    return value


def _object(word: str) -> dict[str, Any]:
    value = _literal(word)
    if not isinstance(value, dict):
        raise _Unfit
    return value


def _null(word: str) -> None:
    raise _Unfit  # "null" itself is read before any type


_READERS = {"integer": _integer, "number": _number, "boolean": _boolean, "array": _array, "object": _object,
            "null": _null}


def _literal(word: str, again: bool = True) -> Any:
    """JSON, else a Python literal; a JSON string holding one is read once more."""
    try:
        value = json.loads(word)
    except (ValueError, RecursionError):
        if len(word) > MAX_LITERAL:
            raise _Unfit from None
        try:
            value = ast.literal_eval(word)
        except Exception:  # SyntaxError, ValueError, and MemoryError or RecursionError when deeply nested
            raise _Unfit from None
    if isinstance(value, str) and again:
        return _literal(value.strip(), again=False)
    return _plain(value, 0)


def _plain(value: Any, depth: int) -> Any:
    """`value` as JSON holds it (tuples as lists); _Unfit when JSON cannot hold it (NaN, which
    json.loads reads too)."""
    if depth > MAX_DEPTH:
        raise _Unfit
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Unfit
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: _plain(item, depth + 1) for key, item in value.items()}
    raise _Unfit  # a set, bytes, a complex number, Ellipsis, a key that is not text
