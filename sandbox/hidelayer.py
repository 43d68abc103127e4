"""The secrets under /etc hidden by one overlay layer, instead of one mount each.

Each hide that bwrap makes is a mount, and each mount re-reads /proc/self/mountinfo inside
bwrap: hiding 11 secrets cost about 2 ms of CPU per command. Instead, once per session,
the launcher builds a layer: a private host directory that mirrors the hidden paths as
empty mode-000 files and directories (directories also marked opaque), the directories
leading to them copying the host's mode, owner and times. bwrap then mounts /etc as a
read-only overlay of the host's /etc under this layer -- one mount and one remount
(which adds nosuid and nodev) for all of them. Inside, a hidden file reads "Permission
denied" as before (nobody in the sandbox has CAP_DAC_OVERRIDE), and nothing under /etc
can be changed (EROFS), the placeholders' modes included.

Nothing sandboxed may change the layer: it is never built where this session's commands
can write, and every file and directory of it, its holder included, is immutable
(FS_IMMUTABLE_FL: even the owner, host root, cannot delete, rename or chmod it without
CAP_LINUX_IMMUTABLE, which no sandbox has) -- so another session whose operator bound the
host's temporary directory read-write cannot take a placeholder away either. Where the
flag cannot be set (not root, a filesystem without it), the hides stay mounts. A layer
left by a crashed process is removed by the next session that builds one.

The decision is the one sandbox.hostview made at the session's start, as before: a secret
that appears later is not hidden (by either way), a placeholder whose secret went away
only shows an unreadable empty file. Hides that the layer cannot represent stay mounts:
those under an operator's bind (they must come after it), or reached through a symlink.
"""

from __future__ import annotations

import array
import fcntl
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from sandbox.hostview import HostView, Mount

# Unprivileged overlay mounts (in a user namespace) exist since Linux 5.11.
MIN_KERNEL = (5, 11)
HOLDER_PREFIX = "abhed-hide-layer-"
_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS, _FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10


@dataclass(frozen=True)
class HideLayer:
    """A built layer: ``path`` goes over the host's ``root``; ``covered`` are the hides it implements."""

    root: Path
    path: Path
    covered: tuple[Mount, ...]

    def apply(self, view: HostView) -> HostView:
        """``view`` with ``root`` mounted as the overlay and the covered hides no longer mounted."""
        system = tuple(Mount("ro-overlay", m.path, self.path) if m.path == self.root and m.kind == "ro-bind" else m
                       for m in view.system)
        return replace(view, system=system, hidden=tuple(m for m in view.hidden if m not in self.covered))

    def close(self) -> None:
        _remove(self.path.parent)


def build_layer(root: Path, hidden: tuple[Mount, ...], *, bound: tuple[Path, ...] = (),
                writable: tuple[Path, ...] = ()) -> HideLayer | None:
    """The layer for the hides under ``root``, or None: nothing to cover, or no overlay here.

    ``bound``: the operator's binds; hides overlapping one stay mounts. ``writable``: what
    sandboxed commands can write (the workspace, rw_binds): the layer must not lie there,
    or a command could take a placeholder away from the next one. None leaves every hide
    a mount, which is as safe, only slower.
    """
    covered = tuple(m for m in hidden if _coverable(root, m, bound))
    if not covered or not overlay_available():
        return None
    tmp = Path(os.path.realpath(tempfile.gettempdir()))
    if any(tmp == Path(os.path.realpath(w)) or Path(os.path.realpath(w)) in tmp.parents for w in writable):
        return None  # judged before making the holder: nothing is left behind where commands write
    _remove_stale(tmp)
    holder = Path(tempfile.mkdtemp(prefix=f"{HOLDER_PREFIX}{os.getpid()}-", dir=tmp))  # 0700: no other host user reaches it
    layer = holder / root.name
    try:
        _build(root, layer, covered)
        for path in _deepest_first(holder):
            _set_immutable(path, True)
    except OSError:
        _remove(holder)
        return None
    return HideLayer(root, layer, covered)


def overlay_available(release: str | None = None, filesystems: str = "/proc/filesystems") -> bool:
    """Can bwrap mount an overlay in the sandbox's user namespace on this kernel?

    ``release`` (default: this kernel's, as os.uname() says) and ``filesystems`` are
    parameters so that tests can judge other kernels with real files.
    """
    try:
        version = tuple(int(part) for part in (release or os.uname().release).split("-")[0].split(".")[:2])  # pragma: no mutate ([:3] compares the same against (5, 11))
        with open(filesystems) as f:
            listed = any(line.split()[-1:] == ["overlay"] for line in f)
    except (OSError, ValueError):
        return False
    return version >= MIN_KERNEL and listed


def _coverable(root: Path, mount: Mount, bound: tuple[Path, ...]) -> bool:
    """Under ``root``, through real directories only, and clear of every operator bind."""
    if root not in mount.path.parents or mount.kind not in ("null-file", "hidden-dir"):
        return False
    for other in bound:
        if other == mount.path or other in mount.path.parents or mount.path in other.parents:
            return False
    try:
        if stat.S_ISLNK(os.lstat(mount.path).st_mode):
            return False
        return all(stat.S_ISDIR(os.lstat(parent).st_mode) for parent in mount.path.parents if root in parent.parents or parent == root)  # pragma: no mutate (parent != root adds root's own ancestors: "/" for /etc, a directory)
    except OSError:
        return False  # pragma: no mutate (deleted, the function returns None: as false)


def _set_immutable(path: Path, on: bool) -> None:
    # O_NOFOLLOW: a stale holder in the shared temporary directory may hold another user's symlink
    # (never clear the flag of what it points to). Not inheritable anyway (PEP 446).
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        flags = array.array("l", [0])  # pragma: no mutate (the value is overwritten by FS_IOC_GETFLAGS)
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags)  # a mutable buffer: filled in place
        flags[0] = flags[0] | _FS_IMMUTABLE_FL if on else flags[0] & ~_FS_IMMUTABLE_FL
        fcntl.ioctl(fd, _FS_IOC_SETFLAGS, flags)
    finally:
        os.close(fd)


def _deepest_first(top: Path) -> list[Path]:
    found = [top]
    for directory, dirs, files in os.walk(top):
        found += [Path(directory, name) for name in dirs + files]
    return sorted(found, key=lambda p: -len(p.parts))


def _remove(holder: Path) -> None:
    """Clear the flag (mode-000 placeholders can be opened by root: CAP_DAC_OVERRIDE) and delete."""
    for path in _deepest_first(holder):  # a holder already gone: only [holder], whose flag cannot be cleared
        try:
            _set_immutable(path, False)
        except OSError:
            pass
    shutil.rmtree(holder, ignore_errors=True)


def _remove_stale(tmp: Path) -> None:
    """Layers of processes that died without closing their session (named <prefix><pid>-...)."""
    for holder in tmp.glob(f"{HOLDER_PREFIX}*"):
        pid = holder.name[len(HOLDER_PREFIX):].split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove(holder)


def _build(root: Path, layer: Path, covered: tuple[Mount, ...]) -> None:
    directories = {layer: root}
    os.mkdir(layer)
    for mount in covered:
        relative = mount.path.relative_to(root)
        for depth in range(1, len(relative.parts)):  # pragma: no mutate (depth 0 is Path(): the layer itself, already made)
            part = Path(*relative.parts[:depth])
            if layer / part not in directories:
                os.mkdir(layer / part)
                directories[layer / part] = root / part
        placeholder = layer / relative
        if mount.kind == "hidden-dir":
            os.mkdir(placeholder, 0)
            try:  # opaque: the host directory's entries are not even merged in (mode 000 already bars them)
                os.setxattr(placeholder, "user.overlay.opaque", b"y")
            except OSError:
                pass
        else:
            os.close(os.open(placeholder, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0))
    # Deepest first: making a child changes its parent's times. The overlay shows these directories
    # (their attributes come from the top layer), so they look as on the host.
    for copy, original in sorted(directories.items(), key=lambda item: -len(item[0].parts)):  # pragma: no mutate (item[1]: the originals are as deep as their copies, less a constant)
        st = os.stat(original)
        # Not host root: chown to root fails (OSError: no layer), as setting the immutable flag would.
        os.chown(copy, st.st_uid, st.st_gid)
        os.chmod(copy, stat.S_IMODE(st.st_mode))
        os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
