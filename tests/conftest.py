"""Shared fixtures: a real workspace on disk, a private ABHED_HOME, and a way to make tool calls
exactly as the agent does (through dispatch, so every call is also persisted as events)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from abhed_testing import Tools

# A submission lands on one CI run: there the fuzz tests replay the same examples every time (a
# failure is then reproducible, never luck), while developers' runs keep exploring new ones.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "abhed-home"
    monkeypatch.setenv("ABHED_HOME", str(path))
    monkeypatch.setenv("ABHED_CONFIG", "")  # no config file
    for name in ("ABHED_ALLOWED_ROOTS", "ABHED_CREATE_PARENTS", "ABHED_NEW_FILE_MODE", "ABHED_MODE",
                 "ABHED_GREP_BACKEND", "ABHED_SANDBOX", "ABHED_CHECKPOINTS"):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path.resolve()


@pytest.fixture
def tools(ws: Path, home: Path):
    made = Tools(ws, home)
    yield made
    made.ctx.close()  # stops the sandbox and any background job, as a session's end does


@pytest.fixture
def make_tools(ws: Path, home: Path):
    made: list[Tools] = []

    def make(**files: Any) -> Tools:
        made.append(Tools(ws, home, files))
        return made[-1]
    yield make
    for t in made:
        t.ctx.close()
