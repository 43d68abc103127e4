"""What a rule is checked against, wrapper by wrapper (mutation testing, issue 31, item 4).

The wrappers are written out here, not read from abhed/gate/wrappers.py, so a name dropped from
its tables is a failing test.
"""

from __future__ import annotations

import pytest

from abhed.gate import wrappers

# Each transparent wrapper, in a spelling its option table reads exactly.
TRANSPARENT = ["command", "builtin", "exec", "nohup", "eatmydata", "nice", "timeout 5", "stdbuf -o0", "time",
               "ionice -c3", "setsid", "chrt 5", "taskset 0x3", "env"]
# Wrappers a rule never sees through: another user, root or namespace, arguments read at run time, tracing.
OPAQUE = ["sudo", "doas", "xargs", "flock f", "unshare", "strace", "chroot /", "setpriv", "nsenter", "runuser",
          "busybox", "fakeroot", "firejail", "valgrind", "bwrap", "watch", "parallel", "su", "script"]


@pytest.mark.parametrize("wrapper", TRANSPARENT)
def test_a_rule_sees_through_each_transparent_wrapper(wrapper):
    name = wrapper.split()[0]
    assert wrappers.normal(wrapper.split() + ["/bin/ls", "-l"]) == (["ls", "-l"], (name,))
    assert wrappers.normal(["nice"] + wrapper.split() + ["ls"]) == (["ls"], ("nice", name))


@pytest.mark.parametrize("wrapper", OPAQUE)
def test_a_rule_never_sees_through_the_others(wrapper):
    assert wrappers.normal(wrapper.split() + ["ls", "-l"]) is None
    assert wrappers.program(wrappers.candidates(wrapper.split() + ["ls", "-l"])[-1][0]) == "ls"  # a deny rule does
