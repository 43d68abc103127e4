"""Argument values converted by the tool's JSON schema (placeholder: replaced by the values work)."""

from __future__ import annotations

import json
import re
from typing import Any


def convert(args: dict[str, Any], schema: dict[str, Any], texts: bool) -> dict[str, Any]:
    props = schema.get("properties", {})
    if not texts:
        return args
    return {key: _typed(value, props.get(key, {})) if isinstance(value, str) else value for key, value in args.items()}


def _typed(value: str, prop: dict[str, Any]) -> Any:
    kind = prop.get("type", "string")
    text = value.strip()
    if kind == "integer" and re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    if kind == "number" and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        return float(text)
    if kind == "boolean" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if kind in ("array", "object"):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return value
    return value
