"""The reviewed MCP gateway: the operator's MCP servers, and only the tools the operator admitted.

    settings [mcp.servers.NAME] --start--> Connection (stdio in the sandbox, or HTTP to the listed URL)
    tools/list now  --compare with pins-->  admitted: McpTool `mcp__NAME__TOOL` (pinned text and schema)
                                            withheld: new, changed since review (rug pull), unusable,
                                                      declined at review (not new: not noticed again)

An McpTool is a Tool like the native ones: dispatch validates its arguments against the pinned
schema, asks the approval layer (rules name it: `mcp__jira__create_issue`, `mcp__jira__*`), runs
it, and records both events. A server that crashes is started again at the next call, and its
tools are compared with the pins again before that call runs; a server that says its tool list
changed is compared again too. Every failure is a ToolError the model reads; nothing else escapes.
"""

from __future__ import annotations

import os
import re
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import count
from pathlib import Path
from typing import Any

import sandbox
from abhed.common import frozen
from abhed.session.config import McpServerConfig, Settings
from abhed.session.sandboxing import backend_capabilities, sandbox_config
from abhed.common.errors import ToolError
from abhed.common.terminal import printable
from abhed.common.traits import UNKNOWN
from abhed.mcp import pins as pinning
from abhed.mcp.client import Connection, HttpConnection, McpError, StdioConnection, read_tail
from abhed.mcp.pins import Pin, tool_hash
from abhed.mcp.schema import problems
from abhed.tools.base import Tool, ToolContext, ToolResult, fail, head_tail, ok

PREFIX = "mcp__"
_OPENAI_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_starts = count(1)
MAX_REFUSALS = 20  # kept per server: the count says how many there were


def full_name(server: str, tool: str) -> str:
    return f"{PREFIX}{server}__{tool}"


def split_name(name: str) -> tuple[str, str] | None:
    """(server, tool) of `mcp__server__tool`, or None."""
    if not name.startswith(PREFIX) or "__" not in name[len(PREFIX):]:
        return None
    server, _, tool = name[len(PREFIX):].partition("__")
    return (server, tool) if server and tool else None


def expand(value: str, environ: dict[str, str], where: str) -> str:
    """`${VAR}` references replaced from Abhed's environment; a missing one is an McpError."""
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise McpError(f"{where} uses ${{{name}}}, but the environment variable {name} is not set. Set it "
                           "before starting Abhed, or change the [mcp.servers] entry.", "start")
        return environ[name]
    return _ENV_REFERENCE.sub(one, value)


@dataclass
class Comparison:
    """One server's live tools against its pins."""

    admitted: dict[str, Pin] = field(default_factory=dict)  # tool -> its pin (identical to what is listed now)
    withheld: dict[str, str] = field(default_factory=dict)  # tool -> why
    live: dict[str, dict[str, Any]] = field(default_factory=dict)  # tool -> {description, inputSchema, annotations}
    gone: list[str] = field(default_factory=list)  # pinned, no longer listed
    declined: dict[str, str] = field(default_factory=dict)  # tool -> why: declined at review, unchanged since


def live_definitions(server: str, listed: list[Any]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The usable tool definitions a server listed, and why the others cannot be used."""
    live: dict[str, dict[str, Any]] = {}
    broken: dict[str, str] = {}
    for index, entry in enumerate(listed):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            broken[f"(entry {index})"] = "listed without a name: not a tool definition"
            continue
        description = entry.get("description", "")
        schema = entry.get("inputSchema")
        if not isinstance(description, str):
            broken[name] = "its description is not a string"
        elif not isinstance(schema, dict) or schema.get("type") != "object":
            broken[name] = "its inputSchema is not a JSON schema of type object"
        elif not _OPENAI_NAME.fullmatch(full_name(server, name)):
            broken[name] = (f"its name cannot be offered to a model as {full_name(server, name)!r} (letters, digits, "
                            "_ and - only, at most 64 characters in all)")
        elif name in live:
            broken[name] = "listed twice"
        else:
            annotations = _v if isinstance(_v := entry.get("annotations"), dict) else {}
            live[name] = {"description": description, "inputSchema": schema, "annotations": annotations}
    return live, broken


def compare(server: str, listed: list[Any], pinned: dict[str, Pin],
            declined: dict[str, str] | None = None) -> Comparison:
    """`declined`: tool -> the hash of the definition the operator declined (pins.load_declined)."""
    live, broken = live_definitions(server, listed)
    result = Comparison(live=live, withheld=dict(broken))
    for name, tool in live.items():
        pin = pinned.get(name)
        if pin is None and (declined or {}).get(name) == tool_hash(name, tool["description"], tool["inputSchema"]):
            result.declined[name] = (f"declined by the operator at review (abhed mcp review {server} --reconsider "
                                     "asks again)")
        elif pin is None:
            result.withheld[name] = "new: never reviewed"
        elif pin.hash != tool_hash(name, tool["description"], tool["inputSchema"]):
            result.withheld[name] = ("changed since it was reviewed (its description or input schema differs from "
                                     "the pinned one): a possible rug pull")
        else:
            result.admitted[name] = pin
    result.gone = sorted(set(pinned) - set(live))
    return result


class Server:
    """One configured server: its connection, started on demand and again after it failed."""

    def __init__(self, name: str, config: McpServerConfig, pinned: dict[str, Pin], settings: Settings,
                 workspace: Path, environ: dict[str, str] | None = None,
                 declined: dict[str, str] | None = None) -> None:
        self.name, self.config, self.pinned = name, config, pinned
        self.declined = declined or {}  # tool -> hash of the definition declined at review
        self.settings, self.workspace = settings, workspace
        self.environ = frozen.host_environ() if environ is None else environ
        self.connection: Connection | None = None
        self.comparison: Comparison | None = None
        self._lock = threading.Lock()
        self._refusals_lock = threading.Lock()
        self.refusals: list[str] = []  # the latest connections its sandbox's proxy refused (allow_hosts)
        self.refused = 0  # how many in all

    def _refused(self, message: str) -> None:
        """The sandbox's proxy refused a connection (any thread): kept for the call's observation and /mcp."""
        with self._refusals_lock:
            self.refused += 1
            self.refusals = [*self.refusals[-(MAX_REFUSALS - 1):], message]

    def refusals_since(self, count: int) -> list[str]:
        """The refusals after the first ``count`` (those still kept)."""
        with self._refusals_lock:
            return self.refusals[len(self.refusals) - min(self.refused - count, len(self.refusals)):]

    def describe(self) -> str:
        if self.config.url is not None:
            return f"HTTP {self.config.url}"
        command = f"stdio `{shlex.join(self.config.command or [])}`"
        if not backend_capabilities(self.settings).isolates:
            return f"{command} WITHOUT a sandbox (sandbox.backend {self.settings.sandbox.backend}), with the host's whole network"
        network = "no network" if not self.config.allow_hosts else \
            f"no network but a proxy to {', '.join(self.config.allow_hosts)}"
        return f"{command} in the sandbox, {network}"

    def check(self) -> Comparison:
        """Start the server if needed and compare its tools with the pins (McpError if it cannot)."""
        with self._lock:
            return self._checked(force=True)

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            comparison = self._checked(force=False)
            connection = self.connection
        if tool not in comparison.admitted:
            why = comparison.withheld.get(tool) or comparison.declined.get(tool, "the server no longer lists it")
            raise McpError(f"`{full_name(self.name, tool)}` is withheld for the rest of this session: {why}. The "
                           f"operator must review it again (abhed mcp review {self.name}). Do the work another way, "
                           "or tell the user.", "withheld")
        assert connection is not None
        return connection.call_tool(tool, arguments, self.config.timeout_s)

    def _checked(self, force: bool) -> Comparison:
        fresh = self.connection is None or not self.connection.alive
        if fresh:
            self._close_connection()
            self.connection = self._start()
        assert self.connection is not None
        if fresh or force or self.connection.tools_changed or self.comparison is None:
            self.comparison = compare(self.name, self.connection.list_tools(), self.pinned, self.declined)
        return self.comparison

    def _start(self) -> Connection:
        cfg = self.config
        if cfg.url is not None:
            headers = {key: expand(value, self.environ, f"[mcp.servers.{self.name}] header {key}")
                       for key, value in cfg.headers.items()}
            connection: Connection = HttpConnection(self.name, cfg.url, headers, timeout_s=cfg.timeout_s,
                                                    max_message_bytes=cfg.max_message_bytes)
        else:
            connection = self._start_stdio()
        try:
            connection.initialize()
        except BaseException:
            connection.close()
            raise
        return connection

    def _start_stdio(self) -> StdioConnection:
        cfg = self.config
        env = {key: expand(value, self.environ, f"[mcp.servers.{self.name}] env {key}") for key, value in cfg.env.items()}
        # Its own network namespace always; allow_hosts: a proxy there admits only those (sandbox.egress).
        box_config = replace(sandbox_config(self.settings), allow_network=False, allow_hosts=tuple(cfg.allow_hosts),
                             env_passthrough=tuple(env), ro_binds=(*self.settings.sandbox.ro_binds, *cfg.read_only))
        logs = self.settings.home / "mcp-logs"
        logs.mkdir(parents=True, exist_ok=True, mode=0o700)
        log_path = logs / f"{self.name}-{os.getpid()}-{next(_starts)}.log"
        ours: list[int] = []
        theirs: list[int] = []
        box: sandbox.Sandbox | None = None
        try:
            in_r, in_w = os.pipe()
            ours.append(in_w)
            theirs.append(in_r)
            out_r, out_w = os.pipe()
            ours.append(out_r)
            theirs.append(out_w)
            box = sandbox.Sandbox(box_config, self.workspace, environ=env, on_refusal=self._refused)
            job = box.start_server(shlex.join(["exec", *(cfg.command or [])]), cwd=self.workspace, stdin_fd=in_r,
                                   stdout_fd=out_w, log_path=log_path)
        except sandbox.SandboxError as exc:
            for fd in ours:
                os.close(fd)
            if box is not None:
                box.close()
            raise McpError(f"The MCP server {self.name} could not be started in the sandbox: {exc}", "start") from None
        except BaseException:
            for fd in ours:
                os.close(fd)
            if box is not None:
                box.close()
            raise
        finally:
            for fd in theirs:
                os.close(fd)

        def stop() -> None:
            job.stop()
            box.close()
            try:
                log_path.unlink()
            except OSError:
                pass

        def exit_status() -> int | None:
            status = job.poll()
            return None if status.running else status.exit_code

        return StdioConnection(self.name, in_w, out_r, stop=stop, exit_status=exit_status,
                               stderr_tail=lambda: read_tail(log_path), timeout_s=cfg.timeout_s,
                               max_message_bytes=cfg.max_message_bytes)

    def _close_connection(self) -> None:
        if self.connection is not None:
            try:
                self.connection.close()
            finally:
                self.connection = None

    def close(self) -> None:
        with self._lock:
            self._close_connection()


# -- an admitted tool, as the model sees it -----------------------------------------------------


class McpTool(Tool):
    """`mcp__SERVER__TOOL`: the pinned description and schema; a call goes to the server."""

    traits = UNKNOWN  # the server's own hints are not trusted: an allow rule or a human decides

    def __init__(self, server: Server, pin: Pin) -> None:
        self.server, self.pin = server, pin
        # Per instance here (one class serves every server's tools), where Tool declares these ClassVar
        # for the native tools, which the registry reads without an instance: hence the three ignores.
        self.name = full_name(server.name, pin.name)  # type: ignore[misc]
        self.description = pin.description or f"The tool {pin.name} of the MCP server {server.name}."  # type: ignore[misc]
        self.example = _example(pin.schema)  # type: ignore[misc]

    def parameters(self) -> dict[str, Any]:
        return self.pin.schema

    def validate(self, value: Any) -> Any:
        found = problems(value, self.pin.schema)
        if found:
            lines = [f"Invalid arguments for `{self.name}`:", *(f"- {p}" for p in found)]
            props = self.pin.schema.get("properties") or {}
            lines.append(f"Its parameters: {', '.join(props) or '(none)'}. Call it again with corrected arguments, "
                         f"e.g. {_json(self.example)}")
            raise ToolError("\n".join(lines))
        return value

    def run(self, args: Any, ctx: ToolContext) -> ToolResult:
        before = self.server.refused  # what its sandbox's proxy refuses from now on, this call caused (or one beside it)
        try:
            result = self.server.call(self.pin.name, args)
        except McpError as exc:
            raise ToolError(exc.message + _refusal_note(self.server.refusals_since(before)), mcp_error=exc.kind) from None
        rendered = render(self.name, result, self.server.config.max_output_chars)
        note = _refusal_note(self.server.refusals_since(before))
        return rendered.model_copy(update={"content": rendered.content + note}) if note else rendered


def _refusal_note(refusals: list[str]) -> str:
    """What the server tried to reach beyond allow_hosts during the call (the model and the log see it)."""
    if not refusals:
        return ""
    return ("\n[during this call " + "; ".join(printable(r) for r in refusals) + ". Only the operator can allow "
            "another host (allow_hosts in the server's [mcp.servers] entry).]")


def _json(value: Any) -> str:
    import json
    return json.dumps(value, ensure_ascii=False)


def _example(schema: dict[str, Any]) -> dict[str, Any]:
    """A call with the required parameters and placeholder values of their types."""
    props = _v if isinstance(_v := schema.get("properties"), dict) else {}
    placeholder = {"string": "...", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    example: dict[str, Any] = {}
    for name in schema.get("required") or []:
        prop = _v if isinstance(_v := props.get(name), dict) else {}
        if isinstance(prop.get("enum"), list) and prop["enum"]:
            example[name] = prop["enum"][0]
        else:
            example[name] = placeholder.get(_v if isinstance(_v := prop.get("type"), str) else "", "...")
    return example


def render(name: str, result: dict[str, Any], limit: int) -> ToolResult:
    """A tools/call result as the text the model reads: bounded, never empty, errors marked."""
    parts: list[str] = []
    content = result.get("content")
    if not isinstance(content, list):
        content = []
        if "content" in result:
            parts.append(f"[the server sent `content` that is not a list: {_json(result['content'])[:200]}]")
    for item in content:
        parts.append(_item(item))
    structured = result.get("structuredContent")
    if structured is not None and not any(isinstance(i, dict) and i.get("type") == "text" for i in content):
        parts.append(_json(structured))
    text = "\n".join(p for p in parts if p)
    if not text.strip():
        text = f"[{name} returned no content]"
    total = len(text)
    text, cut = head_tail(text, limit)
    if cut:
        text += (f"\n[output truncated: {name} returned {total:,} characters; {cut:,} were cut from the middle. Ask "
                 "for less at once (narrower arguments, a smaller range).]")
    if result.get("isError") is True:
        return fail(f"{name} reported an error:\n{text}", error_kind="tool_error", mcp_is_error=True)
    return ok(text, chars=total, truncated=bool(cut))


def _item(item: Any) -> str:
    if not isinstance(item, dict):
        return f"[a content item that is not an object: {_json(item)[:200]}]"
    kind = item.get("type")
    if kind == "text" and isinstance(item.get("text"), str):
        return item["text"]
    if kind in ("image", "audio"):
        data = _v if isinstance(_v := item.get("data"), str) else ""
        return f"[{kind} ({item.get('mimeType', '?')}, {len(data) * 3 // 4:,} bytes) not shown: Abhed passes text only]"
    if kind == "resource_link":
        return f"[resource link: {item.get('uri')} ({item.get('name', '')})]"
    if kind == "resource" and isinstance(item.get("resource"), dict):
        resource = item["resource"]
        if isinstance(resource.get("text"), str):
            return f"[resource {resource.get('uri')}]\n{resource['text']}"
        return f"[binary resource {resource.get('uri')} ({resource.get('mimeType', '?')}) not shown]"
    return f"[content of type {str(kind)[:40]!r} not shown]"


# -- the gateway of one session ----------------------------------------------------------------


class Gateway:
    """The configured servers of one session and their admitted tools (a ToolSource for dispatch)."""

    def __init__(self, settings: Settings, workspace: Path, *, only: set[str] | None = None,
                 pins_file: Path | None = None, environ: dict[str, str] | None = None) -> None:
        self.pins_file = pins_file or pinning.pins_path()
        pinned = pinning.load(self.pins_file) if settings.mcp.servers else {}
        declined = pinning.load_declined(self.pins_file) if settings.mcp.servers else {}
        self.servers = {name: Server(name, cfg, pinned.get(name, {}), settings, workspace, environ,
                                     declined.get(name))
                        for name, cfg in settings.mcp.servers.items() if only is None or name in only}
        self.configured = list(settings.mcp.servers)
        self.tools: list[McpTool] = []
        self.withheld: dict[str, str] = {}  # full name (or server) -> why
        self.failed: dict[str, str] = {}  # server -> why it could not be used

    def start(self, notice: Callable[[str], None] = lambda message: None) -> Gateway:
        """Start every server and admit the tools whose pins match; what cannot be used is noticed."""
        for name, server in self.servers.items():
            try:
                comparison = server.check()
            except McpError as exc:
                self.failed[name] = exc.message
                notice(f"MCP server {name} is not available this session: {exc.message}")
                continue
            self.tools += [McpTool(server, pin) for pin in comparison.admitted.values()]
            for tool, why in {**comparison.declined, **comparison.withheld}.items():
                self.withheld[full_name(name, tool)] = why
            if comparison.withheld:  # a declined tool is a decision made, not noticed again
                notice(f"MCP server {name}: {len(comparison.withheld)} tool(s) withheld until reviewed "
                       f"({', '.join(sorted(comparison.withheld))}): run abhed mcp review {name}")
        return self

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def names(self) -> list[str]:
        return [t.name for t in self.tools]

    def unavailable(self, name: str) -> str | None:
        """Why `name` is not offered, when it is an MCP tool name; None otherwise."""
        if name in self.withheld:
            return (f"`{name}` is withheld: {self.withheld[name]}. Only the operator can admit it (abhed mcp review). "
                    "Do the work another way, or tell the user.")
        parts = split_name(name)
        if parts is None:
            return None
        server, tool = parts
        if server in self.failed:
            return f"The MCP server {server} is not available in this session: {self.failed[server]}"
        if server not in self.servers:
            known = ", ".join(self.configured) or "none"
            return f"There is no MCP server named {server!r} (the configured ones: {known})."
        mine = [t.name for t in self.tools if t.server is self.servers[server]]
        return (f"The MCP server {server} has no admitted tool {tool!r}. Its admitted tools: {', '.join(mine) or 'none'}. "
                "Call one of them by its exact name.")

    def status(self) -> list[str]:
        """What this session has from each server, one line a server or tool (for chat's /mcp)."""
        lines: list[str] = []
        for name, server in self.servers.items():
            if name in self.failed:
                lines.append(f"{name}: not available ({self.failed[name]})")
                continue
            mine = [t.name for t in self.tools if t.server is server]
            lines.append(f"{name}: {server.describe()}; {len(mine)} tool(s) admitted")
            if server.refused:
                lines.append(f"  network: {server.refused} connection(s) refused, the latest: "
                             f"{printable(server.refusals[-1])}")
            lines += [f"  {tool}" for tool in mine]
            prefix = full_name(name, "")
            lines += [f"  {tool} WITHHELD: {why}" for tool, why in sorted(self.withheld.items())
                      if tool.startswith(prefix)]
        return lines or ["no MCP servers configured"]

    def close(self) -> None:
        for server in self.servers.values():
            server.close()
