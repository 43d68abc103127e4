"""The gateway against MCP servers others wrote, installed by scripts/setup-mcp-servers at pinned
versions: PyPI mcp-server-time and mcp-server-git (their own venv), npm server-filesystem and
server-everything (node). The stdio ones run in the sandbox; server-everything also over streamable
HTTP, as a server on the site's network would. Everything through the real `abhed` command line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from mcp_helpers import PYTHON_PREFIX, installed

pytestmark = pytest.mark.slow
NODE_MODULES = ("node", "node_modules", "@modelcontextprotocol")


def venv_server(program: str, *args: str) -> dict:
    path = installed("venv", "bin", program)
    python = Path(os.path.realpath(path.parent / "python")).parents[1]
    return {"command": [str(path), *args], "read_only": [str(path.parents[1]), str(python), str(PYTHON_PREFIX)]}


def node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.fail("node is not installed: scripts/setup-mcp-servers installs it (Debian's nodejs)")
    return os.path.realpath(found)


def node_server(package: str, *args: str) -> dict:
    script = installed(*NODE_MODULES, package, "dist", "index.js")
    prefix = Path(node()).parents[1]  # where this node lives, when not /usr: the sandbox must show it
    extra = [] if prefix == Path("/usr") else [str(prefix)]
    return {"command": [node(), str(script), *args], "read_only": [str(installed("node")), *extra]}


def call(site, name: str, arguments: dict) -> dict:
    proc = site.abhed("tool", name, json.dumps(arguments), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def review(site, name: str, *flags: str) -> subprocess.CompletedProcess[str]:
    proc = site.abhed("mcp", "review", name, "--yes", *flags)
    assert "Admitted" in proc.stdout, proc.stdout + proc.stderr
    return proc


def test_mcp_server_time(site):
    site.configure({"time": venv_server("mcp-server-time", "--local-timezone", "UTC")})
    assert review(site, "time").returncode == 0
    result = call(site, "mcp__time__get_current_time", {"timezone": "Europe/Paris"})
    assert not result["is_error"] and json.loads(result["content"])["timezone"] == "Europe/Paris"
    bad = call(site, "mcp__time__get_current_time", {"timezone": "Mars/Olympus"})
    assert bad["is_error"] and "reported an error" in bad["content"] and "Mars/Olympus" in bad["content"]


def test_mcp_server_git(site):
    ws = site.workspace
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "notes.txt").write_text("first\n")
    subprocess.run(["git", "-C", str(ws), "add", "notes.txt"], check=True)
    subprocess.run(["git", "-C", str(ws), "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-qm",
                    "the first commit"], check=True)
    (ws / "notes.txt").write_text("first\nsecond\n")
    site.configure({"git": venv_server("mcp-server-git", "--repository", str(ws))})
    review(site, "git")
    status = call(site, "mcp__git__git_status", {"repo_path": str(ws)})
    assert not status["is_error"] and "modified:   notes.txt" in status["content"]
    log = call(site, "mcp__git__git_log", {"repo_path": str(ws)})
    assert "the first commit" in log["content"]
    diff = call(site, "mcp__git__git_diff_unstaged", {"repo_path": str(ws)})
    assert "+second" in diff["content"]


def test_server_filesystem_stays_in_the_workspace(site, tmp_path):
    ws = site.workspace
    (ws / "a.txt").write_text("inside\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("outside\n")
    site.configure({"fs": node_server("server-filesystem", str(ws))})
    assert review(site, "fs").returncode == 0
    assert call(site, "mcp__fs__read_text_file", {"path": str(ws / "a.txt")})["content"].strip() == "inside"
    listing = call(site, "mcp__fs__list_directory", {"path": str(ws)})
    assert "[FILE] a.txt" in listing["content"]
    written = call(site, "mcp__fs__write_file", {"path": str(ws / "b.txt"), "content": "made by the server"})
    assert not written["is_error"] and (ws / "b.txt").read_text() == "made by the server"
    refused = call(site, "mcp__fs__read_text_file", {"path": str(secret)})
    assert refused["is_error"] and "outside allowed directories" in refused["content"]
    # Even told to serve the whole disk, the server sees only what the sandbox shows it (judged on the host).
    site.configure({"fs": node_server("server-filesystem", "/")})
    review(site, "fs")
    hidden = call(site, "mcp__fs__read_text_file", {"path": str(secret)})
    assert hidden["is_error"] and "ENOENT" in hidden["content"] and "outside\n" not in hidden["content"]
    call(site, "mcp__fs__write_file", {"path": str(secret), "content": "pwned"})  # lands in the sandbox's own /tmp
    assert secret.read_text() == "outside\n"


def test_server_everything_over_stdio(site):
    site.configure({"everything": node_server("server-everything", "stdio")})
    proc = review(site, "everything")
    assert proc.returncode == 1  # one tool's schema default holds a URL: flagged, not admitted by --yes
    assert "Not admitted: mcp__everything__gzip-file-as-resource: the screening flagged it" in proc.stdout
    assert call(site, "mcp__everything__echo", {"message": "hi"})["content"] == "Echo: hi"
    assert call(site, "mcp__everything__get-sum", {"a": 2, "b": 3})["content"] == "The sum of 2 and 3 is 5."
    image = call(site, "mcp__everything__get-tiny-image", {})["content"]
    assert "[image (image/png, " in image and "not shown: Abhed passes text only]" in image
    links = call(site, "mcp__everything__get-resource-links", {"count": 2})["content"]
    assert "[resource link: demo://resource/dynamic/" in links
    wrong = site.abhed("tool", "mcp__everything__get-sum", '{"a": "two", "b": 3}', "--json")
    assert "`a` must be number; got \"two\"" in json.loads(wrong.stdout)["content"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_server_everything_over_streamable_http(site):
    script = installed(*NODE_MODULES, "server-everything", "dist", "index.js")
    port = _free_port()
    server = subprocess.Popen([node(), str(script), "streamableHttp"], env={**os.environ, "PORT": str(port)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        site.configure({"http": {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"X-Site": "${ABHED_TEST_SITE}"}}})
        proc = site.abhed("mcp", "review", "http", "--yes", ABHED_TEST_SITE="lab-1")
        assert "Admitted 12 tool(s) of http" in proc.stdout, proc.stdout + proc.stderr
        result = site.abhed("tool", "mcp__http__echo", '{"message": "over http"}', "--json", ABHED_TEST_SITE="lab-1")
        assert json.loads(result.stdout)["content"] == "Echo: over http", result.stderr
        wrong_path = {"http": {"url": f"http://127.0.0.1:{port}/not-mcp"}}
        site.configure(wrong_path)
        failed = site.abhed("mcp", "test", "http")
        assert failed.returncode == 1 and f"at http://127.0.0.1:{port}/not-mcp answered HTTP 404" in failed.stderr
    finally:
        server.kill()
        server.wait()
