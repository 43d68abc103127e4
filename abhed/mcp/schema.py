"""Checking a call's arguments against the input schema the operator pinned for an MCP tool.

A small JSON Schema validator for what tool schemas use: type, properties, required,
additionalProperties, items, enum, const, anyOf/oneOf/allOf, minimum/maximum, minLength/maxLength,
minItems/maxItems, pattern (run by fallback_grep, in linear time),
and local `$ref`s (#/$defs/..., #/definitions/...). Keywords it does not know (format, ...) are
left to the server, which validates again. Each problem names the field and what was expected,
so the model can correct the call.
"""

from __future__ import annotations

import json
from typing import Any

import fallback_grep

from abhed.common.jsonref import local

MAX_PROBLEMS = 10
MAX_DEPTH = 64  # schema nesting followed ($ref cycles end here)
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
    or isinstance(v, float) and v.is_integer(),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def problems(value: Any, schema: Any) -> list[str]:
    """What is wrong with `value` against `schema` (empty: it is valid), at most MAX_PROBLEMS."""
    found: list[str] = []
    _check(value, schema, "", schema if isinstance(schema, dict) else {}, found, 0)
    return found[:MAX_PROBLEMS]


def _where(path: str) -> str:
    return f"`{path}`" if path else "the arguments"


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any] | None:
    ref = schema.get("$ref")
    return local(root, ref) if isinstance(ref, str) else schema


def _check(value: Any, schema: Any, path: str, root: dict[str, Any], found: list[str], depth: int) -> None:
    if len(found) >= MAX_PROBLEMS or depth > MAX_DEPTH or schema is True or not isinstance(schema, dict):
        if schema is False:
            found.append(f"{_where(path)} is not allowed here")
        return
    resolved = _resolve(schema, root)
    if resolved is None:
        return
    schema = resolved
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_TYPES.get(name, lambda v: True)(value) for name in names if isinstance(name, str)):
            found.append(f"{_where(path)} must be {' or '.join(map(str, names))}; got {_shown(value)}")
            return
    if "enum" in schema and isinstance(schema["enum"], list) and not any(_same(value, e) for e in schema["enum"]):
        found.append(f"{_where(path)} must be one of {', '.join(_shown(e) for e in schema['enum'][:20])}; "
                     f"got {_shown(value)}")
    if "const" in schema and not _same(value, schema["const"]):
        found.append(f"{_where(path)} must be {_shown(schema['const'])}; got {_shown(value)}")
    _combinators(value, schema, path, root, found, depth)
    if isinstance(value, dict):
        _object(value, schema, path, root, found, depth)
    elif isinstance(value, list):
        _array(value, schema, path, root, found, depth)
    elif isinstance(value, str):
        _string(value, schema, path, found)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _number(value, schema, path, found)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                            and not isinstance(a, bool) and not isinstance(b, bool) and a == b)


def _combinators(value: Any, schema: dict[str, Any], path: str, root: dict[str, Any], found: list[str],
                 depth: int) -> None:
    for sub in schema.get("allOf") or []:
        _check(value, sub, path, root, found, depth + 1)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if not isinstance(options, list) or not options:
            continue
        fits = sum(not _sub(value, option, path, root, depth) for option in options)
        if fits == 0:
            first = _sub(value, options[0], path, root, depth)
            found.append(f"{_where(path)} matches none of the {len(options)} allowed forms (the first says: "
                         f"{first[0] if first else '?'})")
        elif key == "oneOf" and fits > 1:
            found.append(f"{_where(path)} matches {fits} of the allowed forms; exactly one must match")


def _sub(value: Any, schema: Any, path: str, root: dict[str, Any], depth: int) -> list[str]:
    inner: list[str] = []
    _check(value, schema, path, root, inner, depth + 1)
    return inner


def _object(value: dict[str, Any], schema: dict[str, Any], path: str, root: dict[str, Any], found: list[str],
            depth: int) -> None:
    props = _v if isinstance(_v := schema.get("properties"), dict) else {}
    for name in schema.get("required") or []:
        if isinstance(name, str) and name not in value:
            sub = _v if isinstance(_v := props.get(name), dict) else {}
            kind = f" ({sub['type']})" if isinstance(sub.get("type"), str) else ""
            found.append(f"`{_join(path, name)}` is required{kind}")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in props:
            _check(item, props[name], _join(path, name), root, found, depth + 1)
        elif extra is False:
            found.append(f"`{_join(path, name)}` is not a parameter here; the parameters are: "
                         f"{', '.join(props) or '(none)'}")
        elif isinstance(extra, dict):
            _check(item, extra, _join(path, name), root, found, depth + 1)


def _join(path: str, name: Any) -> str:
    return f"{path}.{name}" if path else str(name)


def _array(value: list[Any], schema: dict[str, Any], path: str, root: dict[str, Any], found: list[str],
           depth: int) -> None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    if isinstance(low, int) and len(value) < low:
        found.append(f"{_where(path)} must have at least {low} items; it has {len(value)}")
    if isinstance(high, int) and len(value) > high:
        found.append(f"{_where(path)} must have at most {high} items; it has {len(value)}")
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            _check(item, items, f"{path}[{index}]", root, found, depth + 1)


def _string(value: str, schema: dict[str, Any], path: str, found: list[str]) -> None:
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(value) < low:
        found.append(f"{_where(path)} must be at least {low} characters long; it has {len(value)}")
    if isinstance(high, int) and len(value) > high:
        found.append(f"{_where(path)} must be at most {high} characters long; it has {len(value)}")
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and not _matches(pattern, value):
        found.append(f"{_where(path)} must match the pattern {pattern!r}; got {_shown(value)}")


def _matches(pattern: str, value: str) -> bool:
    """ECMA `pattern` (an unanchored search), run by fallback_grep: linear time whatever the
    pattern. One RE2 cannot run (lookaround, backreferences) is left to the server."""
    try:
        return fallback_grep.search(pattern, value) is not None
    except Exception:  # fallback_grep refuses the pattern: the server decides
        return True


def _number(value: float, schema: dict[str, Any], path: str, found: list[str]) -> None:
    for key, test, word in (("minimum", lambda b: value < b, "at least"), ("maximum", lambda b: value > b, "at most"),
                            ("exclusiveMinimum", lambda b: value <= b, "more than"),
                            ("exclusiveMaximum", lambda b: value >= b, "less than")):
        bound = schema.get(key)
        if isinstance(bound, (int, float)) and not isinstance(bound, bool) and test(bound):
            found.append(f"{_where(path)} must be {word} {bound}; got {value}")
