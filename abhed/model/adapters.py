"""How tool calls travel between Abhed and the model: natively, or written in the text.

`native`: the server parses the model's calls (vLLM started with --enable-auto-tool-choice and a
--tool-call-parser) and the request carries the `tools` array. `hermes` and `qwen3_coder`: for a
server started without a parser, the tools are described in the system prompt and the model writes
its calls in the text, as the family was trained to:

    hermes       <tool_call>{"name": "read", "arguments": {"path": "/w/a.py"}}</tool_call>
    qwen3_coder  <tool_call><function=read><parameter=path>/w/a.py</parameter></function></tool_call>

Every text form a model family writes (textcalls/) is read whatever the format asked for, and a
native reply whose content still holds calls (the server's parser gave up on them, or has none for
the form) is read the same way, so a call the model meant is never mistaken for a final answer.
Markup that is a call but does not parse becomes a ToolCall with an `error`: the loop answers it
with that message (dispatch.reject), never crashes on it.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import replace
from typing import Any

from abhed.common import formats
from abhed.model import textcalls
from abhed.model.profiles import Vision
from abhed.model.textcalls.reading import Reading
from abhed.model.textcalls import values
from abhed.model.textcalls.values import type_name
from abhed.model.wire import Encoded, Msg, Reply, ToolCall



class Adapter:
    """One tool-call format: what the request carries, how history is written, how calls are read.

    Images (Msg.images) travel as OpenAI `image_url` content parts with data URLs, the form vLLM's
    chat API takes. With `vision.placement` "tool" they are parts of the tool message itself; with
    "user" (for servers and chat templates that take only text in a tool message) the tool message
    says where they are and they follow, after the reply's last tool result, in a user message.
    A request carries at most `vision.max_images` images and `vision.max_bytes` of them: the newest
    are sent, and each one left out is named in the text with the way to see it again. Without
    `vision` (a text-only model) no image is sent, only those notes.
    """

    def __init__(self, tools: list[dict[str, Any]], vision: Vision | None = None) -> None:
        self.tools = tools
        self.vision = vision
        self.schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}
        self._encoded: dict[int, tuple[Msg, str]] = {}

    def request_fields(self) -> dict[str, Any]:
        return {"tools": self.tools, "tool_choice": "auto"} if self.tools else {}

    def system_addendum(self) -> str:
        return ""

    def read(self, reply: Reply) -> Reading:
        """The reply's calls (the server's, else those written in its text) and its prose."""
        if reply.tool_calls:  # the server's parser read them; values it left as text are read by the schema
            calls = [replace(call, arguments=values.convert_json(call.arguments, self.schemas.get(call.name, {})))
                     for call in reply.tool_calls]
            return Reading(calls, reply.text, ())
        return textcalls.read(reply.text, self.schemas)

    def calls(self, reply: Reply) -> list[ToolCall]:
        return self.read(reply).calls

    def render(self, messages: list[Msg]) -> list[dict[str, Any]]:
        return [json.loads(text) for text in self.encode(messages)]

    def encode(self, messages: list[Msg]) -> Encoded:
        """The messages as JSON texts, each message's text kept from the request before (messages do
        not change once in the conversation), so a turn encodes only what is new."""
        sent = self.images_sent(messages)
        out, cache = Encoded(), {}
        previous: dict[str, Any] | None = None  # the last message when it may absorb the next (see _add)
        waiting: list[dict[str, Any]] = []  # image parts for the user message after the tool results
        for msg in messages:
            if waiting and msg.role != "tool":
                previous = _put(out, {"role": "user", "content": waiting}, previous)
                waiting = []
            if msg.images:  # never cached: which images a request carries changes as newer ones come
                wire, later = self._with_images(msg, sent)
                waiting += later
                previous = _put(out, wire, previous)
                continue
            plain = not msg.tool_calls and msg.role in ("user", "assistant")
            if plain and previous is not None and previous["role"] == msg.role:
                previous = _put(out, {"role": msg.role, "content": msg.content}, previous)
                continue
            hit = self._encoded.get(id(msg))
            text = hit[1] if hit is not None and hit[0] is msg else _dumps(self._wire(msg))
            cache[id(msg)] = (msg, text)  # holding msg keeps its id from being reused by another
            out.append(text)
            previous = {"role": msg.role, "content": msg.content} if plain else None
        if waiting:
            _put(out, {"role": "user", "content": waiting}, previous)
        self._encoded = cache
        return out

    def _wire(self, msg: Msg) -> dict[str, Any]:
        if msg.role == "assistant" and msg.tool_calls:
            return {"role": "assistant", "content": textcalls.read(msg.content, self.schemas).prose or None,
                    "tool_calls": [{"id": c.id, "type": "function",
                                    "function": {"name": c.name, "arguments": object_json(c.arguments)}}
                                   for c in msg.tool_calls]}
        if msg.role == "tool":
            return {"role": "tool", "tool_call_id": msg.tool_call_id, "content": msg.content}
        return {"role": msg.role, "content": msg.content}

    def _with_images(self, msg: Msg, sent: set[tuple[int, int]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The message with its images, and the parts that go in the user message after the tool
        results instead (placement "user")."""
        wire = self._wire(msg)
        text, labelled = self.image_parts(msg, sent)
        if not labelled:
            wire["content"] = text
            return wire, []
        if msg.role == "tool" and self.vision is not None and self.vision.placement == "user":
            wire["content"] = text + "\n[the image is in the user message after the tool results]"
            named: list[dict[str, Any]] = []  # each image after its line: several results may send images
            for label, part in labelled:
                named += [{"type": "text", "text": f"From the {msg.name or 'tool'} result above: {label}"}, part]
            return wire, named
        wire["content"] = [{"type": "text", "text": text}, *(part for _, part in labelled)]
        return wire, []

    def image_parts(self, msg: Msg, sent: set[tuple[int, int]]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """The message's text, with a note for each image left out, and (label, part) of those sent."""
        text, parts = msg.content, []
        for index, image in enumerate(msg.images):
            if (id(msg), index) in sent:
                parts.append((image.get("label", ""), {"type": "image_url", "image_url": {"url": image["url"]}}))
            elif self.vision is None:
                text += (f"\n[image not sent: {image.get('label', '')}. This model takes text only; Abhed cannot "
                         "show it images]")
            else:
                text += (f"\n[image no longer sent: {image.get('label', '')}. A request carries at most "
                         f"{self.vision.max_images} images ({self.vision.max_bytes:,} bytes of them), the newest; "
                         "read the file again to see it]")
        return text, parts

    def images_sent(self, messages: list[Msg]) -> set[tuple[int, int]]:
        """(id(msg), index) of the images this request carries: the newest, within the limits."""
        if self.vision is None:
            return set()
        chosen: set[tuple[int, int]] = set()
        size = 0
        for msg in reversed(messages):
            for index in reversed(range(len(msg.images))):
                url = msg.images[index].get("url", "")
                if len(chosen) >= self.vision.max_images or size + len(url) > self.vision.max_bytes:
                    return chosen
                chosen.add((id(msg), index))
                size += len(url)
        return chosen


class TextAdapter(Adapter):
    """Tools described in the system prompt; calls and results written in the text."""

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

    def encode(self, messages: list[Msg]) -> Encoded:
        return Encoded(_dumps(message) for message in self.render(messages))  # results are grouped: no reuse

    def render(self, messages: list[Msg]) -> list[dict[str, Any]]:
        """Tool results are user messages here, so their images are parts of that message."""
        sent = self.images_sent(messages)
        out: list[dict[str, Any]] = []
        for msg in messages:
            text, labelled = self.image_parts(msg, sent) if msg.images else (msg.content, [])
            parts = [part for _, part in labelled]
            if msg.role == "assistant":
                if msg.tool_calls and not any(opener in text for opener in textcalls.OPENERS):
                    text = "\n".join([text, *(self.format_call(c) for c in msg.tool_calls)]).strip()
                _add(out, "assistant", text)
            elif msg.role == "tool":
                _add(out, "user", f"<tool_response>\n{text}\n</tool_response>", parts)
            else:
                _add(out, msg.role, text, parts)
        return out


class Qwen3CoderAdapter(TextAdapter):
    def system_addendum(self) -> str:
        blocks = []
        for tool in self.tools:
            fn = tool["function"]
            params = fn.get("parameters", {})
            lines = ["<function>", f"<name>{fn['name']}</name>", f"<description>{fn.get('description', '')}</description>",
                     "<parameters>"]
            for pname, prop in params.get("properties", {}).items():
                lines += ["<parameter>", f"<name>{pname}</name>", f"<type>{type_name(prop, params)}</type>"]
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

def adapter_for(tool_format: str, tools: list[dict[str, Any]], vision: Vision | None = None) -> Adapter:
    """The adapter of the format common/formats.py registers as `tool_format` (ValueError naming the
    known ones if none)."""
    return adapter_class(formats.get(tool_format))(tools, vision)


def adapter_class(fmt: formats.Format) -> type[Adapter]:
    """The class the registry names as "module:Class" (the registry sits below this layer and may not
    import it); a name that does not lead to an Adapter is a programming error, said as one."""
    module, _, attr = fmt.adapter.partition(":")
    found = getattr(importlib.import_module(module), attr, None)
    if not (isinstance(found, type) and issubclass(found, Adapter)):
        raise TypeError(f"the tool-call format {fmt.name!r} names {fmt.adapter!r} as its adapter, which is not an "
                        "Adapter class (common/formats.py)")
    return found


# -- shared helpers ------------------------------------------------------------------------------


def _add(out: list[dict[str, Any]], role: str, content: str, parts: list[dict[str, Any]] | None = None) -> None:
    """Append a message, merging it into the previous one of the same role: chat templates that
    insist on alternating user/assistant turns then never see two in a row. `parts`: images after
    the text (the content becomes a list of parts)."""
    message: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": content}, *parts] if parts else content}
    if out and out[-1]["role"] == role and role in ("user", "assistant") and "tool_calls" not in out[-1]:
        out[-1] = {"role": role, "content": _joined(out[-1]["content"], message["content"])}
    else:
        out.append(message)


def _put(out: Encoded, wire: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any] | None:
    """Append `wire` to the encoded messages, merged into `previous` (the last one, when it may
    absorb the next) if it has the same role; what may absorb the one after."""
    if previous is not None and previous["role"] == wire["role"] and "tool_calls" not in wire:
        merged = {"role": wire["role"], "content": _joined(previous["content"], wire["content"])}
        out[-1] = _dumps(merged)
        return merged
    out.append(_dumps(wire))
    plain = wire["role"] in ("user", "assistant") and "tool_calls" not in wire
    return wire if plain else None


def _joined(first: str | list[dict[str, Any]], second: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Two messages' contents as one: text joined by a blank line; a list of parts if either is one."""
    if isinstance(first, str) and isinstance(second, str):
        return f"{first}\n\n{second}"
    head = [{"type": "text", "text": first}] if isinstance(first, str) else list(first)
    tail = [{"type": "text", "text": second}] if isinstance(second, str) else list(second)
    return [*head, {"type": "text", "text": "\n\n"}, *tail]


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
