"""sandbox: run one shell command confined to a workspace (draft docstring, expanded below)."""

from __future__ import annotations

from pathlib import Path

from sandbox.config import DEFAULT_PROTECTED_PATHS, Limits, SandboxConfig
from sandbox.errors import (
    BackendUnavailable,
    ConfigError,
    PathError,
    SandboxError,
    SandboxSetupError,
    UserNamespacesUnavailable,
)
from sandbox.probe import ProbeReport, probe
from sandbox.session import UNSANDBOXED_WARNING, BackgroundJob, JobStatus, Result, Sandbox

__all__ = [
    "DEFAULT_PROTECTED_PATHS",
    "UNSANDBOXED_WARNING",
    "BackendUnavailable",
    "BackgroundJob",
    "ConfigError",
    "JobStatus",
    "Limits",
    "PathError",
    "ProbeReport",
    "Result",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxSetupError",
    "UserNamespacesUnavailable",
    "poll",
    "probe",
    "run",
    "start_background",
    "stop",
]


def run(
    command: str,
    *,
    workspace: Path | str,
    cwd: Path | str,
    timeout_s: float,
    config: SandboxConfig,
    output_limit_chars: int | None = None,
) -> Result:
    """One-shot: build a Sandbox, run ``command``, close it. A session should keep a Sandbox instead."""
    with Sandbox(config, workspace) as sandbox:
        return sandbox.run(command, cwd=cwd, timeout_s=timeout_s, output_limit_chars=output_limit_chars)


def start_background(command: str, *, sandbox: Sandbox, cwd: Path | str, log_path: Path | str) -> BackgroundJob:
    """Start ``command`` in the background of ``sandbox`` (see Sandbox.start_background)."""
    return sandbox.start_background(command, cwd=cwd, log_path=log_path)


def poll(job: BackgroundJob) -> JobStatus:
    return job.poll()


def stop(job: BackgroundJob) -> JobStatus:
    return job.stop()
