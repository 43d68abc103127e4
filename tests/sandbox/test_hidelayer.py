"""The overlay layer that hides the secrets under /etc in one mount (sandbox.hidelayer)."""

from __future__ import annotations

import array
import dataclasses
import fcntl
import os
import stat
import tempfile
from pathlib import Path

import pytest

from sandbox.bwrap import _mount_flags
from sandbox.hidelayer import _FS_IOC_GETFLAGS, _set_immutable, build_layer, overlay_available
from sandbox.hostview import HostView, Mount



def kernel_has_unprivileged_overlay() -> bool:
    """Judged here, not by overlay_available(): a broken check must fail these tests, not skip them."""
    major, minor = (int(n) for n in os.uname().release.split(".")[:2])
    with open("/proc/filesystems") as f:
        return (major, minor) >= (5, 11) and "overlay" in f.read().split()


OVERLAY = kernel_has_unprivileged_overlay()
pytestmark = pytest.mark.skipif(not OVERLAY, reason="this kernel cannot mount an overlay in a user namespace")


def test_overlay_available_says_so_on_this_kernel():
    assert overlay_available() is OVERLAY


@pytest.fixture
def etc(tmp_path: Path) -> Path:
    """A stand-in for /etc: two secrets at the top, a secret directory and a secret file deeper down."""
    root = tmp_path / "etc"
    (root / "ssl" / "private").mkdir(parents=True)
    (root / "pg" / "main").mkdir(parents=True)
    for name in ("shadow", "passwd", "pg/main/hba.conf"):
        (root / name).write_text("secret\n")
    (root / "ssl").chmod(0o751)
    (root / "pg" / "main").chmod(0o750)
    os.utime(root / "ssl", (1_000_000, 1_000_000))
    return root


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch) -> Path:
    """The test's own temporary directory, where build_layer makes its layers (tempfile.tempdir)."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path / "tmp"


def hides(root: Path) -> tuple[Mount, ...]:
    return (Mount("null-file", root / "shadow"), Mount("hidden-dir", root / "ssl" / "private"),
            Mount("null-file", root / "pg" / "main" / "hba.conf"))


def test_the_layer_holds_a_mode_000_placeholder_per_secret_in_directories_like_the_hosts(etc):
    layer = build_layer(etc, hides(etc))
    assert layer is not None
    try:
        assert layer.covered == hides(etc) and layer.path.name == "etc"
        assert stat.S_IMODE(layer.path.parent.stat().st_mode) == 0o700  # no other host user reaches it
        for placeholder, is_dir in (("shadow", False), ("ssl/private", True), ("pg/main/hba.conf", False)):
            st = os.lstat(layer.path / placeholder)
            assert stat.S_IMODE(st.st_mode) == 0 and stat.S_ISDIR(st.st_mode) == is_dir and (is_dir or st.st_size == 0)
        for directory in ("", "ssl", "pg", "pg/main"):  # the overlay shows these: they must look as on the host
            copy, original = os.stat(layer.path / directory), os.stat(etc / directory)
            assert (copy.st_mode, copy.st_uid, copy.st_gid, copy.st_mtime_ns) == (
                original.st_mode, original.st_uid, original.st_gid, original.st_mtime_ns), directory
        assert sorted(os.listdir(layer.path)) == ["pg", "shadow", "ssl"]  # nothing else: the host's files show through
        assert os.getxattr(layer.path / "ssl" / "private", "user.overlay.opaque") == b"y"  # the host's entries not merged in
        with pytest.raises(dataclasses.FrozenInstanceError):
            layer.covered = ()  # type: ignore[misc]  # what it hides is fixed when it is built
    finally:
        layer.close()
    assert not layer.path.parent.exists()


def test_hides_the_layer_cannot_represent_stay_mounts(etc, tmp_path):
    # Every one of these exists, so only the rule that refuses it keeps it a mount.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "key").write_text("secret\n")
    (tmp_path / "outside").write_text("secret\n")
    (etc / "linked").symlink_to(tmp_path / "elsewhere")
    (etc / "key-link").symlink_to(tmp_path / "elsewhere" / "key")
    outside = Mount("null-file", tmp_path / "outside")
    through_link = Mount("null-file", etc / "linked" / "key")
    a_link = Mount("null-file", etc / "key-link")
    not_a_hide = Mount("empty-dir", etc / "ssl")
    under_bind = Mount("null-file", etc / "pg" / "main" / "hba.conf")
    others = (outside, through_link, a_link, not_a_hide)
    layer = build_layer(etc, (*hides(etc), *others), bound=(etc / "pg",))
    assert layer is not None
    try:
        assert layer.covered == hides(etc)[:2]  # the operator's bind of etc/pg must not cover its hide
        view = layer.apply(HostView(system=(Mount("ro-bind", Path("/usr"), Path("/usr")), Mount("ro-bind", etc, etc)),
                                    hidden=(*hides(etc), *others)))
        assert view.system == (Mount("ro-bind", Path("/usr"), Path("/usr")), Mount("ro-overlay", etc, layer.path))
        assert view.hidden == (under_bind, *others)
    finally:
        layer.close()


def test_no_layer_where_sandboxed_commands_can_write(etc, tmp_path, monkeypatch):
    # TMPDIR inside the workspace (or an rw_bind): a command could delete a placeholder for the next one.
    monkeypatch.setenv("TMPDIR", str(tmp_path / "ws" / "tmp"))
    (tmp_path / "ws" / "tmp").mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    assert build_layer(etc, hides(etc), writable=(tmp_path / "ws",)) is None
    assert list((tmp_path / "ws" / "tmp").iterdir()) == []  # nothing left behind
    layer = build_layer(etc, hides(etc), writable=(tmp_path / "elsewhere",))
    assert layer is not None and (tmp_path / "ws" / "tmp") in layer.path.parents
    layer.close()


def test_no_layer_without_a_secret_under_the_root(etc, tmp_path):
    assert build_layer(etc, ()) is None
    assert build_layer(etc, (Mount("null-file", tmp_path / "outside"),)) is None
    assert build_layer(etc, hides(etc), bound=(etc,)) is None  # the operator bound the whole root again
    assert build_layer(etc, hides(etc), bound=(etc / "shadow", etc / "ssl" / "private", etc / "pg" / "main" / "hba.conf")) is None


def test_a_layer_that_cannot_be_built_leaves_nothing_behind(etc, tmp_path, own_tmp):
    twice = (Mount("null-file", etc / "shadow"), Mount("null-file", etc / "shadow"))  # the second placeholder exists
    assert build_layer(etc, twice) is None  # every hide stays a mount
    assert list((tmp_path / "tmp").iterdir()) == []


def test_overlay_is_judged_by_the_kernel_release_and_its_filesystems(tmp_path):
    listed, unlisted = tmp_path / "listed", tmp_path / "unlisted"
    listed.write_text("nodev\tsysfs\nnodev\toverlay\n\text4\n")
    unlisted.write_text("nodev\tsysfs\n\text4\n")
    assert overlay_available("5.11.0-1-amd64", str(listed))
    assert overlay_available("6.1.0-13-amd64", str(listed))
    assert not overlay_available("5.10.0-30-amd64", str(listed))  # before unprivileged overlay mounts
    assert not overlay_available("4.19.0", str(listed))
    assert not overlay_available("6.1.0", str(unlisted))
    assert not overlay_available("6.1.0", str(tmp_path / "missing"))
    assert not overlay_available("6.x", str(listed))


def flags_of(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        flags = array.array("l", [0])
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags)
        return flags[0]
    finally:
        os.close(fd)


def test_every_part_of_the_layer_is_immutable_even_to_host_root(etc, tmp_path, own_tmp):
    if os.getuid() != 0:
        pytest.skip("only host root builds an immutable layer")
    (tmp_path / "tmp" / "plain-file").touch()
    (tmp_path / "tmp" / "plain-dir").mkdir()
    plain = {False: flags_of(tmp_path / "tmp" / "plain-file"), True: flags_of(tmp_path / "tmp" / "plain-dir")}
    descriptors = len(os.listdir("/proc/self/fd"))
    layer = build_layer(etc, hides(etc))
    assert layer is not None
    holder = layer.path.parent
    parts = [holder, *holder.rglob("*")]
    assert len(parts) == 8  # holder, etc, shadow, ssl, ssl/private, pg, pg/main, pg/main/hba.conf
    for path in parts:
        # Exactly the immutable flag added: no other attribute of the file changed.
        assert flags_of(path) == plain[path.is_dir()] | 0x10, path
        with pytest.raises(PermissionError):
            os.chmod(path, 0o644)
        with pytest.raises(PermissionError):
            os.rename(path, tmp_path / "moved")
    with pytest.raises(PermissionError):
        (layer.path / "new").touch()
    assert len(os.listdir("/proc/self/fd")) == descriptors  # no descriptor left open
    layer.close()
    layer.close()  # twice: nothing left to remove, no error
    assert not holder.exists() and len(os.listdir("/proc/self/fd")) == descriptors


def test_secrets_sharing_a_directory_of_another_owner(etc):
    if os.getuid() != 0:
        pytest.skip("only host root can give the stand-in directories other owners")
    (etc / "pg" / "main" / "server.key").write_text("secret\n")
    os.chown(etc / "pg", 1234, 1235)
    os.chown(etc / "pg" / "main", 0, 1236)
    two = (Mount("null-file", etc / "pg" / "main" / "hba.conf"), Mount("null-file", etc / "pg" / "main" / "server.key"))
    layer = build_layer(etc, two)
    assert layer is not None
    try:
        assert sorted(os.listdir(layer.path / "pg" / "main")) == ["hba.conf", "server.key"]
        for directory in ("pg", "pg/main"):  # shown by the overlay: owned as on the host
            copy, original = os.stat(layer.path / directory), os.stat(etc / directory)
            assert (copy.st_uid, copy.st_gid, copy.st_mode) == (original.st_uid, original.st_gid, original.st_mode), directory
    finally:
        layer.close()


def test_the_overlay_is_read_only_nosuid_nodev_with_the_layer_on_top():
    flags = _mount_flags(Mount("ro-overlay", Path("/etc"), Path("/run/layer/etc")))
    assert flags == ["--overlay-src", "/etc", "--overlay-src", "/run/layer/etc", "--ro-overlay", "/etc", "--remount-ro", "/etc"]


def test_a_root_session_hides_etc_secrets_by_its_layer_and_removes_it_at_close(tmp_path):
    import sandbox

    if os.getuid() != 0:
        pytest.skip("only host root hides every non-world-readable file under /etc")
    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path) as box:
        layer = box._launcher.hide_layer
        if layer is None:
            pytest.skip("this host has no secret under /etc")
        secret = layer.covered[0].path
        result = box.run(f"cat {secret}; echo end", cwd=tmp_path, timeout_s=60)
        assert f"cat: {secret}: " in result.output and result.output.rstrip().endswith("end")
        assert "Permission denied" in result.output or "Is a directory" in result.output
        assert f"{len(layer.covered)} of them by one overlay layer on /etc" in box.describe()[-1]
        # The covered secrets are no mounts of their own: /etc is one overlay, nothing mounted under it.
        mounts = box.run("cat /proc/self/mountinfo", cwd=tmp_path, timeout_s=60).output.splitlines()
        assert [line.split()[4] for line in mounts if line.split()[4].startswith("/etc/")] == []
        assert any(line.split()[4] == "/etc" and " - overlay " in line for line in mounts), mounts
    assert not layer.path.parent.exists()


def test_another_sessions_commands_cannot_change_the_layer_even_with_the_temp_dir_bound(tmp_path, monkeypatch):
    import sandbox

    if os.getuid() != 0:
        pytest.skip("only host root builds an immutable layer")
    shared = tmp_path / "tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with sandbox.Sandbox(sandbox.SandboxConfig(), tmp_path / "a") as first:
        layer = first._launcher.hide_layer
        if layer is None:
            pytest.skip("this host has no secret under /etc")
        secret = layer.covered[0].path
        placeholder = layer.path / secret.relative_to("/etc")
        with sandbox.Sandbox(sandbox.SandboxConfig(rw_binds=(shared,)), tmp_path / "b") as second:
            assert second._launcher.hide_layer is None  # its own commands could write there
            attacks = [f"rm -rf {placeholder}", f"chmod 644 {placeholder}", f"mv {layer.path.parent} {shared}/moved",
                       f"touch {layer.path}/new", f"chattr -i {placeholder}"]
            result = second.run("; ".join(f"{a} && echo 'SUCCEEDED: {a}'" for a in attacks) + "; echo end",
                                cwd=tmp_path / "b", timeout_s=60)
            assert "SUCCEEDED" not in result.output and result.output.rstrip().endswith("end"), result.output
        assert "root:" not in first.run(f"cat {secret}; echo end", cwd=tmp_path / "a", timeout_s=60).output
    assert list(shared.iterdir()) == []


def test_a_layer_left_by_a_dead_process_is_removed_by_the_next(etc, tmp_path, monkeypatch):
    if os.getuid() != 0:
        pytest.skip("only host root builds an immutable layer")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    stale = tmp_path / f"abhed-hide-layer-{dead}-x"  # as if process ``dead`` had built it and died
    (stale / "etc").mkdir(parents=True)
    (stale / "etc" / "shadow").touch(mode=0)
    for path in (stale / "etc" / "shadow", stale / "etc", stale):
        _set_immutable(path, True)
    layer = build_layer(etc, hides(etc))
    assert layer is not None and not stale.exists()
    layer.close()


def test_a_stale_layer_is_removed_without_following_its_symlinks(etc, tmp_path, own_tmp):
    if os.getuid() != 0:
        pytest.skip("only host root builds an immutable layer")
    target = tmp_path / "someone-elses-immutable-file"
    target.touch()
    _set_immutable(target, True)
    try:
        stale = tmp_path / "tmp" / "abhed-hide-layer-999999999-x"  # no such process; any host user can make this
        stale.mkdir()
        (stale / "link").symlink_to(target)
        layer = build_layer(etc, hides(etc))
        assert layer is not None and not stale.exists()
        layer.close()
        assert flags_of(target) & 0x10  # still immutable: the link was removed, not followed
    finally:
        _set_immutable(target, False)


def test_a_live_processs_layer_is_left_alone(etc, tmp_path, own_tmp):
    # Two sessions of one process: building the second must not remove the first's layer.
    first = build_layer(etc, hides(etc))
    second = build_layer(etc, hides(etc))
    assert first is not None and second is not None
    assert first.path.is_dir() and second.path.is_dir() and first.path != second.path
    first.close()
    second.close()


def test_the_layer_keeps_the_flags_its_files_inherit(etc, tmp_path, own_tmp):
    if os.getuid() != 0:
        pytest.skip("only host root builds an immutable layer")
    noatime = 0x80  # FS_NOATIME_FL: inherited by what is made in the directory
    fd = os.open(tmp_path / "tmp", os.O_RDONLY)
    try:
        fcntl.ioctl(fd, 0x40086602, array.array("l", [flags_of(tmp_path / "tmp") | noatime]))
    finally:
        os.close(fd)
    layer = build_layer(etc, hides(etc))
    assert layer is not None
    try:
        for path in (layer.path.parent, layer.path, layer.path / "shadow"):
            assert flags_of(path) & (noatime | 0x10) == noatime | 0x10, path  # immutable added, nothing taken away
    finally:
        layer.close()
