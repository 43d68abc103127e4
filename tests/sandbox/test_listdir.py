"""sandbox/_listdir.c, the native listing of the guard's walk: the same listing and records as the
Python one (sandbox.gitguard._list_python), on real directories holding every kind of entry."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox import gitguard

native = pytest.mark.skipif(gitguard._native_listdir is None and not os.environ.get("CI"),
                            reason="the native listing is not built (setup.py: no C compiler); CI builds it")


def test_the_native_listing_is_built_where_ci_runs() -> None:
    """CI installs a compiler and the headers (scripts/setup): a listing silently in Python there would
    hide the first checkpoint's speed (issue 34) behind passing tests."""
    if not os.environ.get("CI"):
        pytest.skip("only CI must have it")
    assert gitguard._native_listdir is not None, "sandbox/_listdir.c was not built: run scripts/setup"


def both(directory: Path) -> tuple[tuple[gitguard._Listing, dict], tuple[gitguard._Listing, dict]]:
    """(native, python): each listing of `directory` with the records it noted."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        signature = (1, 2, 3)
        native_files: dict[str, gitguard.Lstat] = {}
        python_files: dict[str, gitguard.Lstat] = {}
        found = gitguard._list(fd, signature, native_files)
        expected = gitguard._list_python(fd, signature, python_files)
        return (found, native_files), (expected, python_files)
    finally:
        os.close(fd)


def every_kind(d: Path) -> None:
    (d / "plain.c").write_text("int x;\n")
    (d / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(d / "run.sh", 0o755)
    (d / "group.txt").write_text("g\n")
    os.chmod(d / "group.txt", 0o664)  # a umask of 002: its exact bits are the seed's to keep
    (d / "locked").write_text("l\n")
    os.chmod(d / "locked", 0o4700)  # set-uid: st_mode carries it
    os.symlink("plain.c", d / "link")
    os.symlink("sub", d / "dirlink")  # a symlink to a directory is no directory
    (d / "sub").mkdir()
    (d / "sub" / "HEAD").write_text("ref: x\n")
    os.link(d / "plain.c", d / "sub" / "twin.c")  # two links: no record
    (d / "objects").mkdir()
    (d / "refs").write_text("a file named refs\n")
    os.mkfifo(d / "pipe")
    os.mkfifo(d / "HEAD")  # a watched name of a special kind
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(d / "sock"))
    (d / ".git").mkdir()
    (d / "old").write_text("o\n")
    os.utime(d / "old", ns=(0, -5_000_000_000))  # before 1970: git's 32 bits cannot hold it
    (d / "far").write_text("f\n")
    os.utime(d / "far", ns=(0, (1 << 32) * 1_000_000_000 + 7))  # after 2106
    with open(d / "huge", "wb") as f:
        f.truncate(1 << 32)  # 4 GiB, sparse: its size is beyond 32 bits
    (d / os.fsdecode(b"caf\xe9.txt")).write_text("latin-1 name\n")  # not UTF-8: surrogateescape, as os does


@native
def test_every_kind_of_entry_is_listed_and_recorded_as_python_does(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    every_kind(d)
    (found, files), (expected, python_files) = both(d)
    assert found == expected
    assert files == python_files
    assert found.subdirs == {"sub", "objects", ".git"}
    assert found.watched == ((".git", True), ("HEAD", False), ("objects", True), ("refs", False))
    assert dict(found.specials) == {"pipe": stat.S_IFIFO, "HEAD": stat.S_IFIFO, "sock": stat.S_IFSOCK}
    # A record where git's 32 bits hold the file; an os.stat_result for the rest (a .git directory too).
    records = {name for name, value in files.items() if type(value) is bytes}
    assert records == {"run.sh", "group.txt", "locked", "link", "dirlink", "refs", os.fsdecode(b"caf\xe9.txt")}
    assert set(files) - records == {".git", "old", "far", "huge", "plain.c"}  # plain.c: a second link, sub/twin.c
    assert all(isinstance(files[name], os.stat_result) for name in ("old", "far", "huge", ".git", "plain.c"))


@native
def test_a_record_is_the_index_entry_s_stat_bytes_and_the_mode(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "run.sh", 0o4751)
    os.symlink("run.sh", tmp_path / "link")
    (_found, files), _ = both(tmp_path)
    for name, git_mode in (("run.sh", 0o100755), ("link", 0o120000)):
        lstat = os.lstat(tmp_path / name)
        fields = [*divmod(lstat.st_ctime_ns, 10**9), *divmod(lstat.st_mtime_ns, 10**9), lstat.st_dev & 0xFFFFFFFF,
                  lstat.st_ino & 0xFFFFFFFF, git_mode, lstat.st_uid, lstat.st_gid, lstat.st_size, lstat.st_mode]
        assert files[name] == b"".join(v.to_bytes(4, "big") for v in fields)
    assert int.from_bytes(files["run.sh"][40:], "big") == stat.S_IFREG | 0o4751


@native
def test_the_descriptor_is_left_to_list_from_the_start(tmp_path: Path) -> None:
    for n in range(50):
        (tmp_path / f"f{n}").write_text("x")
    (tmp_path / "sub").mkdir()
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)

    def listed() -> tuple[gitguard._Listing, dict[str, gitguard.Lstat]]:
        files: dict[str, gitguard.Lstat] = {}
        return gitguard._list(fd, (0, 0, 0), files), files

    try:
        first = listed()
        assert len(first[1]) == 50 and first[0].subdirs == {"sub"}
        assert listed() == first
        assert len(list(os.scandir(fd))) == 51  # Python's scandir reads from where the descriptor is
        with os.scandir(os.dup(fd)) as entries:  # a duplicate shares the offset: half read, left there
            for _n, _entry in zip(range(25), entries):
                pass
            assert listed() == first  # read from the start all the same
    finally:
        os.close(fd)


@native
def test_no_files_asked_for_notes_none(tmp_path: Path) -> None:
    every_kind(tmp_path)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert gitguard._list(fd, (0, 0, 0), None) == gitguard._list_python(fd, (0, 0, 0), None)
    finally:
        os.close(fd)


@native
def test_a_descriptor_that_is_no_directory_raises_oserror(tmp_path: Path) -> None:
    """The walk takes an OSError as a directory it could not read (GitGuard._walk): never a crash."""
    (tmp_path / "f").write_text("x")
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        with pytest.raises(OSError):
            gitguard._list(fd, (0, 0, 0), {})
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        gitguard._list(9999, (0, 0, 0), {})


NAMES = st.text(st.characters(codec="utf-8", exclude_characters="/\0"), min_size=1, max_size=12).filter(
    lambda n: n not in (".", ".."))
KINDS = st.sampled_from(["file", "exec", "symlink", "dir", "fifo", "link", "odd"])


@native
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.dictionaries(st.one_of(NAMES, st.sampled_from(sorted(gitguard._WATCHED))), KINDS, max_size=12),
       mtime=st.integers(-(1 << 33), 1 << 34))
def test_any_directory_lists_as_python_lists_it(tmp_path_factory: pytest.TempPathFactory,
                                                entries: dict[str, str], mtime: int) -> None:
    d = tmp_path_factory.mktemp("fuzz")
    for name, kind in entries.items():
        path = d / name
        if kind == "dir":
            path.mkdir()
        elif kind == "symlink":
            os.symlink("elsewhere", path)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.write_bytes(b"x" * (len(name) % 5))
            os.chmod(path, {"exec": 0o755, "odd": 0o640}.get(kind, 0o644))
            if kind == "link":
                os.link(path, d.parent / f"{d.name}-{os.fsencode(name).hex()}-outside")
            os.utime(path, ns=(0, mtime))
    (found, files), (expected, python_files) = both(d)
    assert found == expected
    assert files == python_files
