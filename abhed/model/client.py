"""An OpenAI-compatible chat client for the site's own model server (vLLM), over httpx.

`models()` reads /v1/models (the served ids and vLLM's `max_model_len`); `chat()` posts to
/v1/chat/completions, streaming by default: text deltas go to a callback as they arrive, tool-call
argument fragments are joined by `index` (the last one may come in the chunk that carries
`finish_reason`), and `stream_options.include_usage` brings the token counts in a final chunk.

Faults the server or the network cause (reset connections, timeouts, 5xx, 408 and 429, a
stream cut mid-way or stalled, an error event inside the stream) are retried with exponential
backoff, up to `attempts` tries: a completion has no side effects, and no tool runs before a reply
is whole, so a retry never repeats an effect (what streamed of the failed try is discarded: the
loop's on_retry tells the display). The rest raise at once (other 4xx: the request itself is wrong).
Every error names the endpoint and what to check (errors.py).

A server that is not up (ModelError.unavailable: no connection, HTTP 502/503 while it restarts or
loads a model, minutes for a large one) is waited out by chat(): those tries are not counted
against `attempts`, the pause between them grows to at most WAIT_INTERVAL_S, and every pause is
told (Retry.notice: the endpoint, what was seen, the time waited of max_request_s). models() is
the question at start-up and in `abhed doctor`, where a wrong endpoint is told at once: it waits
only, when asked to (a session's start), for a server that answers 502/503, which is there.

Two waits are told apart. Before a reply begins, the server may be busy for long (a queue, the
prefill of a long prompt): `timeout_s` bounds that wait, and a non-streamed reply, which sends
nothing until it is whole. Once a streamed reply has begun, tokens come every few hundredths of a
second, so silence for `stall_s` means the server stalled: a watchdog closes the connection and the
request is retried. A slow long answer that keeps streaming is never cut. `max_request_s` bounds all
the tries of one failing request, waits included: no retry starts that would end past it.

A reply is bounded by `max_reply_bytes` (model.max_reply_bytes), counted as it arrives: the UTF-8
bytes of text, reasoning and tool-call arguments of a stream (one stream line may be at most twice
that, for JSON's escapes), the body of a reply that is not streamed. At the bound the client stops
reading and closes the connection: a server that ignores max_tokens cannot fill the memory or the
screen. Error bodies are read up to ERROR_BODY_LIMIT.

Connecting has a bound of its own, `connect_s` (10 s), for every request of a session. The first
question at start-up (`models(connect_s=...)`, 2 s from model.startup_connect_s) gets a shorter one:
a server on the site's network accepts a connection in milliseconds, so an endpoint that has not
answered within it (a wrong address, a host down, a firewall dropping packets) is told at once.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

# httpx imports its own command line (httpx._main, which brings click, rich and pygments) when it is
# imported, for the `httpx` program. Abhed never runs it, and it was a tenth of `abhed chat`'s
# start-up (issue 18): marked absent, httpx defines a stub in its place, as it does without its
# [cli] extra. The one-file binary leaves it out the same way (build.sh).
# (None in sys.modules is the import system's mark for "absent"; typeshed allows modules only.)
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
import httpx  # noqa: E402

from abhed.common.terminal import printable
from abhed.model.errors import ModelError, NotAnApi, body_gist, error_text, from_status, is_overflow, overflow
from abhed.model.sse import LineTooLong, data_events, lines
from abhed.model.wire import Encoded, Reply, ToolCall, Usage, call_id

# model.endpoints (endpoints.py) is imported where a pool or a fault needs it: one server's start does not load it.
if TYPE_CHECKING:
    from abhed.model.endpoints import Pool

T = TypeVar("T")
# What one streamed call's arguments may grow to in memory, whatever agent.max_argument_bytes says
# (dispatch's bound, checked later): a server streaming gigabytes of arguments must not take the
# process with it. Beyond this the fragments are counted, not kept, and the call comes back refused.
WIRE_ARGUMENT_LIMIT = 16 * 1024 * 1024
MAX_REPLY_BYTES = 16 * 1024 * 1024  # model.max_reply_bytes's default
ERROR_BODY_LIMIT = 64 * 1024  # what is read of an error's body: the message is at its start
BACKOFF_CAP_S = 30.0  # the longest pause between two tries of a failing request
# ...and between two tries while the server is down: a restarted server is used within seconds of
# coming up, and the human hears at every pause that Abhed is still waiting.
WAIT_INTERVAL_S = 5.0
TextSink = Callable[[str], None]


def _answered_unavailable(exc: ModelError) -> bool:
    """The server answered that it is not serving yet (502/503), rather than not answering at all."""
    return exc.status in (502, 503)


@dataclass(frozen=True)
class Retry:
    """One try failed and another follows after `pause` seconds: what to tell the human."""

    error: ModelError
    endpoint: str
    failures: int  # the tries that failed, waits for an unavailable server not counted
    attempts: int  # the tries a request may fail
    pause: float
    elapsed: float  # since the request's first try
    limit: float  # model.max_request_s
    waiting: bool  # the server is not up, and this is a wait for it, not a counted failure
    asked: float | None = None  # the pause the server asked for (Retry-After), honoured
    switched_to: str | None = None  # model.endpoints: the request goes on at once at this endpoint
    down: str | None = None  # model.endpoints: every endpoint is down; each one and why

    def notice(self) -> str:
        asked = f" (the server asked for {self.asked:g} s: Retry-After)" if self.asked is not None else ""
        if self.switched_to is not None:
            return (f"The model server at {self.endpoint} is down ({_why(self.error)}); this session goes on at "
                    f"{self.switched_to} (model.endpoints){asked}.")
        if self.down is not None:
            return (f"No model server of model.endpoints answers ({self.down}): {self.elapsed:.0f} s of "
                    f"{self.limit:g} s (model.max_request_s); next try at {self.endpoint} in "
                    f"{round(self.pause, 1):g} s{asked}. Ctrl-C stops waiting.")
        if self.waiting:
            return (f"Waiting for the model server at {self.endpoint} ({self.error.unavailable}): "
                    f"{self.elapsed:.0f} s of {self.limit:g} s (model.max_request_s); next try in {round(self.pause, 1):g} s"
                    f"{asked}. It may be restarting or loading its model; Ctrl-C stops waiting.")
        return (f"{self.error.message} Retrying in {self.pause:g} s{asked} (attempt {self.failures + 1} of "
                f"{self.attempts}).")


def _why(error: ModelError) -> str:
    from abhed.model.endpoints import down_reason
    return down_reason(error) or error.message


RetrySink = Callable[[Retry], None]


@dataclass(frozen=True)
class ServedModel:
    id: str
    max_model_len: int | None  # vLLM's context window; None when the server does not say


class ModelClient:
    def __init__(self, endpoint: str, *, api_key: str | None = None, timeout_s: float = 300.0,
                 connect_s: float = 10.0, attempts: int = 4, backoff_s: float = 1.0, stall_s: float = 60.0,
                 max_request_s: float = 900.0, max_reply_bytes: int = MAX_REPLY_BYTES,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 pool: Pool | None = None) -> None:
        self.endpoint = endpoint.rstrip("/")
        # model.endpoints: the others to go to when this one is down (endpoints.py); None: this one only
        self.pool = pool
        self.timeout_s = timeout_s
        self.connect_s = connect_s
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.stall_s = stall_s
        self.max_request_s = max_request_s
        self.max_reply_bytes = max_reply_bytes
        self.sleep = sleep
        self.clock = clock
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # An http:// endpoint never uses TLS: a context that trusts no certificate spares loading the
        # CA bundle at every start (35 ms of CPU, measured: issue 18), and would refuse
        # any TLS server it were ever pointed at, so nothing is weakened. https:// verifies as always.
        verify: ssl.SSLContext | bool = (ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                                         if self.endpoint.startswith("http://") else True)
        # trust_env=False: no proxy from the environment; Abhed talks to the configured endpoint only.
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=connect_s), headers=headers,
                                  trust_env=False, verify=verify)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- /v1/models -------------------------------------------------------------------------------

    def models(self, on_retry: RetrySink | None = None, attempts: int | None = None,
               connect_s: float | None = None, wait_loading: bool = False) -> list[ServedModel]:
        """The served models; `attempts` and `connect_s` override the client's (1 try and a short
        connect at start-up: a wrong endpoint is better told at once than after a minute of retries).
        With `wait_loading`, a server that answers 502/503 (there, loading its model: no wrong
        endpoint answers so) is waited out to max_request_s, each pause told; `abhed doctor` does
        not wait, it says what it saw."""
        limit = (connect_s, "model.startup_connect_s") if connect_s is not None else None
        body = self._retrying(lambda: self._get_models(limit), on_retry, attempts,
                              wait=_answered_unavailable if wait_loading else False)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise NotAnApi(f"{self.endpoint} does not answer as an OpenAI-compatible API: GET {self.endpoint}/models "
                           f"answered JSON that is no model list ({printable(str(body)[:100])!r}).")
        return [ServedModel(str(m["id"]), _int(m.get("max_model_len"))) for m in data if isinstance(m, dict) and "id" in m]

    def _get_models(self, limit: tuple[float, str] | None) -> Any:
        with self._faults(limit):
            timeout = httpx.Timeout(self.timeout_s, connect=limit[0]) if limit else httpx.USE_CLIENT_DEFAULT
            with self._http.stream("GET", self.endpoint + "/models", timeout=timeout) as response:
                if response.status_code == 404:
                    data, whole = _read(response, ERROR_BODY_LIMIT)
                    raise NotAnApi(f"{self.endpoint} does not answer as an OpenAI-compatible API: GET "
                                   f"{self.endpoint}/models answered HTTP 404 ({_said(response, data, whole)}).",
                                   status=404)
                if response.status_code != 200:
                    raise self._status_error(response)
                data = self._body(response)
                try:
                    return json.loads(data)
                except ValueError:
                    raise NotAnApi(f"{self.endpoint} does not answer as an OpenAI-compatible API: GET "
                                   f"{self.endpoint}/models answered HTTP 200 with a body that is not JSON "
                                   f"({body_gist(data, response.headers.get('content-type'))}).") from None

    # -- /v1/chat/completions -------------------------------------------------------------------------

    def chat(self, body: dict[str, Any], *, stream: bool = True, on_text: TextSink | None = None,
             on_reasoning: TextSink | None = None, on_retry: RetrySink | None = None) -> Reply:
        """One completion. `body` is the request without `stream`; retries as the module says."""
        body = {**body, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        payload = _payload(body)
        if stream:
            return self._retrying(lambda: self._stream(payload, on_text, on_reasoning), on_retry, wait=True)
        return self._retrying(lambda: self._complete(payload), on_retry, wait=True)

    def _stream(self, payload: bytes, on_text: TextSink | None, on_reasoning: TextSink | None) -> Reply:
        with self._faults():
            with self._http.stream("POST", self.endpoint + "/chat/completions", content=payload,
                                   headers={"Content-Type": "application/json"}) as response:
                if response.status_code != 200:
                    raise self._status_error(response)
                reply = Assembler(self.endpoint, on_text, on_reasoning, limit=self.max_reply_bytes)
                done = False
                with Watchdog(response, self.stall_s) as watchdog:
                    try:
                        # One line may hold at most twice the reply's bound: JSON escapes what it carries.
                        for data in data_events(watchdog.lines(lines(response.iter_bytes(),
                                                                     2 * self.max_reply_bytes))):
                            if data.strip() == "[DONE]":
                                done = True
                                break
                            reply.feed(_event(data, self.endpoint))
                    except LineTooLong:
                        raise too_large(self.endpoint, self.max_reply_bytes) from None
                    except (httpx.HTTPError, ModelError):
                        if not watchdog.stalled:
                            raise
                    # The watchdog shut the connection: a chunked stream fails the read, one that ends with
                    # the connection (HTTP/1.0, some proxies) merely ends, maybe mid-event (which then does
                    # not parse). Each is a stall, unless the reply was whole (its finish_reason came) and
                    # only the usage or [DONE] was missing.
                    if watchdog.stalled and not done and reply.finish_reason is None:
                        raise self._stalled()
                return reply.finish(done)

    def _stalled(self) -> ModelError:
        return ModelError(f"The model server at {self.endpoint} stalled: its reply had begun, then nothing came for "
                          f"{self.stall_s:g} s. The server may be hung or overloaded; check the vLLM logs (and GPU "
                          "health), or raise model.stall_s if it is merely slow between tokens.", retryable=True)

    def _complete(self, payload: bytes) -> Reply:
        with self._faults():
            with self._http.stream("POST", self.endpoint + "/chat/completions", content=payload,
                                   headers={"Content-Type": "application/json"}) as response:
                if response.status_code != 200:
                    raise self._status_error(response)
                body = _json(self._body(response), self.endpoint)
        if not isinstance(body, dict):
            raise ModelError(f"The model server at {self.endpoint} answered {str(body)[:200]!r}, not a completion.")
        if "error" in body or body.get("object") == "error":
            raise in_band_error(body, self.endpoint)
        choices = body.get("choices") or [{}]
        message = choices[0].get("message") or {}
        calls = [ToolCall(id=c.get("id") or call_id(), name=(c.get("function") or {}).get("name") or "",
                          arguments=_arguments((c.get("function") or {}).get("arguments")))
                 for c in message.get("tool_calls") or []]
        return Reply(text=message.get("content") or "", tool_calls=calls, finish_reason=choices[0].get("finish_reason"),
                     usage=_usage(body.get("usage")),
                     reasoning=message.get("reasoning_content") or message.get("reasoning") or "")

    # -- faults ---------------------------------------------------------------------------------------

    def _retrying(self, attempt: Callable[[], T], on_retry: RetrySink | None, attempts: int | None = None,
                  wait: Callable[[ModelError], bool] | bool = False) -> T:
        """`attempt()` until it succeeds, fails for good, or fails `attempts` times; with `wait` (True:
        whenever the server is down; or a test of the error), the tries that find the server down are
        not counted, only bounded by max_request_s."""
        delay = self.backoff_s
        started = self.clock()
        allowed = max(1, attempts or self.attempts)
        tries = failures = 0
        while True:
            tries += 1
            used = self.endpoint  # the session's requests may run in threads (subagents): each knows its own
            try:
                result = attempt()
            except ModelError as exc:
                spent = self.clock() - started
                if self.pool is not None and spent < self.max_request_s and self._fail_over(exc, used, on_retry,
                                                                                            allowed, spent):
                    continue  # at once, at the next endpoint that is up: not a failure of the request
                down = self._all_down(exc)
                asked = exc.retry_after if down is None else self._rotate()
                waiting = exc.unavailable is not None and (wait(exc) if callable(wait) else wait)
                failures += not waiting
                left = self.max_request_s - spent
                if waiting:  # up to the bound: the last pause is shortened to end there, for a last look
                    pause, out_of_time = min(delay, WAIT_INTERVAL_S, left), left <= 0
                    pause = pause if asked is None else min(max(pause, asked), max(left, 0.0))
                else:  # a failing try may take long (timeout_s): none starts that could not end in time
                    pause = delay if asked is None else max(delay, asked)
                    out_of_time = spent + pause >= self.max_request_s
                if not exc.retryable or failures >= allowed or out_of_time:
                    raise self._given_up(exc, tries, spent, out_of_time, waiting)
                if on_retry is not None:
                    on_retry(Retry(exc, self.endpoint, failures, allowed, pause, spent, self.max_request_s, waiting,
                                   asked=asked if asked is not None and asked > 0 else None, down=down))
                self.sleep(pause)
                delay = min(delay * 2, BACKOFF_CAP_S)
            else:
                if self.pool is not None:
                    self.pool.mark_up(used)
                return result

    def _fail_over(self, exc: ModelError, used: str, on_retry: RetrySink | None, allowed: int, spent: float) -> bool:
        """model.endpoints: when `exc` says the endpoint `used` is down, mark it and move the session to
        the next one that is up, told (Retry.switched_to); False when it is not down or no other one is
        up. When another request of the session has moved it already, the retry follows, untold."""
        from abhed.model.endpoints import down_reason
        assert self.pool is not None
        why = down_reason(exc)
        if why is None:
            return False
        self.pool.mark_down(used, why, exc.retry_after)
        if self.endpoint != used and not self.pool.is_down(self.endpoint):
            return True
        target = self.pool.next_up(used)
        if target is None:
            return False
        if on_retry is not None:
            on_retry(Retry(exc, used, 0, allowed, 0.0, spent, self.max_request_s, False,
                           asked=exc.retry_after or None, switched_to=target))
        self.endpoint = target
        return True

    def _all_down(self, exc: ModelError) -> str | None:
        """Every endpoint of the pool is down, each one and why; None without a pool or while one is up."""
        from abhed.model.endpoints import down_reason
        if self.pool is None or down_reason(exc) is None or self.pool.next_up(self.endpoint) is not None:
            return None
        return self.pool.summary()

    def _every_one_down(self, exc: ModelError) -> bool:
        from abhed.model.endpoints import down_reason
        return self.pool is not None and down_reason(exc) is not None and self.pool.next_up("") is None

    def _rotate(self) -> float | None:
        """Every endpoint is down: the next try goes to the one whose wait ends first; the seconds to
        then when its server asked for them (Retry-After)."""
        assert self.pool is not None
        self.endpoint, wait_s = self.pool.soonest()
        return wait_s

    def _given_up(self, exc: ModelError, tries: int, spent: float, out_of_time: bool, waiting: bool) -> ModelError:
        """The last error, saying how long it was tried (when it was tried more than once, or not
        retried for want of time)."""
        if self.pool is not None and self._every_one_down(exc):
            exc.message = self.pool.all_down(exc.message if tries == 1 and not out_of_time else
                                             f"Abhed tried for {spent:.0f} s ({tries} tries; model.max_request_s = "
                                             f"{self.max_request_s:g} s).")
            exc.args = (exc.message,)
            return exc
        if not exc.retryable or (tries == 1 and not out_of_time):
            return exc
        if waiting:
            exc.message = (f"{exc.message} Abhed waited {spent:.0f} s for it to come back ({tries} tries; "
                           f"model.max_request_s = {self.max_request_s:g} s): start the server, or raise "
                           "model.max_request_s if loading its model takes longer.")
        else:
            exc.message = f"{exc.message} (tried {tries} time{'s' * (tries != 1)} in {spent:.0f} s"
            if out_of_time:
                exc.message += f"; gave up: model.max_request_s bounds one request to {self.max_request_s:g} s"
            exc.message += ")"
        exc.args = (exc.message,)
        return exc

    def _body(self, response: httpx.Response) -> bytes:
        """A reply's whole body, or the reply-too-large error past max_reply_bytes."""
        data, whole = _read(response, self.max_reply_bytes)
        if not whole:
            raise too_large(self.endpoint, self.max_reply_bytes)
        return data

    def _status_error(self, response: httpx.Response) -> ModelError:
        data, whole = _read(response, ERROR_BODY_LIMIT)
        error = from_status(response.status_code, _said(response, data, whole), self.endpoint)
        if response.status_code in (429, 503) and "retry-after" in response.headers:
            from abhed.model.endpoints import retry_after
            error.retry_after = retry_after(response.headers["retry-after"])
        return error

    @contextmanager
    def _faults(self, connect: tuple[float, str] | None = None) -> Iterator[None]:
        """ModelErrors for httpx's faults; `connect`: this request's connect bound and the setting
        that gave it, when not the client's."""
        where = self.endpoint
        seconds, setting = connect or (self.connect_s, "model.connect_s")
        try:
            yield
        except httpx.ConnectTimeout:
            raise ModelError(f"No connection to the model server at {where} within {seconds:g} s ({setting}): "
                             "nothing answered, as when the host is down or a firewall drops the packets. Check "
                             "that the host is up and reachable from this machine (firewall, VPN) and that the "
                             f"endpoint is right; on a slow link raise {setting}.",
                             unavailable=f"no answer to a connection within {seconds:g} s") from None
        except httpx.ConnectError as exc:
            raise ModelError(f"Cannot connect to the model server at {where} ({_reason(exc)}). Check that vLLM is "
                             "running and listening there, and that the endpoint is right (--endpoint, ABHED_ENDPOINT "
                             "or model.endpoint; vLLM serves http://HOST:8000/v1 by default).",
                             unavailable=_reason(exc)) from None
        except httpx.ReadTimeout:
            raise ModelError(f"The model server at {where} sent nothing for {self.timeout_s:g} s. It may be overloaded "
                             "or the request queued behind others; check the vLLM logs, or raise model.timeout_s.",
                             retryable=True, timed_out=True) from None
        except httpx.TimeoutException as exc:
            raise ModelError(f"Timed out talking to the model server at {where} ({type(exc).__name__}).",
                             retryable=True) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise ModelError(f"The connection to the model server at {where} broke mid-reply ({_reason(exc)}). The "
                             "server may have restarted or a proxy cut the stream; check the vLLM logs.",
                             retryable=True) from None
        except httpx.UnsupportedProtocol:
            raise ModelError(f"The endpoint {where!r} is not an http:// or https:// URL. Set it like "
                             "http://HOST:8000/v1 (--endpoint, ABHED_ENDPOINT or model.endpoint).") from None
        except httpx.HTTPError as exc:
            raise ModelError(f"Talking to the model server at {where} failed: {_reason(exc)}.") from None


@dataclass
class Assembler:
    """Joins the chunks of one streamed completion into a Reply."""

    endpoint: str
    on_text: TextSink | None = None
    on_reasoning: TextSink | None = None
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage | None = None
    limit: int = MAX_REPLY_BYTES  # bytes of text, reasoning and arguments (model.max_reply_bytes)
    size: int = 0  # ...received so far

    def _count(self, delta: str) -> None:
        """Count a delta before it is kept or shown: nothing past the bound is either."""
        # pragma below: equivalent when forced either way (ASCII's UTF-8 is as long as it; isascii() spares a copy)
        self.size += len(delta) if delta.isascii() else len(delta.encode("utf-8", "surrogatepass"))  # pragma: no mutate
        if self.size > self.limit:
            raise too_large(self.endpoint, self.limit)

    def feed(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            raise ModelError(f"The model server at {self.endpoint} sent {str(chunk)[:200]!r} as a stream event.",
                             retryable=True)
        if "error" in chunk or chunk.get("object") == "error":
            raise in_band_error(chunk, self.endpoint)
        if chunk.get("usage"):
            self.usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if thought:
            self._count(thought)
            self.reasoning.append(thought)
            if self.on_reasoning:
                self.on_reasoning(thought)
        if delta.get("content"):
            self._count(delta["content"])
            self.text.append(delta["content"])
            if self.on_text:
                self.on_text(delta["content"])
        for part in delta.get("tool_calls") or []:
            slot = self.calls.setdefault(part.get("index", len(self.calls)),
                                         {"id": None, "name": "", "args": [], "size": 0})
            slot["id"] = slot["id"] or part.get("id")
            function = part.get("function") or {}
            name = function.get("name") or ""
            # Servers send the name once; some repeat it whole or send it cumulatively: never double it.
            slot["name"] = name if name.startswith(slot["name"]) else slot["name"] + name
            if function.get("arguments"):
                fragment = _arguments(function["arguments"])
                self._count(fragment)
                slot["size"] += len(fragment)
                if slot["size"] <= WIRE_ARGUMENT_LIMIT:
                    slot["args"].append(fragment)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def finish(self, done: bool) -> Reply:
        if self.finish_reason is None and not done:
            raise ModelError(f"The reply from the model server at {self.endpoint} stopped mid-way: the stream ended "
                             "without a finish_reason or [DONE]. The server may have restarted; check the vLLM logs.",
                             retryable=True)
        calls = [_call(slot) for _, slot in sorted(self.calls.items())]
        return Reply(text="".join(self.text), tool_calls=calls, finish_reason=self.finish_reason, usage=self.usage,
                     reasoning="".join(self.reasoning))


def _call(slot: dict[str, Any]) -> ToolCall:
    arguments = "".join(slot["args"])
    if slot["size"] <= WIRE_ARGUMENT_LIMIT:
        return ToolCall(id=slot["id"] or call_id(), name=slot["name"], arguments=arguments)
    return ToolCall(id=slot["id"] or call_id(), name=slot["name"], arguments=arguments[:2000], error=(
        f"The arguments of your `{slot['name']}` call were {slot['size']:,} characters, over the "
        f"{WIRE_ARGUMENT_LIMIT:,} Abhed reads of one call; nothing was run. Send smaller calls: write a large file "
        "in parts (write the start, then add the rest with edit)."))


def _payload(body: dict[str, Any]) -> bytes:
    """The request as bytes; messages already encoded (wire.Encoded) are spliced in as they are."""
    messages = body.get("messages")
    # ensure_ascii: the conversation may hold lone surrogates the model once sent; escaped, they travel.
    if not isinstance(messages, Encoded):
        return json.dumps(body, ensure_ascii=True).encode("ascii")
    rest = json.dumps({k: v for k, v in body.items() if k != "messages"}, ensure_ascii=True)
    spliced = '"messages":[' + ",".join(messages) + "]"
    return (rest[:-1] + ("," if rest != "{}" else "") + spliced + "}").encode("ascii")


def too_large(endpoint: str, limit: int) -> ModelError:
    return ModelError(
        f"The reply from the model server at {endpoint} passed {limit:,} bytes (model.max_reply_bytes): Abhed stopped "
        "reading it there and closed the connection; nothing of it was used or run. A reply is bounded by the "
        "request's max_tokens, far below that, so the server ignores max_tokens or a proxy between here and it "
        "sends something else: check the vLLM logs and the endpoint. Raise model.max_reply_bytes only if replies "
        "this long are meant.")


def in_band_error(body: dict[str, Any], endpoint: str) -> ModelError:
    """An error sent as a stream event or as a 200 body: vLLM reports engine failures this way."""
    message = error_text(body)
    if is_overflow(message):
        return overflow(message, endpoint)
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    code = inner.get("code") if isinstance(inner, dict) else None
    status = int(code) if isinstance(code, int) or (isinstance(code, str) and code.isdigit()) else None
    retryable = status is None or status >= 500 or status == 429
    return ModelError(f"The model server at {endpoint} reported an error mid-reply: {message}"
                      + ("" if retryable else ". The request itself was refused; this is a bug in Abhed or the server."),
                      retryable=retryable, status=status)


class Watchdog:
    """Closes a streamed response's connection when no line arrived for `stall_s` after the first.

    Armed by the first line, not by the headers: the wait for the first token is timeout_s's (a
    queue, a prefill). httpx's read timeout is fixed for a whole body, hence a thread of its own;
    it shuts the socket down (which wakes a blocked read, where close() would not), so the read
    fails at once and `stalled` says why.
    """

    def __init__(self, response: httpx.Response, stall_s: float) -> None:
        self.response, self.stall_s = response, stall_s
        self.stalled = False
        self._last: float | None = None  # when the last line came; None until the first
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="abhed-stall-watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def lines(self, lines: Iterator[str]) -> Iterator[str]:
        for line in lines:
            self._last = time.monotonic()
            yield line

    def _watch(self) -> None:
        # Looks at least every second: a stall is told within a second of stall_s.
        while not self._done.wait(min(1.0, self.stall_s / 4)):
            last = self._last
            if last is not None and time.monotonic() - last >= self.stall_s:
                self.stalled = True
                self._shut()
                return

    def _shut(self) -> None:
        stream = self.response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed: the read has ended anyway


def _event(data: str, endpoint: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise ModelError(f"The model server at {endpoint} sent a malformed stream event: {data[:200]!r}. A chat "
                         "completion stream is `data: {json}` lines ending with `data: [DONE]`: check that the "
                         "endpoint is the server's OpenAI-compatible API (ending in /v1) and that no proxy between "
                         "here and it rewrites or buffers the stream (text/event-stream).", retryable=True) from None


def _read(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of a body, and whether that was all of it; reading stops there."""
    data = bytearray()
    for chunk in response.iter_bytes():
        data += chunk
        if len(data) > limit:
            return bytes(data[:limit]), False
    return bytes(data), True


def _said(response: httpx.Response, data: bytes, whole: bool) -> str:
    """What an error's body says: the API's message from its JSON; a body of one short line of text
    as it is; anything else (a web page, a proxy's) summed up by body_gist."""
    try:
        return error_text(json.loads(data))
    except ValueError:
        pass
    text = data.decode("utf-8", "replace").strip()
    kind = response.headers.get("content-type", "")
    if whole and "\n" not in text and len(text) <= 200 and "html" not in kind:
        return text
    return body_gist(data, kind, whole)


def _json(data: bytes, endpoint: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise ModelError(f"The model server at {endpoint} answered with something that is not JSON: "
                         f"{data[:200].decode('utf-8', 'replace')!r}. Is the endpoint an OpenAI-compatible API "
                         "(ending in /v1)?", retryable=True) from None


def _arguments(value: Any) -> str:
    """Arguments are a JSON string on the wire; a few servers send the object itself."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    prompt, completion = _int(raw.get("prompt_tokens")), _int(raw.get("completion_tokens"))
    if prompt is None:
        return None
    return Usage(prompt, completion or 0)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if "Connection refused" in text:
        return "connection refused"
    if "reset" in text.lower():
        return "connection reset"
    return text[:200]
