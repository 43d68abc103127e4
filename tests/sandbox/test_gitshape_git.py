"""sandbox.gitshape, the one shape rule, against real git (2.39): the same shapes, both answers.

The shapes (tests/sandbox/gitshape_cases.py) are built and judged by the host user and by an
unprivileged one: ``access()`` lets root through where it stops others (a mode-000 ``objects``
directory, a mode-000 HEAD). Every answer must be git's, or differ only on the safe side for one of
the reasons sandbox/gitshape.py documents, and every such reason must show up (so the shapes cover it).
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox import gitshape

sys.path.insert(0, str(Path(__file__).parent))
import gitshape_cases as cases  # noqa: E402

CASES = Path(__file__).with_name("gitshape_cases.py")


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


# -- HEAD contents drawn at random, each judged by git too ---------------------------------------

_PIECES = st.sampled_from(["ref:", "refs/", "ref: ", " ", "\t", "\n", "\r", "\v", "\0", "0123456789", "abcdef",
                           "ABCDEF", "g", "heads/main", "/", "x" * 64])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(_PIECES, max_size=12))
def test_random_head_contents_are_judged_as_git_judges_them(tmp_path_factory, pieces):
    base = tmp_path_factory.mktemp("head")
    x = base / "cases" / "x"
    cases.make_git_dir(x)
    (x / "HEAD").write_bytes("".join(pieces).encode())
    git, said = cases.git_step(x, base / "cases")
    fd = os.open(x, os.O_RDONLY | os.O_DIRECTORY)
    try:
        ours = gitshape.head_valid(fd)
    finally:
        os.close(fd)
    assert ("BARE" if ours else "CONTINUE") == git, (pieces, said)
