"""The chat's status line: a spinner with the elapsed time while the model thinks or a command
runs, the tokens in and out of the session so far, and the context used of the model's window.

Shown only on a terminal (rich Live, transient: it leaves nothing in the scrollback); lines printed
meanwhile appear above it. Stopped before any question is asked.

Around it, while they last: above, the draft of the reply being written (the paragraph not yet
complete, raw: the chat prints it as markdown once it is; its last lines if it is taller than the
screen allows); beneath, the last lines of the command that runs (cli/outputtail.py). While a
reply streams, the tokens out count its characters (about four a token, marked ~) until the
server's count for the reply arrives."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from abhed.cli.outputtail import OutputTail
from abhed.common.terminal import printable

CHARS_PER_TOKEN = 4  # the estimate while a reply streams, until the server counts it
ROOM = 4  # screen lines the draft leaves to the status line, the prompt and what is printed above


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
        self.draft: Callable[[], str] = lambda: ""  # the reply's text not yet printed (Chat: its MarkdownStream's)
        self._written = 0  # characters of the reply streaming now, not yet counted by the server
        self.output = OutputTail()  # the running command's last lines
        self._output_lock = threading.Lock()  # not _lock: stop() holds that while Live draws a last time

    def line(self) -> str:
        """The status text (without the spinner)."""
        parts = [f"{self._what} {time.monotonic() - self._since:.0f}s"] if self._what else []
        if self._detail:
            parts.append(self._detail)
        estimate = self._written // CHARS_PER_TOKEN
        out = f"~{_k(self.tokens_out + estimate)}" if estimate else _k(self.tokens_out)
        parts.append(f"tokens in {_k(self.tokens_in)} out {out}")
        if self.context_max:
            share = 100 * self.context_used // self.context_max
            parts.append(f"context {_k(self.context_used)}/{_k(self.context_max)} ({share}%)")
        return printable(" · ".join(parts))

    def __rich__(self) -> Group:
        self._spinner.update(text=Text(self.line(), style="dim"))
        with self._output_lock:
            tail = self.output.lines()
        below = [Text("    " + line, style="dim", no_wrap=True, overflow="ellipsis") for line in tail]
        return Group(*self._draft_lines(len(below)), self._spinner, *below)

    def _draft_lines(self, below: int) -> list[Text]:
        """The draft as the terminal wraps it, its last lines if it is taller than the room left."""
        draft = printable(self.draft().strip("\n"))
        if not draft.strip():
            return []
        lines = list(Text(draft).wrap(self.console, max(1, self.console.width)))  # pragma: no mutate  (never 0 wide)
        room = max(1, self.console.height - ROOM - below)
        return lines[-room:]

    def new_reply(self) -> None:
        """The model is asked again: what streamed of an earlier reply is no longer on its way."""
        self._written = 0

    def wrote(self, chars: int) -> None:
        """A piece of the reply streamed: the tokens out move before the server counts them."""
        self._written += chars

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

    def command_output(self, text: str) -> None:
        """A piece of the running command's output, for the lines beneath the status line."""
        with self._output_lock:
            self.output.feed(text)

    def command_ended(self) -> None:
        with self._output_lock:
            self.output.clear()

    def count(self, tokens_in: int, tokens_out: int, context_used: int, context_max: int) -> None:
        """The server's count for a reply; the estimate of its streamed text is dropped."""
        self._written = 0
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.context_used, self.context_max = context_used, context_max
