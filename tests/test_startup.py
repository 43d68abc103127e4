"""Start-up stays cheap: a light command does not import what only other commands need (issue 18).

Each command runs in a child process with `python -X importtime`; afterwards its `sys.modules` is
compared with what it must not load, and a failure names the chain of imports that pulled a heavy
module in, so the fix (import it inside the command or function that needs it) is plain. Times
are measured by benchmarks/launch_bench.py, never here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from abhed.tools import CLASSES

# Third-party packages and our own parts that cost real time to load, and which command needs them.
UI = ("rich", "prompt_toolkit", "abhed.cli.display", "abhed.cli.chat")
MODEL = ("httpx", "abhed.model", "abhed.agent.loop")
SHELL = ("tree_sitter", "tree_sitter_bash")
SANDBOX = ("sandbox.launcher", "sandbox.box", "sandbox.microvm", "sandbox.probe", "sandbox.config")
SEARCH = ("fallback_grep", "rapidfuzz")
MEDIA = ("PIL", "pypdf", "cryptography")
OTHER_TOOLS = tuple(f"abhed.tools.{where.rpartition('.')[0]}" for name, where in CLASSES.items() if name != "read")

# Runs a command as the console script does, then writes what it left in sys.modules.
DRIVER = """
import gc, json, sys
out = sys.argv[1]
sys.argv = ["abhed", *sys.argv[2:]]
from abhed.cli.commands import main
try:
    main()
except SystemExit as exc:
    code = exc.code
with open(out, "w") as handle:
    json.dump({"code": code, "modules": sorted(name for name, module in sys.modules.items()
                                               if getattr(module, "__spec__", None) is not None),
               "gc": {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}},
              handle)  # no spec: a module marked absent (None), or placed, not imported (abhed/__init__.py)
"""


def loaded(tmp_path: Path, *args: str) -> tuple[set[str], dict[str, str]]:
    """The modules `abhed ARGS` imported, and each one's importer (from -X importtime's tree)."""
    out = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", DRIVER, str(out), *args], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    result = json.loads(out.read_text())
    assert result["code"] in (0, None), proc.stderr[-2000:]
    return set(result["modules"]), importers(proc.stderr)


def importers(report: str) -> dict[str, str]:
    """module -> the module whose import imported it. -X importtime prints a module after the modules
    it imported (post-order), each level indented two more spaces: the parent is the next line up a level."""
    rows = []
    for line in report.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1]
            rows.append((len(name) - len(name.lstrip()), name.strip()))
    parent: dict[str, str] = {}
    for index, (depth, name) in enumerate(rows):
        above = next((other for d, other in rows[index + 1:] if d < depth), None)
        parent.setdefault(name, above or "(top level, or a command as it runs)")
    return parent


def chain(module: str, parent: dict[str, str]) -> str:
    links = [module]
    while links[-1] in parent and len(links) < 30:
        links.append(parent[links[-1]])
    return " <- ".join(links)


def heavy(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden))


def assert_light(tmp_path: Path, forbidden: tuple[str, ...], *args: str) -> set[str]:
    modules, parent = loaded(tmp_path, *args)
    found = heavy(modules, forbidden)
    roots = [m for m in found if not any(m.startswith(other + ".") for other in found)]
    assert not roots, (f"`abhed {' '.join(args)[:60]}` imported {', '.join(roots)}, which it does not need; "
                       "import each inside the command or function that uses it. Chains (imported <- by):\n"
                       + "\n".join(chain(m, parent) for m in roots))
    return modules


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("tool", "--help")])
def test_version_and_help_load_click_and_the_command_line_alone(tmp_path, args):
    assert_light(tmp_path, ("pydantic", "pydantic_core", "abhed.session", "abhed.tools", "abhed.agent", "abhed.files",
                            "abhed.gate.approval", "sandbox", *UI, *MODEL, *SHELL, *SEARCH, *MEDIA), *args)


# What a call that only reads a text file does without: the checkpoint module (only a call that may
# change the workspace is snapshotted), the readers of PDFs and images (loaded with the first one),
# the egress proxy (only an allow-list in the config is parsed by it).
READ_ONLY_CALL = ("abhed.session.checkpoint", "abhed.tools.media", "abhed.files.pdf", "abhed.files.images",
                  "sandbox.egress")
# What pydantic would load to look for plugins (abhed/__init__.py gives it a loader that finds none),
# and what only an error, a mistyped config key or an existing config file needs (there is none here).
PLUGIN_SCAN = ("importlib.metadata", "zipfile", "email")
RARE = ("traceback", "difflib", "tomllib", "socket")
# What the approval layer needs only to judge a bash line, a path rule or a file tool's path: a
# read-only tool is allowed by its name alone.
SHELL_CHECKS = ("abhed.gate.shellparse", "abhed.gate.shellscan", "abhed.gate.wrappers", "abhed.gate.jobs",
                "abhed.gate.courtesy", "abhed.gate.readonly", "abhed.gate.protected", "abhed.files.globpattern", "shlex")
# What sandbox.protect needs only to plan a sandbox's mounts: the config and the approval layer read its rule.
SANDBOX_MOUNTS = ("sandbox.hostview",)


def test_tool_read_loads_the_read_tool_and_not_the_rest(tmp_path, ws, home):
    (ws / "f.txt").write_text("hi\n")
    modules = assert_light(tmp_path, (*UI, *MODEL, *SHELL, *SANDBOX, *SEARCH, *MEDIA, *OTHER_TOOLS, *READ_ONLY_CALL,
                                       *PLUGIN_SCAN, *RARE, *SHELL_CHECKS, *SANDBOX_MOUNTS),
                           "tool", "read", json.dumps({"path": str(ws / "f.txt")}), "--workspace", str(ws))
    assert "abhed.tools.read" in modules  # the check above saw a real run, not an early exit


# A package installed beside Abhed that registers a pydantic plugin (an entry point in the group
# "pydantic"): its module writes a file when imported, i.e. when pydantic loads it.
PLUGIN_PACKAGE = {
    "planted_plugin.py": "import pathlib, os\npathlib.Path(os.environ['PLANTED_MARK']).write_text('ran')\n"
                         "class Plugin:\n    def new_schema_validator(self, *args, **kwargs):\n"
                         "        return None, None, None\nplugin = Plugin()\n",
    "planted-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: planted\nVersion: 1.0\n",
    "planted-1.0.dist-info/entry_points.txt": "[pydantic]\nplanted = planted_plugin:plugin\n",
}


@pytest.mark.parametrize("through_abhed", [True, False])
def test_a_pydantic_plugin_installed_beside_abhed_never_runs(tmp_path, through_abhed):
    """Abhed's models are built without pydantic's plugin scan: no code of a package's entry point
    runs in the agent (and start-up skips importlib.metadata). Without Abhed the same plugin does run
    (the control: the planted package is one pydantic would load)."""
    for name, text in PLUGIN_PACKAGE.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    mark = tmp_path / "plugin-ran"
    first = "import abhed.session.events\n" if through_abhed else ""
    code = first + "import sys, pydantic\nclass M(pydantic.BaseModel):\n    x: int\nprint(M(x=1).x, 'importlib.metadata' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path), "PLANTED_MARK": str(mark)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == (["1", "False"] if through_abhed else ["1", "True"])
    assert mark.exists() is not through_abhed


def test_tool_read_of_a_missing_file_still_suggests_paths(tmp_path, ws, home):
    """The fuzzy matcher loads only when a path is missing, and then does its work."""
    (ws / "notes.txt").write_text("hi\n")
    modules = assert_light(tmp_path, (*UI, *MODEL, *SHELL, *SANDBOX, "fallback_grep"),
                           "tool", "read", json.dumps({"path": str(ws / "nots.txt")}), "--workspace", str(ws))
    assert "rapidfuzz" in modules


def test_sessions_list_does_not_load_the_agent(tmp_path, home):
    assert_light(tmp_path, (*UI, *MODEL, *SHELL, *SANDBOX, *SEARCH, *MEDIA, "abhed.tools"), "sessions", "list")


def test_chat_starts_without_what_only_a_turn_needs(tmp_path, ws, home):
    """A chat needs the model client, the display and every tool's definition before its prompt;
    not the shell grammar (first bash line), the fuzzy matcher (first miss), markdown (first
    reply), images and PDFs (first one read), task's prompt check (first subagent), httpx's CLI,
    pathspec (the first gitignore line that needs it)."""
    from abhed.model.replay import ReplayServer, Turn
    with ReplayServer([Turn(text="unused")]) as server:
        modules = assert_light(tmp_path, (*SHELL, *SEARCH[1:], *MEDIA, "markdown_it", "pygments", "httpx._main",
                                          "pathspec", "abhed.tools.selfcontained", "abhed.files.nearest",
                                          "abhed.conformance"),
                               "chat", "--endpoint", server.url, "--workspace", str(ws))
    assert {"httpx", "rich", "abhed.agent.loop", "abhed.tools.bash"} <= modules  # it did start a chat
    # Start-up collected garbage rarely; once the session was ready, its objects were frozen and
    # collection went back to the interpreter's thresholds for the session's work.
    from abhed.cli import startup
    collector = json.loads((tmp_path / "modules.json").read_text())["gc"]
    assert tuple(collector["threshold"]) == startup.DEFAULT and collector["frozen"] > 10_000


# Runs `abhed chat` as the console script does, writing sys.modules at the moment its prompt is drawn
# (the chat's `drawn` hook: prompt_toolkit calls it once the prompt is on the screen).
PROMPT_DRIVER = """
import json, sys
out = sys.argv[1]
sys.argv = ["abhed", *sys.argv[2:]]
from abhed.cli import chat
start = chat.Pending.start
def start_noting(self):
    if self._thread is None:
        with open(out, "w") as handle:
            json.dump(sorted(sys.modules), handle)
    start(self)
chat.Pending.start = start_noting
from abhed.cli.commands import main
main()
"""


def chat_on_a_terminal(tmp_path: Path, *args: str) -> tuple[set[str], bytes]:
    """`abhed chat ARGS` on a pseudo-terminal until the session's line is printed above its prompt:
    the modules loaded when the prompt was drawn, and what the terminal showed."""
    import os
    import pty
    import select
    import signal
    out = tmp_path / "at_prompt.json"
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-c", PROMPT_DRIVER, str(out), *args])
    shown = b""
    try:  # the prompt, then the session's line printed above it and the prompt drawn again
        while b"\x1b[?25h" not in shown.partition(b" session ")[2]:  # rich styles "abhed": not one run of bytes
            assert select.select([fd], [], [], 60)[0], shown[-2000:]
            chunk = os.read(fd, 65536)
            assert chunk, shown[-2000:]
            shown += chunk
            if b"\x1b[6n" in chunk:  # prompt_toolkit asks where the cursor is: answer as a terminal would
                os.write(fd, b"\x1b[1;1R")
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    return set(json.loads(out.read_text())), shown


def test_chats_prompt_is_drawn_before_the_model_client_and_agent_load(tmp_path, ws, home):
    """On a terminal the prompt comes first; the model client, the agent loop and the tools load in
    a thread while the person types (test_chat_starts_without_what_only_a_turn_needs: they do load)."""
    from abhed.model.replay import ReplayServer, Turn
    with ReplayServer([Turn(text="unused")]) as server:
        at_prompt, shown = chat_on_a_terminal(tmp_path, "chat", "--endpoint", server.url, "--workspace", str(ws))
    assert "prompt_toolkit" in at_prompt and "rich" in at_prompt  # the prompt's own
    assert heavy(at_prompt, ("httpx", "abhed.model.connect", "abhed.agent.loop", "abhed.tools.bash", "abhed.mcp")) == []
    assert shown.index(b"/help lists commands") < shown.index(b" session ")  # told once the session was ready


def test_start_up_collects_garbage_rarely_until_a_session_is_ready():
    code = """
import gc
default = gc.get_threshold()
import abhed.cli.commands
from abhed.cli import startup
during = gc.get_threshold()
startup.end()
after, frozen = gc.get_threshold(), gc.get_freeze_count()
startup.end()  # a second end changes nothing
print(default == startup.DEFAULT == after, during == (startup.STARTUP_FIRST, *default[1:]), frozen > 0,
      gc.get_freeze_count() == frozen, gc.get_threshold() == default)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True"] * 5, out.stderr[-2000:]


def test_the_chain_names_who_imported_a_heavy_module():
    report = "\n".join(["import time:   1 |   1 |     pydantic", "import time:   1 |   2 |   abhed.session.config",
                        "import time:   1 |   3 | abhed.cli.commands", "import time:   1 |   1 | rich"])
    parent = importers(report)
    assert chain("pydantic", parent) == ("pydantic <- abhed.session.config <- abhed.cli.commands <- "
                                         "(top level, or a command as it runs)")
    assert parent["rich"] == "(top level, or a command as it runs)"


# -- the lazy registry of tools and the lazy sandbox package ------------------------------------


def test_the_registry_makes_each_tool_once_in_the_order_shown():
    from abhed.tools import BY_NAME, CLASSES, all_tools, definitions
    assert list(BY_NAME) == list(CLASSES) and list(CLASSES)[:3] == ["read", "write", "edit"]  # the order shown
    assert [tool.name for tool in all_tools()] == list(CLASSES)
    assert all(BY_NAME[name] is tool for name, tool in zip(CLASSES, all_tools()))
    assert [d["function"]["name"] for d in definitions()] == list(CLASSES)
    assert "raed" not in BY_NAME and BY_NAME.get("raed") is None and len(BY_NAME) == len(CLASSES)
    with pytest.raises(KeyError):
        BY_NAME["raed"]


def test_parallel_first_lookups_share_one_tool(monkeypatch):
    import time

    from abhed.tools import CLASSES, Registry
    from abhed.tools.glob import Glob
    made = Glob.__init__

    def slowly(self):  # type: ignore[no-untyped-def]
        time.sleep(0.05)  # so the first lookups overlap, as parallel calls' would on a first import
        made(self)

    monkeypatch.setattr(Glob, "__init__", slowly)
    registry, barrier, seen = Registry(CLASSES), threading.Barrier(8), []

    def look() -> None:
        barrier.wait()
        seen.append(registry["glob"])

    threads = [threading.Thread(target=look) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and isinstance(seen[0], Glob) and all(tool is seen[0] for tool in seen)


def test_the_sandbox_package_loads_its_launchers_on_first_use():
    code = """
import sys, sandbox, sandbox.config
before = "sandbox.box" in sys.modules
from sandbox.box import Sandbox  # a direct import of a submodule first
print(before, sandbox.probe.__name__, callable(sandbox.probe), sandbox.Sandbox is Sandbox,
      sandbox.kill_running.__module__, sandbox.ProbeReport.__name__)
try:
    sandbox.nothing
except AttributeError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.splitlines()
    assert out == ["False probe True True sandbox.launcher ProbeReport", "module 'sandbox' has no attribute 'nothing'"]


def test_the_sandbox_package_loads_its_settings_alone_on_first_use():
    code = """
import sys, sandbox, sandbox.protect
print("sandbox.config" in sys.modules)
limits, default = sandbox.Limits, sandbox.DEFAULT_PROTECTED_PATHS
from sandbox.config import Limits
print(limits is Limits, default is sandbox.protect.DEFAULT_PROTECTED_PATHS, sandbox.SandboxConfig().protected_paths == default,
      "sandbox.launcher" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines() == ["False", "True True True False"], out.stderr[-2000:]
