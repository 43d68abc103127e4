"""Never a crash: generated bash-like lines through every part of the approval layer (hypothesis).

The lines are built from the words and shapes the layer treats specially -- wrappers and their
options, `find -exec ... ;` with and without its command or terminator, git's global options,
shells with -c, substitutions, quotes, here-documents, redirects, operators, Unicode that a
terminal hides -- so the paths where an argv is indexed are reached, not only the tokenizer. Every
function a tool call reaches must return: an exception here would end `abhed run` for the model.
The suite runs a bounded number of examples; `ABHED_FUZZ_EXAMPLES=100000` runs more by hand.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abhed.cli.approvals import choices, exact_rules, prefix_rules
from abhed.common.terminal import printable
from abhed.gate import runoptions, wrappers
from abhed.gate.approval import Policy, Rule, Verdict, read_only_command, refusal, unwrap
from abhed.gate.interactive import interactive_reason
from abhed.gate.shellparse import Command, analyze

EXAMPLES = int(os.environ.get("ABHED_FUZZ_EXAMPLES", "300"))
WORKSPACE = Path("/nonexistent-workspace")

PROGRAMS = ["rm", "/bin/rm", "git", "git-push", "npm", "make", "pytest", "python3", "ls", "cat", "echo", "sh", "bash",
            "ssh", "cd", "set", "declare", "read", "printf", "test", "[", "export", "unset", "trap", "eval", "."]
WRAPPER_WORDS = sorted(wrappers.WRAPPERS)
OPTIONS = ["-", "--", "-rf", "-c", "-u", "root", "-n", "5", "-s", "KILL", "-k", "--signal", "--sig=9", "-C", ".",
           "--no-pager", "-p", "--git-dir=x", "-c", "a=b", "--script-shell=./x", "-e", "-f", "-i", "-v", "-I{}", "-0",
           "-exec", "-execdir", "-ok", ";", "+", "{}", "-delete", "-m", "-o", "errexit", "A=1", "BASH_ENV=x", "%",
           "-x", "-S", "--split-string", "+o", "-O", "--", "push", "status", "test", "run", "grep", "-O", "bisect"]
ODD = ["\u2028", "\u200b", "\ufeff", "\U000e0041", "\u202e", "\x1b[1A", "é", "\\", "\\\n", "*", "?", "[a]", "{a,b}",
       "~", "$x", "${x}", "${x:-y}", "${!x}", "$(ls)", "`ls`", "$((1))", "<(ls)", "'q'", '"d $x"', "$'\\x72m'", "#c"]
OPERATORS = [" ; ", " | ", " && ", " || ", " & ", "\n", " |& "]
REDIRECTS = ["> f", ">> f", "2>&1", "< f", "<<< w", "> /dev/sda", "> .git/config", ">", "<<EOF\nbody\nEOF\n", "&>"]

words = st.one_of(st.sampled_from(PROGRAMS), st.sampled_from(WRAPPER_WORDS), st.sampled_from(OPTIONS),
                  st.sampled_from(ODD), st.text(alphabet="ab-=.:/+@", min_size=1, max_size=6))


@st.composite
def simple(draw) -> str:
    head = draw(st.lists(st.sampled_from(WRAPPER_WORDS + OPTIONS[:12]), max_size=4))
    body = draw(st.lists(words, max_size=8))
    tail = draw(st.lists(st.sampled_from(REDIRECTS), max_size=2))
    return " ".join(head + [draw(st.sampled_from(PROGRAMS + WRAPPER_WORDS))] + body + tail)


def compound(inner):
    return st.one_of(
        st.builds(lambda a, op, b: a + op + b, inner, st.sampled_from(OPERATORS), inner),
        inner.map(lambda s: f"( {s} )"), inner.map(lambda s: f"{{ {s}; }}"), inner.map(lambda s: f"echo $( {s} )"),
        inner.map(lambda s: f"bash -c '{s}'"), inner.map(lambda s: f"sh -c \"{s}\""), inner.map(lambda s: f"! {s}"),
        inner.map(lambda s: f"for i in 1 2; do {s}; done"), inner.map(lambda s: f"if {s}; then {s}; fi"),
        inner.map(lambda s: f"f() {{ {s}; }}; f"), inner.map(lambda s: f"ssh host {s}"),
        inner.map(lambda s: f"find . -exec {s} \\;"), inner.map(lambda s: f"xargs {s}"),
    )


lines = st.recursive(simple(), compound, max_leaves=6) | st.text(max_size=40)
argvs = st.lists(st.one_of(st.none(), words), max_size=10)
RULES = ["bash(rm:*)", "bash(git push:*)", "bash(npm test)", "bash(timeout:*)", "bash(*)", "bash", "bash(/bin/rm x)",
         "bash(make -f ci.mk:*)", "bash(git-push:*)", "bash(python3 -m pytest:*)", "bash(a:*)", "bash(-)"]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(line=lines, allow=st.lists(st.sampled_from(RULES), max_size=3), deny=st.lists(st.sampled_from(RULES), max_size=2))
def test_no_line_makes_the_approval_layer_raise(line, allow, deny):
    analysis = analyze(line)
    args = SimpleNamespace(command=line)
    for mode in ("ask", "auto", "plan", "accept-edits"):
        policy = Policy.create(mode, allow, deny, WORKSPACE)
        verdict = policy.check("bash", args)
        assert verdict.decision in ("allow", "ask", "deny")
        if verdict.decision == "allow":
            assert analysis.whole  # what was never read is never allowed
        printable(refusal("bash", verdict, args))
        for choice in choices("bash", args, verdict, policy, can_save=True):
            printable(choice.label)
    exact_rules("bash", args, WORKSPACE)
    prefix_rules("bash", args, WORKSPACE)
    read_only_command(line)
    interactive_reason(analysis)
    printable(line)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(argv=argvs, rule=st.sampled_from(RULES), covered=st.integers(0, 12))
def test_no_argv_makes_wrappers_rules_or_run_options_raise(argv, rule, covered):
    wrappers.candidates(argv)
    wrappers.primary(argv)
    unwrap(Command(argv))
    found = wrappers.normal(argv)
    if found and None not in found[0]:
        runoptions.reason(found[0], covered)
    parsed = Rule.parse(rule)
    parsed.allows(Command(argv))
    parsed.denies(Command(argv))
    for at in range(len(argv)):
        wrappers.parse(argv, at)


def test_the_issues_crashes_are_decisions_now():
    policy = Policy.create("ask", [], [], WORKSPACE)
    for line in ("find -exec", "find . -exec \\;", "find . -exec", "find -execdir ;", "nice find . -ok +", "xargs find -exec",
                 'sh -c "sh -c "rm <<EOF\nbody\nEOF\n""', '"" x', "timeout 5 ''"):
        assert isinstance(policy.check("bash", SimpleNamespace(command=line)), Verdict), line
