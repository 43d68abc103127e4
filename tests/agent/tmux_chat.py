"""`abhed chat` in a real terminal: tmux runs it, send-keys types, capture-pane reads the screen."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

from agent_helpers import REPO

GUARD_S = 60  # against hanging only: no test asserts how fast anything is


class TmuxChat:
    def __init__(self, tmp: Path, home: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.socket = f"abhed-test-{uuid.uuid4().hex[:12]}"  # a server of our own: other tests keep theirs
        full = {"ABHED_HOME": str(home), "ABHED_CONFIG": "", "TERM": "xterm-256color",
                "PYTHONPATH": str(REPO), **(env or {})}
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in full.items())
        # COLUMNS/LINES from the test process (something in it sets 80x24) would override the pane's size.
        command = f"env -u COLUMNS -u LINES {exports} {shlex.quote(sys.executable)} -m abhed chat {shlex.join(args)}; echo CHAT-EXITED $?; sleep 600"
        self._tmux("new-session", "-d", "-x", "160", "-y", "50", "-s", "chat", "-c", str(REPO), command)
        self._tmux("set-option", "-t", "chat", "history-limit", "5000")

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True,
                              timeout=30).stdout

    def keys(self, *keys: str) -> None:
        """tmux key names (Enter, C-c, Up) or literal text."""
        for key in keys:
            literal = not (key in ("Enter", "Escape", "Up", "Down", "Tab", "BSpace") or key.startswith(("C-", "M-")))
            self._tmux("send-keys", "-t", "chat", *(["-l"] if literal else []), key)

    def type(self, text: str) -> None:
        self.keys(text, "Enter")

    def paste(self, text: str) -> None:
        """As a terminal pastes: bracketed, so the line editor sees one paste, newlines and all."""
        self._tmux("set-buffer", "-b", "p", text)
        self._tmux("paste-buffer", "-p", "-b", "p", "-t", "chat")

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-J", "-S", "-5000", "-t", "chat")

    def wait_for(self, text: str, count: int = 1) -> str:
        deadline = time.monotonic() + GUARD_S
        while True:
            screen = self.screen()
            if flat(screen).count(flat(text)) >= count:  # a line the chat wrapped still counts
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} (x{count}) never appeared; the screen:\n{screen}")
            time.sleep(0.1)

    def wait_prompt(self) -> str:
        """Until the input line is drawn, empty (keys sent before it would be echoed by the tty, not
        the line editor, and the screen would not show what the editor holds)."""
        deadline = time.monotonic() + GUARD_S
        while True:
            screen = self.screen()
            lines = [line.rstrip() for line in screen.splitlines() if line.strip()]
            if lines and lines[-1] == ">":
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"the input line never came back; the screen:\n{screen}")
            time.sleep(0.1)

    def wait_gone(self, text: str) -> str:
        """Until `text` is no longer on the screen (a search line the editor closed)."""
        deadline = time.monotonic() + GUARD_S
        while True:
            screen = self.screen()
            if text not in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never went away; the screen:\n{screen}")
            time.sleep(0.1)

    def pid(self) -> int:
        """The chat process (the child of the pane's shell)."""
        pane = int(self._tmux("display-message", "-p", "-t", "chat", "#{pane_pid}").strip())
        return int(Path(f"/proc/{pane}/task/{pane}/children").read_text().split()[0])

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


def flat(text: str) -> str:
    """The text with every run of white space (a wrapped line's break too) one space: the chat wraps
    at the pane's width, so where a line breaks depends on the paths in it (a test worker's temporary
    directory is longer than a lone run's)."""
    return " ".join(text.split())
