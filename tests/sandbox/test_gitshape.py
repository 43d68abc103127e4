"""sandbox.gitshape, the one shape rule: what real git cannot be asked without hanging (FIFOs,
devices), ``assume``, the bounds of its reads, and entries changed between two looks at them.
Its answers are compared with real git's in tests/sandbox/test_gitshape_git.py."""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

import pytest

from sandbox import gitshape
from sandbox.gitshape import Step, Verdict

sys.path.insert(0, str(Path(__file__).parent))
import gitshape_cases as cases  # noqa: E402


def _dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def _bare(path: Path, head: str | None = cases.VALID_HEAD) -> Path:
    (path / "objects").mkdir(parents=True)
    (path / "refs").mkdir()
    if head is not None:
        (path / "HEAD").write_text(head)
    return path


def _at(path: Path, judge, **kwargs):
    """``judge`` (a gitshape function) on the directory at ``path``, through a descriptor closed after."""
    fd = _dir(path)
    try:
        return judge(fd, **kwargs)
    finally:
        os.close(fd)


def _verdict(path: Path, **kwargs) -> Verdict:
    return _at(path, gitshape.verdict, **kwargs)


def _head(path: Path) -> bool:
    return _at(path, gitshape.head_valid)


def _step(path: Path) -> Step:
    return _at(path, gitshape.discovery)


def _reading(name: str):
    """A `when` for _one_shot: os.read(fd, n) on the entry called ``name``."""
    return lambda args, kwargs: os.readlink(f"/proc/self/fd/{args[0]}").endswith(f"/{name}")


def _never_opened(monkeypatch, flags: dict | None = None) -> list[str]:
    """The names gitshape opens from now on (and, into ``flags``, the flags of each)."""
    opened: list[str] = []
    real = os.open

    def spy(path, how, mode=0o777, *, dir_fd=None):
        opened.append(path)
        if flags is not None:
            flags[path] = how
        return real(path, how, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", spy)
    return opened


def test_a_fifo_head_counts_and_is_never_opened(tmp_path, monkeypatch):
    """git would block on it (or read what a writer sends); opening it here would hang the host."""
    x = _bare(tmp_path / "x", head=None)
    os.mkfifo(x / "HEAD")
    opened = _never_opened(monkeypatch)
    assert _verdict(x) is Verdict.GIT_DIR
    os.mkfifo(x / "commondir")
    assert _verdict(x) is Verdict.GIT_DIR  # a FIFO commondir: the safe side too, never opened
    assert opened == [x, x]  # the directory itself (by the test), nothing in it


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_device_head_or_commondir_counts_and_is_never_opened(tmp_path, monkeypatch):
    x = _bare(tmp_path / "x", head=None)
    os.mknod(x / "HEAD", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    opened = _never_opened(monkeypatch)
    assert _verdict(x) is Verdict.GIT_DIR
    assert opened == [x]  # a device may act when opened (a tape rewinds): never
    (x / "HEAD").unlink()
    (x / "HEAD").write_text(cases.VALID_HEAD)
    os.mknod(x / "commondir", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    assert _verdict(x) is Verdict.GIT_DIR
    assert opened == [x, x, "HEAD"]  # the valid HEAD file was read; the device commondir never opened


def test_assume_takes_the_named_entry_as_present_in_the_form_that_counts(tmp_path):
    x = tmp_path / "x"
    x.mkdir()
    assert _verdict(x, assume="HEAD") is Verdict.NOT
    (x / "objects").mkdir()
    assert _verdict(x, assume="refs") is Verdict.NOT  # no HEAD
    (x / "HEAD").write_text("not a ref\n")
    assert _verdict(x, assume="refs") is Verdict.NOT  # HEAD invalid
    assert _verdict(x, assume="commondir") is Verdict.NOT
    (x / "HEAD").write_text(cases.VALID_HEAD)
    assert _verdict(x) is Verdict.NOT
    assert _verdict(x, assume="refs") is Verdict.GIT_DIR
    assert _verdict(x, assume="commondir") is Verdict.GIT_DIR
    (x / "objects").rmdir()
    assert _verdict(x, assume="objects") is Verdict.NOT  # refs still missing
    (x / "refs").symlink_to("nowhere")
    assert _verdict(x, assume="objects") is Verdict.GIT_DIR
    (x / "objects").mkdir()
    (x / "HEAD").write_text("nonsense")
    assert _verdict(x) is Verdict.NOT
    assert _verdict(x, assume="HEAD") is Verdict.GIT_DIR  # the HEAD to be written counts as valid


def test_a_commondir_naming_the_directory_itself_is_judged_exactly(tmp_path):
    x = _bare(tmp_path / "x")
    for text in ("\n", "./\r\n", ".//.", "\0/elsewhere", "."):
        (x / "commondir").write_bytes(text.encode())
        assert _verdict(x) is Verdict.GIT_DIR, text
        (x / "refs").rmdir()
        assert _verdict(x) is Verdict.NOT, text
        (x / "refs").mkdir()
    for text in ("/", "./x", "..", "x/.", "/."):
        (x / "commondir").write_bytes(text.encode())
        (x / "refs").rmdir()
        assert _verdict(x) is Verdict.GIT_DIR, text  # another directory: the safe side
        (x / "refs").mkdir()
    (x / "commondir").write_bytes(b"")
    assert _verdict(x) is Verdict.FATAL


def test_the_shape_names_are_the_entries_whose_presence_decides(tmp_path):
    """SHAPE (what the file tools ask about) is exactly the set of entries that, taken as present,
    can turn a directory into a git directory."""
    def decides(name: str) -> bool:
        for missing in ("HEAD", "objects", "refs", "all"):
            x = _bare(tmp_path / f"{name}-{missing}")
            if missing == "all":
                (x / "objects").rmdir()
                (x / "refs").rmdir()
            elif missing == "HEAD":
                (x / "HEAD").unlink()
            else:
                (x / missing).rmdir()
            if _verdict(x) is not _verdict(x, assume=name):
                return True
        return False

    names = ("HEAD", "objects", "refs", "commondir", "config", "hooks", "info", "modules", ".git", "x")
    assert tuple(n for n in names if decides(n)) == gitshape.SHAPE


def test_commondir_reads_stop_at_4096_bytes(tmp_path):
    x = _bare(tmp_path / "x")
    (x / "refs").rmdir()
    (x / "commondir").write_text("." + "/" * 4094 + "\n")  # 4,096 bytes, all read: names x itself
    assert _verdict(x) is Verdict.NOT
    (x / "commondir").write_text("." + "/" * 4095 + "\n")  # more than read: may go on to another directory
    assert _verdict(x) is Verdict.GIT_DIR


def test_head_and_commondir_reads_are_bounded(tmp_path):
    x = _bare(tmp_path / "x", head="ref: " + " " * (gitshape.HEAD_READ - 5) + "refs/x")
    assert _verdict(x) is Verdict.NOT  # refs/ begins past what git reads
    (x / "HEAD").write_text("ref: " + " " * (gitshape.HEAD_READ - 10) + "refs/" + "x" * 10**6)
    assert _verdict(x) is Verdict.GIT_DIR
    (x / "commondir").write_text("." + "/" * gitshape.COMMONDIR_READ + "x")
    (x / "refs").rmdir()
    assert _verdict(x) is Verdict.GIT_DIR  # the text goes on: it may name another directory (safe side)


def _one_shot(monkeypatch, name: str, error: int, *, when=lambda args, kwargs: True):
    """Make os.<name> fail once with ``error`` (a change made between two looks at an entry)."""
    real = getattr(os, name)
    state = {"done": False}

    def fake(*args, **kwargs):
        if not state["done"] and when(args, kwargs):
            state["done"] = True
            raise OSError(error, os.strerror(error))  # OSError(EACCES, ...) is a PermissionError
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, fake)


@pytest.mark.parametrize(("error", "valid"), [(errno.ENOENT, False), (errno.EINVAL, True)])
def test_a_head_symlink_replaced_while_read(tmp_path, monkeypatch, error, valid):
    x = _bare(tmp_path / "x", head=None)
    (x / "HEAD").symlink_to("elsewhere")
    _one_shot(monkeypatch, "readlink", error)
    assert _head(x) is valid


@pytest.mark.parametrize(("error", "valid"), [(errno.ENOENT, False), (errno.EACCES, False), (errno.ELOOP, True)])
def test_a_head_file_that_cannot_be_opened(tmp_path, monkeypatch, error, valid):
    x = _bare(tmp_path / "x", head="nonsense")
    _one_shot(monkeypatch, "open", error, when=lambda args, kwargs: args[0] == "HEAD")
    assert _head(x) is valid


def test_a_head_swapped_for_a_fifo_after_its_lstat_counts(tmp_path, monkeypatch):
    x = _bare(tmp_path / "x", head="nonsense")
    real = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: os.stat_result((stat.S_IFIFO | 0o600,) + tuple(real(fd))[1:]))
    assert _head(x) is True


def test_a_head_or_commondir_swapped_after_its_lstat_is_never_followed_nor_waited_on(tmp_path, monkeypatch):
    """Between the lstat and the open a sandboxed job may put a symlink or a FIFO there: the open
    neither follows the one (O_NOFOLLOW) nor waits for a writer on the other (O_NONBLOCK)."""
    x = _bare(tmp_path / "x", head=None)
    (tmp_path / "invalid").write_text("not a ref\n")
    (x / "HEAD").symlink_to(tmp_path / "invalid")
    regular = os.stat(tmp_path / "invalid")
    real = gitshape._lstat
    monkeypatch.setattr(gitshape, "_lstat", lambda fd, name: regular if name in ("HEAD", "commondir") else real(fd, name))
    assert _head(x) is True  # ELOOP: changed while looked at, the safe side (following it would read "not a ref")
    (x / "HEAD").unlink()
    os.mkfifo(x / "HEAD")
    assert _head(x) is True  # opened without waiting, found to be a FIFO: the safe side
    (x / "HEAD").unlink()
    (x / "HEAD").write_text(cases.VALID_HEAD)
    (x / "refs").rmdir()
    os.mkfifo(x / "commondir")
    assert _verdict(x) is Verdict.GIT_DIR  # opened without waiting, found to be a FIFO (git would wait on it)
    opened: list[tuple[str, int]] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, flags, mode=0o777, *, dir_fd=None: opened.append((path, flags))
                        or real_open(path, flags, mode, dir_fd=dir_fd))
    (x / "commondir").unlink()
    (x / "commondir").write_text("\n")
    _verdict(x)
    wanted = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    assert [name for name, flags in opened if flags & wanted == wanted and not flags & (os.O_WRONLY | os.O_RDWR)] \
        == ["HEAD", "commondir"]


def test_a_head_read_in_short_pieces_is_read_up_to_255_bytes(tmp_path, monkeypatch):
    """read_in_full: short reads go on until 255 bytes, and no further."""
    x = _bare(tmp_path / "x", head="ref: refs/heads/main\n")
    real = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: real(fd, min(n, 3)))
    assert _head(x) is True
    monkeypatch.setattr(os, "read", lambda fd, n: real(fd, min(n, 100)))
    (x / "HEAD").write_text("ref:" + " " * 246 + "refs/")  # 255 bytes
    assert _head(x) is True
    (x / "HEAD").write_text("ref:" + " " * 247 + "refs/")  # 256: the 256th is never read
    assert _head(x) is False


@pytest.mark.parametrize(("error", "verdict"), [(errno.ENOENT, Verdict.NOT), (errno.EACCES, Verdict.FATAL),
                                                (errno.ELOOP, Verdict.GIT_DIR)])
def test_a_commondir_that_cannot_be_opened(tmp_path, monkeypatch, error, verdict):
    x = _bare(tmp_path / "x")
    (x / "refs").rmdir()  # gone meanwhile means "look in x", where refs is missing: no git directory
    (x / "commondir").write_text("../elsewhere\n")
    _one_shot(monkeypatch, "open", error, when=lambda args, kwargs: args[0] == "commondir")
    assert _verdict(x) is verdict


def test_a_commondir_that_cannot_be_read_counts(tmp_path, monkeypatch):
    x = _bare(tmp_path / "x")
    (x / "refs").rmdir()
    (x / "commondir").write_text(".\n")  # itself: without refs, no git directory, unless unreadable
    _one_shot(monkeypatch, "read", errno.EIO, when=_reading("commondir"))
    assert _verdict(x) is Verdict.GIT_DIR


def test_a_head_that_cannot_be_read_is_not_valid(tmp_path, monkeypatch):
    x = _bare(tmp_path / "x")
    _one_shot(monkeypatch, "read", errno.EIO, when=_reading("HEAD"))
    assert _head(x) is False  # read_in_full failed: git takes it as invalid


def test_an_unsearchable_directory_has_no_head(tmp_path, monkeypatch):
    x = _bare(tmp_path / "x")
    fd = _dir(x)
    if os.geteuid() == 0:  # root searches every directory: the refusal a user gets is injected
        _one_shot(monkeypatch, "stat", errno.EACCES, when=lambda args, kwargs: args[0] == "HEAD")
    x.chmod(0o600)  # readable, not searchable: git's lstat of HEAD fails too
    try:
        assert gitshape.verdict(fd) is Verdict.NOT
    finally:
        x.chmod(0o700)
        os.close(fd)


@pytest.mark.parametrize("swapped_for", ["symlink", "file"])
def test_a_dotgit_swapped_after_its_lstat_is_never_followed(tmp_path, monkeypatch, swapped_for):
    """A directory at the lstat, a symlink (to an empty directory) or a file at the open: not
    followed, not read as a directory; counted (the safe side)."""
    x = tmp_path / "x"
    x.mkdir()
    (tmp_path / "empty").mkdir()
    if swapped_for == "symlink":
        (x / ".git").symlink_to(tmp_path / "empty")
    else:
        (x / ".git").write_text("gitdir: /nowhere\n")
    directory = os.stat(tmp_path / "empty")
    real = gitshape._lstat
    monkeypatch.setattr(gitshape, "_lstat", lambda fd, name: directory if name == ".git" else real(fd, name))
    flags: dict = {}
    opened = _never_opened(monkeypatch, flags)
    assert _step(x) is Step.DOTGIT
    assert opened == [x, ".git"]
    wanted = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    assert flags[".git"] & wanted == wanted


@pytest.mark.parametrize(("error", "step"), [(errno.ENOENT, Step.CONTINUE), (errno.EACCES, Step.CONTINUE),
                                             (errno.ELOOP, Step.DOTGIT)])
def test_a_dotgit_directory_that_cannot_be_opened(tmp_path, monkeypatch, error, step):
    x = tmp_path / "x"
    (x / ".git").mkdir(parents=True)
    _one_shot(monkeypatch, "open", error, when=lambda args, kwargs: args[0] == ".git")
    assert _step(x) is step


def test_every_descriptor_opened_is_closed(tmp_path):
    from fd_testing import fds_on

    x = _bare(tmp_path / "x")
    (x / ".git").mkdir()
    _bare(x / ".git")
    (x / "commondir").write_text("\n")
    assert _step(x) is Step.DOTGIT and _verdict(x) is Verdict.GIT_DIR and _head(x)
    assert fds_on(tmp_path) == []
