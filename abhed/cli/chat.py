"""The interactive session of `abhed chat`: read a message (or a slash command), run a turn, repeat.

The prompt comes first (issue 18: ready for input at once). What a turn needs and is slow to get
(the model client and its connection check, the session's lock, every tool, the MCP servers) is
built in a thread started once the prompt is on the screen, while the person types; the first
message (or slash command) waits for it. A build that fails ends the prompt at once and the chat
with the build's own message and exit status, as when it came before the prompt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.text import Text

from abhed.cli import escwatch, lineedit, slash
from abhed.cli.display import Chat
from abhed.common.terminal import printable
from abhed.session.store import SessionStore


class StartFailed(Exception):
    """The chat's agent could not be built: `message` for the person, `code` the exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message, self.code = message, code


class Pending:
    """The chat's agent and whether the session's last run was left unfinished, built by `build` in a
    thread from `start()` on; `result()` waits for it (and raises what the build raised)."""

    def __init__(self, build: Callable[[], tuple[Any, bool]]) -> None:
        self._build = build
        self._thread: threading.Thread | None = None
        self._value: tuple[Any, bool] | None = None
        self._error: BaseException | None = None
        self.failed: Callable[[], None] = lambda: None  # told (from the thread) when the build fails

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="abhed-chat-start", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._build()
        except BaseException as exc:  # handed to the main thread by result()
            self._error = exc
            self.failed()

    def result(self) -> tuple[Any, bool]:
        self.start()
        assert self._thread is not None
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value

    def wait(self) -> None:
        """The build is over (if it ever started), whatever came of it: before cleaning up after it."""
        if self._thread is not None:
            self._thread.join()


def greet(display: Chat, workspace: Path) -> None:
    """What the chat shows before its prompt: nothing that needs the model or the session."""
    display.console.print(f"[bold]abhed[/] chat in {escape(printable(str(workspace)))}")
    display.console.print("[dim]/help lists commands; Esc or Ctrl-C stops a turn, Ctrl-D or /exit ends the session.[/]")


def announce(agent: Any, display: Chat, unfinished: bool) -> None:
    """What the chat shows once its agent is built (above the prompt, if the person is typing)."""
    console = display.console
    console.print(f"[bold]abhed[/] session [cyan]{agent.ctx.session.id}[/] [dim]({escape(printable(agent.model.describe()))}; "
                  f"mode {agent.gate.effective().mode})[/]")
    if agent.ctx.session.state.todos:
        display.todos(agent.ctx.session.state.todos)
    if unfinished:
        console.print("[yellow]The last run of this session was cut short: press Enter to let it continue.[/]")


def chat_loop(pending: Pending, display: Chat, home: Path, workspace: Path,
              release: Callable[[], None] = lambda: None, first: str | None = None, settings: Any = None) -> None:
    """`release`: lineedit.hold_keys' (the keys typed since the chat began wait for the prompt).
    `first`: the message given on the command line (`abhed "fix the test"`), sent as if typed.
    `settings`: the operator's (custom commands, the `@` picker's exclusions); None: defaults."""
    console = display.console
    greet(display, workspace)
    custom, files = _peer_features(display, workspace, settings)
    queued = _queue_first(display, first, pending, release)
    read = lineedit.reader(home, workspace, [*slash.NAMES, *(f"/{n}" for n in custom.commands)],
                           lambda prompt: console.input(prompt), drawn=pending.start, release=release, files=files)
    pending.failed = read.stop  # the person learns at once, not when they send
    agent = commands = None
    unfinished = False
    while True:
        try:
            if queued:
                text = queued.pop()
            else:
                line, send, display.typed = escwatch.next_input(display.typed)  # keys typed during the last turn
                text = read("> ", line, send).strip()
            if agent is None:  # the first message waits for what a turn needs
                agent, unfinished = pending.result()
                commands = slash.Slash(agent, display, SessionStore(home), custom,
                                       turn=lambda text: _turn(agent, display, text))
        except EOFError:
            console.print()
            return
        except KeyboardInterrupt:  # no turn to stop: the session goes on
            console.print("[dim](Ctrl-D or /exit ends the session)[/]")
            continue
        command = slash.parse(text)
        if command is not None:
            assert commands is not None  # set with the agent, before any text is handled
            prompt = commands.prompt_of(*command)  # a custom command (usercommands) is a prompt to send
            if prompt is None:
                if not commands.run(*command):
                    return
                continue
            text = prompt
        if not text and not unfinished:
            continue
        _turn(agent, display, text)
        unfinished = False


def _queue_first(display: Chat, first: str | None, pending: Pending, release: Callable[[], None]) -> list[str]:
    """The command line's message, shown as the prompt line it stands for; the terminal is let go at
    once (its first turn may ask for approval) and the build starts without waiting for a prompt."""
    if first is None or not first.strip():
        return []
    release()
    pending.start()
    display.console.print(Text("> ", style="bold") + Text(printable(first.strip())), soft_wrap=True)
    return [first.strip()]


def _peer_features(display: Chat, workspace: Path, settings: Any) -> tuple[Any, Any]:
    """The custom slash commands (their problems shown now) and the `@` picker's file list."""
    import os

    from abhed.cli import mentions, usercommands
    from abhed.session.config import Settings
    settings = settings if settings is not None else Settings()
    custom = usercommands.load(dict(os.environ), workspace, {*slash.HELP, "quit"}, settings)
    for problem in custom.problems:
        display.console.print(printable(f"custom commands: {problem}"), style="yellow", markup=False, soft_wrap=True)
    return custom, mentions.FileList(mentions.workspace_walk(workspace, settings.search.exclude)).files


def _turn(agent: Any, display: Chat, text: str) -> None:
    """Run one turn on the person's message (Esc or Ctrl-C interrupts it: cli/escwatch.py); the
    keys typed meanwhile wait in display.typed for the next prompt."""
    from abhed.cli.attachments import attach
    from abhed.cli.launch import budget
    console = display.console
    agent.budget = budget(agent.ctx.settings)  # the budgets are per prompt
    from abhed.cli import mentions
    mentioned = mentions.attach(text, agent.ctx, agent.gate)  # files named by `@path`
    for line in mentioned.lines:
        console.print(printable(line), style="dim", markup=False, soft_wrap=True)
    text = mentioned.prompt
    # Images and PDFs named by path (typed or dropped), a relative one from where the person started.
    attached = attach(text, agent.ctx.vision, cwd=Path.cwd(), workspace=agent.ctx.paths.workspace)
    for line in attached.lines:
        console.print(printable(line), style="dim", markup=False, soft_wrap=True)
    # The watch holds the keys (no echo onto the status line; an approval's line echoed) and reads them:
    # Esc interrupts, the rest waits in display.typed.
    keys, between_turns = escwatch.stdin_watch(lambda: agent.stoppable), display.keys
    display.keys = keys.start()
    outcome = None
    try:
        try:
            outcome = agent.run(attached.prompt or None, images=attached.images)
        finally:
            display.keys = between_turns
            display.typed += keys.stop()  # no Esc is sent after this; one sent just before is handled in here
            display.idle()
    except KeyboardInterrupt:  # an Esc pressed as the turn ended: it has ended anyway
        if outcome is None:
            raise
    if outcome.status == "done":
        console.print(f"[dim]{display.activity.line()}[/]")
    else:
        display.notice(outcome.detail + (f"\n{outcome.answer}" if outcome.answer else ""))
