"""The hand-assembled seccomp program, checked by running it in a small classic-BPF interpreter.

The escape suite (test_escapes.py) runs the real attacks against the kernel; these tests pin
every verdict of the program itself, per architecture, including the ones no host here runs.
"""

from __future__ import annotations

import struct

import pytest

from sandbox import BackendUnavailable
from sandbox.seccomp import decoder_filter, syscall_filter

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


# -- The decoder's allowlist (decoder_filter) ---------------------------------------------------

# What a decoder may do, by number (asm/unistd_64.h; asm-generic/unistd.h for aarch64 and riscv64),
# written out here: a wrong number in the module must fail these tests.
DECODER_X86_64 = {"read": 0, "write": 1, "close": 3, "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12,
                  "rt_sigaction": 13, "rt_sigprocmask": 14, "rt_sigreturn": 15, "sched_yield": 24, "mremap": 25,
                  "madvise": 28, "nanosleep": 35, "setitimer": 38, "getpid": 39, "exit": 60, "getcwd": 79, "gettimeofday": 96,
                  "getrusage": 98, "sigaltstack": 131, "gettid": 186, "futex": 202, "restart_syscall": 219,
                  "clock_gettime": 228, "clock_getres": 229, "clock_nanosleep": 230, "exit_group": 231,
                  "set_robust_list": 273, "getrandom": 318, "rseq": 334}  # fmt: skip
DECODER_GENERIC = {"getcwd": 17, "close": 57, "read": 63, "write": 64, "exit": 93, "exit_group": 94, "futex": 98,
                   "set_robust_list": 99, "nanosleep": 101, "setitimer": 103, "clock_gettime": 113,
                   "clock_getres": 114, "clock_nanosleep": 115, "sched_yield": 124, "restart_syscall": 128, "sigaltstack": 132,
                   "rt_sigaction": 134, "rt_sigprocmask": 135, "rt_sigreturn": 139, "getrusage": 165,
                   "gettimeofday": 169, "getpid": 172, "gettid": 178, "brk": 214, "munmap": 215, "mremap": 216,
                   "mmap": 222, "mprotect": 226, "madvise": 233, "getrandom": 278, "rseq": 293}  # fmt: skip
# What it may not: every way to name a file, a socket, a process, a debugger, its own prctl state.
REFUSED_X86_64 = {"open": 2, "stat": 4, "fstat": 5, "lseek": 8, "ioctl": 16, "pread64": 17, "access": 21, "dup": 32,
                  "socket": 41, "connect": 42, "sendto": 44, "socketpair": 53, "fork": 57, "vfork": 58, "execve": 59,
                  "fcntl": 72, "truncate": 76, "chdir": 80, "rename": 82, "mkdir": 83, "creat": 85, "link": 86,
                  "unlink": 87, "symlink": 88, "chmod": 90, "fchmod": 91, "chown": 92, "ptrace": 101, "setsid": 112,
                  "mknod": 133, "prctl": 157, "mount": 165, "setxattr": 188, "openat": 257, "newfstatat": 262,
                  "unshare": 272, "prlimit64": 302, "process_vm_readv": 310, "process_vm_writev": 311, "seccomp": 317,
                  "memfd_create": 319, "execveat": 322, "bpf": 321, "statx": 332, "io_uring_setup": 425,
                  "pidfd_open": 434, "openat2": 437, "pidfd_getfd": 438, "fchmodat2": 452, "add_key": 248,
                  "keyctl": 250}  # fmt: skip
REFUSED_GENERIC = {"ioctl": 29, "mknodat": 33, "unlinkat": 35, "linkat": 37, "renameat": 38, "fchmod": 52,
                   "fchmodat": 53, "openat": 56, "lseek": 62, "pread64": 67, "newfstatat": 79, "ptrace": 117,
                   "prctl": 167, "socket": 198, "connect": 203, "execve": 221, "process_vm_readv": 270,
                   "execveat": 281, "statx": 291, "io_uring_setup": 425, "openat2": 437}  # fmt: skip
PID = 4242
CLONE_THREAD, THREAD_FLAGS, FORK_FLAGS = 0x10000, 0x3D0F00, 0x1200011  # glibc's pthread_create, and fork()
DECODER_ARCHES = [("x86_64", X86_64, DECODER_X86_64, REFUSED_X86_64, (62, 200, 234), 56),
                  ("aarch64", AARCH64, DECODER_GENERIC, REFUSED_GENERIC, (129, 130, 131), 220),
                  ("riscv64", RISCV64, DECODER_GENERIC, REFUSED_GENERIC, (129, 130, 131), 220)]  # fmt: skip


@pytest.mark.parametrize(("machine", "arch", "allowed", "refused", "signals", "clone"), DECODER_ARCHES)
def test_the_decoder_may_compute_and_nothing_else(machine, arch, allowed, refused, signals, clone):
    program = decoder_filter(PID, machine)
    for name, nr in allowed.items():
        assert run_bpf(program, nr, arch, (7, 0o4755, 1, 1)) == ALLOW, (machine, name)
    for name, nr in refused.items():
        assert run_bpf(program, nr, arch, (0, 0, 0)) == DENY, (machine, name)
    assert run_bpf(program, 435, arch, (0, 0)) == ENOSYS  # clone3: glibc falls back to clone, checked below
    listed = set(allowed.values()) | set(signals) | {clone, 435}
    assert [nr for nr in range(1000) if nr not in listed and run_bpf(program, nr, arch, (PID,)) != DENY] == []


@pytest.mark.parametrize(("machine", "arch", "allowed", "refused", "signals", "clone"), DECODER_ARCHES)
def test_the_decoder_signals_only_itself_and_starts_only_threads(machine, arch, allowed, refused, signals, clone):
    program = decoder_filter(PID, machine)
    for nr in signals:  # kill, tkill, tgkill
        assert run_bpf(program, nr, arch, (PID, 9)) == ALLOW
        assert run_bpf(program, nr, arch, (0xFFFFFFFF00000000 | PID, 9)) == ALLOW  # pid_t is 32 bits
        for other in (PID - 1, PID + 1, 0, 1, 0xFFFFFFFF, (-PID) & 0xFFFFFFFF):  # another, its group, everyone
            assert run_bpf(program, nr, arch, (other, 9)) == DENY, (machine, nr, other)
    assert run_bpf(program, clone, arch, (THREAD_FLAGS,)) == ALLOW
    assert run_bpf(program, clone, arch, (CLONE_THREAD,)) == ALLOW
    assert run_bpf(program, clone, arch, (FORK_FLAGS,)) == DENY
    assert run_bpf(program, clone, arch, (THREAD_FLAGS & ~CLONE_THREAD,)) == DENY


def test_the_decoder_gets_no_other_abi():
    program = decoder_filter(PID, "x86_64")
    assert run_bpf(program, 0, I386, (PID,)) == DENY  # a 32-bit syscall (int 0x80) is refused whatever it is
    assert run_bpf(program, 3, I386, (PID,)) == DENY
    assert run_bpf(program, 0x40000000 | 0, X86_64, (PID,)) == DENY  # x32 read
    assert run_bpf(program, 0x40000000 | 1, X86_64, (PID,)) == DENY
    assert run_bpf(decoder_filter(PID, "aarch64"), 63, ARM, (PID,)) == DENY


def test_the_decoder_filter_fails_closed_on_an_unknown_machine():
    with pytest.raises(BackendUnavailable, match=r"^no seccomp filter for a decoder on machine type 'sparc64' "
                                                 r"\(known: aarch64, riscv64, x86_64\)"):
        decoder_filter(PID, "sparc64")
