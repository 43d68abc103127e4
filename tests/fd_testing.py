"""Descriptor-leak checks that other tests' threads cannot disturb.

A test process carries threads from earlier tests (a shared microVM's reader, egress
proxies, pools) that open and close descriptors at any moment, so comparing whole
/proc/self/fd listings fails at random. These look only at descriptors on one tree.
"""

from __future__ import annotations

import os
from pathlib import Path


def fds_on(tree: Path) -> list[str]:
    """The sorted targets of this process's descriptors on ``tree`` (itself or anything below)."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:
            pass  # closed since the listing (by another thread, or the listing's own descriptor)
    return sorted(target for target in targets if target == str(tree) or target.startswith(f"{tree}/"))


def pipes() -> set[str]:
    """The pipes this process holds. Only new ones count as a leak: threads of earlier tests
    (a shared microVM's reader) may close theirs meanwhile."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue  # closed since the listing
        if target.startswith("pipe:"):
            held.add(target)
    return held
