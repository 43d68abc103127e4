"""Why a completion failed, in words that name the endpoint and what to check.

`retryable` marks faults where asking again can help (the server was down, overloaded, or cut the
stream). A chat completion has no side effects, so any of these may be retried; the caller decides
how often. ContextOverflow is never retried as is: the conversation must shrink first.

`unavailable` marks, among those, a server that is not up at all: no connection (refused, reset
before a word, nothing answering) or HTTP 502/503, what a proxy or a server says while the model
loads. That is waited out rather than counted as a failed try (client.py). Statuses retried: 408,
429 and 5xx but 501 and 505 (which say the request can never succeed); other 4xx are final.
"""

from __future__ import annotations

import re

from abhed.common.terminal import printable


class ModelError(Exception):
    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None,
                 server_said: str | None = None, unavailable: str | None = None, timed_out: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable or unavailable is not None
        self.status = status
        self.server_said = server_said  # the server's own words, when it answered with an error
        self.unavailable = unavailable  # the server is not up: what was seen, in a few words
        self.timed_out = timed_out  # no reply began within model.timeout_s (another endpoint may answer)
        self.retry_after = retry_after  # seconds the server asked to wait (Retry-After on 429/503), capped


class ContextOverflow(ModelError):
    """The prompt plus the requested output does not fit the model's context window."""

    def __init__(self, message: str, *, limit: int | None, requested: int | None) -> None:
        super().__init__(message, retryable=False, status=400)
        self.limit = limit
        self.requested = requested


class ToolsUnsupported(ModelError):
    """The server was started without a tool-call parser, so it refuses `tools` with tool_choice auto."""


class NotAnApi(ModelError):
    """Something answers at the endpoint, but not as an OpenAI-compatible API: its /models is not
    found, or not a model list (a web page, another service, a wrong path). connect.py then looks
    for the API where vLLM serves it, to suggest that endpoint only when it answers."""


def body_gist(data: bytes, content_type: str | None, whole: bool = True) -> str:
    """A body that is not the API's JSON, in words for one error line: its content type, size and
    first line, escaped and bounded (a web page is never pasted whole)."""
    text = data.decode("utf-8", "replace")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = first if len(first) <= 80 else first[:80] + " [...]"
    kind = (content_type or "").split(";")[0].strip() or "no content type"
    size = f"{len(data)} bytes" if whole else f"more than {len(data)} bytes"
    return f"{printable(kind)}, {size}, first line \"{printable(first)}\""


_LIMIT = re.compile(r"maximum context length is (\d+)")
_REQUESTED = (re.compile(r"you requested (\d+) tokens"), re.compile(r"for a total of at least (\d+) tokens"),
              re.compile(r"your request has (\d+) input tokens"), re.compile(r"prompt contains at least (\d+) input"))
_OVERFLOW_WORDS = ("maximum context length", "context_length_exceeded", "longer than the maximum model length",
                   "is too long and exceeds limit")


def is_overflow(message: str) -> bool:
    lowered = message.lower()
    return any(word in lowered for word in _OVERFLOW_WORDS)


def overflow(message: str, endpoint: str) -> ContextOverflow:
    limit = _LIMIT.search(message)
    requested = next((m for m in (p.search(message) for p in _REQUESTED) if m), None)
    return ContextOverflow(f"The conversation no longer fits the model's context window ({endpoint}): {message}",
                           limit=int(limit.group(1)) if limit else None,
                           requested=int(requested.group(1)) if requested else None)


def error_text(body: object) -> str:
    """The message in an error body: vLLM's `{"error": {"message"}}`, its older flat
    `{"object": "error", "message"}`, or whatever text the server sent."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return str(inner.get("message") or inner.get("detail") or inner)
        if isinstance(inner, str):
            return inner
        if "detail" in body:
            return str(body["detail"])
    return str(body)[:2000]


def _about_images(message: str) -> bool:
    lowered = message.lower()
    return "image(s) may be provided" in lowered or ("image" in lowered and ("tool message" in lowered or
                                                                             "multimodal" in lowered))


def from_status(status: int, message: str, endpoint: str) -> ModelError:
    """The error for an HTTP status and the server's message."""
    if status in (400, 413) and is_overflow(message):
        return overflow(message, endpoint)
    if status == 400 and "enable-auto-tool-choice" in message:
        return ToolsUnsupported(
            f"The model server at {endpoint} refuses tool calls: {message}. Start vLLM with the flags of the model's "
            "profile (`abhed models` shows them, e.g. --enable-auto-tool-choice --tool-call-parser hermes), or let "
            "Abhed describe the tools in the prompt instead: model.tool_format = \"hermes\" (ABHED_TOOL_FORMAT).",
            status=status)
    if status == 400 and _about_images(message):
        return ModelError(
            f"The model server at {endpoint} refused the images in the request (HTTP 400: {message}). Abhed sent them "
            "because the model's profile (or model.images) says it takes images. Match the server: model.max_images "
            "to its --limit-mm-per-prompt, model.image_placement = \"user\" if it takes no images in tool messages, "
            "or model.images = \"off\" for a text-only model; `abhed doctor` checks all three.", status=status,
            server_said=message)
    if status in (401, 403):
        return ModelError(f"The model server at {endpoint} refused the credentials (HTTP {status}: {message}). Check "
                          "the API key: model.api_key or ABHED_API_KEY must match vLLM's --api-key.", status=status)
    if status == 404:  # /models answered, so the endpoint is right (NotAnApi is the 404 of /models)
        return ModelError(f"Not found at {endpoint} (HTTP 404: {message}). Check the model name: GET "
                          f"{endpoint}/models lists the ones the server serves (--model, ABHED_MODEL, model.model).",
                          status=status)
    if status in (502, 503):
        return ModelError(f"The model server at {endpoint} is not serving (HTTP {status}: {message}). It may be "
                          "restarting or still loading the model; check the vLLM logs.", status=status,
                          unavailable=f"HTTP {status}: {' '.join(message.split())[:100]}")
    if status in (408, 429) or (status >= 500 and status not in (501, 505)):
        return ModelError(f"The model server at {endpoint} failed (HTTP {status}: {message}). It may be overloaded or "
                          "restarting; check the vLLM logs.", retryable=True, status=status)
    return ModelError(f"The model server at {endpoint} rejected the request (HTTP {status}: {message}).",
                      status=status)
