"""Layer 2: small real tasks in throwaway workspaces, judged by the files they leave and the log.

`SCENARIOS` are the everyday shapes of work: read then edit; find a definition across files with
glob and grep; run a failing test with bash, fix the code, run it again; a multi-step task kept on
a plan and a todo list; a search delegated to an explore subagent.

`RECOVERY` are tasks built so that the first attempt tends to fail, each on one error whose message
is meant to teach the fix: an old_string typed with spaces where the file has tabs, a relative
path, a lookahead regex (RE2 has none), an old_string that matches twice. Their outcome is judged
like any scenario's; the suite also counts, over all their errors, how often the model's very next
call of that tool was right (trial.Record.recoveries): the recovery rate, the measure of whether
Abhed's error messages teach.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from abhed.conformance.trial import TrialResult
from abhed.tools import native_traits

Check = Callable[[Path, TrialResult], "str | None"]


@dataclass(frozen=True)
class Scenario:
    name: str
    category: Literal["scenarios", "recovery"]
    prompt: str  # "WS" stands for the workspace
    files: dict[str, str]
    check: Check  # why the outcome is wrong, or None
    pre_read: tuple[str, ...] = ()
    max_turns: int = 30
    summary: str = ""

    def text(self, workspace: Path) -> str:
        return self.prompt.replace("WS", str(workspace))


def unchanged(workspace: Path, files: dict[str, str], *, but: tuple[str, ...] = ()) -> str | None:
    for name, text in files.items():
        if name in but:
            continue
        path = workspace / name
        if not path.is_file() or path.read_text() != text:
            return f"{name} was changed, though the task left it alone"
    return None


def expect(workspace: Path, name: str, wanted: str) -> str | None:
    path = workspace / name
    if not path.is_file():
        return f"{name} does not exist"
    got = path.read_text()
    if got == wanted:
        return None
    have, need = got.split("\n"), wanted.split("\n")
    line = next((n for n, (a, b) in enumerate(zip(have, need), start=1) if a != b), min(len(have), len(need)) + 1)
    shown = have[line - 1] if line <= len(have) else "(end of file)"
    expected = need[line - 1] if line <= len(need) else "(end of file)"
    return f"{name} line {line} is {shown[:80]!r}, expected {expected[:80]!r}"


def first(*problems: str | None) -> str | None:
    return next((p for p in problems if p), None)


# -- read, then edit ------------------------------------------------------------------------------

GREETING = '''"""Greetings shown on the start page."""


def greet(name):
    """The greeting for a signed-in user."""
    return "Helo, " + name + "!"


def farewell(name):
    return "Goodbye, " + name + "!"
'''
READ_EDIT_FILES = {"greeting.py": GREETING}


def _read_edit(ws: Path, result: TrialResult) -> str | None:
    return expect(ws, "greeting.py", GREETING.replace('"Helo, "', '"Hello, "'))


# -- find a definition across files ---------------------------------------------------------------

NAV_FILES = {
    "app/__init__.py": "",
    "app/cli.py": ('from app.settings.limits import MAX_RETRIES\n\n\ndef usage():\n    return f"retries up to '
                   '{MAX_RETRIES} times"\n'),
    "app/net/__init__.py": "",
    "app/net/retry.py": ("from app.settings.limits import MAX_RETRIES, BACKOFF\n\n\ndef attempts():\n"
                         "    return [BACKOFF * 2 ** n for n in range(MAX_RETRIES)]\n"),
    "app/settings/__init__.py": "",
    "app/settings/limits.py": '"""Limits of the network layer."""\n\nMAX_RETRIES = 3\nBACKOFF = 0.5\nTIMEOUT = 30\n',
    "app/settings/paths.py": 'CACHE_DIR = "/var/cache/app"\n',
    "docs/tuning.md": "# Tuning\n\nRetries are capped by MAX_RETRIES (see the settings package).\n",
}


def _navigate(ws: Path, result: TrialResult) -> str | None:
    return first(expect(ws, "app/settings/limits.py", NAV_FILES["app/settings/limits.py"].replace(
        "MAX_RETRIES = 3", "MAX_RETRIES = 5")), unchanged(ws, NAV_FILES, but=("app/settings/limits.py",)))


# -- run a failing test, fix, rerun ---------------------------------------------------------------

CALC = '''"""Small arithmetic helpers."""


def add(a, b):
    return a - b


def double(a):
    return a * 2
'''
CALC_TESTS = '''import sys

sys.dont_write_bytecode = True  # a fix of the same size within the same second must not meet a stale .pyc

from calc import add, double  # noqa: E402


def main():
    failures = 0
    for got, want, what in [(add(2, 3), 5, "add(2, 3)"), (add(-1, 1), 0, "add(-1, 1)"), (double(4), 8, "double(4)")]:
        if got != want:
            failures += 1
            print(f"FAIL {what}: expected {want}, got {got}")
        else:
            print(f"PASS {what}")
    print(f"{3 - failures} passed, {failures} failed")
    raise SystemExit(1 if failures else 0)


main()
'''
TEST_FILES = {"calc.py": CALC, "test_calc.py": CALC_TESTS}


def _edits_files(tool: str) -> bool:
    """Whether `tool` changes the file its path names (its traits), as edit and write do."""
    traits = native_traits(tool)
    return traits is not None and traits.edits_files


def _test_fix(ws: Path, result: TrialResult) -> str | None:
    problem = unchanged(ws, TEST_FILES, but=("calc.py",))
    if problem:
        return problem
    run = subprocess.run([sys.executable, "-B", "test_calc.py"], cwd=ws, capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        return "the tests still fail: " + " / ".join(run.stdout.strip().splitlines()[-3:])
    runs = [i for i, c in enumerate(result.record.calls) if c.name == "bash" and "test_calc" in str(c.args.get(
        "command", ""))]
    edits = [i for i, c in enumerate(result.record.calls) if _edits_files(c.name) and not c.is_error]
    if len(runs) < 2:
        return "the tests were not run before and after the fix with bash"
    if edits and runs[-1] < edits[-1]:
        return "the tests were not run again after the last change"
    return None


# -- plan and todo over several steps -------------------------------------------------------------

COLOURS = ("red", "green", "blue")


def _plan_todo(ws: Path, result: TrialResult) -> str | None:
    problem = first(*(expect(ws, f"{c}.txt", f"{c}\n") for c in COLOURS),
                    expect(ws, "index.txt", "".join(f"{c}.txt\n" for c in COLOURS)))
    if problem:
        return problem
    state = result.state
    if state.plan is None:
        return "no plan was written with the plan tool"
    if len(state.todos) < 3:
        return f"the todo list has {len(state.todos)} items; the task asked for one per file"
    open_items = [t.id for t in state.todos if t.status != "done"]
    if open_items:
        return f"todo items left open at the end: {', '.join(open_items)}"
    return None


# -- delegate to an explore subagent --------------------------------------------------------------

DELEGATE_FILES = {
    "mirrors/__init__.py": "",
    "mirrors/config.py": "MIRRORS = ['https://a.example', 'https://b.example']\n",
    "mirrors/select/__init__.py": "",
    "mirrors/select/policy.py": ("from mirrors.config import MIRRORS\n\n\ndef resolve_mirror(region):\n"
                                 "    return MIRRORS[hash(region) % len(MIRRORS)]\n"),
    "mirrors/select/health.py": "def mirror_is_up(url):\n    return True\n",
    "tools/resolve.py": "from mirrors.select.policy import resolve_mirror\n\nprint(resolve_mirror('eu'))\n",
}


def _delegate(ws: Path, result: TrialResult) -> str | None:
    problem = expect(ws, "FOUND.txt", str(ws / "mirrors/select/policy.py") + "\n")
    if problem and (ws / "FOUND.txt").is_file() and (ws / "FOUND.txt").read_text().strip() == str(
            ws / "mirrors/select/policy.py"):
        problem = None  # with or without a final newline
    if problem:
        return problem
    spawned = [c for c in result.record.of("task", "main") if not c.is_error]
    if not any(c.args.get("agent_type") == "explore" for c in spawned):
        return "no explore subagent was used"
    if not [a for a in result.record.agents if a.startswith("main.")]:
        return "no subagent ran"
    return unchanged(ws, DELEGATE_FILES)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("read_then_edit", "scenarios",
             'The greeting returned by greet() in WS/greeting.py is misspelt: it says "Helo". Correct it to '
             '"Hello". Change nothing else.', READ_EDIT_FILES, _read_edit, summary="read a file, then edit it"),
    Scenario("navigate", "scenarios",
             "In the project at WS, the constant MAX_RETRIES is defined in one module and used in others. Find the "
             "module that defines it and change its value from 3 to 5 there. Do not change any other file.",
             NAV_FILES, _navigate, summary="find a definition across files with glob and grep"),
    Scenario("test_fix", "scenarios",
             "The tests of the project in WS fail. Run them with `python3 test_calc.py` in WS, fix the bug in "
             "WS/calc.py (do not change the tests), then run them again to confirm they pass.",
             TEST_FILES, _test_fix, summary="run a failing test with bash, fix, rerun"),
    Scenario("plan_todo", "scenarios",
             "In WS, create three files: WS/red.txt containing the line `red`, WS/green.txt containing the line "
             "`green`, and WS/blue.txt containing the line `blue`. Then create WS/index.txt listing the three file "
             "names (red.txt, green.txt, blue.txt), one per line, in that order. Work in steps: first write a plan "
             "with the plan tool and a todo list with the todo tool (one item per file to create), keep the todo "
             "list up to date as you go, and mark every item done when it is.",
             {}, _plan_todo, summary="a multi-step task kept on a plan and a todo list"),
    Scenario("delegate", "scenarios",
             "Use the task tool with agent_type explore to find which file under WS defines the function "
             "resolve_mirror. The subagent sees nothing of this conversation, so give it a complete prompt. Then "
             "write the absolute path of that file, and nothing else, into WS/FOUND.txt.",
             DELEGATE_FILES, _delegate, summary="a search delegated to an explore subagent"),
)


# -- error recovery ------------------------------------------------------------------------------

TABBED = "class Settings:\n\tdef __init__(self):\n\t\tself.timeout = 30\n\t\tself.retries = 2\n"
SPACED = TABBED.replace("\t", "    ")
APP_INI = "[app]\nname = demo\ndebug = true\nport = 8080\n"
SHAPES = '''def area(shape):
    if shape is None:
        return None
    return shape.width * shape.height


def perimeter(shape):
    if shape is None:
        return None
    return 2 * (shape.width + shape.height)
'''
RETRY_FILES = {
    "svc/client.py": "retry_limit = 3\n\n\ndef call():\n    return retry_limit\n",
    "svc/server.py": "def check(retry_limit):\n    return retry_limit == 3\n",
    "svc/worker.py": "import os\n\nretry_limit  = int(os.environ.get('RETRIES', '5'))\n",
    "svc/report.py": "def show(retry_limit):\n    print('retry_limit', retry_limit)\n",
    "svc/tuning.py": "class Tuning:\n    retry_limit=7\n",
}
ASSIGNING = ("svc/client.py", "svc/tuning.py", "svc/worker.py")


def _whitespace(ws: Path, result: TrialResult) -> str | None:
    return expect(ws, "settings.py", TABBED.replace("= 30", "= 60"))


def _relative(ws: Path, result: TrialResult) -> str | None:
    return expect(ws, "config/app.ini", APP_INI.replace("debug = true", "debug = false"))


def _lookahead(ws: Path, result: TrialResult) -> str | None:
    wanted = "".join(f"{ws / name}\n" for name in sorted(ASSIGNING))
    path = ws / "ASSIGNS.txt"
    if path.is_file() and path.read_text().strip() == wanted.strip():
        return unchanged(ws, RETRY_FILES)
    return expect(ws, "ASSIGNS.txt", wanted) or unchanged(ws, RETRY_FILES)


def _several(ws: Path, result: TrialResult) -> str | None:
    parts = SHAPES.split("def perimeter")
    return expect(ws, "shapes.py", parts[0] + "def perimeter" + parts[1].replace("return None", "return 0"))


RECOVERY: tuple[Scenario, ...] = (
    Scenario("whitespace", "recovery",
             f"WS/settings.py has already been read for you. It shows as:\n```\n{SPACED}```\nWith the edit tool, "
             "change the timeout from 30 to 60. Change nothing else.",
             {"settings.py": TABBED}, _whitespace, pre_read=("settings.py",), max_turns=12,
             summary="old_string typed with spaces where the file has tabs"),
    Scenario("relative_path", "recovery",
             "In the workspace WS, the file config/app.ini (it has already been read for you) sets `debug = true`. "
             "With the edit tool, change it to `debug = false` in config/app.ini.",
             {"config/app.ini": APP_INI}, _relative, pre_read=("config/app.ini",), max_turns=12,
             summary="a path relative to the workspace"),
    Scenario("lookahead", "recovery",
             "Find every file under WS with a line that assigns retry_limit: retry_limit followed by optional spaces "
             "and a single `=`, which the regular expression retry_limit(?=\\s*=[^=]) describes. Search with grep. "
             "Then write the absolute paths of those files, sorted, one per line, into WS/ASSIGNS.txt.",
             RETRY_FILES, _lookahead, max_turns=15, summary="a lookahead regex, which RE2 does not have"),
    Scenario("several_matches", "recovery",
             f"WS/shapes.py has already been read for you; it is:\n```\n{SHAPES}```\nWith the edit tool, make "
             "perimeter() return 0 instead of None when shape is None. area() must stay as it is.",
             {"shapes.py": SHAPES}, _several, pre_read=("shapes.py",), max_turns=12,
             summary="an old_string that matches twice"),
)
