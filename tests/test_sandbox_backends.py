"""A sandbox backend is one row of sandbox.backends.BACKENDS and its launcher (issue 35).

A scratch backend registered here, in the test, and nowhere else, is accepted by the operator's
settings, launched by the Sandbox, described and checked by `abhed doctor`, and read by every caller
that behaves differently per backend through its declared capabilities; a name not in the table is
a configuration error naming the known ones, at every door (settings, SandboxConfig, Sandbox), never
a fall-through to another backend.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

import sandbox
from sandbox import backends
from sandbox.backends import BACKENDS, Backend, Capabilities
from sandbox.launcher import NoneLauncher
from sandbox.box import sandboxed_alive

from abhed.cli import doctor
from abhed.files import rgjail, ripgrep
from abhed.gate.approval import undo_gap
from abhed.session import config
from abhed.session.sandboxing import backend_capabilities, sandbox_config

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = Capabilities(isolates=True, lingers=True, pipes=False, host_bwrap=False)
KNOWN = "backend must be one of bwrap, none, microvm; got"
events: list[str] = []


class ScratchLauncher(NoneLauncher):
    """A test backend: runs like `none`, says what was asked of it."""

    def __init__(self, config, workspace, environ, on_refusal):
        super().__init__(config, workspace, environ, on_refusal)
        events.append("launched")

    def prepare(self) -> None:
        events.append("prepare")

    def describe(self) -> list[str]:
        return ["scratch: a backend registered by a test"]

    def close(self) -> None:
        events.append("close")


def scratch_host(sandbox_config) -> tuple[list[str], list[str]]:
    """The scratch backend's host check: missing what `missing` says."""
    return (["no scratch device"], []) if events and events[-1] == "missing" else ([], ["scratch device present"])


@pytest.fixture
def scratch(monkeypatch):
    """Registers the scratch backend (its capabilities patched by the test if needed)."""
    events.clear()
    row = Backend(f"{__name__}:ScratchLauncher", SCRATCH, host_check=f"{__name__}:scratch_host")
    monkeypatch.setitem(BACKENDS, "scratch", row)

    def declare(**capabilities: bool) -> None:
        monkeypatch.setitem(BACKENDS, "scratch", replace(row, capabilities=replace(SCRATCH, **capabilities)))
    return declare


def settings_for(backend: str, **more):
    return config.load({"sandbox": {"backend": backend}, "model": {"endpoint": "http://127.0.0.1:9/v1"}, **more},
                       env={"ABHED_CONFIG": ""})


def test_a_registered_backend_is_launched_and_its_results_name_it(scratch, ws):
    with sandbox.Sandbox(sandbox_config(settings_for("scratch")), ws) as box:
        result = box.run("echo hi", cwd=ws, timeout_s=30)
        assert (result.exit_code, result.output, result.backend, result.sandboxed) == (0, "hi\n", "scratch", True)
        assert box.describe() == ["backend: scratch", f"workspace: {ws}", "scratch: a backend registered by a test"]
        assert sandboxed_alive()  # lingers: something of it may still write between commands
    assert events == ["launched", "prepare", "close"]
    assert not sandboxed_alive()


def test_doctor_runs_the_backends_host_check_and_probe_under_its_name(scratch, home):
    found = {check.name: check for check in doctor.checks(settings_for("scratch"))}
    assert (found["scratch"].status, found["scratch"].message) == ("OK", "scratch device present")
    assert (found["sandbox"].status, found["sandbox"].message) == ("OK", "scratch sandbox works")
    events.append("missing")
    assert doctor._host_check(settings_for("scratch")) == doctor.Check("FAIL", "scratch", "no scratch device")
    scratch(isolates=False)  # an unconfined backend: doctor warns, as for none
    assert doctor._sandbox(settings_for("scratch")).status == "WARN"
    assert "bwrap" not in {check.name for check in doctor.checks(settings_for("bwrap"))}  # no host check: no line


def test_an_unconfined_backend_is_told_by_every_caller(scratch, ws, tmp_path):
    scratch(isolates=False)
    settings = settings_for("scratch")
    assert not backend_capabilities(settings).isolates
    assert undo_gap(settings, True) == 'sandbox.backend = "scratch" confines nothing'
    with sandbox.Sandbox(sandbox_config(settings), ws) as box:
        result = box.run("true", cwd=ws, timeout_s=30)
        assert not result.sandboxed and result.warning == sandbox.UNSANDBOXED_WARNING
        assert box.take_changes() is None  # no guard: nothing watches the workspace
    from abhed.mcp.gateway import Server
    settings = settings_for("scratch", mcp={"servers": {"jira": {"command": ["/opt/jira-mcp"]}}})
    server = Server("jira", settings.mcp.servers["jira"], {}, settings, tmp_path)
    assert server.describe() == ("stdio `/opt/jira-mcp` WITHOUT a sandbox (sandbox.backend scratch), with the host's "
                                 "whole network")
    scratch(isolates=True)
    assert undo_gap(settings_for("scratch"), True) is None


def test_a_backend_without_pipes_refuses_a_server(scratch, ws, tmp_path):
    with sandbox.Sandbox(sandbox.SandboxConfig(backend="scratch"), ws) as box:
        with pytest.raises(sandbox.BackendUnavailable) as caught:
            box.start_server("cat", cwd=ws, stdin_fd=0, stdout_fd=1, log_path=tmp_path / "server.log")
        assert box.jobs() == () and not (tmp_path / "server.log").exists()
    assert str(caught.value) == ("backend 'scratch' cannot run a server over pipes (its stdin and stdout): the server "
                                 "was not started. Run this server with a sandbox backend that can (bwrap), or use the "
                                 "program another way.")


def test_only_a_backend_that_declares_host_bwrap_gets_the_grep_jail(scratch, tmp_path):
    rg = ripgrep.find_rg()
    root, home = tmp_path / "ws", tmp_path / "home"
    root.mkdir()

    def jail():
        return rgjail.jail_for(rg, root, backend="scratch", bwrap_path=None, writable=(root,), home=home)
    assert jail() is None  # rg reads descriptors instead
    scratch(host_bwrap=True)
    if rgjail._broken:
        pytest.skip(f"bwrap cannot make rg's view on this host: {rgjail._broken[0]}")
    assert jail() is not None


def test_an_unknown_name_is_refused_at_every_door_naming_the_known_ones(ws, home):
    with pytest.raises(config.ConfigError, match=f"sandbox.backend: Value error, {KNOWN} 'scratch'"):
        settings_for("scratch")
    with pytest.raises(sandbox.ConfigError, match=f"{KNOWN} 'docker'"):
        sandbox.SandboxConfig(backend="docker")
    # A configuration whose name is not (or no longer) in the table: the Sandbox refuses it too,
    # before launching anything (it used to build a microvm for any name it did not know).
    unknown = sandbox.SandboxConfig()
    object.__setattr__(unknown, "backend", "docker")
    with pytest.raises(sandbox.ConfigError, match=f"{KNOWN} 'docker'"):
        sandbox.Sandbox(unknown, ws)
    with pytest.raises(sandbox.ConfigError, match=f"{KNOWN} None"):
        backends.lookup(None)


def test_a_registered_name_joins_the_known_ones(scratch):
    with pytest.raises(sandbox.ConfigError, match="one of bwrap, none, microvm, scratch; got 'docker'"):
        sandbox.SandboxConfig(backend="docker")
    assert backends.names() == ("bwrap", "none", "microvm", "scratch")


def test_the_table_declares_what_callers_used_to_infer_from_the_names():
    declared = {name: BACKENDS[name].capabilities for name in ("bwrap", "none", "microvm")}  # a new row: no edit here
    assert declared == {
        "bwrap": Capabilities(isolates=True, lingers=False, pipes=True, host_bwrap=True),
        "none": Capabilities(isolates=False, lingers=False, pipes=True, host_bwrap=False),
        "microvm": Capabilities(isolates=True, lingers=True, pipes=False, host_bwrap=False),
    }
    assert [BACKENDS[name].host_check for name in ("bwrap", "none", "microvm")] == [None, None, "sandbox.microvm:check_host"]


# A comparison of a backend's name with one of the table's names: what a caller reads from the
# capabilities instead (a new backend would have to find and edit each such line).
NAME_TEST = re.compile(r"""backend\w*\)?\s*(?:[!=]=|\bin\b)\s*\(?["'](?:bwrap|none|microvm)["']"""
                       r"""|["'](?:bwrap|none|microvm)["']\s*(?:[!=]=|\bin\b)\s*\w*\.?backend""")


def test_no_caller_tells_backends_apart_by_name():
    found = []
    for path in sorted([*(ROOT / "abhed").rglob("*.py"), *(ROOT / "sandbox").rglob("*.py")]):
        if path == ROOT / "sandbox" / "backends.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if NAME_TEST.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, ("These lines tell sandbox backends apart by name; read what the backend declares instead "
                       "(sandbox.backends.capabilities(name), or a new Capabilities field):\n" + "\n".join(found))


def name_lists(tree: ast.AST) -> list[int]:
    """Lines of tuples, lists, sets and dict keys written in the source whose strings are two or more
    of the table's names and nothing else (a Literal of them, a tuple to test membership in)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [key for key in node.keys if key is not None]
        else:
            continue
        strings = [item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)]
        if len(set(strings)) >= 2 and set(strings) <= {"bwrap", "none", "microvm"}:
            found.append(node.lineno)
    return found


def test_no_module_lists_the_backends_but_the_table():
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted([*(ROOT / "abhed").rglob("*.py"),
                                                                   *(ROOT / "sandbox").rglob("*.py")])
             if path != ROOT / "sandbox" / "backends.py" for line in name_lists(ast.parse(path.read_text()))]
    assert not found, ("These lines list sandbox backends by name; take the names from sandbox.backends.BACKENDS "
                       "(lookup, names) instead:\n" + "\n".join(found))


def test_the_name_test_sees_a_comparison():
    for line in ('if settings.sandbox.backend == "microvm":', 'if config.backend != "none":',
                 'return "none" == box.backend', 'if backend in ("bwrap", "microvm"):'):
        assert NAME_TEST.search(line), line
    assert not NAME_TEST.search('if ctx.settings.search.backend == "rg":')
    tree = ast.parse('backend: Literal["bwrap", "none", "microvm"]\nok = x in ("none", "bwrap")\n'
                     'argv = ["-M", "microvm", "-display", "none"]')
    assert name_lists(tree) == [1, 2]


def test_the_microvm_launcher_refuses_pipes_itself_before_booting(ws):
    """Sandbox.start_server refuses first (pipes=False); the launcher does not rely on it."""
    from sandbox import microvm
    missing = microvm.missing_requirements()
    if missing:
        pytest.skip(f"the microvm backend cannot be built here: {'; '.join(missing)}")
    launcher = microvm.MicrovmLauncher(sandbox.SandboxConfig(backend="microvm"), ws, os.environ, lambda message: None)
    try:
        with pytest.raises(sandbox.BackendUnavailable, match="cannot hand a command the caller's pipes; nothing was started"):
            launcher.spawn("cat", cwd=ws, out_fd=1, report_cwd=False, in_fd=0)
        assert launcher._vm is None  # refused before any boot
    finally:
        launcher.close()
