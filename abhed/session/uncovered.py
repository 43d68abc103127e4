"""What checkpoints leave out, watched across one call, so that what undo cannot bring back is said.

Checkpoints do not keep ignored files (node_modules, build output, .venv: the project's .gitignore
and checkpoints.exclude) nor files over checkpoints.max_file_bytes. A bash call that deletes or
changes such a file did something undo cannot take back, and the human and the model must hear
it. So before a bash call the left-out entries are surveyed -- git lists them (`ls-files -o -i
--directory`: names only), Abhed stats each file below them through descriptors beneath the
workspace -- and again after it; what was created, deleted or changed in between is named in the
call's observation and in `abhed checkpoints`.

Bounded: at most MAX_ENTRIES entries are stat'ed per survey; beyond that, a left-out directory is
watched by its own stat only (entries added to or removed from it are seen, a file changed in place
deep inside it is not), and the note says so.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from abhed.files.atomic import is_temp
from abhed.session import treeio

MAX_ENTRIES = 20_000
MAX_NAMED = 10  # left-out paths named in a note; the rest are counted


@dataclass
class Survey:
    """Left-out paths and their stat: (kind, inode, size, mtime_ns); `partial` the tops not walked whole."""

    entries: dict[str, tuple[str, int, int, int]] = field(default_factory=dict)
    partial: set[str] = field(default_factory=set)
    tops: list[str] = field(default_factory=list)  # what was surveyed, as listed


def survey(workspace: str, listed: list[str], skip: tuple[str, ...], previous: Survey | None = None,
           touched: set[str] | None = None) -> Survey:
    """Stat everything below the left-out `listed` entries (git's names; a directory ends in "/"; the
    files git could not take; what the survey before the call saw); `skip`: workspace-relative
    directories never watched (Abhed's own: .abhed/, a session store inside the workspace).
    `previous` and `touched` (changeset.py): a top walked whole by `previous` that no path of
    `touched` lies at, above or below keeps what `previous` found there, unwalked."""
    found = Survey()
    budget = [MAX_ENTRIES]
    kept = _by_top(previous, touched) if previous is not None and touched is not None else {}
    with treeio.Tree(workspace) as tree:
        for name in dict.fromkeys(name.rstrip("/") for name in listed):
            if not name or is_temp(name.rsplit("/", 1)[-1]) or any(name == s or name.startswith(s + "/") for s in skip):
                continue
            found.tops.append(name)
            if name in found.entries:
                continue
            if name in kept and len(kept[name]) <= budget[0]:
                found.entries.update(kept[name])
                budget[0] -= len(kept[name]) - 1  # (as _walk counts: the top itself is free)
            else:
                _walk(tree, name, found, budget)
    return found


def _by_top(previous: Survey, touched: set[str]) -> dict[str, dict[str, tuple[str, int, int, int]]]:
    """`previous`'s entries of each top it walked whole and `touched` leaves alone."""
    tops = {t for t in previous.tops if t not in previous.partial and t in previous.entries}
    tops -= {t for t in tops if any(p == t or p.startswith(t + "/") or t.startswith(p + "/") for p in touched)}
    kept: dict[str, dict[str, tuple[str, int, int, int]]] = {t: {} for t in tops}
    for path, key in previous.entries.items():
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            top = "/".join(parts[:depth])
            if top in kept:
                kept[top][path] = key
                break
    return kept


def _walk(tree: treeio.Tree, top: str, found: Survey, budget: list[int]) -> None:
    parent, _, name = top.rpartition("/")
    dirfd = _opened(tree, parent)
    if dirfd is None:
        return
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except OSError:
        return
    found.entries[top] = _key(st)
    if not stat.S_ISDIR(st.st_mode):
        return
    stack = [top]
    while stack:
        rel = stack.pop()
        fd = _opened(tree, rel)
        if fd is None:
            continue
        try:
            with os.scandir(fd) as listing:
                children = list(listing)
        except OSError:
            continue
        for child in children:
            if budget[0] <= 0:
                found.partial.add(top)
                return
            budget[0] -= 1
            path = f"{rel}/{child.name}"
            try:
                st = child.stat(follow_symlinks=False)
            except OSError:
                continue
            found.entries[path] = _key(st)
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
        tree.forget(rel)  # one descriptor at a time: a left-out tree may hold thousands of directories


def _opened(tree: treeio.Tree, rel: str) -> int | None:
    """The directory `rel`, or None when it is gone or cannot be opened (this user may not read it: the
    checkpoint names it as not covered)."""
    try:
        return tree.dir(rel)
    except OSError:
        return None  # pragma: no mutate (equivalent: falling off the end returns None too)


def _key(st: os.stat_result) -> tuple[str, int, int, int]:
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode) else "file"
    return kind, st.st_ino, st.st_size, st.st_mtime_ns


def changes(before: Survey, after: Survey) -> list[str]:
    """What changed in the left-out entries, one phrase per top entry: "node_modules/ (3 deleted)"."""
    created = [p for p in after.entries if p not in before.entries]
    deleted = [p for p in before.entries if p not in after.entries]
    changed = [p for p, key in after.entries.items()
               if p in before.entries and key != before.entries[p] and key[0] != "dir"]
    by_top: dict[str, dict[str, int]] = {}
    tops = set(before.entries) | set(after.entries)
    for what, paths in (("created", created), ("deleted", deleted), ("changed", changed)):
        for path in paths:
            top = _top_of(path, tops)
            counts = by_top.setdefault(top, {})
            counts[what] = counts.get(what, 0) + 1
    phrases = []
    for top in sorted(by_top):
        counts = by_top[top]
        kind = (after.entries.get(top) or before.entries.get(top) or ("file",))[0]
        label = f"{top}/" if kind == "dir" else top
        detail = ", ".join(f"{n:,} {what}" for what, n in counts.items())
        partial = " (only entries added or removed are seen below it)" if top in before.partial | after.partial else ""
        phrases.append(f"{label} ({detail}){partial}")
    return phrases


def _top_of(path: str, tops: set[str]) -> str:
    """The outermost surveyed ancestor of `path` (or itself)."""
    parts = path.split("/")
    for depth in range(1, len(parts) + 1):
        candidate = "/".join(parts[:depth])
        if candidate in tops:
            return candidate
    return path  # pragma: no cover (every surveyed path lies below a surveyed top)


def note(phrases: list[str]) -> str:
    """The sentence the observation ends with."""
    named = "; ".join(phrases[:MAX_NAMED]) + (f"; and {len(phrases) - MAX_NAMED} more" if len(phrases) > MAX_NAMED else "")
    return (f"this call changed what checkpoints do not cover (ignored, excluded or too large), which undo cannot bring "
            f"back: {named}")
