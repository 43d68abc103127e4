"""`abhed demo`: the whole flow on a machine with no model server.

A scripted model, served by the replay server on 127.0.0.1 in vLLM's wire format, fixes a small
bug in a throwaway project: it plans, keeps a todo list, reads the code, runs the tests, makes an
edit that fails on whitespace, recovers from the error text, and checks its fix. The loop, the
tools, the approval layer, the sandbox and the event log are the real ones; only the model's
words are canned.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from abhed.cli import launch
from abhed.cli.display import Chat
from abhed.model.replay import ReplayServer, Turn

PROMPT = "The tests in test_textstats.py fail. Find out why and fix it."
MODULE = '''"""Text statistics for the report generator."""


def word_count(text):
\t"""How many words `text` has; words are separated by any run of whitespace."""
\treturn len(text.split(" "))


def line_count(text):
\t"""How many lines `text` has; a final newline does not start a new line."""
\treturn len(text.splitlines())
'''
TESTS = '''from textstats import line_count, word_count


def test_single_spaces():
    assert word_count("one two three") == 3


def test_runs_of_whitespace():
    got = word_count("one  two\\nthree\\tfour")
    assert got == 4, f"expected 4 words, got {got}"


def test_empty_text():
    got = word_count("")
    assert got == 0, f"expected 0 words, got {got}"


def test_lines():
    assert line_count("a\\nb\\n") == 2


if __name__ == "__main__":
    tests = [test for name, test in sorted(globals().items()) if name.startswith("test_")]
    failed = 0
    for test in tests:
        try:
            test()
            print(f"PASS {test.__name__}")
        except AssertionError as exc:
            failed += 1
            print(f"FAIL {test.__name__}: {exc}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    raise SystemExit(1 if failed else 0)
'''
NOTES = "# textstats\n\nRun the tests with `python3 test_textstats.py` (no pytest here). Keep the tab indentation of textstats.py.\n"
TEST_COMMAND = "python3 test_textstats.py"


def make_project(workspace: Path) -> None:
    (workspace / "textstats.py").write_text(MODULE)
    (workspace / "test_textstats.py").write_text(TESTS)
    (workspace / "ABHED.md").write_text(NOTES)


def script(workspace: Path) -> list[Turn]:
    """The model's side of the demo. Also the end-to-end test's script (tests/agent/test_e2e.py)."""
    module, tests = str(workspace / "textstats.py"), str(workspace / "test_textstats.py")
    run_tests = ("bash", {"command": TEST_COMMAND, "description": "Run the project's tests"})
    return [
        Turn("I'll make a plan and a todo list first.", calls=[
            ("plan", {"goal": "Make the failing tests in test_textstats.py pass",
                      "steps": ["Run the tests to see what fails", "Read the code under test", "Fix the cause",
                                "Run the tests again"]}),
            ("todo", {"items": [{"content": "Run the tests to see what fails", "status": "in_progress"},
                                {"content": "Fix the cause in textstats.py"}, {"content": "Run the tests again"}]})]),
        Turn("Running the tests.", calls=[run_tests]),
        Turn("Two word_count tests fail. Let me read the code and the tests.",
             calls=[("read", {"path": module}), ("read", {"path": tests})]),
        Turn('word_count splits on single spaces only: "one  two" gives an empty word, newlines and tabs are not '
             'separators, and "" counts as one word. str.split() with no argument does it right.', calls=[
                 ("todo", {"items": [{"id": "t1", "status": "done"}, {"id": "t2", "status": "in_progress"}]}),
                 ("edit", {"path": module, "old_string": '    return len(text.split(" "))',
                           "new_string": "    return len(text.split())"})]),
        Turn("The file is indented with a tab, not spaces. Retrying with the exact text.", calls=[
            ("edit", {"path": module, "old_string": '\treturn len(text.split(" "))',
                      "new_string": "\treturn len(text.split())"})]),
        Turn("Fixed. Running the tests again.", calls=[
            ("todo", {"items": [{"id": "t2", "status": "done"}, {"id": "t3", "status": "in_progress"}]}), run_tests]),
        Turn("", calls=[("todo", {"items": [{"id": "t3", "status": "done"}]})]),
        Turn("Fixed `word_count` in textstats.py: it split on single spaces, so runs of whitespace, newlines and tabs "
             'were miscounted and "" counted as one word. It now uses `text.split()`. All 4 tests pass '
             "(`python3 test_textstats.py`)."),
    ]


def run_demo(*, keep: bool = False, fast: bool = False, console: Console | None = None) -> int:
    console = console or Console(highlight=False)
    root = Path(tempfile.mkdtemp(prefix="abhed-demo-")).resolve()
    workspace = root / "textstats"
    workspace.mkdir()
    make_project(workspace)
    turns = script(workspace)
    display = Chat(console)
    try:
        with ReplayServer(turns, model_id="abhed/demo-replay", chunk_chars=6, delay_s=0 if fast else 0.012) as server:
            settings = launch.settings(endpoint=server.url, profile="generic", tool_format="native", mode="auto",
                                       allowed_roots=[workspace])
            model = launch.open_model(settings, display)
            console.print("[bold]abhed demo[/]: a scripted model (replayed from 127.0.0.1, no real model involved) "
                          "drives the real loop, tools, sandbox and event log.")
            console.print(f"[dim]workspace {workspace} (a throwaway copy of a small project); mode auto[/]\n")
            with launch.agent_in_session(settings, workspace.resolve(), None, model, display, ask_human=display.ask) as (agent, _):
                console.print(f"[bold green]>[/] {PROMPT}")
                outcome = agent.run(PROMPT)
                session = agent.ctx.session.id
            model.client.close()
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    console.print()
    if outcome.status != "done":
        console.print(f"[red]The demo did not finish: {outcome.detail}[/]")
    name = escape(launcher())
    console.print(f"Every step is in the event log: [cyan]{name} sessions show {session}[/]", soft_wrap=True)
    console.print(f"Workspace kept at {workspace}" if keep else "The throwaway workspace was removed (--keep keeps it).")
    console.print(f"With a real model server: [cyan]{name} doctor --endpoint http://HOST:8000/v1[/], then [cyan]{name}[/] "
                  "in your project.", soft_wrap=True)
    return outcome.exit_code


def launcher() -> str:
    """How the person runs this abhed: `abhed` when that is what their PATH finds, else its path
    (after scripts/setup it is .venv/bin/abhed, not on PATH unless `scripts/setup --link` put it there)."""
    program = Path(sys.argv[0]).absolute()
    if program.name != "abhed":  # python -m abhed
        return f"{sys.executable} -m abhed"
    found = shutil.which("abhed")
    return "abhed" if found and Path(found).resolve() == program.resolve() else str(program)
