"""Issue 36 items 4-7 as a user meets them in a terminal (tmux): undo and checkpoints from a
subdirectory, /undo after a test run, a declined MCP tool, and `abhed doctor` against a wrong
endpoint. Each test types the commands into a shell in a tmux pane and reads the screen; what
changed on the host (files, the pins file) is checked too."""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from abhed.model.replay import ReplayServer, Turn
from agent_helpers import REPO
from tmux_chat import GUARD_S, TmuxChat

pytestmark = pytest.mark.slow


class TmuxShell(TmuxChat):
    """A shell in a tmux pane, in `cwd`, where `abhed ARGS` runs this checkout's Abhed and then
    prints `EXIT <status>` (a chat started here is a real chat in the same pane)."""

    def __init__(self, cwd: Path, home: Path, env: dict[str, str] | None = None) -> None:
        self.socket = f"abhed-test-{uuid.uuid4().hex[:12]}"
        full = {"ABHED_HOME": str(home), "ABHED_CONFIG": "", "TERM": "xterm-256color", "PYTHONPATH": str(REPO),
                "PS1": "$ ", **(env or {})}
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in full.items())
        self._tmux("new-session", "-d", "-x", "160", "-y", "50", "-s", "chat", "-c", str(cwd),
                   f"env -u COLUMNS -u LINES {exports} bash --norc --noprofile")
        self._tmux("set-option", "-t", "chat", "history-limit", "5000")
        self.runs = 0
        self.type(f"abhed() {{ {shlex.quote(sys.executable)} -m abhed \"$@\"; echo \"EXIT $?\"; }}")

    def abhed(self, line: str) -> None:
        """Type `abhed LINE` (it runs; wait for what it prints, or use `done`)."""
        self.runs += 1
        self.type(f"abhed {line}")

    def done(self) -> tuple[str, int]:
        """The screen once the latest `abhed` command ended, and its exit status."""
        deadline = time.monotonic() + GUARD_S
        while True:
            screen = self.screen()
            ended = re.findall(r"^EXIT (\d+)$", screen, re.M)
            if len(ended) >= self.runs:
                return screen, int(ended[-1])
            if time.monotonic() > deadline:
                raise AssertionError(f"`abhed` #{self.runs} never ended; the screen:\n{screen}")
            time.sleep(0.1)


@pytest.fixture
def shell(tmp_path, home):  # type: ignore[no-untyped-def]
    started: list[TmuxShell] = []

    def start(cwd: Path, **kw) -> TmuxShell:  # type: ignore[no-untyped-def]
        made = TmuxShell(cwd, home, **kw)
        started.append(made)
        return made
    yield start
    for made in started:
        made.close()


def flat(screen: str) -> str:
    """The screen's words on one line: a long line wraps where the pane ends."""
    return " ".join(screen.split())


def git_repo(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(path)], check=True, timeout=30)
    (path / "sub").mkdir()
    return path / "sub"


# -- item 4: undo and checkpoints from a subdirectory ------------------------------------------------


def test_undo_and_checkpoints_from_a_subdirectory_find_the_session_chat_started_there(ws, shell):
    """A chat started in a subdirectory works in the repository's root; `abhed checkpoints` and
    `abhed undo` typed in that subdirectory afterwards find that session (they said "No session
    works in .../sub"), and a directory outside any session says where it looked."""
    sub = git_repo(ws)
    made = ws / "sub" / "made.txt"
    turns = [Turn(calls=[("write", {"path": str(made), "content": "new\n"})]), Turn(text="Wrote it.")]
    with ReplayServer(turns) as server:
        term = shell(sub)
        term.abhed(f"chat --endpoint {server.url} --mode accept-edits")
        term.wait_for("ends the session.")
        term.type("make the file")
        term.wait_for("Wrote it.")
        term.type("/exit")
        term.done()
    assert made.read_text() == "new\n"
    term.abhed("checkpoints")
    screen, status = term.done()
    assert status == 0 and "No session works" not in screen
    assert f"write {made}" in flat(screen) and "1 (A sub/made.txt)" in screen
    term.abhed("undo --yes")
    screen, status = term.done()
    assert status == 0, screen
    assert f"Undone: the workspace is as it was before checkpoint 1 (1 deleted: {made}). It undid the last change, " \
           f"checkpoint 1's call: write {made}. This undo is checkpoint 2:" in flat(screen)
    assert not made.exists()
    elsewhere = ws.parent / "elsewhere"
    (elsewhere / ".git").mkdir(parents=True)
    (elsewhere / "deep").mkdir()
    term.type(f"cd {elsewhere / 'deep'}")
    term.abhed("undo --yes")
    screen, status = term.done()
    assert status == 2
    assert f"No session works in {elsewhere} (the root of the git repository holding {elsewhere / 'deep'}): name " \
           "one (abhed sessions list shows them)." in flat(screen)


# -- item 5: /undo after a test run -------------------------------------------------------------------


def run(command: str) -> tuple[str, dict]:
    return ("bash", {"command": command, "description": f"Run {command}"})


def test_slash_undo_after_a_test_run_undoes_the_last_change_and_names_it(ws, shell):
    """The model edits a file, then runs the tests (a command that changes nothing). /undo takes
    back the edit (it said "Nothing to undo" since the test run's checkpoint was the last), naming
    the call it undid, the one it passed over, and the file it restored."""
    (ws / "a.py").write_text("x = 1\n")
    edit = {"path": str(ws / "a.py"), "old_string": "x = 1", "new_string": "x = 2"}
    turns = [Turn(calls=[("read", {"path": str(ws / "a.py")})]), Turn(calls=[("edit", edit)]),
             Turn(calls=[run("sh -c 'exit 0'")]), Turn(text="Edited; the tests pass.")]
    with ReplayServer(turns) as server:
        term = shell(ws)
        term.abhed(f"chat --endpoint {server.url} --mode auto")
        term.wait_for("ends the session.")
        term.type("set x to 2 and test")
        term.wait_for("Edited; the tests pass.")
        assert (ws / "a.py").read_text() == "x = 2\n"
        term.type("/undo")
        screen = term.wait_for("Undo? [y/N]")
        assert f"The last change, checkpoint 1's call: edit {ws / 'a.py'}; the 1 call after it changed nothing " \
               "(bash sh -c 'exit 0')." in flat(screen)
        assert f"Undo to before checkpoint 1 changes 1 file in {ws}: restore a.py" in flat(screen)
        term.type("y")
        screen = term.wait_for("takes it back.")
        assert f"Undone: the workspace is as it was before checkpoint 1 (1 restored: {ws / 'a.py'}). It undid the " \
               f"last change, checkpoint 1's call: edit {ws / 'a.py'}; the 1 call after it changed nothing (bash sh " \
               "-c 'exit 0'). This undo is checkpoint 3:" in flat(screen)
        assert (ws / "a.py").read_text() == "x = 1\n"
        term.type("/exit")
        term.done()


def test_slash_undo_when_no_call_changed_anything_says_so_and_what_to_try(ws, shell):
    turns = [Turn(calls=[run("sh -c 'exit 0'")]), Turn(text="The tests pass.")]
    with ReplayServer(turns) as server:
        term = shell(ws)
        term.abhed(f"chat --endpoint {server.url} --mode auto")
        term.wait_for("ends the session.")
        term.type("run the tests")
        term.wait_for("The tests pass.")
        term.type("/undo")
        screen = flat(term.wait_for("all the same."))
        session = re.search(r"checkpointed in session (\S+) changed", screen).group(1)
        assert (f"Nothing to undo: none of the 1 call checkpointed in session {session} changed the workspace (the "
                f"last, checkpoint 1: bash sh -c 'exit 0'). `abhed checkpoints {session}` lists them with what each "
                f"changed; `/undo N` in the chat (`abhed undo --to N {session}`) takes the workspace back to before "
                "checkpoint N all the same.") in screen
        assert "Undo? [y/N]" not in screen
        term.type("/exit")
        term.done()


# -- item 6: a declined MCP tool ----------------------------------------------------------------------


def test_a_declined_mcp_tool_is_a_decision_recorded_and_not_nagged_until_it_changes(tmp_path, ws, shell):
    """`abhed mcp review` answered no for every tool: recorded with the tool's hash (before, they
    stayed "new: never reviewed": review and test exited 1 and every chat start named them). A
    second review shows them declined and asks nothing; `mcp test` exits 0; chat starts quietly.
    The echo tool's description then changes: it is new again, named at chat start and asked."""
    control, etc = tmp_path / "control", tmp_path / "etc-abhed"
    control.mkdir()
    etc.mkdir(mode=0o700)
    python = os.path.realpath(sys.executable)
    hostile = REPO / "tests" / "mcp" / "hostile_server.py"
    config = etc / "config.toml"
    config.write_text("\n".join([
        '[mcp.servers.hostile]', f"command = {json.dumps([python, str(hostile), str(control)])}",
        f"read_only = {json.dumps([str(hostile.parent), str(os.path.dirname(os.path.dirname(python))), str(control)])}",
        ""]))
    config.chmod(0o600)
    term = shell(ws, env={"ABHED_CONFIG": str(config)})
    term.abhed("mcp review hostile")
    for count in range(1, 11):  # ten tools, each asked: no
        term.wait_for("[y/N]", count)
        term.type("n")
    screen, status = term.done()
    assert status == 0, screen
    assert "Admitted 0 tool(s) of hostile: none." in screen
    assert "Not admitted: mcp__hostile__echo: declined by the operator." in screen
    assert "The 10 declined tool(s) are recorded as such: withheld, and no longer named at session start, until " \
           "their definition changes; abhed mcp review hostile --reconsider asks about them again." in flat(screen)
    pins = json.loads((etc / "mcp-pins.json").read_text())["servers"]["hostile"]
    assert len(pins["declined"]) == 10 and pins["tools"] == {}
    assert all(re.fullmatch(r"[0-9a-f]{64}", entry["hash"]) for entry in pins["declined"].values())
    term.abhed("mcp review hostile")
    screen, status = term.done()
    assert status == 0 and screen.count("[y/N]") == 10, screen  # the first review's ten: none asked now
    assert "== mcp__hostile__echo (declined at an earlier review, unchanged since: still declined; abhed mcp review " \
           "hostile --reconsider asks again)" in flat(screen)
    term.abhed("mcp test hostile")
    screen, status = term.done()
    assert status == 0, screen
    assert "declined mcp__hostile__echo: declined by the operator at review (abhed mcp review hostile --reconsider " \
           "asks again)" in flat(screen) and "WITHHELD" not in screen

    turns = [Turn(text="unused")]
    with ReplayServer(turns) as server:
        term.abhed(f"chat --endpoint {server.url}")
        term.wait_for("ends the session.")
        term.type("/mcp")  # answered once the servers have started, after any notice of theirs
        screen = term.wait_for("0 tool(s) admitted")
        assert "mcp__hostile__echo WITHHELD: declined by the operator at review" in flat(screen)
        assert "withheld until reviewed" not in screen
        term.type("/exit")
        term.done()
        (control / "description").write_text("Echo, changed after it was declined.")
        term.abhed(f"chat --endpoint {server.url}")
        screen = term.wait_for("withheld until reviewed")
        assert "MCP server hostile: 1 tool(s) withheld until reviewed (echo): run abhed mcp review hostile" \
            in flat(screen)
        term.type("/exit")
        term.done()
    term.abhed("mcp review hostile")
    screen = term.wait_for("[y/N]", 11)
    assert "== mcp__hostile__echo (CHANGED since it was declined: new again)" in screen
    assert "Echo, changed after it was declined." in screen
    term.type("n")
    screen, status = term.done()
    assert status == 0 and screen.count("[y/N]") == 11, screen


# -- item 7: abhed doctor against a wrong endpoint ----------------------------------------------------

PAGE = ("<!DOCTYPE html>\x1b]0;owned\x07\n<html>\n<head>\n<title>Welcome to nginx!</title>\n<style>\nbody { width: 35em; }\n"
        "</style>\n</head>\n<body>\n<h1>Welcome to nginx!</h1>\n<p>If you see this page, the web server works.</p>\n"
        "</body>\n</html>\n").encode()  # 13 lines, the first with a terminal escape in it


class WebPage(http.server.BaseHTTPRequestHandler):
    """A web server that is not vLLM: 200 with the page under /app, 404 with it anywhere else."""

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        self.send_response(200 if self.path.startswith("/app/") else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web():  # type: ignore[no-untyped-def]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), WebPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def fail_line(screen: str) -> str:
    """The latest doctor's endpoint FAIL line, whole (one line, however the pane wraps it) and only it."""
    lines = screen.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("FAIL  endpoint"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("SKIP  model"))
    return "".join(lines[start:end])


def test_doctor_suggests_the_endpoint_that_answers_and_sums_up_a_web_page(ws, shell, web):
    """`abhed doctor` against a /v2 endpoint of a vLLM-like server suggests the server's root + /v1,
    which answers (it suggested /v2/v1); against a web server that is not vLLM it sums up the page
    (status, content type, first line escaped) where it pasted all 13 lines, and suggests nothing
    that does not answer. No line tells the user to run `abhed doctor` (it is running)."""
    term = shell(ws)
    with ReplayServer([]) as server:
        root = server.url.removesuffix("/v1")
        term.abhed(f"doctor --endpoint {root}/v2")
        screen, status = term.done()
    assert status == 1
    line = fail_line(screen)
    assert line.startswith(f"FAIL  endpoint      {root}/v2 does not answer as an OpenAI-compatible API: GET {root}/v2/"
                           f"models answered HTTP 404 (")
    assert line.endswith(f"The API answers at {root}/v1 (serving {server.model_id}): set the endpoint to it (--endpoint, "
                         "ABHED_ENDPOINT or model.endpoint).")
    assert "/v2/v1" not in screen and "abhed doctor" not in line

    term.abhed(f"doctor --endpoint {web}/app")
    screen, status = term.done()
    assert status == 1
    line = fail_line(screen)
    size = len(PAGE)
    assert line == (f"FAIL  endpoint      {web}/app does not answer as an OpenAI-compatible API: GET {web}/app/models "
                    f"answered HTTP 200 with a body that is not JSON (text/html, {size} bytes, first line "
                    f"\"<!DOCTYPE html>\\x1b]0;owned\\x07\"). Nor does {web}/v1, where vLLM serves it: is this a vLLM "
                    "server? Check the endpoint (--endpoint, ABHED_ENDPOINT or model.endpoint); vLLM serves "
                    "http://HOST:8000/v1 by default.")
    term.abhed(f"doctor --endpoint {web}/v1")
    screen, status = term.done()
    line = fail_line(screen)
    assert status == 1 and line == (
        f"FAIL  endpoint      {web}/v1 does not answer as an OpenAI-compatible API: GET {web}/v1/models answered HTTP "
        f"404 (text/html, {size} bytes, first line \"<!DOCTYPE html>\\x1b]0;owned\\x07\"). Is this a vLLM server? It "
        "serves the API at http://HOST:8000/v1; check the endpoint (--endpoint, ABHED_ENDPOINT or model.endpoint).")
    assert "<title>" not in screen and "Welcome to nginx" not in screen and "abhed doctor" not in line
