"""Tool calls written in a reply's text, in every form a model family writes them.

One module per form finds and reads its own markup (hermes.py, qwen3_xml.py, ...); reading.py
decides, the same way for all of them, which markup is a call and which is prose that mentions
one. The adapters (model/adapters.py) read every reply with every form, whatever format the
model was asked to write: a server whose parser left a call in `content`, or a model that writes
its family's form instead of the one described to it, still has its calls run.
"""

from __future__ import annotations

from typing import Any

from abhed.model.textcalls import deepseek, harmony, hermes, llama_json, mistral, pythonic, qwen3_xml, qwen25
from abhed.model.textcalls.base import Form
from abhed.model.textcalls.reading import Reading
from abhed.model.textcalls.reading import read as _read

FORMS: tuple[Form, ...] = (hermes.FORM, qwen3_xml.FORM, qwen25.FORM, llama_json.FORM, pythonic.FORM, mistral.FORM,
                           deepseek.FORM, harmony.FORM)
OPENERS = tuple(dict.fromkeys(opener for form in FORMS for opener in form.openers))
LEADS = tuple(dict.fromkeys(lead for form in FORMS for lead in form.leads))


def read(text: str, schemas: dict[str, dict[str, Any]]) -> Reading:
    """The calls in `text` (every form) and the prose around them."""
    return _read(text, schemas, FORMS)


def prose(text: str) -> str:
    """What of a past reply is for a human: the reply without the markup of its calls."""
    return _read(text, {}, FORMS).prose


class VisibleStream:
    """What of a streaming reply a human may see as it arrives: text up to the first opener of any
    form, holding back a tail that may be the start of one, and all of a reply that starts like a
    whole-reply call. When the reply is complete, `finish` gives the rest of its prose (text after
    the calls, or markup that turned out to be prose). Linear in the reply's length: only the
    held-back tail and the new piece are looked at."""

    def __init__(self) -> None:
        self.shown = ""
        self._held = ""
        self._stopped = False  # an opener was seen, or the reply may be a call as a whole

    def feed(self, delta: str) -> str:
        """The text that became visible with `delta`."""
        if self._stopped:
            return ""
        text = self._held + delta
        if not self.shown and not text.strip():
            self._held = text
            return ""
        if not self.shown and _may_be_whole(text):
            self._stopped = _is_whole(text)
            self._held = text
            return ""
        cut = min((text.find(opener) for opener in OPENERS if opener in text), default=-1)
        if cut >= 0:
            self._stopped = True
            return self._show(text[:cut], "")
        keep = _partial_tail(text)
        return self._show(text[:len(text) - keep], text[len(text) - keep:])

    def finish(self, prose_text: str) -> str:
        """What is left to show once the whole reply is read; `prose_text`: its prose."""
        if prose_text.startswith(self.shown):
            rest = prose_text[len(self.shown):]
        else:  # the shown text was trimmed in the prose: show what follows it
            rest = prose_text[len(self.shown.rstrip()):] if prose_text.startswith(self.shown.rstrip()) else ""
        self.shown += rest
        return rest

    def _show(self, shown: str, held: str) -> str:
        self.shown += shown
        self._held = held
        return shown


def _may_be_whole(text: str) -> bool:
    """Whether the reply so far (nothing shown yet) may still turn out to start like a whole-reply call."""
    start = text.lstrip()
    return any(start.startswith(w) or w.startswith(start) for w in LEADS)


def _is_whole(text: str) -> bool:
    start = text.lstrip()
    return any(start.startswith(w) for w in LEADS)


def _partial_tail(text: str) -> int:
    """How many characters at the end of `text` may be the start of an opener."""
    for size in range(max(len(o) for o in OPENERS) - 1, 0, -1):
        tail = text[-size:]
        if len(text) >= size and any(opener.startswith(tail) for opener in OPENERS):
            return size
    return 0
