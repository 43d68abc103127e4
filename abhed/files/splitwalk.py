"""A big walk shared with forked children: glob over a large tree on two cores.

One process lists a tree like Linux's (80k files) and stats every file (glob orders newest first)
at about 1.2x the CPU of `rg --files -j1` in the bare loop alone, so it cannot come within 2x of
ripgrep's time once the ignore rules and the tool's own work are added. So the walk starts here,
breadth first, until it is plain that thousands of files are still to walk (MIN_FILES); then
its pending directories go to WORKERS forked children
(fallback_grep.parallel.fork_map), which inherit the walk: its root descriptor (every directory is
still opened below it through no symlink, so a swap met in a child is refused as in one process),
its ignore rules, and each pending directory's rules in force. A small workspace never pays a fork.

The children take pending directories one at a time from a shared pipe (each read takes one
4-byte index, atomically), so a child that drew a big subtree takes fewer others: the shares come
out even without knowing the subtrees' sizes. Each child sends back one summary of its share,
made by the caller's `summarize` (glob: its thousand newest matches and the counts, not every
path), with the indices it walked; a directory no summary claims (its child was killed, or
raised) is walked here afterwards, so the answer is always whole.
"""

from __future__ import annotations

import gc
import os
import struct
from collections.abc import Callable
from typing import TypeVar

from fallback_grep.parallel import default_workers, fork_map

from abhed.files.filewalk import Listing, Walk

T = TypeVar("T")  # pragma: no mutate (equivalent: annotations are not evaluated here)

# A split costs ~12 ms of CPU (two forks, the pages the children copy, their exits: measured on
# a small tree split anyway); the walk ~6 us a file. So fork only for ~4000 files still to walk,
# estimated every STEP directories listed as the pending directories times the files a listed
# directory held on average (a low estimate: a pending directory's subtree is usually more than
# itself). Checked early and often: what is listed before the split is walked by one process.
STEP = 32           # pragma: no mutate (a tuning) directories listed, breadth first, between two estimates
MIN_FILES = 4000    # pragma: no mutate (a tuning) files estimated still to walk that make two forks worth it
WORKERS = 2
IDLE_CORE = 0.5    # of a core unused on average: enough to fork for
INDEX = struct.Struct("<I")
# Their indices (32 KiB) fit the pipe's default 64 KiB: written whole before the fork.
MAX_TASKS = 8192    # pragma: no mutate (any bound under 16384 does)


def workers() -> int:
    """How many children share a big walk: WORKERS when a core is idle, else none (1: one process).

    The children only help where they get a core this process would not: on a machine whose
    cores are already busy (1-minute load average within half a core of their number) the
    scheduler shares the cores among sessions (autogroup), not processes, so two children get
    what one process gets, and cost a split's CPU on top (measured on 2 cores at load 3-5: wall
    clock from 0.9x to 1.2x one process's)."""
    cores = default_workers()
    try:
        busy = os.getloadavg()[0]
    except OSError:  # no load average to be had: assume the cores are free
        busy = 0.0  # pragma: no mutate (equivalent: 1.0 too is below every count of cores but one)
    return min(WORKERS, cores) if busy < cores - IDLE_CORE else 1


def summaries(walking: Walk, summarize: Callable[[Listing], T], workers: int) -> list[T]:
    """summarize() of listings that together hold the whole walk, each file in exactly one of them
    (their order is not the walk's: the caller merges them into an answer that does not depend on
    it). One listing when the tree is small or `workers` < 2."""
    here, listed = Listing(), 0
    while workers >= 2 and walking.pending:
        listed += walking.run(here, STEP)
        # (files seen, not listed: a glob that matches few files still walks every directory)
        if walking.pending and len(walking.pending) * here.seen >= MIN_FILES * listed:
            shares = _split(walking, here, summarize, workers)  # first: it may add to `here`
            return [summarize(here)] + shares
    walking.run(here)
    return [summarize(here)]


def _split(walking: Walk, here: Listing, summarize: Callable[[Listing], T], workers: int) -> list[T]:
    """The pending directories walked by `workers` children: their summaries. What a dead child
    drew and never reported is walked here, into `here`."""
    tasks = _tasks(list(walking.pending))
    walking.pending.clear()
    queue, parent = _queue(len(tasks)), os.getpid()
    try:
        shares = list(fork_map(lambda _: _share(walking, tasks, queue, summarize, os.getpid() != parent),
                               range(workers), workers))
    finally:
        os.close(queue)
    claimed = {i for took, _ in shares for i in took}
    for i in range(len(tasks)):
        if i not in claimed:
            walking.pending.extend(tasks[i])
    walking.run(here)
    return [summary for _, summary in shares]


def _tasks(pending: list) -> list[list]:
    """The pending directories as at most MAX_TASKS runs (one each but in a very wide tree)."""
    size = -(-len(pending) // MAX_TASKS)
    return [pending[i:i + size] for i in range(0, len(pending), size)]


def _queue(count: int) -> int:
    """The read end of a pipe holding the indices 0..count-1, its write end closed: a reader gets
    one index per 4-byte read, then end of file. Written whole before any child is forked."""
    r, w = os.pipe()
    try:
        os.write(w, b"".join(INDEX.pack(i) for i in range(count)))
    finally:
        os.close(w)
    return r


def _share(walking: Walk, tasks: list[list], queue: int, summarize: Callable[[Listing], T],
           forked: bool) -> tuple[list[int], T]:
    """In a child (or, for a child that died, here): walk the tasks drawn from `queue` until it is
    empty; the indices drawn, and the summary of what they held."""
    if forked:
        # The collector in a child would walk every object inherited from the parent and so
        # write to (copy) the pages of the whole heap: measured 16 ms a child. What the child
        # makes is still collected.
        gc.freeze()
    took, listing = [], Listing()
    while len(raw := os.read(queue, INDEX.size)) == INDEX.size:
        i = INDEX.unpack(raw)[0]
        walking.pending.extend(tasks[i])
        walking.run(listing)
        took.append(i)
    return took, summarize(listing)
