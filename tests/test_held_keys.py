"""Keys typed while the chat starts (abhed.cli.lineedit.hold_keys), on a real pseudo-terminal.

Before the prompt's editor takes the terminal, the terminal is in its cooked mode: there the tty
itself turns Ctrl-D into an end of file that no program reads as a key, and echoes what is typed.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# In the child, on the terminal: hold, say so, let the keys come (as while the chat starts), and read
# them as the editor would.
CHILD = """
import os, sys, termios
from abhed.cli.lineedit import hold_keys
release = hold_keys()
print("READY", flush=True)
got = b""
while len(got) < 4:  # Ctrl-D, a, b, Enter: however they are split between reads
    chunk = os.read(0, 100)
    if not chunk:  # an end of file: the tty ate a Ctrl-D
        break
    got += chunk
release()
release()  # idempotent: the second call changes nothing
lflag = termios.tcgetattr(0)[3]
print("GOT", got.hex() or "eof", "ICANON" if lflag & termios.ICANON else "-", "ECHO" if lflag & termios.ECHO else "-", flush=True)
"""


def _on_a_terminal(keys: bytes) -> str:
    """What the child printed when `keys` were typed after it was READY."""
    master, slave = os.openpty()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": "/nonexistent", "LANG": "C.UTF-8"}
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=slave, stdout=slave, stderr=slave,
                             env=env, start_new_session=True)
    os.close(slave)
    try:
        seen = _read_until(master, b"READY")
        os.write(master, keys)
        seen += _read_until(master, b"\n", after=b"GOT")
        child.wait(timeout=60)
        return seen.decode(errors="replace")
    finally:
        child.kill()
        child.wait()
        os.close(master)


def _read_until(fd: int, end: bytes, after: bytes = b"") -> bytes:
    seen = b""
    deadline = time.monotonic() + 60
    while not (after in seen and seen.endswith(end) if after else end in seen):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError(f"{end!r} never came; the terminal showed {seen!r}")
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        seen += chunk
    return seen


def test_held_keys_reach_the_reader_as_keys_unechoed_and_the_terminal_comes_back():
    shown = _on_a_terminal(b"\x04ab\r")
    after = shown.split("READY", 1)[1]
    # Ctrl-D arrives as the byte 04, Enter as a newline (the terminal's ICRNL); then the mode is back.
    assert "GOT 0461620a ICANON ECHO" in after, shown
    assert "ab" not in after.split("GOT", 1)[0], shown  # nothing echoed over the chat's lines


def test_without_holding_the_tty_eats_ctrl_d():
    """The control: in cooked mode the same Ctrl-D is an end of file, and the reader never sees it."""
    master, slave = os.openpty()
    try:
        assert termios.tcgetattr(slave)[3] & termios.ICANON
        os.write(master, b"\x04")
        assert os.read(slave, 100) == b""  # an end of file, not a key
    finally:
        os.close(master)
        os.close(slave)


def test_the_chat_gives_the_terminal_back_when_it_fails_before_its_prompt(tmp_path):
    """A chat that stops before drawing its prompt (a mistake in its options) leaves the terminal cooked."""
    master, slave = os.openpty()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "ABHED_HOME": str(tmp_path / "home"),
           "ABHED_CONFIG": "", "LANG": "C.UTF-8", "TERM": "xterm"}
    child = subprocess.Popen([sys.executable, "-m", "abhed", "chat", "--new", "--session", "x"], stdin=slave,
                             stdout=slave, stderr=slave, env=env, cwd=tmp_path, start_new_session=True)
    try:
        shown = b""
        while child.poll() is None or select.select([master], [], [], 0)[0]:
            if select.select([master], [], [], 1)[0]:
                try:
                    shown += os.read(master, 4096)
                except OSError:
                    break
        assert child.wait(timeout=60) == 2, shown
        assert b"give only one of them" in shown
        lflag = termios.tcgetattr(slave)[3]
        assert lflag & termios.ICANON and lflag & termios.ECHO
    finally:
        child.kill()
        child.wait()
        os.close(master)
        os.close(slave)
