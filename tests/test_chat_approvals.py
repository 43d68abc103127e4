"""Approval choices in chat: the rules each choice grants, that they hold for the session (and its
subagents), never for destructive commands, and saving a rule to the operator's config."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from abhed.cli import approvals
from abhed.gate.approval import Answer, Gate, Policy
from abhed.session.rulesave import SaveError, save_rule


def bash(command: str) -> SimpleNamespace:
    return SimpleNamespace(command=command, description="d")


def keys(options) -> str:  # type: ignore[no-untyped-def]
    return "".join(o.key for o in options)


def test_bash_choices_offer_the_exact_and_prefix_rules(ws):
    policy = Policy.create("ask", [], [], ws)
    call = bash("git status -s && npm test")
    options = approvals.choices("bash", call, policy.check("bash", call), policy, can_save=True)
    assert keys(options) == "yapnr"  # two commands, two rules: saving takes one rule at a time
    labels = {o.key: o.label for o in options}
    assert labels["a"] == "yes, and allow bash(git status -s), bash(npm test) for this session"
    assert labels["p"] == "yes, and allow bash(git status:*), bash(npm test:*) for this session"


WRAPPED = ["timeout 5 npm test", "nice -n 5 npm test", "command npm test", "env npm test", "nohup npm test",
           "timeout 5 env nice npm test", "exec npm test", "stdbuf -oL npm test", "/usr/bin/npm test",
           "sudo npm test", "xargs npm test", "find . -exec npm test \\;", "env A=1 npm test", "time -o t npm test",
           "strace npm test", "nice", "command -v npm", "timeout --help", "env", "git -c a=b status",
           "timeout 5 git -C . --no-pager status", "nice git-status", "busybox ls"]


@pytest.mark.parametrize("line", WRAPPED)
def test_offered_rules_name_what_a_wrapper_runs_never_the_wrapper(ws, line):
    """Issue 31 item 4: `bash(timeout:*)` would read as allowing whatever timeout runs. A rule is
    offered on the command a rule is checked against, or not at all; and only if it covers the call."""
    from abhed.gate import wrappers
    policy = Policy.create("ask", [], [], ws)
    call = bash(line)
    offered = approvals.exact_rules("bash", call, ws) + approvals.prefix_rules("bash", call, ws)
    for rule in offered:
        assert rule.split("(", 1)[1].split()[0].rstrip(")").split(":")[0] not in wrappers.WRAPPERS, (line, rule)
    verdict = policy.check("bash", call)
    granted = [r for o in approvals.choices("bash", call, verdict, policy, can_save=True) for r in o.answer.rules]
    for rule in granted:
        widened = Policy.create("ask", [rule], [], ws)
        assert widened.check("bash", call).decision == "allow", (line, rule)


def test_a_wrapped_command_is_offered_the_rules_of_what_it_runs(ws):
    policy = Policy.create("ask", [], [], ws)
    call = bash("timeout 5 env nice npm test --watch")
    labels = {o.key: o.label for o in approvals.choices("bash", call, policy.check("bash", call), policy, True)}
    assert labels["a"] == "yes, and allow bash(npm test --watch) for this session"
    assert labels["p"] == "yes, and allow bash(npm test:*) for this session"
    call = bash("timeout 5 git -C sub --no-pager status -s")
    labels = {o.key: o.label for o in approvals.choices("bash", call, policy.check("bash", call), policy, True)}
    assert labels["a"] == "yes, and allow bash(git status -s) for this session"
    for line in ("sudo npm test", "ls | xargs grep x", "find . -exec grep x {} +", "env A=1 npm test", "nice"):
        call = bash(line)
        assert keys(approvals.choices("bash", call, policy.check("bash", call), policy, True)) == "ynr", line


def test_save_is_offered_only_with_one_rule_and_the_operators_leave(ws):
    policy = Policy.create("ask", [], [], ws)
    call = bash("pytest -x tests")
    verdict = policy.check("bash", call)
    assert keys(approvals.choices("bash", call, verdict, policy, can_save=False)) == "yapnr"
    options = approvals.choices("bash", call, verdict, policy, can_save=True)
    assert keys(options) == "yapsnr"
    assert [scope.rule for scope in options[3].scopes] == ["bash(pytest -x tests)", "bash(pytest:*)"]  # narrowest first


def test_destructive_and_opaque_calls_get_no_rule_choice(ws):
    policy = Policy.create("ask", [], [], ws)
    for line in ("rm -rf /", "eval \"$X\""):
        verdict = policy.check("bash", bash(line))
        assert verdict.destructive or verdict.opaque
        assert keys(approvals.choices("bash", bash(line), verdict, policy, can_save=True)) == "ynr"


def test_a_rule_that_would_not_cover_the_call_is_not_offered(ws):
    policy = Policy.create("ask", [], [], ws)
    call = bash("echo hi > out.txt")  # redirection into a file: asked whatever the allow rules say
    assert keys(approvals.choices("bash", call, policy.check("bash", call), policy, can_save=True)) == "ynr"


def test_file_tool_rules_name_the_file_and_its_folder(ws):
    policy = Policy.create("ask", [], [], ws)
    call = SimpleNamespace(path=str(ws / "src" / "a.py"), content="x")
    options = approvals.choices("write", call, policy.check("write", call), policy, can_save=False)
    assert [o.answer.rules for o in options[1:3]] == [("write(src/a.py)",), ("write(src/**)",)]


def answers(*typed: str):  # type: ignore[no-untyped-def]
    queue = list(typed)

    def read(prompt: str) -> str:
        if not queue:
            raise EOFError
        return queue.pop(0)
    return read


def test_ask_reasks_on_a_typo_and_defaults_to_no(ws):
    policy = Policy.create("ask", [], [], ws)
    call = bash("make")
    options = approvals.choices("bash", call, policy.check("bash", call), policy, can_save=False)
    said: list[str] = []
    assert approvals.ask(options, answers("maybe", "a"), said.append, str) == Answer(True, ("bash(make)",))
    assert "  'maybe' is not an answer here: type one of y/a/p/n/r (the letters above) and Enter; Enter alone, Ctrl-D " \
        "or Ctrl-C is no" in said and "  allowed for the rest of this session: bash(make)" in said
    assert approvals.ask(options, answers(""), said.append, str) == Answer(False)
    assert approvals.ask(options, answers(), said.append, str) == Answer(False)  # end of input: no
    assert approvals.ask(options, answers("r", "use the Makefile target test"), said.append, str) == \
        Answer(False, reason="use the Makefile target test")


def interrupted(*before: str):  # type: ignore[no-untyped-def]
    """A reader giving `before`, then Ctrl-C as the terminal delivers it (KeyboardInterrupt)."""
    queue = list(before)

    def read(prompt: str) -> str:
        if not queue:
            raise KeyboardInterrupt
        return queue.pop(0)
    return read


def test_ctrl_c_ctrl_d_and_repeated_unknown_answers_are_a_no(ws):
    policy = Policy.create("ask", [], [], ws)
    call = bash("make")
    options = approvals.choices("bash", call, policy.check("bash", call), policy, can_save=False)
    said: list[str] = []
    assert approvals.ask(options, interrupted(), said.append, str) == Answer(False)
    assert said[-1] == "  (Ctrl-C: no)"
    assert approvals.ask(options, answers(), said.append, str) == Answer(False)
    assert said[-1] == "  (end of input: no)"
    assert approvals.ask(options, interrupted("r"), said.append, str) == Answer(False)  # at the reason: no reason
    said.clear()
    assert approvals.ask(options, answers("q", "\x1b[a", "yy", "y"), said.append, str) == Answer(False)
    assert [line for line in said if "is not an answer" in line] == [
        "  'q' is not an answer here: type one of y/a/p/n/r (the letters above) and Enter; Enter alone, Ctrl-D or "
        "Ctrl-C is no",
        "  '\\x1b[a' is not an answer here: type one of y/a/p/n/r (the letters above) and Enter; Enter alone, Ctrl-D "
        "or Ctrl-C is no"]
    assert said[-1] == "  (3 answers that are not one of y/a/p/n/r: no)"  # the fourth line, "y", is never read
    assert approvals.ask(options, answers("q", "yy", "Y"), said.append, str) == Answer(True)  # two slips, then yes


def test_ask_saves_only_the_chosen_rule_and_a_plain_yes_grants_nothing(ws):
    policy = Policy.create("ask", [], [], ws)
    call = bash("make test")
    options = approvals.choices("bash", call, policy.check("bash", call), policy, can_save=True)
    saved: list[str] = []
    said: list[str] = []

    def save(rule: str) -> str:
        saved.append(rule)
        return f"saved {rule}"
    assert approvals.ask(options, answers("y"), said.append, save) == Answer(True)
    assert said == [f"  {o.key}  {o.label}" for o in options]  # the choices, listed; nothing granted or saved
    assert saved == []
    assert approvals.ask(options, answers("s", "2"), said.append, save) == Answer(True, ("bash(make test:*)",))
    assert saved == ["bash(make test:*)"] and said[-2:] == [
        "saved bash(make test:*)", "  allowed for the rest of this session: bash(make test:*)"]


def test_granted_rules_hold_for_the_session_and_its_subagents(ws):
    asked: list[str] = []

    def human(tool, args, verdict):  # type: ignore[no-untyped-def]
        asked.append(args.command)
        return Answer(True, ("bash(npm test:*)",))
    gate = Gate(Policy.create("ask", [], [], ws), ask_human=human)
    assert gate.review("bash", bash("npm test")).decision == "allow"
    assert gate.review("bash", bash("npm test --watch=false")).decision == "allow"
    sub = gate.labelled("a1", "helper")
    assert sub.review("bash", bash("npm test -- a")).decision == "allow"
    assert asked == ["npm test"]
    assert gate.policy.allow == ()  # the operator's policy itself is unchanged


def test_a_declined_call_carries_the_humans_reason(ws):
    gate = Gate(Policy.create("ask", [], [], ws), ask_human=lambda *a: Answer(False, reason="too slow"))
    verdict = gate.review("bash", bash("make all"))
    assert verdict.decision == "deny" and verdict.reason == "the human declined it: too slow"


def test_mode_changes_for_the_session_but_destructive_still_asks(ws):
    asked: list[str] = []
    gate = Gate(Policy.create("ask", [], [], ws), ask_human=lambda t, a, v: asked.append(a.command) or False)
    gate.set_mode("auto")
    assert gate.review("bash", bash("make")).decision == "allow"
    assert gate.review("bash", bash("rm -rf /")).decision == "deny" and asked == ["rm -rf /"]
    gate.set_mode("plan")
    assert gate.review("bash", bash("make")).decision == "deny"
    with pytest.raises(ValueError, match="Unknown approval mode 'yolo': use one of ask, plan, accept-edits, auto"):
        gate.set_mode("yolo")


def test_save_rule_keeps_comments_and_other_settings(tmp_path):
    config = tmp_path / "cfg" / "config.toml"
    assert save_rule(config, "bash(npm test)") == f"saved bash(npm test) to approval.allow in {config}"
    config.write_text("# mine\n[approval]\nmode = \"ask\"  # keep\nallow = [\"edit\"]\n\n[model]\nendpoint = \"x\"\n")
    save_rule(config, "bash(git status:*)")
    text = config.read_text()
    assert "# mine" in text and "# keep" in text
    assert tomllib.loads(text) == {"approval": {"mode": "ask", "allow": ["bash(git status:*)", "edit"]},
                                   "model": {"endpoint": "x"}}
    assert save_rule(config, "edit") == f"edit is already in approval.allow of {config}"


def test_save_rule_refuses_a_form_it_cannot_edit_and_writes_nothing(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("approval.allow = [\"edit\"]\n")
    with pytest.raises(SaveError, match=r"writes approval.allow in a form this cannot edit safely. Add "
                                        r"\"bash\(make\)\" to approval.allow there by hand"):
        save_rule(config, "bash(make)")
    assert config.read_text() == "approval.allow = [\"edit\"]\n"
    config.write_text("[approval\n")
    with pytest.raises(SaveError, match="cannot be read as TOML"):
        save_rule(config, "bash(make)")


def test_a_declined_answer_grants_nothing_and_a_blank_reason_adds_nothing(ws):
    answers = iter([Answer(False, ("bash(make:*)",), reason="  "), Answer(False)])
    gate = Gate(Policy.create("ask", [], [], ws), ask_human=lambda *a: next(answers))
    assert gate.review("bash", bash("make")).reason == "the human declined it"
    assert gate.granted.allow == []
    assert gate.review("bash", bash("make")).decision == "deny"  # asked again: nothing was granted
    gate = Gate(Policy.create("ask", [], [], ws), ask_human=lambda *a: True)  # a bare bool: yes once
    assert gate.review("bash", bash("make")).decision == "allow" and gate.granted.allow == []
