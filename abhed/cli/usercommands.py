"""Custom slash commands: prompt files the user and the operator keep, typed as `/name args`.

Where they come from, the later winning a name both hold:

- `WORKSPACE/.abhed/commands/*.md`, only when the operator's config says `commands.from_workspace =
  true`: the model can write files in the workspace, so by default a prompt it wrote never becomes a
  command the human runs believing it their own;
- `~/.config/abhed/commands/*.md` ($XDG_CONFIG_HOME/abhed/commands): the user's ("user");
- `commands/` beside the operator's config file (ABHED_CONFIG's directory), when that is another
  directory ("operator").

A file's name less `.md` is the command (`review-pr.md` is `/review-pr`: lowercase letters,
digits, - and _). Its text is the prompt sent to the model, after these placeholders are filled:
`$ARGUMENTS` is everything typed after the name, `$1` to `$9` its words (shell-like quoting), and
`$$` a `$`. A file with none of these placeholders gets what was typed appended as an
`ARGUMENTS:` line. An
optional first line `description: ...` is shown in /help and is not sent. A name a built-in
command has is refused, as is a file anyone but its owner (or root) could have written, a link, or
one over MAX_BYTES: each with a line saying why, shown when the chat starts and in /help.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path

from abhed.files import beneath
from abhed.session import config

NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
MAX_BYTES = 64 * 1024
MAX_COMMANDS = 200
PLACEHOLDER = re.compile(r"\$(ARGUMENTS|[1-9]|\$)")


@dataclass(frozen=True)
class Command:
    name: str
    text: str  # the prompt, description line removed
    source: str  # the file it was read from
    origin: str  # user | operator | workspace
    description: str = ""


@dataclass
class Catalog:
    commands: dict[str, Command] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # one line per file not taken, and why


def directories(env: dict[str, str], workspace: Path, from_workspace: bool) -> list[tuple[str, Path]]:
    """(origin, directory) from the lowest precedence to the highest (see the module doc)."""
    found = [("workspace", workspace / ".abhed" / "commands")] if from_workspace else []
    user = Path(env.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")) / "abhed" / "commands"
    found.append(("user", user))
    path = config.config_path(env)
    if path is not None and path.parent / "commands" != user:
        found.append(("operator", path.parent / "commands"))
    return found


def load(env: dict[str, str], workspace: Path, builtins: set[str], settings: config.Settings | None = None,
         allowed_roots: list[Path] | None = None) -> Catalog:
    """Every command of every directory; a directory that does not exist is no problem."""
    from_workspace = settings.commands.from_workspace if settings is not None else False
    roots = [workspace, *(allowed_roots if allowed_roots is not None else
                          (settings.allowed_roots if settings is not None else []))]
    catalog = Catalog()
    for origin, directory in directories(env, workspace, from_workspace):
        if origin != "workspace" and _writable_by_model(directory, roots):
            catalog.problems.append(f"{directory} is not read: it lies in {workspace} or an allowed root, where the "
                                    "model can write files (commands.from_workspace = true in the operator's config "
                                    "takes WORKSPACE/.abhed/commands instead)")
            continue
        for command in _read_directory(origin, directory, workspace, catalog.problems):
            if command.name in builtins:
                catalog.problems.append(f"{command.source}: /{command.name} is a built-in command, so this file is not "
                                        f"used; rename it (e.g. my-{command.name}.md)")
                continue
            if len(catalog.commands) >= MAX_COMMANDS and command.name not in catalog.commands:
                catalog.problems.append(f"{command.source}: not used, over {MAX_COMMANDS} custom commands")
                continue
            catalog.commands[command.name] = command
    return catalog


def _writable_by_model(directory: Path, roots: list[Path]) -> bool:
    real = Path(os.path.realpath(directory))
    return any(real == Path(os.path.realpath(r)) or Path(os.path.realpath(r)) in real.parents for r in roots)


def _open_directory(origin: str, directory: Path, workspace: Path) -> int:
    if origin == "workspace":  # below the workspace's descriptor, through no symlink (files/beneath.py)
        return beneath.open_beneath(workspace, directory, os.O_RDONLY | os.O_DIRECTORY)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    problem = config._unsafe(directory, os.fstat(fd))
    if problem:
        os.close(fd)
        raise PermissionError(f"{problem}: whoever can write it chooses what you send to the model")
    return fd


def _read_directory(origin: str, directory: Path, workspace: Path, problems: list[str]) -> list[Command]:
    try:
        fd = _open_directory(origin, directory, workspace)
    except FileNotFoundError:
        return []
    except PermissionError as exc:
        problems.append(f"{directory} is not read: {exc}")
        return []
    except OSError as exc:
        problems.append(f"{directory} is not read: {exc.strerror or exc}")
        return []
    with beneath.opened(fd):
        out = []
        for entry in sorted(os.listdir(fd)):
            if not entry.endswith(".md"):
                continue
            path = directory / entry
            name = entry[:-3]
            if not NAME.fullmatch(name):
                problems.append(f"{path}: a command's name is lowercase letters, digits, - and _, starting with a "
                                "letter (at most 32): rename the file")
                continue
            text, problem = _read_file(fd, entry, path, origin)
            if problem:
                problems.append(f"{path} is not used: {problem}")
                continue
            description, body = split_description(text)
            out.append(Command(name, body, str(path), origin, description))
        return out


def _read_file(dirfd: int, entry: str, path: Path, origin: str) -> tuple[str, str]:
    """(text, "") or ("", why not)."""
    try:
        fd = beneath.open_entry(dirfd, entry, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return "", "it is a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
    with beneath.opened(fd):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "", "it is not a regular file"
        problem = None if origin == "workspace" else config._unsafe(path, st)
        if problem:
            return "", problem
        if st.st_size > MAX_BYTES:
            return "", f"it is {st.st_size} bytes, over the {MAX_BYTES} a command may have"
        data = beneath.read_fd(fd, MAX_BYTES + 1)
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError:
        return "", "it is not UTF-8 text"


def split_description(text: str) -> tuple[str, str]:
    """(description, prompt): a first line `description: ...` is the description, not sent."""
    first, _, rest = text.partition("\n")
    if first.lower().startswith("description:"):
        return first.split(":", 1)[1].strip(), rest.lstrip("\n")
    return "", text


def expand(command: Command, arguments: str) -> str:
    """The prompt `/name arguments` sends (placeholders: see the module doc)."""
    try:
        words = shlex.split(arguments)
    except ValueError:  # an unbalanced quote: the words as typed
        words = arguments.split()
    used = any(m.group(1) != "$" for m in PLACEHOLDER.finditer(command.text))

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "$":
            return "$"
        if key == "ARGUMENTS":
            return arguments
        index = int(key) - 1
        return words[index] if index < len(words) else ""
    prompt = PLACEHOLDER.sub(fill, command.text).strip()
    if arguments and not used:
        prompt += f"\n\nARGUMENTS: {arguments}"
    return prompt
