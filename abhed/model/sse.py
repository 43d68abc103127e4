"""Server-sent events: the lines of a byte stream, and their `data` payloads (WHATWG event-stream rules).

Only `data` matters for chat completions; comments (`:` keep-alives), `event`, `id` and `retry`
are read past. An event ends at a blank line; a stream that stops mid-event still yields it, so
the caller, not the parser, decides whether a stream was cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


class LineTooLong(Exception):
    """A line passed the bound `lines` was given: it is not read further."""


def lines(chunks: Iterable[bytes], limit: int) -> Iterator[str]:
    """The lines of a byte stream, ended by CRLF, LF or CR, decoded as UTF-8 (an invalid byte
    becomes U+FFFD). A line is held only up to `limit` bytes: LineTooLong past that, so a stream
    that never ends a line cannot fill the memory."""
    held = bytearray()  # the start of a line not yet ended
    after_cr = False  # the last chunk ended with CR: an LF opening this one ends no second line
    for chunk in chunks:
        if after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        after_cr = chunk.endswith(b"\r")
        ended = after_cr or chunk.endswith(b"\n")
        pieces = chunk.splitlines()  # bytes split at CRLF, LF and CR only (str would split at more)
        tail = b"" if ended or not pieces else pieces.pop()
        for piece in pieces:
            if held:  # pragma: no mutate (equivalent: joining to nothing changes nothing; it spares a copy)
                held += piece
                piece = bytes(held)
                held.clear()
            if len(piece) > limit:
                raise LineTooLong(len(piece))
            yield piece.decode("utf-8", "replace")
        held += tail
        if len(held) > limit:
            raise LineTooLong(len(held))
    if held:
        yield held.decode("utf-8", "replace")


def data_events(lines: Iterable[str]) -> Iterator[str]:
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)
