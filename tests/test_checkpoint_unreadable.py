"""Checkpoints skip what they cannot read and never refuse the call for it (issue 33, finding 2).

Root reads everything (CAP_DAC_OVERRIDE), which hid the fault, so these tests run Abhed as a real
unprivileged user (created with useradd, as tests/sandbox/conftest.py does) with the system's
Python 3.11, in a workspace of real files: an unreadable file, an unreadable directory, a FIFO and
a socket. Judged on the host, as root: the bytes and modes of every file after the calls and the undo.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
USER = "abhed-sbx-test"  # the sandbox suites' user (tests/sandbox/conftest.py)
PYTHON = "/usr/bin/python3.11"

# Run as the user: write, edit and bash with checkpoints, then undo to checkpoint 1. Prints what it saw.
DRIVER = r'''
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from abhed_testing import Tools
from abhed.session.checkpoint import Checkpoints, Shadow
from abhed.session import undo as undoing
from abhed.session.events import CheckpointEvent
ws, home = Path(sys.argv[1]), Path(sys.argv[2])
t = Tools(ws, home)
t.ctx.checkpoints = Checkpoints(Shadow(home, ws))
out = {"calls": []}
t.ok("read", path=str(ws / "a.txt"))
for name, args in [("write", {"path": str(ws / "a.txt"), "content": "written\n"}),
                   ("edit", {"path": str(ws / "a.txt"), "old_string": "written", "new_string": "edited"}),
                   ("bash", {"command": "chmod 000 later.txt tracked; rm piped.txt; mkfifo piped.txt; echo new > b.txt", "description": "x"}),
                   ("write", {"path": str(ws / "c.txt"), "content": "c\n"})]:
    r = t(name, **args)
    out["calls"].append({"error": r.is_error, "content": r.content, "checkpoint": r.metadata.get("checkpoint")})
out["recorded"] = [e.not_covered for e in t.session.log.load().events if isinstance(e, CheckpointEvent)]
shown = []
out["undo"] = undoing.undo(t.ctx.checkpoints, t.session, 1, force=False, confirm=lambda s: shown.append(s) or True)
out["plan"] = shown
t.ctx.close()
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def user() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("needs root to run Abhed as another, unprivileged user")
    if not os.access(PYTHON, os.X_OK):
        pytest.skip(f"needs {PYTHON}, a Python the unprivileged user can run")
    from users import ensure_user
    return ensure_user(USER)


def _site_packages() -> str:
    import httpx
    return str(Path(httpx.__file__).resolve().parent.parent)


@pytest.fixture
def base():  # type: ignore[no-untyped-def]
    """A directory the user can reach, holding `home` (made) and `ws` (for the test to make)."""
    made = Path(tempfile.mkdtemp(prefix="abhed-unreadable-"))
    made.chmod(0o755)
    (made / "home").mkdir()
    yield made
    shutil.rmtree(made, ignore_errors=True)


def _as_user(user: pwd.struct_passwd, code: str, base: Path, ws: Path, home: Path):  # type: ignore[no-untyped-def]
    """Run `code` (argv: workspace, home, tests) as the user; what it printed last, as JSON."""
    out = subprocess.run([PYTHON, "-c", code, str(ws), str(home), str(REPO / "tests")], user=user.pw_uid,
                         group=user.pw_gid, extra_groups=[], cwd=str(base), capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(base),
                              "PYTHONPATH": f"{REPO}:{_site_packages()}", "ABHED_HOME": str(home),
                              "ABHED_CONFIG": ""}, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


REPO_DRIVER = r'''
import json, os, sys
from pathlib import Path
from abhed.session.checkpoint import Shadow
ws, home = Path(sys.argv[1]), Path(sys.argv[2])
shadow, said = Shadow(home, ws), []
for mode in (None, 0o300, 0):
    if mode is not None:
        os.chmod(ws / ".git" / "refs" if mode else ws / ".git", mode)
    said.append(shadow.snapshot("s", "before", {"call": str(mode), "tool": "bash"}, watch=True)[1].not_covered)
print(json.dumps(said))
'''


def _give(user: pwd.struct_passwd, base: Path) -> tuple[Path, Path]:
    for path in [base, *base.rglob("*")]:
        os.lchown(path, user.pw_uid, user.pw_gid)
    return base / "ws", base / "home"


def test_an_unreadable_repository_directory_is_named_not_a_failure(user: pwd.struct_passwd, base: Path) -> None:
    subprocess.run(["git", "init", "-q", str(base / "ws")], check=True)
    (base / "ws" / "a").write_text("a\n")
    said = _as_user(user, REPO_DRIVER, base, *_give(user, base))
    assert said == [[], [".git/refs/ (cannot be read)"],
                    [".git/ (a directory that cannot be read: Permission denied; the repository's state is not "
                     "covered)"]]


def test_unreadable_entries_are_named_and_skipped_and_undo_leaves_them(user: pwd.struct_passwd, base: Path) -> None:
    ws = base / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("original\n")
    (ws / "later.txt").write_text("later bytes\n")
    (ws / "secret").write_text("secret bytes\n")
    (ws / "locked").mkdir()
    (ws / "locked" / "inner").write_text("inner bytes\n")
    (ws / "tracked").mkdir()  # covered by checkpoint 1, unreadable after the bash call
    (ws / "tracked" / "f").write_text("tracked bytes\n")
    os.mkfifo(ws / "fifo")  # no writer: opening it for reading would block for ever
    (ws / "sub").mkdir()
    (ws / "sub" / "kept.txt").write_text("kept\n")
    os.mkfifo(ws / "sub" / "pipe")
    (ws / "piped.txt").write_text("covered, then a FIFO\n")  # bash puts a FIFO in its place
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(ws / "sock"))
    ws, home = _give(user, base)
    (ws / "secret").chmod(0)
    (ws / "locked").chmod(0)
    seen = _as_user(user, DRIVER, base, ws, home)
    write, edit, bash, later = seen["calls"]
    # Every call ran (none refused for what it could not read), and each observation names it.
    for call in (write, edit, bash):
        assert not call["error"], call["content"]
        assert "does not cover" in call["content"] and "it cannot read (undo leaves them as they are)" in call["content"]
        assert "secret (cannot be read: Permission denied)" in call["content"]
        assert "locked/ (a directory that cannot be read: Permission denied; nothing in it is covered)" in call["content"]
        assert call is not bash or "fifo (a FIFO: it has no content to keep)" in call["content"]  # bash calls look
    assert "sock (a socket: it has no content to keep)" in bash["content"]
    assert "fifo (" not in write["content"]  # write and edit make no FIFO: only bash calls look for them
    assert "fifo (a FIFO: it has no content to keep)" in seen["recorded"][2]  # bash's checkpoint record too
    assert "sub/pipe (a FIFO: it has no content to keep)" in bash["content"]
    assert bash["checkpoint"]["skipped"] and bash["checkpoint"]["number"] == 3
    # ... and the checkpoint records name them too.
    assert all("secret (cannot be read: Permission denied)" in names for names in seen["recorded"])
    # The undo's plan says what it leaves, and the host shows it: everything covered restored,
    # nothing unreadable deleted or overwritten.
    assert "later.txt (cannot be read: Permission denied)" in seen["plan"][0]
    assert "tracked/f (its directory cannot be read: Permission denied)" in seen["plan"][0]
    assert "piped.txt (a FIFO: it has no content to keep)" in seen["plan"][0]
    assert "tracked/ (a directory that cannot be read: Permission denied; nothing in it is covered)" in seen["recorded"][3]
    assert "tracked/ (a directory that cannot be read: Permission denied; nothing in it is covered)" in later["content"]
    assert seen["undo"].startswith("Undone: the workspace is as it was before checkpoint 1")
    assert (ws / "a.txt").read_text() == "original\n"
    assert not (ws / "b.txt").exists() and not (ws / "c.txt").exists()
    for path, data in (("secret", b"secret bytes\n"), ("later.txt", b"later bytes\n"),
                       ("locked/inner", b"inner bytes\n"), ("tracked/f", b"tracked bytes\n")):
        assert (ws / path).read_bytes() == data
    assert stat.S_IMODE((ws / "secret").stat().st_mode) == 0
    assert stat.S_IMODE((ws / "later.txt").stat().st_mode) == 0
    assert stat.S_IMODE((ws / "locked").stat().st_mode) == 0
    assert stat.S_IMODE((ws / "tracked").stat().st_mode) == 0
    assert stat.S_ISFIFO((ws / "piped.txt").lstat().st_mode)  # not clobbered by the file it replaced
    assert stat.S_ISFIFO((ws / "fifo").lstat().st_mode) and stat.S_ISSOCK((ws / "sock").lstat().st_mode)


# -- what root can check in-process too: no descriptor left, and a directory that cannot be opened --


def test_asking_whether_a_path_can_be_read_leaves_no_descriptor_open(tmp_path: Path, monkeypatch) -> None:
    from abhed.session import treeio
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    os.mkfifo(ws / "pipe")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(ws / "sock"))
    os.mkfifo(tmp_path / "elsewhere")  # in the process's working directory, never looked at
    monkeypatch.chdir(tmp_path)
    with treeio.Tree(str(ws)) as tree:
        before = len(os.listdir("/proc/self/fd"))
        assert [tree.unreadable(p) for p in ("a.txt", "a.txt", "pipe", "none", "sock", "gone/elsewhere")] == [
            None, None, "a FIFO: it has no content to keep", None, "a socket: it has no content to keep", None]
        assert len(os.listdir("/proc/self/fd")) == before


def test_a_directory_that_cannot_be_opened_is_passed_over_when_looking_for_fifos(tmp_path: Path) -> None:
    from abhed.session import treeio
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "d" / "inner")
    with treeio.Tree(str(tmp_path)) as tree:  # a name too long to open (ENAMETOOLONG): skipped, not raised
        assert tree.specials(["x" * 300, "", "d"]) == ["pipe (a FIFO: it has no content to keep)",
                                                       "d/inner (a FIFO: it has no content to keep)"]
