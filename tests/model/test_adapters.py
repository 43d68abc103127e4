"""Tool-call formats: native, and the Hermes and Qwen3-Coder text protocols; malformed calls teach."""

from __future__ import annotations

import json

import pytest

from abhed.model import textcalls
from abhed.model.adapters import adapter_for
from abhed.model.client import ModelClient
from abhed.model.replay import ReplayServer, Turn
from abhed.model.wire import Msg, Reply, ToolCall
from abhed.tools import definitions

SCHEMAS = {d["function"]["name"]: d["function"]["parameters"] for d in definitions()}


def parse_text_calls(text, schemas):
    return textcalls.read(text, schemas).calls


def test_hermes_calls_are_read_in_order_with_text_around_them():
    text = ('I will read both.\n<tool_call>\n{"name": "read", "arguments": {"path": "/w/a.py"}}\n</tool_call>\n'
            '<tool_call>{"name": "glob", "parameters": {"pattern": "*.py"}}</tool_call>')
    calls = parse_text_calls(text, SCHEMAS)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("read", {"path": "/w/a.py"}),
                                                                  ("glob", {"pattern": "*.py"})]
    assert all(c.error is None and len(c.id) == 9 for c in calls)


def test_hermes_unterminated_and_fenced_blocks_still_parse():
    calls = parse_text_calls('<tool_call>\n```json\n{"name": "read", "arguments": {"path": "/x"}}\n```', SCHEMAS)
    assert calls[0].name == "read" and json.loads(calls[0].arguments) == {"path": "/x"}


def test_hermes_malformed_json_becomes_a_teaching_error_that_keeps_the_name():
    [call] = parse_text_calls('<tool_call>{"name": "edit", "arguments": {"path": "/x", }</tool_call>', SCHEMAS)
    assert call.name == "edit" and call.error.startswith("The JSON in your <tool_call> block does not parse")
    assert "nothing was run" in call.error and '{"name": "read", "arguments": {"path"' in call.error
    [nameless] = parse_text_calls('<tool_call>["read"]</tool_call>', SCHEMAS)
    assert nameless.name == "" and '"name" (a string)' in nameless.error


def test_qwen3_coder_parameters_take_the_types_of_the_schema():
    text = ("<tool_call>\n<function=read>\n<parameter=path>\n/w/a.py\n</parameter>\n<parameter=limit>\n20\n"
            "</parameter>\n</function>\n</tool_call>")
    [call] = parse_text_calls(text, SCHEMAS)
    assert call.name == "read" and json.loads(call.arguments) == {"path": "/w/a.py", "limit": 20}
    text = ("<tool_call><function=edit><parameter=path>/w/a.py</parameter><parameter=old_string>\n    x = 1\n\n"
            "</parameter><parameter=new_string>    x = 2</parameter><parameter=replace_all>true</parameter>"
            "</function></tool_call>")
    args = json.loads(parse_text_calls(text, SCHEMAS)[0].arguments)
    assert args == {"path": "/w/a.py", "old_string": "    x = 1\n", "new_string": "    x = 2", "replace_all": True}


def test_qwen3_coder_arrays_are_json_and_bad_values_are_left_for_the_schema_check():
    text = ('<tool_call><function=todo><parameter=items>[{"content": "A"}]</parameter></function></tool_call>'
            "<tool_call><function=read><parameter=path>/x</parameter><parameter=limit>ten</parameter></function>"
            "</tool_call>")
    todo, read = parse_text_calls(text, SCHEMAS)
    assert json.loads(todo.arguments) == {"items": [{"content": "A"}]}
    assert json.loads(read.arguments)["limit"] == "ten"  # dispatch then says: limit expects an integer


def test_qwen3_coder_without_wrapper_or_closing_tags():
    [call] = parse_text_calls("<function=glob>\n<parameter=pattern>\n**/*.md\n</function>", SCHEMAS)
    assert call.name == "glob" and json.loads(call.arguments) == {"pattern": "**/*.md"}
    [bad] = parse_text_calls("<tool_call><function=>oops</tool_call>", SCHEMAS)
    assert bad.error.startswith("Your tool call is malformed") and "<function=read>" in bad.error


def test_the_stream_hides_markup_and_holds_back_a_partial_marker():
    def shown(text):
        return textcalls.VisibleStream().feed(text)
    assert shown("Reading it.\n<tool_call>{...") == "Reading it.\n"
    assert shown("Reading it.\n<tool_c") == "Reading it.\n"
    assert shown("a < b") == "a < b" and shown("x <") == "x "


def test_native_requests_carry_the_tools_and_history_stays_valid_for_the_server():
    adapter = adapter_for("native", definitions())
    assert adapter.request_fields()["tool_choice"] == "auto" and adapter.system_addendum() == ""
    wire = adapter.render([
        Msg("system", "sys"), Msg("user", "a"), Msg("user", "b"),
        Msg("assistant", "", [ToolCall("c1", "read", '{"path": "/x", '), ToolCall("c2", "glob", "")]),
        Msg("tool", "out1", tool_call_id="c1"), Msg("tool", "out2", tool_call_id="c2")])
    assert wire[1] == {"role": "user", "content": "a\n\nb"}  # never two user turns in a row
    calls = wire[2]["tool_calls"]
    assert wire[2]["content"] is None
    assert json.loads(calls[0]["function"]["arguments"]) == {"unparsed_arguments": '{"path": "/x", '}
    assert calls[1]["function"]["arguments"] == "{}"
    assert wire[3] == {"role": "tool", "tool_call_id": "c1", "content": "out1"}


def test_native_reply_with_markup_in_its_content_is_still_read_as_calls():
    adapter = adapter_for("native", definitions())
    reply = Reply(text='<tool_call>{"name": "read", "arguments": {"path": "/x"}}</tool_call>')
    assert adapter.calls(reply)[0].name == "read"


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_coder"])
def test_text_protocols_describe_tools_in_the_prompt_and_results_as_user_turns(fmt):
    adapter = adapter_for(fmt, definitions())
    assert adapter.request_fields() == {}
    addendum = adapter.system_addendum()
    assert "<tools>" in addendum and "todo" in addendum and "<tool_response>" in addendum
    wire = adapter.render([Msg("user", "go"), Msg("assistant", "Reading.", [ToolCall("c1", "read", '{"path": "/x"}')]),
                           Msg("tool", "1\tline", tool_call_id="c1"), Msg("tool", "more", tool_call_id="c2"),
                           Msg("user", "and then?")])
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert wire[1]["content"].startswith("Reading.\n<tool_call>") and "read" in wire[1]["content"]
    assert wire[2]["content"] == "<tool_response>\n1\tline\n</tool_response>\n\n<tool_response>\nmore\n</tool_response>" \
                                 "\n\nand then?"
    # what the adapter writes, it reads back
    assert json.loads(parse_text_calls(wire[1]["content"], SCHEMAS)[0].arguments) == {"path": "/x"}


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_coder"])
def test_a_server_without_parser_round_trips_calls_written_in_the_text(fmt):
    adapter = adapter_for(fmt, definitions())
    body = {"model": "m", "messages": [{"role": "system", "content": adapter.system_addendum()},
                                       {"role": "user", "content": "go"}], **adapter.request_fields()}
    args = {"path": "/w/a.py", "old_string": "  a\n", "new_string": "  b\n"}
    with ReplayServer([Turn(text="Editing.", calls=[("edit", args)])], tool_parser=False) as server:
        reply = ModelClient(server.url, backoff_s=0).chat(body)
    assert not reply.tool_calls and "<tool_call>" in reply.text
    [call] = adapter.calls(reply)
    assert call.name == "edit" and json.loads(call.arguments) == args


def test_unknown_format_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="native, hermes, qwen3_coder"):
        adapter_for("pythonic", [])


def test_encode_matches_render_and_reuses_earlier_encodings():
    from abhed.model.client import _payload
    adapter = adapter_for("native", definitions())
    conversation = [Msg("system", "sys"), Msg("user", "a"), Msg("user", "b \ud800"),
                    Msg("assistant", "x", [ToolCall("c1", "read", '{"path": "/x"}')]),
                    Msg("tool", "out", tool_call_id="c1"), Msg("assistant", "done"), Msg("assistant", "more")]
    for end in range(1, len(conversation) + 1):
        part = conversation[:end]
        assert [json.loads(text) for text in adapter.encode(part)] == adapter.render(part)
    first = adapter.encode(conversation)
    again = adapter.encode(conversation)
    assert all(first[i] is again[i] for i in (0, 2, 3))  # the same text objects: nothing re-encoded (1 is merged)
    body = {"model": "m", "messages": first, "max_tokens": 5}
    assert json.loads(_payload(body)) == {"model": "m", "messages": adapter.render(conversation), "max_tokens": 5}
    text = adapter_for("hermes", definitions())
    assert [json.loads(t) for t in text.encode(conversation)] == text.render(conversation)


def test_the_stream_shows_the_prose_and_never_a_call_however_the_reply_is_cut():
    """Shown while streaming, then what `finish` adds: the reply's prose, whatever the cuts; and
    while streaming, never a byte of a call's markup."""
    import random
    rng = random.Random(14)
    alphabet = ["a", "<", "t", "<tool_call>", "<function=", "<f", "<fun", "ool_c", "x\n", "<tool_", "`",
                '{"name": "read", "arguments": {"path": "/x"}}', "</tool_call>", "<parameter=path>/y</parameter>"]
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 5))))
        stream, shown = textcalls.VisibleStream(), ""
        for start, end in zip([0, *cuts], [*cuts, len(text)]):
            shown += stream.feed(text[start:end])
        reading = textcalls.read(text, SCHEMAS)
        first = min((text.find(o) for o in textcalls.OPENERS if o in text), default=len(text))
        assert text.startswith(shown) and len(shown) <= first, (text, cuts)
        assert (shown + stream.finish(reading.prose)).strip() == reading.prose.strip(), (text, cuts)


def test_the_stream_looks_only_at_the_new_piece_and_a_short_tail(monkeypatch):
    """Linear in the reply: each chunk costs the chunk plus a held-back tail shorter than a marker,
    never the text so far (Agent._on_text joined and filtered the whole reply at every chunk)."""
    seen: list[int] = []
    real = textcalls._partial_tail
    monkeypatch.setattr(textcalls, "_partial_tail", lambda text: (seen.append(len(text)), real(text))[1])
    stream = textcalls.VisibleStream()
    shown = "".join(stream.feed(piece) for piece in ["word <", "tool", " more ", "<", "x"] * 2000)
    assert max(seen) <= len(" more ") + len("<tool_call>") and len(shown) > 20000
    assert stream.feed("<tool_call>{") == "" and stream.feed("after the call") == ""
