"""What tests/mcp shares beyond its fixtures: where the servers are (a module of its own, so that
`import` finds it whichever other conftest.py the run collects)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOSTILE = Path(__file__).resolve().parent / "hostile_server.py"
SERVERS = REPO / ".mcp-servers"
# The sandbox shows a stdio server only the system and the workspace: the Python that runs the tests
# (a pyenv or venv prefix, maybe) and the servers' install directories are bound read-only.
PYTHON = os.path.realpath(sys.executable)  # the interpreter itself, not a venv's link to it
PYTHON_PREFIX = Path(PYTHON).parents[1]


def installed(*parts: str) -> Path:
    """A file of the reference servers; a clear failure (not a skip) when the set-up was not run."""
    path = SERVERS.joinpath(*parts)
    if not path.exists():
        message = f"{path} is missing: run scripts/setup-mcp-servers (scripts/test runs it)."
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path
