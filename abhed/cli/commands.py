"""The `abhed` command line. Thin: it builds a context and hands work to the modules that own it.

Each command imports what it needs inside itself, so that `abhed --version` loads click and this
module alone, `abhed tool read` the read tool but not the sandbox, the model client or the
terminal display, and so on (start-up, issue 18; tests/test_startup.py keeps it so). Import here
at the top only what every command needs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from abhed import __version__
from abhed.cli import startup
from abhed.common import formats
from abhed.common.terminal import printable
from abhed.gate.modes import MODES

startup.begin()  # until an agent session is ready (launch.agent_in_session), collect garbage rarely

if TYPE_CHECKING:
    from abhed.session import checkpoint, config
    from abhed.session.events import AnyEvent
    from abhed.session.store import Session


def _open_session(session_id: str) -> Session:
    """The stored session `session_id`, or exit with the store's explanation."""
    from abhed.session.store import SessionError, SessionStore
    try:
        return SessionStore(_settings().home).open(session_id)
    except SessionError as exc:
        _fail(str(exc))


def _settings() -> config.Settings:
    from abhed.session import config
    try:
        return config.load()
    except config.ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _fail(message: str) -> None:
    click.echo(f"abhed: {printable(message)}", err=True)
    sys.exit(2)


@click.group(invoke_without_command=True)
@click.version_option(__version__, prog_name="abhed")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Abhed: an offline coding agent for air-gapped networks. Without a command: `abhed chat`."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(chat)


@main.command()
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
    settings = _settings()
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
    Exit status 0 whenever the tool ran (error observation or not); 1 when the session store failed
    (the output says whether the call ran); 2 for a bad invocation.
    """
    from abhed.agent import dispatch
    from abhed.files.paths import PathPolicy
    from abhed.gate.approval import Gate, Policy
    from abhed.session import config
    from abhed.session.events import head_token
    from abhed.session.store import SessionError, SessionStore
    from abhed.tools import BY_NAME
    from abhed.tools.base import ToolContext
    settings = _settings()
    limits = settings.agent
    if arguments == "-":
        arguments = _stdin_arguments(limits.max_argument_bytes)
    if name not in BY_NAME and not (name.startswith("mcp__") and settings.mcp.servers):
        _fail(dispatch.unknown_tool(name).content)
    parsed = dispatch.read_arguments(arguments, limits.max_argument_bytes, limits.max_argument_depth)
    if parsed.too_large or parsed.bad_json:
        what = "is refused" if parsed.too_large else "is not valid JSON"
        _fail(f"ARGUMENTS {what}: {parsed.too_large or parsed.bad_json}.")
    if not workspace.is_dir():
        _fail(f"The workspace {workspace.resolve()} is not a directory.")
    workspace = workspace.resolve()
    try:
        config.refuse_workspace_control(settings, workspace)
    except config.ConfigError as exc:
        _fail(str(exc))
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
        _fail(str(exc))
    if result.metadata.get("error_kind") == dispatch.UNKNOWN_TOOL:  # an MCP tool not admitted: a bad invocation
        _fail(result.content)
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
    return checkpoint.from_settings(settings, workspace)


def _mcp_for(name: str, settings: config.Settings, workspace: Path):  # type: ignore[no-untyped-def]
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
        _fail(str(exc))


def _stdin_arguments(limit: int) -> str:
    data = sys.stdin.buffer.read(limit + 1)  # one byte more than the limit is enough to know it is over
    if len(data) > limit:
        _fail(f"ARGUMENTS on stdin is too large: over the limit of {limit:,} bytes for one call "
              "(agent.max_argument_bytes). Split the work into smaller calls.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        _fail(f"ARGUMENTS on stdin is not valid UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r}). "
              "Send JSON text; escape other characters as \\uXXXX.")
        raise


def _mcp_group() -> None:
    from abhed.cli.mcp import mcp
    main.add_command(mcp)


_mcp_group()


@main.group("config")
def config_group() -> None:
    """The operator's settings: where the file is, what is in effect and why, an example file."""


@config_group.command("path")
def config_path() -> None:
    """Print the config file's path (ABHED_CONFIG, else ~/.config/abhed/config.toml)."""
    from abhed.session import config
    path = config.config_path(dict(os.environ))
    if path is None:
        click.echo("[no config file: ABHED_CONFIG is set empty; the defaults and ABHED_* variables apply]", err=True)
        return
    click.echo(printable(str(path)))
    if not path.exists():
        click.echo(printable(f"[no file at {path}: the defaults and ABHED_* variables apply; `abhed config init` "
                             "writes a commented example there]"), err=True)


@config_group.command("show")
def config_show() -> None:
    """Print every setting in effect and where it came from: default, the file, or a variable."""
    from abhed.session import config
    settings, where = _settings(), config.sources()
    for key, value in _flat(settings.model_dump(mode="json")):
        click.echo(printable(f"{key} = {json.dumps(value)}  # {where.get(key, 'default')}"))


def _flat(tree: dict, prefix: str = "") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for key, value in tree.items():
        out += _flat(value, f"{prefix}{key}.") if isinstance(value, dict) else [(prefix + key, value)]
    return out


@config_group.command("init")
def config_init() -> None:
    """Write a commented example config file (every setting at its default) where Abhed reads it."""
    from abhed.session import config
    path = config.config_path(dict(os.environ))
    if path is None:
        _fail("ABHED_CONFIG is set empty (no config file): set it to the path to write, or unset it for "
              "~/.config/abhed/config.toml.")
    if path.exists():
        _fail(f"{path} already exists; edit it (`abhed config show` prints what is in effect), or move it away "
              "and run this again.")
    lines = ["# Abhed's operator settings. Every key is shown at its default, commented out: uncomment to change.",
             "# Precedence: defaults < this file < ABHED_* environment variables < command-line flags.", ""]
    sections = config.Settings().model_dump(mode="json")
    for key, value in sections.items():
        if not isinstance(value, dict):
            lines.append(f"# {key} = {json.dumps(value)}")
    for key, value in sections.items():
        if isinstance(value, dict):
            lines += ["", f"[{key}]"] + [f"# {name} = {json.dumps(v)}" for name, v in value.items() if v is not None]
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(path, "x", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write("\n".join(lines) + "\n")
    except OSError as exc:
        _fail(f"Cannot write {path}: {exc.strerror or exc}. Set ABHED_CONFIG to a path you can write.")
    click.echo(printable(f"Wrote {path}"))


@main.group()
def sessions() -> None:
    """Inspect stored sessions."""


@sessions.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option("--all", "show_all", is_flag=True, help="Also list the sessions of `abhed tool` calls.")
def sessions_list(as_json: bool, show_all: bool) -> None:
    """List sessions, the most recently used first: status, mode, model, workspace, first prompt."""
    from datetime import datetime, timezone

    from abhed.session import summary
    from abhed.session.store import SessionError, SessionStore
    store = SessionStore(_settings().home)
    rows, hidden, used_at = [], 0, {}
    for session_id in store.ids():
        try:
            session = store.open(session_id)
        except SessionError as exc:
            click.echo(f"warning: {printable(str(exc))}", err=True)
            continue
        state = session.state
        if state.origin == "tool" and not show_all:
            hidden += 1
            continue
        log = session.log
        seen = summary.current(log)  # reads no event when the summary is up to date (session/summary.py)
        last = seen.status
        used = store.last_used(session_id)
        used_at[state.id] = used
        rows.append({"id": state.id, "created_at": state.created_at.isoformat(timespec="seconds"),
                     "last_used": datetime.fromtimestamp(used, timezone.utc).isoformat(timespec="seconds"),
                     "status": "running or cut short" if last == "started" else last,
                     "mode": state.options.get("mode") or "", "model": state.options.get("model") or "",
                     "origin": state.origin, "events": seen.events, "workspace": state.workspace,
                     "first_prompt": summary.first_prompt(log, seen)})
    # Newest first by the exact time: the shown one is cut to the second, where two sessions tie.
    rows.sort(key=lambda row: (used_at[row["id"]], row["id"]), reverse=True)
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    elif not rows:
        click.echo(f"[no sessions in {store.root}]")
    else:
        for row in rows:
            click.echo(printable(f"{row['id']:<22} {row['last_used'][:16].replace('T', ' ')}  {row['status']:<11} "
                                 f"{row['mode'] or '-':<12} {row['model'] or '-'}  {row['workspace']}"))
            click.echo(printable(f"{'':<22} {_preview(row['first_prompt'] or '(no prompt)', 90)}"))
    if hidden:
        click.echo(f"[{hidden} session{'s' * (hidden != 1)} of `abhed tool` calls not shown: --all lists them]",
                   err=True)


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
    from abhed.session.events import to_json
    session = _open_session(session_id)
    loaded = session.log.load()
    for problem in loaded.problems:
        click.echo(f"warning: {printable(problem)}", err=True)
    if as_json:  # ensure_ascii: a lone surrogate the model sent stays an escape, as in the log
        for event in loaded.events:
            click.echo(to_json(event))
        return
    for event, depth in tree(loaded.events):
        click.echo(printable(_shown_event(event, "  " * depth, full)))


@sessions.command("verify")
@click.argument("session_id", required=False)
@click.option("--all", "every", is_flag=True, help="Verify every session in the store (`abhed tool` ones too): a line "
              "each, then the totals.")
@click.option("--head", "kept", metavar="SEQ:SHA256", help="Also check that the log still holds this head, as printed "
              "at the session's end and kept elsewhere: catches a log cut or rewritten together with events.head.")
def sessions_verify(session_id: str | None, every: bool, kept: str | None) -> None:
    """Check that a session's record is as it was written: recompute its event log's hash chain, and
    check events.head and the payloads in blobs/; name the first event changed, removed, added,
    reordered or cut, or a link stripped. A line torn by a crash is told apart.
    Exit status 0 intact, 1 tampered, 2 bad invocation, 3 legacy (a session made before sessions
    declared their chain at creation: its links agree, but it is not tamper-evident)."""
    from abhed.session.audit import parse_head, verify_session
    from abhed.session.store import SessionError, SessionStore
    store = SessionStore(_settings().home)
    if every:
        if session_id is not None or kept is not None:
            _fail("--all verifies every session: give it without a SESSION_ID or --head.")
        _verify_all(store)
    if session_id is None:
        _fail("Name the session to verify (`abhed sessions list --all` lists them), or pass --all for every one.")
    head = parse_head(kept) if kept is not None else None
    if kept is not None and head is None:
        _fail(f"--head {kept!r} is not a head: give it as printed at the session's end, SEQ:SHA256 (the event's "
              "number, a colon, 64 hex digits), e.g. --head 12:3f5a...")
    try:
        directory = store.stored(session_id)
    except SessionError as exc:
        _fail(str(exc))
    verdict = verify_session(directory, head)
    click.echo(printable(verdict.summary(str(directory / "events.jsonl"))))
    sys.exit(verdict.exit_code)


def _verify_all(store) -> None:  # type: ignore[no-untyped-def]
    """A line per stored session, then the totals; exit 1 if any is tampered, else 3 if any is legacy."""
    from abhed.session.audit import verify_session
    counts = {"OK": 0, "LEGACY": 0, "TAMPERED": 0}
    for directory in store.stored_dirs():
        verdict = verify_session(directory)
        counts[verdict.status] += 1
        click.echo(printable(verdict.line(directory.name)))
    total = sum(counts.values())
    click.echo(f"{total} session{'s' * (total != 1)} in {store.root}: {counts['OK']} OK, {counts['LEGACY']} legacy "
               f"(not tamper-evident), {counts['TAMPERED']} TAMPERED")
    sys.exit(1 if counts["TAMPERED"] else 3 if counts["LEGACY"] else 0)


@sessions.command("export")
@click.argument("session_id")
@click.option("--format", "fmt", type=click.Choice(["jsonl"]), default="jsonl", show_default=True)
def sessions_export(session_id: str, fmt: str) -> None:
    """Print a session as audit records, one JSON object a line: who (user, host), when, which model,
    every call with its approval decision and who approved it, every checkpoint and undo, and
    whether the log's hash chain is intact."""
    from abhed.session.audit import export_lines
    session = _open_session(session_id)
    for line in export_lines(session):
        click.echo(line)


def tree(events: list[AnyEvent]) -> list[tuple[AnyEvent, int]]:
    """The events as (event, depth) in the order to show them: each subagent's events right after
    the task call that started it, one level deeper, rather than interleaved in log order with its
    siblings'. A subagent no task result names (its run was cut short) comes where it started."""
    from abhed.session.events import ActionEvent, ObservationEvent
    own: dict[str, list[tuple[int, AnyEvent]]] = {}
    for index, event in enumerate(events):
        own.setdefault(event.agent_id, []).append((index, event))
    started_by = {e.action_id: e.metadata["agent_id"] for e in events if isinstance(e, ObservationEvent)
                  and e.tool == "task" and isinstance(e.metadata.get("agent_id"), str)
                  and e.metadata["agent_id"] in own}
    linked = set(started_by.values())
    parents = {agent: entries[0][1].parent_id for agent, entries in own.items()}
    loose: dict[str | None, list[str]] = {}  # agents no task result names, by parent (None: top level)
    for agent, parent in parents.items():
        if agent not in linked and (parent is None or parent not in own):
            loose.setdefault(None, []).append(agent)
        elif agent not in linked:
            loose.setdefault(parent, []).append(agent)
    out: list[tuple[AnyEvent, int]] = []

    def walk(agents: list[str], depth: int) -> None:
        entries: list[tuple[int, AnyEvent | str]] = [(i, e) for agent in agents for i, e in own[agent]]
        entries += [(own[child][0][0], child) for agent in agents for child in loose.get(agent, [])]
        for _, item in sorted(entries, key=lambda entry: entry[0]):
            if isinstance(item, str):  # a subagent no task result names, where it started
                walk([item], depth + 1)
                continue
            out.append((item, depth))
            if isinstance(item, ActionEvent) and item.id in started_by:
                walk([started_by[item.id]], depth + 1)

    walk(loose.get(None, []), 0)
    return out


def _shown_event(event: AnyEvent, indent: str, full: bool) -> str:
    from abhed.session.events import (ActionEvent, CheckpointEvent, CompactionEvent, MessageEvent, ModeEvent,
                                      ObservationEvent, SessionEvent)
    stamp = event.at.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(event, ActionEvent):
        args = json.dumps(event.input, ensure_ascii=False)
        return f"{indent}{stamp} [{event.agent_id}] {event.tool} {_preview(args)}"
    if isinstance(event, ObservationEvent):
        status = "error" if event.is_error else "ok"
        body = event.content if full else _preview(event.content)
        return f"{indent}    -> {status} {event.duration_ms:.0f} ms: {body}"
    if isinstance(event, MessageEvent):
        who = event.role if event.origin in ("user", "model") else f"{event.role} ({event.origin})"
        body = event.content if full else _preview(event.content)
        written = f" written in the {' and '.join(event.forms)} form" if event.forms else ""
        calls = (f" [{len(event.tool_calls)} call{'s' * (len(event.tool_calls) != 1)}{written}]" if event.tool_calls
                 else "")
        return f"{indent}{stamp} [{event.agent_id}] {who}: {body}{calls}"
    if isinstance(event, CompactionEvent):
        return (f"{indent}{stamp} [{event.agent_id}] compacted ({event.method} summary): about "
                f"{event.tokens_before} -> {event.tokens_after} tokens")
    if isinstance(event, CheckpointEvent):
        what = f"undo to before checkpoint {event.undo_to}" if event.undo_to else f"before {event.tool}"
        missed = f"; {event.not_covered_count} files not covered" if event.not_covered_count else ""
        return f"{indent}{stamp} [{event.agent_id}] checkpoint {event.number} ({what}){missed}"
    if isinstance(event, ModeEvent):
        return f"{indent}{stamp} [{event.agent_id}] mode {event.mode} (was {event.previous}), set by {event.user or 'the human'}"
    if isinstance(event, SessionEvent):
        return (f"{indent}{stamp} [{event.agent_id}] session created by {event.user}@{event.host} in {event.workspace} "
                f"(log hash-chained: {event.chain})")
    detail = f": {_preview(event.detail)}" if event.detail else ""
    return f"{indent}{stamp} [{event.agent_id}] run {event.status}{detail}"


# -- checkpoints and undo (abhed/session/checkpoint.py, abhed/session/undo.py) ---------------------


def _checkpointed_session(settings: config.Settings, session_id: str | None) -> tuple[str, checkpoint.Checkpoints]:
    """The session to list or undo (default: the newest in the current directory) and its checkpoints."""
    from abhed.session import checkpoint
    from abhed.session.store import SessionError, SessionStore
    from abhed.session.undo import latest_session
    store = SessionStore(settings.home)
    if session_id is None:
        session_id = latest_session(store, Path.cwd().resolve())
        if session_id is None:
            _fail(f"No session works in {Path.cwd().resolve()}: name one (abhed sessions list shows them).")
    try:
        workspace = Path(store.open(session_id).state.workspace)  # type: ignore[arg-type]
    except SessionError as exc:
        _fail(str(exc))
    found = checkpoint.from_settings(settings, workspace)
    if found is None:
        why = "there is no git binary (abhed doctor)" if settings.checkpoints.enabled else \
            "checkpoints.enabled is false"
        _fail(f"Checkpoints are off: {why}.")
    return session_id, found  # type: ignore[return-value]


@main.command("checkpoints")
@click.argument("session_id", required=False)
def checkpoints_list(session_id: str | None) -> None:
    """List a session's checkpoints (default: the newest session in this directory): number, time,
    the call that followed, and the files that call changed."""
    from abhed.session import checkpoint
    from abhed.session.store import SessionStore
    from abhed.session.undo import interrupted, rows, table
    settings = _settings()
    session_id, found = _checkpointed_session(settings, session_id)
    session = SessionStore(settings.home).open(session_id)
    try:
        click.echo(printable(table(rows(found, session), session_id)))
        notice = interrupted(found)
    except checkpoint.CheckpointError as exc:
        _fail(str(exc))
    if notice:
        click.echo(f"abhed: {printable(notice)}", err=True)


@main.command("undo")
@click.argument("session_id", required=False)
@click.option("--to", "number", type=click.IntRange(1), help="Restore the state from before checkpoint N's call "
              "(default: the last checkpoint, i.e. undo the last change).")
@click.option("--yes", is_flag=True, help="Do not ask; undo at once.")
@click.option("--force", is_flag=True, help="Also overwrite files someone else changed since (they are listed).")
@click.option("--finish", is_flag=True, help="Finish an undo that was interrupted (Abhed was killed mid-way).")
@click.option("--rollback", is_flag=True, help="Roll back an undo that was interrupted: the workspace as before it.")
def undo_command(session_id: str | None, number: int | None, yes: bool, force: bool, finish: bool,
                 rollback: bool) -> None:
    """Take the workspace back to before a call: every file that call and later ones modified, created
    or deleted. Shows what it will change and asks first. The undo is itself a checkpoint, so it can
    be undone. An undo that was interrupted is finished with --finish or rolled back with --rollback
    first. Exit status 0 done (or nothing to do), 1 refused or cancelled, 2 bad invocation."""
    from abhed.session import checkpoint, undo
    from abhed.session.store import SessionError, SessionStore
    if finish and rollback or (finish or rollback) and number is not None:
        click.echo("abhed: --finish, --rollback and --to exclude one another: pass one of them.", err=True)
        sys.exit(2)
    settings = _settings()
    session_id, found = _checkpointed_session(settings, session_id)
    if finish or rollback:  # the session of the interrupted undo, whichever was named
        try:
            session_id = undo.interrupted_session(found) or session_id
        except checkpoint.CheckpointError as exc:
            _fail(str(exc))

    def confirm(plan: str) -> bool:
        click.echo(printable(plan))
        if yes:
            return True
        if not sys.stdin.isatty():
            click.echo("abhed: not undone: there is no terminal to answer on; pass --yes to undo without asking.",
                       err=True)
            return False
        return click.confirm("Undo?", default=False)

    try:
        with SessionStore(settings.home).use(session_id, Path(found.shadow.workspace),
                                             wait_s=settings.agent.session_wait_s) as session:
            if finish or rollback:
                report = undo.finish(found, session, rollback=rollback, force=force, confirm=confirm)
            else:
                report = undo.undo(found, session, number, force=force, confirm=confirm)
    except checkpoint.UndoRefused as exc:
        click.echo(f"abhed: {printable(str(exc))}", err=True)
        sys.exit(1)
    except (checkpoint.CheckpointError, SessionError) as exc:
        _fail(str(exc))
    click.echo(printable(report))
    sys.exit(1 if " cancelled" in report.split(";")[0] else 0)


# -- the agent: run, chat, resume, demo, doctor, models ------------------------------------------


class FormatChoice(click.Choice[str]):
    """--tool-format: "auto" or a format of common/formats.py, read from the registry when the line
    is parsed or --help shown, so a format is offered wherever it is registered."""

    def __init__(self) -> None:
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        return ("auto", *formats.names())

    @choices.setter
    def choices(self, given: tuple[str, ...]) -> None:
        pass  # click.Choice.__init__ stores the tuple it is given; the registry is the list


def _agent_options(function):  # type: ignore[no-untyped-def]
    """The flags every agent command shares; they override the config file and the environment."""
    options = [
        click.option("--workspace", type=click.Path(file_okay=False, path_type=Path),
                     help="The workspace root (default: the root of the git repository the current directory is "
                          "in, else the current directory)."),
        click.option("--mode", type=click.Choice(MODES), help="Approval mode (default: approval.mode, else ask)."),
        click.option("--endpoint", help="Model server, e.g. http://gpu1:8000/v1 (default: model.endpoint)."),
        click.option("--model", "model_name", help="Served model id (default: the first the server lists)."),
        click.option("--profile", help="Model profile name (default: chosen from the model id; see `abhed models`)."),
        click.option("--tool-format", type=FormatChoice(),
                     help="How tool calls travel (default: the profile's, falling back to text if the server "
                          "has no tool parser)."),
        click.option("--max-turns", type=click.IntRange(1), help="Budget: model replies per run."),
        click.option("--max-tokens", type=click.IntRange(1000), help="Budget: prompt+completion tokens per run."),
        click.option("--max-time", type=click.FloatRange(min=1), help="Budget: wall-clock seconds per run."),
        click.option("--allow", multiple=True, metavar="RULE", help="Allow calls matching RULE without asking, on "
                     "top of approval.allow, e.g. --allow 'bash(pytest:*)' (repeatable)."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _launch_settings(kw: dict) -> config.Settings:
    from abhed.cli import launch
    try:
        return launch.settings(endpoint=kw["endpoint"], model=kw["model_name"], profile=kw["profile"],
                               tool_format=kw["tool_format"], mode=kw["mode"], max_turns=kw["max_turns"],
                               max_tokens=kw["max_tokens"], max_time=kw["max_time"], allow=list(kw["allow"] or []))
    except launch.LaunchError as exc:
        _fail(str(exc))
        raise


def _open_model(settings: config.Settings, display):  # type: ignore[no-untyped-def]
    from abhed.cli import launch
    from abhed.model.errors import ModelError
    from abhed.model.profiles import ProfileError
    try:
        return launch.open_model(settings, display)
    except (ModelError, ProfileError) as exc:  # may quote the server's own words
        click.echo(printable(f"abhed: {exc}"), err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("abhed: interrupted while connecting to the model server", err=True)
        sys.exit(130)


def _prepare(kw: dict, session_id: str | None) -> tuple[config.Settings, Path, dict]:
    """Settings, workspace and flags for an agent command: an existing session's own workspace, and
    the mode, rules and budgets it was started with where the command line leaves them unset."""
    from abhed.cli import launch
    settings = _launch_settings(kw)
    kw = {**kw, "workspace": kw["workspace"] or launch.project_root(Path.cwd())}
    try:
        workspace = launch.locate(settings, kw["workspace"], session_id)
        if session_id is not None:
            kw = launch.remembered(kw, launch.stored_options(settings, session_id))
            settings = _launch_settings(kw)
    except launch.LaunchError as exc:
        _fail(str(exc))
    return settings, workspace, kw


REFUSED_EXIT = 4  # the run finished, but calls it needed were refused for want of a human to approve them


def _finish(outcome, session_id: str, refused: list[str], usage: dict, head: str,  # type: ignore[no-untyped-def]
            as_json: bool) -> None:
    """Print a run's result: the answer on stdout, why it stopped on stderr, then the session, what
    it spent and its log's head (`SEQ:SHA256`, to keep elsewhere) as the last line of stderr; exit
    with its status."""
    status = "refused" if outcome.status == "done" and refused else outcome.status
    code = REFUSED_EXIT if status == "refused" else outcome.exit_code
    if as_json:  # ensure_ascii: no control character reaches the terminal raw
        click.echo(json.dumps({"session": session_id, "status": status, "exit_code": code, "answer": outcome.answer,
                               "detail": outcome.detail, "files_changed": outcome.changed, "refused": refused,
                               "usage": usage, "head": head}))
    elif outcome.answer:
        click.echo(printable(outcome.answer))
    if outcome.status != "done":
        click.echo(printable(f"abhed: {outcome.detail} (session {session_id})"), err=True)
    if refused:
        rules = " ".join(dict.fromkeys(refused))
        click.echo(printable(f"abhed: {len(refused)} call{'s were' if len(refused) != 1 else ' was'} refused: "
                             f"{'they' if len(refused) != 1 else 'it'} needed approval and no human is attached to "
                             f"give it. To let {'them' if len(refused) != 1 else 'it'} run: abhed resume {session_id} "
                             f"\"go on\" {rules} (or answer for {'them' if len(refused) != 1 else 'it'} in chat: abhed chat --session "
                             f"{session_id})"), err=True)
    if outcome.status == "interrupted":
        click.echo(f"abhed: continue with: abhed resume {session_id}", err=True)
    click.echo(f"abhed: session {session_id}; spent {usage['replies']} replies, {usage['tokens']} tokens, "
               f"{usage['seconds']:.0f} s; head {head}", err=True)
    sys.exit(code)


def _prompt_text(prompt: str | None) -> str | None:
    """PROMPT as given, or read from stdin for `-`; an empty one is refused."""
    if prompt == "-":
        prompt = sys.stdin.read()
    if prompt is not None and not prompt.strip():
        _fail("The prompt is empty: say what to do, as PROMPT or on stdin with `-` (echo 'fix the test' | "
              "abhed run -).")
    return prompt


def _run_prompt(kw: dict, prompt: str | None, session_id: str | None, as_json: bool = False) -> None:
    from abhed.cli import launch
    from abhed.cli.display import Progress
    from abhed.session.events import head_token
    prompt = _prompt_text(prompt)
    settings, workspace, kw = _prepare(kw, session_id)
    display = Progress()
    model = _open_model(settings, display)
    try:
        with launch.agent_in_session(settings, workspace, session_id, model, display, options=kw,
                                     cwd=Path.cwd()) as (agent, unfinished):
            session = agent.ctx.session.id
            display.notice(f"session {session}; {model.describe()}; mode {agent.gate.policy.mode}")
            if session_id is not None:
                for line in launch.recent_conversation(agent.ctx.session):
                    click.echo(printable(line), err=True)
            if prompt is None and not unfinished:
                _fail(f"Session {session} finished its last run; nothing to continue. Give a PROMPT to go on with it, "
                      f"or chat: abhed chat --session {session}")
            checkpoints = agent.ctx.checkpoints
            first = _last_checkpoint(checkpoints, session) + 1
            outcome = agent.run(prompt)
            _tell_range(display, first, _last_checkpoint(checkpoints, session), session)
            refused = launch.refused_for_want_of_a_human(agent.ctx.session, settings, workspace)
            budget = agent.budget
            usage = {"replies": budget.turns, "tokens": budget.tokens, "tool_calls": outcome.tool_calls,
                     "seconds": round(budget.clock() - budget.started, 1)}
            head = head_token(agent.ctx.session.log.head())
    except launch.LaunchError as exc:
        _fail(str(exc))
    finally:
        model.client.close()
    _finish(outcome, session, refused, usage, head, as_json)


def _last_checkpoint(checkpoints: checkpoint.Checkpoints | None, session_id: str) -> int:
    from abhed.session import checkpoint
    if checkpoints is None:
        return 0
    try:
        with checkpoints.shadow.locked():
            return checkpoints.shadow.last_number(session_id)
    except checkpoint.CheckpointError:
        return 0


def _tell_range(display, first: int, last: int, session_id: str) -> None:  # type: ignore[no-untyped-def]
    from abhed.session.undo import run_range
    text = run_range(first, last, session_id)
    if text:
        display.notice(text)


@main.command()
@click.argument("prompt")
@_agent_options
@click.option("--session", "session_id", help="Continue this existing session (default: a new one).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout: session, status, exit_code, "
              "answer, detail, files_changed, refused, usage, head.")
def run(prompt: str, session_id: str | None, as_json: bool, **kw) -> None:  # type: ignore[no-untyped-def]
    """Work on PROMPT (- reads it from stdin) without asking anyone, then print the answer.

    Progress goes to stderr, the final answer to stdout; the last line of stderr names the session,
    what the run spent and its log's head (SEQ:SHA256: keep it elsewhere, and `abhed sessions verify
    ID --head` checks the log against it). Calls that need approval are refused unless the mode, the operator's
    allow rules or --allow permit them. Exit status: 0 done, 1 failed (the model server could not
    be used), 2 bad invocation, 3 a budget ran out, 4 done but calls were refused for want of
    approval, 130 interrupted.
    """
    _run_prompt(kw, prompt, session_id, as_json)


@main.command()
@click.argument("session_id", required=False)
@click.argument("prompt", required=False)
@_agent_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout, as `abhed run --json`.")
def resume(session_id: str | None, prompt: str | None, as_json: bool, **kw) -> None:  # type: ignore[no-untyped-def]
    """Continue session SESSION_ID (default: this workspace's latest) from its event log: conversation,
    read-set, plan, todos, and the mode, allow rules and budgets it was started with.

    Without PROMPT, finishes the run that was cut short (a crash, kill, interrupt or budget);
    with PROMPT, works on it in the same conversation. Flags given here override what the session
    remembers; --allow adds rules. Output and exit status as `abhed run`; `abhed chat --session ID`
    continues it interactively instead.
    """
    if session_id is None:
        from abhed.cli import launch
        try:
            session_id = launch.latest(_launch_settings(kw), (kw["workspace"] or launch.project_root(Path.cwd()))
                                       .resolve())
        except launch.LaunchError as exc:
            _fail(str(exc))
    _run_prompt(kw, prompt, session_id, as_json)


@main.command()
@_agent_options
@click.option("--session", "session_id", help="Continue this existing session (`abhed sessions list` shows them).")
@click.option("--new", is_flag=True, help="Start a new session (the default).")
def chat(session_id: str | None, new: bool, **kw) -> None:  # type: ignore[no-untyped-def]
    """Work with the agent interactively: streamed replies, approval prompts, a live todo list.

    Ctrl-C stops the current turn and returns to the prompt; Ctrl-D (or /exit) ends the session.
    """
    from abhed.cli.lineedit import hold_keys
    release = hold_keys()  # a key typed while the chat starts (Ctrl-D too) reaches the prompt
    try:
        _chat(session_id, new, kw, release)
    finally:
        release()


def _chat(session_id: str | None, new: bool, kw: dict, release) -> None:  # type: ignore[no-untyped-def]
    from contextlib import ExitStack

    from abhed.cli.chat import Pending, StartFailed, chat_loop
    from abhed.cli.display import Chat
    from abhed.session.events import head_token
    if new and session_id:
        _fail(f"--new starts a new session and --session {session_id} continues one: give only one of them.")
    settings, workspace, kw = _prepare(kw, session_id)  # settings' mistakes are cheap to find: before the prompt
    display = Chat()
    held = ExitStack()  # what the build opened, closed when the chat ends

    def build():  # type: ignore[no-untyped-def]
        """In a thread while the person types: the model client, the session and the agent."""
        from abhed.cli import launch
        from abhed.cli.chat import announce
        from abhed.model.errors import ModelError
        from abhed.model.profiles import ProfileError
        try:
            model = launch.open_model(settings, display)
            held.callback(model.client.close)
            agent, unfinished = held.enter_context(launch.agent_in_session(
                settings, workspace, session_id, model, display, ask_human=display.ask, options=kw, cwd=Path.cwd()))
        except (ModelError, ProfileError) as exc:  # may quote the server's own words
            raise StartFailed(f"abhed: {exc}", 1) from None
        except launch.LaunchError as exc:
            raise StartFailed(f"abhed: {exc}", 2) from None
        if session_id is not None:
            for line in launch.recent_conversation(agent.ctx.session):
                display.console.print(printable(line), markup=False, highlight=False)
        display.attach(agent.gate, _rule_saver(settings))
        announce(agent, display, unfinished)
        return agent, unfinished

    pending = Pending(build)
    try:
        chat_loop(pending, display, settings.home, workspace, release)
        agent, _ = pending.result()  # a chat ended before its agent was ready still says why that could not be
        session, head = agent.ctx.session.id, head_token(agent.ctx.session.log.head())  # the session still held
    except StartFailed as exc:
        click.echo(printable(exc.message), err=True)
        sys.exit(exc.code)
    finally:
        pending.wait()
        held.close()
    click.echo(f"abhed: session {session} ended; head {head} (keep it elsewhere: `abhed sessions verify {session} "
               f"--head {head}` checks the log against it)", err=True)


def _rule_saver(settings: config.Settings):  # type: ignore[no-untyped-def]
    """How chat saves a granted rule to the operator's config; None unless approval.save_rules allows it."""
    if not settings.approval.save_rules:
        return None
    from abhed.session import config
    from abhed.session.rulesave import SaveError, save_rule
    path = config.config_path(dict(os.environ))

    def save(rule: str) -> str:
        try:
            return save_rule(path, rule)
        except (SaveError, OSError) as exc:
            return f"{exc} (the rule still holds for this session)"
    return save


@main.command()
@click.option("--keep", is_flag=True, help="Keep the throwaway workspace afterwards (its path is printed).")
@click.option("--fast", is_flag=True, help="Replay at once instead of at reading pace.")
def demo(keep: bool, fast: bool) -> None:
    """Watch the agent fix a small bug, with no model server needed.

    A scripted model (a replay server on 127.0.0.1 speaking vLLM's wire format) drives the real
    loop, tools, sandbox and event log in a throwaway workspace.
    """
    from abhed.cli.demo import run_demo
    sys.exit(run_demo(keep=keep, fast=fast))


@main.group()
def bundle() -> None:
    """Check a USB bundle (made by `python -m bundle.make`) before installing it."""


@bundle.command("verify")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--pubkey", type=click.Path(dir_okay=False, path_type=Path),
              help="The site's public key (minisign format), distributed separately from the bundle.")
@click.option("--key-id", help="Trust the bundle's own abhed.pub only if its key ID is this (got out of band).")
@click.option("--prefix", type=click.Path(file_okay=False, path_type=Path),
              help="Where a previous install pinned its key (default: this abhed's prefix, else install.sh's).")
def bundle_verify(directory: Path, pubkey: Path | None, key_id: str | None, prefix: Path | None) -> None:
    """Verify a bundle as its install.sh would.

    Checks the signature over DIRECTORY/SHA256SUMS, that no file is unlisted or missing, and every
    checksum. Exit 0 when verified, 1 naming the file that failed and what to do.
    """
    from abhed.common.frozen import launched_as
    from bundle.verify import VerificationError, pinned_key, verify as verify_bundle

    try:
        result = verify_bundle(directory, pubkey, key_id, pinned_key(prefix, launched_as()))
    except VerificationError as exc:
        click.echo(f"abhed: {exc}", err=True)
        sys.exit(1)
    click.echo(f"abhed: {result.summary()}")


@main.command()
@click.option("--endpoint", help="Model server to check (default: model.endpoint).")
@click.option("--model", "model_name", help="Served model id to check (default: the first the server lists).")
@click.option("--profile", help="Model profile to use (default: chosen from the model id).")
def doctor(endpoint: str | None, model_name: str | None, profile: str | None) -> None:
    """Check that Abhed can work here: model server, model, context, tool calling, sandbox, rg.

    Each line says OK, or what is wrong and how to fix it. Exit status 0 when nothing failed.
    """
    from abhed.cli import launch
    from abhed.cli.doctor import checks
    try:
        settings = launch.settings(endpoint=endpoint, model=model_name, profile=profile)
    except launch.LaunchError as exc:
        _fail(str(exc))
    failed = False
    for check in checks(settings):
        click.echo(printable(f"{check.status:<5} {check.name:<13} {check.message}"))  # the server's words too
        failed = failed or check.status == "FAIL"
    sys.exit(1 if failed else 0)


@main.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the profiles as JSON.")
def models(name: str | None, as_json: bool) -> None:
    """List the model profiles (offline_models/), or show one: window, format, sampling, vllm flags."""
    from abhed.model import profiles
    settings = _settings()
    try:
        loaded = profiles.load(settings.model.profiles_dir)
        chosen = [profiles.choose("", loaded, name)[0]] if name else sorted(loaded.values(), key=lambda p: p.name)
    except profiles.ProfileError as exc:
        _fail(str(exc))
    if as_json:
        click.echo(json.dumps([p.model_dump() for p in chosen], indent=1))
        return
    if name:
        profile = chosen[0]
        for key, value in profile.model_dump(exclude={"sampling", "notes", "vllm_serve"}).items():
            described = f": {formats.get(value).description}" if key in ("tool_format", "text_format") else ""
            click.echo(f"{key:<18} {value}{described}")
        click.echo(f"{'sampling':<18} {profile.sampling.fields()}")
        click.echo(f"\nServe it with:\n  {profile.vllm_serve}\n\n{profile.notes}")
        from abhed.conformance.report import one_line, saved
        reports = saved(profile.name, settings.home)
        if reports:
            click.echo("\nConformance (abhed conformance --save):\n" + "\n".join(f"  {one_line(r)}" for r in reports))
        return
    for profile in chosen:
        fmt = profile.tool_format + (f" (text: {profile.text_format})" if profile.tool_format == "native" else "")
        if profile.vision:
            fmt += f"  images: {profile.vision.max_images} a request, in {profile.vision.placement} messages"
        click.echo(f"{profile.name:<14} {profile.family:<20} {profile.context_window:>7} ctx {profile.max_output_tokens:>6} "
                   f"out  {fmt}")
        click.echo(f"{'':<14} {profile.vllm_serve}")


@main.command()
@click.option("--endpoint", help="Model server to test (default: model.endpoint).")
@click.option("--model", "model_name", help="Served model id to test (default: the first the server lists).")
@click.option("--profile", help="Model profile to use (default: chosen from the model id).")
@click.option("--tool-format", type=FormatChoice(),
              help="How tool calls travel (default: the profile's, falling back to text without a tool parser).")
@click.option("--only", help="Categories to run, comma-separated: adapter, scenarios, recovery (default: all).")
@click.option("--repeat", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Run each test this many times (a sampled model does not answer the same way twice).")
@click.option("--threshold", "thresholds", multiple=True, metavar="CATEGORY=SCORE",
              help="Override a category's pass threshold, e.g. --threshold scenarios=1.0.")
@click.option("--json", "json_path", metavar="FILE", help="Write the JSON report to FILE (- for stdout; the table "
              "then goes to stderr).")
@click.option("--save", is_flag=True, help="Save the JSON report under $ABHED_HOME/conformance, one file per run "
              "(`abhed models NAME` lists them).")
@click.option("--save-to", type=click.Path(file_okay=False, path_type=Path), help="Save the JSON report in this "
              "directory instead.")
@click.option("--keep", is_flag=True, help="Keep the throwaway workspaces and sessions (their path is printed).")
@click.option("--verbose", is_flag=True, help="Show every tool call of every test on stderr.")
def conformance(endpoint: str | None, model_name: str | None, profile: str | None, tool_format: str | None,
                only: str | None, repeat: int, thresholds: tuple[str, ...], json_path: str | None, save: bool,
                save_to: Path | None, keep: bool, verbose: bool) -> None:
    """Decide whether a model may serve traffic: the conformance suite against a real endpoint.

    Layer 1 (adapter): one call of each of the nine tools must parse and validate; then one
    markup-heavy edit per text protocol (text:hermes, text:qwen3_coder), counted only for the
    protocol the model's calls travel in (else shown as informative). Layer 2
    (scenarios, recovery): real tasks in throwaway workspaces, judged by their outcome on disk;
    the recovery tasks provoke errors and measure how often the model's next call is fixed by the
    error text alone. Prints a table (and --json, a JSON report). Exit status: 0 the model passes,
    1 it does not (or the model server failed), 2 bad invocation.
    """
    import shutil
    import tempfile

    from abhed.cli import launch
    from abhed.conformance import report as reports
    from abhed.conformance import suite
    from abhed.cli.display import Progress

    categories = tuple(c.strip() for c in only.split(",") if c.strip()) if only else reports.CATEGORIES
    unknown = [c for c in categories + tuple(t.partition("=")[0] for t in thresholds) if c not in reports.CATEGORIES]
    if unknown:
        _fail(f"Unknown category {unknown[0]!r}: the categories are {', '.join(reports.CATEGORIES)}.")
    limits: dict[str, float] = {}
    for item in thresholds:
        name, _, value = item.partition("=")
        try:
            limits[name] = float(value)
        except ValueError:
            _fail(f"--threshold {item!r}: write CATEGORY=SCORE with SCORE a number from 0 to 1, e.g. scenarios=1.0.")
        if not 0 <= limits[name] <= 1:
            _fail(f"--threshold {item!r}: SCORE must be between 0 and 1.")
    try:
        settings = launch.settings(endpoint=endpoint, model=model_name, profile=profile, tool_format=tool_format)
    except launch.LaunchError as exc:
        _fail(str(exc))
    out = sys.stderr if json_path == "-" else sys.stdout
    model = _open_model(settings, Progress())
    root = Path(tempfile.mkdtemp(prefix="abhed-conformance-")).resolve()

    def progress(test) -> None:  # type: ignore[no-untyped-def]
        click.echo(f"{test.category:<10} {test.name:<18} {'PASS' if test.passed else 'FAIL'}  "
                   f"({test.turns} replies, {test.tool_errors} tool errors)", err=True)

    options = suite.Options(categories=categories, repeat=repeat, thresholds=limits, on_test=progress)
    if verbose:
        options.display = lambda name: Progress()
    try:
        click.echo(printable(f"abhed conformance: {model.describe()}; workspaces in {root}"), err=True)
        report = suite.run(settings, model, root, options)
    except KeyboardInterrupt:
        click.echo("abhed: conformance interrupted; no verdict", err=True)
        sys.exit(130)
    finally:
        model.client.close()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    click.echo(printable(reports.table(report)), file=out)
    if keep:
        click.echo(f"Workspaces and sessions kept in {root} (ABHED_HOME={root / 'home'} abhed sessions show ID).",
                   err=True)
    text = report.model_dump_json(indent=1)
    if json_path == "-":
        click.echo(text)
    elif json_path:
        Path(json_path).write_text(text + "\n")
    for directory in ([save_to] if save_to else []) + ([reports.reports_dir(settings.home)] if save else []):
        try:
            click.echo(f"Saved the report to {reports.save(report, directory)}", err=True)
        except OSError as exc:
            click.echo(f"abhed: cannot save the report in {directory}: {exc.strerror or exc}. Use --save-to DIR, or "
                       "--json FILE.", err=True)
            sys.exit(1)
    sys.exit(0 if report.passed else 1)
