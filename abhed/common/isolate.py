"""Run a parser of hostile input (an image decoder, a PDF reader) in a forked, confined child with hard bounds.

A file in the workspace may have been made to hurt whoever opens it: a PNG that inflates to
gigabytes, a PDF whose objects refer to each other in a loop, or one built for a memory bug of
the decoder, which would then run code with the user's rights. Pillow and pypdf guard against
many such files, but a guard inside the parser is only as good as its authors' foresight. So the
parse runs in a child process (fork: no second interpreter to start, and the one-file binary
needs no way to re-launch itself) that first confines itself (common/confine.py: only /dev/null
and the answer pipe left open, dies with Abhed, no_new_privs, and a seccomp allowlist under which
it can name no file, open no socket, start no process and signal nobody else), with its address
space capped (RLIMIT_AS) and its CPU time capped (RLIMIT_CPU); the parent stops waiting, and kills
it, at a wall-clock deadline. Whatever the file does, Abhed loses at most `memory` bytes and
`seconds` seconds, and the model is told why. If the child cannot confine itself, nothing is
parsed (Unconfined).

The child runs one function and sends back its pickled result (or the error it raised) through a
pipe; it never returns into the parent's code (os._exit), so no lock, buffer or thread of the
parent is touched. The answer is read as a compromised child may have written it: it is unpickled
with only the classes the caller names and exception classes of the standard library, Pillow,
pypdf and Abhed (a pickle can otherwise call any function), and must be of the caller's type.
The function must import what it needs before the fork (done by the callers), so the child never
imports under a lock another thread held; once confined it can import nothing at all.
"""

from __future__ import annotations

import io
import os
import pickle
import resource
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from abhed.common import confine

T = TypeVar("T")
RESULT_LIMIT = 64 * 1024 * 1024  # the most bytes a child may send back
TOO_LARGE = b"\0too large"  # what _collect answers for a result over RESULT_LIMIT (never a pickle's first bytes)


class Stopped(Exception):
    """The parse did not give an answer; `what` says why, in words for the model."""

    def __init__(self, what: str) -> None:
        super().__init__(what)  # pragma: no mutate (equivalent: Exception.__new__ keeps the arguments too)
        self.what = what


class Exceeded(Stopped):
    """The child ran out of time or memory, died, or answered what no parser does."""


class Unconfined(Stopped):
    """The child could not confine itself (this host refused a step), so it parsed nothing."""


# The packages whose exception classes an answer may carry (a parser's own complaint).
EXCEPTION_PACKAGES = frozenset({"builtins", "PIL", "pypdf", "abhed"})


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to a bound)
class Bounds:
    seconds: float = 20.0  # wall clock, and CPU time (the child cannot use more CPU than wall time)
    memory: int = 768 * 1024 * 1024  # address space the child may add to what it inherited


def run(function: Callable[..., T], *args: Any, bounds: Bounds = Bounds(), returns: type = object,
        parts: tuple[type, ...] = ()) -> T:
    """function(*args) in a confined, bounded child. Its exception is re-raised here; Exceeded when a
    bound hit (or the answer was not a `returns` built of builtins and `parts`); Unconfined when the
    child could not confine itself."""
    parent = os.getpid()
    confine.prepare()  # pragma: no mutate (equivalent: the child would assemble the filter itself, only slower)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child, which never returns. pragma: no mutate (flipped, the test process itself runs the child's part and ends in os._exit(0), which pytest's exit status cannot tell from success)
        os.close(read_end)  # pragma: no mutate (equivalent: the child closes every descriptor but the pipe's write end)
        _child(write_end, parent, function, args, bounds)
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
    ok, value = _answer(data, returns, parts)
    if ok:
        return value
    raise value


def _child(fd: int, parent: int, function: Callable[..., Any], args: tuple[Any, ...], bounds: Bounds) -> None:
    """The child's whole life: it never returns (a crash report faulthandler would write goes to a
    descriptor confine.descriptors closed)."""
    code = 0  # pragma: no mutate (the status is not read; without it the child would return into the test's code, which pytest cannot see)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        try:
            fd = confine.descriptors(fd)  # nothing a parser says (warnings, a crash report) reaches the terminal
            cpu = int(bounds.seconds) + 1  # a second over the wall clock: that bound is the one a single thread meets
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            ceiling = _address_space() + bounds.memory
            resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))
            confine.confine(parent)
        except Exception as exc:  # fail closed: the input is not parsed
            payload = pickle.dumps((False, Unconfined(f"{type(exc).__name__}: {exc}")))
        else:
            payload = _call(function, args, bounds)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        code = 70  # pragma: no mutate (equivalent: the parent judges by the missing answer, not the code)
    finally:
        os._exit(code)  # pragma: no mutate (deleted, the child returns into the test's code, which pytest cannot see)


def _call(function: Callable[..., Any], args: tuple[Any, ...], bounds: Bounds) -> bytes:
    """The pickled (ok, value) of function(*args), in the confined child."""
    try:
        return pickle.dumps((True, function(*args)))
    except MemoryError:
        return pickle.dumps((False, Exceeded(f"it needed more than {bounds.memory // (1024 * 1024)} MiB of memory")))
    except Exception as exc:  # the parser's own error: the caller explains it
        try:
            return pickle.dumps((False, exc))
        except Exception:  # an exception that cannot be pickled: its words are enough
            return pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")))


class _Answer(pickle.Unpickler):
    """Unpickles only `classes` and exception classes of EXCEPTION_PACKAGES, already imported:
    what a pickle names is otherwise called, and the child may be the attacker's."""

    def __init__(self, data: bytes, classes: frozenset[type]) -> None:
        super().__init__(io.BytesIO(data))
        self.classes = classes

    def find_class(self, module: str, name: str) -> Any:
        found = getattr(sys.modules.get(module), name, None)  # never imports
        if isinstance(found, type) and (found in self.classes or (
                issubclass(found, Exception) and module.partition(".")[0] in EXCEPTION_PACKAGES)):
            return found
        raise pickle.UnpicklingError(f"{module}.{name} is not among what a parser sends back")


def _answer(data: bytes, returns: type, parts: tuple[type, ...]) -> tuple[bool, Any]:
    """(ok, value) from the child's bytes; Exceeded when they are not what a parser sends."""
    try:
        ok, value = _Answer(data, frozenset((returns, *parts))).load()
    except Exception as exc:  # a malformed or hostile pickle: UnpicklingError, EOFError, ValueError, RecursionError...
        raise Exceeded(f"its answer could not be read ({type(exc).__name__}: {str(exc)[:200]}), as if the file had "
                       "taken control of the parser") from None
    if not isinstance(value, returns if ok is True else Exception):
        raise Exceeded(f"its answer was a {type(value).__name__}, not what the parser returns, as if the file had "
                       "taken control of the parser")
    return ok is True, value


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
