"""The sandbox's seccomp filter, assembled by hand (classic BPF; no libseccomp needed).

What it refuses, and why:

- ``ioctl(TIOCSTI)`` and ``ioctl(TIOCLINUX)`` (EPERM): they push characters into a
  terminal's input queue, i.e. type commands into whatever shell owns that terminal.
  bwrap's --new-session already leaves the command without a controlling terminal and the
  launcher gives it no terminal fd; this is the second wall.
- Any mode carrying set-uid or set-gid bits (EPERM) in ``chmod``, ``fchmod``,
  ``fchmodat``, ``fchmodat2``, ``open``/``openat``/``creat`` (the mode of a new file) and
  ``mknod``/``mknodat``. Inside the sandbox every mount is nosuid, but the workspace is an
  ordinary directory on the host: ``cp /usr/bin/python3 x && chmod 4755 x`` run by a
  sandbox started as root would leave a set-uid-root binary there for any local user.
  ``openat2`` (its mode sits in a struct the filter cannot read) and ``io_uring_setup``
  (io_uring can open files without a syscall the filter sees) fail with ENOSYS, so
  programs fall back to ``openat``. Set-uid/set-gid can then not be set through any
  syscall: the kernel clears those bits on write/truncate/chown, never sets them.
- ``keyctl``, ``add_key``, ``request_key`` (ENOSYS): the kernel keyring is not
  namespaced; the session keyring Abhed inherited would be readable and writable.
- On x86_64, the whole x32 ABI (ENOSYS): it duplicates the 64-bit syscalls under other
  numbers; nothing real uses it, and refusing it keeps the filter short and exact.

bwrap's ``--seccomp FD`` takes a compiled classic-BPF program: an array of
``struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }`` run over
``struct seccomp_data { int nr; u32 arch; u64 ip; u64 args[6]; }``.

The program checks the architecture first (a 32-bit process on a 64-bit kernel uses other
syscall numbers) and looks only at the low 32 bits of an argument: the kernel truncates
ioctl's ``cmd`` and every ``mode_t`` to 32 bits, so junk in the high bits changes nothing
and must change nothing here either.
"""

from __future__ import annotations

import errno
import functools
import platform
import struct
import sys

from sandbox.errors import BackendUnavailable

TIOCSTI = 0x5412
TIOCLINUX = 0x541C
SETID_BITS = 0o6000  # S_ISUID | S_ISGID

# Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: load a 32-bit word of seccomp_data
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: jump if accumulator == k
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K: jump if accumulator >= k
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K: jump if accumulator & k
_RET_K = 0x06  # BPF_RET | BPF_K: return k
RET_ALLOW = 0x7FFF0000
RET_EPERM = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO | EPERM
RET_ENOSYS = 0x00050000 | errno.ENOSYS

_OFF_NR = 0
_OFF_ARCH = 4
_LOW = 0 if sys.byteorder == "little" else 4


def _arg_low(index: int) -> int:
    """Offset of the low 32 bits of args[index] in seccomp_data."""
    return 16 + 8 * index + _LOW


# What each filtered syscall gets: "ioctl" (request checked), ("mode", i) (args[i] checked
# for set-id bits), "enosys" (refused outright).
_RULES: dict[str, object] = {
    "ioctl": "ioctl",
    "chmod": ("mode", 1),
    "fchmod": ("mode", 1),
    "fchmodat": ("mode", 2),
    "fchmodat2": ("mode", 2),
    "creat": ("mode", 1),
    "open": ("mode", 2),
    "openat": ("mode", 3),
    "mknod": ("mode", 1),
    "mknodat": ("mode", 2),
    "openat2": "enosys",
    "io_uring_setup": "enosys",
    "keyctl": "enosys",
    "add_key": "enosys",
    "request_key": "enosys",
}

# Syscall numbers per ABI (asm/unistd_*.h; the generic table serves aarch64 and riscv64,
# which have no chmod/open/creat/mknod). 425, 437 and 452 are shared by every ABI.
_COMMON = {"io_uring_setup": 425, "openat2": 437, "fchmodat2": 452}
_X86_64 = {"ioctl": 16, "open": 2, "creat": 85, "chmod": 90, "fchmod": 91, "mknod": 133, "openat": 257, "mknodat": 259,
           "fchmodat": 268, "add_key": 248, "request_key": 249, "keyctl": 250, **_COMMON}  # fmt: skip
_I386 = {"ioctl": 54, "open": 5, "creat": 8, "mknod": 14, "chmod": 15, "fchmod": 94, "openat": 295, "mknodat": 297,
         "fchmodat": 306, "add_key": 286, "request_key": 287, "keyctl": 288, **_COMMON}  # fmt: skip
_GENERIC = {"ioctl": 29, "mknodat": 33, "fchmod": 52, "fchmodat": 53, "openat": 56, "add_key": 217, "request_key": 218,
            "keyctl": 219, **_COMMON}  # fmt: skip
_ARM = {"ioctl": 54, "open": 5, "creat": 8, "mknod": 14, "chmod": 15, "fchmod": 94, "openat": 322, "mknodat": 324,
        "fchmodat": 333, "add_key": 309, "request_key": 310, "keyctl": 311, **_COMMON}  # fmt: skip

X32_SYSCALL_BIT = 0x40000000

# Per host machine: (AUDIT_ARCH value, syscall table, refuse numbers >= X32_SYSCALL_BIT).
_ARCHES: dict[str, tuple[tuple[int, dict[str, int], bool], ...]] = {
    "x86_64": ((0xC000003E, _X86_64, True), (0x40000003, _I386, False)),  # x86_64 (x32 refused), i386
    "aarch64": ((0xC00000B7, _GENERIC, False), (0x40000028, _ARM, False)),  # aarch64, arm (EABI)
    "riscv64": ((0xC00000F3, _GENERIC, False),),
}


def syscall_filter(machine: str | None = None) -> bytes:
    """The compiled filter for this host's architecture, ready to hand to ``bwrap --seccomp``."""
    machine = machine or platform.machine()
    arches = _ARCHES.get(machine)
    if arches is None:
        raise BackendUnavailable(
            f"bwrap backend not available on this host: no seccomp filter for machine type {machine!r} "
            f"(known: {', '.join(sorted(_ARCHES))}). Add its AUDIT_ARCH value and syscall numbers "
            "to sandbox/seccomp.py, or run on a supported architecture."
        )
    return _encode(_program(arches))


def _program(arches: tuple[tuple[int, dict[str, int], bool], ...]) -> list[tuple]:
    # Symbolic program; jump targets are labels, resolved to relative offsets by _encode.
    prog: list[tuple] = [("ld", _OFF_ARCH)]
    for index, (audit_arch, table, refuse_x32) in enumerate(arches):
        next_arch = f"arch{index + 1}"
        prog.append(("jeq", audit_arch, None, next_arch))
        prog.append(("ld", _OFF_NR))
        if refuse_x32:
            prog.append(("jge", X32_SYSCALL_BIT, "enosys", None))
        for name, nr in sorted(table.items(), key=lambda item: item[1]):
            prog.append(("jeq", nr, _label(_RULES[name]), None))
        prog.append(("ret", RET_ALLOW))
        prog.append(("label", next_arch))  # the accumulator still holds the arch here
    prog.append(("ret", RET_ALLOW))  # an architecture this host cannot run: nothing to filter
    prog += [("label", "ioctl"), ("ld", _arg_low(1)), ("jeq", TIOCSTI, "eperm", None), ("jeq", TIOCLINUX, "eperm", None), ("ret", RET_ALLOW)]
    for index in sorted({rule[1] for rule in _RULES.values() if isinstance(rule, tuple)}):
        prog += [("label", f"mode{index}"), ("ld", _arg_low(index)), ("jset", SETID_BITS, "eperm", None), ("ret", RET_ALLOW)]
    prog += [("label", "eperm"), ("ret", RET_EPERM), ("label", "enosys"), ("ret", RET_ENOSYS)]
    return prog


def _label(rule: object) -> str:
    return f"mode{rule[1]}" if isinstance(rule, tuple) else str(rule)


_JUMPS = {"jeq": _JEQ_K, "jge": _JGE_K, "jset": _JSET_K}


def _encode(prog: list[tuple]) -> bytes:
    labels: dict[str, int] = {}
    position = 0
    for op in prog:
        if op[0] == "label":
            labels[op[1]] = position
        else:
            position += 1
    out = bytearray()
    position = 0
    for op in prog:
        kind = op[0]
        if kind == "label":
            continue
        if kind == "ld":
            out += struct.pack("=HBBI", _LD_W_ABS, 0, 0, op[1])
        elif kind == "ret":
            out += struct.pack("=HBBI", _RET_K, 0, 0, op[1])
        else:  # a conditional jump: None means "fall through to the next instruction"
            _, k, if_true, if_false = op
            jt = labels[if_true] - position - 1 if if_true else 0
            jf = labels[if_false] - position - 1 if if_false else 0
            if not (0 <= jt <= 255 and 0 <= jf <= 255):
                raise AssertionError("seccomp program jump out of range")  # cannot happen at this size
            out += struct.pack("=HBBI", _JUMPS[kind], jt, jf, k)
        position += 1
    return bytes(out)


# -- The decoder's filter: an allowlist -------------------------------------------------------
#
# A forked parser of hostile input (Abhed's image and PDF decoders, abhed/common/isolate.py)
# has its input in memory and sends its answer down one pipe: it needs memory, the clock,
# randomness, signals to itself, threads, read/write/close on the descriptors it was left,
# its working directory's name (Pillow's save asks for an absolute path), and exit. Everything else fails with EPERM: it cannot name a file at all (open, stat,
# exec, chmod, rename... -- so none can be read, written, created or made set-uid), make a
# socket, start a process (fork, vfork, clone without CLONE_THREAD; clone3 is ENOSYS so that
# glibc falls back to clone for a thread), trace or signal another process (Abhed included),
# change its prctl state (its parent-death signal stays), or touch the keyring. It may set its own
# interval timers (setitimer: a signal to itself; the approval's parser bounds its CPU with one).
# A stricter filter than the bash sandbox's, which lets a whole shell run: an allowlist names what a
# decoder does, where a denylist would have to foresee every way to reach a file.
# A 32-bit (or x32) syscall matches no allowed number: refused.

CLONE_THREAD = 0x00010000

_DECODER_X86_64 = {"read": 0, "write": 1, "close": 3, "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12,
                   "rt_sigaction": 13, "rt_sigprocmask": 14, "rt_sigreturn": 15, "sched_yield": 24, "mremap": 25,
                   "madvise": 28, "nanosleep": 35, "setitimer": 38, "getpid": 39, "clone": 56, "exit": 60, "kill": 62, "getcwd": 79,
                   "gettimeofday": 96, "getrusage": 98, "sigaltstack": 131, "gettid": 186, "tkill": 200, "futex": 202,
                   "restart_syscall": 219, "clock_gettime": 228, "clock_getres": 229, "clock_nanosleep": 230,
                   "exit_group": 231, "tgkill": 234, "set_robust_list": 273, "getrandom": 318, "rseq": 334,
                   "clone3": 435}  # fmt: skip
_DECODER_GENERIC = {"getcwd": 17, "close": 57, "read": 63, "write": 64, "exit": 93, "exit_group": 94, "futex": 98,
                    "set_robust_list": 99, "nanosleep": 101, "setitimer": 103, "clock_gettime": 113, "clock_getres": 114,
                    "clock_nanosleep": 115, "sched_yield": 124, "restart_syscall": 128, "kill": 129, "tkill": 130,
                    "tgkill": 131, "sigaltstack": 132, "rt_sigaction": 134, "rt_sigprocmask": 135,
                    "rt_sigreturn": 139, "getrusage": 165, "gettimeofday": 169, "getpid": 172, "gettid": 178,
                    "brk": 214, "munmap": 215, "mremap": 216, "clone": 220, "mmap": 222, "mprotect": 226,
                    "madvise": 233, "getrandom": 278, "rseq": 293, "clone3": 435}  # fmt: skip
# The syscalls allowed only with a condition on their first argument, and the one refused with ENOSYS.
_DECODER_RULES = {"kill": "self", "tkill": "self", "tgkill": "self", "clone": "thread", "clone3": "enosys"}
_DECODER_ARCHES = {"x86_64": (0xC000003E, _DECODER_X86_64), "aarch64": (0xC00000B7, _DECODER_GENERIC),
                   "riscv64": (0xC00000F3, _DECODER_GENERIC)}  # fmt: skip


def decoder_filter(pid: int, machine: str | None = None) -> bytes:
    """The allowlist for the decoder process `pid` (the one process it may signal), compiled.

    Assembled once per machine type (in Abhed, before the fork: see abhed/common/confine.py) and
    only the pid written in per child: a forked child pays for every object it touches."""
    program, slot = _decoder_program(machine or platform.machine())
    return program[:slot] + struct.pack("=I", pid) + program[slot + 4:]


@functools.lru_cache(maxsize=None)
def _decoder_program(machine: str) -> tuple[bytes, int]:
    """The compiled allowlist with pid 0, and the byte offset of the pid in it."""
    if machine not in _DECODER_ARCHES:
        raise BackendUnavailable(
            f"no seccomp filter for a decoder on machine type {machine!r} "
            f"(known: {', '.join(sorted(_DECODER_ARCHES))}): add its syscall numbers to sandbox/seccomp.py, or "
            "run on a supported architecture."
        )
    audit_arch, table = _DECODER_ARCHES[machine]
    prog: list[tuple] = [("ld", _OFF_ARCH), ("jeq", audit_arch, None, "eperm"), ("ld", _OFF_NR)]
    for name, nr in sorted(table.items(), key=lambda item: item[1]):  # pragma: no mutate (any order: each test is exact)
        prog.append(("jeq", nr, _DECODER_RULES.get(name, "allow"), None))
    prog += [("ret", RET_EPERM),  # any other syscall
             # kill, tkill, tgkill: the target (first argument) is this process (a forked child has one thread).
             ("label", "self"), ("ld", _arg_low(0))]  # fmt: skip
    slot = 8 * sum(op[0] != "label" for op in prog) + 4  # the k of the next instruction
    prog += [("jeq", 0, "allow", "eperm"),  # pragma: no mutate (0: a placeholder, decoder_filter writes the pid over it)
             ("label", "thread"), ("ld", _arg_low(0)), ("jset", CLONE_THREAD, "allow", "eperm"),
             ("label", "enosys"), ("ret", RET_ENOSYS),
             ("label", "allow"), ("ret", RET_ALLOW),
             ("label", "eperm"), ("ret", RET_EPERM)]  # fmt: skip
    return _encode(prog), slot
