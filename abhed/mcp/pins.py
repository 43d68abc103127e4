"""What the operator admitted: each reviewed tool's name, description and input schema, and their hash.

Kept beside the operator's config file (`mcp-pins.json` in its directory), never in the workspace:
the model must not be able to admit tools. The file is checked like the config (owned by the
operator or root, not writable by others) and replaced atomically under a lock, so two `abhed mcp
review` runs cannot lose each other's pins.

At every session start the gateway compares what a server lists now with these pins: a tool whose
hash differs (its description or schema changed: a "rug pull") or that was never pinned is withheld
until `abhed mcp review NAME` admits it again. The model is shown the pinned text, never the live one.
A tool the operator declined is kept as its hash (load_declined): withheld, but not new.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from abhed.files.atomic import replace_file
from abhed.session.config import ConfigError, check_ownership, config_path
from abhed.files import filelock
from abhed.mcp.screen import canonical

FILE_NAME = "mcp-pins.json"
VERSION = 1


def tool_hash(name: str, description: str, schema: Any) -> str:
    """The pin of one tool: sha256 over its name, description and input schema, canonical JSON."""
    return hashlib.sha256(canonical([name, description, schema]).encode("ascii")).hexdigest()


@dataclass(frozen=True)  # pragma: no mutate  (immutability guards against our own bugs; nothing decides on it)
class Pin:
    name: str
    description: str
    schema: dict[str, Any]
    hash: str
    annotations: dict[str, Any]

    @classmethod
    def of(cls, name: str, description: str, schema: dict[str, Any], annotations: dict[str, Any] | None = None) -> Pin:
        return cls(name, description, schema, tool_hash(name, description, schema), annotations or {})

    def to_json(self) -> dict[str, Any]:
        return {"description": self.description, "inputSchema": self.schema, "hash": self.hash,
                "annotations": self.annotations}


def pins_path(env: dict[str, str] | None = None) -> Path:
    """Beside the config file; with no config file (ABHED_CONFIG set empty), in the default config
    directory, since no configured server needs them then (mypy found that case a traceback)."""
    env = dict(os.environ) if env is None else env
    config = config_path(env) or config_path({k: v for k, v in env.items() if k != "ABHED_CONFIG"})
    assert config is not None  # without ABHED_CONFIG there is always a path
    return config.parent / FILE_NAME


def _read(path: Path) -> dict[str, Any]:
    """The pins file's servers (empty when there is none), its ownership checked."""
    try:
        with open(path, "rb") as handle:
            check_ownership(path, os.fstat(handle.fileno()))
            data = json.loads(handle.read())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"Cannot read the MCP pins {path}: {exc}. Fix or remove it, then review the servers "
                          "again (abhed mcp review NAME).") from exc
    servers = data.get("servers") if isinstance(data, dict) else None
    return {str(k): v for k, v in servers.items()} if isinstance(servers, dict) else {}


def load(path: Path) -> dict[str, dict[str, Pin]]:
    """server -> tool -> Pin. A pin whose hash does not match its own text is dropped (a hand edit
    cannot admit a tool)."""
    out: dict[str, dict[str, Pin]] = {}
    for server, entry in _read(path).items():
        tools = entry.get("tools") if isinstance(entry, dict) else None
        pinned: dict[str, Pin] = {}
        for name, tool in (tools if isinstance(tools, dict) else {}).items():
            if not isinstance(tool, dict) or not isinstance(tool.get("description"), str) \
                    or not isinstance(tool.get("inputSchema"), dict):
                continue
            pin = Pin.of(name, tool["description"], tool["inputSchema"], tool.get("annotations") or {})
            if pin.hash == tool.get("hash"):
                pinned[name] = pin
        out[server] = pinned
    return out


def load_declined(path: Path) -> dict[str, dict[str, str]]:
    """server -> tool -> the hash of the definition the operator declined at review. A decline is a
    review's decision like an admission: the tool stays withheld, but is no longer "new" (not
    noticed at every start, not asked again); a changed definition has another hash, so it is new
    again. A hand edit here can only silence the notice of a tool that stays withheld."""
    out: dict[str, dict[str, str]] = {}
    for server, entry in _read(path).items():
        declined = entry.get("declined") if isinstance(entry, dict) else None
        out[server] = {str(name): str(tool["hash"]) for name, tool in
                       (declined if isinstance(declined, dict) else {}).items()
                       if isinstance(tool, dict) and isinstance(tool.get("hash"), str)}
    return out


def save_server(path: Path, server: str, pins: dict[str, Pin] | None, declined: dict[str, str] | None = None) -> None:
    """Replace one server's pins and declined tools (tool -> hash; load_declined) (pins None: forget
    the server), keeping every other server's."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # The lock is the directory's own (filelock), taken on this read descriptor.
    dirfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with filelock.locked(dirfd, filelock.WAIT_S):
            try:
                with open(path, "rb") as handle:
                    check_ownership(path, os.fstat(handle.fileno()))
                    data = json.loads(handle.read())
            except FileNotFoundError:
                data = {}
            except (OSError, ValueError) as exc:
                raise ConfigError(f"Cannot read the MCP pins {path}: {exc}. Fix or remove it.") from exc
            servers = dict(data.get("servers") or {}) if isinstance(data, dict) else {}
            if pins is None:
                servers.pop(server, None)
            else:
                servers[server] = {"reviewed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                   "tools": {name: pin.to_json() for name, pin in sorted(pins.items())}}
                if declined:
                    servers[server]["declined"] = {name: {"hash": h} for name, h in sorted(declined.items())}
            text = json.dumps({"version": VERSION, "servers": servers}, ensure_ascii=True,
                              indent=1, sort_keys=True)  # pragma: no mutate  (for the human reading it; any layout loads)
            replace_file(path, (text + "\n").encode("ascii"), mode=0o600)
    except filelock.Busy as exc:
        raise ConfigError(f"The MCP pins {path} were not saved: the directory {path.parent} is {exc} (another Abhed "
                          "process saving there?). Retry in a moment.") from None
    finally:
        os.close(dirfd)
