"""`@`-mentions in a chat message: a fuzzy file picker while typing, the files attached on send.

Typing `@` and some letters offers the workspace's files ranked by a fuzzy match (the letters in
order, anywhere in the path; a match in the file's name, at the start of a word, or in one run
scores higher; then shorter paths). The files are those glob would search: the same walk
(files/filewalk.py) through descriptors below the workspace, under .gitignore and the operator's
`search.exclude`. Tab or Enter takes the highlighted one, Up/Down move. A name with a space or a
backslash is written escaped (`@my\\ notes.txt`).

On send, each `@path` naming a file in the workspace is read by the read tool (the project's one
read path: below the root's descriptor, no symlink followed, text only, numbered and bounded) and
its text attached after the message; the operator's `deny` rules for read are obeyed. At most
MAX_FILES files, each at most FILE_BUDGET characters, with a note where one is cut.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abhed.common.terminal import printable

MAX_SHOWN = 12  # choices the picker shows at once
MAX_LISTED = 100_000  # files the picker knows of; a larger tree is named by a longer prefix
REFRESH_S = 5.0  # the file list is walked again when older than this, the next time `@` is typed
MAX_FILES = 5  # files attached to one message
FILE_BUDGET = 20_000  # characters of one file's numbered lines put into the message
MENTION = re.compile(r"(?:(?<=\s)|^)@((?:\\.|[^\s\\])+)")


def escape(path: str) -> str:
    """A relative path as a mention writes it: spaces and backslashes escaped."""
    return re.sub(r"([\\\s])", r"\\\1", path)


def unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def mentioned(text: str) -> list[str]:
    """The paths `@`-mentioned in `text` (unescaped, in order, each once); a trailing , . ; : ) is
    punctuation, not the name's."""
    out: list[str] = []
    for match in MENTION.finditer(text):
        raw = match.group(1)
        trimmed = re.sub(r"(?<!\\)[,.;:!?)\]]+$", "", raw)
        for name in dict.fromkeys([unescape(trimmed), unescape(raw)]):
            if name and name not in out:
                out.append(name)
    return out


def score(query: str, path: str) -> float | None:
    """How well `path` (relative) matches `query`: None when the query's letters are not all in it,
    in order (case ignored); higher is better."""
    if not query:
        return 0.0 - len(path) / 1000
    lower, q = path.lower(), query.lower()
    name_at = lower.rfind("/") + 1
    # The name first: a query that fits in the file's name is what the person meant.
    best = _fit(q, lower, name_at)
    if best is None:
        best = _fit(q, lower, 0)
        if best is None:
            return None
    else:
        best += 10
    return best - len(path) / 1000


def _fit(q: str, text: str, start: int) -> float | None:
    """Greedy in-order match of `q` in `text[start:]`: points per letter, more for a run or a word start."""
    points, at, last = 0.0, start, -2
    for char in q:
        found = text.find(char, at)
        if found < 0:
            return None
        points += 1
        if found == last + 1:
            points += 2
        if found == start or text[found - 1] in "/_-. ":
            points += 3
        last, at = found, found + 1
    return points


def rank(query: str, paths: list[str], limit: int = MAX_SHOWN) -> list[str]:
    """The `limit` best matches of `query`, best first (ties by path)."""
    scored = [(s, p) for p in paths if (s := score(query, p)) is not None]
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [p for _, p in scored[:limit]]


class FileList:
    """The workspace's files as glob's walk sees them, relative, walked on demand and kept a while."""

    def __init__(self, walk: Callable[[], list[str]]) -> None:
        self._walk, self._at = walk, float("-inf")
        self._files: list[str] = []
        self._lock = threading.Lock()

    def files(self) -> list[str]:
        with self._lock:
            if time.monotonic() - self._at > REFRESH_S:
                try:
                    self._files = sorted(self._walk())[:MAX_LISTED]
                except OSError:
                    self._files = []
                self._at = time.monotonic()
            return self._files


def workspace_walk(workspace: Path, excludes: list[str]) -> Callable[[], list[str]]:
    """glob's walk of the workspace (ignore rules, descriptors below the root), as relative paths."""
    from abhed.files import filewalk
    from abhed.files.paths import PathPolicy
    policy = PathPolicy.create(workspace)

    def walk() -> list[str]:
        listing = filewalk.walk(policy.workspace, excludes, open_root=policy.open_dir)
        cut = len(str(policy.workspace)) + 1
        return [p[cut:] for p in listing.files]
    return walk


@dataclass
class Attached:
    prompt: str
    lines: list[str] = field(default_factory=list)  # one per mention, for the human


def attach(text: str, ctx: Any, gate: Any) -> Attached:
    """`text` with the files it `@`-mentions attached (see the module doc). `ctx`: the agent's
    ToolContext; `gate`: its Gate (deny rules)."""
    from abhed.common.errors import ToolError
    from abhed.tools.read import Read, ReadInput
    found = Attached(prompt=text)
    blocks: list[str] = []
    names: list[str] = []
    for name in mentioned(text):
        problem = _refused(ctx, name)
        if problem is None:
            names.append(name)
        elif problem:
            found.lines.append(f"[not attached: @{printable(name)}: {printable(problem)}]")
    for name in names[:MAX_FILES]:
        path = ctx.paths.workspace / name
        args = ReadInput(path=str(path))
        verdict = gate.effective().check("read", args)
        if verdict.decision == "deny":
            note = f"[not attached: @{name}: {verdict.reason}]"
        else:
            try:
                result = Read().run(args, ctx)
                note, block = _block(name, str(path), result.content, result.metadata)
                blocks.append(block)
            except ToolError as exc:
                note = f"[not attached: @{name}: {exc.message}]"
        found.lines.append(note)
    if len(names) > MAX_FILES:
        found.lines.append(f"[not attached: {len(names) - MAX_FILES} more @-mentioned files, over the {MAX_FILES} "
                           "a message takes; the model can read them]")
    if blocks or found.lines:
        found.prompt = text + "\n\n" + "\n\n".join(blocks + [line for line in found.lines if line.startswith("[not")])
    return found


def _refused(ctx: Any, name: str) -> str | None:
    """None when `name` (relative to the workspace) is a file to attach; why not when something by
    that name is there but cannot be attached (a link out, a directory); "" when nothing is there
    (an @ in prose: `@someone`). By name: the read itself goes below the root's descriptor."""
    from abhed.common.errors import ToolError
    if name.startswith("/"):
        return ""
    lexical = ctx.paths.workspace / name
    if not os.path.lexists(lexical):
        return ""
    try:
        real = ctx.paths.resolve(str(lexical))
    except ToolError as exc:
        return exc.message
    if real.is_dir():
        return "it is a directory (the model can list it with glob)"
    return None if real.is_file() else "it is not a regular file"


def _block(name: str, path: str, content: str, facts: dict[str, Any]) -> tuple[str, str]:
    """(the line shown to the human, the block put into the message) for one read file."""
    total = facts.get("total_lines", 0)
    cut = ""
    if len(content) > FILE_BUDGET:
        content = content[:FILE_BUDGET].rsplit("\n", 1)[0]
        cut = (f"\n[cut: the attachment holds the first {FILE_BUDGET} characters of {path}; read it with offset "
               "to see the rest]")
    size = f"{total} line{'s' * (total != 1)}" + (f", cut at {FILE_BUDGET} characters" if cut else "")
    line = f"[attached @{printable(name)}: {path}, {size}]"
    return line, f"{line}\n{content}{cut}"
