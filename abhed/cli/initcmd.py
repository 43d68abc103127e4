"""Chat's `/init`: the model surveys the repository and writes a first AGENTS.md.

The file is written by the model through the write tool, so it is checkpointed, shown as a diff,
approved (or not) and undoable like any other write; nothing here writes a file. When AGENTS.md
exists, /init says so and changes nothing; `/init improve` asks the model to review it and edit
what is wrong or missing instead.
"""

from __future__ import annotations

import os
from pathlib import Path

SURVEY = (
    "Survey this repository and write a first AGENTS.md for it, at {path}, with the write tool. AGENTS.md is what "
    "coding agents (you, and others) read before working here. Look before you write: the top-level layout, the "
    "build and package files, the README, the test setup, the CI configuration. Then write, concisely (under about "
    "120 lines, markdown):\n"
    "- what the project is, in two or three sentences;\n"
    "- how to build it, run it, and run the tests (the exact commands, including how to run one test);\n"
    "- the layout: the main directories and what lives in each;\n"
    "- the conventions you can see (style, naming, how errors are handled, how commits are made) and anything "
    "surprising a newcomer must know.\n"
    "Write only what you found in the repository; never invent a command. Then say in a line or two what you wrote.")
IMPROVE = (
    "Read {path} and check it against the repository as it is now (the layout, the build, test and CI files). "
    "Edit it with the edit tool where it is wrong, stale or missing something an agent working here needs (exact "
    "commands, the layout, conventions). Keep it concise; keep what is still true. Then say what you changed.")


def request(workspace: Path, argument: str) -> tuple[str | None, str | None]:
    """(the prompt for the model, None), or (None, why /init does nothing)."""
    path = workspace / "AGENTS.md"
    exists = os.path.lexists(path)
    words = argument.split()
    if words not in ([], ["improve"]):
        return None, "use /init (write a first AGENTS.md) or /init improve (review the existing one)"
    if words == ["improve"]:
        if not exists:
            return None, f"there is no {path} to improve yet: /init writes a first one"
        return IMPROVE.format(path=path), None
    if exists:
        return None, (f"{path} exists already, so /init changed nothing. /init improve asks the model to review it "
                      "and fix what is stale or missing.")
    return SURVEY.format(path=path), None
