"""write (spec §3): one test per semantic bullet and per error case."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from abhed_testing import REPO, abhed


def test_creates_a_new_file_and_reports_bytes_and_lines(tools, ws):
    out = tools.ok("write", path=str(ws / "new.txt"), content="a\nb\n")
    assert out == f"Created {ws / 'new.txt'}: wrote 4 bytes, 2 lines."
    assert (ws / "new.txt").read_bytes() == b"a\nb\n"


def test_new_files_get_0644_whatever_the_umask(tools, ws):
    old = os.umask(0o077)
    try:
        tools.ok("write", path=str(ws / "n.txt"), content="x")
    finally:
        os.umask(old)
    assert (ws / "n.txt").stat().st_mode & 0o777 == 0o644


def test_operator_default_mode_for_new_files(make_tools, ws):
    make_tools(new_file_mode="0600").ok("write", path=str(ws / "n.txt"), content="x")
    assert (ws / "n.txt").stat().st_mode & 0o777 == 0o600


def test_overwrite_requires_a_prior_read(tools, ws):
    (ws / "f.txt").write_text("precious\n")
    err = tools.err("write", path=str(ws / "f.txt"), content="gone")
    assert f"You have not read {ws / 'f.txt'} in this session" in err
    assert f'Call read with {{"path": "{ws / "f.txt"}"}} first' in err
    assert (ws / "f.txt").read_text() == "precious\n"


def test_overwrite_after_read_reports_overwritten_and_previous_size(tools, ws):
    (ws / "f.txt").write_text("old\n")
    tools.ok("read", path=str(ws / "f.txt"))
    out = tools.ok("write", path=str(ws / "f.txt"), content="new content\n")
    assert out == f"Overwrote {ws / 'f.txt'}: wrote 12 bytes, 1 lines (was 4 bytes)."
    assert (ws / "f.txt").read_text() == "new content\n"


def test_overwrite_preserves_the_mode(tools, ws):
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o750)
    tools.ok("read", path=str(script))
    tools.ok("write", path=str(script), content="#!/bin/sh\necho hi\n")
    assert script.stat().st_mode & 0o777 == 0o750


def test_write_refuses_when_the_file_changed_since_read_even_with_the_same_mtime(tools, ws):
    path = ws / "f.txt"
    path.write_text("v1\n")
    tools.ok("read", path=str(path))
    st = path.stat()
    path.write_text("v2\n")  # same size: only the hash can tell
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    err = tools.err("write", path=str(path), content="mine\n")
    assert f"{path} changed on disk since you read it" in err and "Read it again" in err
    assert path.read_text() == "v2\n"


def test_a_touch_without_content_change_does_not_block(tools, ws):
    path = ws / "f.txt"
    path.write_text("v1\n")
    tools.ok("read", path=str(path))
    os.utime(path, ns=(1, 1))
    tools.ok("write", path=str(path), content="v2\n")


def test_identical_content_reports_unchanged_and_does_not_write(tools, ws):
    path = ws / "f.txt"
    path.write_text("same\n")
    inode = path.stat().st_ino
    tools.ok("read", path=str(path))
    out = tools.ok("write", path=str(path), content="same\n")
    assert out == f"Unchanged: {path} already has exactly this content (5 bytes); nothing was written."
    assert path.stat().st_ino == inode


def test_rewriting_what_was_just_written_is_idempotent(tools, ws):
    path = str(ws / "f.txt")
    tools.ok("write", path=path, content="x\n")
    assert tools.ok("write", path=path, content="x\n").startswith("Unchanged:")


def test_missing_parent_is_an_error_when_creation_is_disabled(tools, ws):
    err = tools.err("write", path=str(ws / "a" / "b" / "f.txt"), content="x")
    assert f"The parent directory {ws / 'a' / 'b'} does not exist" in err
    assert "files.create_parents = false" in err and f"mkdir -p {ws / 'a' / 'b'}" in err
    assert not (ws / "a").exists()


def test_missing_parents_are_created_when_the_operator_enables_it(make_tools, ws):
    out = make_tools(create_parents=True).ok("write", path=str(ws / "a" / "b" / "f.txt"), content="x")
    assert f"Created the directories {ws / 'a'}, {ws / 'a' / 'b'}." in out
    assert (ws / "a" / "b" / "f.txt").read_text() == "x"


def test_parent_that_is_a_file_is_an_error(make_tools, ws):
    (ws / "file").write_text("x")
    err = make_tools(create_parents=True).err("write", path=str(ws / "file" / "f.txt"), content="x")
    assert f"{ws / 'file'} is a file, not a directory" in err


def test_writing_to_a_directory_is_an_error(tools, ws):
    (ws / "d").mkdir()
    err = tools.err("write", path=str(ws / "d"), content="x")
    assert "is a directory" in err and "glob" in err


def test_overwriting_a_binary_file_explains_why_it_cannot_be_read_first(tools, ws):
    (ws / "x.bin").write_bytes(b"\x7fELF" + b"\x00" * 40)
    err = tools.err("write", path=str(ws / "x.bin"), content="text")
    assert "ELF" in err and "delete it with bash first" in err


def test_bom_is_kept_on_overwrite(tools, ws):
    path = ws / "b.txt"
    path.write_bytes(b"\xef\xbb\xbfold\n")
    tools.ok("read", path=str(path))
    out = tools.ok("write", path=str(path), content="new\n")
    assert path.read_bytes() == b"\xef\xbb\xbfnew\n" and "Kept the file's UTF-8 byte-order mark" in out


def test_switching_crlf_to_lf_is_reported_not_silent(tools, ws):
    path = ws / "d.txt"
    path.write_bytes(b"a\r\nb\r\n")
    tools.ok("read", path=str(path))
    out = tools.ok("write", path=str(path), content="a\nb\n")
    assert "used CRLF" in out and path.read_bytes() == b"a\nb\n"


def test_lone_surrogate_in_content_is_an_instruction(tools, ws):
    err = tools.err("write", path=str(ws / "s.txt"), raw='{"path": "%s", "content": "a\\ud800b"}' % (ws / "s.txt"))
    assert "lone surrogate" in err and "index 1" in err and "remove it or send the whole character" in err
    assert not (ws / "s.txt").exists()


def test_no_temporary_files_are_left_behind(tools, ws):
    tools.ok("write", path=str(ws / "f.txt"), content="x")
    tools.ok("write", path=str(ws / "f.txt"), content="y")
    assert sorted(p.name for p in ws.iterdir()) == ["f.txt"]


def test_write_through_a_symlink_inside_the_workspace_replaces_the_target(tools, ws):
    (ws / "real.txt").write_text("old\n")
    (ws / "link.txt").symlink_to(ws / "real.txt")
    tools.ok("read", path=str(ws / "link.txt"))
    out = tools.ok("write", path=str(ws / "link.txt"), content="new\n")
    assert str(ws / "real.txt") in out
    assert (ws / "link.txt").is_symlink() and (ws / "real.txt").read_text() == "new\n"


def test_permission_denied_names_the_path_and_mode(ws, home):
    locked = ws / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    proc = abhed("tool", "write", f'{{"path": "{locked / "f.txt"}", "content": "x"}}', "--workspace", str(ws),
                 obey_permissions=True)
    assert proc.returncode == 0, proc.stderr
    assert f"Permission denied creating {locked / 'f.txt'}" in proc.stdout
    assert "Choose a path Abhed may write" in proc.stdout


DISK_FULL = r"""
set -e
mount -t tmpfs -o size=64k tmpfs "$1"
printf 'original\n' > "$1/f.txt"
"$2" -m abhed tool read "{\"path\": \"$1/f.txt\"}" --workspace "$1" --session full >/dev/null
head -c 200000 /dev/zero | tr '\0' 'x' > "$3"
"$2" - "$1/f.txt" "$3" <<'PY'
import json, subprocess, sys
content = open(sys.argv[2]).read()
args = json.dumps({"path": sys.argv[1], "content": content})
out = subprocess.run([sys.executable, "-m", "abhed", "tool", "write", "-", "--workspace", sys.argv[1].rsplit("/", 1)[0],
                      "--session", "full"], input=args, capture_output=True, text=True)
print(out.stdout)
PY
echo "AFTER: $(cat "$1/f.txt")"
ls -a "$1"
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare(1) is needed to mount a small tmpfs")
def test_disk_full_leaves_the_original_intact_and_says_so(tmp_path, home):
    """A real ENOSPC: a 64 KiB tmpfs in a private mount namespace (works as root or unprivileged)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", DISK_FULL, "sh", str(mnt), sys.executable,
                           str(tmp_path / "big.txt")], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"No space left on the device while writing {mnt / 'f.txt'}" in proc.stdout
    assert f"The original {mnt / 'f.txt'} is unchanged" in proc.stdout and "df -h" in proc.stdout
    assert "AFTER: original" in proc.stdout
    assert ".abhed-tmp-" not in proc.stdout  # the temporary file was removed


@pytest.mark.parametrize("content, lines", [("a\nb", 2), ("a\nb\n", 2), ("", 0), ("\n", 1), ("a", 1)])
def test_the_line_count_counts_a_last_line_without_newline(tools, ws, content, lines):
    out = tools.ok("write", path=str(ws / "n.txt"), content=content)
    assert out.startswith(f"Created {ws / 'n.txt'}: wrote {len(content)} bytes, {lines} lines.")


def test_a_file_deeper_up_the_path_is_named(make_tools, ws):
    (ws / "file").write_text("x")
    err = make_tools(create_parents=True).err("write", path=str(ws / "file" / "a" / "f.txt"), content="x")
    assert err.startswith(f"Cannot create {ws / 'file' / 'a' / 'f.txt'}: {ws / 'file'} is a file, not a directory.")
    assert (ws / "file").read_text() == "x"


def test_overwriting_crlf_with_lf_says_so(tools, ws):
    path = ws / "dos.txt"
    path.write_bytes(b"a\r\nb\r\n")
    tools.ok("read", path=str(path))
    out = tools.ok("write", path=str(path), content="a\nb\n")
    assert "Note: the file used CRLF (\\r\\n) line endings; the new content uses LF (\\n)." in out
    path.write_bytes(b"a\r\nb\r\n")
    tools.ok("read", path=str(path))
    assert "CRLF" not in tools.ok("write", path=str(path), content="a\r\nc\r\n")


def test_losing_the_race_at_the_rename_is_the_changed_since_read_error(tools, ws):
    """The hash re-check right before the rename (another writer came in between) answers like a stale read."""
    from abhed.common.errors import ToolError
    from abhed.tools.write import replace
    path = ws / "f.txt"
    path.write_text("theirs\n")
    tools.ok("read", path=str(path))
    record = tools.session.last_read(path)
    dirfd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(ToolError) as err:
            replace(dirfd, path, b"mine\n", mode=0o644, owner=None, expect="0" * 64, record=record, tool="write",
                    action="writing")
    finally:
        os.close(dirfd)
    assert err.value.message.startswith(f"{path} changed on disk since you read it (read at {record.at:%H:%M:%S} UTC)")
    assert "Nothing was written. Read it again, then retry." in err.value.message
    assert path.read_text() == "theirs\n"


def test_invalid_arguments_show_a_valid_write(tools, ws):
    err = tools.err("write", path=str(ws / "f.txt"))
    assert "`content` is required" in err
    assert f'e.g. {{"path": "{ws}/notes.txt", "content": "first line\\nsecond line\\n"}}' in err


def test_unchanged_content_reports_zero_bytes_written(tools, ws):
    path = ws / "f.txt"
    path.write_text("same\n")
    tools.ok("read", path=str(path))
    result = tools("write", path=str(path), content="same\n")
    assert result.metadata["bytes_written"] == 0 and result.metadata["action"] == "unchanged"


def test_a_file_over_the_hash_limit_is_judged_by_size_and_mtime(tools, ws, monkeypatch):
    """Over HASH_LIMIT write keeps no content to hash: size and mtime decide, and the rename goes
    ahead under the lock (a stand-in limit of 16 bytes keeps the file small)."""
    from abhed.tools import write as write_tool
    monkeypatch.setattr(write_tool, "HASH_LIMIT", 16)
    path = ws / "big.txt"
    path.write_text("x\n" * 50_000)  # larger than the head write sniffs, too
    tools.ok("read", path=str(path))
    out = tools.ok("write", path=str(path), content="small\n")
    assert out.startswith(f"Overwrote {path}: wrote 6 bytes, 1 lines (was 100000 bytes).")
    assert path.read_text() == "small\n"


def test_a_second_write_needs_no_new_read(tools, ws):
    """After a write the model knows the file as written: writing again is not "changed since read"."""
    path = ws / "f.txt"
    path.write_text("v1\n")
    tools.ok("read", path=str(path))
    tools.ok("write", path=str(path), content="v2\n")
    tools.ok("write", path=str(path), content="v3 longer\n")
    assert path.read_text() == "v3 longer\n"
