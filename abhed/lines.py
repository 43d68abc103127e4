"""Line-oriented access to files of any size without loading them whole.

`LineScanner` walks a file in fixed-size chunks: it skips lines by counting newlines at C speed,
hands out the lines of a window with each line's bytes capped, and counts what remains. Memory
stays at one chunk plus the window, so a 1 GB log costs the same few megabytes as a small file.
"""

from __future__ import annotations

from typing import BinaryIO

CHUNK = 1 << 20


class LineScanner:
    """Lines are separated by b"\\n"; a final line without one still counts (as `wc -l` would not)."""

    def __init__(self, source: BinaryIO | bytes, chunk: int = CHUNK) -> None:
        if isinstance(source, bytes):
            self._file, self._buf, self._eof = None, source, True
        else:
            self._file, self._buf, self._eof = source, b"", False
        self._chunk = chunk
        self._pos = 0
        self._in_line = False  # bytes of the current line consumed, its newline not yet seen

    def _refill(self) -> bool:
        """Load the next chunk; False at end of file."""
        if self._eof or self._file is None:
            self._eof = True
            return False
        self._buf = self._file.read(self._chunk)
        self._pos = 0
        if not self._buf:
            self._eof = True
            return False
        return True

    def _available(self) -> bool:
        return self._pos < len(self._buf) or self._refill()

    def _finish_partial(self) -> int:
        """At end of file, an unterminated last line counts as one."""
        done = 1 if self._in_line else 0
        self._in_line = False
        return done

    def skip(self, n: int) -> int:
        """Skip up to `n` lines; return how many there were."""
        skipped = 0
        while skipped < n:
            if not self._available():
                return skipped + self._finish_partial()
            buf, pos = self._buf, self._pos
            newlines = buf.count(b"\n", pos)
            if newlines < n - skipped:
                skipped += newlines
                self._in_line = buf[-1:] != b"\n"
                self._pos = len(buf)
                continue
            for _ in range(n - skipped):
                pos = buf.index(b"\n", pos) + 1
            self._pos, self._in_line, skipped = pos, False, n
        return skipped

    def take(self, max_bytes: int) -> tuple[bytes, bool] | None:
        """The next line without its newline, at most `max_bytes` of it, and whether it was cut.

        None at end of file.
        """
        parts: list[bytes] = []
        room, cut, seen = max_bytes, False, False
        while self._available():
            seen = True
            buf, pos = self._buf, self._pos
            end = buf.find(b"\n", pos)
            stop = len(buf) if end < 0 else end
            if stop - pos > room:
                cut = True
            if room > 0:
                parts.append(buf[pos : pos + min(stop - pos, room)])
                room -= len(parts[-1])
            if end >= 0:
                self._pos, self._in_line = end + 1, False
                return b"".join(parts), cut
            self._pos, self._in_line = len(buf), True
        self._in_line = False
        return (b"".join(parts), cut) if seen else None

    def count_rest(self) -> int:
        """How many lines remain from here to the end of the file."""
        total = 0
        while self._available():
            total += self._buf.count(b"\n", self._pos)
            self._in_line = self._buf[-1:] != b"\n"
            self._pos = len(self._buf)
        return total + self._finish_partial()
