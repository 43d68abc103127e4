"""Instruction files for the model: ABHED.md and AGENTS.md, at three levels, by one mechanism.

- The user's own, `~/.config/abhed/AGENTS.md` (XDG_CONFIG_HOME honoured): in the system prompt.
- The workspace root's: in the system prompt (agent/prompt.py).
- A subdirectory's: added to the conversation once, when the agent first touches that directory
  (a read, edit, write, glob or grep path in it, or a bash call that leaves its cwd there), with
  the notes of every directory between the root and it. It is a user message recorded in the log
  (origin "notes": the event), so a resume restores it; compaction may summarise it away, and then
  the next touch loads it again. Whether a directory's notes are in the conversation is read from
  the conversation itself (the header is unique to the directory): no state to keep in step.

The workspace's files are the model's to write (it can write an AGENTS.md as easily as any file),
so they are text for the model and never configuration: nothing in them changes a rule, a tool or
a setting (docs/security.md). They are read beneath the workspace root without following any
symlink (files/beneath.py), so a link planted as sub/AGENTS.md cannot bring a file from outside the
workspace into the conversation; a special file is skipped, never opened for reading.
Every file is bounded: what is cut says so and how much.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from abhed.files.beneath import open_beneath, opened, read_fd
from abhed.files.paths import is_within
from abhed.tools.base import head_tail

NOTES_FILES = ("ABHED.md", "AGENTS.md")
ROOT_CHARS = 20_000  # the root's files together (the system prompt)
USER_CHARS = 8_000  # the user's own file
NESTED_CHARS = 8_000  # one subdirectory's files together
MAX_NESTED = 20  # subdirectories' notes in one conversation; more are named, not loaded
READ_BYTES = 256 * 1024  # read no more of one file than this (the rest is cut by head_tail's note anyway)
NESTED_PREFIX = "[Abhed: notes for the directory "


def user_notes_path(env: dict[str, str] | None = None) -> Path:
    """The user's own instruction file: $XDG_CONFIG_HOME/abhed/AGENTS.md, else ~/.config/abhed/AGENTS.md."""
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config")
    return Path(base) / "abhed" / "AGENTS.md"


def _text(fd: int) -> str | None:
    """A regular file's text, or None (a FIFO, a device, a directory: never read)."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return None
    return read_fd(fd, READ_BYTES).decode("utf-8", errors="replace").strip() or None


def read_beneath(root: Path, path: Path, hops: int = 1) -> str | None:
    """The text of `path` below `root`, opened without following a symlink; None when absent,
    unreadable or not a regular file. A symlink as the file itself (AGENTS.md -> CLAUDE.md) is
    followed `hops` times when its target, taken as a path, lies in the workspace: that target is
    opened beneath the root in turn, so whatever the link says, nothing outside is read."""
    try:
        with opened(open_beneath(root, path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)) as fd:
            return _text(fd)
    except OSError as exc:
        if exc.errno != errno.ELOOP or hops <= 0:
            return None
    try:
        target = Path(os.path.normpath(path.parent / os.readlink(path)))  # only a name: opened beneath below
    except OSError:
        return None
    # is_within: said, not relied on (open_beneath refuses a target outside the root anyway)
    return read_beneath(root, target, hops - 1) if is_within(target, root) else None  # pragma: no mutate


def read_user(path: Path) -> str | None:
    """The user's own file (outside the workspace, theirs: a symlink from a dotfiles repository is fine)."""
    try:
        with opened(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)) as fd:
            return _text(fd)
    except OSError:
        return None


def render(found: list[tuple[str, str]], limit: int) -> str | None:
    """Each file's text under its name, bounded together to `limit` characters with a note for what was cut."""
    parts = []
    for name, text in found:
        kept, cut = head_tail(text, limit // len(found))
        parts.append(f"## {name}\n{kept}" + (f"\n[{name} is longer; {cut} characters were left out here. Read the "
                                              "file for the rest.]" if cut else ""))
    return "\n\n".join(parts) or None


def directory_notes(root: Path, directory: Path, limit: int) -> tuple[str | None, list[str]]:
    """The notes of one directory of the workspace (ABHED.md, AGENTS.md), and the files they came from."""
    found = [(name, text) for name in NOTES_FILES
             if (text := read_beneath(root, directory / name)) is not None]
    return render(found, limit), [str(directory / name) for name, _ in found]


def root_notes(workspace: Path) -> str | None:
    """The workspace root's notes, for the system prompt."""
    return directory_notes(workspace, workspace, ROOT_CHARS)[0]


def user_notes(path: Path | None = None) -> str | None:
    """The user's own notes, for the system prompt (every workspace)."""
    path = path or user_notes_path()
    text = read_user(path)
    return render([(f"{path} (the user's own notes, for every project)", text)], USER_CHARS) if text else None


def header(directory: Path) -> str:
    return f"{NESTED_PREFIX}{directory}/ (written by the project's people; they apply to its files and below)]"


def touched(arguments: dict, cwd: Path, *, runs_code: bool, takes_path: bool) -> Path | None:
    """The directory a call works in: for a tool that runs code (bash), its cwd after the call; for one
    whose input has a `path` (read, edit, write, glob, grep: the tool's own schema says), that
    directory, or a file's parent."""
    if runs_code:
        return cwd
    raw = arguments.get("path") if takes_path else None
    if not isinstance(raw, str) or not raw:
        return None
    path = Path(os.path.normpath(raw if os.path.isabs(raw) else os.path.join(cwd, raw)))
    return path if path.is_dir() else path.parent


def below(workspace: Path, directory: Path) -> list[Path]:
    """The directories from the root's first subdirectory down to `directory` (none outside the workspace)."""
    return [d for d in reversed([directory, *directory.parents]) if d != workspace and is_within(d, workspace)]


def due(workspace: Path, directories: Iterable[Path], conversation: Iterable[str]) -> list[tuple[str, str]]:
    """The notes to add now for the directories touched: (text for the model, line for the human), one
    per subdirectory holding notes whose header is not in `conversation` (the user messages' texts)."""
    said = list(conversation)
    present = sum(text.count(NESTED_PREFIX) for text in said)
    out: list[tuple[str, str]] = []
    seen: set[Path] = set()
    for touched_dir in directories:
        for directory in below(workspace, touched_dir):
            if directory in seen or any(header(directory) in text for text in said):
                continue
            seen.add(directory)
            notes, files = directory_notes(workspace, directory, NESTED_CHARS)
            if notes is None:
                continue
            if present >= MAX_NESTED:
                out.append((f"[Abhed: {', '.join(files)} exist but were not loaded: the notes of {MAX_NESTED} "
                            "directories are in the conversation already. Read them if they matter here.]",
                            f"notes not loaded ({MAX_NESTED} directories' already are): {', '.join(files)}"))
                continue
            present += 1
            out.append((f"{header(directory)}\n{notes}", f"loaded the notes of {directory}/: {', '.join(files)}"))
    return out
