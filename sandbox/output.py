"""Bounded capture of a command's combined output: keep the head and the tail, count the rest.

Memory stays bounded however much the command prints. Bytes are decoded as UTF-8 (invalid
sequences become U+FFFD) incrementally, so a multi-byte character split across two reads
is decoded correctly, and all counts are exact counts of decoded characters.
"""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)  # pragma: no mutate  (nothing assigns to a Captured; frozen documents it)
class Captured:
    head: str
    tail: str
    omitted_chars: int  # characters dropped between head and tail
    omitted_lines: int  # newline characters among them


class OutputCollector:
    """Feed bytes in arrival order; ``finish()`` returns what was kept.

    ``limit_chars=None`` keeps everything. Otherwise at most ``limit_chars`` characters are
    kept: the first half as head and the rest as tail (the end of a build log is where the
    error is, the start says what ran).

    ``listener``, when given, hears every piece of decoded text as it arrives, before any of it is
    cut (a display's live view of the output; it bounds what it keeps itself).
    """

    def __init__(self, limit_chars: int | None, listener: Callable[[str], None] | None = None) -> None:
        if limit_chars is not None and (isinstance(limit_chars, bool) or not isinstance(limit_chars, int) or limit_chars < 0):
            raise ValueError(f"output_limit_chars must be a non-negative integer or None, got {limit_chars!r}")
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._unbounded = limit_chars is None
        self._head_cap = 0 if limit_chars is None else limit_chars // 2  # pragma: no mutate  (the 0 is never read: unbounded)
        self._tail_cap = 0 if limit_chars is None else limit_chars - self._head_cap  # pragma: no mutate  (as above)
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self._omitted_chars = 0
        self._omitted_lines = 0
        self._listener = listener

    def feed(self, data: bytes) -> None:
        self._add(self._decoder.decode(data))

    def finish(self) -> Captured:
        self._add(self._decoder.decode(b"", final=True))
        return Captured("".join(self._head), "".join(self._tail), self._omitted_chars, self._omitted_lines)

    def _add(self, text: str) -> None:
        if not text:
            return
        if self._listener is not None:
            self._listener(text)
        if self._unbounded:
            self._head.append(text)
            return
        room = self._head_cap - self._head_len
        if room > 0:  # pragma: no mutate  (>= 0 only appends an empty string)
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
            if not text:  # pragma: no mutate  (going on appends an empty string to the tail)
                return  # pragma: no mutate  (as above)
        self._tail.append(text)
        self._tail_len += len(text)
        while self._tail_len > self._tail_cap:
            excess = self._tail_len - self._tail_cap
            first = self._tail[0]
            dropped = first[:excess]
            if len(first) <= excess:
                self._tail.popleft()
            else:
                self._tail[0] = first[excess:]
            self._tail_len -= len(dropped)
            self._omitted_chars += len(dropped)
            self._omitted_lines += dropped.count("\n")
