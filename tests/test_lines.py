"""LineScanner agrees with splitting the whole file, for any content and chunk size."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from abhed.files.lines import LineScanner


def reference(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    return lines[:-1] if data.endswith(b"\n") or not data else lines


@given(data=st.binary(max_size=60).map(lambda b: b.replace(b"\x00", b"\n")), chunk=st.integers(1, 9),
       offset=st.integers(0, 12), limit=st.integers(0, 6), cap=st.integers(0, 7), from_bytes=st.booleans())
def test_skip_take_count_agree_with_split(data, chunk, offset, limit, cap, from_bytes):
    lines = reference(data)
    scanner = LineScanner(data if from_bytes else io.BytesIO(data), chunk=chunk)
    assert scanner.skip(offset) == min(offset, len(lines))
    taken = []
    for _ in range(limit):
        item = scanner.take(cap)
        if item is None:
            break
        taken.append(item)
    assert taken == [(line[:cap], len(line) > cap) for line in lines[offset : offset + limit]]
    assert scanner.count_rest() == max(0, len(lines) - offset - len(taken))
