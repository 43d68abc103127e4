"""Shared hard links (issue 30, finding 3): a sandboxed command cannot change what a name outside the workspace shows.

The real attacks through the real sandbox, as host root and as an unprivileged user, judged on the
host by the bytes of the files outside (sha256 before and after) and by ``git fsck`` of the source
repository: a local ``git clone`` (every object file hard-linked with the source), a pnpm-style
store hard-linked into ``node_modules``, and a link the user makes between two sessions. Then the
parts of sandbox.hardlinks one by one.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import uuid
from pathlib import Path

import pytest
from sbx_helpers import chown_to, fds_in_a_fresh_process

import sandbox
from sandbox import census as census_module
from sandbox import hardlinks
from sandbox.census import Census
from sandbox.gitguard import GitGuard
from sandbox.hardlinks import Links, Shared

GIT = ["git", "-c", "safe.directory=*", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "gc.auto=0"]
BIG = hardlinks.BIND_MIN_BYTES + (1 << 20)  # a blob that makes a pack large enough to be bound
TAMPER = r"""
set +e
for f in $(find {objects} -type f); do
  chmod u+w "$f"
  python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(0); f.write(b"PAYLOAD")' "$f"
  dd if=/dev/zero of="$f" bs=1 count=8 seek=16 conv=notrunc status=none
done
for f in $(find {objects} -type f -name '??????????????????????????????????????'); do printf 'payload' > "$f"; done
for f in $(find {objects} -type f -name '*.idx'); do truncate -s 10 "$f"; done
echo done
"""


def git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*GIT, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def make_source(where: Path, *, big: bool) -> Path:
    """A repository outside the workspace: a pack (a large one when ``big``) and loose objects."""
    src = where / f"src-{uuid.uuid4().hex[:8]}"
    src.mkdir()
    git("init", "-q", cwd=src)
    (src / "a.txt").write_text("the source's own text\n")
    if big:
        (src / "big.bin").write_bytes(os.urandom(BIG))
    git("add", "-A", cwd=src)
    git("commit", "-qm", "first", cwd=src)
    git("gc", "-q", cwd=src)
    for n in range(3):
        (src / f"loose{n}.txt").write_text(f"loose {n}\n")
        git("add", "-A", cwd=src)
        git("commit", "-qm", f"loose {n}", cwd=src)
    return src


def local_clone(src: Path, workspace: Path, runner) -> Path:
    clone = workspace / "clone"
    done = git("clone", "-q", str(src), str(clone), cwd=workspace)
    assert done.returncode == 0, done.stderr
    chown_to(src, runner)
    chown_to(clone, runner)
    shared = [p for p in (clone / ".git" / "objects").rglob("*") if p.is_file() and p.stat().st_nlink > 1]
    assert len(shared) >= 10  # the clone really shares its objects with the source
    return clone


def run_session(runner, workspace: Path, commands: list[str], config: dict | None = None) -> list[dict]:
    """Several commands in ONE session (one Sandbox), in the runner's user's process."""
    code = (f"import json\nout = []\nwith sandbox.Sandbox(config_from({json.dumps(config or {})}), {str(workspace)!r}) as sb:\n"
            f"    for command in {json.dumps(commands)}:\n"
            f"        out.append(result_dict(sb.run(command, cwd={str(workspace)!r}, timeout_s=120)))\n"
            "answer = out\n")
    return runner.exec(code)


# -- the parts ----------------------------------------------------------------------------------


def shared_pair(tmp_path: Path, content: bytes = b"content\n", name: str = "f") -> tuple[Path, Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    outside = tmp_path / f"outside-{name.replace('/', '-')}"
    outside.write_bytes(content)
    inside = workspace / name
    inside.parent.mkdir(parents=True, exist_ok=True)
    os.link(outside, inside)
    return workspace, outside


def shared_of(workspace: Path, how: str) -> tuple[list[Shared], list[str]]:
    """find_shared by its own walk, or from the census of a git guard's start walk (as a sandbox's start)."""
    if how == "walk":
        return hardlinks.find_shared(workspace)
    found = Census()
    guard = GitGuard.start(workspace, census=found)
    try:
        return hardlinks.find_shared(workspace, census=found.taken(guard))
    finally:
        guard.close()


@pytest.mark.parametrize("how", ["walk", "census", "census dropped"])
def test_find_shared_counts_the_names_inside_the_workspace(tmp_path, how, monkeypatch):
    if how == "census dropped":  # too many files to keep: find_shared walks itself
        monkeypatch.setattr(census_module, "CENSUS_MAX", 0)
    workspace, outside = shared_pair(tmp_path, b"x" * 10, "d/e/out")
    (workspace / "in1").write_text("inside only")
    os.link(workspace / "in1", workspace / "d" / "in2")  # two names, both inside: not shared
    os.link(outside, workspace / "again")  # two names inside, one outside
    (workspace / "big").write_bytes(b"y" * 20)
    os.link(workspace / "big", tmp_path / "big-outside")
    os.symlink(outside, workspace / "sym")
    os.mkfifo(workspace / "fifo")
    os.link(workspace / "fifo", tmp_path / "fifo-outside")  # not a regular file: nothing to write through
    os.symlink(outside, tmp_path / "link-outside")
    os.link(tmp_path / "link-outside", workspace / "hardlinked-symlink", follow_symlinks=False)  # the link itself

    shared, unreadable = shared_of(workspace, how)

    ident = (outside.stat().st_dev, outside.stat().st_ino)
    assert shared == [Shared("big", (os.stat(workspace / "big").st_dev, os.stat(workspace / "big").st_ino), 20),
                      Shared("again", ident, 10), Shared("d/e/out", ident, 10)]
    assert unreadable == []


def test_find_shared_in_a_workspace_without_links(tmp_path):
    (tmp_path / "a").write_text("x")
    assert hardlinks.find_shared(tmp_path) == ([], [])


def test_the_documented_thresholds():
    assert hardlinks.BIND_MIN_BYTES == 16 << 20 and hardlinks.BIND_MAX == 8 and hardlinks.COPY_BUDGET_S == 60


def test_unshare_leaves_no_descriptor_open(tmp_path):
    workspace, _ = shared_pair(tmp_path, b"1", "a/b/c")
    shared_pair(tmp_path, b"2" * 5000, "a/d")
    shared_pair(tmp_path, b"3" * hardlinks.BIND_MIN_BYTES, "objects/pack/p.pack")
    out = fds_in_a_fresh_process(
        "from pathlib import Path\nfrom sandbox import hardlinks\nbefore = len(os.listdir('/proc/self/fd'))\n"
        "links = hardlinks.unshare(Path(workspace), reserve_bytes=0)\n"
        "out['copied'] = links.notes[0]\nout['leaked'] = len(os.listdir('/proc/self/fd')) - before", workspace)
    assert out["leaked"] == 0 and "2 of them" in out["copied"] and "1 of them, large" in out["copied"]


def test_in_pack_dir_and_choose_binds():
    assert hardlinks.in_pack_dir(".git/objects/pack/pack-1.pack")
    assert hardlinks.in_pack_dir("objects/pack/pack-1.idx")  # a bare repository
    assert not hardlinks.in_pack_dir("pack/pack-1.pack")
    assert not hardlinks.in_pack_dir(".git/objects/ab/cdef")
    assert not hardlinks.in_pack_dir(".git/objects/pack/sub/x")
    big = hardlinks.BIND_MIN_BYTES
    packs = [Shared(f"r{n}/.git/objects/pack/p.pack", (1, n), big + 100 - n) for n in range(hardlinks.BIND_MAX + 2)]
    other = [Shared("data/huge.bin", (2, 1), big * 4), Shared(".git/objects/pack/small.idx", (2, 2), big - 1)]
    chosen = hardlinks.choose_binds(sorted(other + packs, key=lambda s: -s.size))
    assert chosen == packs[:hardlinks.BIND_MAX]
    assert hardlinks.choose_binds([Shared("objects/pack/x", (1, 1), big)]) == [Shared("objects/pack/x", (1, 1), big)]


def test_describe_says_what_was_copied_and_what_is_bound():
    copied = [Shared("node_modules/a.js", (1, 1), 1_500), Shared("b", (1, 2), 500)]
    bound = [Shared(".git/objects/pack/p.pack", (1, 3), 2_500_000_000)]
    [note] = hardlinks.describe(copied, bound)
    assert note.startswith("3 files in the workspace shared hard links with files outside it (e.g. node_modules/a.js:")
    assert "2 of them (2.0 kB) were replaced by copies" in note
    assert "1 of them, large git pack files (2.5 GB), stay shared and are read-only to commands" in note
    [note] = hardlinks.describe([], bound)
    assert "(e.g. .git/objects/pack/p.pack:" in note and "replaced" not in note
    assert "copies" in hardlinks.describe(copied, [])[0] and "read-only" not in hardlinks.describe(copied, [])[0]
    assert hardlinks.describe([], []) == []
    assert "(999 bytes)" in hardlinks.describe([Shared("x", (1, 1), 999)], [])[0]
    assert "(1.0 MB)" in hardlinks.describe([Shared("x", (1, 1), 10**6)], [])[0]


def test_unshare_copies_with_the_same_content_mode_and_times(tmp_path):
    workspace, outside = shared_pair(tmp_path, b"\x00binary\xff" * 1000, "sub/dir/obj")
    os.chmod(outside, 0o6444)  # set-uid/set-gid: never on a copy
    os.utime(outside, ns=(1_000_000_000_123, 2_000_000_000_456))
    os.chown(outside, 4242, 4343)  # root: the copy keeps the owner
    old = outside.stat()

    links = hardlinks.unshare(workspace, reserve_bytes=None)

    inside = (workspace / "sub/dir/obj").stat()
    assert inside.st_ino != old.st_ino and inside.st_nlink == 1 and outside.stat().st_nlink == 1
    assert (workspace / "sub/dir/obj").read_bytes() == outside.read_bytes() == b"\x00binary\xff" * 1000
    assert stat.S_IMODE(inside.st_mode) == 0o444
    assert (inside.st_atime_ns, inside.st_mtime_ns) == (1_000_000_000_123, 2_000_000_000_456)
    assert (inside.st_uid, inside.st_gid) == (4242, 4343)
    assert links.bound == () and "sub/dir/obj" in links.notes[0]
    assert sorted(os.listdir(workspace / "sub/dir")) == ["obj"]  # no temporary file left
    assert hardlinks.unshare(workspace, reserve_bytes=None).notes == ()  # nothing shared any more


def test_unshare_of_an_empty_file_and_of_our_own(tmp_path):
    workspace, outside = shared_pair(tmp_path, b"")
    os.chown(outside, os.geteuid(), os.getegid())
    hardlinks.unshare(workspace, reserve_bytes=None)
    assert (workspace / "f").stat().st_nlink == 1 and (workspace / "f").read_bytes() == b""


def test_unshare_binds_a_large_pack_and_checks_it_before_every_command(tmp_path):
    workspace, outside = shared_pair(tmp_path, b"P" * hardlinks.BIND_MIN_BYTES, ".git/objects/pack/pack-1.pack")
    shared_pair(tmp_path, b"idx", ".git/objects/pack/pack-1.idx")

    links = hardlinks.unshare(workspace, reserve_bytes=None)

    pack = workspace / ".git/objects/pack/pack-1.pack"
    assert pack.stat().st_ino == outside.stat().st_ino  # not copied
    assert (workspace / ".git/objects/pack/pack-1.idx").stat().st_nlink == 1  # small: copied
    assert links.bound_entries() == (".git/objects/pack/pack-1.pack",)
    os.rename(pack, tmp_path / "moved")
    pack.write_bytes(b"another file now")
    assert links.bound_entries() == ()  # not the shared file any more: nothing to bind
    pack.unlink()
    assert links.bound_entries() == ()
    assert Links(workspace).bound_entries() == ()


def test_unshare_refuses_to_go_below_the_disk_reserve(tmp_path):
    workspace, outside = shared_pair(tmp_path, b"z" * 4096)
    free = os.statvfs(workspace).f_bavail * os.statvfs(workspace).f_frsize

    with pytest.raises(sandbox.DiskReserveReached) as caught:
        hardlinks.unshare(workspace, reserve_bytes=free + (1 << 30), reserve_setting="sandbox.disk_reserve_bytes")

    message = str(caught.value)
    assert f"{workspace / 'f'} (4096 bytes) shares a hard link" in message
    assert f"below the reserve of {free + (1 << 30)} bytes (sandbox.disk_reserve_bytes)" in message
    assert "git clone --no-hardlinks" in message
    assert (workspace / "f").stat().st_nlink == 2 and os.listdir(workspace) == ["f"]  # nothing changed
    hardlinks.unshare(workspace, reserve_bytes=free // 2)  # room enough
    assert (workspace / "f").stat().st_nlink == 1


def test_unshare_stops_at_its_time_budget_and_the_next_start_goes_on(tmp_path):
    workspace, _ = shared_pair(tmp_path, b"1", "a")
    shared_pair(tmp_path, b"2", "b")
    shared, _ = hardlinks.find_shared(workspace)
    copier = hardlinks._Copier(workspace, None, "x", 3600, len(shared))
    assert copier.copy(shared[0]) is True
    copier.deadline = 0

    with pytest.raises(sandbox.SandboxSetupError) as caught:
        copier.copy(shared[1])

    assert "2 files in the workspace share hard links" in str(caught.value)
    assert "took longer than 3600 s: 1 copied, 1 to go. Run the command again" in str(caught.value)
    with pytest.raises(sandbox.SandboxSetupError):
        hardlinks.unshare(workspace, reserve_bytes=None, budget_s=-1)
    assert hardlinks.unshare(workspace, reserve_bytes=None).notes[0].startswith("1 file in the workspace shared")


def test_a_name_changed_since_the_walk_is_left_alone(tmp_path):
    workspace, outside = shared_pair(tmp_path, b"old")
    [item] = hardlinks.find_shared(workspace)[0]
    (workspace / "f").unlink()
    copier = hardlinks._Copier(workspace, None, "x", 60, 1)
    assert copier.copy(item) is False and copier.done == 0  # gone
    (workspace / "f").write_bytes(b"a new file")
    assert copier.copy(item) is False  # another file now
    assert (workspace / "f").read_bytes() == b"a new file" and sorted(os.listdir(workspace)) == ["f"]
    assert hardlinks.unshare(workspace, reserve_bytes=None).notes == ()
    for make in (os.mkdir, os.mkfifo):  # a FIFO is opened without waiting for a writer
        (workspace / "f").unlink() if (workspace / "f").is_file() else os.rmdir(workspace / "f")
        make(workspace / "f")
        assert copier.copy(item) is False
    assert sorted(os.listdir(workspace)) == ["f"]
    os.unlink(workspace / "f")
    os.symlink(outside, workspace / "f")  # the outside file itself, by a symlink: never followed
    with pytest.raises(sandbox.SandboxSetupError) as caught:
        copier.copy(item)
    assert "failed: Too many levels of symbolic links. To go on, make it readable" in str(caught.value)
    assert sorted(os.listdir(workspace)) == ["f"] and outside.stat().st_nlink == 1


def test_a_directory_swapped_for_a_symlink_since_the_walk_stops_the_start(tmp_path):
    workspace, outside = shared_pair(tmp_path, b"old", "d/f")
    [item] = hardlinks.find_shared(workspace)[0]
    copier = hardlinks._Copier(workspace, None, "x", 60, 1)
    os.rename(workspace / "d", tmp_path / "elsewhere")
    assert copier.copy(item) is False  # gone with its directory
    os.symlink(tmp_path / "elsewhere", workspace / "d")
    with pytest.raises(sandbox.SandboxSetupError) as caught:
        copier.copy(item)
    assert f"{workspace / 'd/f'} shares a hard link" in str(caught.value)
    assert "To go on, run the command again (the workspace changed while it was checked)." in str(caught.value)
    assert (tmp_path / "elsewhere" / "f").stat().st_nlink == 2  # nothing written through the symlink


def test_a_name_replaced_while_the_copy_was_written_keeps_the_new_file(tmp_path):
    workspace, outside = shared_pair(tmp_path, b"old")
    parent = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        (workspace / ".tmp").write_bytes(b"copy")
        os.unlink(workspace / "f")
        (workspace / "f").write_bytes(b"replaced")
        ident = (outside.stat().st_dev, outside.stat().st_ino)
        assert hardlinks._rename_if_same(parent, ".tmp", "f", ident) is False
        assert (workspace / "f").read_bytes() == b"replaced" and not (workspace / ".tmp").exists()
        (workspace / ".tmp").write_bytes(b"copy")
        os.unlink(workspace / "f")
        assert hardlinks._rename_if_same(parent, ".tmp", "f", ident) is False and os.listdir(workspace) == []
    finally:
        os.close(parent)


def test_a_copy_that_fails_says_which_file_and_leaves_no_temporary(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(tmp_path)], check=True)
    try:
        workspace, outside = shared_pair(tmp_path, b"q" * 600_000)  # the copy needs more than is left

        with pytest.raises(sandbox.SandboxSetupError) as caught:
            hardlinks.unshare(workspace, reserve_bytes=None)

        message = str(caught.value)
        assert message.startswith(f"{workspace / 'f'} shares a hard link with a file outside the workspace, and copying it")
        assert message.endswith("failed: No space left on device. To go on, free space or fix the file.")
        assert os.listdir(workspace) == ["f"] and (workspace / "f").stat().st_nlink == 2
    finally:
        subprocess.run(["umount", "-l", str(tmp_path)], check=True)


def test_the_temporary_name_is_one_abhed_cleans_up():
    from abhed.files import atomic

    assert atomic.is_temp(hardlinks._temp_name("pack-1.pack"))
    assert hardlinks._temp_name("x").startswith(".x.abhed-tmp-")


def test_unreadable_files_and_directories_as_an_unprivileged_user(user_runner):
    workspace = user_runner.new_workspace()
    code = f"""
import os
from pathlib import Path
from sandbox import hardlinks
ws = Path({str(workspace)!r})
(ws / "locked").mkdir()
(ws / "locked" / "x").write_text("x")
os.chmod(ws / "locked", 0)
outside = ws.parent / ("o-" + ws.name)
outside.write_text("secret")
os.link(outside, ws / "f")
os.chmod(outside, 0)
shared, unreadable = hardlinks.find_shared(ws)
from sandbox.census import Census
from sandbox.gitguard import GitGuard
census = Census()
guard = GitGuard.start(ws, census=census)
by_census = hardlinks.find_shared(ws, census=census.taken(guard))
guard.close()
assert ([s.name for s in by_census[0]], by_census[1]) == ([s.name for s in shared], unreadable), by_census
try:
    hardlinks.unshare(ws, reserve_bytes=None)
    error = None
except Exception as exc:
    error = type(exc).__name__ + ": " + str(exc)
os.chmod(outside, 0o644)
links = hardlinks.unshare(ws, reserve_bytes=None)
os.chmod(ws, 0)
none = hardlinks.find_shared(ws)
os.chmod(ws, 0o700)
os.chmod(ws / "locked", 0o700)
answer = [[s.name for s in shared], unreadable, error, list(links.notes), none]
"""
    names, unreadable, error, notes, none = user_runner.exec(code)
    assert names == ["f"] and unreadable == ["locked"]
    assert error.startswith(f"SandboxSetupError: {workspace / 'f'} shares a hard link")
    assert ("failed: Permission denied. To go on, make it readable (chmod u+r) or remove it from the workspace, or, if the "
            "workspace was changing, run the command again.") in error
    assert len(notes) == 2 and "1 file in the workspace shared" in notes[0]
    assert notes[1] == (f"the directory {workspace / 'locked'} cannot be read by Abhed, so it was not checked for files "
                        "sharing hard links with files outside the workspace; make it readable (chmod u+rx) and start a "
                        "new session.")
    assert none == [[], [""]]


def test_start_notes_are_told_once(tmp_path):
    workspace, outside = shared_pair(tmp_path, b"abc")
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        notes = sb.start_notes()
        assert len(notes) == 1 and "1 file in the workspace shared hard links" in notes[0]
        assert sb.start_notes() == []
        assert sb.run("true", cwd=workspace, timeout_s=60).notes == ()


def test_what_an_earlier_sandbox_of_the_workspace_did_is_told_by_the_next(tmp_path):
    workspace, outside = shared_pair(tmp_path, b"abc")
    config = sandbox.SandboxConfig()
    with sandbox.Sandbox(config, workspace), sandbox.Sandbox(config, workspace) as bash:  # an MCP server's first
        [note] = bash.run("true", cwd=workspace, timeout_s=60).notes
    assert note.startswith("1 file in the workspace shared hard links")
    with sandbox.Sandbox(config, workspace) as later:
        assert later.start_notes() == []


def test_untold_notes_are_kept_per_workspace_and_told_once():
    from sandbox.box import _Untold

    untold = _Untold()
    untold.add(Path("/a"), ("x", "y"))
    untold.add(Path("/a"), ("y", "z"))  # the same sentence from a second start
    untold.add(Path("/b"), ("w",))
    assert untold.take(Path("/a")) == ["x", "y", "z"]
    assert untold.take(Path("/a")) == [] and untold.take(Path("/b")) == ["w"]


def test_backend_none_changes_nothing(tmp_path):
    workspace, outside = shared_pair(tmp_path, b"abc")
    with sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), workspace) as sb:
        assert sb.start_notes() == []
    assert (workspace / "f").stat().st_nlink == 2


def test_a_failed_start_closes_the_launcher(tmp_path, monkeypatch):
    workspace, outside = shared_pair(tmp_path, b"abc")
    free = os.statvfs(workspace).f_bavail * os.statvfs(workspace).f_frsize
    config = sandbox.SandboxConfig(limits=sandbox.Limits(disk_reserve_bytes=free + (1 << 30)))
    closed = []
    from sandbox.launcher import BwrapLauncher

    real = BwrapLauncher.close
    monkeypatch.setattr(BwrapLauncher, "close", lambda self: (closed.append(self), real(self)))
    with pytest.raises(sandbox.DiskReserveReached):
        sandbox.Sandbox(config, workspace)
    assert len(closed) == 1


# -- the attacks ------------------------------------------------------------------------------


@pytest.mark.parametrize("big", [False, True], ids=["copied", "pack-bound"])
def test_a_local_clone_cannot_change_the_source_repository(runner, workspace, big):
    src = make_source(workspace.parent, big=big)
    before = digests(src / ".git" / "objects")
    clone = local_clone(src, workspace, runner)
    objects = clone / ".git" / "objects"

    out = runner.run(TAMPER.format(objects=objects), workspace=workspace, timeout_s=300)

    assert "done" in out.output, out.output
    assert digests(src / ".git" / "objects") == before  # not one byte of the source's objects changed
    fsck = git("fsck", "--full", cwd=src)
    assert fsck.returncode == 0 and not fsck.stdout and "error" not in fsck.stderr, fsck.stdout + fsck.stderr
    assert git("show", "HEAD:a.txt", cwd=src).stdout == "the source's own text\n"
    loose = [p for p in objects.rglob("*") if p.is_file() and len(p.name) == 38]
    assert loose and all(p.read_bytes() == b"payload" for p in loose)  # the attack ran, on the workspace's copies
    told = " ".join(out.notes)
    assert "shared hard links with files outside it" in told and "replaced by copies" in told, out.notes
    if big:
        pack = max((objects / "pack").glob("*.pack"), key=lambda p: p.stat().st_size)
        assert pack.stat().st_nlink == 2  # still shared with the source (bound, not copied)...
        assert "large git pack files" in told and "read-only to commands" in told
        assert "Read-only file system" in out.output  # ...and its writes were refused


def test_a_pnpm_store_linked_into_node_modules_stays_unchanged(runner, workspace):
    store = workspace.parent / f"store-{uuid.uuid4().hex[:8]}"
    for n in range(40):
        package = store / f"pkg{n % 4}" / "lib"
        package.mkdir(parents=True, exist_ok=True)
        (package / f"m{n}.js").write_text(f"module.exports = {n};\n" * (n + 1))
    subprocess.run(["cp", "-al", str(store), str(workspace / "node_modules")], check=True)
    chown_to(store, runner)
    chown_to(workspace / "node_modules", runner)
    before = digests(store)

    out = runner.run(TAMPER.format(objects=workspace / "node_modules") + "echo hacked >> node_modules/pkg0/lib/m0.js\n",
                     workspace=workspace, timeout_s=300)

    assert "done" in out.output
    assert digests(store) == before
    assert (workspace / "node_modules/pkg0/lib/m0.js").read_text().endswith("hacked\n")  # the project's copy is its own
    assert any("40 files in the workspace shared hard links" in note for note in out.notes), out.notes


def test_a_link_the_user_makes_between_sessions_is_broken_by_the_next_session(runner, workspace):
    outside = workspace.parent / f"outside-{uuid.uuid4().hex[:8]}.txt"
    outside.write_text("the user's file\n")
    chown_to(outside, runner)
    first = runner.run("echo first session", workspace=workspace)
    assert first.notes == ()
    os.link(outside, workspace / "linked.txt")  # made on the host, by the user, after that session started

    out = runner.run("chmod u+w linked.txt; echo changed > linked.txt; cat linked.txt", workspace=workspace)

    assert outside.read_text() == "the user's file\n"
    assert (workspace / "linked.txt").read_text() == "changed\n"
    assert "1 file in the workspace shared hard links" in out.notes[0] and "linked.txt" in out.notes[0]


def test_git_in_the_workspace_still_works_with_a_bound_pack(runner, workspace):
    src = make_source(workspace.parent, big=True)
    before = digests(src / ".git" / "objects")
    local_clone(src, workspace, runner)
    git_in = " ".join(GIT[:-2]) + " -C clone"

    outs = run_session(runner, workspace, [
        f"echo new > clone/new.txt && {git_in} add new.txt && {git_in} commit -qm new && echo committed",
        f"{git_in} gc -q && echo gc-ok && {git_in} fsck --full && echo fsck-ok && {git_in} log --oneline | wc -l",
        "mv clone/.git/objects/pack clone/.git/objects/moved; rm -f clone/.git/objects/pack/*.pack; ls clone/.git/objects/pack",
    ])

    assert "committed" in outs[0]["output"], outs[0]
    assert "gc-ok" in outs[1]["output"] and "fsck-ok" in outs[1]["output"] and outs[1]["output"].split()[-1] == "5", outs[1]
    assert "Device or resource busy" in outs[2]["output"]  # the bound pack and its directory cannot be moved away
    assert outs[0]["notes"] and not outs[1]["notes"]  # told once, with the first command
    assert digests(src / ".git" / "objects") == before
    assert git("fsck", "--full", cwd=src).returncode == 0


def test_a_bound_pack_stays_read_only_in_every_command_of_the_session(runner, workspace):
    src = make_source(workspace.parent, big=True)
    before = digests(src / ".git" / "objects")
    clone = local_clone(src, workspace, runner)
    tamper = TAMPER.format(objects=clone / ".git" / "objects" / "pack")

    outs = run_session(runner, workspace, ["true", tamper, tamper])

    assert all("done" in o["output"] for o in outs[1:])
    assert digests(src / ".git" / "objects") == before


# -- Abhed's own links (the checkpoint store's repo-packs, abhed.session.seed) ----------------------


def own_pack(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A workspace pack whose only other name is in the store's repo-packs/pack (as seed links it)."""
    workspace = tmp_path / "ws"
    pack = workspace / ".git/objects/pack/pack-1.pack"
    pack.parent.mkdir(parents=True)
    pack.write_bytes(b"P" * hardlinks.BIND_MIN_BYTES)
    own = tmp_path / "home/checkpoints/key/repo-packs/pack"
    own.mkdir(parents=True)
    os.link(pack, own / "pack-1.pack")
    return workspace, pack, own


def test_a_pack_linked_only_into_the_store_s_repo_packs_is_not_told_but_still_bound(tmp_path):
    workspace, pack, own = own_pack(tmp_path)

    links = hardlinks.unshare(workspace, reserve_bytes=None, own=own)

    assert links.notes == ()  # Abhed's own bookkeeping: nothing to tell the model
    assert links.bound_entries() == (".git/objects/pack/pack-1.pack",)  # read-only in commands as before
    assert pack.stat().st_nlink == 2 and (own / "pack-1.pack").read_bytes() == pack.read_bytes()


def test_a_pack_also_linked_outside_the_store_is_still_told(tmp_path):
    workspace, pack, own = own_pack(tmp_path)
    os.link(pack, tmp_path / "a-local-clone-source.pack")  # one more name, not Abhed's

    links = hardlinks.unshare(workspace, reserve_bytes=None, own=own)

    assert links.notes and "1 file in the workspace shared hard links" in links.notes[0], links.notes
    assert "large git pack files" in links.notes[0]


def test_a_real_outside_link_is_copied_and_told_beside_an_own_pack(tmp_path):
    workspace, pack, own = own_pack(tmp_path)
    outside = tmp_path / "outside"
    outside.write_bytes(b"the user's own\n")
    os.link(outside, workspace / "f")

    links = hardlinks.unshare(workspace, reserve_bytes=None, own=own)

    assert len(links.notes) == 1 and "1 file in the workspace" in links.notes[0] and "(e.g. f:" in links.notes[0]
    assert "large git pack files" not in links.notes[0]
    assert (workspace / "f").stat().st_nlink == 1 and outside.read_bytes() == b"the user's own\n"


def test_own_links_are_matched_by_inode_through_the_directory_not_by_name(tmp_path):
    workspace, pack, own = own_pack(tmp_path)
    (own / "pack-1.pack").unlink()
    (own / "pack-1.pack").write_bytes(pack.read_bytes())  # same name and bytes, another file
    os.link(pack, tmp_path / "elsewhere.pack")
    assert "large git pack files" in hardlinks.unshare(workspace, reserve_bytes=None, own=own).notes[0]

    workspace, pack, own = own_pack(tmp_path / "2")
    linked_dir = tmp_path / "linked"
    os.symlink(own, linked_dir)  # the store's directory reached through a symlink: never followed
    shared, _ = hardlinks.find_shared(workspace, linked_dir)
    assert [item.own for item in shared] == [False]
    assert [item.own for item in hardlinks.find_shared(workspace, tmp_path / "missing")[0]] == [False]
    assert [item.own for item in hardlinks.find_shared(workspace, own)[0]] == [True]


def test_a_session_with_own_links_says_nothing_of_them(tmp_path):
    workspace, pack, own = own_pack(tmp_path)
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace, own_links=own) as sb:
        assert sb.start_notes() == []
    workspace2, pack2, _ = own_pack(tmp_path / "2")
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace2) as sb:
        assert any("large git pack files" in note for note in sb.start_notes())
