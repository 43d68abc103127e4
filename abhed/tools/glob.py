"""glob (spec §5): files matching a pattern, newest first, bounded, under the same ignore rules as grep."""

from __future__ import annotations

import heapq
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TypeVar

from pydantic import Field

from abhed.files import filewalk, splitwalk, textfile
from abhed.common.traits import Traits
from abhed.common.errors import ToolError
from abhed.files.globpattern import compile_glob, literal_prefix, path_test
from abhed.files.suggest import similar_paths
from abhed.tools.base import Tool, ToolContext, ToolInput, ToolResult, ok

T = TypeVar("T")

MAX_RESULTS = 1000
SHOWN_HIDDEN = 5


class GlobInput(ToolInput):
    pattern: str = Field(description="Glob, e.g. **/*.ts or src/**/*.test.js")
    path: str | None = Field(None, description="Directory to search from. Defaults to workspace root.")


def stat_root(root: Path, ctx: ToolContext) -> os.stat_result | None:
    """What the search root is (None: nothing there), or the instruction for why it cannot be known.
    By name: the walk reopens it below its root; this only decides which message or mode applies."""
    try:
        return os.stat(root)
    except FileNotFoundError:
        return None  # pragma: no mutate  (deleted, the function returns None all the same)
    except OSError as exc:  # e.g. a parent Abhed may not search (EACCES), or a name too long for its filesystem
        raise textfile.open_failed(exc, root, ctx.paths.workspace, "searching") from None


def search_root(raw: str | None, ctx: ToolContext, tool: str) -> Path:
    """The directory a search starts at: validated, inside the roots, and really a directory."""
    root = ctx.resolve(raw) if raw else ctx.paths.workspace
    st = stat_root(root, ctx)
    if st is not None and stat.S_ISDIR(st.st_mode):
        return root
    if st is not None:
        raise ToolError(f"path {root} is a file, not a directory. {tool} searches directories: set path to "
                        f"{root.parent}" + (" and pattern to its name." if tool == "glob" else
                                            ", or keep this path to search only this file with grep."))
    hints = similar_paths(root, within=ctx.paths.workspace, want_dirs=True)
    maybe = f" Did you mean {' or '.join(map(str, hints))}?" if hints else ""
    raise ToolError(f"Directory not found: {root}.{maybe} Omit path to search the whole workspace "
                    f"{ctx.paths.workspace}.")


def walk_checked(root: Path, ctx: ToolContext, keep=None, stamp=None, descend=None, found=None) -> filewalk.Listing:
    """filewalk.walk through descriptors opened below the allowed root (no symlink followed);
    `found`: see filewalk.walk."""
    try:
        return filewalk.walk(root, ctx.settings.search.exclude, keep, open_root=ctx.paths.open_dir, stamp=stamp,
                             descend=descend, found=found)
    except OSError as exc:
        raise textfile.open_failed(exc, root, ctx.paths.workspace, "searching") from None


def walk_summaries(root: Path, ctx: ToolContext, summarize: Callable[[filewalk.Listing], T],
                   stamp=None, descend=None, only_stamped: bool = False) -> list[T]:
    """splitwalk.summaries of a walk through descriptors opened below the allowed root: a big tree
    is walked by forked children too. `only_stamped`: see filewalk.walk."""
    try:
        with filewalk.Walk(root, ctx.settings.search.exclude, None, ctx.paths.open_dir, stamp, descend,
                           only_stamped) as walking:
            return splitwalk.summaries(walking, summarize, splitwalk.workers())
    except OSError as exc:
        raise textfile.open_failed(exc, root, ctx.paths.workspace, "searching") from None


def hidden_note(root: Path, hidden_dirs: list[str], hidden_files: int, files_label: str = "file") -> str:
    """What the ignore rules kept out of a search, and how to include it."""
    parts = []
    if hidden_dirs:
        names = ", ".join(sorted(os.path.relpath(d, root) for d in hidden_dirs)[:SHOWN_HIDDEN])
        more = f" and {len(hidden_dirs) - SHOWN_HIDDEN} more" if len(hidden_dirs) > SHOWN_HIDDEN else ""
        parts.append(f"{len(hidden_dirs)} director{'ies' if len(hidden_dirs) != 1 else 'y'} ({names}{more})")
    if hidden_files:
        parts.append(f"{hidden_files} {files_label}{'s' * (hidden_files != 1)}")
    if not parts:
        return ""
    return (f"[not searched, ignored by .gitignore or the operator's exclusions: {' and '.join(parts)}. To include "
            "one, set path to it.]")


def could_hold(directory: str, pattern: str) -> bool:
    """Could a file below `directory` (relative, no trailing slash) match the glob `pattern`?"""
    prefix = literal_prefix(pattern)
    inside = directory + "/"
    if not (inside.startswith(prefix) or prefix.startswith(inside)):
        return False
    # Only `**` crosses directories; so can a bracket class whose range spans "/" ([.-0]).
    return "**" in pattern or "[" in pattern or directory.count("/") + 1 < pattern.count("/") + 1


def pruner(patterns: list[str]):
    """The walk's `descend` test for brace-expanded glob patterns: enter a directory only if a file
    below it could match one of them (None: every directory could, `**/...` at the top)."""
    if any(literal_prefix(p) == "" and "**" in p for p in patterns):
        return None
    return lambda directory: any(could_hold(directory, p) for p in patterns)


def newest_first(paths: list[str], times: list[int], limit: int = MAX_RESULTS) -> list[str]:
    """The `limit` newest of `paths` (`times`: their modification times, index for index),
    newest first, ties in path order (spec §5)."""
    return [p for _, p in newest(paths, times, limit)]


def newest(paths: list[str], times: list[int], limit: int = MAX_RESULTS) -> list[tuple[int, str]]:
    """(-time, path) of the `limit` newest of `paths`, in the order newest_first gives them.

    Only the shown files are ordered: the limit-th newest time is the cut-off; the fewer than
    `limit` files newer than it are sorted, and the files at it (an unpacked archive or a
    checkout gives nearly all files one time) give only the first paths they lack, which
    heapq.nsmallest finds without sorting them all."""
    if not times:
        return []
    ordered = sorted(times)
    cut = ordered[-limit] if len(ordered) > limit else ordered[0]
    newer = sorted((-t, p) for t, p in zip(times, paths) if t > cut) if ordered[-1] > cut else []
    tied = [p for t, p in zip(times, paths) if t == cut]
    return newer + [(-cut, p) for p in heapq.nsmallest(limit - len(newer), tied)]


@dataclass
class Found:
    """What glob reports of a walk, or of one share of it (a forked child sends this, not every path:
    the newest MAX_RESULTS of a share hold every one of the whole walk's newest that lies in it)."""
    newest: list[tuple[int, str]]  # (-mtime, path) of the newest matches, in output order
    count: int  # matching files
    hidden_matches: int  # matching files the ignore rules hid
    holding: list[str]  # hidden directories that could hold a match
    unreadable: list[str]

    @classmethod
    def of(cls, listing: filewalk.Listing, root: Path, regex: re.Pattern[str], expanded: list[str]) -> Found:
        cut = len(str(root)) + 1
        return cls(newest(listing.stamped, listing.stamps), len(listing.stamped),
                   sum(1 for p in listing.hidden_files if regex.fullmatch(p[cut:])),
                   [d for d in listing.hidden_dirs if any(could_hold(d[cut:], p) for p in expanded)],
                   listing.unreadable)

    @classmethod
    def merged(cls, parts: list[Found]) -> Found:
        """The whole walk's from its shares': the same whichever file fell in which share."""
        return cls(list(islice(heapq.merge(*(f.newest for f in parts)), MAX_RESULTS)), sum(f.count for f in parts),
                   sum(f.hidden_matches for f in parts), [d for f in parts for d in f.holding],
                   sorted(d for f in parts for d in f.unreadable))


class Glob(Tool):
    name = "glob"
    description = "Find files matching a glob pattern. Returns paths sorted by modification time, newest first."
    Input = GlobInput
    traits = Traits(reads_only=True, parallel=True)
    example = {"pattern": "src/**/*.py"}

    def run(self, args: GlobInput, ctx: ToolContext) -> ToolResult:
        root = search_root(args.path, ctx, self.name)
        regex, expanded = compile_glob(args.pattern, str(root))
        found = Found.merged(walk_summaries(root, ctx, lambda listing: Found.of(listing, root, regex, expanded),
                                            stamp=path_test(regex, expanded), descend=pruner(expanded),
                                            only_stamped=True))
        note = hidden_note(root, found.holding, found.hidden_matches, "matching file")
        if not found.count:
            return ok("\n".join(filter(None, [f"[no files matched: {args.pattern}]",
                                              self._deeper_hint(args.pattern, ctx, root), note])),
                      matches=0, path=str(root))
        lines = [path for _, path in found.newest]
        if found.count > MAX_RESULTS:
            lines.append(f"[truncated: showing {MAX_RESULTS} of {found.count} files, newest first. Narrow the "
                         "pattern (e.g. src/**/*.ts instead of **/*) or set path to a subdirectory.]")
        if note:
            lines.append(note)
        if found.unreadable:
            lines.append(f"[{len(found.unreadable)} directories could not be read (permission denied), e.g. "
                         f"{found.unreadable[0]}]")
        return ok("\n".join(lines), matches=found.count, path=str(root))

    @staticmethod
    def _deeper_hint(pattern: str, ctx: ToolContext, root: Path) -> str:
        """A pattern without a slash matches only at the top; say if `**/` would have found files.

        The walk for the pattern itself stayed at the top, so this (rare) case walks the tree."""
        if "/" in pattern or pattern.startswith("**"):
            return ""
        regex, _ = compile_glob("**/" + pattern, str(root))
        cut = len(str(root)) + 1
        matching = lambda listing: sum(1 for p in listing.files if regex.fullmatch(p[cut:]))  # noqa: E731
        deeper = sum(walk_summaries(root, ctx, matching))
        if not deeper:
            return ""
        return (f"[{pattern} matches only files directly in {root}; **/{pattern} would match {deeper} "
                "file(s) in subdirectories]")
