"""`abhed tools` and `abhed tool`: the tools the model is given, and one call run as the agent would.

Thin over agent/dispatch.py (the call, its approval and its checkpoint) and cli/mcp.py (the MCP
tools the operator admitted). `abhed tool read` loads the read tool and the session store, not the
sandbox, the model client, the terminal display or the checkpoint module (tests/test_startup.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from abhed.cli import base
from abhed.common.terminal import printable
from abhed.gate.modes import MODES

if TYPE_CHECKING:
    from abhed.session import checkpoint, config


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the OpenAI `tools` array sent to the model.")
@click.option("--check", is_flag=True, help="Start the MCP servers and compare their tools with the pins, as a "
              "session does (without it nothing is started and pinned tools are listed as pinned).")
@click.option("--workspace", type=click.Path(file_okay=False, path_type=Path), default=".",
              help="With --check: the workspace a stdio server's sandbox sees (default: the current directory).")
def tools(as_json: bool, check: bool, workspace: Path) -> None:
    """List the tools the model is given: the nine native ones, then the MCP tools the operator admitted.

    An MCP entry carries an `mcp` key (server, tool, status, and why when withheld); entries of type
    `function`, less that key, are what the model is sent. Withheld tools are listed with type `withheld`.
    """
    from abhed.cli.mcp import tool_entries
    from abhed.tools import all_tools, definitions
    from abhed.mcp.pins import pins_path
    settings = base.settings()
    mcp = tool_entries(settings, pins_path(), workspace.resolve(), check) if settings.mcp.servers else []
    if as_json:
        click.echo(json.dumps([*definitions(), *mcp], indent=2, ensure_ascii=False))
        return
    for tool in all_tools():
        kind = tool.traits.kind
        click.echo(f"{tool.name:<8} {kind:<14} {tool.description.split('. ')[0]}.")
    for entry in mcp:
        facts = entry["mcp"]
        if entry["type"] == "withheld":
            click.echo(printable(f"{entry['name']}  WITHHELD: {facts['why']}"))
        else:
            function = entry["function"]
            summary = (function["description"].split(". ")[0].splitlines() or [""])[0][:100]
            click.echo(printable(f"{function['name']}  {facts['status']}  {summary}"))


@click.command()
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
    Exit status 0 whenever the tool ran (error observation or not); 1 when the session store failed
    (the output says whether the call ran); 2 for a bad invocation.
    """
    from abhed.agent import dispatch
    from abhed.files.paths import PathPolicy
    from abhed.gate.approval import Gate, Policy
    from abhed.session import config, sitepolicy
    from abhed.session.events import head_token
    from abhed.session.store import SessionError, SessionStore
    from abhed.tools import BY_NAME
    from abhed.tools.base import ToolContext
    settings = base.settings()
    limits = settings.agent
    if arguments == "-":
        arguments = _stdin_arguments(limits.max_argument_bytes)
    if name not in BY_NAME and not (name.startswith("mcp__") and settings.mcp.servers):
        base.fail(dispatch.unknown_tool(name).content)
    parsed = dispatch.read_arguments(arguments, limits.max_argument_bytes, limits.max_argument_depth)
    if parsed.too_large or parsed.bad_json:
        what = "is refused" if parsed.too_large else "is not valid JSON"
        base.fail(f"ARGUMENTS {what}: {parsed.too_large or parsed.bad_json}.")
    if not workspace.is_dir():
        base.fail(f"The workspace {workspace.resolve()} is not a directory.")
    workspace = workspace.resolve()
    try:
        config.refuse_workspace_control(settings, workspace)
    except config.ConfigError as exc:
        base.fail(str(exc))
    refused = sitepolicy.mode_refused(settings)
    if mode is not None and refused is not None and refused(mode):
        base.fail(str(refused(mode)))
    paths = PathPolicy.create(workspace, settings.allowed_roots)
    checkpoints = _checkpoints(name, settings, workspace)
    gate = Gate(Policy.from_settings(settings, workspace, checkpoints=checkpoints is not None, mode=mode),
                invoked_by_human=True, confirmed=confirm)
    try:
        with SessionStore(settings.home).use(session_id, workspace, wait_s=limits.session_wait_s,
                                             origin="tool") as session:
            if session_id is None:
                click.echo(f"abhed: session {session.id} (pass --session {session.id} to continue it)", err=True)
            gateway = _mcp_for(name, settings, workspace)
            ctx = ToolContext(session, settings, paths, one_shot=True, extra=gateway,
                              checkpoints=checkpoints)
            try:
                result = dispatch.call(ctx, name, arguments, gate)
            finally:
                ctx.close()
                if gateway is not None:
                    gateway.close()
            head = session.log.head()  # while the session is still this process's
    except SessionError as exc:
        base.fail(str(exc))
    if result.metadata.get("error_kind") == dispatch.UNKNOWN_TOOL:  # an MCP tool not admitted: a bad invocation
        base.fail(result.content)
    if as_json:  # ensure_ascii: exact, and no control character or lone surrogate reaches the terminal raw
        click.echo(json.dumps({"tool": name, "is_error": result.is_error, "content": result.content}))
    else:
        click.echo(printable(result.content))
    click.echo(f"abhed: session {session.id} head {head_token(head)}", err=True)
    if result.metadata.get("store_error"):  # told beside the result, which says whether the call ran
        click.echo(printable(f"abhed: {result.metadata['store_error']}"), err=True)
        sys.exit(1)


def _checkpoints(name: str, settings: config.Settings, workspace: Path) -> checkpoint.Checkpoints | None:
    """The workspace's checkpoints for a call of `name` that may change it (dispatch snapshots only
    those: the tool declares `checkpoint`); None for a tool that only reads, which then does not load
    the checkpoint module."""
    from abhed.tools import native_traits
    traits = native_traits(name)
    if traits is None or not traits.checkpoint:
        return None
    from abhed.session import checkpoint
    try:
        return checkpoint.from_settings(settings, workspace)
    except checkpoint.CheckpointError as exc:  # the site's policy requires them, and they cannot be taken here
        base.fail(str(exc))


def _mcp_for(name: str, settings: config.Settings, workspace: Path):
    """The MCP gateway with just the server of `mcp__SERVER__TOOL` started, or None for a native tool."""
    if not name.startswith("mcp__"):
        return None
    from abhed.cli import launch
    from abhed.mcp.gateway import split_name
    server = (split_name(name) or ("", ""))[0]
    notices: list[str] = []
    try:
        return launch.mcp_gateway(settings, workspace, notices.append, only={server})
    except launch.LaunchError as exc:
        base.fail(str(exc))


def _stdin_arguments(limit: int) -> str:
    data = sys.stdin.buffer.read(limit + 1)  # one byte more than the limit is enough to know it is over
    if len(data) > limit:
        base.fail(f"ARGUMENTS on stdin is too large: over the limit of {limit:,} bytes for one call "
                  "(agent.max_argument_bytes). Split the work into smaller calls.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        base.fail(f"ARGUMENTS on stdin is not valid UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r}). "
                  "Send JSON text; escape other characters as \\uXXXX.")
