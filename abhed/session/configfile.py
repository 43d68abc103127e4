"""The operator's config file as text: the example `abhed config init` writes, and the settings
in effect flattened to `section.key` lines for `abhed config show`.

Both are read off `config.Settings`, so a new setting appears in them with no edit here. Kept
beside config.py, which loads and validates; this module only writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

HEADER = ["# Abhed's operator settings. Every key is shown at its default, commented out: uncomment to change.",
          "# Precedence: defaults < this file < ABHED_* environment variables < command-line flags.", ""]


def flat(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, object]]:
    """(dotted key, value) for every leaf of a nested settings dict, in its order."""
    out: list[tuple[str, object]] = []
    for key, value in tree.items():
        out += flat(value, f"{prefix}{key}.") if isinstance(value, dict) else [(prefix + key, value)]
    return out


def example() -> str:
    """A config file with every setting at its default, commented out: the top-level keys, then a
    `[section]` each, a nested one as `[section.sub]` (a key whose default is None has no TOML form
    and is left out). Uncommented, every line is TOML that loads to the defaults."""
    from abhed.session import config
    lines = list(HEADER)
    sections = config.Settings().model_dump(mode="json")
    lines += [f"# {key} = {json.dumps(value)}" for key, value in sections.items() if not isinstance(value, dict)]
    for key, value in sections.items():
        if isinstance(value, dict):
            lines += _table(key, value)
    return "\n".join(lines) + "\n"


def _table(name: str, values: dict[str, Any]) -> list[str]:
    """`[name]` and its keys, then its nested tables after them (TOML puts a table's own keys first).
    A JSON scalar, string or list of them is TOML as json.dumps writes it."""
    lines = ["", f"[{name}]"] + [f"# {key} = {json.dumps(value)}" for key, value in values.items()
                                 if value is not None and not isinstance(value, dict)]
    for key, value in values.items():
        if isinstance(value, dict):
            lines += _table(f"{name}.{key}", value)
    return lines


def write_example(path: Path) -> None:
    """Create `path` (and its directory, private) holding `example()`, readable by its owner alone.
    Never overwrites: an existing file raises FileExistsError; other failures raise OSError."""
    text = example()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path, "x", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)
