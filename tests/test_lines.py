"""LineScanner agrees with splitting the whole file, for any content and chunk size."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from abhed.files.lines import LineScanner, count_newlines


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


@given(line_length=st.integers(1, 300), size=st.integers(0, 700_000), start=st.integers(0, 300_000),
       trailing=st.booleans())
def test_count_newlines_agrees_with_bytes_count_on_either_method(line_length, size, start, trailing):
    """Long and short lines take different counting methods; both must count exactly."""
    line = b"x" * (line_length - 1) + b"\n"
    data = (line * (size // line_length + 1))[:size] + (b"tail" if trailing else b"")
    for buf in (data, bytearray(data)):
        assert count_newlines(buf, start) == data.count(b"\n", start)


def test_count_newlines_switches_method_inside_one_buffer():
    """A buffer whose sample has short lines but whose rest has long ones (and the reverse)."""
    short_then_long = b"a\n" * 40_000 + (b"y" * 199 + b"\n") * 3_000 + b"end"
    long_then_short = (b"y" * 199 + b"\n") * 3_000 + b"a\n" * 40_000
    for data in (short_then_long, long_then_short, b"\n" * 300_000, b"z" * 300_000):
        assert count_newlines(data) == data.count(b"\n")
        assert count_newlines(data, 70_001) == data.count(b"\n", 70_001)


def test_scanner_reuses_one_buffer_without_changing_lines_already_taken():
    """Chunks are read into one reused buffer: lines handed out earlier must stay intact."""
    data = b"".join(b"line %d\n" % i for i in range(5000))
    scanner = LineScanner(io.BytesIO(data), chunk=64)
    taken = [scanner.take(100)[0] for _ in range(3000)]
    assert scanner.count_rest() == 2000
    assert taken == [b"line %d" % i for i in range(3000)]
