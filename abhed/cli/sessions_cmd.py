"""`abhed sessions list | show | verify | export`: the stored sessions, read. Thin over the session
part: session/listing.py (the list's rows), session/eventtree.py (the events as a tree, a line
each), session/audit.py (the hash chain's verdict, the audit records)."""

from __future__ import annotations

import json
import sys

import click

from abhed.cli import base
from abhed.common.terminal import printable


@click.group()
def sessions() -> None:
    """Inspect stored sessions."""


@sessions.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option("--all", "show_all", is_flag=True, help="Also list the sessions of `abhed tool` calls.")
def sessions_list(as_json: bool, show_all: bool) -> None:
    """List sessions, the most recently used first: status, mode, model, workspace, first prompt."""
    from abhed.session.eventtree import preview
    from abhed.session.listing import listing
    from abhed.session.store import SessionStore
    store = SessionStore(base.settings().home)
    found = listing(store, show_all)
    for warning in found.warnings:
        click.echo(f"warning: {printable(warning)}", err=True)
    rows = found.rows
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    elif not rows:
        click.echo(f"[no sessions in {store.root}]")
    else:
        for row in rows:
            click.echo(printable(f"{row['id']:<22} {row['last_used'][:16].replace('T', ' ')}  {row['status']:<11} "
                                 f"{row['mode'] or '-':<12} {row['model'] or '-'}  {row['workspace']}"))
            click.echo(printable(f"{'':<22} {preview(row['first_prompt'] or '(no prompt)', 90)}"))
    if found.hidden:
        click.echo(f"[{found.hidden} session{'s' * (found.hidden != 1)} of `abhed tool` calls not shown: --all lists "
                   "them]", err=True)


@sessions.command("show")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Print the events as JSON lines.")
@click.option("--full", is_flag=True, help="Print each observation's whole text, not its first line.")
def sessions_show(session_id: str, as_json: bool, full: bool) -> None:
    """Print the events of one session in order."""
    from abhed.session.eventtree import shown_event, tree
    from abhed.session.events import to_json
    session = base.open_session(session_id)
    loaded = session.log.load()
    for problem in loaded.problems:
        click.echo(f"warning: {printable(problem)}", err=True)
    if as_json:  # ensure_ascii: a lone surrogate the model sent stays an escape, as in the log
        for event in loaded.events:
            click.echo(to_json(event))
        return
    for event, depth in tree(loaded.events):
        click.echo(printable(shown_event(event, "  " * depth, full)))


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
    store = SessionStore(base.settings().home)
    if every:
        if session_id is not None or kept is not None:
            base.fail("--all verifies every session: give it without a SESSION_ID or --head.")
        _verify_all(store)
    if session_id is None:
        base.fail("Name the session to verify (`abhed sessions list --all` lists them), or pass --all for every one.")
    head = parse_head(kept) if kept is not None else None
    if kept is not None and head is None:
        base.fail(f"--head {kept!r} is not a head: give it as printed at the session's end, SEQ:SHA256 (the event's "
                  "number, a colon, 64 hex digits), e.g. --head 12:3f5a...")
    try:
        directory = store.stored(session_id)
    except SessionError as exc:
        base.fail(str(exc))
    verdict = verify_session(directory, head)
    click.echo(printable(verdict.summary(str(directory / "events.jsonl"))))
    sys.exit(verdict.exit_code)


def _verify_all(store) -> None:
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
@click.option("--format", "fmt", type=click.Choice(["jsonl", "markdown"]), default="jsonl", show_default=True)
@click.option("--output", "-o", metavar="PATH", help="Write to a new file PATH (never replaced) instead of stdout.")
def sessions_export(session_id: str, fmt: str, output: str | None) -> None:
    """Print a session as audit records, one JSON object a line: who (user, host), when, which model,
    every call with its approval decision and who approved it, every checkpoint and undo, and
    whether the log's hash chain is intact. --format markdown: the conversation for people (the
    messages, each call with its approval and its result, bounded)."""
    from abhed.session.audit import export_lines
    session = base.open_session(session_id)
    if fmt == "markdown" or output:
        _export_document(session, fmt, output)
        return
    for line in export_lines(session):
        click.echo(line)


def _export_document(session, fmt: str, output: str | None) -> None:
    """The export as one text, to stdout or to a new file (cli/mdexport.py's rules)."""
    from pathlib import Path

    from abhed.cli import mdexport as markdown
    from abhed.session.audit import export_lines
    text = markdown.render(session) if fmt == "markdown" else "\n".join(export_lines(session)) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    path = markdown.target(output, Path.cwd())
    try:
        markdown.write_new(path, text, Path(session.state.workspace))
    except markdown.ExportError as exc:
        base.fail(str(exc))
    click.echo(f"wrote {printable(str(path))} ({len(text.splitlines())} lines)", err=True)
