"""The `abhed` command line: the group every command is registered on, and the entry point
(`abhed` in pyproject.toml, `python -m abhed`, the Nuitka build's abhed/__main__.py).

Each command lives in the module of its group, thin over the part of Abhed it drives:
tool_cmd.py (tools, tool), config_cmd.py (config), sessions_cmd.py (sessions), undo_cmd.py
(checkpoints, undo), agent_cmd.py (run, resume, chat, demo), model_cmd.py (doctor, models,
conformance), bundle_cmd.py (bundle) and mcp.py (mcp). Each command imports what it needs inside
itself, so that `abhed --version` loads click and these modules alone, `abhed tool read` the read
tool but not the sandbox, the model client or the terminal display, and so on (start-up, issue 18;
tests/test_startup.py keeps it so). Import at the top of a command module only what is light.
"""

from __future__ import annotations

from typing import Any

import click

from abhed import __version__
from abhed.cli import agent_cmd, bundle_cmd, config_cmd, model_cmd, sessions_cmd, startup, tool_cmd, undo_cmd
from abhed.cli.acp_cmd import acp
from abhed.cli.mcp import mcp

startup.begin()  # until an agent session is ready (launch.agent_in_session), collect garbage rarely


class ChatByDefault(click.Group):
    """`abhed PROMPT` is `abhed chat PROMPT`, as a Claude Code or Codex user types it: a first word
    that is not a command (nor --help, --version) starts the chat, with the words as its first
    message and the flags as chat's (`abhed --mode auto "fix it"`). A command's name stays the
    command: `abhed chat run` (or `abhed -- run`) sends the word "run" as a prompt. One word close to
    a command's name (`abhed doctr`) is taken for a typo, not sent to the model."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            _refuse_a_typo(self, args)
            args = ["chat", *args]
        return super().parse_args(ctx, args)


def _refuse_a_typo(group: click.Group, args: list[str]) -> None:
    import difflib
    word = args[0]
    if len(args) != 1 or not word.isalpha():
        return
    close = difflib.get_close_matches(word, list(group.commands), n=1, cutoff=0.75)
    if close:
        raise click.UsageError(f"No such command {word!r}; did you mean `abhed {close[0]}`? To send {word!r} to "
                               f"the model as a prompt: abhed chat {word}")


@click.group(cls=ChatByDefault, invoke_without_command=True, subcommand_metavar="[COMMAND | PROMPT] [ARGS]...")
@click.version_option(__version__, prog_name="abhed")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Abhed: an offline coding agent for air-gapped networks.

    Without a command, or with a PROMPT that is not one: `abhed chat [PROMPT]` (`abhed "fix the
    test"` opens the chat with that first message; `abhed chat run` sends a command's name).
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(agent_cmd.chat)


for command in (tool_cmd.tools, tool_cmd.tool, mcp, config_cmd.config_group, sessions_cmd.sessions,
                undo_cmd.checkpoints_list, undo_cmd.undo_command, agent_cmd.run, agent_cmd.resume, agent_cmd.chat,
                agent_cmd.demo, acp, bundle_cmd.bundle, model_cmd.doctor, model_cmd.models, model_cmd.conformance):
    main.add_command(command)


def __getattr__(name: str) -> Any:
    """Names that moved to the session part, still found here for the code and tests that import
    them from the command line (loaded on first use: `abhed --version` does not import the session)."""
    if name in ("tree", "_shown_event"):
        from abhed.session import eventtree
        return eventtree.tree if name == "tree" else eventtree.shown_event
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
