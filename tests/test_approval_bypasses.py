"""Issue 13's bypasses, proven real and then refused.

Each command is first run under real bash in a scratch git repository, and the test asserts that it
did harm there -- ran hidden code (a file P appeared), deleted data, wrote a git hook or config,
threw away uncommitted work. Then the approval layer must not allow it: not in mode auto, and not in
mode ask under the broadest allow rule, `bash(*)`. Judged by what changed on disk, not by output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from abhed.gate.approval import Gate, Policy, refusal
from abhed_testing import abhed

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]


def _scratch(root: Path) -> Path:
    root.mkdir()
    (root / "x").mkdir()
    (root / "x" / "f").write_text("data\n")
    (root / "tracked.txt").write_text("committed\n")
    subprocess.run(GIT + ["init", "-q"], cwd=root, check=True)
    subprocess.run(GIT + ["add", "-A"], cwd=root, check=True)
    subprocess.run(GIT + ["commit", "-qm", "base"], cwd=root, check=True)
    (root / "tracked.txt").write_text("uncommitted work\n")
    (root / "untracked.txt").write_text("new work\n")
    (root / "notes.txt").write_text("notes\n")
    (root / "evil").write_text("#!/bin/sh\ntouch P\n")
    (root / "src").mkdir()
    return root


def _config(root: Path) -> str:
    return (root / ".git" / "config").read_text()


def _harm(root: Path, config_before: str) -> list[str]:
    """What the command destroyed or ran, judged on disk."""
    done = []
    if (root / "P").exists():
        done.append("ran hidden code (P created)")
    if not (root / "x" / "f").exists():
        done.append("deleted x/f")
    if (root / ".git" / "hooks" / "pre-commit").exists() or (root / ".git" / "hooks" / "post-checkout").exists():
        done.append("wrote a git hook")
    if _config(root) != config_before:
        done.append("changed .git/config")
    if not (root / "notes.txt").exists() or (root / "notes.txt").read_text() != "notes\n":
        done.append("overwrote notes.txt")
    if not (root / "tracked.txt").exists() or (root / "tracked.txt").read_text() != "uncommitted work\n":
        done.append("lost uncommitted work")
    if not (root / "untracked.txt").exists():
        done.append("deleted an untracked file")
    return done


BYPASSES = [
    # the parser and bash disagree
    "echo \\ #$(touch P)", "echo ${x:-`touch P`}", "cat <<EOF\n`touch P`\nEOF", "cat <<EOF\n${x:-`touch P`}\nEOF",
    "r\\\nm -rf x", "$'rm\\0' -rf x", "$'\\x72m' -rf x",
    # bash re-evaluates a string
    "[[ 'a[$(touch P)]' -eq 0 ]]", "test -v 'a[$(touch P)]'", "[ -v 'a[$(touch P)]' ]", "[[ -v 'a[$(touch P)]' ]]",
    "printf -v 'b[$(touch P)]' %s x", "x='$(touch P)'; echo \"${x@P}\"", "read 'a[$(touch P)]' <<< x",
    "declare -i x='a[$(touch P)]'", "let 'a[$(touch P)]'", "declare -n r='a[$(touch P)]'; echo $r",
    "declare -a x='(a[$(touch P)])'", "echo $((a[$(touch P)]))",
    # code kept in strings or tables
    "trap 'touch P' EXIT", "mapfile -C 'touch P #' -c 1 <<< x", "shopt -s expand_aliases\nalias ls='rm -rf x'\nls",
    "hash -p /usr/bin/touch ls; ls P", "source /dev/stdin <<< 'touch P'", ". /dev/stdin <<< 'touch P'",
    "f(){ rm \"$@\"; }; f -rf x", "f(){ touch \"$1\"; }; f P", "coproc rm -rf x; wait", "coproc touch P; wait",
    # eval or a shell behind a wrapper or flag
    "command eval 'touch P'", "builtin eval 'touch P'", "bash -lc 'rm -rf x'", "bash -ec 'rm -rf x'",
    "bash -c -- 'rm -rf x'", "bash -e -c 'rm -rf x'", "bash -o errexit -c 'rm -rf x'", "timeout 5 sh -c 'rm -rf x'",
    "env -S 'touch P'", "env --split-string='touch P'", "BASH_ENV='$(touch P)' bash -c :",
    "env BASH_ENV='$(touch P)' bash -c :", "bash <<< 'touch P'", "echo 'touch P' | sh",
    "echo x | xargs -I{} sh -c 'rm -rf {}'", "set -- rm -rf x; command \"$@\"", "x=rm; $x -rf x",
    "git -c alias.x='!touch P' x", "env 'BASH_FUNC_ls%%=() { touch P; }' bash -c ls",
    # wrapper and option spellings
    "timeout --signal KILL 5 rm -rf x", "setpriv --reuid 0 rm -rf x", "taskset -c 0 rm -rf x", "flock ./l rm -rf x",
    "nice -n 5 ionice -c 3 rm -rf x", "chrt -o 0 rm -rf x", "rm --r x", "rm --recur x", "rm --rec --forc x",
    "f=-rf; rm $f x", "find . -name x -exec /bin/rm -rf {} +", "find x -type f -exec shred -u {} +",
    "find x -type f -execdir rm {} \\;", "find x -type f -exec sh -c 'rm -rf \"$1\"' _ {} \\;",
    # git
    "git -C . reset --hard", "git -c a.b=c reset --hard", "git reset --ha", "git -C . clean -fdx", "git checkout -- .",
    "git checkout .", "git restore .", "git rm -rq x", "git --git-dir=.git --work-tree=. reset --hard",
    "git config core.pager 'touch P'",
    # redirects not seen
    "cat <<EOF > .git/hooks/pre-commit\ntouch P\nEOF", "{ echo x; } >> .git/config",
    "for i in 1; do echo x; done > .git/hooks/post-checkout", "cat <<EOF && rm -rf x\nhi\nEOF", "rm >/dev/null -rf x",
    "rm 2>&1 -rf x",
    # data tools
    "truncate -s 0 notes.txt", "tar -cf a.tar --remove-files x",
    # protected paths without a redirect
    "cp evil .git/hooks/pre-commit", "cd .git && echo x > hooks/pre-commit", "echo x > .git//hooks/pre-commit",
    "ln -s ../../evil .git/hooks/pre-commit", "cd src && echo x > ../.git/hooks/pre-commit",
]
ASK_MODE_ONLY = ["if :; then echo x; fi > notes.txt", "(echo x) > notes.txt", "! echo x > notes.txt"]


def _run_bash(command: str, cwd: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["bash", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                   timeout=60)


def _needs(command: str) -> None:
    for program in ("setpriv", "taskset", "flock", "ionice", "chrt", "shred", "tar"):
        if command.split()[0] == program or f" {program} " in f" {command} ":
            if shutil.which(program) is None:
                pytest.skip(f"{program} is not installed")


@pytest.mark.parametrize("command", BYPASSES)
def test_the_bypass_does_harm_under_bash_and_is_no_longer_allowed(tmp_path, command):
    _needs(command)
    root = _scratch(tmp_path / "scratch")
    before = _config(root)
    _run_bash(command, root)
    assert _harm(root, before), f"{command!r} did nothing under bash: the test proves no bypass"
    for mode, rules in (("auto", []), ("ask", ["bash(*)"]), ("accept-edits", ["bash(*)"])):
        verdict = Policy.create(mode, rules, [], root).check("bash", SimpleNamespace(command=command))
        assert verdict.decision != "allow", (mode, command, verdict)
        assert verdict.destructive or verdict.opaque, verdict


@pytest.mark.parametrize("command", ASK_MODE_ONLY)
def test_redirects_on_compound_statements_are_seen_in_ask_mode(tmp_path, command):
    root = _scratch(tmp_path / "scratch")
    before = _config(root)
    _run_bash(command, root)
    assert _harm(root, before) == ["overwrote notes.txt"]
    verdict = Policy.create("ask", ["bash(echo:*)", "bash(:)"], [], root).check("bash", SimpleNamespace(command=command))
    assert verdict.decision == "ask" and "redirects output into a file" in verdict.reason, verdict


@pytest.mark.parametrize("command", ["$(echo touch) P", "eval 'touch P'", "x=touch; $x P"])
def test_abhed_tool_bash_needs_confirm_for_opaque_commands_too(ws, home, command):
    """The human typing `abhed tool bash` approves what they can read; what the check cannot see
    through needs --confirm, like a destructive command."""
    args = json.dumps({"command": command, "description": "hidden"})
    refused = abhed("tool", "bash", args, "--workspace", str(ws))
    assert "cannot be checked in advance" in refused.stdout and "--confirm" in refused.stdout, refused.stdout
    assert not (ws / "P").exists()
    confirmed = abhed("tool", "bash", args, "--workspace", str(ws), "--confirm")
    assert confirmed.stdout.endswith("[exit code 0]\n") and (ws / "P").exists(), confirmed.stdout


def test_the_gate_asks_for_opaque_commands_even_when_a_human_typed_them(tmp_path):
    policy = Policy.create("auto", ["bash(*)"], [], tmp_path)
    hidden = SimpleNamespace(command="$(echo rm) -rf x")
    assert Gate(policy, invoked_by_human=True).review("bash", hidden).decision == "ask"
    confirmed = Gate(policy, invoked_by_human=True, confirmed=True).review("bash", hidden)
    assert confirmed.decision == "allow" and confirmed.opaque and "--confirm" in confirmed.reason
    asked = []
    prompt = Gate(policy, ask_human=lambda tool, args, verdict: asked.append(verdict) or True)
    assert prompt.review("bash", hidden).decision == "allow" and asked[0].opaque
    text = refusal("bash", policy.check("bash", hidden), hidden)
    assert "cannot be checked in advance" in text and "--confirm" in text and "plain word" in text
