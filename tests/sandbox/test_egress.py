"""allow_hosts: the sandbox keeps its own network namespace and reaches the listed host:port pairs
only, through the proxy (sandbox.egress). Judged on the host: which of its servers accepted a
connection and what they were sent, never by what the sandboxed client printed alone."""

from __future__ import annotations

import json
import os
import shlex
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sandbox
from net_testing import HostServer
from sbx_helpers import fds_in_a_fresh_process
from sandbox import egress


@pytest.fixture
def host_servers():
    made: list[HostServer] = []

    def make(address: str = "127.0.0.1") -> HostServer:
        made.append(HostServer(address))
        return made[-1]

    yield make
    for server in made:
        server.close()


def run_with_egress(runner, workspace: Path, allow: list[str], command: str) -> tuple[str, list[str]]:
    """``command`` in a sandbox with ``allow_hosts=allow``, as the runner's user: its output and the refusals."""
    code = f"""
refusals = []
config = sandbox.SandboxConfig(allow_hosts={allow!r})
with sandbox.Sandbox(config, {str(workspace)!r}, on_refusal=refusals.append) as box:
    result = box.run({command!r}, cwd={str(workspace)!r}, timeout_s=60)
answer = {{"output": result.output, "refusals": refusals}}
"""
    answer = runner.exec(code)
    return answer["output"], answer["refusals"]


def outward_address() -> str | None:
    """This host's address on its default route (no packet is sent), if it has one."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


@pytest.fixture(params=["root", "user"])
def net_runner(request):
    return request.getfixturevalue(f"{request.param}_runner")


def test_a_listed_host_is_reached_and_no_other_gets_a_byte(net_runner, host_servers):
    allowed, denied = host_servers(), host_servers("0.0.0.0")
    workspace = net_runner.new_workspace()
    outward = outward_address()
    direct = [f"127.0.0.1/{denied.port}", f"127.0.0.1/{allowed.port}", *([f"{outward}/{denied.port}"] if outward else [])]
    command = "; ".join([
        # a real client that finds the proxy by the environment, to the listed host and to another
        f"curl -sS --max-time 20 http://127.0.0.1:{allowed.port}/issues",
        f"curl -sS --max-time 20 -o /dev/null -w 'denied:%{{http_code}}\\n' http://127.0.0.1:{denied.port}/issues",
        # a client that ignores the proxy: straight at the host's ports, loopback and outward
        *(f"(exec 3<>/dev/tcp/{target} && echo 'CONNECTED {target}') 2>/dev/null || echo 'no route {target}'"
          for target in direct),
    ])
    output, refusals = run_with_egress(net_runner, workspace, [f"127.0.0.1:{allowed.port}"], command)

    assert f"secret from port {allowed.port}" in output
    assert allowed.accepted == 1 and b"GET /issues HTTP/1.1" in allowed.received
    assert "denied:403" in output
    assert "CONNECTED" not in output and all(f"no route {target}" in output for target in direct)
    assert denied.accepted == 0 and denied.received == b""  # judged on the host: not one connection
    assert refusals == [f"the sandbox's network proxy refused 127.0.0.1:{denied.port}: not in allow_hosts"]


def tunnel(port_or_target: str, then: str = "GET /wiki HTTP/1.0") -> str:
    """A CONNECT to the proxy from bash (no client library), then a request through the tunnel."""
    return (f"exec 3<>/dev/tcp/127.0.0.1/{egress.PROXY_PORT}; "
            f"printf 'CONNECT {port_or_target} HTTP/1.1\\r\\nHost: {port_or_target}\\r\\n\\r\\n{then}\\r\\n\\r\\n' >&3; "
            "timeout 20 cat <&3; echo; echo END")


def test_connect_matches_the_listed_name_exactly_and_resolves_it_on_the_host(root_runner, host_servers):
    server = host_servers()
    workspace = root_runner.new_workspace()
    command = "; ".join([tunnel(f"LocalHost.:{server.port}"), tunnel(f"127.0.0.1:{server.port}"),
                         tunnel(f"localhost:{server.port + 1 if server.port < 65535 else 1}"),
                         tunnel(f"sub.localhost:{server.port}")])
    output, refusals = run_with_egress(root_runner, workspace, [f"localhost:{server.port}"], command)

    # the listed name (case and a trailing dot aside) is resolved on the host and reached
    assert "HTTP/1.1 200 Connection established" in output
    assert f"secret from port {server.port}" in output
    assert server.accepted == 1 and b"GET /wiki HTTP/1.0" in server.received
    # the address the name resolves to, another port, a name below it: refused, and each reported
    assert output.count("403 Forbidden") == 3
    assert [r.split(": ", 1)[1] for r in refusals] == ["not in allow_hosts"] * 3
    assert f"refused 127.0.0.1:{server.port}" in refusals[0]
    assert f"refused sub.localhost:{server.port}" in refusals[2]
    assert f"Reachable from this sandbox: localhost:{server.port} (allow_hosts)" in output


def test_a_request_that_is_not_a_proxy_request_is_refused_and_reported(root_runner, host_servers):
    server = host_servers()
    workspace = root_runner.new_workspace()
    command = (f"exec 3<>/dev/tcp/127.0.0.1/{egress.PROXY_PORT}; printf 'GET /x HTTP/1.1\\r\\nHost: 127.0.0.1:{server.port}"
               "\\r\\n\\r\\n' >&3; timeout 20 cat <&3")
    output, refusals = run_with_egress(root_runner, workspace, [f"127.0.0.1:{server.port}"], command)
    assert "HTTP/1.1 400 Bad Request" in output
    assert refusals == ["the sandbox's network proxy refused GET /x HTTP/1.1: not a CONNECT or an absolute-URI HTTP "
                        "request (use it as an HTTP proxy)"]
    assert server.accepted == 0


def test_an_allowed_host_that_does_not_answer_is_a_502_that_says_so(root_runner):
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    workspace = root_runner.new_workspace()
    output, refusals = run_with_egress(root_runner, workspace, [f"127.0.0.1:{port}"], tunnel(f"127.0.0.1:{port}"))
    assert "HTTP/1.1 502 Bad Gateway" in output
    assert refusals == [f"the sandbox's network proxy refused 127.0.0.1:{port}: it is allowed, but connecting to it "
                        "from the host failed (Connection refused)"]


def test_without_allow_hosts_there_is_no_proxy_and_no_network(root_runner, host_servers):
    server = host_servers()
    workspace = root_runner.new_workspace()
    output = root_runner.run(f"env | grep -i _proxy; (exec 3<>/dev/tcp/127.0.0.1/{egress.PROXY_PORT}) 2>/dev/null "
                             f"|| echo 'no proxy'; (exec 3<>/dev/tcp/127.0.0.1/{server.port}) 2>/dev/null || echo 'no host'",
                             workspace=workspace).output
    assert output.split() == ["no", "proxy", "no", "host"]
    assert server.accepted == 0


# -- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["jira.corp", "https://jira.corp:443", "jira.corp:443/path", "*.corp:443", "jira.corp:0",
                                   "jira.corp:70000", "::1:443", "[jira.corp]:443", "jira corp:443", ""])
def test_an_entry_that_is_not_host_port_is_refused_with_examples(entry):
    with pytest.raises(sandbox.ConfigError) as caught:
        sandbox.SandboxConfig(allow_hosts=(entry,))
    message = str(caught.value)
    assert f"allow_hosts entry {entry!r} is not host:port" in message
    assert '"jira.corp:443", "10.0.0.5:8080" or "[fd00::5]:443"' in message


def test_entries_are_canonical():
    assert [str(e) for e in egress.parse_allowed(["Jira.Corp.:443", "[::0001]:8443", "10.0.0.5:80", "jira.corp:443"])] == \
        ["jira.corp:443", "[::1]:8443", "10.0.0.5:80"]


def test_allow_hosts_and_allow_network_do_not_combine():
    with pytest.raises(sandbox.ConfigError, match="allow_hosts and allow_network cannot be combined"):
        sandbox.SandboxConfig(allow_network=True, allow_hosts=("jira.corp:443",))


def test_the_microvm_backend_refuses_allow_hosts_rather_than_share_the_network(tmp_path):
    with pytest.raises(sandbox.ConfigError) as caught:
        sandbox.Sandbox(sandbox.SandboxConfig(backend="microvm", allow_hosts=("jira.corp:443",)), tmp_path)
    assert "allow_hosts (jira.corp:443) is filtered per host by the bwrap backend only" in str(caught.value)
    assert "Use backend 'bwrap'" in str(caught.value)


def test_doctor_says_what_the_network_is(tmp_path):
    box = sandbox.Sandbox(sandbox.SandboxConfig(allow_hosts=("jira.corp:443",)), tmp_path)
    with box:
        assert "network: own loopback only, plus an HTTP proxy (HTTPS_PROXY) to jira.corp:443 (allow_hosts)" in box.describe()


@given(st.text(max_size=80))
def test_any_text_is_an_endpoint_or_none_and_shown_harmlessly(text):
    endpoint = egress.parse_endpoint(text)
    assert endpoint is None or egress.parse_endpoint(str(endpoint)) == endpoint
    assert all(c.isascii() and c.isprintable() for c in egress.shown(text))


def test_an_absolute_uri_request_goes_upstream_in_origin_form():
    target, forward = egress._parse_head(b"GET http://wiki.corp/a?b=1 HTTP/1.1\r\nHost: wiki.corp\r\n"
                                         b"Proxy-Connection: keep-alive\r\nProxy-Authorization: x\r\n"
                                         b"Connection: keep-alive\r\nKeep-Alive: 300")
    assert target == "wiki.corp:80"
    assert forward == b"GET /a?b=1 HTTP/1.1\r\nHost: wiki.corp\r\nConnection: close\r\n\r\n"
    assert egress._parse_head(b"GET https://wiki.corp/ HTTP/1.1") is None
    assert egress._parse_head(b"CONNECT wiki.corp:443 HTTP/1.1") == ("wiki.corp:443", None)
    assert json.dumps(egress.PROXY_ENV["HTTPS_PROXY"]) == '"http://127.0.0.1:3128"'


def test_the_proxy_ends_with_the_sandboxed_program(tmp_path, host_servers):
    server = host_servers()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with sandbox.Sandbox(sandbox.SandboxConfig(allow_hosts=(f"127.0.0.1:{server.port}",)), workspace) as box:
        job = box.start_background("sleep 60", cwd=workspace, log_path=tmp_path / "log")
        assert [t for t in threading.enumerate() if t.name == "abhed-egress"]
        job.stop()
        assert not [t for t in threading.enumerate() if t.name == "abhed-egress"]


@pytest.mark.parametrize("sent, why", [
    ("CONNECT 127.0.0.1:1 HTTP/1.1", "its head was not a complete HTTP request head within 16384 bytes"),  # then closed
    ("X" * 20000, "its head was not a complete HTTP request head within 16384 bytes"),
])
def test_a_request_head_that_never_ends_is_refused_and_reported(root_runner, sent, why):
    workspace = root_runner.new_workspace()
    command = (f"exec 3<>/dev/tcp/127.0.0.1/{egress.PROXY_PORT}; printf '%s' '{sent}' >&3; "
               + ("exec 3>&-" if len(sent) < 100 else "timeout 20 cat <&3"))
    output, refusals = run_with_egress(root_runner, workspace, ["127.0.0.1:1"], command)
    assert refusals == [f"the sandbox's network proxy refused a request: {why}"]
    if len(sent) > 100:
        assert "HTTP/1.1 400 Bad Request" in output


def test_a_namespace_that_cannot_be_entered_is_a_setup_error_that_leaks_nothing(tmp_path):
    out = fds_in_a_fresh_process("""
from sandbox import egress
out["before"] = sorted(os.listdir("/proc/self/fd"))
try:
    egress.listen_in(2**22 + 1)  # above any pid_max: no such process
except sandbox.SandboxSetupError as exc:
    out["message"] = str(exc)
out["after"] = sorted(os.listdir("/proc/self/fd"))
""", tmp_path)
    message = out["message"]
    assert "could not listen inside the sandbox's network namespace" in message
    assert f"/proc/{2**22 + 1}/ns/net" in message and "remove allow_hosts" in message
    assert out["after"] == out["before"]


def test_a_tunnel_passes_a_half_close_on(root_runner):
    """A client that ends its side (shutdown) still reads the answer: an upstream that replies at
    end of input (a one-shot protocol) must see that end through the tunnel."""
    upstream = socket.create_server(("127.0.0.1", 0))
    port = upstream.getsockname()[1]

    def count_until_eof() -> None:
        conn, _ = upstream.accept()
        with conn:
            total = 0
            while chunk := conn.recv(4096):
                total += len(chunk)
            conn.sendall(f"got {total} bytes".encode())
    threading.Thread(target=count_until_eof, daemon=True).start()
    client = (
        "import socket; s = socket.create_connection(('127.0.0.1', %d)); "
        "s.sendall(b'CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n'); head = b''\n"
        "while not head.endswith(b'\\r\\n\\r\\n'): head += s.recv(1)\n"
        "import time; s.sendall(b'hello'); time.sleep(0.2); s.sendall(b' world')\n"  # two reads upstream, most likely
        "s.shutdown(socket.SHUT_WR); answer = b''\n"
        "while chunk := s.recv(4096): answer += chunk\n"
        "print(head.split(b'\\r\\n')[0].decode(), answer.decode())"
    ) % (egress.PROXY_PORT, port)
    workspace = root_runner.new_workspace()
    try:
        output, refusals = run_with_egress(root_runner, workspace, [f"127.0.0.1:{port}"],
                                           f"timeout 30 python3 -c {shlex.quote(client)}")
    finally:
        upstream.close()
    assert output.strip() == "HTTP/1.1 200 Connection established got 11 bytes" and refusals == []


def test_a_request_made_as_the_sandbox_closes_is_still_reported():
    """The program's last request, made as it ended: its connection may still wait in the listener's
    backlog, or its thread may not have run, when the sandbox closes. Its refusal belongs to that call
    (CI lost one when the host was busy). A slow reporter makes the old close return first."""
    import time
    refusals: list[str] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    relay = egress.Egress((), lambda said: (time.sleep(0.3), refusals.append(said))).serve(listener)
    for _ in range(3):
        client = socket.create_connection(listener.getsockname())
        client.sendall(b"CONNECT 127.0.0.1:1 HTTP/1.1")
        client.close()
    relay.close()
    assert refusals == ["the sandbox's network proxy refused a request: its head was not a complete HTTP request "
                        f"head within {egress.HEAD_LIMIT} bytes"] * 3
