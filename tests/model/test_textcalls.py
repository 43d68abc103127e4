"""The text forms of tool calls, held against what vLLM's parsers give (issue 32).

Each row: a model output, the calls Abhed reads from it (name and arguments, or an error call's
key words), the prose left for the human, and what vLLM's parser for that form gives when it
differs: a documented deliberate difference. Every row is also streamed, cut at every point, and
what a human saw must never include a byte of a call and must end as the prose.

vLLM's hermes parser (`<tool_call>(.*?)</tool_call>|<tool_call>(.*)`, json.loads of each body,
content = the text before the first <tool_call>, and on any failure no calls and the whole output
as content) and qwen3_coder parser (each value up to the first </parameter>, content = the text
before the first <tool_call>/<function=) are the references for the rows below.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abhed.model import textcalls
from abhed.tools import definitions

SCHEMAS = {d["function"]["name"]: d["function"]["parameters"] for d in definitions()}
ERROR = "error"


@dataclass(frozen=True)
class Row:
    id: str
    text: str
    calls: list[tuple[str, Any]]  # (name, arguments) or (name, (ERROR, words the message holds))
    prose: str
    vllm: str = "same"  # what vLLM gives, where it differs, and why we differ
    forms: tuple[str, ...] = field(default=())


def call(name: str, **args: Any) -> tuple[str, Any]:
    return name, args


def broken(name: str, *words: str) -> tuple[str, Any]:
    return name, (ERROR, words)


H = '<tool_call>\n{"name": "read", "arguments": {"path": "/w/a.py"}}\n</tool_call>'
X = "<tool_call>\n<function=read>\n<parameter=path>\n/w/a.py\n</parameter>\n</function>\n</tool_call>"
READ = call("read", path="/w/a.py")
NESTED = ('DOC = """\n<tool_call>\n<function=write>\n<parameter=path>\nspurious.txt\n</parameter>\n</function>\n'
          '</tool_call>\n"""')

ROWS = [
    # -- Hermes ------------------------------------------------------------------------------------
    Row("hermes-one", H, [READ], ""),
    Row("hermes-text-before", "I will read it.\n" + H, [READ], "I will read it.\n"),
    Row("hermes-text-after", H + "\nThen I will report.", [READ], "Then I will report.",
        vllm="content is the text before the first block only: the text after is lost; we show it"),
    Row("hermes-two", H + "\n" + H.replace("a.py", "b.py"), [READ, call("read", path="/w/b.py")], ""),
    Row("hermes-parameters", '<tool_call>{"name": "glob", "parameters": {"pattern": "*.py"}}</tool_call>',
        [call("glob", pattern="*.py")], "", vllm="current hermes reads only 'arguments' (None here); qwen2 reads both"),
    Row("hermes-string-arguments", '<tool_call>{"name": "read", "arguments": "{\\"path\\": \\"/x\\"}"}</tool_call>',
        [call("read", path="/x")], ""),
    Row("hermes-no-arguments", '<tool_call>{"name": "todo"}</tool_call>', [call("todo")], ""),
    Row("hermes-null-arguments", '<tool_call>{"name": "todo", "arguments": null}</tool_call>', [call("todo")], ""),
    Row("hermes-unterminated", '<tool_call>\n{"name": "read", "arguments": {"path": "/x"}}', [call("read", path="/x")],
        ""),
    Row("hermes-fenced-inside", '<tool_call>\n```json\n{"name": "read", "arguments": {"path": "/x"}}\n```\n</tool_call>',
        [call("read", path="/x")], "", vllm="json.loads of the fenced body fails: no calls, all as content"),
    Row("hermes-close-tag-in-string",
        '<tool_call>\n{"name": "write", "arguments": {"path": "/w/t.md", "content": "end with </tool_call> tags"}}\n'
        "</tool_call>", [call("write", path="/w/t.md", content="end with </tool_call> tags")], "",
        vllm="the body is cut at the </tool_call> inside the string: JSON fails, no calls"),
    Row("hermes-array-in-block", '<tool_call>[{"name": "read", "arguments": {"path": "/a"}}, {"name": "read", '
        '"arguments": {"path": "/b"}}]</tool_call>', [call("read", path="/a"), call("read", path="/b")], "",
        vllm="a list has no .get: the parser fails, no calls"),
    Row("hermes-unicode", '<tool_call>{"name": "write", "arguments": {"path": "/w/é.txt", "content": "ü 😀"}}</tool_call>',
        [call("write", path="/w/é.txt", content="ü 😀")], ""),
    Row("hermes-unknown-tool", '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>',
        [call("get_weather", city="Oslo")], ""),
    Row("hermes-broken-json-named", '<tool_call>{"name": "edit", "arguments": {"path": "/x", }</tool_call>',
        [broken("edit", "does not parse", "line 1 column", "nothing was run", '"arguments": {"path"')], "",
        vllm="no calls, the whole output as content (the run would end 'done' on it); we ask once"),
    Row("hermes-broken-json-nameless", "<tool_call>{name: read}</tool_call>", [broken("", "does not parse")], "",
        vllm="no calls, all as content; we ask once"),
    Row("hermes-not-a-call-object", '<tool_call>["read"]</tool_call>', [broken("", '"name" (a string)')], "",
        vllm="json.loads gives a list: the parser fails, all as content"),
    Row("hermes-two-objects-in-block",
        '<tool_call>{"name": "read", "arguments": {"path": "/a"}} {"name": "read", "arguments": {}}</tool_call>',
        [broken("read", "text follows the JSON object")], "", vllm="'Extra data': no calls, all as content"),
    Row("hermes-mid-line-at-end", 'I will read it: <tool_call>{"name": "read", "arguments": {"path": "/x"}}</tool_call>',
        [call("read", path="/x")], "I will read it: "),
    Row("hermes-open-tag-in-string",
        '<tool_call>{"name": "write", "arguments": {"path": "/w/t.md", "content": "<tool_call> opens one"}}</tool_call>',
        [call("write", path="/w/t.md", content="<tool_call> opens one")], "",
        vllm="the regex is not fooled here (non-greedy to the first </tool_call>): same"),
    Row("hermes-fence-closed-on-the-tag-line", '<tool_call>```json\n{"name": "read", "arguments": {"path": "/x"}}\n'
        "```</tool_call>", [call("read", path="/x")], "", vllm="the fenced body does not parse: all content"),
    Row("hermes-stray-closing-fence", '<tool_call>\n{"name": "read", "arguments": {"path": "/x"}}\n```\n</tool_call>',
        [broken("read", "text follows the JSON object")], "", vllm="'Extra data': all content"),
    Row("hermes-unterminated-then-prose", '<tool_call>\n{"name": "read", "arguments": {"path": "/x"}}\nI will wait.',
        [call("read", path="/x")], "I will wait.", vllm="json.loads of the rest fails: all content"),
    Row("hermes-broken-cut-off", '<tool_call>\n{"name": "read", "arguments": {', [broken("read", "does not parse")], ""),
    Row("hermes-unterminated-string", '<tool_call>{"name": "read", "arguments": {"path": "/x',
        [broken("read", "(Unterminated string starting at line 1 column 40)")], ""),
    Row("hermes-not-json", "<tool_call>\nread /x\n</tool_call>", [broken("", "a JSON object must follow <tool_call>")],
        ""),
    # -- prose about calls: an answer, not a call (deliberate differences) --------------------------
    Row("prose-inline-code", "Calls go in `<tool_call>` tags.", [], "Calls go in `<tool_call>` tags.",
        vllm="a call is looked for; its JSON fails: no calls, content = all (the same answer)"),
    Row("prose-mid-sentence", "Wrap each call in <tool_call></tool_call>, one per call.", [],
        "Wrap each call in <tool_call></tool_call>, one per call.", vllm="same outcome: JSON fails, all content"),
    Row("prose-fenced-example", "The format:\n```\n" + H + "\n```\nThat is all.", [],
        "The format:\n```\n" + H + "\n```\nThat is all.",
        vllm="the example is run as a read of /w/a.py and the answer is cut to 'The format:\\n```\\n'"),
    Row("prose-fenced-xml-example", "Qwen3-Coder writes:\n```xml\n" + X + "\n```\n", [],
        "Qwen3-Coder writes:\n```xml\n" + X + "\n```\n", vllm="qwen3_coder runs the example"),
    Row("prose-template-placeholder", "The template renders\n<tool_call>{{ tc.name }}</tool_call>\nfor each call.",
        [broken("", "does not parse")], "The template renders\n\nfor each call.",
        vllm="JSON fails: all content. Here the line-start markup is asked about once, then delivered"),
    Row("prose-template-inline", "It renders `<tool_call>{{ tc.name }}</tool_call>` per call.", [],
        "It renders `<tool_call>{{ tc.name }}</tool_call>` per call."),
    Row("prose-bare-example-mid-line", "A bare <tool_call>example</tool_call> in prose.", [],
        "A bare <tool_call>example</tool_call> in prose."),
    Row("prose-mention-then-call", "Calls look like `<tool_call>` blocks. Reading now.\n" + H,
        [READ], "Calls look like `<tool_call>` blocks. Reading now.\n",
        vllm="the block regex starts at the mention: the body is prose, JSON fails, no calls at all"),
    Row("prose-function-mention-at-end", "Qwen3-Coder writes <function=NAME> inside them.", [],
        "Qwen3-Coder writes <function=NAME> inside them.",
        vllm="qwen3_coder makes a call of a tool named 'NAME>...' from the mention"),
    Row("prose-example-mid-line-then-more", 'Write <tool_call>{"name": "read", "arguments": {}}</tool_call> and '
        "wait.", [], 'Write <tool_call>{"name": "read", "arguments": {}}</tool_call> and wait.',
        vllm="a read call with no arguments is run; content 'Write '"),
    Row("prose-unknown-tool-mid-line-at-end",
        'The model ends with <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>', [],
        'The model ends with <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
        vllm="a get_weather call"),
    Row("whole-reply-fenced-call", "```\n" + H + "\n```", [READ], "```\n\n```",
        vllm="the call is read; content '```\\n'"),
    Row("prose-template-at-the-end", "Each call renders as <tool_call>{{ tc.name }}</tool_call>", [],
        "Each call renders as <tool_call>{{ tc.name }}</tool_call>"),
    Row("prose-first-line-mid-line", 'A<tool_call>{"name": "read", "arguments": {}}</tool_call> then more.', [],
        'A<tool_call>{"name": "read", "arguments": {}}</tool_call> then more.'),
    Row("prose-unclosed-inline-code-at-end", 'The syntax is `<tool_call>{"name": "read", "arguments": {"path": "/x"}}'
        "</tool_call>", [], 'The syntax is `<tool_call>{"name": "read", "arguments": {"path": "/x"}}</tool_call>'),
    Row("hermes-mid-line-then-two-more", "Reading all: " + H + "\n" + H.replace("a.py", "b.py") + "\n" +
        H.replace("a.py", "c.py"), [READ, call("read", path="/w/b.py"), call("read", path="/w/c.py")],
        "Reading all: "),
    Row("hermes-broken-then-good", '<tool_call>{"name": "edit", "arguments": {,}}</tool_call>\n' + H,
        [broken("edit", "does not parse"), READ], "", vllm="one broken block: no calls at all, all as content"),
    Row("xml-then-hermes-adjacent", X + H.replace("a.py", "b.py"), [READ, call("read", path="/w/b.py")], ""),
    Row("hermes-broken-then-good-adjacent", '<tool_call>{"name": "edit", "arguments": {,}}</tool_call>' + H,
        [broken("edit", "does not parse"), READ], ""),
    Row("prose-fenced-call-then-prose", "```\n" + H + "\n```\nThat is the format.", [],
        "```\n" + H + "\n```\nThat is the format."),
    Row("hermes-after-two-fenced-samples", "Samples:\n```\na\n```\nand\n```\nb\n```\n" + H, [READ],
        "Samples:\n```\na\n```\nand\n```\nb\n```\n"),
    Row("hermes-mid-line-after-inline-code", 'Use `a` and `b`: <tool_call>{"name": "read", "arguments": {"path": "/x"}}'
        "</tool_call>", [call("read", path="/x")], "Use `a` and `b`: "),
    Row("hermes-indented-then-prose-below", "Reading it.\n  " + H + "\nThen I report.", [READ],
        "Reading it.\n  \n\nThen I report."),
    # -- Qwen3-Coder XML -----------------------------------------------------------------------------
    Row("xml-one", X, [READ], ""),
    Row("xml-typed", "<tool_call>\n<function=read>\n<parameter=path>\n/w/a.py\n</parameter>\n<parameter=limit>\n20\n"
        "</parameter>\n</function>\n</tool_call>", [call("read", path="/w/a.py", limit=20)], ""),
    Row("xml-booleans-and-whitespace", "<tool_call><function=edit><parameter=path>/w/a.py</parameter><parameter="
        "old_string>\n    x = 1\n\n</parameter><parameter=new_string>    x = 2</parameter><parameter=replace_all>true"
        "</parameter></function></tool_call>",
        [call("edit", path="/w/a.py", old_string="    x = 1\n", new_string="    x = 2", replace_all=True)], ""),
    Row("xml-array-json", '<tool_call><function=todo><parameter=items>[{"content": "A"}]</parameter></function>'
        "</tool_call>", [call("todo", items=[{"content": "A"}])], ""),
    Row("xml-bad-integer-left-for-schema", "<tool_call><function=read><parameter=path>/x</parameter><parameter=limit>"
        "ten</parameter></function></tool_call>", [call("read", path="/x", limit="ten")], ""),
    Row("xml-no-wrapper", "<function=glob>\n<parameter=pattern>\n**/*.md\n</parameter>\n</function>",
        [call("glob", pattern="**/*.md")], ""),
    Row("xml-no-closing-tags", "<function=glob>\n<parameter=pattern>\n**/*.md\n</function>",
        [call("glob", pattern="**/*.md")], ""),
    Row("xml-cut-off", "<tool_call>\n<function=read>\n<parameter=path>\n/w/a.py", [READ], ""),
    Row("xml-two", X + "\n" + X.replace("a.py", "b.py"), [READ, call("read", path="/w/b.py")], ""),
    Row("xml-text-between", "First:\n" + X + "\nand then:\n" + X.replace("a.py", "b.py") + "\nDone.",
        [READ, call("read", path="/w/b.py")], "First:\n\nand then:\n\nDone.",
        vllm="content is 'First:\\n' only"),
    Row("xml-nested-call-in-value", "<tool_call>\n<function=write>\n<parameter=path>\n/w/doc.py\n</parameter>\n"
        f"<parameter=content>\n{NESTED}\n</parameter>\n</function>\n</tool_call>",
        [call("write", path="/w/doc.py", content=NESTED)], "",
        vllm="content cut at the inner </parameter> (file 'DOC = \"\"\"') and a spurious write of spurious.txt"),
    Row("xml-closing-tag-in-value", "<tool_call><function=write><parameter=path>/w/x.xml</parameter><parameter=content>"
        "<a>\n</parameter>\n</a></parameter></function></tool_call>",
        [call("write", path="/w/x.xml", content="<a>\n</parameter>\n</a>")], "",
        vllm="content cut to '<a>' at the first </parameter>"),
    Row("xml-function-end-in-value", "<tool_call><function=write><parameter=path>/w/n.txt</parameter><parameter=content>"
        "a </function> b</parameter></function></tool_call>", [call("write", path="/w/n.txt", content="a </function> b")],
        "", vllm="the function body ends at the first </function>: content 'a '"),
    Row("xml-empty-name", "<tool_call><function=>oops</tool_call>", [broken("", "malformed", "<function=read>")], "",
        vllm="a call with an empty name; dispatch would refuse it as an unknown tool"),
    Row("xml-name-tag-unclosed", "<tool_call>\n<function=read\n<parameter=path>/x</parameter>\n</function>\n</tool_call>",
        [broken("read", "malformed", "<function=read>")], "",
        vllm="a call named 'read\\n<parameter=path' (up to the first >): an unknown tool"),
    Row("xml-empty-name-then-prose", "<tool_call><function=>oops</tool_call>\nThen text.",
        [broken("", "malformed")], "Then text."),
    Row("xml-bare-empty-name-then-prose", "<function=>x</function>\nThen text.", [broken("", "malformed")],
        "Then text."),
    Row("xml-function-end-left-out", "<tool_call><function=read><parameter=path>/x</parameter></tool_call>\nAfter.",
        [call("read", path="/x")], "After."),
    Row("xml-no-wrapper-then-prose", "<function=glob>\n<parameter=pattern>\n**/*.md\n</parameter>\n</function>\nDone.",
        [call("glob", pattern="**/*.md")], "Done."),
    Row("xml-broken-parameter-tag", "<function=read><parameter=path>/x<parameter=>y</function>",
        [call("read", path="/x", **{"": "y"})], "", vllm="same: read by the first-closing-tag fallback"),
    Row("xml-unknown-parameter-kept", "<tool_call><function=read><parameter=path>/x</parameter><parameter=colour>red"
        "</parameter></function></tool_call>", [call("read", path="/x", colour="red")], ""),
    Row("xml-parameter-repeated", "<tool_call><function=read><parameter=path>/a</parameter><parameter=path>/b"
        "</parameter></function></tool_call>", [call("read", path="/b")], ""),
    Row("xml-text-before", "Let me look.\n" + X, [READ], "Let me look.\n"),
    Row("xml-then-hermes", X + "\n" + H.replace("a.py", "b.py"), [READ, call("read", path="/w/b.py")], "",
        vllm="each parser reads only its own form"),
    Row("xml-value-with-entities", "<tool_call><function=bash><parameter=command>cat a &amp;&amp; echo '<ok>'"
        "</parameter><parameter=description>Show it</parameter></function></tool_call>",
        [call("bash", command="cat a &amp;&amp; echo '<ok>'", description="Show it")], ""),
    Row("xml-multiline-value-exact", "<tool_call>\n<function=write>\n<parameter=path>\n/w/m.txt\n</parameter>\n"
        "<parameter=content>\n\n  two blank-led lines\n\n</parameter>\n</function>\n</tool_call>",
        [call("write", path="/w/m.txt", content="\n  two blank-led lines\n")], ""),
]


def _check(row: Row) -> None:
    reading = textcalls.read(row.text, SCHEMAS)
    assert len(reading.calls) == len(row.calls), (row.id, reading.calls)
    for found, (name, wanted) in zip(reading.calls, row.calls):
        assert found.name == name, row.id
        if isinstance(wanted, tuple) and wanted and wanted[0] == ERROR:
            assert found.error is not None and all(w in found.error for w in wanted[1]), (row.id, found.error)
        else:
            assert found.error is None and json.loads(found.arguments) == wanted, (row.id, found.arguments)
    assert reading.prose == row.prose, (row.id, reading.prose)


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_each_model_output_reads_as_the_table_says(row):
    _check(row)


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_every_cut_of_the_stream_shows_the_prose_and_no_call(row):
    reading = textcalls.read(row.text, SCHEMAS)
    first_call = _first_call_offset(row.text, reading)
    for cut in range(len(row.text) + 1):
        stream = textcalls.VisibleStream()
        shown = stream.feed(row.text[:cut]) + stream.feed(row.text[cut:])
        assert row.text.startswith(shown) and len(shown) <= first_call, (row.id, cut)
        assert (shown + stream.finish(reading.prose)) == reading.prose, (row.id, cut)
    stream = textcalls.VisibleStream()
    shown = "".join(stream.feed(char) for char in row.text)
    assert shown + stream.finish(reading.prose) == reading.prose, row.id


def _first_call_offset(text: str, reading: textcalls.Reading) -> int:
    """Where the first call's markup begins (its first opener; a whole-reply call: its start): a
    stream may show everything before it. Markup that does not parse may be prose and may be shown."""
    if all(found.error is not None for found in reading.calls):
        return len(text)
    starts = []
    for span in textcalls.reading.spans(text, textcalls.FORMS):
        if span.error is None:
            inside = [i for i in (text.find(o, span.start, span.end) for o in textcalls.OPENERS) if i >= 0]
            starts.append(min(inside, default=span.start))
    return min(starts)


def test_the_table_has_the_rows_the_issue_asks_for():
    ids = {row.id for row in ROWS}
    assert len(ROWS) >= 50 and len(ids) == len(ROWS)
    assert {"xml-nested-call-in-value", "prose-fenced-example", "prose-mention-then-call"} <= ids


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<tool_call>", "</tool_call>", "<function=read>", "<function=", "</function>",
                                         "<parameter=path>", "</parameter>", "/x", "\n", " ", "{", "}", '"name"', ":",
                                  '"read"', "`", "```", "a", ">"]), max_size=40).map("".join))
def test_any_arrangement_of_markup_reads_without_raising_and_calls_are_well_formed(text):
    reading = textcalls.read(text, SCHEMAS)
    for found in reading.calls:
        assert found.error is not None or isinstance(json.loads(found.arguments), dict)
    assert len(reading.prose) <= len(text) + 4 * len(reading.calls) + 4


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_reads_without_raising(text):
    textcalls.read(text, SCHEMAS)
    stream = textcalls.VisibleStream()
    shown = stream.feed(text)
    assert text.startswith(shown)


def test_a_long_reply_with_many_tags_falls_back_and_stays_fast():
    reply = "<tool_call><function=read>" + "<parameter=path>/x</parameter>" * 5000 + "</function></tool_call>"
    [only] = textcalls.read(reply, SCHEMAS).calls
    assert json.loads(only.arguments) == {"path": "/x"}


# -- the other families' forms (tests/model/test_textcall_forms.py), read whole by reading.py -------

from test_textcall_forms import ROWS as FORM_ROWS  # noqa: E402 - the table lives with the forms' tests

READABLE = [row for row in FORM_ROWS if row.want and all(w.error is None for w in row.want)]


@pytest.mark.parametrize("row", READABLE, ids=[row.id for row in READABLE])
def test_each_form_row_that_holds_calls_runs_them_through_the_reader(row):
    """A form's calls, standing where they stand in the row, are the calls the reader gives (the
    rows' schemas are empty: values stay as the form gave them)."""
    reading = textcalls.read(row.text, {})
    wanted = [(name, args) for want in row.want for name, args in want.calls]
    got = [(c.name, json.loads(c.arguments) if c.arguments.strip() else {}) for c in reading.calls]
    if all(w.placement != "line" for w in row.want):
        assert got == [(n, a if isinstance(a, dict) else json.loads(a)) for n, a in wanted], row.id
    assert all(c.error is None for c in reading.calls) or not got, row.id


@pytest.mark.parametrize("row", FORM_ROWS, ids=[row.id for row in FORM_ROWS])
def test_every_cut_of_every_form_row_shows_the_prose_and_no_call(row):
    reading = textcalls.read(row.text, SCHEMAS)
    first_call = _first_call_offset(row.text, reading)
    for cut in range(0, len(row.text) + 1, max(1, len(row.text) // 60)):
        stream = textcalls.VisibleStream()
        shown = stream.feed(row.text[:cut]) + stream.feed(row.text[cut:])
        assert row.text.startswith(shown) and len(shown) <= first_call, (row.id, cut, shown)
        if not reading.calls or any(c.error is None for c in reading.calls):  # a broken call may have been shown
            assert shown + stream.finish(reading.prose) == reading.prose, (row.id, cut)


READING_ROWS = [
    Row("llama-json-whole", '{"name": "read", "parameters": {"path": "/w/a.py"}}', [READ], ""),
    Row("llama-json-two", '{"name": "read", "parameters": {"path": "/w/a.py"}}; {"name": "glob", "parameters": '
        '{"pattern": "*.py"}}', [READ, call("glob", pattern="*.py")], ""),
    Row("llama-json-in-prose", 'The reply was {"name": "read", "parameters": {"path": "/w/a.py"}} as you see.', [],
        'The reply was {"name": "read", "parameters": {"path": "/w/a.py"}} as you see.',
        vllm="llama3_json reads a call only when the output starts with { or <|python_tag|>: same answer"),
    Row("json-answer-not-a-call", '{"status": "ok", "count": 3}', [], '{"status": "ok", "count": 3}',
        vllm="llama3_json: no name, no call: same"),
    Row("pythonic-whole", '[read(path="/w/a.py"), grep(pattern="TODO", output_mode="content")]',
        [READ, call("grep", pattern="TODO", output_mode="content")], ""),
    Row("pythonic-list-answer", "[1, 2, 3]", [], "[1, 2, 3]"),
    Row("mistral-v11", '[TOOL_CALLS]read[ARGS]{"path": "/w/a.py"}', [READ], ""),
    Row("mistral-after-text", 'Reading now. [TOOL_CALLS][{"name": "read", "arguments": {"path": "/w/a.py"}}]', [READ],
        "Reading now. "),
    Row("qwen25-tools-block", 'I will look.\n<tools>\n{"name": "read", "arguments": {"path": "/w/a.py"}}\n</tools>',
        [READ], "I will look.\n", vllm="hermes (the parser the profile names) leaves it all in content"),
    Row("qwen25-fenced-whole", '```json\n{"name": "read", "arguments": {"path": "/w/a.py"}}\n```', [READ], "",
        vllm="no parser reads a fence: the reply is the answer"),
    Row("qwen25-fenced-json-answer", 'The config:\n```json\n{"name": "read", "arguments": {}}\n```', [],
        'The config:\n```json\n{"name": "read", "arguments": {}}\n```'),
    Row("deepseek-v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>read<｜tool▁sep｜>{\"path\": \"/w/a.py\"}"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", [READ], ""),
    Row("harmony-tokens", '<|channel|>commentary to=functions.read <|constrain|>json<|message|>{"path": "/w/a.py"}'
        "<|call|>", [READ], ""),
]


@pytest.mark.parametrize("row", READING_ROWS, ids=[row.id for row in READING_ROWS])
def test_each_family_row_reads_as_the_table_says(row):
    _check(row)


def test_the_qwen3_coder_rows_read_structurally_not_by_the_fallback():
    """The structural reading alone gives each XML row's calls (the fallback would read many rows
    the same way and hide a broken structural reader); beside another form's block it reads only
    its own."""
    from abhed.model.textcalls import qwen3_xml
    for row in ROWS:
        if not row.id.startswith("xml-") or row.id == "xml-broken-parameter-tag":
            continue
        structural = qwen3_xml._Structural(row.text).calls(0)
        assert structural is not None, row.id
        mine = [(name, args) for name, args in row.calls if row.id not in ("xml-then-hermes", "xml-then-hermes-adjacent")
                or name != "read" or args != call("read", path="/w/b.py")[1]]
        assert [c.name or "" for c in structural] == [
            "" if isinstance(args, tuple) and args[0] == ERROR else name for name, args in mine], row.id
        for found, (name, args) in zip(structural, mine):
            if not (isinstance(args, tuple) and args[0] == ERROR):
                assert list(dict.fromkeys(key for key, _ in found.params)) == list(args), row.id


def test_the_structural_reading_is_tried_up_to_its_tag_limit_then_the_fallback_reads():
    from abhed.model.textcalls import qwen3_xml
    nested = "<parameter=x>\n</parameter>\n</function>"  # 2 tags, in a value

    def reply(tags: int) -> str:
        pad = "<parameter=path>/x</parameter>" * (tags - 3)  # and <function=write>, <parameter=content>, <parameter=x>
        return f"<function=write>{pad}<parameter=content>a {nested} b</parameter></function>"
    assert reply(qwen3_xml.MAX_TAGS).count("<parameter=") + reply(qwen3_xml.MAX_TAGS).count("<function=") == 150
    [whole] = qwen3_xml.FORM.find(reply(qwen3_xml.MAX_TAGS))
    assert whole.calls[0].arguments["content"] == f"a {nested} b"
    [cut] = qwen3_xml.FORM.find(reply(qwen3_xml.MAX_TAGS + 1))
    assert cut.calls[0].arguments["content"] == "a "  # vLLM's reading: up to the next tag


def test_a_recursion_error_in_the_structural_reading_falls_back(monkeypatch):
    from abhed.model.textcalls import qwen3_xml

    def deep(self, at):
        raise RecursionError
    monkeypatch.setattr(qwen3_xml._Structural, "calls", deep)
    [span] = qwen3_xml.FORM.find(X)
    assert span.calls[0].name == "read" and span.calls[0].arguments == {"path": "/w/a.py"}


def test_the_table_and_the_forms_table_hold_over_a_hundred_outputs():
    assert len(ROWS) + len(READING_ROWS) + len(FORM_ROWS) >= 100


def test_a_whole_reply_form_stands_only_as_the_whole_reply():
    """reading.py checks a "whole" span itself, whatever a form returns (defence in depth: the
    forms only return such spans for a whole reply)."""
    from abhed.model.textcalls.base import Found, Span

    class Whole:
        name, openers, leads = "whole-test", ("{",), ()

        def find(self, text):
            start = text.find("{")
            return [Span(start, text.rfind("}") + 1, self.name, [Found("read", {"path": "/x"})],
                         placement="whole")] if start >= 0 else []

    def calls(text):
        return [c.name for c in textcalls.reading.read(text, SCHEMAS, (Whole(),)).calls]
    assert calls("{x}") == ["read"] and calls("  {x}\n") == ["read"]
    assert calls("a{x}") == [] and calls("{x}b") == [] and calls("ab {x}") == [] and calls("{x} b") == []


def test_the_fallback_reads_what_vllm_reads_alike_as_the_structural_reader_does():
    """Where vLLM's first-closing-tag reading and the structural one agree (the rows marked "same"),
    the fallback gives the very calls, extents included."""
    from abhed.model.textcalls import qwen3_xml
    checked = 0
    for row in ROWS:
        if row.id.startswith("xml-") and row.vllm == "same" and row.id != "xml-broken-parameter-tag":
            structural = [(c.start, c.name, c.params, c.end) for c in qwen3_xml._Structural(row.text).calls(0)]
            fallback = [(c.start, c.name, c.params, c.end) for c in qwen3_xml._first_closing(row.text)]
            assert fallback == structural, row.id
            checked += 1
    assert checked >= 15


def test_the_hermes_form_returns_ordered_spans_that_never_overlap():
    from abhed.model.textcalls import hermes
    for row in ROWS:
        spans = hermes.FORM.find(row.text)
        assert all(a.end <= b.start for a, b in zip(spans, spans[1:])), row.id
    assert len(hermes.FORM.find(ROWS[[r.id for r in ROWS].index("hermes-open-tag-in-string")].text)) == 1
