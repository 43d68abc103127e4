"""Esc interrupts a chat turn, as Ctrl-C does: the model's streaming, a running tool call, subagents.

While a turn runs the terminal reads keys one by one without echo (ISIG stays on, so Ctrl-C is
the tty's SIGINT as before) and a thread watches them. A lone Esc (no other byte within
ESC_WAIT_S: arrow keys and Alt-combinations start with Esc too) is turned into the very SIGINT
Ctrl-C sends, aimed at the main thread (signal.pthread_kill), so the turn stops by the one path
that already exists: the loop's KeyboardInterrupt (agent/loop.py) kills running sandboxed commands,
stops subagents, records the interrupt in the log and rebuilds the conversation from it; the next
message continues the session.

The other keys typed during a turn are kept (their printable text and Enter) for the next input
line, as the cooked terminal kept them before: a line ended by Enter is sent as the prompt opens,
the rest waits in the input line. An approval prompt reads its own answer: the display
pauses the watch around it (`echoed`), the terminal's own mode back, and resumes it after.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import sys
import threading
from typing import Any
from collections.abc import Callable, Iterator

ESC = b"\x1b"
ESC_WAIT_S = 0.05  # what follows Esc within this belongs to the same key (an arrow, Alt-x)
KEY_SEQUENCE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|O.|[^\x1b])", re.S)  # CSI, SS3, Alt-x
MAX_TYPED = 4000  # characters kept for the next input line


def lone_escape(data: bytes) -> tuple[bool, bytes]:
    """Whether `data` holds an Esc press of its own (an Esc that begins no key sequence), and the
    bytes that are not part of any Esc or key sequence."""
    rest = KEY_SEQUENCE.sub(b"", data)
    return ESC in rest, rest.replace(ESC, b"")


def kept_text(data: bytes) -> str:
    """What of typed bytes goes to the next input line: printable text and Enter (as a newline)."""
    text = data.decode("utf-8", errors="ignore").replace("\r", "\n")
    return "".join(ch for ch in text if ch.isprintable() or ch == "\n")


def next_input(typed: str) -> tuple[str, bool, str]:
    """How text typed during a turn meets the next prompt: (the input line's text, whether it is sent
    at once (an Enter followed it, as the cooked terminal would have sent it), what waits after it)."""
    line, enter, rest = typed.partition("\n")
    return line, bool(enter), rest


def _ctrl_c() -> None:
    """What Ctrl-C does: SIGINT, at the main thread (where the turn runs and Python raises KeyboardInterrupt)."""
    main = threading.main_thread().ident
    assert main is not None  # the main thread has started: it runs the chat
    signal.pthread_kill(main, signal.SIGINT)


class Watch:
    """The watch over one turn; a no-op when stdin is not a terminal."""

    def __init__(self, fd: int | None, interrupt: Callable[[], None] | None = None,
                 stoppable: Callable[[], bool] = lambda: True) -> None:
        self.fd = fd  # None: nothing to watch
        self._interrupt = interrupt or _ctrl_c
        self._stoppable = stoppable  # whether the turn is where an interrupt ends it cleanly (Agent.stoppable)
        self._cooked: list[Any] | None = None
        self._thread: threading.Thread | None = None
        self._wake_r = self._wake_w = -1
        self._lock = threading.Lock()  # running and sending: none sent once stop() took it
        self._running = False
        self._pauses = 0
        self.typed = ""
        self.pressed = False  # Esc was pressed in this turn

    # -- the turn ---------------------------------------------------------------------------------

    def start(self) -> Watch:
        if self.fd is None:
            return self
        import termios
        try:
            self._cooked = termios.tcgetattr(self.fd)
        except termios.error:
            self.fd = None
            return self
        self._resume()
        return self

    def stop(self) -> str:
        """The turn is over: no Esc is sent from here on; the terminal is as it was. The typed text."""
        with self._lock:
            self._running = False
        self._halt()
        self._restore()
        return self.typed

    @contextlib.contextmanager
    def echoed(self) -> Iterator[None]:
        """Around a prompt that reads its own line (an approval): the terminal's own mode (echoed,
        editable), no watch."""
        with self._lock:
            self._pauses += 1
            first = self._pauses == 1
        if first:
            self._halt()
            self._restore()
        try:
            yield
        finally:
            with self._lock:
                self._pauses -= 1
                last = self._pauses == 0 and self._running
            if last:
                self._resume()

    # -- the thread -------------------------------------------------------------------------------

    def _resume(self) -> None:
        import termios
        if self.fd is None or self._cooked is None:
            return
        held = [*self._cooked[:3], (self._cooked[3] & ~(termios.ICANON | termios.ECHO)) | termios.ISIG,
                *self._cooked[4:6], list(self._cooked[6])]
        held[6][termios.VMIN], held[6][termios.VTIME] = 1, 0
        with contextlib.suppress(termios.error):
            termios.tcsetattr(self.fd, termios.TCSANOW, held)  # TCSANOW: what is typed stays queued
        self._wake_r, self._wake_w = os.pipe()
        with self._lock:
            self._running = True
        self._thread = threading.Thread(target=self._watch, args=(self._wake_r,), name="abhed-esc", daemon=True)
        self._thread.start()

    def _halt(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        os.write(self._wake_w, b"x")
        thread.join()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _restore(self) -> None:
        if self.fd is None or self._cooked is None:
            return
        import termios
        with contextlib.suppress(termios.error):
            termios.tcsetattr(self.fd, termios.TCSANOW, self._cooked)

    def _watch(self, wake: int) -> None:
        assert self.fd is not None
        pending = b""
        while True:
            ready, _, _ = select.select([self.fd, wake], [], [], ESC_WAIT_S if pending.endswith(ESC) else None)
            if wake in ready:
                self._keep(pending.replace(ESC, b""))
                return
            if self.fd in ready:
                try:
                    chunk = os.read(self.fd, 1024)
                except OSError:
                    return
                if not chunk:
                    return
                pending += chunk
                if pending.endswith(ESC):
                    continue  # an arrow or Alt-key may follow at once
            pressed, rest = lone_escape(pending)
            pending = b""
            self._keep(rest)
            if pressed:
                self._send()

    def _keep(self, data: bytes) -> None:
        self.typed = (self.typed + kept_text(data))[:MAX_TYPED]

    def _send(self) -> None:
        with self._lock:
            if not self._running or self._pauses or self.pressed or not self._stoppable():
                return  # an Esc as the run records its end is too late: the turn is over
            self.pressed = True
            self._interrupt()


def stdin_watch(stoppable: Callable[[], bool] = lambda: True) -> Watch:
    """The watch of the chat's terminal (a no-op one when stdin or stdout is not a terminal)."""
    return Watch(sys.stdin.fileno() if sys.stdin.isatty() and sys.stdout.isatty() else None, stoppable=stoppable)


