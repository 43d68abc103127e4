"""`abhed acp`: Abhed as an Agent Client Protocol server on stdin/stdout, for editors (Zed, JetBrains
IDEs, Neovim, Emacs). The command only parses its flags; cli/acp_server.py does the work."""

from __future__ import annotations

import sys

import click

from abhed.cli.agent_cmd import _agent_options


def _options(function):
    return _agent_options(function, workspace=False)


@click.command()
@_options
def acp(**kw) -> None:
    """Speak the Agent Client Protocol on stdin/stdout, so an editor drives Abhed: the editor's
    project directory is the workspace, approvals are the editor's permission prompts, cancel is
    Ctrl-C. Nothing but protocol frames is written to stdout; logs go to stderr. The flags are
    those of `abhed chat` (but --workspace: the editor names it); README.md shows the set-up for
    Zed and Neovim.
    """
    from abhed.cli.acp_server import serve
    sys.exit(serve({**kw, "workspace": None}))
