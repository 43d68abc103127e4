"""What git takes for a git directory: the one shape rule the guard, the quarantine and the file tools apply.

git 2.39 (setup.c ``is_git_directory``, path.c ``validate_headref``, ``get_common_dir``) takes a
directory D for a git directory when

- ``D/HEAD`` is valid: a symlink whose target starts with ``refs/`` (not followed), or a file whose
  first 255 bytes are ``ref:`` + blanks + ``refs/...``, or start with 40 hex digits; and
- ``objects`` and ``refs`` pass ``access(X_OK)`` in the common directory, which is D itself, or, when
  ``D/commondir`` exists, the path it names. ``access()`` follows symlinks: ``objects -> /some/dir``
  counts, and so does an executable *file* named ``objects``.

Discovery (``setup_git_directory_gently_1``) then looks, in each directory X from the current one
up: at ``X/.git`` (a regular file is read as a ``gitdir:`` file: git uses the repository it names or
stops with an error; a directory -- or whatever a symlink leads to -- is tested as above; anything
else is passed over), then at X itself (a bare repository), then at X's parent.

Everything here works from a directory *descriptor* (``*at()`` calls relative to it; HEAD opened
with ``O_NOFOLLOW | O_NONBLOCK``, reads bounded): it judges workspace directories that a sandboxed
process may be changing at the same moment, so no name is resolved twice and a FIFO cannot hang
the host.

Deliberate differences, each on the safe side (this says "git directory" where git may not):

- ``objects`` or ``refs`` that is a **symlink** counts whatever it points to (git: only a target
  that passes ``access(X_OK)``). Its target can come into being later by a write *elsewhere* -- a
  file tool writing ``t/x``, a command creating ``t/`` -- that neither the guard's listing of this
  directory nor the file tools' check of that other path would connect to this one.
- A **commondir** (anything git reads as one: a non-empty regular file, a symlink, a FIFO) makes D a
  git directory once HEAD is valid, whatever its path holds (git: only if objects and refs pass
  there; a missing parent directory on the way makes it stop). The path may lie outside the
  workspace, where nothing here reads; inside it, objects/ and refs/ can be made there later by
  writes that never look at D. Only a path naming D itself (``\n``, ``.``) is followed: D's own
  objects and refs are then judged. An empty, unreadable or directory commondir makes git stop with
  an error (``FATAL``), as here.
- A **FIFO or device** HEAD counts as valid: git would block on it or read what a writer sends; it
  is never opened here.
- In discovery, a ``.git`` **symlink** counts as a pointer (``POINTER``) whatever it leads to, and
  a ``.git`` regular file as a gitfile (``GITFILE``) whatever it holds: what they name may be
  outside the workspace. git either uses that repository or stops; it looks no further either way,
  except for a dangling ``.git`` symlink, which it passes over.
- The environment of the git run (``GIT_DIR``, ``GIT_COMMON_DIR``, ``GIT_OBJECT_DIRECTORY``,
  ``GIT_CEILING_DIRECTORIES``) and the settings ``safe.directory`` and ``safe.bareRepository`` are not
  modelled: they are the operator's, and none of them makes git find a repository where this does not.

tests/sandbox/test_gitshape.py compares every answer with ``git rev-parse --git-dir`` run in the
same shape (files, directories, symlinks to each, dangling symlinks, FIFOs; HEAD contents;
commondir relative and absolute; ``.git`` of each kind).
"""

from __future__ import annotations

import enum
import errno
import os
import stat

HEAD_READ = 255  # validate_headref reads at most sizeof(buffer) - 1 bytes
COMMONDIR_READ = 4096  # enough to tell a path naming the directory itself ("\n", "./") from any other
SHAPE = ("HEAD", "objects", "refs", "commondir")  # the entries git's test looks at
_BLANKS = b" \t\n\r"  # git's isspace() (sane_ctype: no \v, no \f)
_HEX = frozenset(b"0123456789abcdefABCDEF")
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Verdict(enum.Enum):
    """What git makes of one directory (``verdict``)."""

    GIT_DIR = "a git directory"  # git uses it: its config, hooks and pager settings apply
    NOT = "not a git directory"  # git passes it over
    FATAL = "git stops with an error"  # get_common_dir dies: git runs nothing from here, looks no further


class Step(enum.Enum):
    """What git discovery does in one directory X (``discovery``)."""

    DOTGIT = "X/.git is a git directory"
    GITFILE = "X/.git is a file: git uses the repository it names or stops"
    POINTER = "X/.git is a symlink: git follows it"
    BARE = "X itself is a git directory"
    STOP = "git stops with an error"
    CONTINUE = "git goes on to X's parent"


def verdict(dir_fd: int, *, assume: str | None = None) -> Verdict:
    """git's ``is_git_directory`` for the directory open as ``dir_fd`` (see the module docstring).

    ``assume`` names one entry of ``SHAPE`` to take as present in the form that counts (a valid
    HEAD, an objects/ or refs/ directory, a commondir): the file tools ask whether *writing* that
    entry would make the directory a git directory.
    """
    if assume != "HEAD" and not head_valid(dir_fd):
        return Verdict.NOT
    if assume == "commondir":
        return Verdict.GIT_DIR
    common = _commondir(dir_fd)
    if common is not None:
        return common
    if all(name == assume or _passes_access(dir_fd, name) for name in ("objects", "refs")):
        return Verdict.GIT_DIR
    return Verdict.NOT


def is_git_directory(dir_fd: int) -> bool:
    return verdict(dir_fd) is Verdict.GIT_DIR


def head_valid(dir_fd: int) -> bool:
    """validate_headref on ``HEAD`` in the directory, never following or blocking on it."""
    st = _lstat(dir_fd, "HEAD")
    if st is None or stat.S_ISDIR(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        return False  # git's open() of a socket fails; read() of a directory fails
    if stat.S_ISLNK(st.st_mode):
        try:
            return os.readlink("HEAD", dir_fd=dir_fd).startswith("refs/")
        except OSError as exc:
            return exc.errno != errno.ENOENT  # replaced since the lstat: gone is not valid, anything else the safe side
    if not stat.S_ISREG(st.st_mode):
        return True  # a FIFO or device: git would block on it or read a writer's bytes (safe side)
    try:
        fd = os.open("HEAD", _OPEN, dir_fd=dir_fd)
    except OSError as exc:
        # EACCES: git, the same user, cannot open it either. Anything else is a HEAD that changed
        # while it was looked at (gone: not valid; swapped for a symlink: the safe side).
        return exc.errno not in (errno.EACCES, errno.ENOENT)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True  # swapped for a FIFO since the lstat (the safe side)
        data = _read_head(fd)
    except OSError:
        return False  # read_in_full failed: git takes it as invalid too
    finally:
        os.close(fd)
    return _head_text_valid(data)


def _read_head(fd: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < HEAD_READ:  # pragma: no mutate (<= or True: at 255 the read asks for 0 bytes, gets b"" and stops)
        chunk = os.read(fd, HEAD_READ - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _head_text_valid(data: bytes) -> bool:
    # git reads it as a C string; a NUL is neither blank, hex nor part of "ref:" or "refs/", so both
    # prefix checks stop at one as git's do.
    if data.startswith(b"ref:") and data[4:].lstrip(_BLANKS).startswith(b"refs/"):
        return True
    return len(data) >= 40 and all(byte in _HEX for byte in data[:40])  # get_oid_hex: a SHA-1 name


def _commondir(dir_fd: int) -> Verdict | None:
    """None without a commondir (git looks in D); else what it makes of D (HEAD being valid)."""
    st = _lstat(dir_fd, "commondir")
    if st is None:
        return None
    if stat.S_ISDIR(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        return Verdict.FATAL  # strbuf_read_file fails: die("failed to read")
    if not stat.S_ISREG(st.st_mode):
        return Verdict.GIT_DIR  # a symlink (read through, maybe outside), a FIFO: the safe side
    try:
        fd = os.open("commondir", _OPEN, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.EACCES:
            return Verdict.FATAL  # git cannot read it either: die
        return None if exc.errno == errno.ENOENT else Verdict.GIT_DIR  # gone meanwhile, or swapped
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return Verdict.GIT_DIR  # swapped for a FIFO since the lstat: git would wait for a writer (safe side)
        data = os.read(fd, COMMONDIR_READ + 1)
    except OSError:
        data = b"?"  # a read error on a regular file: the safe side
    finally:
        os.close(fd)
    if not data:
        return Verdict.FATAL  # strbuf_read_file read nothing: die
    if len(data) <= COMMONDIR_READ and _names_itself(data):
        return None  # "\n", ".": the common directory is D itself, judged exactly
    return Verdict.GIT_DIR  # any other path, or more text than read: the safe side (module docstring)


def _names_itself(data: bytes) -> bool:
    """Whether a commondir's text names its own directory (git appends it to "D/" and resolves it)."""
    path = data.rstrip(b"\r\n").split(b"\0", 1)[0]  # trimmed, then read as a C string
    return not path.startswith(b"/") and all(part in (b"", b".") for part in path.split(b"/"))


def _passes_access(dir_fd: int, name: str) -> bool:
    """access(name, X_OK) as git calls it (following symlinks); a symlink counts whatever it leads to."""
    st = _lstat(dir_fd, name)
    if st is None:
        return False
    if stat.S_ISLNK(st.st_mode):
        return True  # the safe side (module docstring)
    return os.access(name, os.X_OK, dir_fd=dir_fd)


def discovery(dir_fd: int) -> Step:
    """What git discovery does in the directory open as ``dir_fd``: ``.git`` first, then the directory itself."""
    st = _lstat(dir_fd, ".git")
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            return Step.POINTER
        if stat.S_ISREG(st.st_mode):
            return Step.GITFILE
        if stat.S_ISDIR(st.st_mode):
            found = _dotgit_verdict(dir_fd)
            if found is not Verdict.NOT:
                return Step.DOTGIT if found is Verdict.GIT_DIR else Step.STOP
        # anything else (a FIFO, a socket): stat() works, it is no file, and no directory holds HEAD
    own = verdict(dir_fd)
    return {Verdict.GIT_DIR: Step.BARE, Verdict.FATAL: Step.STOP}.get(own, Step.CONTINUE)


def _dotgit_verdict(dir_fd: int) -> Verdict:
    try:
        fd = os.open(".git", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        # EACCES: git cannot look inside either. Gone or swapped since the lstat: the safe side.
        return Verdict.NOT if exc.errno in (errno.EACCES, errno.ENOENT) else Verdict.GIT_DIR
    try:
        return verdict(fd)
    finally:
        os.close(fd)


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    """The entry, or None where git's lstat() fails too (missing; the directory not searchable)."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, PermissionError):
        return None  # pragma: no mutate  (falling off the end returns None too)
