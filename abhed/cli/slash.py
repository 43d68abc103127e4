"""Slash commands of `abhed chat`: handled here, never sent to the model.

A line is a command when its first word is `/` and letters (`/mode auto`); `/etc/hosts is
wrong` is a message. An unknown command is refused with the list, so a typo never reaches the model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

from abhed.cli import diffview
from abhed.common.terminal import printable
from abhed.gate.approval import MODES
from abhed.session.events import ActionEvent, ObservationEvent
from abhed.session.store import SessionError, SessionStore
from abhed.session.storefail import StoreError

COMMAND = re.compile(r"/([a-z][a-z0-9_-]*)(?:\s+(.*))?", re.S)  # custom ones (usercommands) have - _ digits
HELP = {
    "help": "this list (never sent to the model)",
    "mode": f"show the approval mode, or set it: /mode {'|'.join(MODES)}",
    "plan": "show the plan",
    "todo": "show the todo list",
    "diff": "what this session changed: every edit and write, as diffs",
    "undo": "undo the last change (calls that changed nothing are passed over); /undo N: back to before "
            "checkpoint N; --force overwrites changes made outside the agent; --finish or --rollback closes an "
            "interrupted undo",
    "compact": "summarise the older turns now to free context",
    "clear": "start a new conversation in this session (the log keeps the old one)",
    "sessions": "the sessions of this workspace, newest first",
    "mcp": "the MCP servers of this session: admitted and withheld tools",
    "init": "ask the model to survey the repository and write a first AGENTS.md (/init improve: review it)",
    "model": "the models the endpoint serves; /model ID switches to one for this chat",
    "export": "write this session as markdown to a new file: /export [PATH] (default abhed-SESSION.md)",
    "exit": "end the session (Ctrl-D too)",
}
NAMES = tuple(f"/{name}" for name in HELP)
MAX_SESSIONS = 20


def parse(line: str) -> tuple[str, str] | None:
    """(command, argument) when the line is a slash command, else None."""
    match = COMMAND.fullmatch(line.strip())
    return (match.group(1), (match.group(2) or "").strip()) if match else None


@dataclass
class Slash:
    agent: Any  # the chat's Agent
    display: Any  # the chat's Chat display
    store: SessionStore
    custom: Any = None  # usercommands.Catalog: the prompt files typed as /name (None: none loaded)
    turn: Callable[[str], None] = lambda text: None  # runs a turn on a prompt, as a message does (chat._turn)

    def prompt_of(self, name: str, argument: str) -> str | None:
        """The prompt a custom command sends (usercommands.expand), None when `name` is no custom command."""
        command = self.custom.commands.get(name) if self.custom is not None else None
        if command is None:
            return None
        from abhed.cli.usercommands import expand
        self._say(f"[/{name}: the prompt from {command.source}]", "dim")
        return expand(command, argument)

    @property
    def console(self) -> Console:
        return self.display.console

    def run(self, name: str, argument: str) -> bool:
        """Carry out /name; False when the session should end."""
        handler: Callable[[str], bool | None] | None = getattr(self, f"do_{name}", None)
        if handler is None:
            mine = [f"/{n}" for n in self.custom.commands] if self.custom is not None else []
            self._say(f"Unknown command /{name}: nothing was sent to the model. Commands: {', '.join([*NAMES, *mine])} "
                      "(/help says what each does).", "yellow")
            return True
        try:
            return handler(argument) is not False
        except StoreError as exc:  # the event of a /mode, /compact, /clear or /undo note: not in the log
            self._say(f"Not recorded: {exc.message}. A /mode change was not made; the chat goes on.", "red")
            return True

    def _say(self, message: str, style: str = "") -> None:
        self.console.print(Text(printable(message), style=style))

    def do_help(self, _: str) -> None:
        for name, what in HELP.items():
            self._say(f"  /{name:<9} {what}")
        self._custom_help()
        self._say("  Enter sends; Alt-Enter (Esc then Enter) adds a line; a paste is one message; Up/Down and Ctrl-R search "
                  "the history (Enter takes the match into the editor, Enter again sends it); Tab completes commands and paths; "
                  "@ and letters pick a file to attach. "
                  "Esc or Ctrl-C stops a turn. At an approval prompt, Enter alone, Ctrl-D and Ctrl-C are a no.", "dim")

    def _custom_help(self) -> None:
        """The custom commands (usercommands), each with the file it comes from, and the files not taken."""
        if self.custom is None:
            return
        for command in self.custom.commands.values():
            lines = command.text.strip().splitlines()
            what = command.description or (lines[0][:60] if lines else "(an empty prompt)")
            self._say(f"  /{command.name:<9} {what} [{command.origin}: {command.source}]")
        for problem in self.custom.problems:
            self._say(f"  {problem}", "yellow")
        if not self.custom.commands:
            self._say("  (custom commands: put NAME.md prompt files in ~/.config/abhed/commands/; $ARGUMENTS is what "
                      "follows /NAME)", "dim")

    def do_mode(self, argument: str) -> None:
        gate = self.agent.gate
        if not argument:
            self._say(f"mode {gate.effective().mode} (choose one of {', '.join(MODES)}: /mode MODE)")
            return
        try:
            self.agent.set_mode(argument)
        except ValueError as exc:
            self._say(str(exc), "yellow")
            return
        self._say(f"mode {argument} for the rest of this session, and when it is resumed (destructive commands "
                  "still ask)")

    def do_plan(self, _: str) -> None:
        plan = self.agent.ctx.session.state.plan
        if plan is None:
            self._say("[no plan yet: the model makes one with the plan tool]", "dim")
        else:
            self.display.plan(plan)

    def do_todo(self, _: str) -> None:
        todos = self.agent.ctx.session.state.todos
        if todos:
            self.display.todos(todos)
        else:
            self._say("[the todo list is empty]", "dim")

    def do_diff(self, _: str) -> None:
        events = self.agent.ctx.session.log.load().events
        succeeded = {e.action_id for e in events if isinstance(e, ObservationEvent) and not e.is_error}
        changes = [e for e in events if isinstance(e, ActionEvent) and diffview.shown(e.tool)
                   and e.id in succeeded and isinstance(e.input, dict)]
        if not changes:
            self._say("[this session changed no file]", "dim")
            return
        for event in changes:
            args = _Args(event.input)
            self.console.print(Text(printable(f"{event.tool} {args.path}"), style="bold"))
            self.console.print(diffview.render(event.tool, args))
        files = {str(_Args(e.input).path) for e in changes}
        self._say(f"[{len(changes)} change{'s' * (len(changes) != 1)} to {len(files)} file"
                  f"{'s' * (len(files) != 1)} in this session]", "dim")

    def do_undo(self, argument: str) -> None:
        """abhed undo in the chat's own session: shows the plan, asks, tells the model what was undone."""
        from abhed.agent.dispatch import changes_of
        from abhed.session import checkpoint, undo
        words = argument.split()
        checkpoints = self.agent.ctx.checkpoints
        numbers = [w for w in words if w.isdigit()]
        if checkpoints is None:
            self._say("/undo: checkpoints are off (abhed doctor says why)", "yellow")
            return
        closing = [w for w in words if w in ("--finish", "--rollback")]
        if [w for w in words if not w.isdigit() and w not in ("--force", "--finish", "--rollback")] or \
                len(numbers) + len(closing) > 1:
            self._say("use /undo (the last call), /undo N (back to before checkpoint N), and --force to overwrite "
                      "changes made outside the agent; /undo --finish or /undo --rollback closes an interrupted "
                      "undo", "yellow")
            return

        def confirm(plan: str) -> bool:
            self.console.print(Text(printable(plan)))
            try:
                return self.console.input("Undo? \\[y/N] ").strip().lower() in ("y", "yes")
            except (EOFError, KeyboardInterrupt):  # a no, as at an approval prompt; the session goes on
                self._say("(no: nothing was undone)", "dim")
                return False
        tell = lambda note: self.agent.tell(note, "undo")  # noqa: E731
        changes = changes_of(self.agent.ctx)  # the sandbox's change set: no walk of the whole tree (Shadow.current)
        try:
            if closing:
                report = undo.finish(checkpoints, self.agent.ctx.session, rollback=closing[0] == "--rollback",
                                     force="--force" in words, confirm=confirm, tell=tell)
            elif not numbers:  # the latest change: calls that changed nothing (a test run) are passed over
                report = undo.undo_latest(checkpoints, self.agent.ctx.session, force="--force" in words,
                                          confirm=confirm, tell=tell, changes=changes)
            else:
                report = undo.undo(checkpoints, self.agent.ctx.session, int(numbers[0]),
                                   force="--force" in words, confirm=confirm, tell=tell, changes=changes)
        except checkpoint.CheckpointError as exc:
            report = str(exc)
        self.console.print(Text(printable(report)))

    def do_mcp(self, _: str) -> None:
        gateway = self.agent.ctx.extra
        lines = gateway.status() if gateway is not None else \
            ["no MCP servers configured ([mcp.servers.NAME] in the operator's config; abhed mcp review NAME)"]
        for line in lines:
            self.console.print(Text(printable(line)))

    def do_compact(self, _: str) -> None:
        if not self.agent.compact():
            self._say("[nothing to compact: the conversation has no older turns to summarise]", "dim")

    def do_clear(self, _: str) -> None:
        self.agent.clear()
        self._say("[new conversation: the model no longer sees the earlier turns; the session log keeps them]", "dim")

    def do_sessions(self, _: str) -> None:
        workspace = str(self.agent.ctx.paths.workspace)
        rows = []
        for session_id in self.store.ids():
            try:
                state = self.store.open(session_id).state
            except SessionError:
                continue
            if state.workspace == workspace:
                rows.append(state)
        rows.sort(key=lambda s: s.created_at, reverse=True)
        current = self.agent.ctx.session.id
        for state in rows[:MAX_SESSIONS]:
            mark = "*" if state.id == current else " "
            self._say(f"{mark} {state.id}  {state.created_at.isoformat(timespec='seconds')}")
        if len(rows) > MAX_SESSIONS:
            self._say(f"[{len(rows) - MAX_SESSIONS} older sessions not shown: abhed sessions list]", "dim")
        self._say("[* this session; continue another with: abhed chat --session ID]", "dim")

    def do_init(self, argument: str) -> None:
        from abhed.cli import initcmd
        prompt, refusal = initcmd.request(self.agent.ctx.paths.workspace, argument)
        if prompt is None:
            self._say(f"/init: {refusal}", "yellow")
            return
        self.turn(prompt)
        self.agent.reload_notes()  # the model reads the new AGENTS.md from the next message on

    def do_model(self, argument: str) -> None:
        from abhed.cli import modelswitch
        lines = modelswitch.switch(self.agent, argument, self.display) if argument else modelswitch.listing(self.agent)
        for line in lines:
            self._say(line)

    def do_export(self, argument: str) -> None:
        from abhed.cli import mdexport as markdown
        session, workspace = self.agent.ctx.session, self.agent.ctx.paths.workspace
        path = markdown.target(argument or f"abhed-{session.id}.md", workspace)
        text = markdown.render(session)
        try:
            markdown.write_new(path, text, workspace)
        except markdown.ExportError as exc:
            self._say(f"/export: {exc}", "yellow")
            return
        self._say(f"wrote {path} ({len(text.splitlines())} lines of markdown)")

    def do_exit(self, _: str) -> bool:
        return False

    do_quit = do_exit


class _Args:
    """A logged call's arguments as attributes, for diffview."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)
        self.path = values.get("path", "?")
