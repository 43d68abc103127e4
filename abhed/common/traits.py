"""What a tool declares about itself, so that no other part keeps lists of tool names (issue 35).

Each tool states its `Traits` beside its name (abhed/tools/: `traits = Traits(...)`); the approval
gate, dispatch, the loop and the CLI read them from the tool. A call may refine its tool's traits
(`Tool.call_traits`: a bash line proven read-only takes no checkpoint); that refinement is the
tool's own code, never a name check elsewhere.

The gate sits below the tools (it may not import them), so a caller that hands the gate a bare
tool name is answered through `of(name)`: the lookup the tool registry installs when it is
imported (abhed/tools/__init__.py). Dispatch does not rely on it: it hands the gate the tool's
traits with the call. A name nobody installed is unknown, and an unknown tool is asked about.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)  # pragma: no mutate  (immutability guards against our own bugs; no decision depends on it)
class Traits:
    """What a tool does. The defaults are the cautious answers: a tool states what it may do."""

    # Changes nothing: no file, no process, at most the session's own notes (plan, todo).
    # Approved in every mode; listed by the CLI as "read-only".
    reads_only: bool = False
    # May change the workspace. Without `runs_code`, it changes the file its `path` argument names
    # after checking the read-set (write, edit): path rules, protected paths and accept-edits apply,
    # and dispatch lets one such call run at a time per session (Session.writes).
    mutates: bool = False
    # Runs the command line its `command` argument holds (bash): the gate judges the line itself,
    # command by command (gate/shellparse.py, readonly.py, courtesy.py).
    runs_code: bool = False
    # Safe to run side by side with the other parallel calls of one reply: it touches nothing but
    # the read-set.
    parallel: bool = False
    # The workspace is snapshotted before a call, so that `abhed undo` can take it back.
    checkpoint: bool = False
    # Runs a subagent (task) whose own calls are each approved: it changes nothing itself. The task
    # calls of one reply run side by side, each subagent in a session branch of its own.
    spawns: bool = False
    # False: what it does is only its author's claim (an MCP server's tool): no mode allows it,
    # only an allow rule naming it or a human.
    known: bool = True

    @property
    def edits_files(self) -> bool:
        """Changes the file its `path` argument names (write, edit), as opposed to running code."""
        return self.mutates and not self.runs_code

    @property
    def kind(self) -> str:
        """A word for listings (`abhed tools`)."""
        if not self.known:
            return "unknown"
        return "read-only" if self.reads_only else "changes files"


# What an MCP tool declares: its server's hints are not trusted, so nothing is known.
UNKNOWN = Traits(known=False)

Lookup = Callable[[str], "Traits | None"]  # pragma: no mutate  (a type alias: nothing reads it at run time)
_installed: list[Lookup] = []  # the tool registry's lookup, once it is imported (at most one)


def install(lookup: Lookup) -> None:
    """Where `of` finds a tool's traits by name (the tool registry calls this once, on import)."""
    _installed[:] = [lookup]


def of(name: str) -> Traits | None:
    """The traits of the tool named `name`, or None when no installed registry knows it."""
    return _installed[0](name) if _installed else None  # pragma: no mutate  (installed on import: always, in the suite)
