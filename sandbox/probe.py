"""``probe()``: can the configured backend run commands here? For ``abhed doctor``."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from sandbox.config import SandboxConfig
from sandbox.errors import SandboxError
from sandbox.box import UNSANDBOXED_WARNING, Sandbox


@dataclass(frozen=True)
class ProbeReport:
    """ok: a test command ran as configured. summary: one line. details: how, or what to fix."""

    ok: bool
    backend: str
    summary: str
    details: tuple[str, ...]


def probe(config: SandboxConfig | None = None, workspace: Path | str | None = None) -> ProbeReport:
    """Build the sandbox and run one trivial command in it.

    Without ``workspace`` a temporary directory stands in for it. Never raises for an
    unusable backend: the report says what failed and what to do.
    """
    config = config or SandboxConfig()
    if workspace is not None:
        return _probe_in(config, Path(workspace))
    with tempfile.TemporaryDirectory(prefix="abhed-probe-") as tmp:
        return _probe_in(config, Path(tmp))


def _probe_in(config: SandboxConfig, workspace: Path) -> ProbeReport:
    try:
        with Sandbox(config, workspace) as sandbox:
            result = sandbox.run("cd / && exit 0", cwd=sandbox.workspace, timeout_s=60)
            details = tuple(sandbox.describe())
    except SandboxError as exc:
        return ProbeReport(False, config.backend, f"{config.backend} backend NOT usable: {exc}", (str(exc),))
    if result.exit_code != 0:
        text = f"{config.backend} backend NOT usable: a trivial command exited {result.exit_code}: {result.output.strip()[:500]!r}"
        return ProbeReport(False, config.backend, text, details)
    if not result.sandboxed:
        return ProbeReport(True, result.backend, f"backend '{result.backend}': commands run, but {UNSANDBOXED_WARNING}", details)
    return ProbeReport(True, result.backend, f"{result.backend} sandbox works", details)
