"""Start-up without the cyclic garbage collector's pauses (issue 18: a start-up that feels instant).

Importing Abhed's parts and their libraries (pydantic, prompt_toolkit, httpx, rich) makes a few
hundred thousand objects that live as long as the process. At the interpreter's thresholds the
collector walks them again and again while they are made: measured, about a sixth of `abhed chat`'s
time to its prompt (a hundred and more collections, one of them over the whole heap) and a tenth of
`abhed tool read`'s. None of that finds garbage worth the wait, so start-up runs with a first
threshold high enough that a collection is rare (it still happens: memory stays bounded), and a
command that goes on working (an agent session) ends start-up with `end()`: what exists by then is
frozen (`gc.freeze`: kept out of every later collection, so none re-walks the start-up heap; it
lives to the exit anyway) and the interpreter's thresholds come back.
"""

from __future__ import annotations

import gc

DEFAULT = gc.get_threshold()
# Objects allocated (net) between two young collections during start-up: a few collections instead
# of a hundred; the older generations keep their ratios.
STARTUP_FIRST = 100_000  # pragma: no mutate (a tuning: any number of this order does)


def begin() -> None:
    """Start-up has begun: collect rarely."""
    gc.set_threshold(STARTUP_FIRST, *DEFAULT[1:])


def end() -> None:
    """Start-up is over: keep what it made out of later collections, and collect as usual."""
    if gc.get_threshold() != DEFAULT:
        gc.freeze()
        gc.set_threshold(*DEFAULT)
