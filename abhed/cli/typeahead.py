"""Keys typed while a turn runs: not echoed, kept for the next prompt.

In the terminal's cooked mode the tty echoes every key at the cursor, which during a turn is the
status line (issue 36: typing showed on the spinner's line, and the next redraw mixed the two).
While a turn runs the keys are held as lineedit.hold_keys holds those typed while the chat
starts: read one by one without echo, they wait in the terminal's queue as bytes, and the
editor of the next prompt finds them there. Ctrl-C still interrupts (signals stay on). A
question asked during the turn (an approval) is answered as a line, echoed and editable: the
terminal is given back for it, and held again after.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from abhed.cli.lineedit import hold_keys


class HeldKeys:
    def __init__(self) -> None:
        self._release: Callable[[], None] | None = None  # set while the keys are held
        self._lock = threading.Lock()  # a subagent's question comes from its own thread

    def _hold(self) -> None:
        with self._lock:
            if self._release is None:
                self._release = hold_keys()  # nothing on a terminal-less run

    def _give_back(self) -> bool:
        """The terminal as it was; whether the keys were held."""
        with self._lock:
            release, self._release = self._release, None
        if release is not None:
            release()
        return release is not None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """For a turn: no echo until it ends, however it ends."""
        self._hold()
        try:
            yield
        finally:
            self._give_back()

    @contextlib.contextmanager
    def echoed(self) -> Iterator[None]:
        """For a line typed during the turn: the terminal's own echo and editing, then held again."""
        was_held = self._give_back()
        try:
            yield
        finally:
            if was_held:
                self._hold()
