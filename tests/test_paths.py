"""The absolute-path boundary (rule 5) and the allowed roots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from abhed.files import beneath
from abhed.files.paths import PathError, PathPolicy
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


# -- issue 12 item 9: checks a mutation audit showed untested ------------------------------------


def test_a_sibling_sharing_the_workspace_prefix_is_outside(ws, tmp_path):
    evil = tmp_path / (ws.name + "-evil")
    evil.mkdir()
    (evil / "f").write_text("not yours\n")
    policy = PathPolicy.create(ws)
    with pytest.raises(PathError) as err:
        policy.resolve(str(evil / "f"))
    assert f"`path` {evil / 'f'} is outside the allowed roots. Abhed may only touch files under: {ws}." in err.value.message


def test_operator_roots_do_not_silently_include_the_workspace(ws, tmp_path):
    other = tmp_path / "shared"
    other.mkdir()
    policy = PathPolicy.create(ws, [other])
    assert policy.roots == (other.resolve(),)
    with pytest.raises(PathError, match=f"Abhed may only touch files under: {other}\\."):
        policy.resolve(str(ws / "f.txt"))
    assert policy.resolve(str(other / "f.txt")) == other / "f.txt"


def test_roots_are_resolved_and_deduplicated(ws, tmp_path):
    (tmp_path / "alias").symlink_to(ws)
    policy = PathPolicy.create(tmp_path / "alias", [tmp_path / "alias", ws])
    assert policy.workspace == ws and policy.roots == (ws,)
    assert PathPolicy.create(tmp_path / "alias").roots == (ws,)


def test_the_root_itself_is_inside_and_its_parent_is_not(ws):
    policy = PathPolicy.create(ws)
    assert policy.resolve(str(ws)) == ws
    assert policy.resolve(str(ws) + "/") == ws
    with pytest.raises(PathError):
        policy.resolve(str(ws.parent))


def test_paths_are_checked_against_every_root_in_turn(ws, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    policy = PathPolicy.create(ws, [one, two])
    assert policy.resolve(str(two / "x")) == two / "x"
    assert policy.root_of(two / "x") == two and policy.root_of(one / "x") == one
    with pytest.raises(PathError):
        policy.root_of(ws / "x")


def test_a_symlinked_ancestor_is_named_in_the_outside_message(ws, tmp_path):
    (tmp_path / "out").mkdir()
    (ws / "door").symlink_to(tmp_path / "out")
    with pytest.raises(PathError) as err:
        PathPolicy.create(ws).resolve(str(ws / "door" / "f"))
    assert f"(it resolves to {tmp_path / 'out' / 'f'} through a symlink)" in err.value.message
    with pytest.raises(PathError) as err:
        PathPolicy.create(ws).resolve(str(tmp_path / "out" / "f"))
    assert "through a symlink" not in err.value.message


def test_relative_paths_use_the_given_cwd_or_the_workspace(ws):
    policy = PathPolicy.create(ws)
    with pytest.raises(PathError, match=f"that is {ws / 'a'}; send"):
        policy.resolve("a")
    with pytest.raises(PathError, match=f"that is {ws / 'sub' / 'a'}; send"):
        policy.resolve("a", cwd=ws / "sub")
    with pytest.raises(PathError, match="`file_path` must be an absolute path"):
        policy.resolve("a", field="file_path")


def test_open_refuses_a_symlink_anywhere_below_the_root(ws, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "f").write_text("secret\n")
    (ws / "d").mkdir()
    (ws / "d" / "f").write_text("mine\n")
    policy = PathPolicy.create(ws)
    fd = policy.open(ws / "d" / "f", os.O_RDONLY)
    assert os.read(fd, 100) == b"mine\n"
    os.close(fd)
    (ws / "d" / "f").unlink()
    (ws / "d" / "f").symlink_to(tmp_path / "out" / "f")
    with pytest.raises(OSError) as err:
        policy.open(ws / "d" / "f", os.O_RDONLY)
    assert err.value.errno in beneath.ESCAPES
    fd = policy.open_dir(ws / "d")
    assert sorted(os.listdir(fd)) == ["f"]
    os.close(fd)


def test_a_path_changing_while_resolved_is_a_clear_error(ws, monkeypatch):
    import abhed.files.paths as paths

    def racing(path):
        raise OSError(22, "Invalid argument")
    monkeypatch.setattr(paths.os.path, "realpath", racing)
    with pytest.raises(PathError, match="could not be resolved: a component of it changed while Abhed followed it"):
        PathPolicy(ws, (ws,)).resolve(str(ws / "f"))


def test_open_dir_opens_directories_only_and_the_policy_is_immutable(ws):
    (ws / "f").write_text("x\n")
    policy = PathPolicy.create(ws)
    with pytest.raises(NotADirectoryError):
        policy.open_dir(ws / "f")
    with pytest.raises(AttributeError):
        policy.roots = (Path("/"),)  # frozen: what was checked at start-up stays what is enforced
