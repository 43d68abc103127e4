"""Shared fixtures: a real workspace on disk, a private ABHED_HOME, and a way to make tool calls
exactly as the agent does (through dispatch, so every call is also persisted as events)."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
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


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A model endpoint whose host drops every connection attempt, as a host that is down or a
    firewall does: a real listening socket whose accept queue is full (listen(0) holds one
    connection, never accepted), so the kernel drops the SYNs of any further connect."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    filler = socket.create_connection(server.getsockname(), timeout=5)
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    finally:
        filler.close()
        server.close()


# Test files run side by side (pytest-xdist, `-n 2`: scripts/test). A group runs whole on one worker:
# each file is one, so its module fixtures are made once; the suites whose session fixtures are costly
# (the microVMs of tests/sandbox, the built binaries of tests/dist, the signed bundles) are one group
# each, so no second worker boots or builds them again. The longest groups are queued first, so the
# last minutes are not one worker alone on them. (xdist's own `loadgroup` marks do not group under
# pytest 9, which no longer reads a node's id from where xdist writes the group: hence a scheduler.)
_SHARED = {"sandbox": "tests/sandbox/", "dist": "tests/dist/", "bundle": "tests/test_bundle_"}
_LONGEST_FIRST = ("sandbox", "tests/test_checkpoint_races.py", "dist")


def _group(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return next((name for name, prefix in _SHARED.items() if path.startswith(prefix)), path)


def pytest_configure(config: pytest.Config) -> None:
    # A run started in the background by a script (`cmd &` in a non-interactive shell) inherits SIGINT
    # ignored, and Python then leaves it so: the Ctrl-C tests, in process and in the commands they
    # start (a handler is reset to the default at exec), would wait forever. Each xdist worker too.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--alone", choices=("with", "without", "only"), default="with",
                     help="the tests marked alone (a core kept busy): run them with the rest (the default), "
                          "leave them out, or run only them (scripts/test runs them last, by themselves)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = config.getoption("alone")
    if wanted != "with":
        chosen = {id(item) for item in items if (item.get_closest_marker("alone") is not None) == (wanted == "only")}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in chosen])
        items[:] = [item for item in items if id(item) in chosen]
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_group(item.nodeid), len(rank)))  # stable: file order kept within


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    config.option.loadscopereorder = False  # the queue in our order (longest first), not by test count
    return ByGroup(config, log)
