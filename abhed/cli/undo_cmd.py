"""`abhed checkpoints` and `abhed undo`: a session's checkpoints listed, and the workspace taken
back. Thin over session/undo.py, which finds the session and its checkpoints, plans and applies
the undo, and writes what is shown."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from abhed.cli import base
from abhed.common.terminal import printable

if TYPE_CHECKING:
    from abhed.session import checkpoint, config


def _checkpointed(settings: config.Settings, session_id: str | None) -> tuple[str, checkpoint.Checkpoints]:
    """The session to list or undo (default: the latest of this directory's workspace, the root of
    its git repository, as chat and resume take it) and its checkpoints, or exit saying why there are none."""
    from abhed.session.checkpoint import CheckpointError
    from abhed.session.store import SessionError
    from abhed.session.undo import checkpointed_session
    try:
        return checkpointed_session(settings, session_id, Path.cwd().resolve())
    except (CheckpointError, SessionError) as exc:
        base.fail(str(exc))


@click.command("checkpoints")
@click.argument("session_id", required=False)
def checkpoints_list(session_id: str | None) -> None:
    """List a session's checkpoints (default: this repository's latest session): number, time,
    the call that followed, and the files that call changed."""
    from abhed.session import checkpoint
    from abhed.session.store import SessionStore
    from abhed.session.undo import interrupted, rows, table
    settings = base.settings()
    session_id, found = _checkpointed(settings, session_id)
    session = SessionStore(settings.home).open(session_id)
    try:
        click.echo(printable(table(rows(found, session), session_id)))
        notice = interrupted(found)
    except checkpoint.CheckpointError as exc:
        base.fail(str(exc))
    if notice:
        click.echo(f"abhed: {printable(notice)}", err=True)


@click.command("undo")
@click.argument("session_id", required=False)
@click.option("--to", "number", type=click.IntRange(1), help="Restore the state from before checkpoint N's call "
              "(default: the latest checkpoint whose call changed something, i.e. undo the last change; calls "
              "that changed nothing, such as a test run, are passed over).")
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
    settings = base.settings()
    session_id, found = _checkpointed(settings, session_id)
    if finish or rollback:  # the session of the interrupted undo, whichever was named
        try:
            session_id = undo.interrupted_session(found) or session_id
        except checkpoint.CheckpointError as exc:
            base.fail(str(exc))

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
            elif number is None:  # the latest change: calls that changed nothing (a test run) are passed over
                report = undo.undo_latest(found, session, force=force, confirm=confirm)
            else:
                report = undo.undo(found, session, number, force=force, confirm=confirm)
    except checkpoint.UndoRefused as exc:
        click.echo(f"abhed: {printable(str(exc))}", err=True)
        sys.exit(1)
    except (checkpoint.CheckpointError, SessionError) as exc:
        base.fail(str(exc))
    click.echo(printable(report))
    sys.exit(1 if " cancelled" in report.split(";")[0] else 0)
