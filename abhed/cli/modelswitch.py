"""Chat's `/model`: the models the endpoint serves (GET /v1/models), and switching among them.

`/model` lists them, the one in use marked; `/model ID` connects to ID as a chat start does
(model/connect.py: the id must be served, a profile is chosen for it, the window is the server's
max_model_len, the output cap and tool-call format follow), tells the conformance verdicts saved for
its profile (`abhed conformance --save`), and the agent uses it from the next request on
(loop.Agent.use_model). The switch is for this chat: each run's record names its model (RunEvent),
and a later `abhed chat --session` or `resume` starts with the configured one again.
"""

from __future__ import annotations

from typing import Any

from abhed.model.errors import ModelError
from abhed.model.profiles import ProfileError

MAX_LISTED = 50


def listing(agent: Any) -> list[str]:
    """A line per served model, the one in use marked with *; or what went wrong."""
    try:
        served = agent.model.client.models(attempts=1)
    except ModelError as exc:
        return [f"/model: could not list the models: {exc.message}"]
    if not served:
        return [f"/model: the server at {agent.model.client.endpoint} lists no model"]
    lines = [f"{'*' if m.id == agent.model.id else ' '} {m.id}"
             + (f"  (context {m.max_model_len} tokens)" if m.max_model_len else "") for m in served[:MAX_LISTED]]
    if len(served) > MAX_LISTED:
        lines.append(f"[{len(served) - MAX_LISTED} more not shown]")
    lines.append("[* in use; switch with /model ID, for this chat]")
    return lines


def switch(agent: Any, model_id: str, display: Any) -> list[str]:
    """Connect to `model_id` on the same endpoint and hand it to the agent; lines for the person."""
    from abhed.cli import launch
    from abhed.conformance.report import one_line, saved
    settings = agent.ctx.settings
    served = settings.model.model_copy(update={"model": model_id, "endpoint": agent.model.client.endpoint})
    chosen = settings.model_copy(update={"model": served})
    try:
        model = launch.open_model(chosen, display, prefer=agent.model.client.endpoint)  # model.endpoints: stay
    except (ModelError, ProfileError) as exc:
        return [f"/model: {exc} The model in use is still {agent.model.id}."]
    old = agent.model
    agent.use_model(model)
    old.client.close()
    reports = saved(model.profile.name, settings.home)
    verdict = (f"conformance of profile {model.profile.name}: {one_line(reports[-1])}" if reports else
               f"no conformance report saved for profile {model.profile.name} (abhed conformance --save checks it)")
    return [f"now using {model.describe()}", verdict,
            "[for this chat; a resumed session starts with the configured model]"]
