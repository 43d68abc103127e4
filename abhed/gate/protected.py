"""Paths the file tools never change without a human's confirmation (issue 12 items 3, 9).

Host git obeys what lies in a repository's `.git/config` (core.fsmonitor, core.hooksPath...),
`.git/hooks/`, `.git/commondir`, `.git/info/` and `.git/modules/`; Abhed obeys `.abhed/`. A
session that wrote them could run commands on the host the next time anyone types `git status`.
The name rule is the sandbox's (sandbox.protect.protected_reason, the one rule every tool
applies); this module only adds what the file tools alone need: judging a path both as named and
where its symlinks lead, and refusing to create the directory *below* a `.git` that does not
exist yet (a `.git/HEAD` written into a fresh `.git` makes a repository), and git's own shape
test for directories of any other name (valid HEAD + objects + refs, or + commondir: git run
inside one obeys its config), which is sandbox.gitshape's, the one sandbox.gitguard applies to
what bash makes; and the work-tree files a repository's own config makes git run
(core.hooksPath, drivers: sandbox.gitexec).

The approval layer asks for confirmation when the path the model named is protected
(`confirmation_needed`); the tool itself refuses when the path only becomes protected through a
symlink (`through_link`), since the human was never shown that path. Entries the operator added
to `sandbox.protected_paths` are read-only for bash (mounts), so the file tools refuse them
outright (`operator_entry`): no confirmation can lift what the operator fixed.
"""

from __future__ import annotations

import os
from pathlib import Path

from sandbox import gitexec, gitshape
from sandbox.protect import DEFAULT_PROTECTED_PATHS, GIT_DIR_SENSITIVE, protected_reason

GIT = ".git"


def _relative(path: Path, workspace: Path) -> str:
    """`path` relative to the workspace; outside it, the whole path (so `.git` still matches at
    any depth, while `.abhed/` counts only at the workspace's root)."""
    try:
        return path.relative_to(workspace).as_posix()
    except ValueError:
        return path.as_posix()


def reason(path: Path, workspace: Path) -> str | None:
    """Why changing the absolute, normalised `path` needs a human's confirmation, or None."""
    why = protected_reason(_relative(path, workspace))
    if why is not None:
        return f"changes {path}, a protected path: {why}"
    parts = path.parts
    if GIT in parts[:-1]:
        below = Path(*parts[: parts.index(GIT) + 1])
        if not os.path.isdir(below):
            return f"creates the repository directory {below} (host git would obey its config and hooks)"
    return _any_git_dir(path, workspace) or _run_by_git(path, workspace)


def _run_by_git(path: Path, workspace: Path) -> str | None:
    """Work-tree files a repository's config makes host git run (core.hooksPath = .husky, a filter
    driver `./tools/clean.sh`...; sandbox.gitexec finds them, and the sandbox mounts the same ones
    read-only). The repositories judged are those host git finds from the path upwards."""
    entry = gitexec.covering(path, workspace, gitexec.entries(workspace, gitexec.enclosing(path.parent)))
    if entry is None:
        return None
    return f"changes {path}, a protected path: {entry.why}"


def _any_git_dir(path: Path, workspace: Path) -> str | None:
    """The name rule only knows `.git`; git run *inside* a directory of any name takes it for a
    (bare) repository when it passes git's test (sandbox.gitshape: a valid HEAD plus objects and
    refs, or plus a commondir, symlinks counted), and then obeys its config (core.pager,
    core.sshCommand...). So, for each directory on the way down: changing what runs in one that
    already is a git directory, or writing the entry that makes one, needs a human too
    (sandbox.gitguard quarantines the same shapes made by bash). Each directory is judged through a
    descriptor opened from its parent's without following a symlink: a sandboxed job may be
    swapping them meanwhile. Where the way down ends (a missing or symlinked component), nothing
    deeper exists to be judged: the path as resolved is judged on its own."""
    try:
        rel = path.relative_to(workspace).parts
    except ValueError:
        return None  # an operator root: its repositories are the operator's business, as for bash
    try:
        fd = os.open(workspace, _DIRECTORY)
    except OSError:
        return None  # no workspace: the tool reports it
    try:
        for depth, entry in enumerate(rel):
            why = _judge(fd, workspace.joinpath(*rel[:depth]), entry, path)
            if why is not None:
                return why
            try:
                child = os.open(entry, _DIRECTORY, dir_fd=fd)
            except OSError:
                return None
            os.close(fd)
            fd = child
    except OSError:  # the directory changed under the check: fail closed
        return f"changes {path}, whose directories changed while it was being checked"
    finally:
        os.close(fd)
    return None  # pragma: no mutate  (falling off the end returns None too)


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _judge(fd: int, directory: Path, entry: str, path: Path) -> str | None:
    """Why writing `entry` in the directory open as `fd` needs a human, by git's shape test."""
    now = gitshape.verdict(fd)
    if entry in GIT_DIR_SENSITIVE and now is gitshape.Verdict.GIT_DIR:
        return (f"changes {path}, a protected path: {directory} is a git directory and its {entry} decides "
                f"what host git runs there")
    if entry in gitshape.SHAPE and now is not gitshape.Verdict.GIT_DIR \
            and gitshape.verdict(fd, assume=entry) is gitshape.Verdict.GIT_DIR:
        return (f"makes {directory} a git directory (a valid HEAD, and objects and refs or a commondir): "
                f"host git run inside it would obey the config there")
    return None  # pragma: no mutate  (falling off the end returns None too)


def lexical(raw: str, cwd: Path) -> Path:
    """The path as the model named it (made absolute, `..` folded), symlinks not resolved."""
    return Path(os.path.normpath(os.path.join(cwd, raw)))


def through_link(raw: str, real: Path, cwd: Path, workspace: Path) -> str | None:
    """Why the tool must refuse: the path is protected only once symlinks are resolved (so the
    approval layer, which judged the named path, never showed it to a human). None if fine."""
    why = reason(real, workspace)
    if why is None or reason(lexical(raw, cwd), workspace) is not None:
        return None
    return (f"{raw} resolves through a symlink to {real}, which is protected: this call {why}. It was not "
            f"changed. If this change is really wanted, name {real} itself, so a human is asked to confirm it.")


def operator_entry(raw: str, real: Path, cwd: Path, workspace: Path, entries: list[str] | tuple[str, ...]) -> str | None:
    """Why the tool must refuse: an entry the operator added to `sandbox.protected_paths` covers
    the path as named or as resolved. An entry covers itself and everything below it, as bash's
    read-only mount of it does. The defaults are left to `reason` (they ask a human instead)."""
    for path in (lexical(raw, cwd), real):
        relative = _relative(path, workspace)
        for entry in entries:
            if entry in DEFAULT_PROTECTED_PATHS:
                continue
            stem = entry.strip("/")
            if relative == stem or relative.startswith(stem + "/"):
                return (f"{path} is inside {entry}, which the operator listed in sandbox.protected_paths: it is "
                        f"read-only for every tool, bash included. It was not changed. Write elsewhere, or ask the "
                        f"operator to remove {entry!r} from protected_paths in the configuration.")
    return None


def confirmation_needed(raw: object, base: Path) -> str | None:
    """For the approval layer: why a write/edit of the path `raw` needs a human, or None.

    Both the named path and where it resolves now are judged; the tool re-checks at run time.
    `base` is the workspace (relative paths are taken from it, as the tools take them from cwd).
    """
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        return None  # the tool rejects it with its own message
    named = lexical(raw, base)
    try:
        real = Path(os.path.realpath(named))
    except OSError:  # a component changed while it was resolved: fail closed
        return f"changes {named}, whose path changed while it was being checked"
    return reason(named, base) or reason(real, base)
