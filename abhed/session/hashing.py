"""How far a snapshot that reads many files has got, for a person watching (issue 34).

A workspace's first snapshot reads and hashes every file the repository's own index could not vouch
for (all of them without git): tens of seconds on a kernel-sized tree. Its read loop
(checkpoint.Shadow._capture) reports through a Ticker: a few times a second at most, and only when
there are enough files to read that the wait shows (Shadow.FIRST_NOTE_FILES), so that a small
snapshot never flashes a line. Whoever displays it is handed a `Report` (a plain callable, through
tools.base.ToolContext.progress): the session knows no screen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Hashing:
    """A snapshot's read loop, so far: `done` of `total` files read, `size` bytes of them.
    `first`: the workspace's first snapshot (later ones only read what changed)."""

    done: int
    total: int
    size: int
    first: bool

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    def words(self) -> str:
        """The line a display shows, e.g. "first checkpoint of this workspace: hashing 12,345 / 78,000
        files (1.2 GB) - later calls only read what changed"."""
        what = "first checkpoint of this workspace" if self.first else "checkpoint"
        later = " - later calls only read what changed" if self.first else ""
        return f"{what}: hashing {self.done:,} / {self.total:,} files ({_size(self.size)}){later}"


Report = Callable[[Hashing], None]
EVERY_S = 0.25  # a report this often at most: the line moves, the loop does not slow


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


class Ticker:
    """Counts the files a read loop has read and reports at most every `every` seconds; the first
    report comes after `every` too (a snapshot done sooner shows nothing), the last when all are read
    (so that a display can take its line down)."""

    def __init__(self, report: Report, total: int, first: bool, every: float | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.report, self.total, self.first = report, total, first
        self.every = EVERY_S if every is None else every
        self.clock = clock or time.monotonic
        self.done = self.size = 0
        self.shown = False
        self._next = self.clock() + self.every

    def tick(self, size: int) -> None:
        """One more file read (`size` bytes; 0 for one left out)."""
        self.done += 1
        self.size += size
        now = self.clock()
        if now >= self._next:
            self._next = now + self.every
            self._send()

    def end(self) -> None:
        """The loop is over (or failed): a display that showed a line hears that it is done."""
        if self.shown:
            self.done = self.total
            self._send()

    def _send(self) -> None:
        self.shown = True
        self.report(Hashing(self.done, self.total, self.size, self.first))


def ticker(report: Report | None, total: int, first: bool, threshold: int) -> Ticker | None:
    """A Ticker when someone watches and there are `threshold` files or more to read; else None."""
    return Ticker(report, total, first) if report is not None and total >= threshold else None


@contextmanager
def ended(ticker: Ticker | None) -> Iterator[None]:
    """Around a read loop: its ticker's end is reported however the loop ends."""
    try:
        yield
    finally:
        if ticker is not None:
            ticker.end()
