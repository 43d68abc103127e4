"""The read-only list's parts that tests/test_readonly.py's tables do not reach (mutation testing, issue 31).

Each case is a line that only reads and must stay on the list, or one that writes and must not be
on it; the names are written out here, not read from the module.
"""

from __future__ import annotations

import pytest

from abhed.gate.approval import read_only_command


@pytest.mark.parametrize("line", ["uniq --skip-chars 2 a", "uniq --check-chars 2 a", "uniq --skip-fields 1 a",
                                  "uniq --skip 2 a", "uniq -s 2 -w 3 a"])
def test_uniqs_option_values_are_not_operands(line):
    """The value (the next word) is no output file: one operand, the input."""
    assert read_only_command(line), line
    assert not read_only_command(line + " out"), line  # a second operand is the file uniq writes


@pytest.mark.parametrize("line", ["uniq -- -c out", "uniq --count a out", "uniq --ignore-case a out"])
def test_uniqs_second_operand_is_found_after_dashes_and_flags(line):
    """After `--` every word is an operand; a long flag takes no value: `uniq --count a out` writes out."""
    assert not read_only_command(line), line


@pytest.mark.parametrize("flag", ["--no-pager", "-P", "--no-replace-objects", "--literal-pathspecs",
                                  "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs",
                                  "--no-optional-locks", "--no-advice", "--bare"])
def test_gits_global_flags_that_change_nothing_keep_reading_on_the_list(flag):
    assert read_only_command(f"git {flag} status"), flag
    assert not read_only_command(f"git {flag} commit -m x"), flag


@pytest.mark.parametrize("option", ["-C", "--git-dir", "--work-tree"])
def test_gits_global_options_with_a_value_keep_reading_on_the_list(option):
    assert read_only_command(f"git {option} x log"), option
    assert option == "-C" or read_only_command(f"git {option}=x log"), option
    assert not read_only_command(f"git {option} x"), option  # no subcommand: git -C x alone


BRANCH_LISTING = ("--list --all --remotes --verbose --sort=x --format=x --color --no-color --column --no-column "
                  "--abbrev=7 --no-abbrev --ignore-case --omit-empty --show-current --contains=x --no-contains=x "
                  "--merged=x --no-merged=x --points-at=x")
# What `git tag` does not list with (its -a annotates, -v verifies: they are no listing options of tag).
NOT_FOR_TAG = ("--all", "--remotes", "--verbose", "--show-current", "--abbrev=7", "--no-abbrev")


def test_git_branch_lists_with_every_listing_option_and_every_short_one():
    assert read_only_command("git branch " + BRANCH_LISTING)
    assert read_only_command("git branch -a -r -v -l") and read_only_command("git branch -arvl")
    assert not read_only_command("git branch -arvlD x")  # one more letter: a writing one


def test_git_tag_lists_with_its_own_listing_options_only():
    tag_listing = " ".join(o for o in BRANCH_LISTING.split() if o not in NOT_FOR_TAG)
    assert read_only_command("git tag " + tag_listing)
    for option in NOT_FOR_TAG:
        assert not read_only_command(f"git tag -l {option}"), option
        assert read_only_command(f"git branch --list {option}"), option


@pytest.mark.parametrize("option", ["--contains", "--no-contains", "--merged", "--no-merged", "--points-at"])
def test_a_filter_with_a_name_lists(option):
    """`git branch NAME` creates a branch; with a filter the name is the filter's."""
    assert read_only_command(f"git branch {option} main") and read_only_command(f"git tag {option} v1"), option
    assert not read_only_command("git branch main") and not read_only_command("git tag v1")


def test_git_remote_lists_verbosely_either_way():
    assert read_only_command("git remote -v") and read_only_command("git remote --verbose")
    assert not read_only_command("git remote add x y") and not read_only_command("git remote --verbose add x y")
