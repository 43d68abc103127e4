"""What the human sees while an agent works. The loop reports through agent/display.py's Display;
the terminal implementations here decide how it looks.

Progress: `abhed run`, one plain line per step on stderr, so
stdout holds only the final answer. Chat: `abhed chat` and `abhed demo`, rich output on the
terminal: the reply streamed as it is written, each tool call on a line, the todo list redrawn as
a panel whenever it changes, approval prompts.

A subagent reports on `display.subagent(...)`: its tool calls and notices only, indented and
labelled with its id, one whole line at a time, since subagents run side by side in threads.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.panel import Panel
from rich.text import Text

from abhed.cli import approvals, diffview, escwatch, pager
from abhed.cli.activity import Activity
from abhed.cli.replytext import MarkdownStream
from abhed.gate.approval import Answer, Gate, Verdict
from abhed.model.wire import ToolCall
from abhed.session.hashing import Hashing
from abhed.session.store import Plan, TodoItem
from abhed.common.terminal import printable
from abhed.agent.display import Display
from abhed.tools.base import ToolContext, ToolResult
from abhed.tools.plan import render_plan
from abhed.tools.todo import render_todos

PREVIEW_KEYS = ("description", "pattern", "path", "command", "goal")
PREVIEW_PARSE_LIMIT = 1024 * 1024


def preview(call: ToolCall, width: int = 100) -> str:
    """A call in one short line: its most telling argument, safe to print (terminal.printable)."""
    return printable(_preview(call, width))


def _preview(call: ToolCall, width: int) -> str:
    if len(call.arguments) > PREVIEW_PARSE_LIMIT:  # dispatch refuses it; no need to parse megabytes to say so
        return call.arguments[:width]
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deep to parse (dispatch says so)
        return call.arguments[:width]
    if not isinstance(args, dict):
        return str(args)[:width]
    if call.name == "todo":
        items = args.get("items") or []
        shown = [f"+ {i.get('content', '')}" if not i.get("id") else f"{i['id']} {i.get('status') or 'reworded'}"
                 for i in items if isinstance(i, dict)]
        shown += [f"- {item_id}" for item_id in args.get("remove") or []]
        return ", ".join(shown)[:width] or "(show the list)"
    preview = next((str(args[k]) for k in PREVIEW_KEYS if isinstance(args.get(k), str)), "")
    if call.name == "grep" and args.get("path"):
        preview += f"  in {args['path']}"
    return preview.replace("\n", " ")[:width]


def checkpoint_note(result: ToolResult) -> str | None:
    """The line under a checkpointed call in the chat: its number and how to take it back."""
    facts = result.metadata.get("checkpoint")
    if not isinstance(facts, dict):
        return None
    missed = f"; {facts['not_covered']} files not covered" if facts.get("not_covered") else ""
    failed = "; the snapshot after it failed" if facts.get("after_error") else ""
    first = f"; {facts['first']}" if facts.get("first") else ""  # why this call took long, once
    return f"checkpoint {facts.get('number')}{missed}{failed} (/undo takes this call back){first}"


def first_line(text: str, width: int = 110) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= width else line[: width - 3] + "..."


def outcome(call: ToolCall, result: ToolResult, width: int = 110) -> str:
    """A result in one short line: the facts for a read or a search, else its first line; safe to print."""
    return printable(_outcome(call, result, width))


def _outcome(call: ToolCall, result: ToolResult, width: int) -> str:
    facts = result.metadata
    if not result.is_error and call.name == "read" and "lines_shown" in facts:
        return f"{facts['lines_shown']} of {facts.get('total_lines', '?')} lines"
    if not result.is_error and call.name == "glob" and "matches" in facts:
        return f"{facts['matches']} file{'s' * (facts['matches'] != 1)} matched"
    if call.name == "bash" and "exit_code" in facts:  # the end of the output says how it went
        lines = [line for line in result.content.strip().split("\n") if line and not line.startswith("[")]
        status = "timed out" if facts.get("timed_out") else f"exit {facts['exit_code']}"
        return f"{status}: {lines[-1] if lines else '(no output)'}"[:width]
    return first_line(result.content, width)


HEAD_LINES = TAIL_LINES = 3


def collapsed(content: str) -> str:
    """A bash result's output, its first and last lines with the middle counted; printable."""
    lines = [line for line in content.rstrip("\n").split("\n") if not (line.startswith("[") and line.endswith("]"))]
    if len(lines) <= HEAD_LINES + TAIL_LINES + 1:
        return printable("\n".join(lines))
    hidden = len(lines) - HEAD_LINES - TAIL_LINES
    return printable("\n".join([*lines[:HEAD_LINES], f"... {hidden} more lines ...", *lines[-TAIL_LINES:]]))


def call_arguments(call: ToolCall) -> Any:
    """The call's arguments as attributes (for diffview), or None when they are not a JSON object."""
    if len(call.arguments) > PREVIEW_PARSE_LIMIT:
        return None
    try:
        args = json.loads(call.arguments)
    except (ValueError, RecursionError):
        return None
    return SimpleNamespace(**{k: v for k, v in args.items() if isinstance(k, str)}) if isinstance(args, dict) else None


def _tag(agent_id: str, label: str) -> str:
    label = printable(" ".join(label.split()))
    return f"[{agent_id} {label[:40] + '...' if len(label) > 40 else label}]"


HASHING_EVERY_S = 5.0  # `abhed run`: a long snapshot's progress, a line this often at most


class Progress(Display):
    """One line per step on stderr; the text of intermediate replies, never the final answer.
    On a terminal, while a call runs, the chat's status line beneath (elapsed time, the command's
    last output lines); it leaves nothing behind, so a log of the screen holds the same lines."""

    def __init__(self, out: TextIO | None = None, lock: threading.Lock | None = None) -> None:
        self.out = out or sys.stderr
        self._text: list[str] = []
        self._hashing_next = 0.0  # when the next line of a long snapshot's progress may be printed
        self._lock = lock or threading.Lock()  # one line at a time: subagents write from their threads
        self.activity = Activity(Console(file=self.out, highlight=False)) if _is_terminal(self.out) else None

    def _line(self, text: str) -> None:
        with self._lock:
            if self.activity is not None:  # above the status line, if one is shown
                self.activity.console.print(Text(printable(text)), soft_wrap=True)
                return
            self.out.write(printable(text) + "\n")
            self.out.flush()

    def subagent(self, agent_id: str, label: str) -> Display:
        return _ProgressOf(self, agent_id, label)

    def text(self, delta: str) -> None:
        self._text.append(delta)

    def reply_done(self, final: bool) -> None:
        if final and self.activity is not None:  # the run is over (an interrupt too): no status line left
            self.activity.stop()
        said = "".join(self._text).strip()
        self._text = []
        if said and not final:
            self._line("  " + said.replace("\n", "\n  "))

    def tool_started(self, call: ToolCall) -> None:
        self._line(f"-> {call.name} {preview(call)}")
        if self.activity is not None:
            self.activity.command_ended()
            self.activity.start(f"running {call.name}")

    def command_output(self, text: str) -> None:
        if self.activity is not None:
            self.activity.command_output(text)

    def tool_finished(self, call: ToolCall, result: ToolResult) -> None:
        if self.activity is not None:  # the calls of one reply all ended: the first result is told
            self.activity.stop()
            self.activity.command_ended()
        status = "error" if result.is_error else "ok"
        self._line(f"   {status}: {outcome(call, result)}")
        if result.is_error:
            from abhed.cli import errorview
            for line in errorview.rest(result.content, first_line(result.content)):
                self._line(f"          {line}")

    def todos(self, items: list[TodoItem]) -> None:
        self._line("   " + render_todos(items).replace("\n", "\n   "))

    def plan(self, plan: Plan) -> None:
        self._line("   " + render_plan(plan).replace("\n", "\n   "))

    def notice(self, message: str) -> None:
        self._line(f"abhed: {message}")

    def hashing(self, progress: Hashing) -> None:
        """On a terminal only (a log keeps the call's own note): a line every few seconds."""
        now = time.monotonic()
        if progress.finished or now < self._hashing_next or not _is_terminal(self.out):
            return
        self._hashing_next = now + HASHING_EVERY_S
        self._line(f"   {progress.words()}")


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class _ProgressOf(Display):
    """A subagent's steps in `abhed run`'s output, indented under the task call that started it."""

    def __init__(self, parent: Progress, agent_id: str, label: str) -> None:
        self.parent, self.tag = parent, _tag(agent_id, label)
        self.indent = "   " * agent_id.count(".")

    def tool_started(self, call: ToolCall) -> None:
        self.parent._line(f"{self.indent}{self.tag} -> {call.name} {preview(call)}")

    def tool_finished(self, call: ToolCall, result: ToolResult) -> None:
        status = "error" if result.is_error else "ok"
        self.parent._line(f"{self.indent}{self.tag}    {status}: {outcome(call, result)}")
        if result.is_error:
            from abhed.cli import errorview
            for line in errorview.rest(result.content, first_line(result.content)):
                self.parent._line(f"{self.indent}          {line}")

    def notice(self, message: str) -> None:
        self.parent._line(f"{self.indent}{self.tag} abhed: {message}")

    def subagent(self, agent_id: str, label: str) -> Display:
        return _ProgressOf(self.parent, agent_id, label)


STYLES = {"pending": ("[ ]", "white"), "in_progress": ("[>]", "bold yellow"), "done": ("[x]", "green")}


class Chat(Display):
    """Rich terminal output for a person watching."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self._thinking = False
        self.gate: Gate | None = None  # the session's gate: the rules a choice would add are checked on it
        self.save_rule: Callable[[str], str] | None = None  # set where the operator allows saving rules
        self.reply = MarkdownStream(self.console)
        self.activity = Activity(self.console)
        self.activity.draft = lambda: self.reply.pending  # shown raw until its block is complete
        self.keys: Any = escwatch.Watch(None)  # a turn sets a watching one (cli/chat.py): keys held, Esc read
        self._running = "running"  # what the status line says while the last call started runs
        self.tool_ctx: ToolContext | None = None  # the session's files, read for the diff of an edit or write
        self._planned: dict[str, Any] = {}  # call id -> the diff worked out as it started (diffview.file_diff)
        self.typed = ""  # keys typed during a turn, for the next prompt (escwatch.next_input)

    def waiting(self) -> None:
        self.activity.new_reply()
        self.activity.start("thinking")

    def usage(self, tokens_in: int, tokens_out: int, context_used: int, context_max: int) -> None:
        self.activity.count(tokens_in, tokens_out, context_used, context_max)

    def hashing(self, progress: Hashing) -> None:
        """On the status line, beside the running call; started again if an approval prompt stopped it."""
        if progress.finished:
            self.activity.detail("")
            return
        self.activity.start(self._running)
        self.activity.detail(progress.words())

    def idle(self) -> None:
        """The turn is over: no spinner while the human types."""
        self.activity.stop()
        self._planned.clear()  # a call the turn never finished (Ctrl-C) leaves no diff behind

    def attach(self, gate: Gate, save_rule: Callable[[str], str] | None = None,
               tool_ctx: ToolContext | None = None) -> None:
        self.gate, self.save_rule, self.tool_ctx = gate, save_rule, tool_ctx

    def _end_stream(self) -> None:
        self.reply.flush()
        if self._thinking:
            self.console.file.write("\n")
            self.console.file.flush()
        self._thinking = False

    def reasoning(self, delta: str) -> None:
        self.activity.stop()  # the thoughts stream in place of the spinner
        if not self._thinking:
            self.console.print("[dim italic]thinking:[/] ", end="")
            self._thinking = True
        self.console.print(Text(printable(delta), style="dim italic"), end="")

    def text(self, delta: str) -> None:
        if self._thinking:
            self._end_stream()
        self.activity.start("writing")
        self.activity.wrote(len(delta))
        self.reply.feed(delta)

    def reply_done(self, final: bool) -> None:
        self._end_stream()

    def tool_started(self, call: ToolCall) -> None:
        self._end_stream()
        self._running = f"running {call.name}"
        self.activity.command_ended()  # an earlier command's lines
        self.activity.start(self._running)
        width = max(20, self.console.width - len(call.name) - 4)
        self.console.print(f"[cyan]  {escape(call.name)}[/] [dim]{escape(preview(call, width))}[/]")
        if diffview.shown(call.name) and self.tool_ctx is not None:  # the file before the call changes it
            self._planned[call.id] = diffview.file_diff(call.name, call_arguments(call), self.tool_ctx)

    def command_output(self, text: str) -> None:
        self.activity.command_output(text)

    def tool_finished(self, call: ToolCall, result: ToolResult) -> None:
        self.activity.command_ended()  # its output is summed up below
        mark, style = ("x", "red") if result.is_error else ("ok", "green")
        width = max(20, self.console.width - 8)
        self.console.print(f"    [{style}]{mark}[/] [dim]{escape(outcome(call, result, width))}[/]")
        if result.is_error:
            self._error_rest(result, width)
        note = checkpoint_note(result)
        if note:
            self.console.print(f"    [dim]{escape(note)}[/]")
        if result.is_error:
            self._planned.pop(call.id, None)
            return
        if call.name == "bash" and "exit_code" in result.metadata:
            shown = collapsed(result.content)
            if shown:
                self.console.print(Padding(Text(shown, style="dim"), (0, 0, 0, 6)))
        elif diffview.shown(call.name):
            change, diff = self._planned.pop(call.id, (None, None))
            args = call_arguments(call)
            if diff is not None:  # the file's own diff; the call's arguments where it could not be worked out
                self.console.print(Padding(diffview.render_file(None, diff, max_lines=20), (0, 0, 0, 6)))
            elif args is not None:
                self.console.print(Padding(diffview.render(call.name, args, max_lines=20), (0, 0, 0, 6)))

    def _error_rest(self, result: ToolResult, width: int) -> None:
        """The lines of the error after the first (errorview: whole, bounded, printable)."""
        from abhed.cli import errorview
        lines = errorview.rest(result.content, first_line(result.content, width))
        if lines:
            self.console.print(Padding(Text("\n".join(lines), style="red dim"), (0, 0, 0, 6)))

    def todos(self, items: list[TodoItem]) -> None:
        body = Text()
        for number, item in enumerate(items):
            mark, style = STYLES[item.status]
            body.append(("\n" if number else "") + printable(f"{mark} {item.id} {item.content}"), style=style)
        done = sum(item.status == "done" for item in items)
        self.console.print(Panel(body or Text("(empty)"), title=f"todos {done}/{len(items)}", title_align="left",
                                 expand=False, border_style="blue"))

    def plan(self, plan: Plan) -> None:
        self.console.print(Panel(Text(printable(render_plan(plan))), title="plan", title_align="left", expand=False,
                                 border_style="blue"))

    def notice(self, message: str) -> None:
        self._end_stream()
        self.console.print(f"[yellow]abhed:[/] {escape(printable(message))}")

    def subagent(self, agent_id: str, label: str) -> Display:
        return _ChatOf(self.console, agent_id, label)

    def ask(self, tool: str, args: Any, verdict: Verdict) -> Answer:
        """The approval prompt: what the call does, in the model's words and literally, and why it asks."""
        self.activity.stop()
        self._end_stream()
        lines = Text()
        description = getattr(args, "description", None)
        if description:
            lines.append(f"{printable(description)}\n", style="bold")
        literal = getattr(args, "command", None) or getattr(args, "path", None) or ""
        if literal:  # whole and literal: a `# \x1b[1A...` tail cannot redraw the line to hide what runs
            lines.append(f"{tool}: {printable(str(literal))}\n")
        change, diff = diffview.file_diff(tool, args, self.tool_ctx)
        longer = diffview.line_count(diff) > diffview.MAX_LINES
        if diff is not None or change is not None:  # the file's diff, as the tool would change it
            lines.append_text(diffview.render_file(change, diff, more=f": {approvals.PAGE} at the question shows "
                                                                     "the whole diff"))
            lines.append("\n")
        elif diffview.shown(tool):
            lines.append_text(diffview.render(tool, args))
            lines.append("\n")
        lines.append(f"why asked: {printable(verdict.reason)}", style="yellow")
        title = "DESTRUCTIVE - confirm" if verdict.destructive else f"approve {tool}?"
        self.console.print(Panel(lines, title=title, title_align="left", expand=False,
                                 border_style="red" if verdict.destructive else "yellow"))
        policy = self.gate.effective() if self.gate is not None else None  # None: no session, no rules to grant
        options = approvals.choices(tool, args, verdict, policy, self.save_rule is not None,
                                    diffview.line_count(diff) if longer else 0)
        answer = approvals.ask(options, self._read, self._say, self.save_rule or str,
                               lambda: pager.page(diffview.render_file(change, diff, max_lines=None), self.console,
                                                  self._read))
        if answer.approved:  # the call runs now: its status line, elapsed time and output (issue 36)
            self.activity.start(self._running)
        return answer

    def _read(self, prompt: str) -> str:
        with self.keys.echoed():  # the answer is typed as a line: shown, and Backspace erases
            return self.console.input(escape(prompt))

    def _say(self, line: str) -> None:
        self.console.print(Text(printable(line), style="dim"))


class _ChatOf(Display):
    """A subagent's steps in the chat, dimmed and indented under the task call that started it.
    Rich prints each line whole under its console lock, so threads do not mix their lines."""

    def __init__(self, console: Console, agent_id: str, label: str) -> None:
        self.console, self.agent_id, self.tag = console, agent_id, _tag(agent_id, label)
        self.indent = "  " * (agent_id.count(".") + 1)

    def tool_started(self, call: ToolCall) -> None:
        width = max(20, self.console.width - len(self.indent) - len(self.tag) - len(call.name) - 4)
        self.console.print(f"{self.indent}[dim]{escape(self.tag)}[/] [cyan]{escape(call.name)}[/] "
                           f"[dim]{escape(preview(call, width))}[/]")

    def tool_finished(self, call: ToolCall, result: ToolResult) -> None:
        mark, style = ("x", "red") if result.is_error else ("ok", "green")
        width = max(20, self.console.width - len(self.indent) - len(self.tag) - 8)
        self.console.print(f"{self.indent}[dim]{escape(self.tag)}[/]   [{style}]{mark}[/] "
                           f"[dim]{escape(outcome(call, result, width))}[/]")
        if result.is_error:
            from abhed.cli import errorview
            lines = errorview.rest(result.content, first_line(result.content, width))
            if lines:
                self.console.print(Padding(Text("\n".join(lines), style="red dim"), (0, 0, 0, len(self.indent) + 6)))
        note = checkpoint_note(result)
        if note:
            self.console.print(f"{self.indent}[dim]{escape(self.tag)}   {escape(note)}[/]")

    def notice(self, message: str) -> None:
        self.console.print(f"{self.indent}[dim]{escape(printable(self.tag))}[/] [yellow]abhed:[/] "
                           f"{escape(printable(message))}")

    def subagent(self, agent_id: str, label: str) -> Display:
        return _ChatOf(self.console, agent_id, label)
