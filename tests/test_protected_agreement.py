"""One rule for protected paths: bash's approval, the file tools' approval and the sandbox agree.

sandbox.protect.protected_reason is the rule. The sandbox derives its mounts from it (checked in
tests/sandbox/test_protect_rule.py), the file tools ask abhed.gate.protected, and bash's approval asks
abhed.gate.courtesy.protected. If any of them kept a list of its own, the generated paths below would
find the first path on which they disagree.

One rule for git directories of any name, too (issue 30): sandbox.gitshape decides; the guard's
record of the operator's repositories, its quarantine and the file tools must agree with it on every
shape tests/sandbox/gitshape_cases.py builds (the shapes judged against real git there).
"""

from __future__ import annotations

import itertools
import os
import posixpath
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abhed.gate import courtesy, protected
from abhed.gate.approval import Policy
from abhed.gate.protected import confirmation_needed
from sandbox import gitshape
from sandbox.gitguard import QUARANTINE_SUFFIX, GitGuard
from sandbox.protect import GIT_DIR_SENSITIVE, protected_reason

sys.path.insert(0, str(Path(__file__).parent / "sandbox"))
import gitshape_cases as cases  # noqa: E402

NAMES = [".git", ".abhed", *GIT_DIR_SENSITIVE, "HEAD", "objects", "refs", "src", "sub", "x.git", ".gitignore", "..", "."]
PATHS = st.lists(st.sampled_from(NAMES), min_size=1, max_size=6).map("/".join)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A repository with a nested one: the .git directories the generated paths name exist."""
    ws = tmp_path_factory.mktemp("agree") / "ws"
    for repo in (ws, ws / "sub", ws / "src"):
        repo.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return ws


def _inside(relative: str) -> bool:
    depth = 0
    for part in relative.split("/"):
        depth += -1 if part == ".." else part not in ("", ".")
        if depth < 0:
            return False
    return True


def _tails_protected(relative: str) -> bool:
    parts = [p for p in Path(relative).as_posix().split("/") if p not in ("", ".")]
    return any(protected_reason("/".join(parts[i:])) for i in range(len(parts)))


@settings(max_examples=400, deadline=None)
@given(PATHS)
def test_bash_approval_and_the_file_tools_follow_the_sandbox_rule(workspace, relative):
    relative = posixpath.normpath(relative)
    if not _inside(relative) or relative == ".":
        return
    rule = protected_reason(relative) is not None
    target = f"{workspace}/{relative}"
    policy = Policy.create("auto", [], [], workspace)

    # bash: a write into the path, relative and absolute, needs a human exactly when the rule says
    # so (a nested `.abhed` also asks: bash cannot know where the workspace root is in a path).
    for spelled in (relative, target):
        verdict = policy.check("bash", type("A", (), {"command": f"printf x > '{spelled}'"})())
        asks = verdict.decision == "ask" and verdict.destructive and "protected path" in verdict.reason
        assert asks == _tails_protected(relative), (spelled, verdict)
        if rule:
            assert asks, (spelled, verdict)
        assert courtesy.protected(spelled) == asks

    # write/edit: the same rule; the only extra reason is creating a .git directory that does not exist.
    why = confirmation_needed(target, workspace)
    if rule:
        assert why is not None and "a protected path" in why, (relative, why)
    else:
        assert why is None or why.startswith("creates the repository directory"), (relative, why)


@pytest.mark.parametrize("relative", [".git/commondir", ".git/info/exclude", ".git/modules/m/config", "sub/.git/info/attributes",
                                      "src/.git/commondir", ".git", "sub/.git", ".abhed/rules.toml"])
def test_paths_the_old_bash_list_missed_now_ask(workspace, relative):
    """approval.py once kept (.git/hooks, .git/config, .abhed): commondir, info/ and modules/ passed in auto."""
    policy = Policy.create("auto", [], [], workspace)
    verdict = policy.check("bash", type("A", (), {"command": f"echo x > {relative}"})())
    assert verdict.decision == "ask" and verdict.destructive
    assert f"writes the protected path {relative}" in verdict.reason


@pytest.mark.parametrize("relative", [".git/HEAD", ".git/objects/ab/cd", ".gitignore", "x.git/config", "src/config"])
def test_paths_outside_the_rule_do_not_ask(workspace, relative):
    verdict = Policy.create("auto", [], [], workspace).check("bash", type("A", (), {"command": f"echo x > {relative}"})())
    assert verdict.decision == "allow", verdict


def test_the_rule_reaches_no_further_than_approval_looks():
    """approval judges windows of RULE_REACH components (linear time); every tail judged whole gives
    the same answers. A rule that looked further along a path would fail here: widen RULE_REACH."""
    for n in range(1, 8):
        for parts in _all_paths(n):
            whole = "/".join(parts)
            assert courtesy.protected(whole) == _tails_protected(whole), whole


def _all_paths(n: int):
    names = [".git", ".abhed", "config", "hooks", "x"]
    if n > 3:  # enough to show reach; keep the count small
        yield [".git"] * (n - 2) + ["x", "config"]
        yield ["x"] * (n - 1) + [".git"]
        return
    yield from (list(p) for p in itertools.product(names, repeat=n))


def test_a_long_path_is_judged_in_linear_time():
    """30,000 components (a 64 KiB line) are judged without quadratic blow-up: the answer is right
    and comes back (no timing asserted; a quadratic judge would take minutes here)."""
    path = "/".join(["a"] * 30_000) + "/.git/hooks/x"
    assert courtesy.protected(path)
    assert not courtesy.protected("/".join(["a"] * 30_000))


def _verdict(path: Path, assume: str | None = None) -> gitshape.Verdict:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return gitshape.verdict(fd, assume=assume)
    finally:
        os.close(fd)


@pytest.mark.parametrize("mode", ["inotify", "walk"])
def test_the_guard_its_quarantine_and_the_file_tools_agree_with_the_shape_rule(tmp_path, mode):
    """Every shape of the differential test, built in one workspace: the directories a guard started
    now records as git directories, those a guard started before quarantines, and those whose
    config the file tools ask about are exactly the ones gitshape calls git directories; writing HEAD
    asks exactly where it would make one."""
    shapes = cases.Shapes(tmp_path)  # the workspace is <tmp>/cases; the symlinks' targets lie outside it
    workspace = shapes.cases
    earlier = GitGuard.start(workspace, use_inotify=mode == "inotify")
    built = [cases.build_bare(shapes, spec) for spec in cases.bare_specs()]
    built += [cases.build_head(shapes, spec) for spec in cases.head_specs()]
    git_dirs = {x.name for x in built if _verdict(x) is gitshape.Verdict.GIT_DIR}
    assert 100 < len(git_dirs) < len(built) - 100  # both kinds, many of each
    assert GitGuard.start(workspace, use_inotify=False).baseline_git_dirs == git_dirs
    asked = {x.name for x in built if protected.reason(x / "config", workspace)}
    assert asked == git_dirs
    completes = {x.name for x in built if _verdict(x) is not gitshape.Verdict.GIT_DIR
                 and _verdict(x, assume="HEAD") is gitshape.Verdict.GIT_DIR}
    assert {x.name for x in built if x.name not in git_dirs and protected.reason(x / "HEAD", workspace)} == completes
    notes = earlier.check()
    moved = {x.name for x in built if any(p.name.startswith(f"HEAD{QUARANTINE_SUFFIX}-") for p in x.iterdir())}
    assert moved == git_dirs and len(notes) == len(git_dirs)
    assert not any(_verdict(x) is gitshape.Verdict.GIT_DIR for x in built)  # none is one any more
