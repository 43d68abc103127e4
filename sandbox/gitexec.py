"""Work-tree files that a repository's config makes host git execute (issue 12).

``core.hooksPath = .husky`` (husky, lefthook, pre-commit setups), ``core.fsmonitor =
./script``, a filter, diff or merge driver whose command is ``./tools/clean.sh``: each turns
files of the *work tree* into code that the next host ``git commit`` or ``git status`` runs.
The name rule (sandbox.protect) only knows ``.git``; this module reads the configs to find
those files, so that the sandbox mounts them read-only and the file tools ask a human first,
exactly as for ``.git/hooks/``.

The configs are parsed here, never by running git (git run in a repository may run its
fsmonitor or pager). Every file that git could read for that repository is read -- the
repository's ``config`` and ``config.worktree`` (and its ``commondir``'s), the user's global
and the system config, and what they include, ``includeIf`` ones whatever their condition --
and every value found counts, not only the one git would pick: protecting one file too many
is safe. Such config files inside the workspace are protected too: included ones, and
``config.worktree`` when git reads it (rewriting one would add a hook). Parsed files are
cached by (mtime, size, inode), so a check that finds nothing changed costs one stat per
config file.

Not covered (docs/security.md): commands that reach a work-tree file other than as a word of
the command (``sh -c "$(cat x)"``), paths taken from the environment (``GIT_CONFIG_*``,
``-c`` on the command line), and configs git reads from places not listed here.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import shlex
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Keys whose value is a command git runs (matched lowercased; "*" is any subsection).
_COMMAND_KEYS = (
    "core.fsmonitor", "core.pager", "core.editor", "core.sshcommand", "core.askpass", "core.gitproxy",
    "core.alternaterefscommand", "sequence.editor", "gpg.program", "gpg.*.program", "gpg.ssh.defaultkeycommand",
    "filter.*.clean", "filter.*.smudge", "filter.*.process", "diff.*.command", "diff.*.textconv",
    "diff.external", "merge.*.driver", "pager.*", "alias.*", "credential.helper", "credential.*.helper",
    "difftool.*.cmd", "difftool.*.path", "mergetool.*.cmd", "mergetool.*.path", "uploadpack.packobjectshook",
    "remote.*.uploadpack", "remote.*.receivepack", "interactive.difffilter", "submodule.*.update",
    "trailer.*.command", "trailer.*.cmd", "sendemail.tocmd", "sendemail.cccmd", "sendemail.smtpserver",
    "web.browser", "browser.*.cmd", "browser.*.path", "man.*.cmd", "man.*.path", "lfs.customtransfer.*.path",
)
# Keys naming a directory whose files git runs: hooks, or templates copied into new repositories'
# .git/hooks by `git init`/`git clone` (and so by `git submodule update`).
_DIRECTORY_KEYS = ("core.hookspath", "init.templatedir")
# A script's name (clean.py, x.sh) even before it exists; not any dotted word: `ssh -l git.user`
# must not lock (nor leave a placeholder named) git.user.
_SCRIPT = re.compile(r"\w\.(sh|bash|zsh|py|pl|rb|js|mjs|cjs|ts|php|lua|tcl|awk|sed|jar|exe|bat|cmd|ps1)$", re.IGNORECASE)
_INCLUDE_DEPTH = 10  # pragma: no mutate (11: the safe side, see _with_includes) git's own limit is 10 nested includes


@dataclass(frozen=True)
class Repository:
    """One repository: its git directory, and the directories relative paths in its config are
    taken from (the work tree's root, where git runs hooks and drivers; for a bare one, itself)."""

    git_dir: Path
    bases: tuple[Path, ...]


@dataclass(frozen=True)  # pragma: no mutate (equivalent: no Entry is changed or hashed)
class Entry:
    """A workspace-relative protected entry ("dir/" for a directory) and why it is one."""

    path: str
    why: str


def repository_of(dotgit: Path) -> Repository | None:
    """The repository a ``.git`` directory or ``gitdir:`` file stands for, or None."""
    git_dir = dotgit
    if not dotgit.is_dir():
        try:
            line = read_file(dotgit).decode(errors="replace").splitlines()[0]
        except (OSError, IndexError):
            return None
        if not line.startswith("gitdir:"):
            return None
        git_dir = Path(os.path.normpath(dotgit.parent / line[len("gitdir:"):].strip()))
    return Repository(git_dir, (dotgit.parent,))


def read_file(path: Path) -> bytes:
    """A regular file's bytes, following symlinks as git does; OSError for anything else, never
    opened: a FIFO would block the sandbox's start for good (git's own read of one blocks, and reads
    no setting), a device may act on being opened. A hostile repository can plant either."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # pragma: no mutate (the fstat below refuses the same; this opens no device)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as file:  # swapped for a FIFO since: no wait
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return file.read()


def repository_at(git_dir: Path) -> Repository:
    """A git directory of another name (bare, or ``.git/modules/x``): hooks run in it unless its
    core.worktree names a work tree (``bases`` adds that when the config is read)."""
    return Repository(git_dir, (git_dir,))


def enclosing(directory: Path) -> Iterator[Repository]:
    """The repositories host git would find from ``directory`` upwards (a ``.git`` in it or above)."""
    for parent in (directory, *directory.parents):
        dotgit = parent / ".git"
        if os.path.lexists(dotgit):  # pragma: no mutate (equivalent: repository_of says None for a missing one; this spares the read)
            repo = repository_of(dotgit)
            if repo is not None:
                yield repo


def entries(workspace: Path, repositories: Iterable[Repository]) -> tuple[Entry, ...]:
    """The protected entries inside ``workspace`` that the repositories' configs make git run."""
    found: dict[str, Entry] = {}
    for repo in repositories:
        for entry in _repository_entries(workspace, repo):
            found.setdefault(entry.path, entry)
    return tuple(found.values())


def covering(path: Path, workspace: Path, found: Iterable[Entry]) -> Entry | None:
    """The entry that covers the absolute ``path`` (itself, or anything below a directory entry)."""
    try:
        relative = path.relative_to(workspace).as_posix()
    except ValueError:
        return None
    for entry in found:
        stem = entry.path.rstrip("/")
        if relative == stem or relative.startswith(stem + "/"):
            return entry
    return None  # pragma: no mutate (equivalent: falling off the end returns None too)


def _repository_entries(workspace: Path, repo: Repository) -> Iterator[Entry]:
    values: list[tuple[str, str, Path]] = []  # (key, value, config file)
    seen: set[Path] = set()
    configs = _config_files(repo.git_dir)
    for config in configs:
        for included, pairs in _with_includes(config, 0, seen):
            if included != config and _inside(included, workspace):
                yield Entry(_rel(included, workspace), f"{config} includes {included}: its settings decide what host git runs")
            values += [(key, value, included) for key, value in pairs]
    per_worktree = any(k == "extensions.worktreeconfig" and v.lower() not in ("false", "no", "off", "0") for k, v, _ in values)
    for config in configs:
        # .git/config.worktree, read once extensions.worktreeConfig is on (`git sparse-checkout init`
        # sets it): the name rule does not know it. When it is off and the file is absent, git reads
        # nothing there, and a placeholder would only break `cp -r .git` in the sandbox.
        if config.name == "config.worktree" and _inside(config, workspace) and (per_worktree or config.exists()):
            yield Entry(_rel(config, workspace), f"host git reads its settings from {config}")
    bases = list(repo.bases)
    for key, value, origin in values:
        if key == "core.worktree" and value:
            bases.append(Path(os.path.normpath(repo.git_dir / os.path.expanduser(value))))
    for key, value, origin in values:
        for target in _targets(key, value, bases):
            if not _inside(target, workspace) or target == workspace:
                continue
            suffix = "/" if key in _DIRECTORY_KEYS else ""
            if suffix and target in bases:
                continue  # hooks at the work tree's root: protecting it would lock the whole tree (docs/security.md)
            why = f"{key} = {value} in {origin} makes host git run {'the hooks in ' if suffix else ''}{target}"
            if suffix and target.name == "_" and target.parent != workspace and target.parent not in bases:
                # husky 9 sets .husky/_, whose stubs run the scripts in .husky/ itself
                yield Entry(_rel(target.parent, workspace) + "/", f"{why}, whose stubs run the scripts in {target.parent}")
            yield Entry(_rel(target, workspace) + suffix, why)


def _targets(key: str, value: str, bases: list[Path]) -> Iterator[Path]:
    if key in _DIRECTORY_KEYS:
        if value:  # pragma: no mutate (equivalent: an empty one resolves to a base, which the caller leaves out)
            yield from _resolved(value, bases)
        return
    if not _is_command_key(key):
        return  # (core.fsmonitor = true is a bare first word, as every program looked up in PATH: no target)
    if key.startswith("alias.") and not value.startswith("!"):
        return  # runs a git command, not a program
    try:
        words = shlex.split(value.lstrip("!"), comments=True)
    except ValueError:
        words = value.lstrip("!").split()
    # The program when it is a path (a bare name is looked up in PATH); a later word that is a path,
    # a script's name (`python3 clean.py`, existing or not: creating it is the attack)
    # or names an existing regular file (`sh cleanscript`); never options, %-placeholders,
    # URLs or words the shell expands first (those cannot be resolved here: docs/security.md).
    for index, word in enumerate(words):
        if word.startswith("-") or any(mark in word for mark in ("%", "$", "`", "://")):
            continue
        targets = list(_resolved(word, bases))
        if "/" in word or (index > 0 and (_SCRIPT.search(word) or any(os.path.isfile(t) for t in targets))):
            yield from targets


def _resolved(word: str, bases: list[Path]) -> Iterator[Path]:
    word = os.path.expanduser(word)
    if os.path.isabs(word):
        yield Path(os.path.normpath(word))
    else:
        for base in bases:
            yield Path(os.path.normpath(base / word))


_COMMAND_KEY = re.compile("|".join(fnmatch.translate(pattern) for pattern in _COMMAND_KEYS))


def _is_command_key(key: str) -> bool:
    """`*` stands for any subsection (which may hold dots) or, in pager.* and alias.*, any name."""
    return _COMMAND_KEY.match(key) is not None


def _config_files(git_dir: Path) -> list[Path]:
    files = [git_dir / "config", git_dir / "config.worktree"]
    try:
        common = read_file(git_dir / "commondir").decode(errors="replace").strip()
    except OSError:
        common = ""
    if common:  # pragma: no mutate (equivalent: without one, git_dir's files again, which _with_includes reads once)
        common_dir = Path(os.path.normpath(git_dir / common))
        files += [common_dir / "config", common_dir / "config.worktree"]
    return files + _user_and_system()


def _user_and_system() -> list[Path]:
    home = Path(os.path.expanduser("~"))
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    files = [xdg / "git" / "config", home / ".gitconfig", Path("/etc/gitconfig")]
    for variable in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"):
        if os.environ.get(variable):
            files.append(Path(os.environ[variable]))
    return files


def _with_includes(config: Path, depth: int, seen: set[Path]) -> Iterator[tuple[Path, list[tuple[str, str]]]]:
    """The file and what it includes, each once (a file included twice says nothing new)."""
    if config in seen:  # pragma: no mutate (equivalent: the depth limit ends a cycle; entries are merged by path)
        return
    seen.add(config)  # pragma: no mutate (as above: a file read twice gives the same entries)
    pairs = _parsed(config)
    if pairs is None:
        return
    yield config, pairs
    if depth >= _INCLUDE_DEPTH:  # pragma: no mutate (reading deeper than git, which refuses the config, is the safe side)
        return  # pragma: no mutate (as above)
    for key, value in pairs:
        if key.endswith(".path") and (key == "include.path" or key.startswith("includeif.")) and value:
            target = Path(os.path.expanduser(value))
            yield from _with_includes(Path(os.path.normpath(config.parent / target)), depth + 1, seen)


_CACHE: dict[Path, tuple[tuple[int, int, int], list[tuple[str, str]]]] = {}


def _parsed(config: Path) -> list[tuple[str, str]] | None:
    """(key, value) pairs of one config file, None when it cannot be read; cached by its stat."""
    try:
        st = os.stat(config)
    except (OSError, ValueError):  # ValueError: a NUL in an include path
        return None
    signature = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _CACHE.get(config)
    if cached is not None and cached[0] == signature:  # pragma: no mutate (equivalent: the cache only spares a read)
        return cached[1]  # pragma: no mutate (as above)
    try:
        text = read_file(config).decode("utf-8", errors="replace")
    except OSError:
        return None
    pairs = parse(text)
    _CACHE[config] = (signature, pairs)  # pragma: no mutate (equivalent: only the cost of a check that finds nothing changed)
    return pairs


def parse(text: str) -> list[tuple[str, str]]:
    """git-config syntax to (section[.subsection].name, value) pairs, section and name lowercased.

    Follows config.c: ``[section "sub"]`` (sub kept as written, with \\" and \\\\ escapes),
    the old ``[section.sub]`` (sub lowercased), ``#``/``;`` comments, quoted values, the \\n \\t
    \\b escapes and backslash-newline continuations. A bare ``name`` is the boolean true."""
    pairs: list[tuple[str, str]] = []
    section = ""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif c == "[":
            section, i = _section(text, i + 1)
        elif c.isalpha():
            j = i
            while j < n and (text[j].isalnum() or text[j] == "-"):
                j += 1
            name = text[i:j].lower()
            while j < n and text[j] in " \t":
                j += 1
            if j < n and text[j] == "=":
                value, i = _value(text, j + 1)
            else:
                value, i = "", _line_end(text, j)
            if section:
                pairs.append((f"{section}.{name}", value))
        else:
            i = _line_end(text, i)  # a comment (# ;), or not git syntax: git stops; skipping the line reads more, never less
    return pairs


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end + 1  # pragma: no mutate (< 1 is equivalent: no line is ended from offset 0)


def _section(text: str, i: int) -> tuple[str, int]:
    j = i
    while j < len(text) and (text[j].isalnum() or text[j] in "-."):
        j += 1
    name = text[i:j].lower()  # [section.sub], the old form, is lowercased whole (a quote after it is git's error)
    while j < len(text) and text[j] in " \t":
        j += 1
    if j < len(text) and text[j] == '"':
        j += 1
        sub = []
        while j < len(text) and text[j] not in '"\n':
            if text[j] == "\\" and j + 1 < len(text):
                j += 1
            sub.append(text[j])
            j += 1
        name = f"{name}.{''.join(sub)}"
    return name, _line_end(text, j)


def _value(text: str, i: int) -> tuple[str, int]:
    """config.c parse_value: unquoted whitespace counts as one space each, dropped at both ends."""
    out: list[str] = []
    quoted = False
    spaces = 0  # unquoted whitespace not yet written: written only when more value follows
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\n" or (not quoted and c in "#;"):
            # an unterminated quote is an error to git; the value ends there
            return "".join(out), _line_end(text, i)
        if not quoted and c in " \t\r\f\v":
            spaces += 1 if any(out) else 0
            i += 1
            continue
        if spaces:
            out.append(" " * spaces)
            spaces = 0
        if c == "\\":
            # git reads the end of the file as a newline: a backslash there continues onto nothing
            nxt = text[i + 1] if i + 1 < n else "\n"
            i += 2
            if nxt == "\n":
                continue
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(nxt, nxt))
            continue
        if c == '"':
            quoted = not quoted
        else:
            out.append(c)
        i += 1
    return "".join(out), n


def _inside(path: Path, workspace: Path) -> bool:
    return path == workspace or workspace in path.parents


def _rel(path: Path, workspace: Path) -> str:
    return path.relative_to(workspace).as_posix()
