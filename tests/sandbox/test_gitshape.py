"""sandbox.gitshape, the one shape rule, against real git (2.39): the same shapes, both answers.

The shapes (tests/sandbox/gitshape_cases.py) are built and judged by the host user and by an
unprivileged one: ``access()`` lets root through where it stops others (a mode-000 ``objects``
directory, a mode-000 HEAD). Every answer must be git's, or differ only on the safe side for one of
the reasons sandbox/gitshape.py documents, and every such reason must show up (so the shapes cover it).
"""

from __future__ import annotations

import collections
import errno
import os
import stat
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox import gitshape
from sandbox.gitshape import Step, Verdict

sys.path.insert(0, str(Path(__file__).parent))
import gitshape_cases as cases  # noqa: E402

CASES = Path(__file__).with_name("gitshape_cases.py")
FOUND = ("BARE", "DOTGIT", "GITFILE", "POINTER")  # git uses a repository here


@pytest.fixture(scope="module", params=["root", "user"])
def judged(request) -> dict:
    """Every shape, built and judged (by git and by gitshape) as the host user or the unprivileged one."""
    runner = request.getfixturevalue(f"{request.param}_runner")
    base = runner.new_workspace()
    code = CASES.read_text() + f"\nanswer = all_cases(Path({str(base)!r}))\n"
    return runner.exec(code, timeout_s=900)


def test_every_head_is_judged_as_git_judges_it(judged):
    for case in judged["head"] + [judged["socket"]]:
        assert case["ours"] == case["git"], case
    kinds = {case["git"] for case in judged["head"]}
    assert kinds == {"BARE", "CONTINUE"}  # valid and invalid HEADs were both built
    texts = {case["spec"]["head"]: case["git"] == "BARE" for case in judged["head"] if not case["spec"]["link"]}
    assert {t: v for t, v in texts.items() if t in cases.HEAD_TEXTS} == cases.HEAD_TEXTS  # git agrees with the table


def _git_counts(results: list[dict]) -> set[str]:
    """The objects kinds git lets through for this user (refs a real directory, HEAD valid)."""
    return {c["spec"]["objects"] for c in results if c["git"] == "BARE" and c["spec"]["head"] == "valid"
            and c["spec"]["refs"] == "dir" and c["spec"]["commondir"] == "missing"}


def _documented(case: dict, git_counts: set[str]) -> str | None:
    """Which documented difference explains ours != git for a bare shape, else None."""
    spec, ours, git = case["spec"], case["ours"], case["git"]
    if ours != "BARE" or git not in ("CONTINUE", "STOP") or spec["head"] not in ("valid", "link-refs"):
        return None  # only ever on the safe side, and only for a valid HEAD
    if spec["commondir"] in ("rel-bare", "rel-missing"):
        return "a commondir naming another directory counts whatever that holds"
    if spec["commondir"] not in cases.ITSELF:
        return None
    kinds = (spec["objects"], spec["refs"])
    links = ("link-dir", "link-file", "dangling")
    if all(k in git_counts or k in links for k in kinds) and any(k in links and k not in git_counts for k in kinds):
        return "an objects or refs symlink counts whatever it leads to"
    return None


def test_bare_shapes_agree_with_git_or_differ_on_the_documented_safe_side(judged):
    results = judged["bare"]
    git_counts = _git_counts(results)
    assert {"dir", "exec-file", "link-dir"} <= git_counts and not {"file", "link-file", "dangling"} & git_counts
    reasons: collections.Counter[str] = collections.Counter()
    for case in results:
        if case["ours"] != case["git"]:
            why = _documented(case, git_counts)
            assert why is not None, case
            reasons[why] += 1
    assert len(reasons) == 2, reasons  # both documented differences were exercised
    agreed = {c["git"] for c in results if c["ours"] == c["git"]}
    assert agreed == {"BARE", "CONTINUE", "STOP"}, agreed


def test_dotgit_of_every_kind_is_judged_as_git_judges_it(judged):
    for case in judged["dotgit"]:
        kind, ours, git = case["spec"]["dotgit"], case["ours"], case["git"]
        if kind.startswith("link-"):
            assert ours == "POINTER", case  # whatever it leads to (documented)
        elif kind.startswith("gitfile-"):
            assert ours == "GITFILE" and git in ("GITFILE", "STOP"), case  # git uses it or stops: no further
        else:
            assert ours == git, case
    said = {c["spec"]["dotgit"]: c["said"] for c in judged["dotgit"]}
    assert said["gitfile-placeholder"].startswith("fatal: not a git repository: /dev/null/not-a-repository (Abhed")


def test_the_placeholder_stops_git_where_an_empty_directory_lets_it_test_the_root():
    """Why sandbox.protect leaves a gitfile, not an empty directory (its docstring has the table)."""
    by = {(c["spec"]["dotgit"], c["spec"]["bare"]): c for c in cases.dotgit_cases(_fresh("dotgit"))}
    assert by[("empty-dir", True)]["git"] == "BARE"  # the old placeholder: git took the root for a repository
    assert by[("missing", True)]["git"] == "BARE"
    assert by[("gitfile-placeholder", True)]["git"] == "STOP" and by[("gitfile-placeholder", False)]["git"] == "STOP"


_BASES: list[Path] = []


def _fresh(name: str) -> Path:
    import tempfile

    base = Path(tempfile.mkdtemp(prefix=f"gitshape-{name}-"))
    _BASES.append(base)
    return base


@pytest.fixture(autouse=True, scope="module")
def _cleanup():
    yield
    import shutil

    for base in _BASES:
        for path in [base, *base.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o700)
        shutil.rmtree(base, ignore_errors=True)


# -- what real git cannot be asked without hanging, and the races ------------------------------


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


def test_a_fifo_head_counts_and_is_never_opened(tmp_path):
    """git would block on it (or read what a writer sends); opening it here would hang the host."""
    x = _bare(tmp_path / "x", head=None)
    os.mkfifo(x / "HEAD")
    assert _verdict(x) is Verdict.GIT_DIR
    os.mkfifo(x / "commondir")
    assert _verdict(x) is Verdict.GIT_DIR  # a FIFO commondir: the safe side too, never opened


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_device_head_or_commondir_counts_and_is_never_opened(tmp_path):
    x = _bare(tmp_path / "x", head=None)
    os.mknod(x / "HEAD", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    assert _verdict(x) is Verdict.GIT_DIR
    (x / "HEAD").unlink()
    (x / "HEAD").write_text(cases.VALID_HEAD)
    os.mknod(x / "commondir", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    assert _verdict(x) is Verdict.GIT_DIR


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
            raise OSError(error, os.strerror(error))
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


def test_a_head_read_in_short_pieces_is_read_whole(tmp_path, monkeypatch):
    x = _bare(tmp_path / "x", head="ref: refs/heads/main\n")
    real = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: real(fd, min(n, 3)))
    assert _head(x) is True


@pytest.mark.parametrize(("error", "verdict"), [(errno.ENOENT, Verdict.GIT_DIR), (errno.EACCES, Verdict.FATAL),
                                                (errno.ELOOP, Verdict.GIT_DIR)])
def test_a_commondir_that_cannot_be_opened(tmp_path, monkeypatch, error, verdict):
    x = _bare(tmp_path / "x")  # objects and refs here: gone meanwhile means "look in x", a git directory
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


def test_an_unsearchable_directory_has_no_head(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root searches every directory")
    x = _bare(tmp_path / "x")
    fd = _dir(x)
    x.chmod(0o600)  # readable, not searchable: git's lstat of HEAD fails too
    try:
        assert gitshape.verdict(fd) is Verdict.NOT
    finally:
        x.chmod(0o700)
        os.close(fd)


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


# -- HEAD contents drawn at random, each judged by git too ---------------------------------------

_PIECES = st.sampled_from(["ref:", "refs/", "ref: ", " ", "\t", "\n", "\r", "\v", "\0", "0123456789", "abcdef",
                           "ABCDEF", "g", "heads/main", "/", "x" * 64])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(_PIECES, max_size=12))
def test_random_head_contents_are_judged_as_git_judges_them(tmp_path_factory, pieces):
    base = tmp_path_factory.mktemp("head")
    x = _bare(base / "cases" / "x", head=None)
    (x / "HEAD").write_bytes("".join(pieces).encode())
    git, said = cases.git_step(x, base / "cases")
    assert ("BARE" if _head(x) else "CONTINUE") == git, (pieces, said)
