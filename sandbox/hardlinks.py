"""Workspace files that share their content with names outside the workspace (hard links).

A hard link is one file with two names: writing through either changes what both show. A local
``git clone /path/src ws`` hard-links every file of ``.git/objects`` with the source repository,
pnpm's ``node_modules`` are hard links into the user's store (shared by every project), and a user
may make one with ``ln``. Git objects are read-only (0444), but their owner can ``chmod u+w``: a
sandboxed command that rewrote a loose object in place changed what ``git show`` printed in the
SOURCE repository. The boundary: a sandboxed command cannot change the content that a name outside
the workspace sees.

Found when the session starts (``unshare``): the workspace is walked (each directory opened
relative to its parent with O_NOFOLLOW; in a sandbox, that walk is the git guard's first, whose
lstat of every file is the census: sandbox.census) and every regular file with more than one
link is counted by (device, inode). A file whose link count is larger than the number of
its names found in the workspace has a name outside it. Each such name is then either

- **copied**: replaced by a file of its own with the same bytes, mode (without set-uid/set-gid),
  owner (when we may) and times, written as a temporary file in the same directory (opened
  beneath the workspace) and renamed over the name after checking it still is the same file.
  ``copy_file_range`` makes the copy: on btrfs or XFS the kernel shares the extents (no space
  used), elsewhere it copies. The names outside keep the old file, untouched. Before each copy
  the workspace's filesystem must keep the disk reserve free afterwards; or
- **bound read-only** for every command, when it is one of the ``BIND_MAX`` largest files of at
  least ``BIND_MIN_BYTES`` in a git pack directory (``objects/pack/``). A pack is large (the bulk
  of a clone: copying it costs its size in disk and seconds at the start), git never writes one in
  place, and a ``git gc`` in the workspace that cannot delete a bound pack leaves it and succeeds.
  The bind is sandbox.protect's (the file read-only, its directories pinned so they cannot be
  renamed); it is applied only while the name still holds the same file.

Why not binds for everything: bwrap re-reads /proc/self/mountinfo for every mount it makes, so
binds cost quadratically (measured: 10 binds +1.7 ms per command, 100 +23 ms, 1,000 +1.3 s, 2,990
+15 s; bwrap refuses more than 9,000 arguments, so 20,000 linked files cannot be bound at all), and
a bound file cannot be removed or renamed (EBUSY: ``rm -rf node_modules`` would fail). Figures and
the choice: docs/security.md, "Shared hard links"; ``benchmarks/hardlink_bench.py``.

Abhed's own links are not told: the first checkpoint of a git workspace hard-links its large
packs into the checkpoint store (abhed.session.seed, ``repo-packs/pack``), from descriptors of
read-only packs. The caller names that directory (``own``); a file whose other names are all
entries of it, matched by (device, inode) through the directory's descriptor (never a path
inside it), is handled as any shared file (bound or copied: the store's name, outside the
workspace, keeps its content) but left out of the note, which would otherwise greet every
session with Abhed's own bookkeeping. A file with one more name anywhere else is told as before.

Links made while a session runs (only a process outside the sandbox can: inside it only the
workspace and a tmpfs /tmp are writable, and link() across mounts fails with EXDEV) are found by
the next session's start; until then that session's commands can write through them
(docs/security.md, residual risks).
"""

from __future__ import annotations

import ctypes
import os
import secrets
import stat
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from sandbox.census import Census
from sandbox.errors import DiskReserveReached, SandboxSetupError
from sandbox.gitguard import _DIR_FLAGS, _open_beneath  # the walk's way of opening directories: no symlink followed

BIND_MIN_BYTES = 16 << 20  # below this a copy costs less than a mount in every command
BIND_MAX = 8  # at most this many binds per command (about 0.2 ms each, measured)
COPY_BUDGET_S = 60.0  # the copying at one session start stops (and the next start goes on) after this
# O_NONBLOCK: never wait on a FIFO swapped in after the walk (fstat then shows it is no regular file).
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# abhed.files.atomic's temporary names: its listings hide them and its writers remove one left by a killed process.
_TEMP_MARK = ".abhed-tmp-"


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to or hashes a Shared; frozen documents it)
class Shared:
    """One workspace name of a file that also has a name outside the workspace."""

    name: str  # workspace-relative
    ident: tuple[int, int]  # (st_dev, st_ino)
    size: int
    own: bool = False  # every other name is in the caller's own directory (``unshare``'s ``own``): not told


@dataclass(frozen=True)
class Links:
    """What the session start did; ``bound`` are read-only in every command while they stay the same file."""

    workspace: Path
    bound: tuple[Shared, ...] = ()
    notes: tuple[str, ...] = ()

    def bound_entries(self) -> tuple[str, ...]:
        """The bound names still holding the file found at the start (sandbox.protect entries)."""
        entries = []
        for item in self.bound:
            try:
                st = os.lstat(self.workspace / item.name)
            except OSError:
                continue  # removed or renamed on the host: nothing of the shared file is there to protect
            if (st.st_dev, st.st_ino) == item.ident:
                entries.append(item.name)
        return tuple(entries)


def unshare(workspace: Path, *, reserve_bytes: int | None, reserve_setting: str = "disk_reserve_bytes",
            budget_s: float = COPY_BUDGET_S, own: Path | None = None, census: Census | None = None) -> Links:
    """Copy or bind every workspace name of a file that has a name outside the workspace; see the module docstring.

    Raises DiskReserveReached when a copy would leave less than ``reserve_bytes`` free, and
    SandboxSetupError when a file cannot be copied or the copying took longer than ``budget_s``
    (what was copied stays copied: the next start goes on from there). ``own``: a directory of the
    caller's own links to workspace files (the module docstring), or None. ``census``: the git guard's start walk,
    whose lstat's stand for a walk here (sandbox.census).
    """
    shared, unreadable = find_shared(workspace, own, census)
    bound = choose_binds(shared)
    to_copy = [item for item in shared if item not in bound]
    copier = _Copier(workspace, reserve_bytes, reserve_setting, budget_s, len(to_copy))
    copied = [item for item in to_copy if copier.copy(item)]
    if copied:  # pragma: no mutate (a sync with nothing copied is harmless: durability no test can see)
        _sync(workspace)
    told = describe([item for item in copied if not item.own], [item for item in bound if not item.own])
    return Links(workspace, tuple(bound), tuple(told + [_unreadable_note(workspace, rel) for rel in unreadable]))


def find_shared(workspace: Path, own: Path | None = None, census: Census | None = None) -> tuple[list[Shared], list[str]]:
    """Workspace names of files with a name outside it (largest first), and the directories that could not be read;
    ``own``: a directory of the caller's own links (``Shared.own`` marks a file whose other names are all there);
    ``census``: the git guard's start walk of the workspace (sandbox.census), whose lstat's are used instead of
    a walk of its own when it holds every file (it was not dropped as too large)."""
    names: dict[tuple[int, int], list[str]] = defaultdict(list)
    stats: dict[tuple[int, int], os.stat_result] = {}
    if census is not None and census.dirs is not None:
        for rel, files in census.dirs.items():
            for name, st in files.items():
                # A record (bytes, sandbox.census) is a file with one link; symlinks, a .git: nothing to write through.
                if not isinstance(st, bytes) and st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
                    names[(st.st_dev, st.st_ino)].append(_join(rel, name))
                    stats[(st.st_dev, st.st_ino)] = st
        unreadable = list(census.unreadable)
    else:
        unreadable = _walk(workspace, names, stats)
    outside = {ident: stats[ident].st_nlink - len(found) for ident, found in names.items() if stats[ident].st_nlink > len(found)}
    ours = _own_links(own) if own is not None and outside else {}
    shared = [Shared(name, ident, stats[ident].st_size, ours.get(ident, 0) == count)
              for ident, count in outside.items() for name in names[ident]]
    shared.sort(key=lambda item: (-item.size, item.name))
    return shared, sorted(unreadable)


def _walk(workspace: Path, names: dict[tuple[int, int], list[str]], stats: dict[tuple[int, int], os.stat_result]) -> list[str]:
    """Every regular file with more than one link into ``names`` and ``stats``; the directories not readable."""
    unreadable: list[str] = []
    try:
        stack = [("", os.open(workspace, _DIR_FLAGS))]
    except PermissionError:
        return [""]
    while stack:
        rel, fd = stack.pop()
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):  # pragma: no mutate (following: O_NOFOLLOW refuses the open)
                        path = _join(rel, entry.name)
                        child = _open_child(fd, entry.name, path, unreadable)
                        if child is not None:
                            stack.append((path, child))
                    elif entry.is_file(follow_symlinks=False):  # symlinks, FIFOs, devices: nothing to write through
                        st = _stat(fd, entry.name)
                        if st is not None and st.st_nlink > 1:  # pragma: no mutate (a filter for memory: a file with one link and one name is never shared)
                            names[(st.st_dev, st.st_ino)].append(_join(rel, entry.name))
                            stats[(st.st_dev, st.st_ino)] = st
        finally:
            os.close(fd)
    return unreadable


def _own_links(own: Path) -> dict[tuple[int, int], int]:
    """How many names each file has directly in the directory ``own``: its entries read and lstat'ed
    through its descriptor (O_NOFOLLOW: a symlink there is no directory of ours); none when it is missing."""
    try:
        fd = os.open(own, _DIR_FLAGS)
    except OSError:
        return {}  # no store yet, or not a directory: nothing of ours to leave out of the note
    counts: dict[tuple[int, int], int] = defaultdict(int)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                st = _stat(fd, entry.name)  # lstat: a symlink there has its own inode, never a pack's
                if st is not None:
                    counts[(st.st_dev, st.st_ino)] += 1
    finally:
        os.close(fd)
    return counts


def choose_binds(shared: list[Shared]) -> list[Shared]:
    """The names bound read-only instead of copied: the BIND_MAX largest pack files of at least BIND_MIN_BYTES."""
    packs = [item for item in shared if item.size >= BIND_MIN_BYTES and in_pack_dir(item.name)]
    return packs[:BIND_MAX]  # find_shared lists the largest first


def in_pack_dir(name: str) -> bool:
    """Is this workspace-relative name a file of a git pack directory (``.../objects/pack/NAME``)?"""
    return name.split("/")[-3:-1] == ["objects", "pack"]


def describe(copied: list[Shared], bound: list[Shared]) -> list[str]:
    """The note told to the human and the model at the session's first call (empty when nothing was shared)."""
    if not copied and not bound:
        return []
    example = (copied or bound)[0].name
    parts = []
    if copied:
        parts.append(f"{len(copied)} of them ({_size(copied)}) were replaced by copies with the same content, mode and times "
                     "(the names outside keep their file, untouched)")
    if bound:
        parts.append(f"{len(bound)} of them, large git pack files ({_size(bound)}), stay shared and are read-only to commands "
                     "(git never rewrites a pack; a `git gc` here leaves them in place)")
    return [f"{_files(len(copied) + len(bound))} in the workspace shared hard links with files outside it (e.g. {example}: "
            "a local `git clone`, a pnpm store or `ln` makes them), so writing one would have changed the other: "
            + "; ".join(parts) + "."]


class _Copier:
    """Replaces shared names by copies, within a disk reserve and a time budget."""

    def __init__(self, workspace: Path, reserve: int | None, reserve_setting: str, budget_s: float, total: int) -> None:
        self.workspace = workspace
        self.reserve = reserve
        self.reserve_setting = reserve_setting
        self.budget_s = budget_s
        self.deadline = time.monotonic() + budget_s
        self.total = total
        self.done = 0

    def copy(self, item: Shared) -> bool:
        """Replace ``item`` by a copy; False when its name no longer holds that file (changed since the walk)."""
        if time.monotonic() > self.deadline:  # pragma: no mutate (>= differs at one instant)
            raise SandboxSetupError(
                f"{_files(self.total)} in the workspace share hard links with files outside it, and copying them (so that a "
                f"command cannot change the other names) took longer than {self.budget_s:g} s: {self.done} copied, "
                f"{self.total - self.done} to go. Run the command again: the copying goes on where it stopped."
            )
        parent_rel, _, leaf = item.name.rpartition("/")
        try:
            parent = _open_beneath(self.workspace, parent_rel)
        except FileNotFoundError:
            return False  # gone since the walk, with its name
        except OSError as exc:  # a directory on the way became a symlink or a file: look again (fail closed)
            raise self._failure(item, exc, "run the command again (the workspace changed while it was checked)") from None
        try:
            copied = self._copy_in(parent, leaf, item)
        finally:
            os.close(parent)
        self.done += copied
        return copied

    def _copy_in(self, parent: int, leaf: str, item: Shared) -> bool:
        try:
            source = os.open(leaf, _READ_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            return False
        except OSError as exc:  # EACCES; ELOOP: the name became a symlink since the walk
            raise self._failure(item, exc, "make it readable (chmod u+r) or remove it from the workspace, or, if "
                                "the workspace was changing, run the command again") from None
        try:
            st = os.fstat(source)
            if not stat.S_ISREG(st.st_mode):
                return False  # a directory, FIFO... since the walk; another regular file is dropped before the rename
            self._check_room(parent, item)
            temp = _temp_name(leaf)
            self._write_copy(parent, temp, source, st, item)
        finally:
            os.close(source)
        return _rename_if_same(parent, temp, leaf, item.ident)

    def _write_copy(self, parent: int, temp: str, source: int, st: os.stat_result, item: Shared) -> None:
        target = os.open(temp, _NEW_FLAGS, 0o600, dir_fd=parent)  # pragma: no mutate (the final mode is set before the rename)
        try:
            _copy_bytes(source, target)
            _give_owner(target, st)
            os.fchmod(target, stat.S_IMODE(st.st_mode) & 0o777)  # never a set-uid/set-gid copy
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        except OSError as exc:
            os.unlink(temp, dir_fd=parent)
            raise self._failure(item, exc, "free space or fix the file") from None
        finally:
            os.close(target)

    def _check_room(self, parent: int, item: Shared) -> None:
        if self.reserve is None:
            return
        vfs = os.fstatvfs(parent)
        free = vfs.f_bavail * vfs.f_frsize
        if free - item.size < self.reserve:  # pragma: no mutate (<= differs at one byte of a free space that moves)
            raise DiskReserveReached(
                f"{self.workspace / item.name} ({item.size} bytes) shares a hard link with a file "
                f"outside the workspace, and copying it (so that a command cannot change the other name) would leave "
                f"{free - item.size} bytes free, below the reserve of {self.reserve} bytes ({self.reserve_setting}). "
                "Free space on that filesystem, or remove the workspace's shared files (e.g. clone the repository again "
                "with `git clone --no-hardlinks`)."
            )

    def _failure(self, item: Shared, exc: OSError, advice: str) -> SandboxSetupError:
        return SandboxSetupError(
            f"{self.workspace / item.name} shares a hard link with a file outside the workspace, "
            f"and copying it (so that a command cannot change the other name) failed: {exc.strerror}. To go on, {advice}."
        )


def _temp_name(leaf: str) -> str:
    return f".{leaf}{_TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"


def _copy_bytes(source: int, target: int) -> None:
    """Up to the end of the file (0 bytes copied), a gigabyte a call (the kernel copies at most 2 GiB one)."""
    while os.copy_file_range(source, target, 1 << 30):  # pragma: no mutate (any chunk size copies the same bytes)
        pass


def _give_owner(target: int, st: os.stat_result) -> None:
    """The copy owned as the original (root may; another user keeps the copy as its own)."""
    try:
        os.fchown(target, st.st_uid, st.st_gid)
    except PermissionError:
        pass


def _rename_if_same(parent: int, temp: str, leaf: str, ident: tuple[int, int]) -> bool:
    """Rename the copy over ``leaf`` if it still names the file that was copied, else drop the copy."""
    try:
        st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
        same = (st.st_dev, st.st_ino) == ident
    except FileNotFoundError:
        same = False
    if not same:
        os.unlink(temp, dir_fd=parent)
        return False
    os.rename(temp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
    return True


def _sync(workspace: Path) -> None:
    """Write the copies to disk once for all (a power cut right after must not leave empty files)."""
    fd = os.open(workspace, _DIR_FLAGS)
    try:
        ctypes.CDLL(None, use_errno=True).syncfs(fd)  # pragma: no mutate (durability after a power cut: no test can see it)
    finally:
        os.close(fd)


def _open_child(fd: int, name: str, path: str, unreadable: list[str]) -> int | None:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except PermissionError:
        unreadable.append(path)
    except OSError:
        pass  # gone, or swapped for a non-directory since it was listed
    return None  # pragma: no mutate (falling off the end returns None too)


def _stat(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None  # gone since it was listed


def _unreadable_note(workspace: Path, rel: str) -> str:
    return (f"the directory {workspace / rel} cannot be read by Abhed, so it was not checked for files sharing hard links "
            "with files outside the workspace; make it readable (chmod u+rx) and start a new session.")


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _files(count: int) -> str:
    return "1 file" if count == 1 else f"{count} files"


def _size(items: list[Shared]) -> str:
    total = sum(item.size for item in items)
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if total >= scale:
            return f"{total / scale:.1f} {unit}"
    return f"{total} bytes"
