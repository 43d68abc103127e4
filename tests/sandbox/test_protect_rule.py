"""sandbox.protect.protected_reason: the name rule the file tools share with the sandbox."""

from __future__ import annotations

import pytest

from sandbox.config import DEFAULT_PROTECTED_PATHS
from sandbox.protect import protected_reason


@pytest.mark.parametrize(
    "path",
    [
        ".git/config", ".git/hooks/pre-commit", ".git/hooks", ".git/commondir", ".git/info/attributes", ".git/modules/x/config",
        "sub/.git/config", "a/b/.git/hooks/post-checkout", "vendor/lib/.git/commondir", "x/.git/info/exclude",
        ".git/modules/x/.git/hooks/h",
        ".git", "sub/.git", "a/b/.git",  # creating or rewriting a repository or a gitdir: pointer
        ".abhed/config.toml", ".abhed", "./.abhed/x", ".//.git/config",
    ],
)  # fmt: skip
def test_protected(path):
    assert protected_reason(path) is not None


@pytest.mark.parametrize(
    "path",
    ["README.md", ".git/HEAD", ".git/objects/ab/cdef", ".git/refs/heads/main", ".gitignore", ".github/workflows/ci.yml",
     "sub/.gitmodules", "a/.abhed/x", "config", "hooks/pre-commit", ".git-config", "x.git/config"],
)  # fmt: skip
def test_not_protected(path):
    assert protected_reason(path) is None


def test_reasons_name_the_place_and_the_danger():
    assert protected_reason("sub/.git") == "a .git entry in sub is a git repository or a pointer to one: host git would run its hooks and settings"
    assert protected_reason(".git") == "a .git entry in the workspace root is a git repository or a pointer to one: host git would run its hooks and settings"
    assert protected_reason("a/.git/commondir").startswith(".git/commondir decides what host git runs")
    assert protected_reason(".abhed/rules") == ".abhed/ holds Abhed's own per-project configuration (approval rules)"


def test_every_default_protected_path_follows_the_rule():
    for entry in DEFAULT_PROTECTED_PATHS:
        assert protected_reason(entry.rstrip("/") + "/x") is not None, entry
