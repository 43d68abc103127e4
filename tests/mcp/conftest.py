"""A site for the gateway's tests: an operator config directory (config.toml, mcp-pins.json), a
session store, a workspace, and the MCP servers: the hostile one of tests/mcp and the reference
servers others wrote, installed by scripts/setup-mcp-servers into .mcp-servers/ (git-ignored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from abhed.session import config

from mcp_helpers import HOSTILE, PYTHON, PYTHON_PREFIX


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (str, Path)):
        return json.dumps(str(value))
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


@dataclass
class Site:
    root: Path
    workspace: Path
    home: Path
    config_dir: Path
    control: Path  # the hostile server's control directory

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.toml"

    @property
    def pins_file(self) -> Path:
        return self.config_dir / "mcp-pins.json"

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "ABHED_HOME": str(self.home), "ABHED_CONFIG": str(self.config_file), **extra}

    def configure(self, servers: dict[str, dict[str, Any]], extra: str = "") -> None:
        lines = [extra] if extra else []
        for name, entry in servers.items():
            lines.append(f"[mcp.servers.{name}]")
            lines += [f"{key} = {toml_value(value)}" for key, value in entry.items()]
        self.config_file.write_text("\n".join(lines) + "\n")
        self.config_file.chmod(0o600)

    def hostile(self, **entry: Any) -> dict[str, Any]:
        return {"command": [PYTHON, str(HOSTILE), str(self.control)],
                "read_only": [str(HOSTILE.parent), str(PYTHON_PREFIX), str(self.control)], **entry}

    def settings(self) -> config.Settings:
        return config.load(env={"ABHED_HOME": str(self.home), "ABHED_CONFIG": str(self.config_file)})

    def abhed(self, *args: str, input: str | None = None, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "abhed", *args], capture_output=True, text=True,
                              env=self.env(**env), cwd=self.workspace, input=input, timeout=timeout)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    root = tmp_path.resolve()
    made = Site(root, root / "ws", root / "home", root / "etc-abhed", root / "control")
    for path in (made.workspace, made.config_dir, made.control):
        path.mkdir(mode=0o700)
    monkeypatch.setenv("ABHED_HOME", str(made.home))
    monkeypatch.setenv("ABHED_CONFIG", str(made.config_file))
    return made
