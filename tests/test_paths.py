"""The absolute-path boundary (rule 5) and the allowed roots."""

from __future__ import annotations

import os

import pytest

from abhed.paths import PathError, PathPolicy
from abhed_testing import Tools


def test_relative_path_is_rejected_with_its_absolute_form(tools, ws):
    err = tools.err("read", path="src/main.py")
    assert "`path` must be an absolute path: got 'src/main.py'" in err
    assert f"Relative to the working directory {ws} that is {ws / 'src' / 'main.py'}; send that instead." in err


def test_relative_path_is_resolved_against_the_session_cwd(tools, ws):
    (ws / "sub").mkdir()
    tools.session.state.cwd = str(ws / "sub")
    err = tools.err("read", path="../x.py")
    assert f"that is {ws / 'x.py'}" in err


def test_tilde_is_not_expanded_but_explained(tools):
    err = tools.err("read", path="~/notes.txt")
    assert "`~` is not expanded" in err and os.path.expanduser("~/notes.txt") in err


@pytest.mark.parametrize("raw, fact", [("", "`path` is empty"), ("   ", "`path` is empty"), ("/a\x00b", "NUL byte")])
def test_empty_and_nul_paths(tools, raw, fact):
    assert fact in tools.err("read", path=raw)


def test_dotdot_is_resolved_before_the_check(tools, ws):
    (ws / "a").mkdir()
    (ws / "a" / "f.txt").write_text("x\n")
    assert "x" in tools.ok("read", path=f"{ws}/a/../a/f.txt")
    err = tools.err("read", path=f"{ws}/../outside.txt")
    assert "is outside the allowed roots" in err and str(ws) in err


def test_outside_the_roots_lists_the_roots_and_the_config_key(tools, ws):
    err = tools.err("read", path="/etc/passwd")
    assert f"`path` /etc/passwd is outside the allowed roots. Abhed may only touch files under: {ws}." in err
    assert "allowed_roots" in err


def test_symlink_inside_pointing_outside_counts_as_outside(tools, ws, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret\n")
    (ws / "innocent.txt").symlink_to(secret)
    err = tools.err("read", path=str(ws / "innocent.txt"))
    assert f"it resolves to {secret} through a symlink" in err and "top secret" not in err
    err = tools.err("write", path=str(ws / "innocent.txt"), content="overwrite")
    assert "outside the allowed roots" in err and secret.read_text() == "top secret\n"


def test_symlinked_directory_pointing_outside_blocks_new_files_too(tools, ws, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (ws / "door").symlink_to(tmp_path / "elsewhere")
    err = tools.err("write", path=str(ws / "door" / "new.txt"), content="x")
    assert "outside the allowed roots" in err and not (tmp_path / "elsewhere" / "new.txt").exists()


def test_operator_roots_replace_the_default(ws, home, tmp_path):
    other = tmp_path / "shared"
    other.mkdir()
    (other / "doc.txt").write_text("shared\n")
    tools = Tools(ws, home, roots=[ws, other])
    assert "shared" in tools.ok("read", path=str(other / "doc.txt"))
    err = tools.err("read", path="/etc/hostname")
    assert f"{ws}, {other}" in err


def test_policy_returns_real_paths(ws):
    (ws / "real").mkdir()
    (ws / "alias").symlink_to(ws / "real")
    policy = PathPolicy.create(ws)
    assert policy.resolve(str(ws / "alias" / "f")) == ws / "real" / "f"
    with pytest.raises(PathError):
        policy.resolve("relative")
