"""The microvm backend: the planned interface, and why it is not available yet.

Not built yet; a later issue builds it. Choosing ``backend="microvm"`` raises
``BackendUnavailable("microvm backend not available on this host: <why>")`` so the operator
learns what is missing on this host and what the backend will need.

What a microvm backend takes (the same ``Sandbox`` API on top, one VM per session):

- Hypervisor: a KVM-based VMM -- firecracker or cloud-hypervisor (small, fast boot), or
  qemu-system-<arch> with ``-M microvm`` -- and read-write access to ``/dev/kvm``.
- Guest kernel: an uncompressed ``vmlinux`` built with virtio-fs, virtio-vsock, and a
  minimal driver set; shipped by the operator, path in the configuration.
- Root filesystem: a read-only image with the toolchain the projects need (what bwrap
  now takes from the host's ``/usr``), plus a small guest agent as init.
- Workspace: shared into the guest with virtio-fs (virtiofsd on the host, sandboxed, with
  the protected paths exported read-only) at the same absolute path as on the host.
- I/O: commands, output, exit codes and final cwd over vsock between the launcher and the
  guest agent (the same protocol as the bwrap wrapper: 'R', output stream, cwd record).
- Network: no virtio-net device unless ``allow_network``; then a tap device with the
  operator's filtering.
- Limits: the VM's vCPU and memory size, and rlimits/cgroups applied by the guest agent.
- Lifetime: the VMM runs with PR_SET_PDEATHSIG and in Abhed's process group; closing the
  session powers the VM off, so background jobs die with it.
"""

from __future__ import annotations

import os
import shutil

from sandbox.errors import BackendUnavailable

VMMS = ("firecracker", "cloud-hypervisor", "qemu-system-x86_64", "qemu-system-aarch64")


def missing_requirements() -> list[str]:
    """What this host lacks for a microvm backend (empty would mean: only the code is missing)."""
    missing = []
    if not os.path.exists("/dev/kvm"):
        missing.append("no /dev/kvm (KVM is not enabled, or this host is itself a VM without nested virtualisation)")
    elif not os.access("/dev/kvm", os.R_OK | os.W_OK):
        missing.append("/dev/kvm is not readable and writable by this user (add the user to the 'kvm' group)")
    # Looked up on PATH only to say what is there; the backend itself will take an absolute path.
    if not any(shutil.which(vmm) for vmm in VMMS):
        missing.append(f"no VMM binary found ({', '.join(VMMS)})")
    return missing


def unavailable() -> BackendUnavailable:
    reasons = missing_requirements()
    reasons.append("the microvm backend is not implemented yet (guest kernel, rootfs, virtio-fs and vsock agent are planned)")
    return BackendUnavailable(
        "microvm backend not available on this host: "
        + "; ".join(reasons)
        + ". Use backend 'bwrap' (the default) for now; see sandbox/microvm.py for what the microvm backend will need."
    )
