"""Rules against what runs, unit by unit, without running bash (mutation testing, issue 31, item 4).

tests/test_approval_rules.py first runs each spelling under real bash; these are the verdicts alone,
quick enough to run for every mutant of abhed/gate/approval.py.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from abhed.gate.approval import Policy

WS = Path("/nonexistent/ws")
MODES = ("ask", "accept-edits", "auto", "plan")


def verdict(line: str, deny: list[str] = (), allow: list[str] = (), mode: str = "ask", **kw):
    return Policy.create(mode, list(allow), list(deny), WS, **kw).check("bash", SimpleNamespace(command=line))


@pytest.mark.parametrize("rule", ["bash", "bash(*)"])
def test_a_deny_rule_on_the_whole_tool_refuses_every_line_in_every_mode(rule):
    for mode in MODES:
        v = verdict("ls", [rule], ["bash(*)"], mode, undo_gap=None)
        assert (v.decision, v.reason) == ("deny", f"`ls` is forbidden by the operator's rule deny {rule}"), (mode, v)


def test_a_rules_program_is_read_as_a_commands_is():
    """`bash(/usr/bin/rm:*)` is about rm: it denies `rm x`; `bash(/bin/rm:*)` allows `rm x`."""
    assert verdict("rm x", ["bash(/usr/bin/rm:*)"]).decision == "deny"
    assert verdict("rm x", [], ["bash(/bin/rm:*)"]).reason == "allowed by bash(/bin/rm:*)"
    assert verdict("timeout 5 rm x", [], ["bash(nice rm:*)"]).reason == "allowed by bash(nice rm:*)"


def test_when_the_wrappers_cannot_all_be_followed_any_word_naming_the_program_denies():
    line = "nice " * 300 + "rm x"  # more wrappers than candidates are followed
    v = verdict(line, ["bash(rm:*)"])
    assert v.decision == "deny" and v.reason.endswith("is forbidden by the operator's rule deny bash(rm:*)"), v
    v = verdict("nice " * 300 + "ls x", ["bash(rm:*)"])
    assert v.decision == "ask" and "nests too many wrappers to follow" in v.reason, v  # no rm named: asked, not denied
    assert verdict("nice " * 300 + "/usr/bin/rm x", ["bash(rm:*)"]).decision == "deny"


def test_git_dash_names_are_git_subcommands_for_a_rule():
    assert verdict("git-push origin", ["bash(git push:*)"]).decision == "deny"
    assert verdict("git-x y", ["bash(git x:*)"]).decision == "deny"  # the shortest subcommand name
    assert verdict("git- x", ["bash(git:*)"]).decision == "ask"  # `git-` names no subcommand: another program


@pytest.mark.parametrize("line", ["git --version", "git -C . status", "git push-not"])
def test_a_rules_later_word_that_never_comes_does_not_deny(line):
    v = verdict(line, ["bash(git push:*)"])
    assert v.decision != "deny" and "forbidden" not in v.reason, (line, v)


@pytest.mark.parametrize("line, denied", [("rm x", True), ("rm x y", False), ("rm", False),
                                          ("strace rm x \\;", True), ("strace rm x +", True),
                                          ("find . -exec rm x \\;", True)])
def test_an_exact_deny_rule_allows_nothing_after_its_words_but_a_find_terminator(line, denied):
    """A wrapper read generically passes `rm x ;` on as one candidate: the `;` is find's, not rm's."""
    v = verdict(line, ["bash(rm x)"])
    assert (v.decision == "deny") is denied, v


def test_an_allowed_line_names_its_rules_and_says_when_the_rest_only_reads():
    assert verdict("make", allow=["bash(make)"]).reason == "allowed by bash(make)"
    assert verdict("make && ls", allow=["bash(make)"]).reason == "allowed by bash(make) (the other commands only read)"


@pytest.mark.parametrize("line, text", [("rm -rf " + "x" * 300, "rm -rf " + "x" * 300),
                                        ("echo " + "y" * 300 + " > /dev/sda", "echo " + "y" * 300),
                                        ("cp " + "z" * 300 + " .git/config", "cp " + "z" * 300 + " .git/config")])
def test_a_destructive_commands_text_is_cut_to_200_characters_in_the_reason(line, text):
    v = verdict(line, allow=["bash(*)"])
    assert v.destructive and f"(`{text[:200]}`)" in v.reason, v


def test_an_operand_between_a_rules_words_is_no_options_value():
    """`git push y x` pushes to y: `bash(git push x:*)` names another remote."""
    assert verdict("git push y x", ["bash(git push x:*)"]).decision != "deny"
    assert verdict("git push -v x", ["bash(git push x:*)"]).decision == "deny"
