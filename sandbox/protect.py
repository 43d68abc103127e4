"""Write-protected paths inside the workspace, recomputed before every command.

For each protected entry (e.g. ``.git/hooks/``) the workspace is walked component by
component, without following symlinks:

- the entry exists                -> bind it read-only onto itself;
- a component does not exist yet  -> put an empty read-only directory (or an unreadable
  file, for a last component without trailing "/") at the FIRST missing component, so
  nothing below it can be created. bwrap creates that mount point in the workspace, so an
  empty ``.abhed/`` (or ``.git/``, see below) appears on the host and stays: removing
  it while another sandbox still uses it as a mount point would lift that sandbox's
  protection. An existing *empty* directory counts as not existing yet (it is usually such
  a leftover mount point), so the leftovers never grow into ``.git/hooks`` etc.;
- an ancestor is a regular file   -> bind that file read-only (a ``.git`` *file* of a git
  worktree: rewriting its ``gitdir:`` line would point host git at model-written hooks);
- an existing ancestor directory  -> "pinned": bound read-write onto itself, which makes it a
  mount point, and mount points cannot be renamed, replaced or removed (EBUSY). Without the
  pin, ``mv .git x && mkdir .git`` would swap in an unprotected ``.git``;
- a component is a symlink        -> refuse to run (fail closed): protecting whatever it
  points to would leave the symlink itself replaceable. The operator must fix it.

What mounts cannot do -- stop the command from *creating* a repository (a nested ``.git``,
a bare one, a ``commondir``, which cannot be pre-created: git treats an empty or unreadable
one as fatal) -- sandbox.gitguard does after each command; it also supplies the entries for
the repositories present at the start. ``.git/rebase-merge/`` todo lists stay a residual
risk (docs/security.md).

The ``.git`` of a workspace root that is no repository (``place_gitfile``). Whatever stands
there decides where host git looks next (sandbox.gitshape, tested against git 2.39):

- nothing, an empty directory (the old placeholder), a FIFO, a dangling symlink: git passes it
  over and tests the root itself as a bare repository (HEAD + objects + refs made by the
  sandbox there would be obeyed), then the directories above the workspace;
- a directory that is a git directory: git uses it (the workspace would be a repository);
- a regular file: read as a ``gitdir:`` file; empty or of any other form, git stops with
  "invalid gitfile format"; naming a path that is no git directory, it stops with "not a git
  repository: <path>". Either way it looks no further: not at the root, not above it.

So at session start, when the root is no git directory and no repository (nor anything else
git would stop at) lies above it, Abhed writes ``PLACEHOLDER_GITFILE`` there: a gitfile naming
a path below ``/dev/null``, which no one can create, so git stops in every directory of the
workspace outside its nested repositories, and its message says why the file is there and how
to remove it. It is then a regular file like a worktree's ``.git``: bound read-only for every
command, so it cannot be rewritten, renamed or removed from inside. Where a repository encloses the workspace, git must still reach
it, so the empty directory stays the placeholder there (the root's own shape is the guard's to
judge); a leftover empty ``.git/`` from an earlier version is kept too (removing a directory
another sandbox still uses as a mount point would lift that sandbox's protection).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox import gitshape
from sandbox.errors import SandboxSetupError

# The mounts are made only for a sandbox (_plan_entry imports Mount): the config and the approval
# layer, which read the rule alone, load this module for every `abhed tool read` (start-up, issue 18).
if TYPE_CHECKING:
    from sandbox.hostview import Mount


# Workspace-relative paths the sandboxed command may read but never write or create.
# A trailing "/" marks a directory (this decides what stands in for it while it does not
# exist yet: an empty read-only directory, or an unreadable placeholder file).
#   .git/hooks/   hooks run on the HOST the next time anyone runs git there.
#   .git/config   core.hooksPath, core.fsmonitor, filter drivers, aliases: host code execution.
#   .git/modules/ submodule git dirs, each with its own hooks/ and config.
#   .git/info/    attributes (filter/diff drivers by name), exclude, sparse-checkout, grafts.
#   .abhed/       Abhed's own per-project configuration (approval rules live there).
#   .git/objects/pack/  the packed history: read-only, no command can replace or delete a pack
#                 (`git gc`, `repack` fail and say so), so every checkpoint's refs keep their
#                 objects; the loose ones a `git prune` may delete, checkpoints copy (abhed's repostate).
DEFAULT_PROTECTED_PATHS: tuple[str, ...] = (".git/hooks/", ".git/config", ".git/modules/", ".git/info/", ".abhed/",
                                            ".git/objects/pack/")

# Inside ANY git directory named .git, these entries run code or redirect git on the host.
GIT_DIR_SENSITIVE: tuple[str, ...] = ("config", "hooks", "commondir", "info", "modules")

# The .git of a workspace root that is no repository (module docstring): host git stops at it with
# "fatal: not a git repository: /dev/null/not-a-repository (...)", whose words say what to do.
PLACEHOLDER_GITFILE = (
    "gitdir: /dev/null/not-a-repository (Abhed put this .git file here so that its sandboxed commands "
    "cannot make this directory a git repository; delete it, while no Abhed session runs here, to run git init)\n"
)


def protected_reason(relative: str) -> str | None:
    """Why a workspace-relative path must not change without a human's confirmation, else None.

    The rule every tool applies (the sandbox enforces it with mounts and sandbox.gitguard;
    the file tools ask this function): inside any ``.git`` directory, its ``config``,
    ``hooks/``, ``commondir``, ``info/`` and ``modules/``; any entry named ``.git`` (creating,
    replacing or rewriting a repository or a ``gitdir:`` pointer); anything under ``.abhed/``
    at the workspace root. Name-based: a bare repository elsewhere is recognised by
    sandbox.gitguard only.
    """
    parts = [p for p in relative.replace("\\", "/").split("/") if p not in ("", ".")]
    if parts[:1] == [".abhed"]:
        return ".abhed/ holds Abhed's own per-project configuration (approval rules)"
    for index, part in enumerate(parts):
        if part != ".git":
            continue
        if index == len(parts) - 1:
            where = "/".join(parts[:index]) or "the workspace root"
            return f"a .git entry in {where} is a git repository or a pointer to one: host git would run its hooks and settings"
        if parts[index + 1] in GIT_DIR_SENSITIVE:
            return f".git/{parts[index + 1]} decides what host git runs (hooks, core.fsmonitor, filters, a redirected repository)"
        if parts[index + 1:index + 3] == ["objects", "pack"]:
            return ".git/objects/pack holds the repository's packed history, which undo relies on (no command may replace it)"
    return None  # pragma: no mutate  (falling off the end returns None too)


def place_gitfile(workspace: Path, entries: tuple[str, ...]) -> bool:
    """Write PLACEHOLDER_GITFILE at workspace/.git when nothing is there, a protected entry lies
    under .git, the root is no git directory and git finds nothing above it (module docstring).
    Created with O_EXCL relative to the root's descriptor: never through a symlink, never over
    what a sandboxed job made meanwhile. False when it was not written (then the mounts stand in
    with an empty directory, as before)."""
    if not any(e.split("/", 1)[0] == ".git" for e in entries) or _found_above(workspace):
        return False
    root = os.open(workspace, _DIRECTORY)
    try:
        if gitshape.discovery(root) is not gitshape.Step.CONTINUE:
            return False  # a .git of any kind, or the root a repository itself: the operator's
        try:
            fd = os.open(".git", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444, dir_fd=root)
        except OSError:
            return False  # made meanwhile, or the workspace is read-only: the mounts cope
        try:
            os.write(fd, PLACEHOLDER_GITFILE.encode())
        finally:
            os.close(fd)
    finally:
        os.close(root)
    return True


def _found_above(workspace: Path) -> bool:
    """Whether git run at the workspace root, passing it over, would find (or stop at) something
    in a directory above it. Those directories are the operator's, out of the sandbox's reach."""
    for parent in workspace.parents:
        try:
            fd = os.open(parent, _DIRECTORY)
        except OSError:
            return True  # cannot tell: leave git's way up as it is
        try:
            if gitshape.discovery(fd) is not gitshape.Step.CONTINUE:
                return True
        finally:
            os.close(fd)
    return False  # pragma: no mutate  (falling off the end returns None, as false)


# The workspace the operator named and the directories above it: no sandboxed process can swap
# them for a symlink, and nothing is executed while one is open.
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # pragma: no mutate  (see above: no flag is observable)


def protection_mounts(workspace: Path, entries: tuple[str, ...]) -> tuple[Mount, ...]:
    """Mounts that enforce ``entries`` for the workspace as it is right now.

    Pins come first (shallowest first) so the read-only mounts below them are not covered
    by a later bind of their parent.
    """
    pins: list[Mount] = []
    guards: list[Mount] = []
    for entry in entries:
        for mount in _plan_entry(workspace, entry):
            bucket = pins if mount.kind == "bind" else guards
            if mount not in bucket:
                bucket.append(mount)
    pins.sort(key=lambda m: str(m.path).count("/"))
    # A guard on an ancestor (e.g. the .git placeholder) makes guards below it pointless.
    prefixes = tuple(f"{g.path}/" for g in guards)
    guards = [g for g in guards if not str(g.path).startswith(prefixes)]
    return tuple(pins + guards)


def _plan_entry(workspace: Path, entry: str) -> list[Mount]:
    from sandbox.hostview import Mount
    is_dir = entry.endswith("/")
    parts = entry.strip("/").split("/")
    plan: list[Mount] = []
    current = str(workspace)
    for index, part in enumerate(parts):
        current = os.path.join(current, part)
        last = index == len(parts) - 1
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            mode = None
        if mode is None or (stat.S_ISDIR(mode) and _is_empty_dir(current)):
            plan.append(Mount("null-file" if last and not is_dir else "empty-dir", Path(current)))
            return plan
        if stat.S_ISLNK(mode):
            raise SandboxSetupError(
                f"Refusing to run: the protected path '{entry}' goes through a symlink, {current} -> "
                f"{os.readlink(current)}. A symlink there could be swapped to point host git (or Abhed) at "
                "files the model wrote. Ask the operator to replace it with the real directory or file, or "
                "to remove the entry from protected_paths in the sandbox configuration (or, for a path a repository's "
                "config makes git run, such as core.hooksPath, to point the config at the real directory)."
            )
        if last or not stat.S_ISDIR(mode):
            plan.append(Mount("ro-bind", Path(current), Path(current)))
            return plan
        plan.append(Mount("bind", Path(current), Path(current)))  # pin the existing ancestor
    return plan  # pragma: no mutate  (unreachable: the last component always returns above)


def _is_empty_dir(path: str) -> bool:
    with os.scandir(path) as entries:
        return next(entries, None) is None
