"""The chat's status line: a spinner with the elapsed time while the model thinks or a command
runs, the tokens in and out of the session so far, and the context used of the model's window.

Shown only on a terminal (rich Live, transient: it leaves nothing in the scrollback); lines printed
meanwhile appear above it. Stopped before any question is asked."""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from abhed.common.terminal import printable


def _k(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


class Activity:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.tokens_in = self.tokens_out = self.context_used = self.context_max = 0
        self._what = ""
        self._detail = ""  # how far the work under way has got (a long snapshot's progress)
        self._since = 0.0
        self._spinner = Spinner("dots", style="cyan")
        self._live: Live | None = None
        self._lock = threading.Lock()

    def line(self) -> str:
        """The status text (without the spinner)."""
        parts = [f"{self._what} {time.monotonic() - self._since:.0f}s"] if self._what else []
        if self._detail:
            parts.append(self._detail)
        parts.append(f"tokens in {_k(self.tokens_in)} out {_k(self.tokens_out)}")
        if self.context_max:
            share = 100 * self.context_used // self.context_max
            parts.append(f"context {_k(self.context_used)}/{_k(self.context_max)} ({share}%)")
        return printable(" · ".join(parts))

    def __rich__(self) -> Spinner:
        self._spinner.update(text=Text(self.line(), style="dim"))
        return self._spinner

    def start(self, what: str) -> None:
        with self._lock:
            if what != self._what:
                self._what, self._since, self._detail = what, time.monotonic(), ""
            if self._live is None and self.console.is_terminal:
                self._live = Live(self, console=self.console, transient=True, refresh_per_second=8)
                self._live.start()

    def detail(self, text: str) -> None:
        """Beside what is under way, until it changes or this is called with ""; the timer runs on."""
        with self._lock:
            self._detail = text

    def stop(self) -> None:
        with self._lock:
            self._what = self._detail = ""
            if self._live is not None:
                self._live.stop()
                self._live = None

    def count(self, tokens_in: int, tokens_out: int, context_used: int, context_max: int) -> None:
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.context_used, self.context_max = context_used, context_max
