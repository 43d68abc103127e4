"""Issue 14 item 1: two processes editing one file, each after its own read, never lose an edit."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from abhed.files import atomic, filelock
from abhed_testing import REPO

EDITOR = r"""
import json, sys
from pathlib import Path
from abhed.session import config
from abhed.agent import dispatch
from abhed.gate.approval import Gate, Policy
from abhed.files.paths import PathPolicy
from abhed.session.store import SessionStore
from abhed.tools.base import ToolContext

ws, home, target, tag, rounds = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
settings = config.load(env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
ctx = ToolContext(SessionStore(home).create(ws), settings, PathPolicy.create(ws))
gate = Gate(Policy.create("accept-edits", [], [], ws), invoked_by_human=True)
refused = 0
for i in range(rounds):
    while True:
        dispatch.call(ctx, "read", json.dumps({"path": target, "limit": 1}), gate)
        result = dispatch.call(ctx, "edit", json.dumps({"path": target, "old_string": f"<{tag}{i}>",
                                                         "new_string": f"<{tag}{i} done>"}), gate)
        if not result.is_error:
            break
        assert "changed on disk since you read it" in result.content, result.content
        refused += 1
print(json.dumps({"refused": refused}), flush=True)
"""

ROUNDS = 25


@pytest.mark.slow
def test_concurrent_edits_from_two_sessions_lose_nothing(ws, home):
    target = ws / "big.txt"
    filler = "x" * 100 + "\n"
    lines = [f"<a{i}>\n<b{i}>\n" + filler * 400 for i in range(ROUNDS)]  # ~1 MB: a wide window
    target.write_text("".join(lines))
    procs = [subprocess.Popen([sys.executable, "-c", EDITOR, str(ws), str(home), str(target), tag, str(ROUNDS)],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for tag in ("a", "b")]
    outs = [p.communicate() for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err
    text = target.read_text()
    lost = [f"{tag}{i}" for tag in "ab" for i in range(ROUNDS) if f"<{tag}{i} done>" not in text]
    assert lost == [], f"edits reported as done but missing from the file: {lost}"
    assert not [n for n in os.listdir(ws) if atomic.TEMP_MARK in n]


def test_the_rename_is_refused_when_the_file_changed_after_it_was_read(tmp_path):
    target = tmp_path / "f.txt"
    target.write_bytes(b"seen\n")
    seen = hashlib.sha256(b"seen\n").hexdigest()
    target.write_bytes(b"someone else's\n")
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(atomic.Conflict):
            atomic.replace_at(dirfd, "f.txt", b"mine\n", mode=0o644, expect=seen)
        with pytest.raises(atomic.Conflict):  # expect=None: creating, but it exists now
            atomic.replace_at(dirfd, "f.txt", b"mine\n", mode=0o644, expect=None)
        atomic.replace_at(dirfd, "f.txt", b"mine\n", mode=0o644, expect=hashlib.sha256(b"someone else's\n").hexdigest())
    finally:
        os.close(dirfd)
    assert target.read_bytes() == b"mine\n"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]  # no temporary file left behind


def test_the_lock_follows_the_file_not_the_name(tmp_path, ws):
    (ws / "d").mkdir()
    (ws / "alias").symlink_to(ws / "d")
    one = os.open(ws / "d", os.O_RDONLY | os.O_DIRECTORY)
    two = os.open(ws / "alias", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert filelock.slot(one, "f.txt") == filelock.slot(two, "f.txt")
        assert len({filelock.slot(one, f"f{i}.txt") for i in range(50)}) > 20  # spread over the slots
    finally:
        os.close(one)
        os.close(two)


LOCKER = r"""
import os, sys, time
from pathlib import Path
from abhed.files import filelock
dirfd = os.open(sys.argv[2], os.O_RDONLY | os.O_DIRECTORY)
with filelock.locked(Path(sys.argv[1]), dirfd, "f.txt"):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_another_process_waits_for_the_lock(tmp_path, ws):
    home = tmp_path / "h"
    holder = subprocess.Popen([sys.executable, "-c", LOCKER, str(home), str(ws)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    import fcntl
    dirfd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = os.open(home / "locks" / f"{filelock.slot(dirfd, 'f.txt'):03d}.lock", os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the holder is done
        os.close(fd)
    finally:
        os.close(dirfd)
