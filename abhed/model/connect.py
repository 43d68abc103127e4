"""Connecting to the model server: which model it serves, the profile for it, the window to fit.

The context window is the server's `max_model_len` when it reports one (it is what the server
enforces), else the profile's. The output cap is the profile's, never more than a quarter of the
window, so a reply always leaves room for the conversation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit
from typing import TYPE_CHECKING, Any

from abhed.model import profiles
from abhed.model.client import MAX_REPLY_BYTES, ModelClient, RetrySink
from abhed.model.errors import ModelError, NotAnApi
from abhed.model.profiles import Profile, Vision

if TYPE_CHECKING:
    from abhed.model.endpoints import Pool


@dataclass
class Model:
    client: ModelClient
    id: str
    profile: Profile
    matched: bool  # False: no profile matched the id and the generic one is in use
    context_window: int
    max_output: int
    tool_format: str
    fallback_format: str | None  # the text protocol to switch to if the server refuses tools; None when pinned
    stream: bool = True
    vision: Vision | None = None  # what images it takes (profile and operator); None: text only

    def describe(self) -> str:
        profile = self.profile.name if self.matched else f"{self.profile.name} (no profile matched this id)"
        images = (f"images up to {self.vision.max_images} a request" if self.vision else "text only")
        return (f"model {self.id} at {self.client.endpoint}; profile {profile}; context {self.context_window} tokens; "
                f"tool calls {self.tool_format}; {images}")


def connect(endpoint: str, *, api_key: str | None = None, model: str | None = None, profile: str | None = None,
            tool_format: str = "auto", stream: bool = True, timeout_s: float = 300.0, attempts: int = 4,
            backoff_s: float = 1.0, stall_s: float = 60.0, max_request_s: float = 900.0,
            max_reply_bytes: int = MAX_REPLY_BYTES, profiles_dir: Path | None = None, images: str = "auto",
            image_limits: dict[str, Any] | None = None,
            probe_attempts: int | None = None, connect_s: float = 10.0, probe_connect_s: float | None = None,
            on_retry: RetrySink | None = None, wait_loading: bool = False, client_factory: Callable[..., ModelClient] = ModelClient,
            pool: Pool | None = None) -> Model:
    """Ask the server what it serves and set up the model to use; ModelError or ProfileError if impossible.
    `probe_attempts` bounds the tries of that first question (default: `attempts`, as every request) and
    `probe_connect_s` its connect (default: `connect_s`, as every request); `wait_loading` waits out
    a server that answers 502/503 to that question (ModelClient.models). `pool`: the other servers of
    model.endpoints, where requests go when this one is down (endpoints.py)."""
    client = client_factory(endpoint, api_key=api_key, timeout_s=timeout_s, attempts=attempts, backoff_s=backoff_s,
                            stall_s=stall_s, max_request_s=max_request_s, connect_s=connect_s,
                            max_reply_bytes=max_reply_bytes, **({"pool": pool} if pool is not None else {}))
    try:
        try:
            served = client.models(on_retry=on_retry, attempts=probe_attempts, connect_s=probe_connect_s,
                                   wait_loading=wait_loading)
        except NotAnApi as exc:
            exc.message = f"{exc.message} {_where_it_answers(client.endpoint, api_key, connect_s, client_factory)}"
            exc.args = (exc.message,)
            raise
        if not served:
            raise ModelError(f"The model server at {client.endpoint} serves no model (its /models list is empty).")
        chosen = next((m for m in served if m.id == model), None) if model else served[0]
        if chosen is None:
            ids = ", ".join(m.id for m in served)
            raise ModelError(f"The model server at {client.endpoint} does not serve {model!r}; it serves: {ids}. Set "
                             "--model (ABHED_MODEL, model.model) to one of them, or leave it unset to use the first.")
        picked, matched = profiles.choose(chosen.id, profiles.load(profiles_dir), profile)
    except BaseException:
        client.close()
        raise
    window = chosen.max_model_len or picked.context_window
    pinned = tool_format != "auto"
    fmt = tool_format if pinned else picked.tool_format
    return Model(client=client, id=chosen.id, profile=picked, matched=matched, context_window=window,
                 max_output=max(256, min(picked.max_output_tokens, window // 4)), tool_format=fmt,
                 fallback_format=None if pinned or fmt != "native" else picked.text_format, stream=stream,
                 vision=profiles.vision_for(picked, images, image_limits))


PROBE_S = 5.0  # a hint's probe: one short question, never a wait


def _where_it_answers(endpoint: str, api_key: str | None, connect_s: float,
                      client_factory: Callable[..., ModelClient]) -> str:
    """The next step when something answers at `endpoint` but not as the API: the endpoint where
    vLLM serves it (the server's root + /v1), named only when a model list answers there."""
    parts = urlsplit(endpoint)
    candidate = urlunsplit((parts.scheme, parts.netloc, "/v1", "", ""))
    setting = "(--endpoint, ABHED_ENDPOINT or model.endpoint)"
    if candidate == endpoint.rstrip("/"):
        return f"Is this a vLLM server? It serves the API at http://HOST:8000/v1; check the endpoint {setting}."
    try:
        with client_factory(candidate, api_key=api_key, timeout_s=PROBE_S, attempts=1,
                            connect_s=min(connect_s, PROBE_S)) as probe:
            served = probe.models(attempts=1)
    except ModelError:
        return (f"Nor does {candidate}, where vLLM serves it: is this a vLLM server? Check the endpoint {setting}; "
                "vLLM serves http://HOST:8000/v1 by default.")
    ids = ", ".join(m.id for m in served[:3]) + (", ..." if len(served) > 3 else "")
    return f"The API answers at {candidate} (serving {ids or 'no model yet'}): set the endpoint to it {setting}."
