"""How the adapters put images on the wire: parts of the tool message or a following user message,
inside a text protocol's <tool_response>, within the request's count and byte limits, and as notes
for a text-only model."""

from __future__ import annotations

import json

import pytest

from abhed.model.adapters import adapter_for
from abhed.model.profiles import Vision
from abhed.model.wire import Msg, ToolCall

URL = "data:image/png;base64,iVBORw0KGgo="


def _picture(n: int = 0) -> dict[str, str]:
    return {"url": URL + "A" * n, "label": f"[image: /w/{n}.png]"}


def _read(call_id: str, n: int = 0) -> list[Msg]:
    return [Msg("assistant", "", [ToolCall(call_id, "read", json.dumps({"path": f"/w/{n}.png"}))]),
            Msg("tool", f"[image: /w/{n}.png]", tool_call_id=call_id, name="read", images=[_picture(n)])]


def _part(n: int = 0) -> dict:
    return {"type": "image_url", "image_url": {"url": URL + "A" * n}}


def test_placement_tool_puts_the_image_in_the_tool_message():
    adapter = adapter_for("native", [], Vision(placement="tool"))
    wire = adapter.render([Msg("user", "look"), *_read("c1")])
    assert wire[-1] == {"role": "tool", "tool_call_id": "c1",
                        "content": [{"type": "text", "text": "[image: /w/0.png]"}, _part()]}


def test_placement_user_puts_the_images_after_the_reply_s_last_result_and_merges_what_follows():
    adapter = adapter_for("native", [], Vision(placement="user"))
    calls = [ToolCall("c1", "read", "{}"), ToolCall("c2", "glob", "{}")]
    wire = adapter.render([Msg("user", "look"), Msg("assistant", "", calls),
                           Msg("tool", "[image: /w/0.png]", tool_call_id="c1", name="read", images=[_picture()]),
                           Msg("tool", "/w/0.png", tool_call_id="c2", name="glob"),
                           Msg("user", "[Abhed: a hint]")])
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "tool", "user"]
    assert wire[2]["content"] == "[image: /w/0.png]\n[the image is in the user message after the tool results]"
    assert wire[4]["content"] == [{"type": "text", "text": "From the read result above: [image: /w/0.png]"}, _part(),
                                  {"type": "text", "text": "\n\n"}, {"type": "text", "text": "[Abhed: a hint]"}]


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_coder"])
def test_text_protocols_send_the_image_with_the_tool_response(fmt):
    adapter = adapter_for(fmt, [], Vision(placement="tool"))
    wire = adapter.render([Msg("user", "look"), *_read("c1")])
    assert wire[-1] == {"role": "user", "content": [
        {"type": "text", "text": "<tool_response>\n[image: /w/0.png]\n</tool_response>"}, _part()]}


def test_a_request_carries_the_newest_images_within_the_count():
    adapter = adapter_for("native", [], Vision(max_images=2, placement="tool"))
    wire = adapter.render([Msg("user", "look"), *_read("c1", 1), *_read("c2", 2), *_read("c3", 3)])
    tools = [m for m in wire if m["role"] == "tool"]
    assert tools[0]["content"] == ("[image: /w/1.png]\n[image no longer sent: [image: /w/1.png]. A request carries at "
                                   "most 2 images (8,388,608 bytes of them), the newest; read the file again to see it]")
    assert [m["content"][1] for m in tools[1:]] == [_part(2), _part(3)]


def test_a_request_carries_the_newest_images_within_the_bytes():
    big = 70_000
    adapter = adapter_for("native", [], Vision(max_images=8, max_bytes=3 * 64 * 1024, placement="tool"))
    wire = adapter.render([Msg("user", "look"), *_read("c1", big), *_read("c2", big), *_read("c3", big)])
    tools = [m for m in wire if m["role"] == "tool"]
    assert isinstance(tools[0]["content"], str) and "image no longer sent" in tools[0]["content"]
    assert [m["content"][1] for m in tools[1:]] == [_part(big), _part(big)]


def test_a_text_only_model_gets_a_note_in_place_of_each_image():
    adapter = adapter_for("native", [], None)
    wire = adapter.render([Msg("user", "look", images=[_picture()]), *_read("c1")])
    assert wire[0]["content"] == ("look\n[image not sent: [image: /w/0.png]. This model takes text only; Abhed cannot "
                                  "show it images]")
    assert "image_url" not in json.dumps(wire)


def test_a_user_attachment_is_a_part_of_the_prompt():
    adapter = adapter_for("native", [], Vision())
    wire = adapter.render([Msg("system", "sys"), Msg("user", "what is this?", images=[_picture()])])
    assert wire[1] == {"role": "user", "content": [{"type": "text", "text": "what is this?"}, _part()]}


def test_encoding_reuses_text_messages_but_never_a_message_with_images():
    adapter = adapter_for("native", [], Vision(max_images=1, placement="tool"))
    conversation = [Msg("system", "sys"), Msg("user", "look"), *_read("c1", 1)]
    first = adapter.encode(conversation)
    conversation += _read("c2", 2)
    second = adapter.encode(conversation)
    assert first[0] is second[0] and first[2] is second[2]  # system and the assistant's call: kept
    assert first[3] != second[3] and "image no longer sent" in json.loads(second[3])["content"]
