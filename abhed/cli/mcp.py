"""`abhed mcp list | review NAME | remove NAME | test NAME`: the operator's side of the gateway.

`review` is the only way a tool reaches the model: it starts the server, shows every tool with its
full description and input schema and what the screening found, and pins those the operator
admits. Everything a server sent is shown through printable(): a description cannot redraw the
terminal to hide what it says.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from abhed.common.terminal import printable


def _setup(name: str | None = None) -> tuple[Any, Path]:
    from abhed.session import config
    from abhed.mcp import pins as pinning
    try:
        settings = config.load()
    except config.ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if name is not None and name not in settings.mcp.servers:
        known = ", ".join(settings.mcp.servers) or "none"
        _fail(f"No MCP server {name!r} is configured (configured: {known}). Add [mcp.servers.{name}] with command = "
              f"[...] or url = \"...\" to {config.config_path(dict(os.environ))}.")
    return settings, pinning.pins_path()


def _fail(message: str, status: int = 2) -> None:
    click.echo(f"abhed: {printable(message)}", err=True)
    sys.exit(status)


def _server(name: str, settings: Any, pins_file: Path, workspace: Path) -> Any:
    from abhed.session.config import ConfigError
    from abhed.mcp import pins as pinning
    from abhed.mcp.gateway import Server
    try:
        pinned = pinning.load(pins_file).get(name, {})
        declined = pinning.load_declined(pins_file).get(name, {})
    except ConfigError as exc:
        _fail(str(exc))
    return Server(name, settings.mcp.servers[name], pinned, settings, workspace, declined=declined)


def _workspace(value: Path) -> Path:
    if not value.is_dir():
        _fail(f"The workspace {value.resolve()} is not a directory.")
    return value.resolve()


_WORKSPACE = click.option("--workspace", type=click.Path(file_okay=False, path_type=Path), default=".",
                          help="The workspace a stdio server's sandbox sees (default: the current directory).")


def tool_entries(settings: Any, pins_file: Path, workspace: Path, check: bool) -> list[dict[str, Any]]:
    """`abhed tools --json`'s MCP entries, each with an `mcp` key: {server, tool, status, why?, hash?}.

    Without ``check`` nothing is started (a server is a program in a sandbox, or a site's service:
    seconds each): the pinned tools, as the model would get them if the server still lists them
    unchanged ("pinned"), and a server with no pins as withheld. With ``check`` every server is
    started and compared as at a session's start: "admitted", or "withheld" with the reason.
    """
    from abhed.session.config import ConfigError
    from abhed.mcp.gateway import Gateway, McpTool, full_name
    try:
        gateway = Gateway(settings, workspace, pins_file=pins_file)
    except ConfigError as exc:
        _fail(str(exc))
    entries: list[dict[str, Any]] = []

    def withheld(server: str, tool: str | None, why: str) -> None:
        entries.append({"type": "withheld", "name": full_name(server, tool or "*"),
                        "mcp": {"server": server, "tool": tool, "status": "withheld", "why": why}})

    def offered(tool: McpTool, status: str) -> None:
        entries.append({**tool.definition(), "mcp": {"server": tool.server.name, "tool": tool.pin.name,
                                                     "status": status, "hash": tool.pin.hash}})

    if not check:
        for name, server in gateway.servers.items():
            for pin in server.pinned.values():
                offered(McpTool(server, pin), "pinned")
            if not server.pinned and not server.declined:
                withheld(name, None, f"never reviewed: no tool of {name} reaches the model until abhed mcp review {name}")
        return entries
    try:
        gateway.start()
        for tool in gateway.tools:
            offered(tool, "admitted")
        for name in gateway.servers:
            if name in gateway.failed:
                withheld(name, None, f"the server is not available: {gateway.failed[name]}")
            prefix = full_name(name, "")
            for tool_name, why in sorted(gateway.withheld.items()):
                if tool_name.startswith(prefix):
                    withheld(name, tool_name[len(prefix):], why)
                    if why.startswith("declined"):
                        entries[-1]["mcp"]["status"] = "declined"
    finally:
        gateway.close()
    return entries


@click.group()
def mcp() -> None:
    """The reviewed MCP gateway: the site's MCP servers, and the tools the operator admitted."""


@mcp.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the servers and their pinned tools as JSON.")
def list_servers(as_json: bool) -> None:
    """The configured servers and the tools pinned for each (no server is started)."""
    from abhed.session.config import ConfigError
    from abhed.mcp import pins as pinning
    from abhed.mcp.gateway import full_name
    settings, pins_file = _setup()
    try:
        pinned, declined = pinning.load(pins_file), pinning.load_declined(pins_file)
    except ConfigError as exc:
        _fail(str(exc))
    rows = []
    for name, cfg in settings.mcp.servers.items():
        tools = pinned.get(name, {})
        rows.append({"server": name, "command": cfg.command, "url": cfg.url,
                     "tools": [full_name(name, t) for t in sorted(tools)],
                     "declined": [full_name(name, t) for t in sorted(declined.get(name, {}))]})
    if as_json:
        click.echo(json.dumps({"pins": str(pins_file), "servers": rows}, indent=1))
        return
    if not rows:
        click.echo("[no MCP servers configured: add [mcp.servers.NAME] with command = [...] or url = \"...\" to the "
                   "config file]")
        return
    for row, cfg in zip(rows, settings.mcp.servers.values()):
        where = f"url {cfg.url}" if cfg.url else "command " + " ".join(cfg.command or [])
        status = f"{len(row['tools'])} tool(s) admitted" if row["tools"] or row["declined"] else \
            "not reviewed: abhed mcp review " + row["server"]
        status += f", {len(row['declined'])} declined" if row["declined"] else ""
        click.echo(printable(f"{row['server']:<16} {status}; {where}"))
        for tool in row["tools"]:
            click.echo(printable(f"  {tool}"))
        for tool in row["declined"]:
            click.echo(printable(f"  {tool} (declined)"))
    click.echo(f"pins: {pins_file}")


@mcp.command()
@click.argument("name")
@_WORKSPACE
def test(name: str, workspace: Path) -> None:
    """Start server NAME, list its tools and compare them with the pins. Exit 0 when it works and every
    tool it lists is admitted or was declined at review; 1 otherwise (each problem said)."""
    from abhed.mcp.client import McpError
    from abhed.mcp.gateway import full_name
    settings, pins_file = _setup(name)
    server = _server(name, settings, pins_file, _workspace(workspace))
    try:
        comparison = server.check()
        info = server.connection.info
    except McpError as exc:
        _fail(exc.message, 1)
    finally:
        server.close()
    click.echo(printable(f"{name}: {server.describe()}; server {info.name} {info.version}, protocol "
                         f"{info.protocol_version}"))
    for tool in sorted(comparison.admitted):
        click.echo(printable(f"  admitted  {full_name(name, tool)}"))
    for tool, why in sorted(comparison.withheld.items()):
        click.echo(printable(f"  WITHHELD  {full_name(name, tool)}: {why}"))
    for tool, why in sorted(comparison.declined.items()):
        click.echo(printable(f"  declined  {full_name(name, tool)}: {why}"))
    for tool in comparison.gone:
        click.echo(printable(f"  gone      {full_name(name, tool)}: pinned, but the server no longer lists it"))
    for refusal in server.refusals:  # what it tried to reach while starting, beyond allow_hosts
        click.echo(printable(f"  network   {refusal}"))
    if comparison.withheld:
        click.echo(f"Review the withheld tools: abhed mcp review {name}")
    sys.exit(1 if comparison.withheld else 0)


@mcp.command()
@click.argument("name")
@click.option("--yes", is_flag=True, help="Admit every tool without asking (scripted set-up); tools the screening "
              "flagged still need --allow-flagged.")
@click.option("--allow-flagged", is_flag=True, help="With --yes: admit flagged tools too, knowingly.")
@click.option("--reconsider", is_flag=True, help="Ask again about the tools declined at an earlier review.")
@_WORKSPACE
def review(name: str, yes: bool, allow_flagged: bool, reconsider: bool, workspace: Path) -> None:
    """Start server NAME, show each tool in full with what the screening found, and pin those admitted.

    Only pinned tools reach the model, as pinned: a tool that changes afterwards is withheld until
    reviewed again. Tools not admitted now lose their pins. A tool declined (answered no) is recorded
    as declined: it stays withheld, is not asked about again until its definition changes (or
    --reconsider), and is no longer named at every session start. Exit 0 when no tool is left
    undecided (every one admitted or declined); 1 when one could not be used or was left unadmitted
    by --yes (flagged)."""
    from abhed.session.config import ConfigError
    from abhed.mcp import pins as pinning
    from abhed.mcp.client import McpError
    from abhed.mcp.gateway import full_name
    from abhed.mcp.screen import findings
    settings, pins_file = _setup(name)
    server = _server(name, settings, pins_file, _workspace(workspace))
    try:
        comparison = server.check()
    except McpError as exc:
        _fail(exc.message, 1)
    finally:
        server.close()
    click.echo(printable(f"{name}: {server.describe()}; {len(comparison.live)} tool(s)"))
    admitted: dict[str, pinning.Pin] = {}
    refused: dict[str, str] = {}  # not admitted, and not decided: exit 1
    declined: dict[str, str] = {}  # tool -> hash: the operator's no, recorded
    for tool, why in comparison.withheld.items():
        if tool not in comparison.live:
            refused[tool] = why  # unusable whatever the operator says
    for tool, live in sorted(comparison.live.items()):
        if tool in comparison.admitted:  # exactly what was admitted before: kept, not asked again
            admitted[tool] = comparison.admitted[tool]
            click.echo(printable(f"== {full_name(name, tool)} (unchanged since review: kept)"))
            continue
        if tool in comparison.declined and not reconsider:  # declined before, unchanged: the no stands
            declined[tool] = server.declined[tool]
            click.echo(printable(f"== {full_name(name, tool)} (declined at an earlier review, unchanged since: still "
                                 f"declined; abhed mcp review {name} --reconsider asks again)"))
            continue
        pin = pinning.Pin.of(tool, live["description"], live["inputSchema"], live["annotations"])
        flags = findings(tool, live["description"], live["inputSchema"])
        before = server.pinned.get(tool)
        state = "CHANGED since review" if before is not None else \
            "declined before: asked again" if tool in comparison.declined else \
            "CHANGED since it was declined: new again" if tool in server.declined else "new"
        click.echo("")
        click.echo(printable(f"== {full_name(name, tool)} ({state})"))
        click.echo(printable(live["description"] or "(no description)"))
        click.echo(printable("input schema: " + json.dumps(live["inputSchema"], indent=1, ensure_ascii=False)))
        if before is not None:
            if before.description != live["description"]:
                click.echo(printable(f"pinned description was: {before.description}"))
            if before.schema != live["inputSchema"]:
                click.echo(printable("pinned schema was: " + json.dumps(before.schema, ensure_ascii=False)))
        for flag in flags:
            click.echo(printable(f"  ! {flag}"))
        if yes:
            take = not flags or allow_flagged
            reason = "the screening flagged it (admit it with --allow-flagged, knowingly)"
        else:
            question = "Admit it anyway (it was flagged)?" if flags else "Admit it?"
            take = click.confirm(question, default=False)
            reason = "declined by the operator"
        if take:
            admitted[tool] = pin
        elif yes:
            refused[tool] = reason
        else:
            declined[tool] = pin.hash
    try:
        pinning.save_server(pins_file, name, admitted, declined)
    except (ConfigError, OSError) as exc:
        _fail(f"Could not save the pins to {pins_file}: {exc}")
    click.echo("")
    click.echo(printable(f"Admitted {len(admitted)} tool(s) of {name}: "
                         f"{', '.join(full_name(name, t) for t in sorted(admitted)) or 'none'}."))
    for tool, why in sorted(refused.items()):
        click.echo(printable(f"Not admitted: {full_name(name, tool)}: {why}."))
    for tool in sorted(declined):
        click.echo(printable(f"Not admitted: {full_name(name, tool)}: declined by the operator."))
    if declined:
        click.echo(printable(f"The {len(declined)} declined tool(s) are recorded as such: withheld, and no longer "
                             "named at session start, until their definition changes; abhed mcp review "
                             f"{name} --reconsider asks about them again."))
    click.echo(f"Pins saved in {pins_file}. Allow calls without asking with approval.allow = [\"mcp__{name}__*\"] "
               "or per tool.")
    sys.exit(1 if refused else 0)


@mcp.command()
@click.argument("name")
def remove(name: str) -> None:
    """Forget the pins of server NAME: none of its tools reaches the model until reviewed again.

    The [mcp.servers.NAME] entry stays in the config file (Abhed does not edit it); delete it there
    to stop configuring the server."""
    from abhed.session.config import ConfigError
    from abhed.mcp import pins as pinning
    from abhed.session import config
    try:
        settings = config.load()
        pinned = pinning.load(pinning.pins_path())
    except ConfigError as exc:
        _fail(str(exc))
    pins_file = pinning.pins_path()
    if name not in pinned:
        _fail(f"No tools of an MCP server {name!r} are pinned in {pins_file}; pinned servers: "
              f"{', '.join(pinned) or 'none'}.")
    try:
        pinning.save_server(pins_file, name, None)
    except (ConfigError, OSError) as exc:
        _fail(f"Could not save the pins to {pins_file}: {exc}")
    still = " Its [mcp.servers." + name + "] entry is still in the config file: delete it there to stop starting it." \
        if name in settings.mcp.servers else ""
    click.echo(printable(f"Removed the {len(pinned[name])} pinned tool(s) of {name} from {pins_file}.{still}"))
