"""Nearby existing paths for a path that does not exist, so "not found" comes with a way forward.

Looks below the deepest ancestor that does exist (a bounded walk that skips the usual heavy
directories) and ranks candidates with rapidfuzz against the missing part of the path.
"""

from __future__ import annotations

import os
from pathlib import Path


SKIP_DIRS = frozenset({".git", "node_modules", "target", "dist", "__pycache__", ".venv", ".hg", ".svn"})
MAX_CANDIDATES = 20_000
MAX_DEPTH = 4


def existing_ancestor(path: Path) -> Path:
    for parent in path.parents:
        if parent.is_dir():
            return parent
    return Path(path.anchor)


def _candidates(base: Path, want_dirs: bool) -> list[str]:
    """Paths under `base`, relative to it, breadth-limited by depth and count."""
    found: list[str] = []
    for root, dirs, files in os.walk(base):
        depth = len(Path(root).relative_to(base).parts)
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS) if depth < MAX_DEPTH else []
        names = dirs if want_dirs else files
        rel = os.path.relpath(root, base)
        found.extend(os.path.normpath(os.path.join(rel, n)) for n in sorted(names))
        if len(found) >= MAX_CANDIDATES:
            break
    return found


def similar_paths(missing: Path, *, within: Path | None = None, limit: int = 3, want_dirs: bool = False) -> list[Path]:
    """Up to `limit` existing paths that look like `missing`, best first.

    `within` bounds the search (the workspace), so suggestions never point outside what the model
    may read.
    """
    from rapidfuzz import fuzz, process  # here: only a path that is not there needs the fuzzy matcher
    base = existing_ancestor(missing)
    if within is not None and not (base == within or within in base.parents):
        base = within
    try:
        wanted = str(missing.relative_to(base))
    except ValueError:
        wanted = missing.name
    choices = _candidates(base, want_dirs)
    name_hits = [c for c in choices if os.path.basename(c) == missing.name]
    ranked = process.extract(wanted, choices, scorer=fuzz.WRatio, limit=limit, score_cutoff=60)
    best = list(dict.fromkeys([*name_hits[:limit], *(c for c, _, _ in ranked)]))
    return [base / c for c in best[:limit]]


def glob_hint(missing: Path) -> str:
    stem = missing.stem or missing.name
    return f'Use glob (e.g. pattern "**/{stem}*") to list candidates.'
