"""The disk reserve: free space kept on a filesystem, so that nothing Abhed runs or writes takes the last of it.

Set as a number of bytes, or AUTO (the default): the smaller of 1 GiB and 5% of the filesystem's
size, so a small disk (a CI runner's, a small VM's) keeps a reserve it can afford and a large one
keeps 1 GiB. None or 0: no reserve. A `Reserve` is one filesystem measured against the setting,
and carries what every message about it must say: the free space, the reserve and where that
figure comes from, and which filesystem.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

AUTO = "auto"
AUTO_CAP = 1024**3  # "auto" never keeps more than this ...
AUTO_SHARE = 20  # ... nor more than 1/20 (5%) of the filesystem's size


@dataclass(frozen=True)
class Reserve:
    """The reserve on the filesystem holding `path`: `free` bytes usable there, `amount` to keep."""

    path: Path
    free: int
    amount: int
    origin: str  # where `amount` comes from: the setting, and for "auto" the filesystem's size

    @property
    def short(self) -> bool:
        return self.free < self.amount

    def shortfall(self, where: str) -> str:
        """`where` ("the workspace's filesystem") with its path, its free space and the reserve."""
        return (f"{where} ({self.path}) has {size_text(self.free)} free, under the disk reserve of "
                f"{size_text(self.amount)}, set by {self.origin}")


def measure(path: Path | str, setting: int | str | None, name: str) -> Reserve | None:
    """The reserve `setting` (named `name` in the operator's config) on `path`'s filesystem; None when
    there is none (None or 0) or the filesystem cannot be measured."""
    if not setting:
        return None
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if setting == AUTO:
        total = st.f_blocks * st.f_frsize
        return Reserve(Path(path), free, min(AUTO_CAP, total // AUTO_SHARE),
                       f'{name} = "auto": the smaller of 1 GiB and 5% of this {size_text(total)} filesystem')
    return Reserve(Path(path), free, int(setting), f"{name} = {setting}")


def remedy(name: str) -> str:
    """What to do when a filesystem is under the reserve (named `name` in the operator's config)."""
    return f"Free space on that filesystem, or lower {name} (0 turns the reserve off)"


def valid(setting: object) -> bool:
    """Whether `setting` is a reserve: None, AUTO, or a non-negative integer (not a bool)."""
    if setting is None or setting == AUTO:
        return True
    return isinstance(setting, int) and not isinstance(setting, bool) and setting >= 0


def size_text(count: int) -> str:
    """A byte count as people read it, exact beside it: "40.0 MiB (41,943,040 bytes)"."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            return f"{count / scale:.1f} {unit} ({count:,} bytes)"
    return f"{count:,} bytes"
