"""Line-oriented access to files of any size without loading them whole.

`LineScanner` walks a file in fixed-size chunks: it skips lines by counting newlines at C speed,
hands out the lines of a window with each line's bytes capped, and counts what remains. Memory
stays at one chunk plus the window, so a 1 GB log costs the same few megabytes as a small file.

Counting goes at memory speed where it can (see `count_newlines`), and chunks are read into one
reused buffer (a fresh 4 MB object per chunk costs a thousand page faults). A full pass over a large
file also records a `LineIndex` (where each chunk starts and how many lines precede it, plus the
total), so the next read of the same unchanged file jumps to the nearest mark and counts nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from io import BufferedIOBase

LINE_CHARS = 2000  # spec §2: longer lines are cut individually (the read and grep tools, and rg's limit)
CHUNK = 4 << 20  # large enough that per-chunk overhead vanishes beside the counting itself
SAMPLE = 1 << 16  # bytes sampled to choose a counting method
LONG_LINES = 64  # average line length (bytes) from which counting by memchr beats bytes.count
MAX_INDEXES = 32  # line indexes kept in the cache; the least recently written go first


def count_newlines(buf: bytes | bytearray, start: int = 0) -> int:
    """The number of b"\\n" in buf[start:], at memory speed when lines are long.

    bytes.count tests every byte (~0.3 ns a byte here), while bytes.replace finds each newline with
    memchr (SIMD) and copies the stretches between them: ~0.13 ns a byte with 100-byte lines but
    ~9 ns a newline, so it wins from ~40-byte lines on. A sample of the buffer picks the method.
    """
    end = len(buf)
    if end - start <= 4 * SAMPLE:
        return buf.count(b"\n", start)
    sampled = buf.count(b"\n", start, start + SAMPLE)
    if sampled * LONG_LINES > SAMPLE:
        return sampled + buf.count(b"\n", start + SAMPLE)
    rest = buf[start + SAMPLE :] if start + SAMPLE else buf
    return sampled + len(rest) - len(rest.replace(b"\n", b""))


class LineScanner:
    """Lines are separated by b"\\n"; a final line without one still counts (as `wc -l` would not)."""

    def __init__(self, source: BufferedIOBase | bytes, chunk: int | None = None,
                 marks: list[tuple[int, int]] | None = None) -> None:
        self._file: BufferedIOBase | None  # read into a reused buffer: what open(path, "rb") returns
        self._buf: bytes | bytearray
        if isinstance(source, bytes):
            self._file, self._buf, self._eof = None, source, True
        else:
            self._file, self._buf, self._eof = source, b"", False
        self._chunk = chunk or CHUNK
        self._scratch: bytearray | None = None  # the reused read buffer
        self._pos = 0
        self._in_line = False  # bytes of the current line consumed, its newline not yet seen
        self._newlines = 0  # newlines passed since the start position
        self._marks = marks  # when given: (byte offset, newlines before it) appended at each chunk start

    def _refill(self) -> bool:
        """Load the next chunk; False at end of file."""
        if self._eof or self._file is None:
            self._eof = True
            return False
        if self._marks is not None:
            self._marks.append((self._file.tell(), self._newlines))
        if self._scratch is None:
            self._scratch = bytearray(self._chunk)
        got = self._file.readinto(self._scratch)
        # A short read (the end of the file) keeps only what was read; what take() hands out are
        # copies, so reusing the buffer for the next chunk changes nothing already returned.
        self._buf = self._scratch if got == self._chunk else self._scratch[:got]
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
            newlines = count_newlines(buf, pos)
            if newlines < n - skipped:
                skipped += newlines
                self._newlines += newlines
                self._in_line = buf[-1:] != b"\n"
                self._pos = len(buf)
                continue
            for _ in range(n - skipped):
                pos = buf.index(b"\n", pos) + 1
            self._newlines += n - skipped
            self._pos, self._in_line, skipped = pos, False, n
        return skipped

    def take(self, max_bytes: int) -> tuple[bytes, bool] | None:
        """The next line without its newline, at most `max_bytes` of it, and whether it was cut.

        None at end of file.
        """
        parts: list[bytes | bytearray] = []
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
                self._newlines += 1
                return b"".join(parts), cut
            self._pos, self._in_line = len(buf), True
        self._in_line = False
        return (b"".join(parts), cut) if seen else None

    def count_rest(self) -> int:
        """How many lines remain from here to the end of the file."""
        total = 0
        while self._available():
            newlines = count_newlines(self._buf, self._pos)
            total += newlines
            self._newlines += newlines
            self._in_line = self._buf[-1:] != b"\n"
            self._pos = len(self._buf)
        return total + self._finish_partial()


@dataclass
class LineIndex:
    """Where chunks of one version of a file start, and how many lines come before each."""

    total: int
    marks: list[tuple[int, int]] = field(default_factory=list)  # (byte offset, lines before it), ascending

    def mark_before(self, line: int) -> tuple[int, int]:
        """A mark to start from to reach 1-based `line`: (byte offset, newlines before it).

        A mark can fall inside a line, so take one with fewer than line-1 newlines before it: then
        at least one newline is skipped and the scan lands exactly on the start of `line`.
        """
        i = bisect_right([newlines for _, newlines in self.marks], line - 2) - 1
        return self.marks[i] if i >= 0 and line > 1 else (0, 0)


class LineIndexCache:
    """Line indexes on disk, keyed by a file's identity and version (path, device, inode, size, mtime).

    A file that changes gets a new key, so a stale index is never used; old ones age out.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, path: Path, st: os.stat_result) -> Path:
        key = f"{path}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}"
        return self.directory / (hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32] + ".json")

    def load(self, path: Path, st: os.stat_result) -> LineIndex | None:
        try:
            raw = json.loads(self._path(path, st).read_text())
            return LineIndex(total=int(raw["total"]), marks=[(int(b), int(n)) for b, n in raw["marks"]])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # no index, or an unreadable one: scan again

    def save(self, path: Path, st: os.stat_result, index: LineIndex) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            target = self._path(path, st)
            temp = target.with_suffix(f".tmp{os.getpid()}")
            temp.write_text(json.dumps({"total": index.total, "marks": index.marks}))
            os.replace(temp, target)
            old = sorted(self.directory.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
            for stale in old[:-MAX_INDEXES]:
                stale.unlink(missing_ok=True)
        except OSError:
            pass  # an index is only a speed-up; failing to keep one must not fail the read
