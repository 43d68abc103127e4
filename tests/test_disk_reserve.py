"""The disk reserve scales with the filesystem and says exactly what it did (issue 33, finding 4).

"auto" (the default) keeps the smaller of 1 GiB and 5% of a filesystem's size, so a small disk
is not refused outright; it is checked on the workspace's filesystem (the sandbox) and the session
store's (the bash tool), and a refusal says once that nothing ran, the free space, the reserve and
where it comes from, the filesystem, and what to do. Real tmpfs mounts; the bash tool called as the
agent calls it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from abhed.session import config
from abhed_testing import Tools
from sandbox import reserve

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a small tmpfs")
MiB = 1024**2
SETTING = "sandbox.disk_reserve_bytes"


@pytest.fixture
def mounts(tmp_path: Path) -> Iterator[callable]:
    made: list[Path] = []

    def mount(name: str, size: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True)
        made.append(path)
        return path
    yield mount
    for path in made:
        subprocess.run(["umount", "-l", str(path)], check=True)


def fill_to(path: Path, free: int) -> None:
    """Leave about `free` bytes free on `path`'s filesystem."""
    st = os.statvfs(path)
    with open(path / "filler", "wb") as out:
        out.write(b"f" * (st.f_bavail * st.f_frsize - free))


def auto_origin(size: int) -> str:
    return f'{SETTING} = "auto": the smaller of 1 GiB and 5% of this {reserve.size_text(size)} filesystem'


# -- the setting -------------------------------------------------------------------------------------------

def test_auto_is_the_default_and_a_number_or_none_is_still_honoured() -> None:
    assert config.load({}, env={"ABHED_CONFIG": ""}).sandbox.disk_reserve_bytes == "auto"
    for value in (0, 123, None, "auto"):
        loaded = config.load({"sandbox": {"disk_reserve_bytes": value}}, env={"ABHED_CONFIG": ""})
        assert loaded.sandbox.disk_reserve_bytes == value
    for bad in (-1, "1G", 1.5):
        with pytest.raises(config.ConfigError, match="disk_reserve_bytes"):
            config.load({"sandbox": {"disk_reserve_bytes": bad}}, env={"ABHED_CONFIG": ""})


@needs_root
def test_auto_is_5_percent_of_a_small_filesystem_and_1_gib_at_most(mounts) -> None:
    small = mounts("small", "20m")
    found = reserve.measure(small, "auto", SETTING)
    assert found is not None and found.amount == 20 * MiB // 20 == 1 * MiB
    assert found.origin == auto_origin(20 * MiB)
    big = reserve.measure("/", "auto", SETTING)  # the host's disk: far over 20 GiB here
    st = os.statvfs("/")
    assert big is not None and big.amount == min(1024**3, st.f_blocks * st.f_frsize // 20)
    explicit = reserve.measure(small, 4096, SETTING)
    assert explicit is not None and (explicit.amount, explicit.origin) == (4096, f"{SETTING} = 4096")
    assert reserve.measure(small, 0, SETTING) is None and reserve.measure(small, None, SETTING) is None
    assert reserve.measure(small / "gone", "auto", SETTING) is None  # not measurable: no refusal


def test_sizes_are_written_as_people_read_them_with_the_exact_count() -> None:
    assert reserve.size_text(1024**3) == "1.0 GiB (1,073,741,824 bytes)"
    assert reserve.size_text(3 * MiB // 2) == "1.5 MiB (1,572,864 bytes)"
    assert reserve.size_text(2048) == "2.0 KiB (2,048 bytes)"
    assert reserve.size_text(1023) == "1,023 bytes"
    assert reserve.size_text(0) == "0 bytes"


# -- bash on a small disk ------------------------------------------------------------------------------------

@needs_root
def test_bash_runs_on_a_small_disk_with_5_percent_free(mounts, home: Path) -> None:
    """The report: a filesystem with under 1 GiB free refused every command. Now 5% of it is kept."""
    ws = mounts("ws", "64m")
    fill_to(ws, 8 * MiB)  # 12.5% free: well over 5%, far under 1 GiB
    tools = Tools(ws, home)
    try:
        out = tools.ok("bash", command="echo ran > ran.txt; echo ok", description="write a marker")
    finally:
        tools.ctx.close()
    assert "ok" in out and (ws / "ran.txt").read_text() == "ran\n"


@needs_root
def test_bash_under_the_reserve_on_the_workspace_says_once_that_it_did_not_run(mounts, home: Path) -> None:
    ws = mounts("ws", "64m")
    fill_to(ws, 1 * MiB)  # under 5% of 64 MiB (3.2 MiB)
    tools = Tools(ws, home)
    try:
        result = tools("bash", command="echo ran > ran.txt", description="write a marker")
    finally:
        tools.ctx.close()
    free = os.statvfs(ws).f_bavail * os.statvfs(ws).f_frsize
    assert result.is_error and result.content == (
        f"The command did not run: the workspace's filesystem ({ws}) has {reserve.size_text(free)} free, under the "
        f"disk reserve of {reserve.size_text(64 * MiB // 20)}, set by {auto_origin(64 * MiB)}. Free space on that "
        f"filesystem, or lower {SETTING} (0 turns the reserve off).")
    assert not (ws / "ran.txt").exists()


@needs_root
def test_bash_under_the_reserve_on_the_session_store_names_the_store(mounts, tmp_path: Path) -> None:
    """The workspace has room, the store's disk does not: the call's result must still fit in the log."""
    ws, store = tmp_path / "ws", mounts("store", "20m")
    ws.mkdir()
    tools = Tools(ws, store / "home")
    fill_to(store, 512 * 1024)  # under 5% of 20 MiB (1 MiB)
    try:
        result = tools("bash", command="echo ran > ran.txt", description="write a marker")
        background = tools("bash", command="echo ran > bg.txt", description="a job", background=True)
    finally:
        tools.ctx.close()
    free = os.statvfs(store).f_bavail * os.statvfs(store).f_frsize
    told = (f"the session store's filesystem ({tools.session.dir}) has {reserve.size_text(free)} free, under the disk "
            f"reserve of {reserve.size_text(MiB)}, set by {auto_origin(20 * MiB)}. Free space on that filesystem, or "
            f"lower {SETTING} (0 turns the reserve off).")
    assert result.is_error and result.content == f"The command did not run: {told}"
    assert background.is_error and background.content == f"The background job did not start: {told}"
    assert not (ws / "ran.txt").exists() and not (ws / "bg.txt").exists()


@needs_root
def test_an_explicit_reserve_is_honoured_and_0_turns_it_off(mounts, home: Path) -> None:
    ws = mounts("ws", "64m")
    fill_to(ws, 1 * MiB)
    tools = Tools(ws, home)
    tools.settings.sandbox.disk_reserve_bytes = 2 * MiB
    try:
        refused = tools("bash", command="echo ran > ran.txt", description="write a marker")
    finally:
        tools.ctx.close()
    assert refused.is_error and f"under the disk reserve of 2.0 MiB (2,097,152 bytes), set by {SETTING} = {2 * MiB}." \
        in refused.content
    tools = Tools(ws, home)
    tools.settings.sandbox.disk_reserve_bytes = 0
    try:
        tools.ok("bash", command="echo ran > ran.txt", description="write a marker")
    finally:
        tools.ctx.close()
    assert (ws / "ran.txt").exists()
