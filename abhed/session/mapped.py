"""What inotify cannot see in the workspace, found without a stat of every file (issue 34; changeset.py).

A later snapshot takes the tracked files that changed from the git guard's inotify change set. A
directory watch names every write made through a name in the watched tree at the time it is made
(write, pwrite, io_uring, fallocate, truncate, copy_file_range, splice: IN_MODIFY; chmod, utime:
IN_ATTRIB) -- except a write through a shared writable mapping. The kernel sends nothing for those
while the mapping lives; the last reference to the open file goes with the last mapping and
descriptor (the mapping holds one: vma->vm_file), and then __fput sends IN_CLOSE_WRITE for a file
opened for writing. So once every writable shared mapping of a workspace file is gone, each such
write has been named by an event. (Not a write through a name outside the watched tree: a hard
link made outside the workspace, whose making is no event in it either. changeset.py and
docs/security.md say what that leaves.)

The stat data (git's diff-files) is no better for mappings: the kernel moves mtime and ctime only
on a write fault (a page's first write since it was last written back: page_mkwrite, or
file_update_time in mm/memory.c); further writes to a page still dirty move nothing. The
experiment in tests/test_checkpoint_mapped.py shows it, and the attack there loses the human's
bytes under a rule of `diff-files` in every snapshot.

So a snapshot does better by asking which covered files are mapped shared and writable right now,
and reading those: `shared_writable()` reads /proc/*/maps (every process's, sandboxed ones included:
they are this host's processes) for mappings with write and shared permissions (`rw-s`, `-w-s`) on
the workspace's filesystems (`devices()`: every mount at, above or below the workspace, as
/proc/self/mountinfo numbers them, which is how maps numbers them too), and the snapshot reads
the covered files whose inode is one of them (changeset.Names.with_inodes). On Linux 6.11 and later
the kernel is asked for just those mappings (the PROCMAP_QUERY ioctl on each maps file: no text
made for the others), else the text is read: a few milliseconds for a hundred processes.

What this leaves out, on purpose and said in docs/security.md:
- a process whose maps this user may not read (another user's, root's when Abhed is not root, or
  one that made itself undumpable): it can write into the workspace only through a file whose
  permissions let it, or as root; such a write is taken when the mapping goes (IN_CLOSE_WRITE);
- a shared mapping made read-only from a writable descriptor and made writable (mprotect) only
  between two snapshots: as a second write to a dirty page, which no stat sees either.

`trusted_filesystem()` is the other condition: inotify sees every writer only on a local
filesystem whose writes all pass through this kernel. On NFS, CIFS/SMB, FUSE, 9p or Ceph another
host (or a user-space server) writes without an event; on overlayfs a write to a layer directly
makes none on the overlay, and a mapping holds the layer's file, not the overlay's (whose
IN_CLOSE_WRITE comes with the descriptor's close); there every snapshot keeps lstat'ing every file.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import struct

# statfs f_type of the filesystems whose every write passes through this kernel's VFS (linux/magic.h):
# ext2, ext3 and ext4 share one, then xfs, btrfs, tmpfs.
LOCAL_FILESYSTEMS = {0xEF53: "ext4", 0x01021994: "tmpfs",
                     0x58465342: "xfs", 0x9123683E: "btrfs"}  # pragma: no mutate (no such filesystem in the tests)

# A maps line: range, perms, offset, dev (major:minor, hex), inode, path. Writable (w) and shared (s).
_SHARED_WRITABLE = re.compile(rb"^\S+ .w.s \S+ ([0-9a-f]+):([0-9a-f]+) (\d+)", re.M)


class _StatFs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 112)]  # pragma: no mutate (room to spare is harmless)


def trusted_filesystem(fd: int) -> str | None:
    """None when the filesystem of the directory open as `fd` is one inotify sees every writer of, else
    why not (its statfs type, in words)."""
    buf = _StatFs()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.fstatfs(fd, ctypes.byref(buf)) != 0:
        return f"its filesystem's type cannot be read ({os.strerror(ctypes.get_errno())})"
    kind = buf.f_type & 0xFFFFFFFF
    if kind in LOCAL_FILESYSTEMS:
        return None
    return f"the workspace is on a filesystem of type {kind:#x}, where inotify may not see every writer"


def devices(workspace: str, mountinfo: str = "/proc/self/mountinfo") -> set[tuple[int, int]] | None:
    """The (major, minor) of every mount at, above or below `workspace` (the one holding it among them:
    taking all is simpler than knowing which covers which), as /proc/PID/maps names a mapped file's
    device; None when mountinfo cannot be read."""
    try:
        with open(mountinfo, "rb") as f:
            lines = f.read().decode("utf-8", "surrogateescape").splitlines()
    except OSError:
        return None
    top = os.path.realpath(workspace).rstrip("/") + "/"
    found: set[tuple[int, int]] = set()
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 5:
            continue  # not a mount's line
        point = _unescape(fields[4]).rstrip("/") + "/"
        if point.startswith(top) or top.startswith(point):
            major, _, minor = fields[2].partition(":")
            found.add((int(major), int(minor)))
    return found


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash come as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def shared_writable(devs: set[tuple[int, int]], proc: str = "/proc") -> set[int]:
    """The inodes (low 32 bits, as git's index keeps them) of every file mapped shared and writable on
    one of `devs` by a process whose maps this user may read (see the module docstring)."""
    found: set[int] = set()
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            fd = os.open(f"{proc}/{pid}/maps", os.O_RDONLY | os.O_CLOEXEC)  # pragma: no mutate (closed below)
        except OSError:
            continue  # gone, or not ours to read: see the module docstring
        try:
            found |= {inode & 0xFFFFFFFF for dev, inode in _query(fd) if dev in devs}
        except OSError:
            pass  # gone while it was read: its mappings with it
        finally:
            os.close(fd)
    return found


# PROCMAP_QUERY (Linux 6.11): the kernel hands over the next mapping that matches, with no text made
# for the others -- a tenth of what formatting every process's maps costs. Older kernels: the text.
_PROCMAP_QUERY = 0xC0686611  # _IOWR('f', 17, struct procmap_query)
_QUERY = struct.Struct("<9Q4I2Q")  # size, flags, addr; out: start, end, flags, page size, offset, inode, major, minor...
_WANTED = 0x02 | 0x08 | 0x10 | 0x20  # writable, shared, the covering or next mapping, backed by a file  # pragma: no mutate (adding "readable" finds the same)


def _query(fd: int) -> list[tuple[tuple[int, int], int]]:
    found: list[tuple[tuple[int, int], int]] = []
    addr = 0
    while True:
        buf = bytearray(_QUERY.pack(_QUERY.size, _WANTED, addr, *(0,) * 6, 0, 0, 0, 0, 0, 0))
        try:
            fcntl.ioctl(fd, _PROCMAP_QUERY, buf, True)
        except OSError as exc:
            if exc.errno == errno.ENOENT:  # no mapping past `addr` matches
                return found
            if exc.errno in (errno.ENOTTY, errno.EINVAL, errno.EOPNOTSUPP):  # a kernel before 6.11 (or not /proc)
                return _parse(fd)
            raise
        _size, _flags, _addr, _start, end, _vflags, _page, _offset, inode, major, minor, *_ = _QUERY.unpack(buf)
        found.append(((major, minor), inode))
        addr = end


def _parse(fd: int) -> list[tuple[tuple[int, int], int]]:
    """The shared writable file mappings of an open maps file, from its text."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return [((int(m[1], 16), int(m[2], 16)), int(m[3])) for m in _SHARED_WRITABLE.finditer(b"".join(chunks))]
