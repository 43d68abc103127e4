"""The operator's [sandbox] settings as the sandbox package takes them: one mapping for every part
that builds a sandbox (the bash tool, the MCP gateway's stdio servers, `abhed doctor`).

The sandbox package imports nothing from Abhed, so it names its limits by its own field names;
SANDBOX_SETTING_NAMES gives it the operator's names for them, which its notes and errors quote.
"""

from __future__ import annotations

import sandbox
from sandbox.backends import Capabilities, capabilities

from abhed.common import frozen
from abhed.session.config import Settings

# The sandbox's limits as the operator's config names them (the sandbox's notes quote these).
SANDBOX_SETTING_NAMES = (("processes", "sandbox.max_processes"), ("file_size_bytes", "sandbox.max_file_bytes"),
                         ("memory_bytes", "sandbox.max_memory_bytes"), ("disk_reserve_bytes", "sandbox.disk_reserve_bytes"),
                         ("session_memory_bytes", "sandbox.max_session_memory_bytes"),
                         ("session_processes", "sandbox.max_session_processes"),
                         ("background_jobs", "sandbox.max_background_jobs"))


def sandbox_config(settings: Settings) -> sandbox.SandboxConfig:
    """The operator's [sandbox] settings as a sandbox.SandboxConfig (bash, the gateway and doctor use it)."""
    cfg = settings.sandbox
    limits = sandbox.Limits(processes=cfg.max_processes, file_size_bytes=cfg.max_file_bytes,
                            memory_bytes=cfg.max_memory_bytes, disk_reserve_bytes=cfg.disk_reserve_bytes,
                            session_memory_bytes=cfg.max_session_memory_bytes,
                            session_processes=cfg.max_session_processes, background_jobs=cfg.max_background_jobs,
                            setting_names=SANDBOX_SETTING_NAMES)
    return sandbox.SandboxConfig(backend=cfg.backend, bwrap_path=cfg.bwrap_path or frozen.bundled("bwrap"), allow_network=cfg.allow_network,
                                 env_passthrough=tuple(cfg.env_passthrough), ro_binds=tuple(cfg.ro_binds),
                                 rw_binds=tuple(cfg.rw_binds), protected_paths=tuple(cfg.protected_paths),
                                 limits=limits, microvm=sandbox.MicrovmConfig(**cfg.microvm.model_dump()))


def backend_capabilities(settings: Settings) -> Capabilities:
    """What the configured backend is (sandbox.backends.Capabilities): read this, never compare its name."""
    return capabilities(settings.sandbox.backend)
