"""Pythonic calls (Llama 3.2 / 4, Gemma 3): a reply that is a Python list of calls,
`[read(path="/x"), grep(pattern="a", limit=5)]`.

| fact | source |
| --- | --- |
| the whole reply is `[name(key=value, ...), ...]`; text with it is "INCORRECT" to the prompt | examples/tool_chat_template_llama4_pythonic.jinja, tool_chat_template_gemma3_pythonic.jinja |
| vLLM matches a regex from the reply's first character, then `ast.parse`; a list of calls whose function is a plain name; keyword arguments only read; values: constants, lists, dicts with constant keys (no negative numbers: a unary minus is not a constant) | vLLM pythonic / llama4_pythonic parsers |
| Llama 4 sometimes wraps the list in `<|python_start|>` ... `<|python_end|>` (special tokens: they arrive only when special tokens are kept) | vLLM llama4_pythonic parser |
| prompts in public agent code ask Gemma to wrap a call in a ```tool_code fence, bare (`schema_discovery(search_phrase='battery')`); the same fence also carries plain Python (Gemini's code execution), which is no call | public Gemma agent prompts; Gemini code-execution transcripts |

A ```tool_code fence that is the whole reply is read when it holds the list, or bare calls one per
line; any other code in it is not a call. The list is parsed with `ast` and only literal values are taken (strings, numbers, True/False/None,
lists, tuples as lists, dicts with string keys); nothing is evaluated.

Placement: "whole" (the bare list, the ```tool_code fence: found only as the entire reply); inside
`<|python_start|>` it is "anywhere".
"""

from __future__ import annotations

import ast
import re
from typing import Any

from abhed.model.textcalls.base import Found, Placement, Span
from abhed.model.textcalls.scan import closing, rstrip_at, skip, teach

NAME = "pythonic"
START, END = "<|python_start|>", "<|python_end|>"
EXAMPLE = '[read(path="/abs/path/file.py")]'
RULE = "Reply with only a Python list of calls with keyword arguments and literal values"
_HEAD = re.compile(r"\[\s*([A-Za-z_][\w.]*)\s*\(")  # dotted too: told to call by name
_BARE = re.compile(r"([A-Za-z_]\w*)\s*\(")
_FENCE = re.compile(r"```tool_code[ \t]*\n(.*?)\n?[ \t]*```", re.S)
_JSON_WORDS = {"true": True, "false": False, "null": None}  # a model writing JSON into Python
_TRIES = 8  # <|python_end|> candidates tried for one block: a string may hold that token


class _NotACall(Exception):
    """What makes the list not a list of calls, in words for the model."""


class _Pythonic:
    name = NAME
    openers = (START,)
    leads = ("[", "```tool_code")  # the bare list and the fence are the whole reply

    def find(self, text: str) -> list[Span]:
        if START in text:
            return _wrapped(text)
        whole = _whole(text)
        return [whole] if whole else []


FORM = _Pythonic()


def _whole(text: str) -> Span | None:
    start = skip(text, 0)
    end = rstrip_at(text, len(text), start)
    fence = _FENCE.fullmatch(text, start, end)
    body = fence.group(1).strip() if fence else text[start:end]
    if _HEAD.match(body):
        closed = closing(body, 0, "\"'")
        if 0 <= closed < len(body):
            return None  # the list closes and the reply goes on: prose that begins with an example
        return _span(body, start, end, "whole")
    if fence:
        return _fenced(body, start, end)
    bare = _BARE.match(body)
    if bare and body.endswith(")") and _one_call(body):  # a call the list was left off
        return Span(start, end, NAME, named=bare.group(1), placement="whole", error=teach(
            "Your call is not inside a list", RULE + ", in [ ] even for one call", EXAMPLE))
    return None


def _fenced(body: str, start: int, end: int) -> Span | None:
    """Bare calls in a ```tool_code fence, one per line; None when the fence holds other code."""
    try:
        statements = ast.parse(body).body
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None
    nodes = [s.value for s in statements if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
             and isinstance(s.value.func, ast.Name)]
    if not nodes or len(nodes) < len(statements):
        return None  # code, not calls (Gemini runs Python from this fence)
    try:
        calls = [_call(node) for node in nodes]
    except _NotACall as exc:
        first = nodes[0].func
        named = first.id if isinstance(first, ast.Name) else ""
        return Span(start, end, NAME, error=teach(str(exc), RULE, EXAMPLE), named=named, placement="whole")
    return Span(start, end, NAME, calls=calls, placement="whole")


def _one_call(body: str) -> bool:
    try:
        return len(_calls(f"[{body}]")) == 1
    except _NotACall:
        return False


def _span(body: str, start: int, end: int, placement: Placement) -> Span:
    try:
        return Span(start, end, NAME, calls=_calls(body), placement=placement)
    except _NotACall as exc:
        head = _HEAD.match(body)
        return Span(start, end, NAME, error=teach(str(exc), RULE, EXAMPLE), named=head.group(1) if head else "",
                    placement=placement)


def _calls(body: str) -> list[Found]:
    if not body.lstrip().startswith("["):  # no list, nothing to parse
        raise _NotACall("Your reply is not a list of calls")
    try:
        tree = ast.parse(body.strip(), mode="eval")
    except SyntaxError as exc:
        where = f" at line {exc.lineno} column {exc.offset}" if exc.lineno else ""
        raise _NotACall(f"Your call list is not valid Python ({exc.msg}{where})") from None
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise _NotACall(f"Your call list cannot be read ({exc})") from None
    if not isinstance(tree.body, ast.List) or not tree.body.elts:
        raise _NotACall("Your reply is not a list of calls")
    return [_call(node) for node in tree.body.elts]


def _call(node: ast.expr) -> Found:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise _NotACall("Every item of your list must be a call of a tool by its name, like read(...)")
    if node.args or any(k.arg is None for k in node.keywords):
        raise _NotACall(f"Your call of {node.func.id} passes arguments without names: write name=value")
    return Found(node.func.id, {k.arg: _literal(k.value) for k in node.keywords if k.arg is not None})


def _literal(node: ast.expr) -> Any:
    """A value written as a literal; anything else (a variable, an expression, a call) is refused,
    never evaluated."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    elif isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(item) for item in node.elts]
    elif isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                             for k in node.keys):
        return {k.value: _literal(v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)}
    elif isinstance(node, ast.Name) and node.id in _JSON_WORDS:
        return _JSON_WORDS[node.id]
    raise _NotACall("Your call's values must be literals (strings, numbers, True/False/None, lists, dicts with "
                    "string keys), not variables or expressions")


def _wrapped(text: str) -> list[Span]:
    spans: list[Span] = []
    at = text.find(START)
    while at >= 0:
        spans.append(_block(text, at))
        at = text.find(START, spans[-1].end)
    return spans


def _block(text: str, at: int) -> Span:
    """`<|python_start|>` LIST `<|python_end|>`: the first end token after which the list parses
    (a string may hold the token), else the first one, else the end of the text."""
    body = at + len(START)
    following = text.find(START, body)
    limit = following if following >= 0 else len(text)
    ends: list[int] = []
    close = text.find(END, body, limit)
    while close >= 0 and len(ends) < _TRIES:
        ends.append(close)
        close = text.find(END, close + len(END), limit)
    for close in ends:
        span = _span(text[body:close], at, close + len(END), "anywhere")
        if span.error is None:
            return span
    if ends:
        return _span(text[body:ends[0]], at, ends[0] + len(END), "anywhere")
    return _span(text[body:limit], at, max(limit, body), "anywhere")
