"""The absolute-path boundary (rule 5) and the operator's allowed roots.

Every path a tool receives passes through `PathPolicy.resolve` before anything touches the disk:
relative paths are refused with the absolute form they would have had, `..` and symlinks are
resolved before the policy check (so a symlink inside the workspace that points outside counts as
outside), and the result must lie under one of the allowed roots.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from abhed.errors import ToolError


class PathError(ToolError):
    """A path the model gave cannot be used; the message says which form would work."""


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True)
class PathPolicy:
    """Where tools may touch files. `roots` are resolved once, so comparisons are between real paths."""

    workspace: Path
    roots: tuple[Path, ...]

    @classmethod
    def create(cls, workspace: Path, roots: tuple[Path, ...] | list[Path] = ()) -> PathPolicy:
        ws = _real(workspace)
        resolved = tuple(dict.fromkeys(_real(r) for r in (roots or (ws,))))
        return cls(workspace=ws, roots=resolved)

    def resolve(self, raw: str, *, cwd: Path | None = None, field: str = "path") -> Path:
        """The real absolute path for `raw`, or PathError saying what to send instead."""
        base = cwd or self.workspace
        if not raw or not raw.strip():
            raise PathError(f"`{field}` is empty. Give an absolute path, e.g. {self.workspace / 'README.md'}.")
        if "\x00" in raw:
            raise PathError(f"`{field}` contains a NUL byte, which no file name can hold. Send the path without it.")
        if raw.startswith("~"):
            home = os.path.expanduser(raw.split("/", 1)[0])
            guess = os.path.normpath(os.path.join(home, *raw.split("/", 1)[1:]))
            raise PathError(
                f"`{field}` must be an absolute path; `~` is not expanded: got {raw!r}. "
                f"Did you mean {guess}?"
            )
        if not os.path.isabs(raw):
            guess = os.path.normpath(os.path.join(base, raw))
            raise PathError(
                f"`{field}` must be an absolute path: got {raw!r}. "
                f"Relative to the working directory {base} that is {guess}; send that instead."
            )
        real = _real(Path(raw))
        for root in self.roots:
            if is_within(real, root):
                return real
        raise PathError(self._outside_message(raw, real, field))

    def _outside_message(self, raw: str, real: Path, field: str) -> str:
        roots = ", ".join(str(r) for r in self.roots)
        lexical = os.path.normpath(raw)
        via = ""
        if str(real) != lexical:
            via = f" (it resolves to {real} through a symlink)"
        return (
            f"`{field}` {raw} is outside the allowed roots{via}. Abhed may only touch files under: {roots}. "
            "Work on files inside those directories; the operator can add roots with `allowed_roots` in the config."
        )
