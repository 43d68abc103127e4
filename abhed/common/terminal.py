"""Text from a model, a file or a command, made safe to put on a human's terminal.

Such text may hold escape sequences that move the cursor, erase lines or make the terminal answer
back (`ESC [6n` types a reply into Abhed's own input), bidi overrides that reorder what is shown,
line and paragraph separators that start a new line where the text has none (`echo ok<U+2028>rm -rf
x` would show a second line beginning `rm`), characters that show nothing at all (`ls<U+200B>` looks
like `ls`, and so would the rule offered for it), and lone surrogates (valid in JSON, unencodable in
UTF-8). `printable` makes every one of them visible as an escape (`\\x1b`, `\\u202e`, `\\u2028`,
`\\u200b`, `\\U000e0041`, `\\ud800`), keeping newlines and tabs, so what the human reads is what the
text says. Every piece of model- or command-provided text shown to a human goes through it:
approval panels and the rules they offer, tool lines, streamed replies, outputs, `abhed sessions show`.

The invisible ones are two Unicode classes, whatever a terminal or font makes of them: the format
characters (category Cf: zero-width spaces and joiners, bidi marks, the word joiner, the byte-order
mark, interlinear annotation, tag characters U+E0000-U+E007F) and the default-ignorable code points
(variation selectors, the combining grapheme joiner, Hangul fillers, Mongolian selectors, the rest
of plane 14), with the separators of categories Zl and Zp. tests/test_terminal.py checks the ranges
below against Python's Unicode database, code point by code point. The price: text that needs a
joiner to render (some emoji sequences, Persian and Indic words with ZWJ/ZWNJ) shows the escape.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(
    "["
    "\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 controls but tab and newline, DEL, C1 (0x9b is a one-byte CSI on some terminals)
    "\ud800-\udfff"  # lone surrogates
    "\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb"  # Cf, DI, Zl, Zp
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
    "]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"  # pragma: no mutate  (none is U+0100 or U+10000)


def printable(text: str) -> str:
    """`text` with every control character, invisible or reordering character, line or paragraph
    separator and lone surrogate shown as an escape."""
    return _UNSAFE.sub(_escape, text)
