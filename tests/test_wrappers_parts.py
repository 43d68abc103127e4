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


def test_a_rule_sees_through_at_most_16_wrappers():
    assert wrappers.normal(["nice"] * 16 + ["ls"]) == (["ls"], ("nice",) * 16)
    assert wrappers.normal(["nice"] * 17 + ["ls"]) is None  # a longer chain: a human is asked


def test_a_few_wrappers_before_a_thousand_arguments_are_followed_whole():
    found = wrappers.candidates(["nice"] * 4 + ["rm"] + ["a"] * 1000)
    assert found.complete and found[-1] == (["rm"] + ["a"] * 1000, ("nice",) * 4)
    assert not wrappers.candidates(["nice"] * 4 + ["rm"] + ["a"] * 3000).complete  # the budget is linear


@pytest.mark.parametrize("wrapper", ["nohup", "nice", "timeout", "stdbuf", "env", "xargs", "time", "ionice", "setsid",
                                     "chrt", "taskset", "sudo"])
@pytest.mark.parametrize("mode", ["--help", "--version"])
def test_after_help_or_version_no_command_starts_at_a_known_word(wrapper, mode):
    """`nice --help a b` runs nothing: read generically, every later word may start the command."""
    starts = [argv[:1] for argv, _ in wrappers.candidates([wrapper, mode, "a", "b"])]
    assert ["a"] in starts and ["b"] in starts, starts


@pytest.mark.parametrize("argv, want", [
    (["nice"], [["nice"]]), (["timeout", "5"], [["timeout", "5"]]),  # a wrapper with no command runs nothing
    (["strace", "-f", "--", "-x", "y"], [["strace", "-f", "--", "-x", "y"], ["-x", "y"], ["y"]]),  # after --: any word
    (["strace", "+x", "ls"], [["strace", "+x", "ls"], ["ls"]]),  # +x is an option, as -x
    (["strace", "strace", "ls"], [["strace", "strace", "ls"], ["strace", "ls"], ["ls"]]),  # each suffix once
    (["find", ".", "-exec", "rm", "x"], [["find", ".", "-exec", "rm", "x"], ["rm", "x"]]),  # no terminator: to the end
    (["xargs", "find", ".", "-exec", "rm", "x"],
     [["xargs", "find", ".", "-exec", "rm", "x"], ["find", ".", "-exec", "rm", "x", None], ["rm", "x", None]]),
    (["find", ".", "-exec", ";"], [["find", ".", "-exec", ";"]]),  # an empty command is none
])
def test_the_candidates_of_generic_readings_and_find(argv, want):
    assert [found for found, _ in wrappers.candidates(argv)] == want


def test_the_candidates_stop_where_too_many_commands_wait_to_be_followed():
    argv = ["find", ".", "-exec", "strace"] + ["w"] * 1030 + [";", "-exec", "ls", ";"]
    found = wrappers.candidates(argv)  # strace's 1030 generic starts overflow the queue: cut there
    assert not found.complete and [f[:2] for f, _ in found] == [["find", "."], ["strace", "w"]]


@pytest.mark.parametrize("flag", ["-p", "--paginate", "-P", "--no-pager", "--bare", "--no-replace-objects",
                                  "--no-lazy-fetch", "--no-optional-locks", "--no-advice", "--literal-pathspecs",
                                  "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs"])
def test_gits_plain_flags_take_no_value(flag):
    assert wrappers.normal(["git", flag, "push", "x"]) == (["git", "push", "x"], ())


@pytest.mark.parametrize("option", ["-C", "--work-tree", "--namespace"])
def test_gits_plain_options_take_the_next_word(option):
    assert wrappers.normal(["git", option, "v", "push", "x"]) == (["git", "push", "x"], ())


@pytest.mark.parametrize("argv, want", [(["git-push", "x"], ["git", "push", "x"]), (["git-x"], ["git", "x"]),
                                        (["git-", "x"], ["git-", "x"])])
def test_git_dash_names_are_git_and_the_subcommand(argv, want):
    assert wrappers.normal(argv) == (want, ())
