"""Qwen3-Coder's XML form: one <function=NAME> per <tool_call> block, one <parameter=NAME> per value.

    <tool_call>
    <function=write>
    <parameter=path>
    /w/doc.py
    </parameter>
    <parameter=content>
    ...any text, markup included...
    </parameter>
    </function>
    </tool_call>

Values are raw text (one newline after the opening tag and one before the closing tag are
framing), so a value may itself hold </parameter> or a whole <tool_call> example. A value
therefore ends at a </parameter> only where the rest of the reply still reads as calls: the next
<parameter=, or </function> and the end of the block, then more calls or prose with no
</parameter> or </function> in it. The earliest such </parameter> wins. vLLM's qwen3_coder parser takes the
first </parameter> instead, which cuts such values and can turn an example into a call.

As the family writes them (and vLLM accepts), a missing </parameter>, </function> or </tool_call>
and a <function=...> without the <tool_call> wrapper are read too; a reply cut off mid-value
gives the value up to the cut. A reply that does not read as calls at all (a stray closing tag in
the prose after them) falls back to the first-closing-tag reading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from abhed.model.textcalls.base import Found, Span
from abhed.model.textcalls.scan import skip_space

CALL, CALL_END = "<tool_call>", "</tool_call>"
FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAMETER, PARAMETER_END = "<parameter=", "</parameter>"
EXAMPLE = "<tool_call>\n<function=read>\n<parameter=path>\n/abs/path/file.py\n</parameter>\n</function>\n</tool_call>"
MALFORMED = ("Your tool call is malformed: it must start with <function=NAME> and hold one <parameter=NAME>VALUE"
             f"</parameter> per argument; nothing was run. For example:\n{EXAMPLE}")
MAX_TAGS = 150  # more tags than this: the structural reading (recursive) is not tried, the fallback reads it
_NAME = re.compile(r"([^>\n<]{1,200})>")
_OPENER = re.compile(r"<tool_call>|<function=")
_BARE_NAME = re.compile(r"[\w.\-]{1,200}")


@dataclass
class _Call:
    start: int
    name: str | None  # None: <function= without a name that ends in >
    params: list[tuple[str, str]]
    end: int


class Qwen3Xml:
    name = "qwen3_coder"
    openers = (CALL, FUNCTION)
    leads = ()

    def find(self, text: str) -> list[Span]:
        if FUNCTION not in text:  # pragma: no mutate (a shortcut: no tag, no call either way)
            return []
        try:
            small = text.count(PARAMETER) + text.count(FUNCTION) <= MAX_TAGS
            calls = _Structural(text).calls(0) if small else None
        except RecursionError:  # a deep stack at the caller's end: the fallback needs none
            calls = None
        if calls is None:
            calls = _first_closing(text)
        return [self._span(text, call) for call in calls]

    def _span(self, text: str, call: _Call) -> Span:
        if not call.name:  # the tool it means, if a name starts the tag (the model is then asked once)
            named = _BARE_NAME.match(text, text.find(FUNCTION, call.start, call.end) + len(FUNCTION))
            return Span(call.start, call.end, self.name, error=MALFORMED, named=named.group() if named else "")
        args = {key: _unframed(value) for key, value in call.params}
        return Span(call.start, call.end, self.name, [Found(call.name, args, texts=True)])


def _unframed(value: str) -> str:
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


class _Structural:
    """The reply read as calls and prose, each value ending at the earliest </parameter> after
    which the rest still reads (see the module docstring). Memoised by position: linear in the
    number of closing tags per value."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._rest: dict[int, list[_Call] | None] = {}
        self._params: dict[int, tuple[list[tuple[str, str]], int] | None] = {}

    def calls(self, at: int) -> list[_Call] | None:
        """The calls from `at` to the end; None when what follows cannot be read."""
        if at not in self._rest:  # pragma: no mutate (the memo only saves time)
            self._rest[at] = self._calls(at)
        return self._rest[at]

    def _calls(self, at: int) -> list[_Call] | None:
        found = _OPENER.search(self.text, at)
        stop = found.start() if found else len(self.text)
        if any(closer in self.text[at:stop] for closer in (PARAMETER_END, FUNCTION_END)):
            return None  # a closing tag of a value in prose: this reading of what came before is wrong
        if found is None:
            return []
        if found.group() == CALL:
            body = skip_space(self.text, found.end())
            if not self.text.startswith(FUNCTION, body):  # not this form's block (hermes JSON, prose)
                return self.calls(found.end())
            return self._function(found.start(), body, wrapped=True)
        return self._function(found.start(), found.start(), wrapped=False)

    def _function(self, start: int, at: int, wrapped: bool) -> list[_Call] | None:
        named = _NAME.match(self.text, at + len(FUNCTION))
        if named is None or not named.group(1).strip():
            close = self.text.find(CALL_END if wrapped else FUNCTION_END, at)
            end = len(self.text) if close < 0 else close + len(CALL_END if wrapped else FUNCTION_END)
            rest = self.calls(end)
            return None if rest is None else [_Call(start, None, [], end), *rest]
        parsed = self.params(named.end())
        if parsed is None:
            return None
        params, end = parsed
        rest = self.calls(end)
        return None if rest is None else [_Call(start, named.group(1).strip(), params, end), *rest]

    def params(self, at: int) -> tuple[list[tuple[str, str]], int] | None:
        """The parameters from `at` to the end of the call, and where the call ends."""
        if at not in self._params:  # pragma: no mutate (the memo only saves time)
            self._params[at] = self._parameters(at)
        return self._params[at]

    def _parameters(self, at: int) -> tuple[list[tuple[str, str]], int] | None:
        at = skip_space(self.text, at)
        if at >= len(self.text):
            return [], at  # cut off: the call as far as it went
        if self.text.startswith(FUNCTION_END, at):
            return [], self._call_end(at + len(FUNCTION_END))
        if self.text.startswith(CALL_END, at):  # </function> left out
            return [], at + len(CALL_END)
        named = _NAME.match(self.text, at + len(PARAMETER)) if self.text.startswith(PARAMETER, at) else None
        if named is None:
            return None
        return self._value(named.group(1).strip(), named.end())

    def _value(self, key: str, at: int) -> tuple[list[tuple[str, str]], int] | None:
        close = self.text.find(PARAMETER_END, at)
        while close >= 0:  # pragma: no mutate (> 0, >= 1: a value starts after its tag, never at 0)
            rest = self.params(close + len(PARAMETER_END))
            if rest is not None and self.calls(rest[1]) is not None:
                return [(key, self.text[at:close]), *rest[0]], rest[1]
            close = self.text.find(PARAMETER_END, close + 1)
        ends = [i for i in (self.text.find(t, at) for t in (PARAMETER, FUNCTION_END, CALL_END))
                if i >= 0]  # pragma: no mutate (> 0, >= 1: a tag is never found at 0 after a value's start)
        stop = min(ends, default=len(self.text))  # </parameter> left out: the value ends at the next tag
        rest = self.params(stop)
        if rest is None:
            return None
        return [(key, self.text[at:stop]), *rest[0]], rest[1]

    def _call_end(self, at: int) -> int:
        after = skip_space(self.text, at)
        if self.text.startswith(CALL_END, after):
            return after + len(CALL_END)
        return at


def _first_closing(text: str) -> list[_Call]:
    """The reading vLLM's parser gives: each value ends at the first closing tag after it."""
    calls: list[_Call] = []
    for found in _OPENER.finditer(text):
        if found.group() == CALL and not text.startswith(FUNCTION, skip_space(text, found.end())):
            continue
        if calls and found.start() < calls[-1].end:
            continue
        at = text.find(FUNCTION, found.start())
        end_tag = text.find(CALL_END if found.group() == CALL else FUNCTION_END, at)
        end = len(text) if end_tag < 0 else end_tag + len(CALL_END if found.group() == CALL else FUNCTION_END)
        named = _NAME.match(text, at + len(FUNCTION))
        body = text[named.end() if named else at:end]
        params = [(k.strip(), v) for k, v in re.findall(
            r"<parameter=([^>\n]*)>(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|(?=</tool_call>)|$)", body, re.S)]
        calls.append(_Call(found.start(), named.group(1).strip() if named and named.group(1).strip() else None,
                           params, end))
    return calls


FORM = Qwen3Xml()
