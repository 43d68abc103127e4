"""Helpers shared by the test modules: calling tools in-process as the agent does, and running the
real `abhed` command line. (Not in conftest.py: tests/sandbox has a conftest of its own, and
`from conftest import` would be ambiguous.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from abhed.session import config
from abhed.agent import dispatch
from abhed.gate.approval import Gate, Policy
from abhed.files.paths import PathPolicy
from abhed.session.store import SessionStore
from abhed.tools.base import ToolContext, ToolResult

REPO = Path(__file__).resolve().parent.parent


class Tools:
    """Calls tools in one session, as the agent loop would."""

    def __init__(self, ws: Path, home: Path, files: dict[str, Any] | None = None, roots: list[Path] | None = None,
                 gate: Gate | None = None):
        flags: dict[str, Any] = {"files": files or {}}
        if roots is not None:
            flags["allowed_roots"] = [str(r) for r in roots]
        self.settings = config.load(flags, env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
        self.session = SessionStore(home).create(ws)
        self.ctx = ToolContext(self.session, self.settings, PathPolicy.create(ws, self.settings.allowed_roots))
        self.ws = ws
        # By default a person at the keyboard running each call by hand, edits allowed, confirming
        # what the approval check cannot see through (--confirm): the approval layer has tests of
        # its own (test_approval*.py).
        self.gate = gate or Gate(Policy.create("accept-edits", [], [], ws), invoked_by_human=True, confirmed=True)

    def __call__(self, name: str, raw: str | None = None, **args: Any) -> ToolResult:
        return dispatch.call(self.ctx, name, raw if raw is not None else json.dumps(args), self.gate)

    def ok(self, name: str, **args: Any) -> str:
        result = self(name, **args)
        assert not result.is_error, result.content
        return result.content

    def err(self, name: str, **args: Any) -> str:
        result = self(name, **args)
        assert result.is_error, result.content
        return result.content


def abhed(*args: str, input: str | None = None, env: dict[str, str] | None = None, cwd: Path | None = None,
          obey_permissions: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real `abhed` command line in a child process.

    `obey_permissions`: drop root's power to bypass file permissions (CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH), so a permission-denied case is real even when the tests run as root.
    """
    cmd = [sys.executable, "-m", "abhed", *args]
    if obey_permissions and os.geteuid() == 0:
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]
    return subprocess.run(cmd, input=input, capture_output=True, text=True, env={**os.environ, **(env or {})},
                          cwd=cwd, timeout=120)


