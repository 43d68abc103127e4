"""The workspace side of checkpoints: entries read for a snapshot and written back by undo, through
descriptors opened beneath the workspace's root, never by path.

A sandboxed process of any session may rearrange the workspace while Abhed snapshots or restores it:
swap a directory for a symlink to the user's home (renameat2 RENAME_EXCHANGE, in a loop), a file for
a FIFO. So every directory is opened from the root's descriptor with openat2(RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS) (or an O_NOFOLLOW walk: abhed.files.beneath), and every entry from its
directory's descriptor with O_NOFOLLOW | O_NONBLOCK:

- reading, a symlink is read as a symlink (readlinkat), a path whose directory is a symlink now is
  not in the workspace any more, and a FIFO, socket or device is skipped and named: no byte from
  outside the workspace can reach the store, and no open can block;
- writing, a file is created under a temporary name in the opened directory and renamed there; a
  directory is made with mkdirat and opened again without following; so nothing is written outside
  the workspace, whatever is swapped in between.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from abhed.files.atomic import temp_name
from abhed.files.beneath import open_rel

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
GONE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EXDEV)  # not (or no longer) in the workspace at that path


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to it)
class Read:
    """A file or symlink as read: its bytes (a symlink's target), and the stat of what was read;
    `settled` False when it was written to while being read (its bytes may be torn: read it again)."""

    data: bytes
    st: os.stat_result
    settled: bool = True


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to it)
class Skipped:
    """An entry a checkpoint cannot hold: why, in a few words."""

    why: str
    unreadable: bool = True  # False: readable, only too large (what checkpoints.max_file_bytes leaves out)


KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
         stat.S_IFBLK: "a block device"}


class Tree:
    """The workspace's directories, each opened once beneath the root and kept while the tree is."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._fds: dict[str, int | None] = {"": os.open(root, DIR_FLAGS)}

    def close(self) -> None:
        for fd in self._fds.values():
            if fd is not None:
                os.close(fd)
        self._fds.clear()

    def __enter__(self) -> Tree:
        return self

    def _root(self) -> int:
        """The root's descriptor (a KeyError once closed: a closed tree never hands out a reused number)."""
        fd = self._fds[""]
        assert fd is not None  # opened in __init__, never set to None
        return fd

    def __exit__(self, *exc: object) -> None:
        self.close()

    def dir(self, rel: str) -> int | None:
        """The directory `rel` ("" the root), or None when it is not a directory reached without a symlink."""
        if rel not in self._fds:
            try:
                self._fds[rel] = open_rel(self._root(), rel.split("/"), DIR_FLAGS)
            except OSError as exc:
                if exc.errno not in GONE:
                    raise
                self._fds[rel] = None
        return self._fds[rel]

    def forget(self, rel: str) -> None:
        """Drop what is known of `rel` and below it (it was removed or replaced)."""
        prefix = rel + "/"
        for key in [k for k in self._fds if k == rel or k.startswith(prefix)]:
            fd = self._fds.pop(key)
            if fd is not None:
                os.close(fd)

    # -- reading ----------------------------------------------------------------------------------

    def read(self, path: str, max_bytes: int) -> Read | Skipped | None:
        """What `path` holds: a Read, Skipped (with why), or None when no file or symlink is there."""
        parent, _, name = path.rpartition("/")
        try:
            dirfd = self.dir(parent)
        except OSError as exc:  # a directory on the way this user may not open (EACCES): skipped, named
            return Skipped(f"its directory cannot be read: {exc.strerror}")
        if dirfd is None:
            return None
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=dirfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return self._link(dirfd, name)
            if exc.errno in GONE:
                return None
            return self._special(dirfd, name) or Skipped(f"cannot be read: {exc.strerror}")
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                return None  # a directory now: its files are entries of their own
            if not stat.S_ISREG(st.st_mode):
                return Skipped(f"{KINDS.get(stat.S_IFMT(st.st_mode), 'not a regular file')}: it has no content to keep")
            if st.st_size > max_bytes:
                return Skipped(f"{st.st_size:,} bytes, over checkpoints.max_file_bytes", unreadable=False)
            data = _read_all(fd, max_bytes + 1)
            if len(data) > max_bytes:
                return Skipped(f"over {max_bytes:,} bytes (checkpoints.max_file_bytes) while it was read", unreadable=False)
            after = os.fstat(fd)
            settled = (after.st_mtime_ns, after.st_size, len(data)) == (st.st_mtime_ns, st.st_size, st.st_size)
            return Read(data, after, settled)
        except OSError as exc:
            return Skipped(f"cannot be read: {exc.strerror}")
        finally:
            os.close(fd)

    def _link(self, dirfd: int, name: str) -> Read | None:
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode):
                return None  # pragma: no cover (replaced between the open and this stat)
            return Read(os.fsencode(os.readlink(name, dir_fd=dirfd)), st)
        except OSError as exc:
            if exc.errno in GONE + (errno.EINVAL,):
                return None
            raise

    def _special(self, dirfd: int, name: str) -> Skipped | None:
        """A socket cannot be opened (ENXIO): name what it is."""
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except OSError:
            return None
        kind = KINDS.get(stat.S_IFMT(st.st_mode))
        return Skipped(f"{kind}: it has no content to keep") if kind else None

    def unreadable(self, path: str) -> str | None:
        """Why `path` (a file or directory) or a directory on the way to it cannot be read now, or None:
        undo leaves such a path alone (it did not cover what stands there, and must not clobber it)."""
        parent, _, name = path.rpartition("/")
        try:
            dirfd = self.dir(parent)
        except OSError as exc:
            return f"its directory cannot be read: {exc.strerror}"
        if dirfd is None:
            return None
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=dirfd)
        except OSError as exc:
            if exc.errno in GONE:
                return None  # nothing there, or a symlink (read as a symlink: no content to refuse)
            special = self._special(dirfd, name)
            return special.why if special else f"cannot be read: {exc.strerror}"
        try:
            kind = KINDS.get(stat.S_IFMT(os.fstat(fd).st_mode))
        finally:
            os.close(fd)
        return f"{kind}: it has no content to keep" if kind else None

    def specials(self, directories: list[str]) -> list[str]:
        """FIFOs, sockets and devices directly in `directories` (git lists none of them), "path (what)";
        a directory that cannot be listed is skipped (git names it). d_type only: nothing is opened."""
        found = []
        for rel in directories:
            try:
                fd = self.dir(rel)
                entries = list(os.scandir(fd)) if fd is not None else []  # pragma: no mutate (None: a race, the directory went since the index)
            except OSError:
                continue
            for entry in entries:
                plain = entry.is_symlink() or entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False)  # pragma: no mutate (following or not: a symlink is excluded first)
                if entry.name != ".git" and not plain:
                    found.append(special(rel, entry.name, _kind_of(entry)))
        return found

    # -- writing ----------------------------------------------------------------------------------

    def make_dir(self, rel: str) -> int:
        """The directory `rel`, made (with its parents) where missing. OSError when something else
        stands in the way: a file, or a symlink (never followed)."""
        fd = self.dir(rel)
        if fd is not None:
            return fd
        parent, _, name = rel.rpartition("/")
        parentfd = self.make_dir(parent) if parent else self._root()
        try:
            os.mkdir(name, 0o755, dir_fd=parentfd)
        except FileExistsError:
            pass
        self._fds.pop(rel, None)
        fd = os.open(name, DIR_FLAGS, dir_fd=parentfd)  # ELOOP/ENOTDIR when not a directory of ours
        self._fds[rel] = fd
        return fd

    def write(self, path: str, data: bytes, mode: int) -> None:
        """Make `path` a regular file holding `data` with permission bits `mode` (0o120000: a symlink
        to `data`), atomically: a temporary entry in the opened directory, renamed over the old one."""
        parent, _, name = path.rpartition("/")
        dirfd = self.make_dir(parent)
        temp = temp_name(name)
        if mode == 0o120000:
            os.symlink(os.fsdecode(data), temp, dir_fd=dirfd)
        else:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dirfd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, mode & 0o7777)
            except BaseException:
                os.close(fd)
                os.unlink(temp, dir_fd=dirfd)
                raise
            os.close(fd)
        try:
            os.rename(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        except BaseException:
            os.unlink(temp, dir_fd=dirfd)
            raise
        self.forget(path)

    def remove(self, path: str) -> None:
        """Remove the file or symlink `path` (a directory: only when empty). Nothing there is no error."""
        parent, _, name = path.rpartition("/")
        dirfd = self.dir(parent)
        if dirfd is None:
            return
        try:
            os.unlink(name, dir_fd=dirfd)
        except IsADirectoryError:
            os.rmdir(name, dir_fd=dirfd)
        except FileNotFoundError:
            pass
        self.forget(path)

    def sync(self) -> None:
        """Make what was written durable: one syncfs of the workspace's filesystem."""
        os.fsync(self._root())
        _syncfs(self._root())


def exists(dirfd: int, name: str) -> bool:
    """Whether `name` is an entry of the directory open as `dirfd` (a symlink counts, never followed)."""
    try:
        os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _kind_of(entry: os.DirEntry) -> int:
    try:
        return stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode)  # pragma: no mutate (never a symlink here)
    except OSError:
        return 0  # pragma: no mutate (gone since the listing, a race: any kind not in KINDS reads the same)


def special(rel: str, name: str, kind: int) -> str:
    """The line naming the FIFO, socket or device `name` in the directory `rel`; `kind`: its S_IFMT."""
    return f"{rel + '/' if rel else ''}{name} ({KINDS.get(kind, 'not a regular file')}: it has no content to keep)"


def _read_all(fd: int, limit: int) -> bytes:
    chunks, got = [], 0
    while got < limit:
        chunk = os.read(fd, min(1 << 20, limit - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _syncfs(fd: int) -> None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syncfs(fd)
