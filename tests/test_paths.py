"""The absolute-path boundary (rule 5) and the allowed roots."""

from __future__ import annotations

import errno
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


@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "component-walk"])
def test_opener_below_refuses_symlinks_and_paths_outside_and_closes_its_root(ws, tmp_path, monkeypatch, walk):
    """Issue 18: grep opens every file through one descriptor of the root; each open is still
    confined as `open`'s (a symlink anywhere below the root, a path outside it or with `..`)."""
    from fd_testing import fds_on

    if walk:
        monkeypatch.setattr(beneath, "_openat2_works", False)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "f").write_text("secret\n")
    (ws / "d").mkdir()
    (ws / "d" / "f").write_text("mine\n")
    (ws / "d" / "link").symlink_to(tmp_path / "out" / "f")
    (ws / "dirlink").symlink_to(tmp_path / "out")
    policy = PathPolicy.create(ws)
    with policy.opener_below(ws / "d", os.O_RDONLY) as open_file:
        assert fds_on(ws) == [str(ws)]  # the root, once
        fd = open_file(str(ws / "d" / "f"))
        assert os.read(fd, 100) == b"mine\n"
        os.close(fd)
        for escape in (ws / "d" / "link", ws / "dirlink" / "f"):
            with pytest.raises(OSError) as err:
                open_file(str(escape))
            assert err.value.errno in beneath.ESCAPES
        with pytest.raises(OSError) as err:
            open_file(str(ws / "d" / ".." / ".." / "out" / "f"))
        assert err.value.errno == errno.EXDEV
        with pytest.raises(OSError) as err:
            open_file(str(tmp_path / "out" / "f"))
        assert err.value.errno == errno.EXDEV and f"is not below {ws}" in str(err.value)
    assert fds_on(ws) == []
    with pytest.raises(PathError):
        policy.opener_below(tmp_path / "out", os.O_RDONLY).__enter__()


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


@pytest.mark.parametrize("raw", ["", "   ", "\t\n"])
def test_the_policy_itself_refuses_an_empty_path_with_an_example(ws, raw):
    """The tools' argument checks may catch it first; the boundary must not rely on them."""
    with pytest.raises(PathError) as err:
        PathPolicy.create(ws).resolve(raw, field="file_path")
    assert str(err.value) == f"`file_path` is empty. Give an absolute path, e.g. {ws / 'README.md'}."


def test_the_policy_itself_refuses_a_nul_byte(ws):
    with pytest.raises(PathError) as err:
        PathPolicy.create(ws).resolve(f"{ws}/a\x00b")
    assert str(err.value) == "`path` contains a NUL byte, which no file name can hold. Send the path without it."


@pytest.mark.parametrize("raw, guess", [("~/notes.txt", "~/notes.txt"), ("~", "~"), ("~root/a/../b", "~root/b")])
def test_the_tilde_message_guesses_the_whole_expanded_path(ws, raw, guess):
    with pytest.raises(PathError) as err:
        PathPolicy.create(ws).resolve(raw)
    expected = os.path.normpath(os.path.expanduser(guess))
    assert str(err.value) == f"`path` must be an absolute path; `~` is not expanded: got {raw!r}. Did you mean {expected}?"


@pytest.mark.parametrize("errno_name, works", [("ENOSYS", False), ("EPERM", False), ("EINVAL", False), ("EXDEV", True)])
def test_the_openat2_probe_reads_the_kernels_answer(monkeypatch, errno_name, works):
    """No syscall (old kernel), refused by a seccomp filter, or an unknown struct: walk instead. Any
    other error means openat2 exists (the probe's own path was merely refused)."""
    import errno

    monkeypatch.setattr(beneath, "_openat2_works", None)

    def refuse(dirfd, rel, flags, mode):
        raise OSError(getattr(errno, errno_name), errno_name)
    monkeypatch.setattr(beneath, "_openat2", refuse)
    assert beneath.openat2_available() is works
    monkeypatch.setattr(beneath, "_openat2", lambda *a: pytest.fail("probed twice"))
    assert beneath.openat2_available() is works  # probed once, remembered


def test_without_a_usable_libc_there_is_no_openat2_and_files_still_open_beneath(ws, monkeypatch):
    monkeypatch.setattr(beneath, "_openat2_works", None)
    monkeypatch.setattr(beneath, "_libc", None)
    assert beneath.openat2_available() is False
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("x")
    fd = beneath.open_beneath(ws, ws / "d" / "f.txt", os.O_RDONLY)
    try:
        assert os.read(fd, 10) == b"x"
    finally:
        os.close(fd)


def test_the_real_probe_uses_a_directory_path_descriptor(monkeypatch):
    seen = []
    real = beneath._openat2

    def record(dirfd, rel, flags, mode):
        seen.append((rel, flags & (os.O_PATH | os.O_DIRECTORY) == os.O_PATH | os.O_DIRECTORY, mode))
        return real(dirfd, rel, flags, mode)
    monkeypatch.setattr(beneath, "_openat2_works", None)
    monkeypatch.setattr(beneath, "_openat2", record)
    beneath.openat2_available()
    assert seen == [(".", True, 0)]


def test_the_fallback_walk_opens_below_the_root_and_refuses_symlinks(ws, tmp_path):
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("walked")
    (ws / "link").symlink_to(ws / "d")
    before = sorted(os.listdir("/proc/self/fd"))
    fd = beneath.open_beneath(ws, ws / "d" / "f.txt", os.O_RDONLY, force_walk=True)
    try:
        assert os.read(fd, 100) == b"walked"
    finally:
        os.close(fd)
    with pytest.raises(OSError) as err:
        beneath.open_beneath(ws, ws / "link" / "f.txt", os.O_RDONLY, force_walk=True)
    assert err.value.errno in beneath.ESCAPES
    assert sorted(os.listdir("/proc/self/fd")) == before  # every intermediate descriptor closed


def test_a_path_outside_the_root_is_named_in_the_error(ws, tmp_path):
    outside = tmp_path / "elsewhere" / "f.txt"
    with pytest.raises(OSError) as err:
        beneath.open_beneath(ws, outside, os.O_RDONLY)
    assert (err.value.errno, err.value.strerror, err.value.filename) == (
        errno.EXDEV, f"{outside} is not below {ws}", str(outside))


def test_the_root_itself_opens_as_the_root_close_on_exec(ws):
    import fcntl

    fd = beneath.open_beneath(ws, ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(ws))
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    finally:
        os.close(fd)


def test_force_walk_never_uses_openat2(ws, monkeypatch):
    """The walk is the fallback for kernels without openat2; forcing it must really walk."""
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("x")
    monkeypatch.setattr(beneath, "_openat2", lambda *a: pytest.fail("openat2 used despite force_walk"))
    fd = beneath.open_beneath(ws, ws / "d" / "f.txt", os.O_RDONLY, force_walk=True)
    os.close(fd)


def test_the_probe_leaves_no_descriptor_open(monkeypatch):
    monkeypatch.setattr(beneath, "_openat2_works", None)
    before = sorted(os.listdir("/proc/self/fd"))
    beneath.openat2_available()
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_with_openat2_available_the_walk_is_not_used(ws, monkeypatch):
    if not beneath.openat2_available():
        pytest.skip("this kernel has no openat2")
    (ws / "f.txt").write_text("x")
    monkeypatch.setattr(beneath, "_walk", lambda *a: pytest.fail("walked although openat2 is available"))
    os.close(beneath.open_beneath(ws, ws / "f.txt", os.O_RDONLY))


def test_read_fd_reads_up_to_the_limit_from_the_current_offset(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert beneath.read_fd(fd, 1) == b"0"
        assert beneath.read_fd(fd, 0) == b""
        assert beneath.read_fd(fd, 4) == b"1234"
        assert beneath.read_fd(fd) == b"56789"
    finally:
        os.close(fd)


def test_the_tools_touch_nothing_in_a_sibling_sharing_the_prefix_nor_in_a_workspace_left_out(ws, home, tmp_path):
    """The two checks above, through every file tool for real, judged on the host: the sibling
    `/ws-evil` of `/ws` is neither read nor changed, and with operator roots set the workspace
    itself is not written."""
    evil = tmp_path / (ws.name + "-evil")
    evil.mkdir()
    (evil / "f").write_text("SECRET-SIBLING\n")
    tools = Tools(ws, home, {"create_parents": True})
    answers = [tools("read", path=str(evil / "f")), tools("write", path=str(evil / "f"), content="x\n"),
               tools("write", path=str(evil / "new"), content="x\n"),
               tools("edit", path=str(evil / "f"), old_string="SECRET", new_string="x"),
               tools("grep", pattern="SECRET", path=str(evil), output_mode="content"),
               tools("glob", pattern="*", path=str(evil))]
    assert all(a.is_error for a in answers), [a.content for a in answers]
    assert not any("SECRET-SIBLING" in a.content for a in answers)
    assert sorted(p.name for p in evil.iterdir()) == ["f"] and (evil / "f").read_text() == "SECRET-SIBLING\n"
    shared = tmp_path / "shared"
    shared.mkdir()
    confined = Tools(ws, home, roots=[shared])
    assert confined("write", path=str(ws / "f.txt"), content="x\n").is_error
    assert not (ws / "f.txt").exists()
    confined.ok("write", path=str(shared / "f.txt"), content="x\n")
    assert (shared / "f.txt").read_text() == "x\n"
