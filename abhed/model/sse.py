"""Server-sent events: the `data` payloads of a stream of lines (WHATWG event-stream rules).

Only `data` matters for chat completions; comments (`:` keep-alives), `event`, `id` and `retry`
are read past. An event ends at a blank line; a stream that stops mid-event still yields it, so
the caller, not the parser, decides whether a stream was cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


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
