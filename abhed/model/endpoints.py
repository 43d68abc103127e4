"""Several model servers (model.endpoints): which one a session uses, and where it goes when one is down.

A site serves one model from several vLLM replicas (or routers). Each session picks one at its start and
keeps it for all its requests, and a resumed session asks its recorded endpoint first: every request of a
session extends the previous one (the loop only appends), so the replica that served the last one still
holds its prefix in vLLM's cache, and only that one does.

Choosing (`choose`): every endpoint is asked GET /v1/models at once, each within HEALTH_S. Among those
that answer with a model list, the least loaded wins: vLLM's /metrics (at the server's root, beside
/health) gives `vllm:num_requests_running` and `vllm:num_requests_waiting`, summed over their label sets.
Where no figures come (a router that serves none, a proxy that hides it), or between equally loaded
ones, the turn goes round: the rotation starts at a random place per process, so sessions started by
many users at once spread evenly without any state shared between their processes.

Failing over (`Pool`, used by ModelClient._retrying): a request that finds its endpoint down (no
connection, a connect timeout, no reply within model.timeout_s, HTTP 502, 503 or 504) is sent at once
to the next endpoint not marked down, and the session stays there. A down endpoint is marked for
DOWN_S, or for what its Retry-After asked (capped at RETRY_AFTER_CAP_S). When every endpoint is
marked down, the request waits as a lone endpoint's does (client.py), trying the one that comes back
first, up to model.max_request_s; then the error names each endpoint and what it answered.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from abhed.common.terminal import printable
from abhed.model.errors import ModelError

if TYPE_CHECKING:  # httpx is imported by client.py, which first marks its command line absent
    import random

    import httpx

HEALTH_S = 2.0  # one health question (connect and answer): a replica on the site's LAN answers in milliseconds
DOWN_S = 30.0  # how long an endpoint found down is passed over, when it did not say (Retry-After)
RETRY_AFTER_CAP_S = 120.0  # the longest Retry-After honoured: a server asking for an hour is asked again sooner
PAGE_LIMIT = 4 * 1024 * 1024  # what is read of a model list or a metrics page (vLLM's is some 100 KB)
LOAD_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a Retry-After header asks to wait (delta-seconds or an HTTP-date), capped at
    RETRY_AFTER_CAP_S; None when absent or unreadable (then the usual backoff applies)."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        from email.utils import parsedate_to_datetime
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP-date is GMT by definition
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(0.0, min(seconds, RETRY_AFTER_CAP_S))


def server_root(endpoint: str) -> str:
    """Where vLLM serves /metrics and /health: the endpoint without its /v1."""
    parts = urlsplit(endpoint.rstrip("/"))
    path = parts.path[:-3] if parts.path.endswith("/v1") else ""
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def load_of(metrics: str) -> float | None:
    """Running plus waiting requests from a Prometheus text page, or None when it has neither."""
    total, seen = 0.0, False
    for line in metrics.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in LOAD_METRICS:
            continue
        try:
            total += float(line.rsplit(" ", 1)[-1] if "}" not in line else line.rsplit("}", 1)[1].split()[0])
        except (ValueError, IndexError):
            continue
        seen = True
    return total if seen else None


@dataclass(frozen=True)
class Health:
    endpoint: str
    why_down: str | None  # None: it answers with a model list
    load: float | None = None  # running + waiting requests, when its /metrics says

    @property
    def up(self) -> bool:
        return self.why_down is None


def check(endpoint: str, http: httpx.Client, deadline_s: float = HEALTH_S) -> Health:
    """One endpoint: GET /v1/models, then its load from /metrics (optional), within `deadline_s` in all."""
    return check_all([endpoint], http, deadline_s)[0]


def check_all(endpoints: list[str], http: httpx.Client, deadline_s: float = HEALTH_S) -> list[Health]:
    """Every endpoint checked at once, each in a thread of its own, all within `deadline_s` (httpx's
    timeouts bound each read, not a whole answer: a server trickling bytes is cut by the join's deadline,
    and its thread ends at its own next timeout)."""
    found: list[Health | None] = [None] * len(endpoints)
    deadline = time.monotonic() + deadline_s

    def one(index: int) -> None:
        found[index] = _health(endpoints[index], http, deadline, deadline_s, found, index)

    threads = [threading.Thread(target=one, args=(i,), daemon=True, name="abhed-health") for i in range(len(endpoints))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()) + 0.05)
    return [h if h is not None else Health(e, f"no answer within {deadline_s:g} s") for h, e in zip(found, endpoints)]


def _health(endpoint: str, http: httpx.Client, deadline: float, deadline_s: float, found: list[Health | None],
            index: int) -> Health:
    _no_httpx_cli()
    import httpx
    try:
        with http.stream("GET", endpoint.rstrip("/") + "/models", timeout=_left(deadline)) as response:
            if response.status_code != 200:
                return Health(endpoint, f"GET /models answered HTTP {response.status_code}")
            body = _bounded(response)
    except httpx.TimeoutException:
        return Health(endpoint, f"no answer within {deadline_s:g} s")
    except httpx.HTTPError as exc:
        return Health(endpoint, _reason(exc))
    try:
        data = json.loads(body).get("data") if body is not None else None
    except (ValueError, AttributeError):
        data = None
    if not isinstance(data, list):
        return Health(endpoint, "GET /models answered no model list")
    found[index] = Health(endpoint, None)  # up, whatever /metrics does before the deadline
    try:
        with http.stream("GET", server_root(endpoint) + "/metrics", timeout=_left(deadline)) as metrics:
            page = _bounded(metrics) if metrics.status_code == 200 else None
    except httpx.HTTPError:
        page = None
    return Health(endpoint, None, load_of(page.decode("utf-8", "replace")) if page is not None else None)


def _left(deadline: float) -> float:
    return max(0.05, deadline - time.monotonic())


def _bounded(response: httpx.Response) -> bytes | None:
    """The body, or None past PAGE_LIMIT (a model list or a metrics page is far smaller)."""
    data = bytearray()
    for chunk in response.iter_bytes():
        data += chunk
        if len(data) > PAGE_LIMIT:
            return None
    return bytes(data)


def pick(healths: list[Health], start: int) -> str | None:
    """The least loaded endpoint that is up; among equals (or when none reports a load) the first in
    the rotation from `start`. An endpoint without figures counts as loaded as the busiest one that has them."""
    count = len(healths)
    order = [healths[(start + i) % count] for i in range(count)]
    up = [h for h in order if h.up]
    if not up:
        return None
    known = [h.load for h in up if h.load is not None]
    worst = max(known) if known else 0.0
    return min(up, key=lambda h: h.load if h.load is not None else worst).endpoint


@dataclass(frozen=True)
class Mark:
    until: float  # the pool's clock
    why: str
    asked: bool  # the server asked for this wait (Retry-After)


@dataclass
class Pool:
    """The endpoints of one process's sessions and which of them are down, for how long and why."""

    endpoints: list[str]
    clock: Callable[[], float] = time.monotonic
    down: dict[str, Mark] = field(default_factory=dict)

    def mark_down(self, endpoint: str, why: str, wait_s: float | None = None) -> None:
        self.down[endpoint] = Mark(self.clock() + (DOWN_S if wait_s is None else wait_s), why, wait_s is not None)

    def mark_up(self, endpoint: str) -> None:
        self.down.pop(endpoint, None)

    def is_down(self, endpoint: str) -> bool:
        mark = self.down.get(endpoint)
        return mark is not None and mark.until > self.clock()

    def next_up(self, after: str) -> str | None:
        """The next endpoint after `after` in the list (round) not marked down, or None."""
        at = self.endpoints.index(after) if after in self.endpoints else -1
        for step in range(1, len(self.endpoints) + 1):
            candidate = self.endpoints[(at + step) % len(self.endpoints)]
            if candidate != after and not self.is_down(candidate):
                return candidate
        return None

    def soonest(self) -> tuple[str, float | None]:
        """Every one is down: the endpoint whose mark ends first, and the seconds until then when
        its server asked for that wait (Retry-After); None when it is only passed over (DOWN_S)."""
        now = self.clock()
        endpoint = min(self.endpoints, key=lambda e: self.down[e].until if e in self.down else now)
        mark = self.down.get(endpoint)
        return endpoint, (max(0.0, mark.until - now) if mark is not None and mark.asked else None)

    def summary(self) -> str:
        """Each endpoint and what it answered last."""
        return "; ".join(f"{e}: {printable(self.down[e].why) if e in self.down else 'not tried'}"
                         for e in self.endpoints)

    def all_down(self, message: str) -> str:
        """The error when no endpoint answers: each one and what it answered."""
        return (f"No model server of model.endpoints answers ({self.summary()}). {message} Check that vLLM runs "
                "on those hosts (`abhed doctor` asks each one), or take the ones that are gone out of "
                "model.endpoints.")


def down_reason(exc: ModelError) -> str | None:
    """Why `exc` says its endpoint is down (a reason to go to another one), or None."""
    if exc.unavailable is not None:
        return exc.unavailable
    if exc.status == 504:
        return "HTTP 504 (a gateway timed out)"
    if exc.timed_out:
        return "no reply within model.timeout_s"
    return None


def rotation_start(count: int, rng: random.Random | None = None) -> int:
    import random
    return (rng or random.Random()).randrange(count) if count else 0


def choose(endpoints: list[str], http: httpx.Client, *, prefer: str | None = None,
           deadline_s: float = HEALTH_S, rng: random.Random | None = None) -> tuple[str, list[Health]]:
    """The endpoint for a session and what was found of the others: `prefer` (the session's recorded
    one) when it answers, else the least loaded of those that do. When none answers, the first in the
    rotation: the request's own retries and waits then take over (and its error names them all)."""
    if prefer in endpoints:
        health = check(prefer, http, deadline_s)
        if health.up:
            return prefer, [health]
    healths = check_all(endpoints, http, deadline_s)
    start = rotation_start(len(endpoints), rng)
    chosen = pick(healths, start)
    return (chosen if chosen is not None else endpoints[start]), healths


def _no_httpx_cli() -> None:
    """httpx must not load its command line (client.py says why): marked absent before it is imported."""
    import sys
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if "Connection refused" in text:
        return "connection refused"
    return printable(text[:200])


def session_endpoint(servers: list[str], prefer: str | None, api_key: str | None,
                     notice: Callable[[str], None], rng: random.Random | None = None,
                     deadline_s: float = HEALTH_S) -> tuple[str, Pool | None]:
    """The endpoint a session starts on and the pool it fails over in (None for one server, which is
    used as it always was). The servers found down are told once, with why; the pool holds them marked."""
    if len(servers) == 1:
        return servers[0], None
    _no_httpx_cli()
    import httpx
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # As client.py: plain http:// needs no CA bundle (35 ms of CPU to load at every start).
    import ssl
    # pragma below: equivalent for what a test can see (only the CPU of loading the CA bundle differs)
    plain = all(s.startswith("http://") for s in servers)  # pragma: no mutate
    verify: ssl.SSLContext | bool = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT) if plain else True  # pragma: no mutate
    with httpx.Client(trust_env=False, headers=headers, verify=verify) as http:
        chosen, healths = choose(servers, http, prefer=prefer, deadline_s=deadline_s, rng=rng)
    pool = Pool(list(servers))
    for health in healths:
        if health.why_down is not None:
            pool.mark_down(health.endpoint, health.why_down)
            notice(f"model server {health.endpoint} does not answer ({health.why_down}); sessions use the other "
                   "servers of model.endpoints")
    return chosen, pool
