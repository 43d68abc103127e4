"""The hand-assembled seccomp program, checked by running it in a small classic-BPF interpreter."""

from __future__ import annotations

import errno
import struct

import pytest

from sandbox import BackendUnavailable
from sandbox.seccomp import TIOCLINUX, TIOCSTI, tty_injection_filter

ALLOW = 0x7FFF0000
DENY = 0x00050000 | errno.EPERM
X86_64, I386, AARCH64, ARM = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028


def run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = (0, 0, 0, 0, 0, 0)) -> int:
    """Interpret the subset of classic BPF the filter uses, over a little-endian seccomp_data."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    insns = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == 0x15:  # jeq #k
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.fixture(scope="module")
def x86_program() -> bytes:
    return tty_injection_filter("x86_64")


def test_program_is_a_whole_number_of_instructions(x86_program):
    assert len(x86_program) % 8 == 0 and 0 < len(x86_program) // 8 < 64


@pytest.mark.parametrize(
    ("arch", "nr", "ioctl_request", "verdict"),
    [
        (X86_64, 16, TIOCSTI, DENY),
        (X86_64, 16, TIOCLINUX, DENY),
        (X86_64, 16, 0xFFFFFFFF00000000 | TIOCSTI, DENY),  # the kernel only looks at the low 32 bits
        (X86_64, 16, 0x5413, ALLOW),  # TIOCGWINSZ and every other ioctl pass
        (X86_64, 0x40000000 | 514, TIOCSTI, DENY),  # x32 ABI ioctl
        (X86_64, 54, TIOCSTI, ALLOW),  # 54 is setsockopt on x86_64, not ioctl
        (X86_64, 0, TIOCSTI, ALLOW),  # read()
        (I386, 54, TIOCSTI, DENY),  # 32-bit processes use other syscall numbers
        (I386, 16, TIOCSTI, ALLOW),  # lchown on i386
        (I386, 54, 0x5401, ALLOW),
        (AARCH64, 29, TIOCSTI, ALLOW),  # a foreign architecture cannot run on this host
    ],
)
def test_verdicts_x86_64(x86_program, arch, nr, ioctl_request, verdict):
    assert run_bpf(x86_program, nr, arch, (3, ioctl_request, 0)) == verdict


@pytest.mark.parametrize(("arch", "nr", "verdict"), [(AARCH64, 29, DENY), (ARM, 54, DENY), (AARCH64, 16, ALLOW), (X86_64, 16, ALLOW)])
def test_verdicts_aarch64(arch, nr, verdict):
    assert run_bpf(tty_injection_filter("aarch64"), nr, arch, (3, TIOCSTI, 0)) == verdict


def test_unknown_architecture_fails_closed():
    with pytest.raises(BackendUnavailable) as err:
        tty_injection_filter("sparc64")
    assert "no seccomp filter for machine type 'sparc64'" in str(err.value)
