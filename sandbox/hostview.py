"""Which parts of the host filesystem a sandboxed command can see, decided once per session.

Visible, read-only: the system directories (``/usr``, ``/bin``, ``/sbin``, ``/lib*``) and
``/etc`` -- minus what under ``/etc`` is not world-readable but the sandbox could still read
(``shadow``, ``gshadow``, ``sudoers.d``, ``ssl/private``, ssh host keys, ...), which is hidden.
That matters most when Abhed runs as host root: the sandbox's root is still uid 0 on the
host, and without any capability uid 0 still reads every owner-readable root file. So as
root everything not world-readable is hidden; as another user only what that user can
read (its own files, its groups', ACL grants: ``os.access`` decides), usually nothing --
each hide is a mount, and mounts are most of a sandbox's start-up cost.

Not visible at all: ``/root``, ``/home``, the host's ``/tmp``, ``/var``, ``/run`` (docker.sock,
dbus, ssh-agent sockets), ``/sys``, ``/boot``, ``/opt``, ``/srv``, ``/mnt``, ``/media``.
The operator adds what a project needs with ``ro_binds``/``rw_binds``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

MountKind = Literal["ro-bind", "bind", "symlink", "null-file", "hidden-dir", "empty-dir", "ro-overlay"]  # pragma: no mutate  (a type: nothing reads it at run time)


class Mount(NamedTuple):
    """One step of the sandbox's filesystem, turned into bwrap flags by sandbox.bwrap.

    ro-bind / bind   host ``source`` at ``path``, read-only / read-write
    symlink          a symlink at ``path`` pointing to ``source``
    null-file        an unreadable, unwritable file at ``path`` (hides a host file, or
                     stands in for a protected file that does not exist yet)
    hidden-dir       an empty, mode-000, read-only directory at ``path`` (hides a host dir)
    empty-dir        an empty, read-only directory at ``path`` (stands in for a protected
                     directory that does not exist yet)
    ro-overlay       host ``path`` read-only, under the layer ``source`` whose mode-000
                     placeholders hide its secrets (sandbox.hidelayer)
    """

    kind: MountKind
    path: Path
    source: Path | None = None


# Top-level system directories, in the order they are mounted. Merged-/usr systems have
# most of them as symlinks into /usr; those are recreated as the same symlinks.
SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Directories whose non-world-readable contents are hidden.
SCANNED_FOR_SECRETS: tuple[str, ...] = ("/etc",)


@dataclass(frozen=True)  # pragma: no mutate  (nothing assigns to a HostView; frozen documents it)
class HostView:
    system: tuple[Mount, ...]
    hidden: tuple[Mount, ...]

    def hidden_now(self) -> tuple[Mount, ...]:
        """The hides whose target still exists (bwrap cannot create a mount point in read-only /etc)."""
        return tuple(m for m in self.hidden if os.path.lexists(m.path))


def scan_host(extra_hidden: tuple[Path, ...] = (), *, as_root: bool) -> HostView:
    """Look at the host once: system directories to show, secrets to hide.

    ``as_root``: the sandbox will run as host uid 0 (see module docstring).
    """
    system: list[Mount] = []
    for name in SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            system.append(Mount("symlink", path, Path(os.readlink(path))))
        elif path.is_dir():
            system.append(Mount("ro-bind", path, path))
    hidden: list[Mount] = []
    for root in SCANNED_FOR_SECRETS:
        hidden.extend(m for m in _not_world_readable(root) if as_root or _we_can_read(m))
    for path in extra_hidden:
        mount = _hide(path)
        if mount is not None and mount not in hidden:
            hidden.append(mount)
    return HostView(tuple(system), tuple(hidden))


def _hide(path: Path) -> Mount | None:
    try:
        mode = path.lstat().st_mode
    except OSError:
        return None  # nothing to hide (checked again before each command)
    return Mount("hidden-dir" if stat.S_ISDIR(mode) else "null-file", path)


def _we_can_read(mount: Mount) -> bool:
    """Could this process (and so the sandbox: same uid and groups, no capabilities) read it?"""
    if os.access(mount.path, os.R_OK):
        return True
    return mount.kind == "hidden-dir" and os.access(mount.path, os.X_OK)


def _not_world_readable(root: str) -> list[Mount]:
    """Files others cannot read and directories others cannot list, without descending into them."""
    found: list[Mount] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                if mode & 0o005 != 0o005:
                    found.append(Mount("hidden-dir", Path(entry.path)))
                else:
                    stack.append(entry.path)
            elif stat.S_ISREG(mode) and not mode & 0o004:
                found.append(Mount("null-file", Path(entry.path)))
    found.sort(key=lambda m: str(m.path))
    return found
