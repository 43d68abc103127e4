"""The first bash call's fixed costs, paid while the model thinks (issue 34).

The first call that may change the workspace waits for two things no later call pays for: the
workspace's first checkpoint (seed.py: the repository's index read, every tracked file's lstat,
the trees written; seconds on a kernel-sized tree) and the sandbox's start (the guard's inotify
walk, the hard-link survey), after which its "after" snapshot, having no change set to start from,
lists the whole tree again. None of it depends on the call, so a session's process starts it in a
thread as the session opens (cli/launch.py), and the model's first turn hides it.

Nothing here widens what a snapshot trusts: the warm-up runs before any command of the session
(every call that could run one waits for it first: dispatch and the bash tool call
ToolContext.warmed), so a
repository index it trusts is one no sandboxed command of this session wrote, exactly as when the
first call takes it. It opens the sandbox first and takes the snapshot's work after, so the change
set the next snapshot starts from covers everything since (Shadow.prepare).

A call that has to wait says so on the progress line when the warm-up still reads many files
(hashing.py), and the first checkpointed call's result carries the note a first snapshot makes.
A warm-up that fails leaves things as they were: the call does the work itself and says why.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from abhed.common.errors import ToolError
from abhed.session.hashing import Hashing


class Warmup:
    """The warm-up thread of one session's process (ToolContext.warmup)."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._waiting = threading.Event()  # a call waits: progress reaches the display from then on
        self._note = ""  # the first snapshot's note (Capture.first), for the first checkpointed call
        self._closing = False  # the session's process is done: nothing more is started
        self._thread = threading.Thread(target=self._run, name="abhed-warmup", daemon=True)

    def start(self) -> Warmup:
        self._thread.start()
        return self

    def wait(self) -> None:
        """Until the warm-up is over (at once when it is); progress is shown while it lasts."""
        if self._thread.is_alive():
            self._waiting.set()
            self._thread.join()

    def stop(self) -> None:
        """The session's process is done with it: what has not begun does not, what runs ends (a first
        snapshot cut off part-way could leave an index without the exact modes it read)."""
        self._closing = True
        self.wait()

    def note(self) -> str:
        """The first snapshot's note, once (it read many files: why the first call took long)."""
        note, self._note = self._note, ""
        return note

    def _report(self, progress: Hashing) -> None:
        shown = self._ctx.progress
        if shown is not None and self._waiting.is_set():  # nobody waits: the model's turn shows nothing
            shown(progress)

    def _run(self) -> None:
        with _no_collection():
            self._work()

    def _work(self) -> None:
        ctx = self._ctx
        from abhed.tools.bash import BashSandbox
        try:
            ctx.checkpoints.session_started(ctx.session.state.created_at.timestamp())
            if ctx.shell is None and not self._closing:
                try:
                    ctx.shell = BashSandbox.open(ctx)
                except ToolError:
                    pass  # no usable sandbox: the bash call says so itself
            if self._closing:
                return
            changes = getattr(ctx.shell, "changes", None)
            self._note = ctx.checkpoints.prepare(changes, self._report).first
        except Exception:  # noqa: BLE001 (CheckpointError, or anything: the call does the work again and says what failed)
            pass


@contextmanager
def _no_collection() -> Iterator[None]:
    """Python's cyclic collector off while the warm-up runs: it makes some 400,000 objects on the kernel
    tree (the census's lstat's, the index's entries), none in a cycle, and each full collection meanwhile
    traversed them all again (a tenth of a second in all). What other threads make in a cycle meanwhile
    is collected once it is back on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def start(ctx: Any) -> Warmup | None:
    """Start the warm-up of a session's process when it takes checkpoints (and none runs yet)."""
    if ctx.checkpoints is None or ctx.one_shot or ctx.warmup is not None:
        return None
    ctx.warmup = Warmup(ctx).start()
    return ctx.warmup
