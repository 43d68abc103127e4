"""Preparing a pattern is bounded: no walk recurses in Python, and a deadline stops the rest.

Everything between a pattern's text and a ready matcher (parse, line-mode rewrite, translation
for rg, program compile, prefilter planning) keeps two promises:

* No recursion whose depth the pattern chooses. A tree nests as deep as its pattern (1000
  groups; `x{0,1000}` simplifies to 1000 nested `(?:x(?:x...)?)?`), past Python's recursion
  limit; raising that limit is process-wide (the grep tool runs in threads, and one call putting
  it back cut another call's walk short) and lets deep C recursion overflow the stack. So each
  recursive walk is a generator: `value = yield walk(child)` is the recursive call, `return` its
  result, and `run()` drives the generators with a list as the stack.
* A deadline: inside `with deadline(seconds, pattern):`, `check()` (called by `run()` every
  CHECK_EVERY steps and by the loops of the parser, compilers and planners) raises `error` once
  the time has passed, saying so and how to simplify the pattern. Every stage is linear or
  n log n in the pattern's length (benchmarks/pattern_prep_bench.py); the deadline is what
  holds if one is not.
* Within a deadline the cyclic garbage collector pauses (reference counting still frees): a
  64 KiB pattern makes hundreds of thousands of small long-lived objects (tree nodes, program
  lists), and the collector's passes over that growing heap made preparing one 1.5x slower per
  KB at 64 KiB than at 4 KiB (flat without them). Pauses from several threads are counted; the
  collector resumes when the last ends, unless it was off before the first.
"""
from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager

from .errors import error, invalid

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Generator, Iterator
    from typing import Any, TypeVar

    T = TypeVar("T")
    # A recursive walk: it yields its children's walks, is sent their results, and returns its own.
    Walk = Generator[Any, Any, T]

# run() steps between two looks at the clock (a look costs ~0.1 us)
CHECK_EVERY = 256  # pragma: no mutate (any interval: only how often the clock is read)

_local = threading.local()   # per thread: each grep call prepares its pattern in its own


def run(walk: Walk[T]) -> T:
    """The result of a generator-based recursive walk, driven without Python recursion.

    In the walk, `x = yield child` runs the generator `child` to its end and gives its return
    value. An exception ends the whole walk (no walk here catches one from a child)."""
    stack: list[Walk[Any]] = [walk]
    value, steps = None, 0
    while True:
        try:
            child = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            value = done.value
            continue
        stack.append(child)
        value = None
        steps += 1
        if steps % CHECK_EVERY == 0:
            check()


@contextmanager
def deadline(seconds: float, pattern: str | bytes) -> Iterator[None]:
    """Within the block, check() fails once `seconds` have passed (an outer, earlier deadline
    still holds). Thread-local: other threads' preparations are not affected. The cyclic
    garbage collector pauses meanwhile (see the module's docstring)."""
    outer = getattr(_local, "limit", None)
    limit = (time.monotonic() + seconds, seconds, pattern)
    _local.limit = limit if outer is None or limit[0] < outer[0] else outer  # pragma: no mutate (= : the same)
    try:
        with _collector_paused():
            yield
    finally:
        _local.limit = outer


_pauses = {"count": 0, "was_on": False}  # pragma: no mutate (was_on is set by the first pause)
_pauses_lock = threading.Lock()


@contextmanager
def _collector_paused() -> Iterator[None]:
    with _pauses_lock:
        if _pauses["count"] == 0:
            _pauses["was_on"] = gc.isenabled()
            gc.disable()
        _pauses["count"] += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses["count"] -= 1
            if _pauses["count"] == 0 and _pauses["was_on"]:
                gc.enable()


def check() -> None:
    """Raise `error` (construct "pattern too complex") if this thread's deadline has passed."""
    limit = getattr(_local, "limit", None)
    if limit is not None and time.monotonic() > limit[0]:  # pragma: no mutate (>= differs at one instant)
        raise too_complex(limit[2], limit[1])


def too_complex(pattern: str | bytes, seconds: float) -> error:
    return invalid(
        "pattern too complex", f"pattern too complex: preparing it for the search took more than "
        f"{seconds:g} s, the most a search may spend on that", pattern, None,
        "simplify the pattern: search for its most distinctive literal part first, split a long "
        "alternation into several searches, write `+` or `*` instead of large counted repeats of "
        "groups (`(a|b){0,1000}` -> `(a|b)*`), and drop groups that only nest other groups")
