"""Paths the file tools never change without a human's confirmation (issue 12 item 3).

Host git obeys what lies in a repository's `.git/config` (core.fsmonitor, core.hooksPath...),
`.git/hooks/`, `.git/commondir` and `.git/info/`; Abhed obeys `.abhed/`. A session that wrote
them could run commands on the host the next time anyone types `git status`. The list is the
sandbox's (sandbox.config.DEFAULT_PROTECTED_PATHS, which bash enforces with read-only mounts),
plus `REDIRECTS`;
here it applies to every `.git` directory at any depth (nested repositories included), and
creating or replacing anything named `.git` (a directory, or a worktree's `gitdir:` file) is
guarded too.

The approval layer asks for confirmation when the path the model named is protected
(`reason`); the tool itself refuses when the path only becomes protected through a symlink
(`through_link`), since the human was never shown that path.
"""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.config import DEFAULT_PROTECTED_PATHS

GIT = ".git"
# Files in a .git directory that send git to another repository's config and hooks. The sandbox
# cannot guard these with a mount (git treats an empty placeholder as fatal) and quarantines them
# instead, so they are not in its mount list; the file tools guard them here.
REDIRECTS = ("commondir",)


def _entries() -> list[tuple[tuple[str, ...], bool]]:
    """(components, is_directory) of each protected entry."""
    entries = [(tuple(e.strip("/").split("/")), e.endswith("/")) for e in DEFAULT_PROTECTED_PATHS]
    return entries + [((GIT, name), False) for name in REDIRECTS]


def _matches(parts: tuple[str, ...], entry: tuple[str, ...], is_dir: bool) -> bool:
    for start in range(len(parts) - len(entry) + 1):
        if parts[start:start + len(entry)] == entry:
            if is_dir or start + len(entry) == len(parts):
                return True
    return False


def reason(path: Path) -> str | None:
    """Why changing the absolute, normalised `path` needs a human's confirmation, or None."""
    parts = path.parts
    for entry, is_dir in _entries():
        if _matches(parts, entry, is_dir):
            shown = "/".join(entry) + ("/" if is_dir else "")
            return f"changes {path}, inside the protected path {shown} (host git or Abhed would obey it)"
    if GIT in parts[:-1]:
        below = Path(*parts[: parts.index(GIT) + 1])
        if not os.path.isdir(below):
            return f"creates the repository directory {below} (host git would obey its config and hooks)"
    if parts and parts[-1] == GIT:
        return f"creates or replaces {path}, a repository marker host git obeys"
    return None


def lexical(raw: str, cwd: Path) -> Path:
    """The path as the model named it (made absolute, `..` folded), symlinks not resolved."""
    return Path(os.path.normpath(os.path.join(cwd, raw)))


def through_link(raw: str, real: Path, cwd: Path) -> str | None:
    """Why the tool must refuse: the path is protected only once symlinks are resolved (so the
    approval layer, which judged the named path, never showed it to a human). None if fine."""
    why = reason(real)
    if why is None or reason(lexical(raw, cwd)) is not None:
        return None
    return (f"{raw} resolves through a symlink to {real}, which is protected: this call {why}. It was not "
            f"changed. If this change is really wanted, name {real} itself, so a human is asked to confirm it.")


def confirmation_needed(raw: object, base: Path) -> str | None:
    """For the approval layer: why a write/edit of the path `raw` needs a human, or None.

    Both the named path and where it resolves now are judged; the tool re-checks at run time.
    """
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        return None  # the tool rejects it with its own message
    named = lexical(raw, base)
    try:
        real = Path(os.path.realpath(named))
    except OSError:  # a component changed while it was resolved: fail closed
        return f"changes {named}, whose path changed while it was being checked"
    return reason(named) or reason(real)
