"""A tiny seccomp filter, assembled by hand: ioctl(TIOCSTI) and ioctl(TIOCLINUX) fail with EPERM.

Why: TIOCSTI pushes characters into a terminal's input queue, i.e. it types commands into
whatever shell owns that terminal; TIOCLINUX can do the same through the console selection.
bwrap's --new-session already leaves the command without a controlling terminal and the
launcher gives it no terminal fd, so there is no terminal to reach; this filter is the
second wall, in case a terminal fd ever leaks in.

bwrap's ``--seccomp FD`` takes a compiled classic-BPF program: an array of
``struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }`` run over
``struct seccomp_data { int nr; u32 arch; u64 ip; u64 args[6]; }``.

The program checks the architecture first (a 32-bit process on a 64-bit kernel uses other
syscall numbers) and compares only the low 32 bits of the request: the kernel truncates
ioctl's ``cmd`` to ``unsigned int``, so a request with junk in the high bits still means
TIOCSTI and must still be refused.
"""

from __future__ import annotations

import errno
import platform
import struct
import sys

from sandbox.errors import BackendUnavailable

TIOCSTI = 0x5412
TIOCLINUX = 0x541C

# Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: load a 32-bit word of seccomp_data
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: compare the accumulator with k
_RET_K = 0x06  # BPF_RET | BPF_K: return k
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO | EPERM

_OFF_NR = 0
_OFF_ARCH = 4
# args[1] (the ioctl request) starts at 16 + 8; its low 32 bits come first on little-endian.
_OFF_REQUEST_LOW = 24 if sys.byteorder == "little" else 28

# Per host machine: (AUDIT_ARCH value, ioctl syscall numbers under that arch). The x32 ABI
# shares AUDIT_ARCH_X86_64 and sets bit 30 in the syscall number.
_ARCHES: dict[str, tuple[tuple[int, tuple[int, ...]], ...]] = {
    "x86_64": ((0xC000003E, (16, 0x40000000 | 514)), (0x40000003, (54,))),  # x86_64 (+x32), i386
    "aarch64": ((0xC00000B7, (29,)), (0x40000028, (54,))),  # aarch64, arm (EABI)
    "riscv64": ((0xC00000F3, (29,)),),
}


def tty_injection_filter(machine: str | None = None) -> bytes:
    """The compiled filter for this host's architecture, ready to hand to ``bwrap --seccomp``."""
    machine = machine or platform.machine()
    arches = _ARCHES.get(machine)
    if arches is None:
        raise BackendUnavailable(
            f"bwrap backend not available on this host: no seccomp filter for machine type {machine!r} "
            f"(known: {', '.join(sorted(_ARCHES))}). Add its AUDIT_ARCH value and ioctl syscall number "
            "to sandbox/seccomp.py, or run on a supported architecture."
        )
    return _assemble(arches)


def _assemble(arches: tuple[tuple[int, tuple[int, ...]], ...]) -> bytes:
    # Symbolic program; jump targets are labels, resolved to relative offsets below.
    prog: list[tuple] = [("ld", _OFF_ARCH)]
    for index, (audit_arch, ioctl_nrs) in enumerate(arches):
        next_arch = f"arch{index + 1}"
        prog.append(("jeq", audit_arch, None, next_arch))
        prog.append(("ld", _OFF_NR))
        for nr in ioctl_nrs:
            prog.append(("jeq", nr, "request", None))
        prog.append(("ret", _RET_ALLOW))
        prog.append(("label", next_arch))  # the accumulator still holds the arch here
    prog.append(("ret", _RET_ALLOW))  # an architecture this host cannot run: nothing to filter
    prog.append(("label", "request"))
    prog.append(("ld", _OFF_REQUEST_LOW))
    prog.append(("jeq", TIOCSTI, "deny", None))
    prog.append(("jeq", TIOCLINUX, "deny", None))
    prog.append(("ret", _RET_ALLOW))
    prog.append(("label", "deny"))
    prog.append(("ret", _RET_EPERM))
    return _encode(prog)


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
        else:  # jeq: None means "fall through to the next instruction"
            _, k, if_true, if_false = op
            jt = labels[if_true] - position - 1 if if_true else 0
            jf = labels[if_false] - position - 1 if if_false else 0
            if not (0 <= jt <= 255 and 0 <= jf <= 255):
                raise AssertionError("seccomp program jump out of range")  # cannot happen at this size
            out += struct.pack("=HBBI", _JEQ_K, jt, jf, k)
        position += 1
    return bytes(out)
