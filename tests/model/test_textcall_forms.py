"""The text forms of tool calls other than Hermes and Qwen3 XML: qwen25, llama_json, pythonic,
mistral, deepseek, harmony (abhed/model/textcalls/). A table of model outputs with the spans each
form finds, written from the facts in each module's docstring; each row notes what vLLM's parser
for that family would give, and where we differ, why (a documented deliberate difference).
Then hypothesis: `find` never raises and returns ordered, non-overlapping spans inside the text.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abhed.model import textcalls
from abhed.model.textcalls import deepseek, harmony, llama_json, mistral, pythonic, qwen25
from abhed.model.textcalls.base import Span

FORMS = {m.NAME: m.FORM for m in (qwen25, llama_json, pythonic, mistral, deepseek, harmony)}
READ = {"path": "/abs/path/file.py"}
# DeepSeek's tokens: FULLWIDTH VERTICAL LINE bars, LOWER ONE EIGHTH BLOCK joins
CS, CE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
B, E, S, EOS = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜end▁of▁sentence｜>"


@dataclass
class Want:
    """One span expected: its calls as (name, arguments), or a piece of its error; what it names."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    error: str | None = None
    named: str = ""
    placement: str = "anywhere"
    covers: str | None = None  # text[start:end], when the extent matters


@dataclass
class Row:
    id: str
    form: str
    text: str
    want: list[Want]
    vllm: str  # what vLLM's parser gives; "same" or the deliberate difference and why


def call(name: str, args: Any, placement: str = "anywhere", covers: str | None = None) -> Want:
    return Want([(name, args)], placement=placement, covers=covers)


ROWS = [
    # -- qwen25: <tools> blocks ("line") and all-fence replies ("whole") -------------------------
    Row("qwen25-plain", "qwen25", '<tools>\n{"name": "read", "arguments": {"path": "/abs/path/file.py"}}\n</tools>',
        [call("read", READ, "line")], "same"),
    Row("qwen25-two-blocks-text-around", "qwen25",
        'Reading both.\n<tools>\n{"name": "read", "arguments": {"path": "/a"}}\n</tools>\n'
        '<tools>\n{"name": "grep", "arguments": {"pattern": "x"}}\n</tools>\nThen I decide.',
        [call("read", {"path": "/a"}, "line", '<tools>\n{"name": "read", "arguments": {"path": "/a"}}\n</tools>'),
         call("grep", {"pattern": "x"}, "line")], "same calls; the text around is content"),
    Row("qwen25-array-parameters", "qwen25",
        '<tools>\n[{"name": "read", "arguments": {"path": "/a"}}, {"name": "glob", "parameters": {"pattern": "*.py"}}]'
        '\n</tools>',
        [Want([("read", {"path": "/a"}), ("glob", {"pattern": "*.py"})], placement="line")],
        'same: vLLM maps "parameters" too'),
    Row("qwen25-jsonl", "qwen25",
        '<tools>\n{"name": "read", "arguments": {"path": "/a"}},\n{"name": "read", "arguments": {"path": "/b"}}\n</tools>',
        [Want([("read", {"path": "/a"}), ("read", {"path": "/b"})], placement="line")],
        "same (its JSONL fallback)"),
    Row("qwen25-markers-in-string", "qwen25",
        '<tools>{"name": "write", "arguments": {"path": "/t.md", "content": "</tools>\\n<tools>{}"}}</tools>',
        [call("write", {"path": "/t.md", "content": "</tools>\n<tools>{}"}, "line")],
        "differs: its lazy regex ends the body at the </tools> inside the string, so no call; we decode the "
        "JSON to its own end"),
    Row("qwen25-unicode", "qwen25",
        '<tools>{"name": "write", "arguments": {"path": "/tmp/ünï.txt", "content": "日本語 ✓ \\u00e9"}}</tools>',
        [call("write", {"path": "/tmp/ünï.txt", "content": "日本語 ✓ é"}, "line")], "same"),
    Row("qwen25-broken-named", "qwen25", '<tools>\n{"name": "edit", "arguments": {"path": "/a", }\n</tools>',
        [Want(error="does not parse", named="edit", placement="line")],
        "differs: vLLM logs the error and returns the text as content; we teach the form"),
    Row("qwen25-broken-nameless", "qwen25", "<tools>\nread the file /a\n</tools>",
        [Want(error="text that is not JSON", placement="line")], "same: no call (we add an error that names no tool)"),
    Row("qwen25-cut-off", "qwen25", '<tools>\n{"name": "read", "arguments": {"path": "/abs/pa',
        [Want(error="cut off before </tools>", named="read", placement="line")], "same: no call"),
    Row("qwen25-unclosed-whole", "qwen25", '<tools>\n{"name": "read", "arguments": {"path": "/a"}}\n',
        [call("read", {"path": "/a"}, "line")], "same: an unclosed block is read to the end"),
    Row("qwen25-mention-then-block", "qwen25",
        'I wrap calls in a <tools> tag.\n<tools>\n{"name": "read", "arguments": {"path": "/a"}}\n</tools>',
        [Want(error="not JSON", placement="line", covers="<tools> tag.\n"), call("read", {"path": "/a"}, "line")],
        "differs: vLLM's body runs from the first <tools> (the mention) to </tools> and does not parse, so the "
        "real call is lost; a block that does not parse ends at the next <tools>"),
    Row("qwen25-tool-listing-echo", "qwen25",
        '<tools>\n{"type": "function", "function": {"name": "read", "parameters": {}}}\n</tools>',
        [Want(error="not a call", named="", placement="line")],
        "same: no call; a name nested in a listing is not the one called"),
    Row("qwen25-fenced-whole", "qwen25", '```json\n{"name": "read", "arguments": {"path": "/abs/path/file.py"}}\n```\n',
        [call("read", READ, "whole", '```json\n{"name": "read", "arguments": {"path": "/abs/path/file.py"}}\n```')],
        "differs: no vLLM parser reads a fenced reply (hermes leaves it as content); issue 32926 shows it is "
        "Qwen2.5-Coder's own form"),
    Row("qwen25-two-fences", "qwen25",
        '```json\n{"name": "read", "arguments": {"path": "/a"}}\n```\n\n```json\n{"name": "read", "arguments": '
        '{"path": "/b"}}\n```',
        [Want([("read", {"path": "/a"}), ("read", {"path": "/b"})], placement="whole")], "differs: as above"),
    Row("qwen25-fenced-answer", "qwen25", '```json\n{"status": "ok", "count": 2}\n```', [],
        "same: JSON that is no call is an answer"),
    Row("qwen25-fenced-broken", "qwen25", '```json\n{"name": "read", "arguments": {"path": "/a"\n```',
        [Want(error="fenced call does not parse", named="read", placement="whole")], "differs: vLLM reads no fence"),
    Row("qwen25-fence-in-prose", "qwen25",
        'Call it like this:\n```json\n{"name": "read", "arguments": {"path": "/a"}}\n```', [],
        "same: a fence amid prose is a sample"),

    # -- llama_json: the whole reply ("whole"), or after <|python_tag|> ("anywhere") ------------
    Row("llama-plain", "llama_json", '{"name": "read", "parameters": {"path": "/abs/path/file.py"}}',
        [call("read", READ, "whole")], "same"),
    Row("llama-two-semicolon", "llama_json",
        '{"name": "read", "parameters": {"path": "/a"}}; {"name": "grep", "arguments": {"pattern": "x"}}\n',
        [Want([("read", {"path": "/a"}), ("grep", {"pattern": "x"})], placement="whole")], "same"),
    Row("llama-array", "llama_json", '[{"name": "read", "arguments": {"path": "/a"}}]',
        [call("read", {"path": "/a"}, "whole")], "same (vLLM finds the object inside the array)"),
    Row("llama-text-after", "llama_json", '{"name": "read", "parameters": {"path": "/a"}} is the call to make.', [],
        "differs: vLLM reads the call and drops the prose; JSON inside an answer is an example, not a call"),
    Row("llama-text-before", "llama_json", 'The call: {"name": "read", "parameters": {"path": "/a"}}', [],
        "differs: as above"),
    Row("llama-broken-named", "llama_json", '{"name": "read", "parameters": {"path": "/a",}}',
        [Want(error="does not parse", named="read", placement="whole")],
        "differs: vLLM returns the text as content; we teach"),
    Row("llama-broken-then-prose", "llama_json", '{"name": "read", "parameters": {"path": /a}}\n\nThat is the call.',
        [], "same: no call; a broken example with prose after it is prose"),
    Row("llama-cut-off", "llama_json", '{"name": "bash", "parameters": {"command": "ls -l',
        [Want(error="Unterminated string", named="bash", placement="whole")], "differs: as above"),
    Row("llama-answer-json", "llama_json", '{"status": "ok", "count": 3}', [], "same: no name, no call"),
    Row("llama-parameters-not-object", "llama_json", '{"name": "read", "parameters": ["/a"]}',
        [Want(error="not a call", named="read", placement="whole")],
        "differs: vLLM passes the list on as the arguments"),
    Row("llama-python-tag", "llama_json",
        'Reading.<|python_tag|>{"name": "read", "parameters": {"path": "/a"}}<|eom_id|>',
        [call("read", {"path": "/a"}, covers='<|python_tag|>{"name": "read", "parameters": {"path": "/a"}}')],
        "same call; vLLM drops the text before (content None)"),
    Row("llama-tag-in-string", "llama_json",
        '{"name": "write", "parameters": {"path": "/n.txt", "content": "<|python_tag|>{\\"x\\": 1}"}}',
        [call("write", {"path": "/n.txt", "content": '<|python_tag|>{"x": 1}'}, "whole")], "same"),
    Row("llama-python-tag-not-json", "llama_json", '<|python_tag|>brave_search.call(query="x")',
        [Want(error="not followed by JSON")], "same: no call (Llama's built-in tools are not Abhed's)"),
    Row("llama-unicode", "llama_json", '{"name": "grep", "parameters": {"pattern": "naïve|日本"}}',
        [call("grep", {"pattern": "naïve|日本"}, "whole")], "same"),

    # -- pythonic: the whole reply ("whole"), or inside <|python_start|> ("anywhere") -----------
    Row("pythonic-plain", "pythonic", '[read(path="/abs/path/file.py")]', [call("read", READ, "whole")], "same"),
    Row("pythonic-two-calls", "pythonic",
        '[read(path="/a", offset=10), grep(pattern="x", paths=["/a", "/b"], options={"case": False}, limit=None)]',
        [Want([("read", {"path": "/a", "offset": 10}),
               ("grep", {"pattern": "x", "paths": ["/a", "/b"], "options": {"case": False}, "limit": None})],
              placement="whole")], "same"),
    Row("pythonic-negative-and-json-words", "pythonic", '[read(path="/a", offset=-5, follow=true, tags=("x",))]',
        [call("read", {"path": "/a", "offset": -5, "follow": True, "tags": ["x"]}, "whole")],
        "differs: vLLM refuses -5 (a unary minus is not a constant), true and tuples, so the reply is content"),
    Row("pythonic-variable", "pythonic", "[read(path=p)]",
        [Want(error="must be literals", named="read", placement="whole")], "differs: vLLM gives content; we teach"),
    Row("pythonic-positional", "pythonic", '[read("/a")]',
        [Want(error="without names", named="read", placement="whole")],
        "differs: vLLM drops positional arguments silently and calls read with {}"),
    Row("pythonic-in-prose", "pythonic", 'Let me read it: [read(path="/a")]', [],
        "same: the regex must match from the reply's start"),
    Row("pythonic-example-then-prose", "pythonic", '[read(path="/a")] is how the call looks.', [],
        "same: vLLM's ast.parse of the whole reply fails, so it is content"),
    Row("pythonic-cut-off", "pythonic", '[read(path="/abs/pa',
        [Want(error="not valid Python", named="read", placement="whole")], "differs: vLLM gives content"),
    Row("pythonic-python-start", "pythonic",
        'I will write it.<|python_start|>[write(path="/x.txt", content="<|python_end|>]")]<|python_end|>',
        [call("write", {"path": "/x.txt", "content": "<|python_end|>]"},
              covers='<|python_start|>[write(path="/x.txt", content="<|python_end|>]")]<|python_end|>')],
        "differs: vLLM strips <|python_start|> only at the reply's start and deletes every <|python_end|>, the one "
        "in the string too"),
    Row("pythonic-bare-call", "pythonic", 'read(path="/a")',
        [Want(error="not inside a list", named="read", placement="whole")], "differs: vLLM gives content"),
    Row("pythonic-tool-code-fence", "pythonic", '```tool_code\n[read(path="/a")]\n```',
        [call("read", {"path": "/a"}, "whole")], "differs: vLLM reads no fence; Gemma writes this one"),
    Row("pythonic-tool-code-bare-calls", "pythonic", '```tool_code\nread(path="/a")\ngrep(pattern="x")\n```',
        [Want([("read", {"path": "/a"}), ("grep", {"pattern": "x"})], placement="whole")],
        "differs: vLLM reads no fence"),
    Row("pythonic-tool-code-other-code", "pythonic", "```tool_code\nimport os\nprint(os.getcwd())\n```", [],
        "same: code to run is not a call"),
    Row("pythonic-plain-list", "pythonic", "[1, 2, 3]", [], "same"),
    Row("pythonic-dotted", "pythonic", '[os.system(command="ls")]',
        [Want(error="by its name", named="os.system", placement="whole")], "same: no call"),
    Row("pythonic-no-evaluation", "pythonic", '[read(path=__import__("os").getcwd())]',
        [Want(error="must be literals", named="read", placement="whole")], "same: nothing is evaluated"),
    Row("pythonic-unicode", "pythonic", '[write(path="/tmp/é.txt", content="日本語\\n✓")]',
        [call("write", {"path": "/tmp/é.txt", "content": "日本語\n✓"}, "whole")], "same"),

    # -- mistral: after [TOOL_CALLS] ("anywhere") -------------------------------------------------
    Row("mistral-pre-v11", "mistral", '[TOOL_CALLS][{"name": "read", "arguments": {"path": "/abs/path/file.py"}}]',
        [call("read", READ)], "same"),
    Row("mistral-pre-v11-text-around", "mistral",
        'Reading both.[TOOL_CALLS] [{"name": "read", "arguments": {"path": "/a"}, "id": "a1B2c3D4e"}, '
        '{"name": "grep", "arguments": {"pattern": "x"}}]\nextra',
        [Want([("read", {"path": "/a"}), ("grep", {"pattern": "x"})])], "same: the trailing text is ignored"),
    Row("mistral-v11-two", "mistral", '[TOOL_CALLS]read{"path": "/a"}[TOOL_CALLS]grep{"pattern": "x"}',
        [call("read", {"path": "/a"}, covers='[TOOL_CALLS]read{"path": "/a"}'), call("grep", {"pattern": "x"})],
        "same"),
    Row("mistral-v11-args-token", "mistral", '[TOOL_CALLS]read[ARGS]{"path": "/a"}', [call("read", {"path": "/a"})],
        "same (an HF tokenizer with special tokens kept)"),
    Row("mistral-v11-call-id", "mistral", '[TOOL_CALLS]read[CALL_ID]a1B2c3D4e[ARGS]{"path": "/a"}',
        [call("read", {"path": "/a"})], "differs: vLLM takes 'read[CALL_ID]a1B2c3D4e' for the name"),
    Row("mistral-v11-broken", "mistral", '[TOOL_CALLS]edit{"path": "/a", "old": }',
        [Want(error="do not parse", named="edit")],
        "differs: vLLM passes the arguments on unparsed as a call; nothing runs here, the model is taught"),
    Row("mistral-v11-cut-after-name", "mistral", "[TOOL_CALLS]read",
        [Want(error="cut off before its arguments", named="read")],
        "differs: vLLM skips it yet reports tools_called with no call"),
    Row("mistral-v11-marker-in-string", "mistral",
        '[TOOL_CALLS]write{"path": "/m.md", "content": "[TOOL_CALLS]read{}"}',
        [call("write", {"path": "/m.md", "content": "[TOOL_CALLS]read{}"})],
        "differs: vLLM splits at every [TOOL_CALLS], the one in the string too"),
    Row("mistral-pre-v11-two-tokens", "mistral",
        '[TOOL_CALLS][{"name": "read", "arguments": {"path": "/a"}}][TOOL_CALLS][{"name": "read", "arguments": '
        '{"path": "/b"}}]',
        [call("read", {"path": "/a"}), call("read", {"path": "/b"})],
        "differs: vLLM raises (only one [TOOL_CALLS] before v11)"),
    Row("mistral-pre-v11-cut-off", "mistral", '[TOOL_CALLS][{"name": "read", "arguments": {"path": "/a',
        [Want(error="does not parse", named="read")], "same: no call"),
    Row("mistral-prose-mention", "mistral", "The model writes [TOOL_CALLS] before its calls.",
        [Want(error="not followed by a tool's name", named="")], "same: no call (an error naming no tool)"),
    Row("mistral-unicode", "mistral", '[TOOL_CALLS]write{"path": "/ü.txt", "content": "ça ✓"}',
        [call("write", {"path": "/ü.txt", "content": "ça ✓"})], "same"),

    # -- deepseek: V3 and V3.1 ("anywhere") -------------------------------------------------------
    Row("deepseek-v3-two", "deepseek",
        f'{CS}{B}function{S}read\n```json\n{{"path": "/a"}}\n```{E}\n{B}function{S}grep\n```json\n'
        f'{{"pattern": "x"}}\n```{E}{CE}{EOS}',
        [call("read", {"path": "/a"}, covers=f'{CS}{B}function{S}read\n```json\n{{"path": "/a"}}\n```{E}'),
         call("grep", {"pattern": "x"}, covers=f'{B}function{S}grep\n```json\n{{"pattern": "x"}}\n```{E}{CE}{EOS}')],
        "same"),
    Row("deepseek-v31-text-before", "deepseek",
        f'Reading.{CS}{B}read{S}{{"path": "/abs/path/file.py"}}{E}{B}grep{S}{{"pattern": "x"}}{E}{CE}',
        [call("read", READ), call("grep", {"pattern": "x"})], "same; the text before is content"),
    Row("deepseek-v3-multiline", "deepseek",
        f'{CS}{B}function{S}read\n```json\n{{\n  "path": "/a",\n  "offset": 3\n}}\n```{E}{CE}',
        [call("read", {"path": "/a", "offset": 3})],
        "differs: vLLM's regex has no DOTALL, so arguments over several lines are lost"),
    Row("deepseek-v31-broken", "deepseek", f'{CS}{B}read{S}{{"path": /a}}{E}{CE}',
        [Want(error="do not parse", named="read")], "differs: vLLM passes the broken arguments on as a call"),
    Row("deepseek-v31-cut-off", "deepseek", f'{CS}{B}read{S}{{"path": "/abs/pa',
        [Want(error="do not parse", named="read")], "differs: vLLM reports tools_called with no call"),
    Row("deepseek-v31-cut-after-args", "deepseek", f'{CS}{B}read{S}{{"path": "/a"}}',
        [call("read", {"path": "/a"})], "differs: vLLM needs the end token; whole arguments are taken here"),
    Row("deepseek-no-sep", "deepseek", f'{CS}{B}read{{"path": "/a"}}{E}{CE}',
        [Want(error="has no <｜tool▁sep｜>", named="read")], "same: no call"),
    Row("deepseek-v3-string-arguments", "deepseek",
        f'{CS}{B}function{S}read\n```json\n"{{\\"path\\": \\"/a\\"}}"\n```{E}{CE}', [call("read", {"path": "/a"})],
        "differs: vLLM passes the JSON string itself, arguments encoded twice"),
    Row("deepseek-tokens-in-string", "deepseek", f'{CS}{B}write{S}{{"path": "/d.md", "content": "{E}{CE}"}}{E}{CE}',
        [call("write", {"path": "/d.md", "content": f"{E}{CE}"})],
        "differs: vLLM's lazy regex ends the arguments at the token inside the string"),
    Row("deepseek-inner-begin-left-out", "deepseek", f'{CS}read{S}{{"path": "/a"}}{E}{CE}',
        [call("read", {"path": "/a"})], "differs: vLLM finds no call"),
    Row("deepseek-unicode", "deepseek", f'{CS}{B}grep{S}{{"pattern": "日本|ñ"}}{E}{CE}',
        [call("grep", {"pattern": "日本|ñ"})], "same"),

    # -- harmony: tokens kept or stripped ("anywhere") --------------------------------------------
    Row("harmony-after-analysis", "harmony",
        '<|channel|>analysis<|message|>Need the file.<|end|><|start|>assistant<|channel|>commentary '
        'to=functions.read <|constrain|>json<|message|>{"path": "/abs/path/file.py"}<|call|>',
        [call("read", READ, covers='<|start|>assistant<|channel|>commentary to=functions.read <|constrain|>json'
                                   '<|message|>{"path": "/abs/path/file.py"}<|call|>')],
        "same call with the openai parser (token ids); without it vLLM never shows this text, and drops the call"),
    Row("harmony-recipient-in-role", "harmony",
        '<|start|>assistant to=functions.read<|channel|>commentary json<|message|>{"path": "/a"}<|call|>',
        [call("read", {"path": "/a"})], "same (openai parser)"),
    Row("harmony-analysis-channel", "harmony",
        '<|channel|>analysis to=functions.grep code<|message|>{"pattern": "x"}<|call|>',
        [call("grep", {"pattern": "x"})], "same non-streaming; vLLM's streaming path once took it for reasoning"),
    Row("harmony-final-only", "harmony", "<|channel|>final<|message|>2 + 2 = 4.<|return|>", [], "same: no call"),
    Row("harmony-broken", "harmony",
        '<|channel|>commentary to=functions.read <|constrain|>json<|message|>{"path": "/a",}<|call|>',
        [Want(error="do not parse", named="read")], "differs: vLLM passes the text on as the arguments"),
    Row("harmony-builtin-python", "harmony", "<|channel|>analysis to=python<|message|>print(1)<|call|>",
        [Want(error="not one of the tools", named="python")], "same: no function call"),
    Row("harmony-end-token-in-string", "harmony",
        '<|channel|>commentary to=functions.write <|constrain|>json<|message|>{"path": "/h.md", "content": '
        '"<|call|><|end|>"}<|call|>',
        [call("write", {"path": "/h.md", "content": "<|call|><|end|>"})], "same (tokens never sit in a string there)"),
    Row("harmony-tool-result-echo", "harmony",
        '<|start|>functions.read to=assistant<|channel|>commentary<|message|>{"ok": true}<|end|>', [],
        "same: a tool's result, not a call"),
    Row("harmony-stripped", "harmony",
        'analysisNeed the file.assistantcommentary to=functions.read json{"path": "/a"}',
        [call("read", {"path": "/a"}, covers='assistantcommentary to=functions.read json{"path": "/a"}')],
        "differs: vLLM never decodes gpt-oss to such text; other servers that strip the tokens do"),
    Row("harmony-stripped-role-recipient", "harmony", 'assistant to=functions.readcommentary json{"path": "/a"}\n',
        [call("read", {"path": "/a"})], "differs: as above"),
    Row("harmony-stripped-in-prose", "harmony", 'Write to=functions.read json{"path": "/a"} in the header, then stop.',
        [], "same: no call; JSON that does not end the reply is prose showing the format"),
    Row("harmony-stripped-cut-off", "harmony", 'assistantcommentary to=functions.read json{"path": "/abs/pa',
        [Want(error="cut off", named="read")], "differs: as above"),
    Row("harmony-stripped-cut-after-value", "harmony", 'assistantcommentary to=functions.read json{"path": "/a"',
        [Want(error="cut off", named="read")], "differs: as above"),
    Row("harmony-stripped-broken-in-prose", "harmony", 'Header: to=functions.read json{"path": /a} then more.', [],
        "same: no call; broken JSON the reply goes on after is prose"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_each_output_gives_the_spans_written_for_it(row: Row):
    spans = FORMS[row.form].find(row.text)
    assert len(spans) == len(row.want), spans
    for span, want in zip(spans, row.want):
        assert span.form == row.form and span.placement == want.placement
        assert [(c.name, c.arguments) for c in span.calls] == want.calls
        if want.error is None:
            assert span.error is None
        else:
            assert span.error is not None and want.error in span.error and "nothing was run" in span.error
            assert "read" in span.error and "/abs/path/file.py" in span.error  # the example of the form
        assert span.named == want.named
        if want.covers is not None:
            assert row.text[span.start:span.end] == want.covers


def test_the_table_covers_every_form_with_forty_five_rows_or_more():
    assert len(ROWS) >= 45 and {r.form for r in ROWS} == set(FORMS)
    assert len({r.id for r in ROWS}) == len(ROWS)


def _seconds(work) -> float:
    """The best of five timings of work() in this thread's CPU time, the collector paused: other
    processes (the suite runs on two workers beside each other) take wall time, not this thread's."""
    best = float("inf")
    paused = gc.isenabled()
    gc.disable()
    try:
        for _ in range(5):
            begun = time.thread_time()
            work()
            best = min(best, time.thread_time() - begun)
    finally:
        if paused:
            gc.enable()
    return best


@pytest.mark.parametrize("name", sorted(form.name for form in textcalls.FORMS))
def test_reading_grows_linearly_with_the_reply(name: str):
    """Eight times the markers take about eight times as long, not sixty-four: each opener's markup is
    read once, by the form and by reading.py (a ratio, not a wall-clock limit: the machine's speed
    cancels out). Broken markup and plain prose both."""
    form = next(form for form in textcalls.FORMS if form.name == name)
    unit = "".join(f"{opener}{{\"name\": \"x\", \"arguments\": {{\"a\": " for opener in form.openers or ("x",))
    for piece in (unit, "An answer in plain prose, with no markup of any form at all. "):
        small, large = piece * 1_500, piece * 12_000
        ratio = _seconds(lambda: textcalls.read(large, {})) / max(_seconds(lambda: textcalls.read(small, {})), 1e-4)
        assert ratio < 24, (name, piece[:30], ratio)  # linear: 8; quadratic: 64
    if name in FORMS:
        _check(unit * 2_000, form.find(unit * 2_000), name)


# -- hypothesis: never raises; ordered, non-overlapping spans within the text --------------------

MARKUP = {
    "qwen25": ['Text.\n<tools>\n{"name": "read", "arguments": {"path": "/a"}}\n</tools>\n<tools>[{"name": "grep", '
               '"parameters": {"pattern": "<tools>"}}]</tools>', '```json\n{"name": "read", "arguments": {}}\n```'],
    "llama_json": ['{"name": "read", "parameters": {"path": "/a"}}; {"name": "grep", "arguments": {"x": [1, {}]}}',
                   'Hi<|python_tag|>{"name": "read", "parameters": {"path": "/a"}}<|eom_id|>'],
    "pythonic": ['[read(path="/a", n=-1, d={"k": [1, 2.5, None]}), grep(pattern="]")]',
                 'x<|python_start|>[read(path="<|python_end|>")]<|python_end|>', '```tool_code\n[read()]\n```'],
    "mistral": ['Hi[TOOL_CALLS] [{"name": "read", "arguments": {"path": "/a"}}]',
                '[TOOL_CALLS]read[CALL_ID]abc123XYZ[ARGS]{"path": "/a"}[TOOL_CALLS]grep{"pattern": "["}'],
    "deepseek": [f'Hi{CS}{B}function{S}read\n```json\n{{"path": "/a"}}\n```{E}\n{B}read{S}{{"p": "{E}"}}{E}{CE}{EOS}'],
    "harmony": ['<|channel|>analysis<|message|>t<|end|><|start|>assistant<|channel|>commentary to=functions.read '
                '<|constrain|>json<|message|>{"path": "<|call|>"}<|call|>',
                'analysisx.assistantcommentary to=functions.read json{"path": "/a"}'],
}
PIECES = sorted({p for m in (qwen25, llama_json, pythonic, mistral, deepseek, harmony) for p in m.FORM.openers}
                | {"</tools>", "<|python_end|>", "[ARGS]", "[CALL_ID]", CE, E, S, EOS, "<|message|>", "<|call|>",
                   "<|end|>", "<|constrain|>", "to=functions.", "function", "read", '"name": "read"', '"arguments"',
                   "{", "}", "[", "]", "(", ")", '"', "\\", ",", ";", ":", "=", "\n", " ", "```", "json", "-", "1"})
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(text: str, spans: list[Span], name: str) -> None:
    assert isinstance(spans, list)
    last = 0
    for span in spans:
        assert isinstance(span, Span) and span.form == name
        assert last <= span.start < span.end <= len(text)
        assert span.placement in ("line", "anywhere", "whole")
        assert (span.error is None) == bool(span.calls)  # calls, or the error that teaches: never both
        if span.error is not None:
            assert "nothing was run" in span.error
        last = span.end


@pytest.mark.parametrize("name", sorted(FORMS))
@FUZZ
@given(text=st.text())
def test_find_never_raises_on_any_text(name: str, text: str):
    _check(text, FORMS[name].find(text), name)


@pytest.mark.parametrize("name", sorted(FORMS))
@FUZZ
@given(parts=st.lists(st.sampled_from(PIECES) | st.text(max_size=4), max_size=40))
def test_find_never_raises_on_markup_shuffled(name: str, parts: list[str]):
    text = "".join(parts)
    _check(text, FORMS[name].find(text), name)


@pytest.mark.parametrize("name", sorted(FORMS))
@FUZZ
@given(data=st.data())
def test_find_never_raises_on_cut_markup(name: str, data: st.DataObject):
    markup = data.draw(st.sampled_from(MARKUP[name]))
    start = data.draw(st.integers(0, len(markup)))
    end = data.draw(st.integers(start, len(markup)))
    text = markup[start:end] + data.draw(st.sampled_from(["", " ", "\n", "}", "]", "x"]))
    _check(text, FORMS[name].find(text), name)


@pytest.mark.parametrize("name", sorted(FORMS))
def test_the_whole_markup_samples_are_calls(name: str):
    """The fuzzed markup itself reads as calls (so its cuts fuzz the paths that matter)."""
    for markup in MARKUP[name]:
        spans = FORMS[name].find(markup)
        assert spans and all(span.calls for span in spans), (markup, spans)
