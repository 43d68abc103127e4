"""Run a parser of hostile input (an image decoder, a PDF reader) in a forked child with hard bounds.

A file in the workspace may have been made to hurt whoever opens it: a PNG that inflates to
gigabytes, a PDF whose objects refer to each other in a loop. Pillow and pypdf guard against many
such files, but a guard inside the parser is only as good as its authors' foresight. So the parse
runs in a child process (fork: no second interpreter to start, and the one-file binary needs no
way to re-launch itself) with its address space capped (RLIMIT_AS) and its CPU time capped
(RLIMIT_CPU), and the parent stops waiting, and kills it, at a wall-clock deadline. Whatever the
file does, Abhed loses at most `memory` bytes and `seconds` seconds, and the model is told why.

The child runs one function and sends back its pickled result (or the error it raised) through a
pipe; it never returns into the parent's code (os._exit), so no lock, buffer or thread of the
parent is touched. The function must import what it needs before the fork (done by the callers at
module import), so the child never imports under a lock another thread held.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import resource
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
RESULT_LIMIT = 64 * 1024 * 1024  # the most bytes a child may send back
TOO_LARGE = b"\0too large"  # what _collect answers for a result over RESULT_LIMIT (never a pickle's first bytes)


class Exceeded(Exception):
    """The child ran out of time or memory, or died; `what` says which, in words for the model."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to a bound)
class Bounds:
    seconds: float = 20.0  # wall clock, and CPU time (the child cannot use more CPU than wall time)
    memory: int = 768 * 1024 * 1024  # address space the child may add to what it inherited


def run(function: Callable[..., T], *args: Any, bounds: Bounds = Bounds()) -> T:
    """function(*args) in a bounded child. Its exception is re-raised here; Exceeded when a bound hit."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)  # pragma: no mutate (equivalent: the child never reads it, and soon exits)
        _child(write_end, function, args, bounds)
    os.close(write_end)
    try:
        data = _collect(read_end, time.monotonic() + bounds.seconds)
    finally:
        os.close(read_end)
        status = _reap(pid)
    if data is None:
        raise Exceeded(f"it took more than {bounds.seconds:g} seconds")
    if data is TOO_LARGE:
        raise Exceeded(f"its result was larger than {RESULT_LIMIT // (1024 * 1024)} MiB")
    if not data:
        raise Exceeded(_death(status, bounds))
    ok, value = pickle.loads(data)
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


def _child(fd: int, function: Callable[..., Any], args: tuple[Any, ...], bounds: Bounds) -> None:
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        faulthandler.disable()
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 2)  # nothing a parser says (warnings, a crash report) reaches the user's terminal
        cpu = int(bounds.seconds) + 1  # a second over the wall clock: that bound is the one a single thread meets
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        ceiling = _address_space() + bounds.memory
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))
        try:
            payload = pickle.dumps((True, function(*args)))
        except MemoryError:
            payload = pickle.dumps((False, Exceeded(f"it needed more than {bounds.memory // (1024 * 1024)} MiB "
                                                    "of memory")))
        except Exception as exc:  # the parser's own error: the caller explains it
            try:
                payload = pickle.dumps((False, exc))
            except Exception:  # an exception that cannot be pickled: its words are enough
                payload = pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        code = 70  # pragma: no mutate (equivalent: the parent judges by the missing answer, not the code)
    finally:
        os._exit(code)


def _address_space() -> int:
    """Bytes of address space this process already has mapped (threads' stacks, libraries)."""
    with open("/proc/self/statm", "rb") as handle:
        pages = int(handle.read().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _collect(fd: int, deadline: float) -> bytes | None:
    """Everything the child wrote, or None when the deadline passed first."""
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:  # pragma: no mutate (<= or < on a float clock: equivalent)
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > RESULT_LIMIT:
            return TOO_LARGE
        chunks.append(chunk)


def _reap(pid: int) -> int:
    """Kill the child if it still runs, and collect it; its wait status."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        return status
    except ChildProcessError:  # pragma: no cover - someone else reaped it
        return 0


def _death(status: int, bounds: Bounds) -> str:
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        return f"it took more than {bounds.seconds:g} seconds of CPU time"
    if os.WIFSIGNALED(status):
        return f"the parser crashed ({signal.Signals(os.WTERMSIG(status)).name})"
    return "the parser stopped without an answer (out of memory or a crash)"
