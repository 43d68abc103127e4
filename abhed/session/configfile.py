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
    `[section]` each (a key whose default is None has no TOML form and is left out)."""
    from abhed.session import config
    lines = list(HEADER)
    sections = config.Settings().model_dump(mode="json")
    for key, value in sections.items():
        if not isinstance(value, dict):
            lines.append(f"# {key} = {json.dumps(value)}")
    for key, value in sections.items():
        if isinstance(value, dict):
            lines += ["", f"[{key}]"] + [f"# {name} = {json.dumps(v)}" for name, v in value.items() if v is not None]
    return "\n".join(lines) + "\n"


def write_example(path: Path) -> None:
    """Create `path` (and its directory, private) holding `example()`, readable by its owner alone.
    Never overwrites: an existing file raises FileExistsError; other failures raise OSError."""
    text = example()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path, "x", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)
