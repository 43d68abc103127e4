"""A model server that replays scripted turns, speaking vLLM's OpenAI wire format over real HTTP.

`abhed demo` drives the real agent with it on a machine that has no model server, and the tests
use it as their fake vLLM: the same chunk shapes (a role chunk, content and `reasoning_content`
deltas, tool calls announced with id and name and their arguments sent in fragments, the last one
in the chunk that carries `finish_reason`), the usage chunk with `choices: []` when
`stream_options.include_usage` asks for it, `data: [DONE]`, chunked transfer encoding, vLLM's error
bodies, its context-length 400 and its refusal of `tools` when started without a tool parser.
`chunked=False` plays a server (or proxy) that ends a stream by closing the connection instead, as
HTTP/1.0 does; `port` serves on a given port (a server that comes back where it was). `sent` counts
the bytes of completions written and `hung_up` is set when a client closed a connection mid-answer.

A turn can also be a fault: an HTTP status with an error body, a reset connection, a stream cut
mid-way, an error event inside the stream, a stall, a context-length refusal. When the request
carries no `tools` (a text-protocol adapter), scripted calls are written into the text in the form
the system prompt asked for, as a model would.

Images are checked as vLLM checks them: `image_url` parts whose url is a base64 data URL of an
image (decoded here with Pillow), at most `images` of them in one request (0: a text-only model,
which vLLM answers with "At most 0 image(s) may be provided in one prompt."). `tool_images=False`
plays a server whose chat template takes only text in a tool message (vLLM with Mistral's own
tokenizer): a tool message with an image part is refused.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from abhed.model.adapters import Qwen3CoderAdapter, TextAdapter
from abhed.model.wire import ToolCall

TOOL_PARSER_REFUSAL = ('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')


@dataclass
class Turn:
    """One scripted reply: text, calls (tool name and arguments, a dict or a raw string sent as is),
    optional reasoning; or a `fault` instead (see Replay.FAULTS)."""

    text: str = ""
    calls: list[tuple[str, Any]] = field(default_factory=list)
    reasoning: str = ""
    finish_reason: str | None = None
    fault: str | None = None
    usage: bool = True
    retry_after: str | None = None  # with a status fault: its Retry-After header, as sent


Script = Sequence[Turn] | Callable[[dict[str, Any]], Turn]


def estimate_tokens(value: Any) -> int:
    """The fake tokenizer: four characters of JSON a token."""
    return len(json.dumps(value, ensure_ascii=False)) // 4 + 1


class ReplayServer:
    """Serves a script on 127.0.0.1 (a free port). Use as a context manager; `url` is the endpoint."""

    # stall: nothing at all for stall_s, then a reset. stall_mid: the reply begins, then nothing for stall_s,
    # then a reset. late_start: the headers, nothing for stall_s, then the reply (a long queue or prefill).
    # stall_in_call: the turn's text and the first fragment of its first call, then as stall_mid.
    # stall_end: the whole reply, its finish_reason included, then as stall_mid (no usage, no [DONE]).
    FAULTS = ("status:CODE", "flat:CODE", "reset", "cut", "cut_clean", "error_event", "stall", "stall_mid",
              "late_start", "stall_in_call", "stall_end", "overflow", "garbage")

    def __init__(self, script: Script, *, model_id: str = "replay/abhed-demo", max_model_len: int | None = 32768,
                 tool_parser: bool = True, chunk_chars: int = 16, delay_s: float = 0.0, stall_s: float = 2.0,
                 report_max_model_len: bool = True, images: int = 0, tool_images: bool = True,
                 chunked: bool = True, port: int = 0, loading: int = 0, also_serves: Sequence[str] = ()) -> None:
        self.script = script
        self.also_serves = list(also_serves)  # more model ids /v1/models lists after model_id (chat's /model)
        self.loading = loading  # the first `loading` GET /v1/models answer 503, as a proxy before a loading vLLM
        self.model_id = model_id
        self.max_model_len = max_model_len
        self.report_max_model_len = report_max_model_len
        self.tool_parser = tool_parser
        self.chunk_chars = chunk_chars
        self.delay_s = delay_s
        self.stall_s = stall_s
        self.images = images
        self.tool_images = tool_images
        self.chunked = chunked
        self.sent = 0
        self.hung_up = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.raw: list[bytes] = []  # each completion request's body, byte for byte as it came
        # vLLM's /metrics (at the root, beside /health): running is the completions being answered now,
        # waiting what a test sets (a loaded replica)
        self.running = 0
        self.waiting = 0
        self.metrics = True  # False: a server (a router) that serves no /metrics
        self.handler_seconds: list[float] = []  # time spent answering each completion (the "model's time")
        self.refused: list[str] = []  # context-length refusals, as vLLM words them
        self._turn = 0
        self._lock = threading.Lock()
        self._http = _Server(("127.0.0.1", port), _Handler, self)
        self._http.daemon_threads = True
        host, port = self._http.socket.getsockname()[:2]  # (server_address, typed: an AF_INET pair)
        self._url = f"http://{host}:{port}/v1"  # read after the server closes too
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return self._url

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self._http.shutdown()
        self._http.server_close()

    def next_turn(self, body: dict[str, Any]) -> Turn | None:
        with self._lock:
            self.requests.append(body)
            if callable(self.script):
                return self.script(body)
            if self._turn >= len(self.script):
                return None
            self._turn += 1
            return self.script[self._turn - 1]

    def still_loading(self) -> bool:
        with self._lock:
            self.loading -= 1
            return self.loading >= 0

    def models_body(self) -> dict[str, Any]:
        card: dict[str, Any] = {"id": self.model_id, "object": "model", "created": int(time.time()),
                                "owned_by": "vllm", "root": self.model_id, "parent": None, "permission": []}
        if self.report_max_model_len and self.max_model_len:
            card["max_model_len"] = self.max_model_len
        others = [{**card, "id": other, "root": other} for other in self.also_serves]
        return {"object": "list", "data": [card, *others]}


def error_body(message: str, status: int, kind: str = "BadRequestError", flat: bool = False) -> dict[str, Any]:
    """vLLM's error body: `{"error": {...}}`, or its older flat form."""
    inner = {"message": message, "type": kind, "param": None, "code": status}
    return {"object": "error", **inner} if flat else {"error": inner}


TOOL_IMAGE_REFUSAL = "Tool message content must be a string: this chat template takes no images in tool messages."


def image_refusal(messages: list[Any], limit: int, in_tools: bool) -> str | None:
    """What vLLM would answer to the image parts of `messages`, or None when it takes them."""
    count = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "image_url"):
                return f"Unsupported chat content part: {str(part)[:100]}"
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    return "A text content part needs a string `text`."
                continue
            url = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"), dict) else None
            problem = _data_url_problem(url)
            if problem:
                return problem
            if message.get("role") == "tool" and not in_tools:
                return TOOL_IMAGE_REFUSAL
            count += 1
    if count > limit:
        more = " Set `--limit-mm-per-prompt` to increase this limit." if limit else ""
        return f"At most {limit} image(s) may be provided in one prompt.{more}"
    return None


def _data_url_problem(url: Any) -> str | None:
    if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
        return f"Invalid image url {str(url)[:60]!r}: expected data:image/<format>;base64,<data>."
    from PIL import Image  # only when a request carries an image: the demo does not pay for Pillow
    try:
        with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1], validate=True))) as image:
            image.load()
    except (ValueError, OSError) as exc:
        return f"Failed to load the image: {exc}"
    return None


def _text_calls(body: dict[str, Any], calls: list[ToolCall]) -> str:
    system = next((m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "system"), "")
    adapter = Qwen3CoderAdapter([]) if "<function=" in system else TextAdapter([])
    return "\n".join(adapter.format_call(call) for call in calls)


class _Server(ThreadingHTTPServer):
    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], replay: ReplayServer) -> None:
        self.replay = replay  # before the base class starts listening: a handler may read it at once
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (or is killed) mid-request is normal here, not worth a traceback."""
        self.replay.hung_up.set()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    @property
    def replay(self) -> ReplayServer:
        return self.server.replay

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/health":  # vLLM's liveness check: 200, no body
            self._json(200, None)
        elif self.path == "/metrics" and self.replay.metrics:
            self._metrics()
        elif self.path.rstrip("/") == "/v1/models" and self.replay.still_loading():
            self._json(503, error_body("Service Unavailable: the model is loading", 503, "ServiceUnavailable"))
        elif self.path.rstrip("/") == "/v1/models":
            self._json(200, self.replay.models_body())
        else:
            self._json(404, error_body(f"Not Found: {self.path}", 404, "NotFoundError"))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._json(404, error_body(f"Not Found: {self.path}", 404, "NotFoundError"))
            return
        started = time.perf_counter()  # from here on it is the "model's" time, parsing the request included
        body = json.loads(raw)
        with self.replay._lock:
            self.replay.raw.append(raw)
            self.replay.running += 1
        try:
            self._complete(body)
        finally:
            with self.replay._lock:
                self.replay.running -= 1
            self.replay.handler_seconds.append(time.perf_counter() - started)

    def _metrics(self) -> None:
        """The load gauges as vLLM's Prometheus page has them (one label set per model and engine)."""
        replay = self.replay
        labels = f'{{engine="0",model_name="{replay.model_id}"}}'
        page = "".join(f"# HELP vllm:num_requests_{kind} Number of requests {kind}.\n"
                       f"# TYPE vllm:num_requests_{kind} gauge\nvllm:num_requests_{kind}{labels} {float(value)}\n"
                       for kind, value in (("running", replay.running), ("waiting", replay.waiting)))
        data = page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # -- one completion -------------------------------------------------------------------------

    def _complete(self, body: dict[str, Any]) -> None:
        replay = self.replay
        if body.get("tools") and body.get("tool_choice", "auto") == "auto" and not replay.tool_parser:
            self._json(400, error_body(TOOL_PARSER_REFUSAL, 400))
            return
        refused = image_refusal(body.get("messages", []), replay.images, replay.tool_images)
        if refused:
            replay.refused.append(refused)
            self._json(400, error_body(refused, 400))
            return
        prompt = estimate_tokens(body.get("messages", [])) + (estimate_tokens(body["tools"]) if body.get("tools") else 0)
        wanted = body.get("max_tokens") or 0
        if replay.max_model_len and prompt + wanted > replay.max_model_len:
            message = _overflow_message(replay.max_model_len, prompt, wanted)
            replay.refused.append(message)
            self._json(400, error_body(message, 400))
            return
        turn = replay.next_turn(body)
        if turn is None:
            self._json(400, error_body(f"replay script exhausted after {len(replay.requests) - 1} requests", 400))
            return
        if turn.fault and self._fault(turn, replay, prompt, wanted):
            return
        calls = [ToolCall(f"chatcmpl-tool-{uuid.uuid4().hex}", name,
                          args if isinstance(args, str) else json.dumps(args)) for name, args in turn.calls]
        text = turn.text
        if calls and not body.get("tools"):
            text = (text + "\n" + _text_calls(body, calls)).strip()
            calls = []
        finish = turn.finish_reason or ("tool_calls" if calls else "stop")
        completion = estimate_tokens([text, turn.reasoning, [c.arguments for c in calls]])
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
        if body.get("stream"):
            self._stream(body, turn, text, calls, finish, usage)
        else:
            self._json(200, _completion(replay.model_id, text, turn.reasoning, calls, finish, usage))

    def _fault(self, turn: Turn, replay: ReplayServer, prompt: int, wanted: int) -> bool:
        """Act out a fault; True when the request is answered (or dropped) by it."""
        fault = turn.fault or ""
        kind, _, arg = fault.partition(":")
        if kind in ("status", "flat"):
            status = int(arg)
            self._json(status, error_body(f"replayed fault: HTTP {status}", status,
                                          "InternalServerError" if status >= 500 else "BadRequestError", kind == "flat"),
                       headers={"Retry-After": turn.retry_after} if turn.retry_after is not None else None)
        elif kind == "overflow":
            self._json(400, error_body(_overflow_message(replay.max_model_len or 4096, prompt, wanted), 400))
        elif kind == "reset":
            self._reset()
        elif kind == "stall":
            time.sleep(replay.stall_s)
            self._reset()
        elif kind in ("cut", "cut_clean", "error_event", "garbage", "stall_mid"):
            self._start_stream()
            self._event(_chunk(replay.model_id, {"role": "assistant", "content": ""}))
            self._event(_chunk(replay.model_id, {"content": "Let me look"}))
            if kind == "stall_mid":
                self._stall()
                return True
            if kind == "cut":
                self._reset()
                return True
            if kind == "error_event":
                self._event(error_body("EngineCore encountered an issue. See stack trace for the root cause.", 500,
                                       "InternalServerError"))
                self._send("data: [DONE]\n\n")
            elif kind == "garbage":
                self._send("data: {not json\n\n")
            self._end_stream()
        else:
            return False
        return True

    def _stream(self, body: dict[str, Any], turn: Turn, text: str, calls: list[ToolCall], finish: str,
                usage: dict[str, int]) -> None:
        replay, model = self.replay, self.replay.model_id
        self._start_stream()
        if turn.fault == "late_start":
            self.wfile.flush()
            time.sleep(replay.stall_s)
        self._event(_chunk(model, {"role": "assistant", "content": ""}))
        for piece in _pieces(turn.reasoning, replay.chunk_chars):
            self._event(_chunk(model, {"reasoning_content": piece}))
        for piece in _pieces(text, replay.chunk_chars):
            self._event(_chunk(model, {"content": piece}))
        last: dict[str, Any] = {}
        for index, call in enumerate(calls):
            self._event(_chunk(model, {"tool_calls": [{"id": call.id, "type": "function", "index": index,
                                                        "function": {"name": call.name}}]}))
            fragments = _pieces(call.arguments, max(1, len(call.arguments) // 3 + 1))
            final = index == len(calls) - 1
            for number, fragment in enumerate(fragments):
                delta = {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
                if turn.fault == "stall_in_call":
                    self._event(_chunk(model, delta))
                    self._stall()
                    return
                if final and number == len(fragments) - 1:
                    last = delta  # vLLM sends what its parser held back with finish_reason
                else:
                    self._event(_chunk(model, delta))
        self._event(_chunk(model, last, finish))
        if turn.fault == "stall_end":
            self._stall()
            return
        if turn.usage and (body.get("stream_options") or {}).get("include_usage"):
            self._event({"id": _id(), "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                         "choices": [], "usage": usage})
        self._send("data: [DONE]\n\n")
        self._end_stream()

    # -- the bytes on the wire ----------------------------------------------------------------------

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        if self.replay.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:  # the stream ends when the connection does
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()

    def _end_stream(self) -> None:
        if self.replay.chunked:
            self._send_raw(b"0\r\n\r\n")

    def _event(self, obj: Any) -> None:
        self._send("data: " + json.dumps(obj, separators=(",", ":")) + "\n\n")
        if self.replay.delay_s:
            time.sleep(self.replay.delay_s)

    def _send(self, text: str) -> None:
        data = text.encode()
        self._send_raw(b"%x\r\n%s\r\n" % (len(data), data) if self.replay.chunked else data)

    def _send_raw(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()
        self.replay.sent += len(data)

    def _stall(self) -> None:
        time.sleep(self.replay.stall_s)
        self._reset()

    def _reset(self) -> None:
        """Drop the connection with a TCP reset, as a crashed server or a cut cable would."""
        try:
            self.wfile.flush()
        except OSError:
            pass
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True


def _id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": _id(), "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                         **({"stop_reason": None} if finish else {})}]}


def _completion(model: str, text: str, reasoning: str, calls: list[ToolCall], finish: str,
                usage: dict[str, int]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "reasoning_content": reasoning or None,
                               "tool_calls": [{"id": c.id, "type": "function",
                                               "function": {"name": c.name, "arguments": c.arguments}} for c in calls]}
    return {"id": _id(), "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish,
                         "stop_reason": None}], "usage": usage}


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] if text else []


def _overflow_message(limit: int, prompt: int, wanted: int) -> str:
    return (f"This model's maximum context length is {limit} tokens. However, you requested {prompt + wanted} tokens "
            f"({prompt} in the messages, {wanted} in the completion). Please reduce the length of the messages or "
            "completion.")
