"""What a forked parser of hostile input does to itself before it reads a byte of that input.

Pillow and pypdf parse files the model chose (and an attacker may have crafted). A memory bug in a
decoder would be code running with the user's rights; so the child that parses (common/isolate.py)
first confines itself, in this order:

1. Descriptors (``descriptors``): /dev/null on 0, 1 and 2 (no terminal to type into or write
   escape sequences to), the answer pipe kept, every other descriptor closed -- whatever
   Abhed had open (the workspace root, sockets to the model, a log) is gone.
2. ``confine``: it dies with Abhed (PR_SET_PDEATHSIG, SIGKILL; if Abhed died before that took
   effect, it exits at once); no_new_privs; no further import (a module not loaded before the
   fork would need the filesystem: it fails as not installed, and names itself); then the
   seccomp allowlist of sandbox/seccomp.py (``decoder_filter``): no file can be named (open, stat,
   exec, chmod...), no socket, no new process, no signal but to itself, no prctl, no keyring.

There is no scratch directory: the decoders work in memory, and nothing can be written anywhere.
The input arrives in the child's memory (fork) and the answer leaves through the pipe. Each step
raises OSError when the kernel refuses it; the caller must then not parse (fail closed).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from sandbox.errors import BackendUnavailable
from sandbox.seccomp import decoder_filter

PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 22, 38
SECCOMP_MODE_FILTER = 2
_libc = ctypes.CDLL(None, use_errno=True)  # loaded before any fork: the child opens nothing
_prctl = _libc.prctl  # looked up here: a child after every fork would look it up again


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]  # struct sock_fprog


def descriptors(keep: int) -> int:
    """Leave this process /dev/null on 0, 1, 2 and `keep`, nothing else; `keep`'s number now (3 or more)."""
    kept = fcntl.fcntl(keep, fcntl.F_DUPFD_CLOEXEC, 3)  # pragma: no mutate (any number above 2: never 0-2, which /dev/null takes)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for name in os.listdir("/proc/self/fd"):  # exactly the open ones, whatever the limit on descriptors
        if int(name) > 2 and int(name) != kept:
            try:
                os.close(int(name))
            except OSError:  # the listing's own descriptor, closed when listdir returned
                pass
    return kept


def prepare() -> None:
    """In Abhed, before the fork: assemble the filter once, so that each child only writes its pid
    in. Where it cannot be assembled, the child finds out again, and reports it."""
    try:
        decoder_filter(0)  # pragma: no mutate (equivalent: the child would assemble it then, only slower)
    except BackendUnavailable:
        pass


def confine(parent: int) -> None:
    """Die with `parent`, no new privileges, no new imports, the seccomp allowlist. Irreversible."""
    armed = _prctl(PR_SET_PDEATHSIG, signal.SIGKILL,
                   0, 0, 0)  # pragma: no mutate (the kernel reads no argument after the signal)
    _check(armed, "PR_SET_PDEATHSIG")
    if os.getppid() != parent:  # Abhed died before the signal was armed: nobody waits for this child
        os._exit(0)
    _check(_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    sys.meta_path.insert(
        0, NoImports())  # pragma: no mutate (1: after the finder of builtin modules, which needs no file)
    program = decoder_filter(os.getpid())
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _Program(len(program) // 8, ctypes.addressof(buffer))
    installed = _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog),
                       0, 0)  # pragma: no mutate (the kernel reads no argument after the program)
    _check(installed, "seccomp")


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


class NoImports:
    """First on sys.meta_path in the confined child: any module not already loaded is refused, in
    words, before a finder tries the filesystem (which the filter refuses anyway, with less clear
    errors). Libraries that probe for optional modules see ModuleNotFoundError, as for one not
    installed. Whatever the decoders need is imported by the parent before the fork."""

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> Any:
        raise ModuleNotFoundError(f"No module named {name!r}: the confined decoder loads no module that Abhed did "
                                  "not load before it started", name=name)
