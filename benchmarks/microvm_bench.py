"""The microvm backend beside bwrap: boot time, and the per-call cost of a warm session.

    .venv/bin/python benchmarks/microvm_bench.py [--rounds N] [--accel auto|kvm|tcg]

Both backends run the same commands through the same ``Sandbox`` API in one run: ``true``,
``python3 -c pass`` and a command printing 10 MB (kept to 30 000 characters, as the bash tool
does). Printed: the median of ``--rounds`` calls each, and the ratio microvm / bwrap. The VM
boots once per session (``boot``), then every call reuses it.

Boot under TCG: the image boots an uncompressed vmlinux through its PVH entry point. With
the bzImage it replaced, the kernel spent most of the boot decompressing itself under
emulation: measured here (load ~13 on 2 cores), 24 s of the 34 s to the guest's /init went
to decompression; with vmlinux /init ran 6 s after qemu started. The rest of a boot is the
agent's Python starting over 9p and the first mounts.

What KVM would change: under TCG (software emulation, what hosts that are themselves VMs
without nested virtualisation get) every guest instruction is translated, so boot and each
call's fork/exec/mount work cost many times what they cost natively. Under KVM the guest
runs on the CPU directly: boot drops to well under a second with this kernel and the
per-call overhead to the 9p round trips and the agent's namespace setup, typically a few
milliseconds to tens of milliseconds beside bwrap. The script says which accelerator it got.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import sandbox
from sandbox import microvm

COMMANDS = {
    "true": "true",
    "python3 -c pass": "python3 -c pass",
    "10 MB output": "head -c 10000000 /dev/zero | tr '\\0' x",
}


def timed(box: sandbox.Sandbox, command: str, workspace: Path) -> float:
    start = time.perf_counter()
    result = box.run(command, cwd=workspace, timeout_s=3600, output_limit_chars=30_000)
    elapsed = time.perf_counter() - start
    if result.exit_code != 0:
        raise SystemExit(f"{command!r} failed under {result.backend}: {result.output[-500:]}")
    return elapsed


def measure(config: sandbox.SandboxConfig, workspace: Path, rounds: int) -> tuple[float, dict[str, float], sandbox.Sandbox]:
    start = time.perf_counter()
    box = sandbox.Sandbox(config, workspace)
    box.run("true", cwd=workspace, timeout_s=3600)  # the first call boots the VM (microvm)
    boot = time.perf_counter() - start
    medians = {name: statistics.median(timed(box, cmd, workspace) for _ in range(rounds)) for name, cmd in COMMANDS.items()}
    return boot, medians, box


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="abhed-microvm-bench-") as tmp:
        workspace = Path(tmp)
        bwrap_boot, bwrap, box = measure(sandbox.SandboxConfig(), workspace, args.rounds)
        box.close()
        vm_config = sandbox.SandboxConfig(backend="microvm", microvm=sandbox.MicrovmConfig(accel=args.accel))
        vm_boot, vm, box = measure(vm_config, workspace, args.rounds)
        accel = "KVM" if box._launcher._vm.spec.kvm else "TCG (software emulation)"
        box.close()
    print(f"microvm accelerator: {accel}; {args.rounds} rounds, medians")
    print(f"{'':24}{'bwrap':>12}{'microvm':>12}{'ratio':>10}")
    print(f"{'session + first call':24}{bwrap_boot:>11.3f}s{vm_boot:>11.3f}s{vm_boot / bwrap_boot:>9.1f}x")
    for name in COMMANDS:
        print(f"{name:24}{bwrap[name]:>11.3f}s{vm[name]:>11.3f}s{vm[name] / bwrap[name]:>9.1f}x")
    if "TCG" in accel:
        print(f"no KVM here ({microvm.kvm_usable() or 'KVM did not boot a guest'}): see the module docstring for what KVM changes.")


if __name__ == "__main__":
    main()
