"""The interactive session of `abhed chat`: read a message (or a slash command), run a turn, repeat."""

from __future__ import annotations

from typing import Any

from abhed.cli import lineedit, slash
from abhed.cli.attachments import attach
from abhed.cli.display import Chat
from abhed.common.terminal import printable
from abhed.cli.launch import budget
from abhed.session.store import SessionStore


def chat_loop(agent: Any, display: Chat, unfinished: bool) -> None:
    console = display.console
    settings = agent.ctx.settings
    session = agent.ctx.session
    workspace = agent.ctx.paths.workspace
    console.print(f"[bold]abhed[/] session [cyan]{session.id}[/] in {workspace}")
    console.print(f"[dim]{agent.model.describe()}; mode {agent.gate.effective().mode}. /help lists commands; Ctrl-C "
                  "stops a turn, Ctrl-D or /exit ends the session.[/]")
    if session.state.todos:
        display.todos(session.state.todos)
    if unfinished:
        console.print("[yellow]The last run of this session was cut short: press Enter to let it continue.[/]")
    commands = slash.Slash(agent, display, SessionStore(settings.home))
    read = lineedit.reader(settings.home, workspace, slash.NAMES, lambda prompt: console.input(prompt))
    while True:
        try:
            text = read("> ").strip()
        except EOFError:
            console.print()
            return
        except KeyboardInterrupt:  # no turn to stop: the session goes on
            console.print("[dim](Ctrl-D or /exit ends the session)[/]")
            continue
        command = slash.parse(text)
        if command is not None:
            if not commands.run(*command):
                return
            continue
        if not text and not unfinished:
            continue
        agent.budget = budget(settings)  # the budgets are per prompt
        attached = attach(text, agent.ctx.vision)  # images and PDFs named by path (typed or dropped)
        for line in attached.lines:
            console.print(printable(line), style="dim", markup=False, soft_wrap=True)
        try:
            outcome = agent.run(attached.prompt or None, images=attached.images)
        finally:
            display.idle()
        unfinished = False
        if outcome.status == "done":
            console.print(f"[dim]{display.activity.line()}[/]")
        else:
            display.notice(outcome.detail + (f"\n{outcome.answer}" if outcome.answer else ""))
