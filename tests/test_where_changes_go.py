"""docs/architecture.md's "Where a change goes" stays true (issue 35).

The section is read as data: a `### ` heading per kind of change, a `Touches:` list of paths. Every
path named exists (`<name>` as an existing example). For a tool, a scratch `ls` is registered the way
the entry says (its module under abhed/tools/, its line in CLASSES) and nothing else: it must then be
approved by its traits alone, run side by side with other read-only calls, listed by the CLI with its
kind and given to the model; and no module outside the named files may keep a list of tool names.
For a model family and an MCP transport, what the entry names is the only place that knows them.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
import sys
import threading
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from pydantic import Field

from abhed import tools as registry
from abhed.agent import dispatch
from abhed.agent.loop import Agent, Budget, Limits, batches
from abhed.cli.commands import main
from abhed.common.traits import UNKNOWN, Traits
from abhed.files.paths import PathPolicy
from abhed.gate.approval import Gate, Policy
from abhed.model.connect import connect
from abhed.model.replay import ReplayServer, Turn
from abhed.session import config
from abhed.session.store import SessionStore
from abhed.tools.base import Tool, ToolContext, ToolInput, ToolResult, ok
from abhed_testing import REPO, Tools

DOC = REPO / "docs" / "architecture.md"
SECTION = "## Where a change goes"
# An existing instance of each kind, for the paths named with <name>.
EXAMPLES = {"A tool": "read", "A model family": "devstral", "A tool-call format": "hermes", "A sandbox backend": "microvm",
            "An MCP transport": "http"}


def entries() -> dict[str, list[str]]:
    """The section's entries: heading -> the paths its `Touches:` list names ([] when it has none)."""
    text = DOC.read_text(encoding="utf-8")
    assert SECTION + "\n" in text, f"docs/architecture.md has no {SECTION!r} section"
    body = text.split(SECTION + "\n", 1)[1].split("\n## ", 1)[0]
    found: dict[str, list[str]] = {}
    for block in body.split("\n### ")[1:]:
        heading, _, rest = block.partition("\n")
        touches = rest.split("Touches:\n", 1)[1].split("\n\n", 1)[0] if "Touches:\n" in rest else ""
        found[heading.strip()] = re.findall(r"^- `([^`]+)`", touches, re.M)
        if not found[heading.strip()]:
            assert "TODO(issue 35)" in rest or heading.strip() not in EXAMPLES, heading
    return found


def test_the_section_names_the_kinds_of_change_and_files_that_exist():
    found = entries()
    assert {"A tool", "A model family", "A tool-call format", "A sandbox backend", "An MCP transport"} <= set(found)
    for heading, paths in found.items():
        for path in paths:
            real = path.replace("<name>", EXAMPLES.get(heading, "<name>"))
            assert "<name>" not in real, f"{heading}: {path} needs an example name in EXAMPLES"
            assert (REPO / real).exists(), f"{heading}: {path} ({real}) does not exist"


# -- a tool -------------------------------------------------------------------------------------


class LsInput(ToolInput):
    path: str = Field(description="The absolute path of the directory to list.")


class Ls(Tool):
    """A scratch tool: the names in a directory. It declares only what it does."""

    name = "ls"
    description = "List the names in a directory. Use it to see what a directory holds."
    Input = LsInput
    traits = Traits(reads_only=True, parallel=True)
    example = {"path": "WORKSPACE"}

    def run(self, args: LsInput, ctx: ToolContext) -> ToolResult:
        return ok("\n".join(sorted(os.listdir(ctx.resolve(args.path)))))


@pytest.fixture
def scratch(monkeypatch: pytest.MonkeyPatch) -> Tool:
    """`ls` registered as the tool entry says: a module under abhed/tools/ and its line in CLASSES."""
    module = types.ModuleType("abhed.tools.scratch_ls")
    module.Ls = Ls  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "abhed.tools.scratch_ls", module)
    monkeypatch.setitem(registry.CLASSES, "ls", "scratch_ls.Ls")
    return registry.BY_NAME["ls"]


def test_a_tool_nobody_registered_is_asked_about(tmp_path):
    assert Policy.create("auto", [], [], tmp_path).check("ls", SimpleNamespace()).reason == "no rule covers the tool ls"


def test_a_registered_read_only_tool_is_approved_by_its_traits_in_every_mode(scratch, tmp_path):
    for mode in ("ask", "plan", "accept-edits", "auto"):
        verdict = Policy.create(mode, [], [], tmp_path).check("ls", SimpleNamespace(path=str(tmp_path)))
        assert (verdict.decision, verdict.rule) == ("allow", "read-only"), mode
    denied = Policy.create("auto", [], ["ls"], tmp_path).check("ls", SimpleNamespace(path=str(tmp_path)))
    assert denied.decision == "deny"  # the operator's deny rules name it as any tool


def test_dispatch_runs_it_in_auto_mode_without_a_checkpoint(scratch, ws, home):
    (ws / "b").write_text("")
    (ws / "a").mkdir()
    tools = Tools(ws, home, gate=Gate(Policy.create("auto", [], [], ws)))
    result = tools("ls", path=str(ws))
    assert not result.is_error and result.content == "a\nb"
    assert result.metadata["approval"]["rule"] == "read-only" and "checkpoint" not in result.metadata
    assert not dispatch.changes_workspace("ls", SimpleNamespace(path=str(ws)))


def test_calls_are_grouped_by_their_traits(scratch):
    def call(name: str) -> SimpleNamespace:
        return SimpleNamespace(name=name)

    calls = [call(n) for n in ("ls", "read", "grep", "bash", "ls", "task", "task", "plan", "nosuch", "ls")]
    grouped = [[c.name for c in batch] for batch in batches(calls, registry.native_traits)]  # type: ignore[arg-type]
    assert grouped == [["ls", "read", "grep"], ["bash"], ["ls"], ["task", "task"], ["plan"], ["nosuch"], ["ls"]]


def test_the_model_is_given_it_and_its_calls_run_side_by_side_with_reads(scratch, ws, home, monkeypatch):
    (ws / "f").write_text("f\n")
    barrier = threading.Barrier(3, timeout=60)  # only three calls running at once get past it
    for tool in (scratch, registry.BY_NAME["read"]):
        real = tool.run
        monkeypatch.setattr(tool, "run", lambda args, ctx, real=real: (barrier.wait(), real(args, ctx))[1])
    turns = [Turn(calls=[("ls", {"path": str(ws)}), ("read", {"path": str(ws / "f")}), ("ls", {"path": str(ws)})]),
             Turn(text="done")]
    settings = config.load({}, env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
    with ReplayServer(turns) as server:
        ctx = ToolContext(SessionStore(home).create(ws), settings, PathPolicy.create(ws))
        agent = Agent(ctx, connect(server.url, backoff_s=0, profile="generic"), Gate(Policy.create("auto", [], [], ws)),
                      Budget(Limits(turns=5)))
        assert agent.run("What is here?").answer == "done"
    assert "ls" in [t["function"]["name"] for t in server.requests[0]["tools"]]
    results = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert results == ["f", "     1\tf", "f"]  # run side by side, answered in the order called


def test_the_cli_lists_it_with_its_kind(scratch, home):
    out = CliRunner().invoke(main, ["tools"])
    assert out.exit_code == 0, out.output
    line = next(line for line in out.output.splitlines() if line.split()[0] == "ls")
    assert line.split()[1] == "read-only" and "List the names in a directory." in line
    listed = CliRunner().invoke(main, ["tools", "--json"])
    assert '"name": "ls"' in listed.output


def test_traits_of_the_native_tools_and_mcp():
    by_name = {name: registry.BY_NAME[name].traits for name in registry.BY_NAME}
    assert by_name["bash"].runs_code and by_name["bash"].checkpoint and not by_name["read"].mutates
    assert by_name["task"].spawns and not by_name["task"].mutates and by_name["task"].kind == "changes files"
    from abhed.mcp.gateway import McpTool
    assert McpTool.traits == UNKNOWN and not UNKNOWN.known and UNKNOWN.kind == "unknown"
    assert [name for name, traits in by_name.items() if traits.edits_files] == ["write", "edit"]  # bash runs code
    from abhed.tools.bash import BashInput
    bash = registry.BY_NAME["bash"]
    assert not bash.call_traits(BashInput(command="ls -la", description="List")).checkpoint  # the tool's refinement
    assert bash.call_traits(BashInput(command="rm -f x", description="Remove x")).checkpoint


def test_a_tool_of_unknown_effect_needs_a_rule_naming_it_or_a_human_in_every_mode(tmp_path):
    """What an MCP tool declares (UNKNOWN): not read-only, whatever it is called."""
    args = SimpleNamespace(path=str(tmp_path / "a"))
    for mode in ("ask", "accept-edits", "auto"):
        for name in ("mcp__jira__create_issue", "read"):  # a native name with unknown traits is not trusted either
            verdict = Policy.create(mode, [], [], tmp_path).check(name, args, UNKNOWN)
            assert verdict.decision == "ask", (mode, name, verdict)
    assert Policy.create("plan", [], [], tmp_path).check("mcp__jira__x", args, UNKNOWN).decision == "deny"
    allowed = Policy.create("auto", ["mcp__jira__*"], [], tmp_path).check("mcp__jira__x", args, UNKNOWN)
    assert allowed.decision == "allow" and allowed.rule == "allow: mcp__jira__*"


def _touched(heading: str) -> list[str]:
    return [path.replace("<name>", "*") for path in entries()[heading]]


def _named(path: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(path, pattern) for pattern in patterns)


def _sources() -> list[tuple[str, ast.AST]]:
    out = []
    for path in sorted((REPO / "abhed").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        out.append((rel, ast.parse(path.read_text(encoding="utf-8"), rel)))
    return out


def _literal_lists(tree: ast.AST, names: set[str]) -> list[tuple[int, list[str]]]:
    """Sets, tuples, lists and dict keys written in the source that hold two or more of `names`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        strings = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
        hits = [s for s in strings if s in names]
        if len(set(hits)) >= 2:
            found.append((node.lineno, hits))
    return found


# Lists that hold tool names but are not about tools, each with why.
NOT_TOOLS = {("abhed/cli/slash.py", frozenset({"plan", "todo"})):
             "chat's slash commands: /plan and /todo show the session's plan and todos"}


def test_no_module_outside_the_tool_entry_keeps_a_list_of_tool_names():
    named = _touched("A tool")
    names = set(registry.CLASSES)
    offenders = [f"{rel}:{line} {hits}" for rel, tree in _sources() if not _named(rel, named)
                 for line, hits in _literal_lists(tree, names) if (rel, frozenset(hits)) not in NOT_TOOLS]
    assert offenders == [], ("these modules list built-in tools by name; read the tool's traits instead "
                             f"(abhed/common/traits.py), or name the file in docs/architecture.md: {offenders}")


def test_the_scan_finds_a_list_of_tool_names():
    tree = ast.parse('PARALLEL = frozenset({"read", "glob"})\nok = ("read", "cat")\nTABLE = {"edit": 1, "write": 2}')
    assert sorted(line for line, _ in _literal_lists(tree, set(registry.CLASSES))) == [1, 3]


# -- a model family -----------------------------------------------------------------------------


def test_a_model_family_is_its_profile_file_alone():
    from abhed.model.profiles import parse, profile_files
    files = profile_files()
    names = set()
    for file, text in files:
        profile = parse(file, text)
        assert file == f"{profile.name}.toml", f"offline_models/{file} names the profile {profile.name!r}"
        names.add(profile.name)
    named = _touched("A model family")
    offenders = [f"{rel}:{line} {hits}" for rel, tree in _sources() if not _named(rel, named)
                 for line, hits in _literal_lists(tree, names)]
    assert offenders == [], f"these modules list model profiles by name: {offenders}"


# -- an MCP transport ---------------------------------------------------------------------------


def test_an_mcp_transport_is_known_only_where_the_entry_says():
    from abhed.mcp.client import Connection
    transports = {cls.__name__ for cls in Connection.__subclasses__()}
    assert {"StdioConnection", "HttpConnection"} <= transports
    named = [path for path in _touched("An MCP transport") if path.endswith(".py")]
    users = {rel for rel, tree in _sources() for node in ast.walk(tree)
             if isinstance(node, ast.Name | ast.alias) and getattr(node, "id", getattr(node, "name", "")) in transports}
    assert users and all(_named(rel, named) for rel in users), users
