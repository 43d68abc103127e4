"""Descriptor-leak checks that other tests' threads cannot disturb.

A test process carries threads from earlier tests (a shared microVM's reader, egress
proxies, pools) that open and close descriptors at any moment, so comparing whole
/proc/self/fd listings fails at random. These look only at descriptors on one tree.
"""

from __future__ import annotations

import os
from pathlib import Path


def _targets() -> list[str]:
    """What each of this process's descriptors points at (a path, "pipe:[N]", "socket:[N]"...)."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:
            pass  # closed since the listing (by another thread, or the listing's own descriptor)
    return targets


def fds_on(tree: Path) -> list[str]:
    """The sorted targets of this process's descriptors on ``tree`` (itself or anything below)."""
    return sorted(target for target in _targets() if target == str(tree) or target.startswith(f"{tree}/"))


def pipes() -> set[str]:
    """The pipes this process holds. Only new ones count as a leak: threads of earlier tests
    (a shared microVM's reader) may close theirs meanwhile."""
    return {target for target in _targets() if target.startswith("pipe:")}
