"""abhed doctor's tool-calling check names the form the model's call came in (issue 32): the probe
runs over real HTTP against the replay server, whose Turn(text=...) is the model's raw text and
whose tool_parser=False is a vLLM started without a tool-call parser."""

from __future__ import annotations

import pytest

from abhed.cli import doctor
from abhed.model import profiles
from abhed.model.connect import connect
from abhed.model.replay import ReplayServer, Turn

QWEN25 = "Qwen/Qwen2.5-Coder-7B-Instruct"  # profile qwen2.5-coder: native, text protocol hermes
ARGS = '{"pattern": "*.md"}'
HERMES = '<tool_call>\n{"name": "glob", "arguments": {"pattern": "*.md"}}\n</tool_call>'
SERVE = profiles.load()["qwen2.5-coder"].vllm_serve  # the hint: vllm serve ... --tool-call-parser hermes ...
XML = "<tool_call>\n<function=glob>\n<parameter=pattern>\n*.md\n</parameter>\n</function>\n</tool_call>"


def probe(turn: Turn, *, tool_parser: bool = True, tool_format: str = "auto",
          model_id: str = QWEN25) -> tuple[doctor.Check, list[dict]]:  # type: ignore[type-arg]
    with ReplayServer([turn], model_id=model_id, tool_parser=tool_parser) as server:
        model = connect(server.url, backoff_s=0, attempts=1, tool_format=tool_format)
        try:
            return doctor._probe(model), server.requests
        finally:
            model.client.close()


def test_without_a_parser_a_model_that_writes_another_promptable_form_is_told_to_be_asked_for_it():
    check, requests = probe(Turn(text=XML), tool_parser=False)
    assert check.status == "WARN" and check.name == "tool calling"
    assert check.message.startswith("the server has no tool-call parser; Abhed falls back to describing the tools "
                                    "in the prompt (hermes): ")
    assert f"the model called glob {ARGS} (hermes tool calls; it wrote them in the qwen3_coder form)" in check.message
    assert 'set model.tool_format = "qwen3_coder" (ABHED_TOOL_FORMAT)' in check.message
    assert check.message.endswith(f"Serve it with the profile's flags for native calls: {SERVE}")
    assert "--tool-call-parser hermes" in SERVE
    assert "<tool_call>\n{\"name\"" in requests[-1]["messages"][0]["content"]  # hermes was what it was asked for


def test_without_a_parser_the_form_asked_for_needs_no_setting():
    check, _ = probe(Turn(text=HERMES), tool_parser=False)
    assert check.status == "WARN" and "no tool-call parser" in check.message  # native calls are the fix
    assert f"(hermes), which works: the model called glob {ARGS} (hermes tool calls). Serve it" in check.message
    assert "wrote them" not in check.message and "model.tool_format" not in check.message


@pytest.mark.parametrize("parser", [True, False])
def test_a_pinned_text_protocol_names_the_form_the_model_wrote(parser):
    check, requests = probe(Turn(text=HERMES), tool_parser=parser, tool_format="qwen3_coder")
    assert not requests[-1].get("tools")  # a pinned text protocol: the server's parser is never asked
    assert check.status == "WARN" and "no tool-call parser" not in check.message
    assert check.message == (f"the model called glob {ARGS} (qwen3_coder tool calls; it wrote them in the hermes "
                             "form). Abhed reads that form too, but describes the tools in another: set "
                             'model.tool_format = "hermes" (ABHED_TOOL_FORMAT) to ask for the form the model writes')
    same, _ = probe(Turn(text=XML), tool_parser=parser, tool_format="qwen3_coder")
    assert (same.status, same.message) == ("OK", f"the model called glob {ARGS} (qwen3_coder tool calls)")


def test_a_form_abhed_cannot_ask_for_is_named_without_a_setting():
    tools = '<tools>\n{"name": "glob", "arguments": {"pattern": "*.md"}}\n</tools>'  # Qwen2.5-Coder's own form
    check, _ = probe(Turn(text=tools), tool_parser=False)
    assert check.status == "WARN" and "no tool-call parser" in check.message  # native calls are still the fix
    assert (f"the model called glob {ARGS} (hermes tool calls; it wrote them in the qwen25 form), which Abhed reads "
            "but cannot ask for. Serve it") in check.message and "model.tool_format" not in check.message
    pinned, _ = probe(Turn(text=tools), tool_format="hermes")
    assert (pinned.status, pinned.message) == ("OK", f"the model called glob {ARGS} (hermes tool calls; it wrote them "
                                                     "in the qwen25 form), which Abhed reads but cannot ask for")


@pytest.mark.parametrize("text,form", [(HERMES, "hermes"), (XML, "qwen3_coder")])
def test_a_native_call_the_servers_parser_left_in_the_text_is_a_warning_with_the_serve_hint(text, form):
    check, requests = probe(Turn(text=text))
    assert requests[-1]["tools"]  # asked natively, and the server has a parser
    assert check.status == "WARN"
    assert check.message == (f"the model called glob {ARGS}, but the server's tool-call parser left it in the reply's "
                             f"text ({form} form): it works only because Abhed recovers it from there. Check that "
                             f"--tool-call-parser suits the family; the profile serves it with: {SERVE}")


def test_native_calls_the_server_parsed_are_ok():
    check, _ = probe(Turn(calls=[("glob", {"pattern": "*.md"})]))
    assert (check.status, check.message) == ("OK", f"the model called glob {ARGS} (native tool calls)")


def test_markup_that_does_not_parse_is_named_with_its_form_and_the_reason():
    broken = '<tool_call>\n{"name": "glob", "arguments": {"pattern": }\n</tool_call>'
    check, _ = probe(Turn(text=broken), tool_format="hermes")
    assert check.status == "WARN"
    assert check.message == ("a call came back in the hermes form but does not parse: The JSON in your <tool_call> "
                             "block does not parse (Expecting value at line 1 column 43); nothing was run. Weak models "
                             "need a stronger one.")
    xml = "<tool_call>\n<function=>\n<parameter=pattern>\n*.md\n</parameter>\n</function>\n</tool_call>"
    unnamed, _ = probe(Turn(text=xml), tool_parser=False)  # the fallback's note says what came back, once
    assert unnamed.status == "WARN" and unnamed.message.startswith(
        "the server has no tool-call parser; Abhed falls back to describing the tools in the prompt (hermes): a call "
        "came back in the qwen3_coder form but does not parse: Your tool call is malformed: it must start with "
        "<function=NAME>")
    assert "nothing was run. Weak models need a stronger one. Serve it with the profile's flags" in unnamed.message
