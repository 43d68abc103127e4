"""How tool calls travel between Abhed and the model: natively, or written in the text.

`native`: the server parses the model's calls (vLLM started with --enable-auto-tool-choice and a
--tool-call-parser) and the request carries the `tools` array. `hermes` and `qwen3_coder`: for a
server started without a parser, the tools are described in the system prompt and the model writes
its calls in the text, as the family was trained to:

    hermes       <tool_call>{"name": "read", "arguments": {"path": "/w/a.py"}}</tool_call>
    qwen3_coder  <tool_call><function=read><parameter=path>/w/a.py</parameter></function></tool_call>

Both text forms are read whatever the format asked for, and a native reply whose content still
holds such markup (the server's parser gave up on it) is read the same way, so a call the model
meant is never mistaken for a final answer. Markup that does not parse becomes a ToolCall with an
`error`: the loop answers it with that message (dispatch.reject), never crashes on it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from abhed.model.wire import Encoded, Msg, Reply, ToolCall, call_id

FORMATS = ("native", "hermes", "qwen3_coder")
MARKERS = ("<tool_call>", "<function=")
HERMES_EXAMPLE = '<tool_call>\n{"name": "read", "arguments": {"path": "/abs/path/file.py"}}\n</tool_call>'
QWEN_EXAMPLE = "<tool_call>\n<function=read>\n<parameter=path>\n/abs/path/file.py\n</parameter>\n</function>\n</tool_call>"

_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)(?:</function>|$)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.S)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)
_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')


class Adapter:
    """One tool-call format: what the request carries, how history is written, how calls are read."""

    name = "native"

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self.tools = tools
        self.schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}
        self._encoded: dict[int, tuple[Msg, str]] = {}

    def request_fields(self) -> dict[str, Any]:
        return {"tools": self.tools, "tool_choice": "auto"} if self.tools else {}

    def system_addendum(self) -> str:
        return ""

    def calls(self, reply: Reply) -> list[ToolCall]:
        if reply.tool_calls:
            return reply.tool_calls
        return parse_text_calls(reply.text, self.schemas)

    def render(self, messages: list[Msg]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for msg in messages:
            if msg.tool_calls or msg.role == "tool":
                out.append(self._wire(msg))
            else:
                _add(out, msg.role, msg.content)
        return out

    def encode(self, messages: list[Msg]) -> Encoded:
        """`render` as JSON texts, each message's text kept from the request before (messages do not
        change once in the conversation), so a turn encodes only what is new."""
        out, cache = Encoded(), {}
        previous: dict[str, Any] | None = None  # the last message when it may absorb the next (see _add)
        for msg in messages:
            plain = not msg.tool_calls and msg.role in ("user", "assistant")
            if plain and previous is not None and previous["role"] == msg.role:
                previous = {"role": msg.role, "content": f"{previous['content']}\n\n{msg.content}"}
                out[-1] = _dumps(previous)
                continue
            hit = self._encoded.get(id(msg))
            text = hit[1] if hit is not None and hit[0] is msg else _dumps(self._wire(msg))
            cache[id(msg)] = (msg, text)  # holding msg keeps its id from being reused by another
            out.append(text)
            previous = {"role": msg.role, "content": msg.content} if plain else None
        self._encoded = cache
        return out

    def _wire(self, msg: Msg) -> dict[str, Any]:
        if msg.role == "assistant" and msg.tool_calls:
            return {"role": "assistant", "content": visible(msg.content) or None,
                    "tool_calls": [{"id": c.id, "type": "function",
                                    "function": {"name": c.name, "arguments": object_json(c.arguments)}}
                                   for c in msg.tool_calls]}
        if msg.role == "tool":
            return {"role": "tool", "tool_call_id": msg.tool_call_id, "content": msg.content}
        return {"role": msg.role, "content": msg.content}


class TextAdapter(Adapter):
    """Tools described in the system prompt; calls and results written in the text."""

    name = "hermes"

    def request_fields(self) -> dict[str, Any]:
        return {}

    def system_addendum(self) -> str:
        listing = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in self.tools)
        return ("# Tools\n\nYou can call the functions described by these JSON schemas:\n<tools>\n" + listing +
                "\n</tools>\n\nTo call a function, write its name and arguments as one JSON object inside "
                "<tool_call></tool_call> tags, one block per call:\n<tool_call>\n{\"name\": \"FUNCTION\", "
                "\"arguments\": {ARGUMENTS AS A JSON OBJECT}}\n</tool_call>\n" + _AFTER_CALLS)

    def format_call(self, call: ToolCall) -> str:
        value: Any = parsed_object(call.arguments)
        if value is None:
            value = call.arguments
        return "<tool_call>\n" + json.dumps({"name": call.name, "arguments": value}, ensure_ascii=False) + "\n</tool_call>"

    def calls(self, reply: Reply) -> list[ToolCall]:
        return reply.tool_calls or parse_text_calls(reply.text, self.schemas)

    def encode(self, messages: list[Msg]) -> Encoded:
        return Encoded(_dumps(message) for message in self.render(messages))  # results are grouped: no reuse

    def render(self, messages: list[Msg]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for msg in messages:
            if msg.role == "assistant":
                text = msg.content
                if msg.tool_calls and not any(marker in text for marker in MARKERS):
                    text = "\n".join([text, *(self.format_call(c) for c in msg.tool_calls)]).strip()
                _add(out, "assistant", text)
            elif msg.role == "tool":
                _add(out, "user", f"<tool_response>\n{msg.content}\n</tool_response>")
            else:
                _add(out, msg.role, msg.content)
        return out


class Qwen3CoderAdapter(TextAdapter):
    name = "qwen3_coder"

    def system_addendum(self) -> str:
        blocks = []
        for tool in self.tools:
            fn = tool["function"]
            params = fn.get("parameters", {})
            lines = ["<function>", f"<name>{fn['name']}</name>", f"<description>{fn.get('description', '')}</description>",
                     "<parameters>"]
            for pname, prop in params.get("properties", {}).items():
                lines += ["<parameter>", f"<name>{pname}</name>", f"<type>{prop.get('type', 'string')}</type>"]
                if prop.get("description"):
                    lines.append(f"<description>{prop['description']}</description>")
                if prop.get("enum"):
                    lines.append(f"<enum>{json.dumps(prop['enum'])}</enum>")
                if prop.get("items"):
                    lines.append(f"<items>{json.dumps(prop['items'])}</items>")
                lines.append("</parameter>")
            lines += [f"<required>{json.dumps(params.get('required', []))}</required>", "</parameters>", "</function>"]
            blocks.append("\n".join(lines))
        return ("# Tools\n\nYou can call these functions:\n<tools>\n" + "\n".join(blocks) + "\n</tools>\n\n"
                "To call a function, write exactly this form, one <tool_call> block per call:\n<tool_call>\n"
                "<function=FUNCTION>\n<parameter=NAME>\nVALUE\n</parameter>\n</function>\n</tool_call>\n"
                "Write text values as they are, over as many lines as they need; numbers and true/false bare; "
                "arrays and objects as JSON. Give every required parameter.\n" + _AFTER_CALLS)

    def format_call(self, call: ToolCall) -> str:
        args = parsed_object(call.arguments)
        if args is None:
            args = {"arguments": call.arguments}
        params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}\n"
                         "</parameter>\n" for k, v in args.items())
        return f"<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>"


_AFTER_CALLS = ("You may make several calls in one reply; they run in order. After your calls, stop and wait: each "
                "result comes back inside <tool_response></tool_response> tags. When you need no tool, answer in "
                "plain text.")

ADAPTERS: dict[str, type[Adapter]] = {"native": Adapter, "hermes": TextAdapter, "qwen3_coder": Qwen3CoderAdapter}


def adapter_for(tool_format: str, tools: list[dict[str, Any]]) -> Adapter:
    if tool_format not in ADAPTERS:
        raise ValueError(f"Unknown tool format {tool_format!r}: use one of {', '.join(FORMATS)}.")
    return ADAPTERS[tool_format](tools)


# -- shared helpers ------------------------------------------------------------------------------


def _add(out: list[dict[str, Any]], role: str, content: str) -> None:
    """Append a message, merging it into the previous one of the same role: chat templates that
    insist on alternating user/assistant turns then never see two in a row."""
    if out and out[-1]["role"] == role and role in ("user", "assistant") and "tool_calls" not in out[-1]:
        out[-1] = {"role": role, "content": f"{out[-1]['content']}\n\n{content}"}
    else:
        out.append({"role": role, "content": content})


def _dumps(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=True)  # lone surrogates from the model travel escaped


def parsed_object(arguments: str) -> dict[str, Any] | None:
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to parse (dispatch refuses it)
        return None
    return value if isinstance(value, dict) else None


def object_json(arguments: str) -> str:
    """Arguments fit to send back in history: servers parse them into a JSON object to fill the chat
    template, and a call the model botched must not make the whole next request fail."""
    value = parsed_object(arguments)
    if value is not None:
        return arguments if arguments.strip() else "{}"
    return json.dumps({"unparsed_arguments": arguments[:2000]})


def visible(text: str) -> str:
    """The part of a (possibly still streaming) reply a human should see: up to the first tool-call
    markup, holding back a tail that may be the start of one."""
    cut = min((text.find(m) for m in MARKERS if m in text), default=len(text))
    shown = text[:cut]
    if cut < len(text):  # a marker: all before it is final
        return shown
    for marker in MARKERS:
        for size in range(len(marker) - 1, 0, -1):
            if shown.endswith(marker[:size]):
                return shown[:-size]
    return shown


class VisibleStream:
    """`visible` for a reply that arrives in pieces, in time linear in its length: text already
    shown never holds the start of a marker (visible holds such a tail back), so only the held-back
    tail and the new piece need looking at, never the whole reply again."""

    def __init__(self) -> None:
        self._held = ""
        self._ended = False  # a marker was seen: nothing after it is for the human

    def feed(self, delta: str) -> str:
        """The text that became visible with `delta`."""
        if self._ended:
            return ""
        text = self._held + delta
        shown = visible(text)
        self._ended = any(marker in text for marker in MARKERS)
        self._held = "" if self._ended else text[len(shown):]
        return shown


def parse_text_calls(text: str, schemas: dict[str, dict[str, Any]]) -> list[ToolCall]:
    """Every call written in `text`, in order, in either text form."""
    if "<tool_call>" in text:
        bodies = [part.split("</tool_call>", 1)[0] for part in text.split("<tool_call>")[1:]]
    elif "<function=" in text:  # Qwen3-Coder sometimes leaves out the wrapper
        bodies = ["<function=" + part for part in text.split("<function=")[1:]]
    else:
        return []
    return [_parse_body(body.strip(), schemas) for body in bodies]


def _parse_body(body: str, schemas: dict[str, dict[str, Any]]) -> ToolCall:
    if body.startswith("<function="):
        return _parse_xml(body, schemas)
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        value = json.loads(body)
        args = value.get("arguments", value.get("parameters", {})) if isinstance(value, dict) else None
        arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep to parse
        named = _NAME.search(body)
        return ToolCall(call_id(), named.group(1) if named else "", body, error=(
            f"The JSON in your <tool_call> block does not parse ({_json_error(exc)}); nothing was run. Write one JSON "
            f"object per block, with the arguments as an object, e.g.\n{HERMES_EXAMPLE}"))
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return ToolCall(call_id(), "", body, error=(
            "Your <tool_call> block needs a JSON object with \"name\" (a string) and \"arguments\" (an object); "
            f"nothing was run. For example:\n{HERMES_EXAMPLE}"))
    return ToolCall(call_id(), value["name"], arguments)


def _parse_xml(body: str, schemas: dict[str, dict[str, Any]]) -> ToolCall:
    match = _FUNCTION.match(body)
    if not match or not match.group(1).strip():
        return ToolCall(call_id(), "", body, error=(
            "Your tool call is malformed: it must start with <function=NAME> and hold one <parameter=NAME>VALUE"
            f"</parameter> per argument; nothing was run. For example:\n{QWEN_EXAMPLE}"))
    name = match.group(1).strip()
    props = schemas.get(name, {}).get("properties", {})
    args = {}
    for key, raw in _PARAMETER.findall(match.group(2)):
        value = raw[1:] if raw.startswith("\n") else raw
        value = value[:-1] if value.endswith("\n") else value
        args[key.strip()] = _typed(value, props.get(key.strip(), {}))
    return ToolCall(call_id(), name, json.dumps(args, ensure_ascii=False))


def _typed(value: str, prop: dict[str, Any]) -> Any:
    """A parameter's text as the type its schema names; left as text when it is not one, so the
    schema check names the field and the type expected."""
    kind = prop.get("type", "string")
    text = value.strip()
    if kind == "integer" and re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    if kind == "number" and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        return float(text)
    if kind == "boolean" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if kind in ("array", "object"):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return value
    return value


def _json_error(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, RecursionError):
        return "it is nested too deeply"
    return str(exc)
