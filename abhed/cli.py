"""The `abhed` command line. Thin: it builds a context and hands work to the modules that own it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from abhed import __version__, config, dispatch
from abhed.approval import MODES, Gate, Policy
from abhed.events import ActionEvent, ObservationEvent
from abhed.paths import PathPolicy
from abhed.session import SessionError, SessionStore
from abhed.tools import BY_NAME, TOOLS, definitions
from abhed.tools.base import ToolContext


def _settings() -> config.Settings:
    try:
        return config.load()
    except config.ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _fail(message: str) -> None:
    click.echo(f"abhed: {message}", err=True)
    sys.exit(2)


@click.group()
@click.version_option(__version__, prog_name="abhed")
def main() -> None:
    """Abhed: an offline coding agent for air-gapped networks."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the OpenAI `tools` array sent to the model.")
def tools(as_json: bool) -> None:
    """List the native tools."""
    if as_json:
        click.echo(json.dumps(definitions(), indent=2, ensure_ascii=False))
        return
    for tool in TOOLS:
        kind = "read-only" if tool.read_only else "changes files"
        click.echo(f"{tool.name:<8} {kind:<14} {tool.description.split('. ')[0]}.")


@main.command()
@click.argument("name")
@click.argument("arguments")
@click.option("--workspace", type=click.Path(file_okay=False, path_type=Path), default=".",
              help="The workspace root (default: the current directory).")
@click.option("--session", "session_id", help="Session id; calls sharing one share the read-set. New id: fresh.")
@click.option("--json", "as_json", is_flag=True, help='Print {"tool", "is_error", "content"} instead of the text.')
@click.option("--mode", type=click.Choice(MODES), help="Approval mode (default: approval.mode in the config, else ask).")
@click.option("--confirm", is_flag=True, help="You, the human running this, confirm it even if it is destructive.")
def tool(name: str, arguments: str, workspace: Path, session_id: str | None, as_json: bool, mode: str | None,
         confirm: bool) -> None:
    """Run one tool call exactly as the agent would. ARGUMENTS is a JSON object, or - to read it from stdin.

    Typing the call approves it, as answering the prompt would, except for a destructive command,
    which also needs --confirm; the mode and the operator's deny rules still apply.
    Exit status 0 whenever the tool ran (error observation or not); 2 for a bad invocation.
    """
    if arguments == "-":
        arguments = sys.stdin.read()
    if name not in BY_NAME:
        _fail(dispatch.unknown_tool(name).content)
    _, bad_json = dispatch.parse_arguments(arguments)
    if bad_json:
        _fail(f"ARGUMENTS is not valid JSON: {bad_json}.")
    settings = _settings()
    if not workspace.is_dir():
        _fail(f"The workspace {workspace.resolve()} is not a directory.")
    workspace = workspace.resolve()
    paths = PathPolicy.create(workspace, settings.allowed_roots)
    rules = settings.approval
    gate = Gate(Policy.create(mode or rules.mode, rules.allow, rules.deny, workspace), invoked_by_human=True,
                confirmed=confirm)
    try:
        with SessionStore(settings.home).use(session_id, workspace) as session:
            if session_id is None:
                click.echo(f"abhed: session {session.id} (pass --session {session.id} to continue it)", err=True)
            ctx = ToolContext(session, settings, paths, one_shot=True)
            try:
                result = dispatch.call(ctx, name, arguments, gate)
            finally:
                ctx.close()
    except SessionError as exc:
        _fail(str(exc))
    if as_json:
        click.echo(json.dumps({"tool": name, "is_error": result.is_error, "content": result.content},
                              ensure_ascii=False))
    else:
        click.echo(result.content)


@main.group()
def sessions() -> None:
    """Inspect stored sessions."""


@sessions.command("list")
@click.option("--json", "as_json", is_flag=True)
def sessions_list(as_json: bool) -> None:
    """List sessions, oldest first."""
    store = SessionStore(_settings().home)
    rows = []
    for session_id in store.ids():
        try:
            session = store.open(session_id)
        except SessionError as exc:
            click.echo(f"warning: {exc}", err=True)
            continue
        state, events = session.state, len(session.log.load().events)
        rows.append({"id": state.id, "created_at": state.created_at.isoformat(timespec="seconds"),
                     "events": events, "workspace": state.workspace})
    rows.sort(key=lambda row: row["created_at"])
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    elif not rows:
        click.echo(f"[no sessions in {store.root}]")
    else:
        for row in rows:
            click.echo(f"{row['id']:<28} {row['created_at']:<26} {row['events']:>6} events  {row['workspace']}")


def _preview(text: str, width: int = 100) -> str:
    first = text.split("\n", 1)[0]
    more = " ..." if "\n" in text or len(first) > width else ""
    return first[:width] + more


@sessions.command("show")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Print the events as JSON lines.")
@click.option("--full", is_flag=True, help="Print each observation's whole text, not its first line.")
def sessions_show(session_id: str, as_json: bool, full: bool) -> None:
    """Print the events of one session in order."""
    try:
        session = SessionStore(_settings().home).open(session_id)
    except SessionError as exc:
        _fail(str(exc))
    loaded = session.log.load()
    for problem in loaded.problems:
        click.echo(f"warning: {problem}", err=True)
    for event in loaded.events:
        if as_json:
            click.echo(event.model_dump_json())
            continue
        indent = "  " * (event.parent_id is not None)
        stamp = event.at.strftime("%Y-%m-%d %H:%M:%S")
        if isinstance(event, ActionEvent):
            args = json.dumps(event.input, ensure_ascii=False)
            click.echo(f"{indent}{stamp} [{event.agent_id}] {event.tool} {_preview(args)}")
        elif isinstance(event, ObservationEvent):
            status = "error" if event.is_error else "ok"
            body = event.content if full else _preview(event.content)
            click.echo(f"{indent}    -> {status} {event.duration_ms:.0f} ms: {body}")
