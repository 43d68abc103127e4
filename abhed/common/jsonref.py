"""Local JSON references (`#/$defs/Name`) looked up in the schema that holds them, for the MCP
gateway's argument check and the text calls' value conversion alike. A remote reference is never
fetched: it resolves to None, as a missing one does."""

from __future__ import annotations

from typing import Any


def local(root: dict[str, Any], ref: str) -> dict[str, Any] | None:
    """The schema `ref` (a JSON pointer after "#/") names inside `root`; None when it names none."""
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None
