"""What every command module of `abhed` shares: the operator's settings, a stored session, and
failing with a message.

Light on purpose (click and printable only): commands.py imports every command module at start-up,
and they all import this.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

import click

from abhed.common.terminal import printable

if TYPE_CHECKING:
    from abhed.session import config
    from abhed.session.store import Session


def fail(message: str) -> NoReturn:
    """Exit with status 2 (a bad invocation, or what the command cannot do), saying why on stderr."""
    click.echo(f"abhed: {printable(message)}", err=True)
    sys.exit(2)


def settings() -> config.Settings:
    """The operator's settings, or a click error (exit 1) saying what is wrong with them."""
    from abhed.session import config
    try:
        return config.load()
    except config.ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def open_session(session_id: str) -> Session:
    """The stored session `session_id`, or exit with the store's explanation."""
    from abhed.session.store import SessionError, SessionStore
    try:
        return SessionStore(settings().home).open(session_id)
    except SessionError as exc:
        fail(str(exc))
