"""hostproc.run(stderr_after=True) (issue 34, stop 44): stderr goes to an anonymous file read once the
child is done, so rg's unbuffered --debug log wakes Abhed for none of its writes. The same bytes as a
pipe gives, the file closed on every path, and a child still stopped at its deadline."""

from __future__ import annotations

import os

import pytest

from abhed.common import hostproc

SH = "/bin/sh"
CHATTY = "i=0; while [ $i -lt 300 ]; do printf 'line %s\\n' $i >&2; i=$((i+1)); done; printf out; exit 3"


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("after", [False, True])
def test_the_same_output_and_status_as_a_pipe(after: bool) -> None:
    before = open_fds()
    done = hostproc.run([SH, "-c", CHATTY], timeout=30, stderr_after=after)
    assert done.returncode == 3 and done.stdout == b"out"
    assert done.stderr == b"".join(b"line %d\n" % i for i in range(300))
    assert open_fds() <= before  # the memfd (and the pipes) closed


def test_a_child_past_its_deadline_is_stopped_and_the_file_closed() -> None:
    before = open_fds()
    with pytest.raises(hostproc.Timeout):
        hostproc.run([SH, "-c", "echo said >&2; exec sleep 30"], timeout=0.5, stderr_after=True)
    assert open_fds() <= before


def test_a_program_that_cannot_start_closes_the_file() -> None:
    before = open_fds()
    with pytest.raises(OSError):
        hostproc.run(["/nonexistent/abhed-no-such-program"], timeout=5, stderr_after=True)
    assert open_fds() <= before


def test_stderr_reaches_the_file_the_child_inherits_not_a_pipe() -> None:
    done = hostproc.run([SH, "-c", "readlink /proc/self/fd/2"], timeout=30, stderr_after=True)
    assert b"memfd:abhed-stderr" in done.stdout
