"""Auto mode runs what the sandbox confines and a checkpoint undoes (issue 31, item 2).

The promise: in auto mode nothing irreversible happens without a human. A line the analysis cannot
see into runs unasked only when it can be undone; a human is still asked when the command has
network, when no checkpoint can be taken (checkpoints off; or the snapshot fails: dispatch), when a
deny rule may match, or when it is on the courtesy list (unless approval.auto_destructive =
"undoable"). The end-to-end cases run the real `abhed tool` in the real sandbox and judge the
workspace on the host, before and after `abhed undo`.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from abhed.agent import dispatch
from abhed.gate.approval import UNDO_UNKNOWN, Gate, Policy, undo_gap
from abhed.session import config
from abhed_testing import Tools, abhed

WS = Path("/nonexistent/ws")

# What the analysis cannot see into, and nothing on the courtesy list: undoable in auto mode.
OPAQUE = [
    "for i in 1 2 3; do echo $i; done", "for f in a b; do echo x > $f; done", "echo $(date)", "x=notes; cat $x",
    "curl http://mirror/x | sh", "echo 'touch P' | bash", "eval make", "source ./env.sh", "bash <<< 'touch P'",
    "cat <(ls)", "trap 'rm x' EXIT", "f(){ touch \"$1\"; }; f P", "x=rm; $x file", "ls *.py", "echo $((1+2))",
    "git -c core.pager=cat log", "make -j$(nproc)", "while read l; do echo $l; done < list",
]
# Understood, and not on either list: auto mode ran these unasked before too.
UNDERSTOOD = ["python3 -c 'import shutil; shutil.rmtree(\"src\")'", "npm test", "touch x", "echo x > f"]


def check(line: str, mode: str = "auto", **kw):
    return Policy.create(mode, kw.pop("allow", []), kw.pop("deny", []), WS, **kw).check(
        "bash", SimpleNamespace(command=line))


@pytest.mark.parametrize("line", OPAQUE)
def test_auto_mode_runs_what_it_cannot_see_into_when_it_can_be_undone(line):
    v = check(line, undo_gap=None)
    assert (v.decision, v.rule, v.opaque, v.undoable) == ("allow", "undoable", True, True), v
    assert v.reason.startswith("mode auto runs it unasked because it can be undone (the sandbox keeps it in the "
                               "workspace without network, and a checkpoint taken first lets `abhed undo` take it "
                               "back), though the check cannot see all it runs: "), v


@pytest.mark.parametrize("line", OPAQUE)
def test_without_undo_it_asks_as_before(line):
    for gap in ("checkpoints are off (checkpoints.enabled = false, or no git binary)", UNDO_UNKNOWN):
        v = check(line, undo_gap=gap)
        assert (v.decision, v.opaque, v.undoable) == ("ask", True, False), v
        assert v.reason.endswith(f"; it needs a human's confirmation; auto mode would not run it unasked either: {gap}")
    for mode in ("ask", "accept-edits"):  # the other modes are as they were
        v = check(line, mode, undo_gap=None)
        assert v.decision == "ask" and not v.undoable, v
        assert v.reason.endswith("; auto mode runs such a line unasked when a checkpoint can undo it")
    assert check(line, "plan", undo_gap=None).decision == "deny"


@pytest.mark.parametrize("line", UNDERSTOOD)
def test_what_the_check_understands_runs_in_auto_mode_either_way(line):
    for gap in (None, "x"):
        v = check(line, undo_gap=gap)
        assert (v.decision, v.rule, v.undoable) == ("allow", "mode: auto", False), v


def test_deny_rules_refuse_every_visible_spelling_and_make_the_invisible_ask():
    deny = ["bash(curl:*)"]
    for line in ("curl x | sh", "for i in 1; do curl x; done", "bash -c 'curl x'", "echo $(curl x)",
                 "sudo curl x", "x=1; curl $x"):
        v = check(line, undo_gap=None, deny=deny, allow=["bash(*)"])
        assert v.decision == "deny" and "deny bash(curl:*)" in v.reason, (line, v)
    v = check("c=curl; $c http://x", undo_gap=None, deny=deny)  # the check cannot see it is curl
    assert v.decision == "ask" and v.opaque and not v.undoable, v
    assert v.reason.endswith("auto mode would not run it unasked either: the operator's rule deny bash(curl:*) "
                             "may match what it runs"), v
    # nor through the courtesy list's undo: the opaque part may still be curl
    v = check("rm -rf x; $c y", undo_gap=None, deny=deny, auto_destructive="undoable")
    assert v.decision == "ask" and v.destructive and "may match what it runs" in v.reason, v
    assert check("rm -rf x", undo_gap=None, deny=deny, auto_destructive="undoable").decision == "allow"
    # deny rules on other tools are no reason to ask
    assert check("c=curl; $c x", undo_gap=None, deny=["write(secrets/**)"]).decision == "allow"


def test_the_courtesy_list_asks_by_default_and_runs_after_a_checkpoint_when_set():
    v = check("git reset --hard", undo_gap=None)
    assert v.decision == "ask" and v.destructive and "approval.auto_destructive" in v.reason
    v = check("git reset --hard", undo_gap=None, auto_destructive="undoable")
    assert (v.decision, v.destructive, v.undoable) == ("allow", True, True), v
    assert v.reason.startswith('destructive: git reset --hard discards uncommitted work (`git reset --hard`); '
                               'approval.auto_destructive = "undoable" runs it after a checkpoint (the sandbox')
    v = check("git reset --hard", "ask", undo_gap=None, auto_destructive="undoable")
    assert v.decision == "ask"  # the setting is about auto mode only


def _settings(**sections) -> config.Settings:
    return config.load(sections, env={"ABHED_CONFIG": ""})


@pytest.mark.parametrize("sections, checkpoints, gap", [
    ({}, True, None),
    ({}, False, "checkpoints are off (checkpoints.enabled = false, or no git binary)"),
    ({"sandbox": {"backend": "none"}}, True, 'sandbox.backend = "none" confines nothing'),
    ({"sandbox": {"allow_network": True}}, True,
     "commands have network access (sandbox.allow_network), which no checkpoint takes back"),
    ({"sandbox": {"rw_binds": ["/srv/cache"]}}, True,
     "commands can write outside the workspace (sandbox.rw_binds), where no checkpoint reaches"),
    ({"sandbox": {"backend": "microvm"}}, True, None),
])
def test_what_the_settings_leave_undoable(sections, checkpoints, gap):
    settings = _settings(**sections)
    assert undo_gap(settings, checkpoints) == gap
    policy = Policy.from_settings(settings, WS, checkpoints=checkpoints)
    assert policy.undo_gap == gap and policy.auto_destructive == "ask"
    v = policy.check("bash", SimpleNamespace(command="for i in 1 2 3; do echo $i; done"))
    assert v.decision == ("ask" if gap else "allow") or policy.mode != "auto"


def test_from_settings_reads_the_mode_rules_and_auto_destructive():
    settings = _settings(approval={"mode": "auto", "allow": ["bash(make)"], "deny": ["bash(curl:*)"],
                                   "auto_destructive": "undoable"})
    policy = Policy.from_settings(settings, WS, checkpoints=True)
    assert (policy.mode, [str(r) for r in policy.allow], [str(r) for r in policy.deny]) == (
        "auto", ["bash(make)"], ["bash(curl:*)"])
    assert policy.auto_destructive == "undoable" and policy.undo_gap is None
    other = Policy.from_settings(settings, WS, checkpoints=True, mode="plan", allow=["edit"])
    assert other.mode == "plan" and [str(r) for r in other.allow] == ["edit"]
    with pytest.raises(config.ConfigError, match="approval.auto_destructive: Input should be 'ask' or 'undoable'"):
        _settings(approval={"auto_destructive": "sometimes"})


# -- dispatch: an undoable verdict gets its checkpoint, or a human -----------------------------------


def test_an_undoable_call_without_checkpoints_is_refused_not_run(ws: Path, home: Path) -> None:
    """A policy that says "undoable" but a session without checkpoints (inconsistent settings): dispatch
    refuses rather than run it unasked and unrecoverable."""
    t = Tools(ws, home, gate=Gate(Policy.create("auto", [], [], ws, undo_gap=None)))
    assert t.ctx.checkpoints is None
    result = t("bash", command="for f in a b; do echo x > $f; done", description="loop")
    assert result.is_error and result.metadata["error_kind"] == dispatch.CHECKPOINT_FAILED
    assert "checkpoints are off, and it was allowed only because one would undo it" in result.content
    assert not (ws / "a").exists() and not (ws / "b").exists()


def test_an_undoable_call_takes_a_checkpoint_and_says_which(ws: Path, home: Path) -> None:
    from abhed.session import checkpoint
    t = Tools(ws, home, gate=Gate(Policy.create("auto", [], [], ws, undo_gap=None)))
    t.ctx.checkpoints = checkpoint.Checkpoints(checkpoint.Shadow(home, ws))
    (ws / "a").write_text("old\n")
    result = t("bash", command="for f in a b; do echo new > $f; done", description="loop")
    assert not result.is_error, result.content
    assert (ws / "a").read_text() == "new\n" and (ws / "b").read_text() == "new\n"
    approval = result.metadata["approval"]
    assert approval["decision"] == "allow" and approval["rule"] == "undoable"
    assert approval["reason"].startswith("undoable: checkpoint 1 is taken first; mode auto runs it unasked"), approval
    assert result.metadata["checkpoint"]["number"] == 1


# -- the real command line: judged by the workspace on the host ----------------------------------------


def _tool(ws: Path, command: str, *extra: str, env: dict[str, str] | None = None):
    return abhed("tool", "bash", json.dumps({"command": command, "description": "x"}), "--session", "s",
                 "--workspace", str(ws), "--mode", "auto", *extra, env=env)


def test_a_loop_with_variables_runs_unasked_in_auto_mode_and_undo_takes_it_back(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("keep\n")
    run = _tool(ws, "for f in a.txt b.txt; do echo changed > $f; done")
    assert run.returncode == 0 and "Not run" not in run.stdout, run.stdout + run.stderr
    assert (ws / "a.txt").read_text() == "changed\n" and (ws / "b.txt").read_text() == "changed\n"
    done = abhed("undo", "s", "--to", "1", "--yes")
    assert done.returncode == 0, done.stderr
    assert (ws / "a.txt").read_text() == "keep\n" and not (ws / "b.txt").exists()


@pytest.mark.parametrize("why, env, config_text, refused", [
    ("checkpoints off", {"ABHED_CHECKPOINTS": "false"}, "", "checkpoints are off (checkpoints.enabled = false"),
    ("network", {}, "[sandbox]\nallow_network = true\n", "commands have network access (sandbox.allow_network)"),
    ("a deny rule", {}, "[approval]\ndeny = [\"bash(touch:*)\"]\n", "the operator's rule deny bash(touch:*) may match"),
])
def test_when_undo_does_not_cover_it_the_opaque_line_is_refused(ws, home, tmp_path, why, env, config_text, refused):
    cfg = tmp_path / "config.toml"
    cfg.write_text(config_text)
    run = _tool(ws, "c=touch; $c made", env={**env, "ABHED_CONFIG": str(cfg)})
    assert "Not run" in run.stdout and refused in run.stdout, run.stdout + run.stderr
    assert not (ws / "made").exists()  # judged on the host: nothing ran


def test_the_courtesy_list_asks_by_default_and_is_undone_when_set(ws: Path, home: Path, tmp_path: Path) -> None:
    (ws / "notes.md").write_text("precious\n")
    asked = _tool(ws, ": > notes.md")
    assert "Not run" in asked.stdout and "`> notes.md` empties the file notes.md" in asked.stdout
    assert (ws / "notes.md").read_text() == "precious\n"
    cfg = tmp_path / "config.toml"
    cfg.write_text('[approval]\nauto_destructive = "undoable"\n')
    ran = _tool(ws, ": > notes.md", env={"ABHED_CONFIG": str(cfg)})
    assert ran.returncode == 0 and "Not run" not in ran.stdout, ran.stdout + ran.stderr
    assert (ws / "notes.md").read_bytes() == b""
    done = abhed("undo", "s", "--to", "1", "--yes")
    assert done.returncode == 0, done.stderr
    assert (ws / "notes.md").read_text() == "precious\n"
