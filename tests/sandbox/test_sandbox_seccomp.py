"""The hand-assembled seccomp program, checked by running it in a small classic-BPF interpreter.

The escape suite (test_escapes.py) runs the real attacks against the kernel; these tests pin
every verdict of the program itself, per architecture, including the ones no host here runs.
"""

from __future__ import annotations

import struct

import pytest

from sandbox import BackendUnavailable
from sandbox.seccomp import syscall_filter

# Written out, not imported: a wrong constant in the module must fail these tests.
ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
DENY = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
ENOSYS = 0x00050000 | 38  # SECCOMP_RET_ERRNO | ENOSYS
TIOCSTI, TIOCLINUX = 0x5412, 0x541C

X86_64, I386, AARCH64, ARM, RISCV64 = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028, 0xC00000F3


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
        elif code == 0x35:  # jge #k
            pc += 1 + (jt if acc >= k else jf)
        elif code == 0x45:  # jset #k
            pc += 1 + (jt if acc & k else jf)
        elif code == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.fixture(scope="module")
def x86_program() -> bytes:
    return syscall_filter("x86_64")


def test_program_is_a_whole_number_of_instructions(x86_program):
    assert len(x86_program) % 8 == 0 and 0 < len(x86_program) // 8 < 128


@pytest.mark.parametrize(
    ("arch", "nr", "ioctl_request", "verdict"),
    [
        (X86_64, 16, TIOCSTI, DENY),
        (X86_64, 16, TIOCLINUX, DENY),
        (X86_64, 16, 0xFFFFFFFF00000000 | TIOCSTI, DENY),  # the kernel only looks at the low 32 bits
        (X86_64, 16, 0x5413, ALLOW),  # TIOCGWINSZ and every other ioctl pass
        (X86_64, 0x40000000 | 514, TIOCSTI, ENOSYS),  # x32 ABI: refused as a whole
        (X86_64, 0x40000000 | 0, 0, ENOSYS),
        (X86_64, 54, TIOCSTI, ALLOW),  # 54 is setsockopt on x86_64, not ioctl
        (X86_64, 0, TIOCSTI, ALLOW),  # read()
        (I386, 54, TIOCSTI, DENY),  # 32-bit processes use other syscall numbers
        (I386, 54, TIOCLINUX, DENY),
        (I386, 16, TIOCSTI, ALLOW),  # lchown on i386
        (I386, 54, 0x5401, ALLOW),
        (AARCH64, 29, TIOCSTI, ALLOW),  # a foreign architecture cannot run on this host
    ],
)
def test_ioctl_verdicts_x86_64(x86_program, arch, nr, ioctl_request, verdict):
    assert run_bpf(x86_program, nr, arch, (3, ioctl_request, 0)) == verdict


# (syscall, arch, nr, index of the mode argument) for every mode-taking syscall of every ABI.
MODE_SYSCALLS = [
    ("chmod", X86_64, 90, 1), ("fchmod", X86_64, 91, 1), ("fchmodat", X86_64, 268, 2), ("fchmodat2", X86_64, 452, 2),
    ("creat", X86_64, 85, 1), ("open", X86_64, 2, 2), ("openat", X86_64, 257, 3), ("mknod", X86_64, 133, 1),
    ("mknodat", X86_64, 259, 2),
    ("chmod", I386, 15, 1), ("fchmod", I386, 94, 1), ("fchmodat", I386, 306, 2), ("fchmodat2", I386, 452, 2),
    ("creat", I386, 8, 1), ("open", I386, 5, 2), ("openat", I386, 295, 3), ("mknod", I386, 14, 1),
    ("mknodat", I386, 297, 2),
]  # fmt: skip


@pytest.mark.parametrize(("name", "arch", "nr", "index"), MODE_SYSCALLS)
def test_setid_modes_are_refused_and_others_pass(x86_program, name, arch, nr, index):
    def verdict(mode: int) -> int:
        args = [3, 0, 0, 0, 0, 0]
        args[index] = mode
        # Every other argument carries the set-uid bit: only the mode argument may decide.
        for other in range(4):
            if other != index:
                args[other] |= 0o4000
        return run_bpf(x86_program, nr, arch, tuple(args))

    assert verdict(0o4755) == DENY, name
    assert verdict(0o2755) == DENY, name
    assert verdict(0o6000) == DENY, name
    assert verdict(0xFFFFFFFF00000000 | 0o4755) == DENY, name  # mode_t is 32 bits
    assert verdict(0o1777) == ALLOW, name  # the sticky bit is harmless
    assert verdict(0o755) == ALLOW, name
    assert verdict(0xFFFFFFFF00000000 | 0o644) == ALLOW, name


@pytest.mark.parametrize(
    ("arch", "nr"),
    [(X86_64, 250), (X86_64, 248), (X86_64, 249), (X86_64, 437), (X86_64, 425), (I386, 288), (I386, 286), (I386, 287), (I386, 437), (I386, 425)],
)
def test_keyring_openat2_and_io_uring_are_refused(x86_program, arch, nr):
    assert run_bpf(x86_program, nr, arch, (0, 0, 0)) == ENOSYS


@pytest.mark.parametrize(
    ("machine", "arch", "nr", "args", "verdict"),
    [
        ("aarch64", AARCH64, 29, (3, TIOCSTI), DENY),
        ("aarch64", ARM, 54, (3, TIOCSTI), DENY),
        ("aarch64", AARCH64, 16, (3, TIOCSTI), ALLOW),
        ("aarch64", X86_64, 16, (3, TIOCSTI), ALLOW),
        ("aarch64", AARCH64, 52, (3, 0o4755), DENY),  # fchmod
        ("aarch64", AARCH64, 53, (3, 0, 0o2755), DENY),  # fchmodat
        ("aarch64", AARCH64, 56, (3, 0, 0x41, 0o4755), DENY),  # openat
        ("aarch64", AARCH64, 33, (3, 0, 0o104755), DENY),  # mknodat
        ("aarch64", AARCH64, 56, (3, 0, 0x41, 0o755), ALLOW),
        ("aarch64", AARCH64, 219, (), ENOSYS),  # keyctl
        ("aarch64", AARCH64, 217, (), ENOSYS),  # add_key
        ("aarch64", AARCH64, 218, (), ENOSYS),  # request_key
        ("aarch64", ARM, 15, (0, 0o4755), DENY),  # chmod
        ("aarch64", ARM, 333, (3, 0, 0o4755), DENY),  # fchmodat
        ("aarch64", ARM, 322, (3, 0, 0x41, 0o6755), DENY),  # openat
        ("aarch64", ARM, 311, (), ENOSYS),  # keyctl
        ("riscv64", RISCV64, 52, (3, 0o4755), DENY),
        ("riscv64", RISCV64, 29, (3, TIOCSTI), DENY),
        ("riscv64", RISCV64, 219, (), ENOSYS),
        ("riscv64", RISCV64, 52, (3, 0o755), ALLOW),
    ],
)
def test_verdicts_other_machines(machine, arch, nr, args, verdict):
    assert run_bpf(syscall_filter(machine), nr, arch, args) == verdict


def test_unknown_architecture_fails_closed():
    with pytest.raises(BackendUnavailable) as err:
        syscall_filter("sparc64")
    assert "no seccomp filter for machine type 'sparc64'" in str(err.value)


# Syscall numbers from the kernel's tables (asm/unistd_64.h, unistd_32.h, asm-generic/unistd.h,
# arm's unistd.h), written out so a wrong number in the module fails here.
TABLES = {
    "x86_64": {X86_64: {"chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "creat": 85, "open": 2, "openat": 257,
                        "mknod": 133, "mknodat": 259, "keyctl": 250, "add_key": 248, "request_key": 249, "openat2": 437,
                        "io_uring_setup": 425},
               I386: {"chmod": 15, "fchmod": 94, "fchmodat": 306, "fchmodat2": 452, "creat": 8, "open": 5, "openat": 295,
                      "mknod": 14, "mknodat": 297, "keyctl": 288, "add_key": 286, "request_key": 287, "openat2": 437,
                      "io_uring_setup": 425}},
    "aarch64": {AARCH64: {"fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "openat": 56, "mknodat": 33, "keyctl": 219,
                          "add_key": 217, "request_key": 218, "openat2": 437, "io_uring_setup": 425},
                ARM: {"chmod": 15, "fchmod": 94, "fchmodat": 333, "fchmodat2": 452, "creat": 8, "open": 5, "openat": 322,
                      "mknod": 14, "mknodat": 324, "keyctl": 311, "add_key": 309, "request_key": 310, "openat2": 437,
                      "io_uring_setup": 425}},
    "riscv64": {RISCV64: {"fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "openat": 56, "mknodat": 33, "keyctl": 219,
                          "add_key": 217, "request_key": 218, "openat2": 437, "io_uring_setup": 425}},
}  # fmt: skip
MODE_INDEX = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "creat": 1, "open": 2, "openat": 3, "mknod": 1, "mknodat": 2}
CASES = [(machine, arch, name, nr) for machine, arches in TABLES.items() for arch, table in arches.items() for name, nr in table.items()]


@pytest.mark.parametrize(("machine", "arch", "name", "nr"), CASES)
def test_every_syscall_of_every_abi(machine, arch, name, nr):
    program = syscall_filter(machine)
    if name in MODE_INDEX:
        setid = [0] * 6
        setid[MODE_INDEX[name]] = 0o4755
        plain = [0] * 6
        plain[MODE_INDEX[name]] = 0o755
        assert run_bpf(program, nr, arch, tuple(setid)) == DENY, (machine, name)
        assert run_bpf(program, nr, arch, tuple(plain)) == ALLOW, (machine, name)
    else:
        assert run_bpf(program, nr, arch, (0, 0, 0)) == ENOSYS, (machine, name)
    assert run_bpf(program, nr + 1000, arch, (0, 0o4755, 0o4755, 0o4755)) == ALLOW  # a neighbour number passes


@pytest.mark.parametrize("machine", ["aarch64", "riscv64"])
def test_only_x86_64_refuses_numbers_with_the_x32_bit(machine):
    arch = AARCH64 if machine == "aarch64" else RISCV64
    assert run_bpf(syscall_filter(machine), 0x40000000 | 63, arch, (0, 0, 0)) == ALLOW
    assert run_bpf(syscall_filter("aarch64"), 0x40000000 | 3, ARM, (0, 0, 0)) == ALLOW


def test_non_jump_instructions_are_canonical():
    """Loads and returns carry jt = jf = 0, as every BPF assembler writes them."""
    for machine in TABLES:
        program = syscall_filter(machine)
        for offset in range(0, len(program), 8):
            code, jt, jf, _k = struct.unpack("=HBBI", program[offset : offset + 8])
            if code in (0x20, 0x06):
                assert (jt, jf) == (0, 0), (machine, offset // 8)


def test_a_jump_too_far_for_classic_bpf_is_refused_at_assembly():
    from sandbox import seccomp

    far = [("ld", 0), ("jeq", 1, "end", None)] + [("ret", 0)] * 300 + [("label", "end"), ("ret", 0)]
    with pytest.raises(AssertionError, match="jump out of range"):
        seccomp._encode(far)
    back = [("label", "top"), ("ld", 0), ("jeq", 1, None, "top")]  # classic BPF jumps only forward
    with pytest.raises(AssertionError, match="jump out of range"):
        seccomp._encode(back)
    near = [("ld", 0), ("jeq", 1, "end", None)] + [("ret", 0)] * 255 + [("label", "end"), ("ret", 0)]
    assert len(seccomp._encode(near)) == 8 * 258
