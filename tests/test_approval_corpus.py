"""The approval check over real shell scripts: never a crash, never an allow for evaluating code.

Corpus: Debian's bash-completion scripts and git's shell scripts, installed by
scripts/setup-test-data (tests/data/PROVENANCE.md). Each file is checked whole and line by line.
Whether an input contains an evaluating construct is decided here by an independent oracle (a
quote-aware regex), not by the module under test.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abhed.gate.approval import Policy
from abhed.gate.shellparse import analyze

pytestmark = pytest.mark.slow

COMPLETIONS = Path("/usr/share/bash-completion")
GIT_CORE = Path("/usr/lib/git-core")

# Operators start a command anywhere; reserved words (`!`, `{`, then, do, else) only as words of
# their own: inside a word (`0{.`, `!.`, `-then.`) they are literals.
_START = r"(?:^|[;&|(]|(?:^|(?<=[\s;&|(]))(?:[!{]|then|do|else)(?=\s))\s*"
EVALUATING = re.compile(r"""
  \$\( | ` | \$\[ | [<>]\( | \(\(                                           # substitutions, arithmetic
| \$\{[!] | \$\{\#?\w+\[(?![@*]\]) | \$\{\w+@ | \$\{\w+:[^-=?+]             # indirection, subscripts, @P, offsets
| START(?:eval|source|\.|trap|alias|let|coproc|function|mapfile|readarray|hash)(?=\s|$)
| START\w+\s*\(\)\s*\{? | \b\w+\[[^\]]*\]\+?=                                # functions, subscript assignments
| \[\[.*\s-(?:eq|ne|lt|le|gt|ge|v)\s | START(?:test|\[)\s.*-v\s
| START(?:declare|local|typeset)\s+-[a-zA-Z]*[inaA]                         # integer, reference, array attributes
| START(?:ba|da|z|k)?sh\s+(?:-\w*c|<<<|$) | \|\s*(?:ba|da)?sh(?![\w=-])      # shells running strings or stdin
""".replace("START", _START), re.X | re.M)


def _unquoted(text: str) -> str:
    """The text with single-quoted spans and comments blanked, following bash's quoting."""
    out, i, double = [], 0, False
    while i < len(text):
        c = text[i]
        if c == "\\":
            out.append("__")  # an escaped character is literal
            i += 2
            continue
        if c == '"':
            double = not double
        elif c == "'" and not double:
            end = text.find("'", i + 1)
            i = len(text) if end < 0 else end + 1
            out.append("''")
            continue
        elif c == "#" and not double and (i == 0 or text[i - 1] in " \t\n;&|("):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        out.append(c)
        i += 1
    return "".join(out)


def evaluating(text: str) -> bool:
    return EVALUATING.search(_unquoted(text)) is not None


def _corpus() -> list[Path]:
    files = [p for p in sorted(COMPLETIONS.rglob("*")) if p.is_file()]
    if GIT_CORE.is_dir():
        files += [p for p in sorted(GIT_CORE.iterdir()) if p.is_file() and p.read_bytes()[:40].startswith(b"#!")
                  and re.match(rb"#!\s*/bin/(ba)?sh", p.read_bytes()[:40])]
    if len(files) < 500:
        reason = (f"the shell corpus is missing ({len(files)} files under {COMPLETIONS}): run scripts/setup-test-data "
                  "(apt-get install bash-completion)")
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must provide it)")
        pytest.skip(f"{reason} (skipped only outside CI)")
    return files


def _inputs(files: list[Path]):
    for path in files:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        yield path, text
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                yield f"{path}:{number}", line


def test_the_oracle_sees_the_issue_constructs_and_not_quoted_ones():
    for text in ("{ . ./env; }", "! . ./env", "if x; then . ./env; fi", "echo $(id)", "[[ x -eq 0 ]]", "f(){ :; }", "trap 'x' EXIT", "echo 'x' | sh", "a[1]=2",
                 "declare -i x=1", "echo ${!x}", "echo ${x@P}", "bash -lc 'x'", "(( i++ ))", ". ./env"):
        assert evaluating(text), text
    for text in ("echo '$(id)'", "ls # $(id)", "grep -v x", "echo \"it's\"", "echo \\`id\\`", "0{.", "!.", "-then.", "x{eval"):
        assert not evaluating(text), text


def test_no_crash_and_no_allow_for_evaluating_code_over_real_scripts(tmp_path):
    policy = Policy.create("auto", [], [], tmp_path)
    checked = evaluated = 0
    wrong = []
    for where, text in _inputs(_corpus()):
        verdict = policy.check("bash", SimpleNamespace(command=text))  # any exception fails the test
        checked += 1
        if evaluating(text):
            evaluated += 1
            if verdict.decision == "allow":
                wrong.append(f"{where}: {text[:120]!r}")
    assert checked > 50_000 and evaluated > 5_000, (checked, evaluated)
    assert not wrong, f"{len(wrong)} evaluating inputs allowed, e.g. {wrong[:5]}"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab $(){}[]'\"`\\\n#;&|<>-=!@*?:~%^,.0\t") + ["\ud800", "\0"]),
               max_size=60))
def test_fuzzed_lines_never_crash_and_are_allowed_only_when_understood(line):
    analysis = analyze(line)
    verdict = Policy.create("auto", [], [], Path("/nonexistent")).check("bash", SimpleNamespace(command=line))
    if verdict.decision == "allow":
        assert not analysis.opaque and not evaluating(line.replace("\0", "")), (line, analysis)
