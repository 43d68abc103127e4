"""Text from a model, a file or a command, made safe to put on a human's terminal.

Such text may hold escape sequences that move the cursor, erase lines or make the terminal answer
back (`ESC [6n` types a reply into Abhed's own input), bidi overrides that reorder what is shown,
and lone surrogates (valid in JSON, unencodable in UTF-8). `printable` makes every one of them
visible as an escape (`\\x1b`, `\\u202e`, `\\ud800`), keeping newlines and tabs, so what the human
reads is what the text says. Every piece of model- or command-provided text shown to a human goes
through it: approval panels, tool lines, streamed replies, outputs, `abhed sessions show`.
"""

from __future__ import annotations

import re

# C0 controls except tab and newline, DEL, C1 controls (0x9b is a one-byte CSI on some terminals),
# lone surrogates, and the bidi marks, embeddings, overrides and isolates (CVE-2021-42574).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character, bidi control and lone surrogate shown as an escape."""
    return _UNSAFE.sub(_escape, text)
