"""Programs Abhed runs on the host on the model's behalf: git for checkpoints and undo, rg, git status.

They act on a workspace a sandboxed process can change at the same moment, so none may outlive its
purpose: a file swapped for a FIFO must not leave git blocked in open() for ever, holding the
checkpoint lock, and a kill -9 of Abhed must not leave git running under PID 1, still writing.
Each child therefore

- has a deadline: past it the child and everything it started are killed (SIGKILL to its process
  group) and `Timeout` says what was stopped and after how long;
- runs in a process group of its own, so that kill reaches its children too, and a Ctrl-C typed
  at Abhed's terminal reaches Abhed alone, which then kills the group (every exit path does);
- dies with Abhed (PR_SET_PDEATHSIG = SIGKILL). util-linux's `setpriv --pdeathsig KILL` sets it
  between exec and exec, so the child is started with vfork: a Python function run in the child
  (`preexec_fn`) forces a fork, which copies the page tables of all of Abhed's memory (31 ms per
  child for a process holding 200 MB, against 0.6 ms). The one thing setpriv does not do is check
  that Abhed was still alive when it set the signal: a child whose Abhed was killed in that half
  millisecond would run on, so a `sh` between setpriv and the program checks $PPID (as the
  preexec function did) and ends it (0.5 ms more). Where setpriv is missing, the child does it all
  itself, at fork's price.
"""

from __future__ import annotations

import ctypes
import functools
import os
import select
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1  # linux/prctl.h
_libc = ctypes.CDLL(None, use_errno=True)


class Timeout(Exception):
    """A host child ran past its deadline and was killed with everything it started."""

    def __init__(self, argv: Sequence[str], seconds: float) -> None:
        self.argv = list(argv)
        self.seconds = seconds
        super().__init__(f"`{' '.join(self.argv[:3])}` was still running after {seconds:g} s and was stopped")


def _dies_with(parent: int):
    """The child's first act: die when Abhed dies (or already has, before the prctl took effect).

    PR_SET_PDEATHSIG follows the *thread* that forked; every caller here waits for its child in
    that thread, so the thread outlives the child."""
    prctl = _libc.prctl

    def first() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(127)
    return first


@functools.cache  # looked for once per process
def _setpriv() -> str | None:
    """setpriv, when it can set the parent-death signal (util-linux 2.33 and later) and sh runs the check."""
    for directory in ("/usr/bin", "/bin"):
        path = os.path.join(directory, "setpriv")
        if os.access(path, os.X_OK):
            try:
                done = subprocess.run([path, "--pdeathsig", "KILL", "--", "/bin/sh", "-c", _STILL_ALIVE, "sh",
                                       str(os.getpid()), "/bin/true"], capture_output=True, timeout=5)
            except subprocess.TimeoutExpired:
                return None
            return path if done.returncode == 0 else None
    return None


# Run by sh once setpriv has set the signal: a parent that died before that (the child is then
# someone else's) is not waited for by anything, so the child ends here instead of running on.
_STILL_ALIVE = 'test "$PPID" = "$1" || exit 127; shift; exec "$@"'


def _dying_with_abhed(argv: Sequence[str]) -> tuple[list[str], Callable[[], None] | None]:
    """The command line and the preexec function that make a child die with Abhed."""
    setpriv = _setpriv()
    # A program given by name or missing: as before (Popen's own lookup, and its FileNotFoundError).
    if setpriv is not None and os.path.isabs(argv[0]) and os.access(argv[0], os.X_OK):
        return [setpriv, "--pdeathsig", "KILL", "--", "/bin/sh", "-c", _STILL_ALIVE, "sh", str(os.getpid()),
                *argv], None
    return list(argv), _dies_with(os.getpid())


def popen(argv: Sequence[str], **kwargs) -> subprocess.Popen:
    """subprocess.Popen in a process group of its own, dying with Abhed.

    A Ctrl-C that arrives while Popen starts the child would leave it running with no one to kill it
    (Popen raises before it returns the child): in the main thread, where Python raises
    KeyboardInterrupt, SIGINT is held until the child is known, then delivered again."""
    held: list[int] = []
    main = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not None
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum)) if main else None
    try:
        line, first = _dying_with_abhed(argv)
        proc = subprocess.Popen(line, process_group=0, preexec_fn=first, **kwargs)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    if held:
        try:
            signal.raise_signal(signal.SIGINT)  # the handler runs now, and may raise KeyboardInterrupt
        except BaseException:
            kill(proc)
            raise
    return proc


def kill(proc: subprocess.Popen) -> None:
    """Kill the child's whole process group and reap the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.kill()  # the group is gone only once its members are: the leader surely
    proc.wait()


class Stuck(Exception):
    """run(watch=...): the watch said the child cannot go on; it was killed with its group."""


class TooMuch(Exception):
    """run(max_output=...): the child printed more than that; it was killed with its group."""


# run(watch=...): a child is first looked at once it has run this long (a shorter run is never
# looked at: no /proc read, no wake-up), then every WATCH_S.
WATCH_AFTER_S = 0.1
WATCH_S = 0.05


def run(argv: Sequence[str], *, timeout: float, input: bytes | None = None, env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None, pass_fds: Sequence[int] = (),
        watch: Callable[[int], bool] | None = None, max_output: int | None = None,
        stderr_after: bool = False) -> subprocess.CompletedProcess:
    """Run to completion with stdout and stderr captured; `Timeout` past `timeout` seconds.
    `watch(pid)`, asked once the child has run WATCH_AFTER_S, then every WATCH_S while its pipes
    have nothing to read: True kills it and raises `Stuck` (rg blocked on a FIFO has no deadline
    of its own short of `timeout`). `max_output`: past this many bytes on its standard output, it
    is killed and `TooMuch` raised. `stderr_after`: stderr goes to an anonymous file (memfd) read
    once the child is done, not to a pipe: a child that writes its stderr a few bytes at a time
    (rg's --debug log, unbuffered) wakes this process for none of them."""
    err_file = os.memfd_create("abhed-stderr", os.MFD_CLOEXEC) if stderr_after else None
    try:
        proc = popen(argv, stdin=subprocess.DEVNULL if input is None else subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE if err_file is None else err_file, env=env, cwd=cwd,
                     pass_fds=tuple(pass_fds))
    except BaseException:
        if err_file is not None:
            os.close(err_file)
        raise
    try:
        out, err = _collect(proc, input, time.monotonic() + timeout, watch, max_output)
        if err_file is not None:
            err = os.pread(err_file, os.fstat(err_file).st_size, 0)
    except TooMuch:
        kill(proc)
        raise
    except subprocess.TimeoutExpired:
        kill(proc)
        raise Timeout(argv, timeout) from None
    except Stuck:
        kill(proc)
        raise Stuck(f"`{argv[0]}` was stopped: it could not go on") from None
    except BaseException:
        kill(proc)
        raise
    finally:
        if err_file is not None:
            os.close(err_file)
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def _collect(proc: subprocess.Popen, input: bytes | None, deadline: float,
             watch: Callable[[int], bool] | None, max_output: int | None = None) -> tuple[bytes, bytes]:
    """The child's output, once it has exited and closed its pipes. One select waits on the pipes
    and on the child's exit (a pidfd): it returns the moment the child is done, with no polling
    (Popen.communicate with a timeout ends in a sleep loop of up to 50 ms per step), and wakes
    before that only for the deadline and the watch. Raises subprocess.TimeoutExpired or Stuck."""
    out_pipe, err_pipe, in_pipe = proc.stdout, proc.stderr, proc.stdin
    assert out_pipe is not None  # run() always makes a stdout pipe (and a stderr one unless stderr_after)
    stdout = out_pipe.fileno()
    stderr = err_pipe.fileno() if err_pipe is not None else -1
    out: dict[int, list[bytes]] = {stdout: [], **({stderr: []} if err_pipe is not None else {})}
    pending = memoryview(input or b"")
    look = time.monotonic() + WATCH_AFTER_S
    room = max_output if max_output is not None else -1
    with selectors.DefaultSelector() as selector, _exit_fd(proc.pid) as exited:
        for fd in out:
            selector.register(fd, selectors.EVENT_READ)
        if in_pipe is not None:
            selector.register(in_pipe.fileno(), selectors.EVENT_WRITE)
        if exited is not None:
            selector.register(exited, selectors.EVENT_READ)
        gone = False  # (known only with a pidfd)
        while selector.get_map():
            now = time.monotonic()
            if now >= deadline:
                raise subprocess.TimeoutExpired(proc.args, 0)
            looking = watch is not None and not gone
            events = selector.select((min(deadline, look) if looking else deadline) - now)
            # The watch looks only when nothing was left to read: a child blocked writing to a
            # full pipe of ours waits on us, not stuck (the pipes are drained first).
            if watch is not None and looking and not events and time.monotonic() >= look:
                if watch(proc.pid):
                    raise Stuck()
                look = time.monotonic() + WATCH_S
            for key, _ in events:
                fd = key.fd
                if fd == exited:
                    gone = True
                    selector.unregister(fd)
                elif fd in out:
                    chunk = os.read(fd, 1 << 16)
                    out[fd].append(chunk) if chunk else selector.unregister(fd)
                    if fd == stdout and room >= 0:
                        room -= len(chunk)
                        if room < 0:
                            raise TooMuch()
                else:  # stdin: a pipe takes PIPE_BUF bytes without blocking once select says it is writable
                    try:
                        pending = pending[os.write(fd, pending[:select.PIPE_BUF]):]
                    except BrokenPipeError:
                        pending = pending[:0]   # the child stopped reading: its exit status says why
                    if not pending:
                        selector.unregister(fd)
                        if in_pipe is not None:  # (this is its descriptor)
                            in_pipe.close()
    # With a pidfd it has exited: reaping does not wait. Without one (Linux before 5.3) its pipes
    # are closed and Popen's wait polls for the exit until the deadline.
    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    out_pipe.close()
    if err_pipe is not None:
        err_pipe.close()
    return b"".join(out[stdout]), b"".join(out.get(stderr, []))


@contextmanager
def _exit_fd(pid: int) -> Iterator[int | None]:
    """A descriptor readable once process `pid` (our unreaped child) has exited; None where the
    kernel has no pidfd_open (before 5.3)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def streaming(argv: Sequence[str], *, timeout: float, env: dict[str, str] | None = None,
              cwd: str | os.PathLike[str] | None = None, pass_fds: Sequence[int] = ()) -> Iterator[subprocess.Popen]:
    """A child to talk to over its stdin and stdout (git cat-file --batch), killed with its group
    when the block ends, or at the deadline: then reads see end of file, and `Timeout` is raised
    when the block ends."""
    proc = popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd,
                 pass_fds=tuple(pass_fds))
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        yield proc
    finally:
        timer.cancel()
        for pipe in (proc.stdin, proc.stdout):
            try:
                if pipe is not None:  # (both are pipes: made above)
                    pipe.close()
            except OSError:
                pass
        kill(proc)
    if expired.is_set():
        raise Timeout(argv, timeout)
