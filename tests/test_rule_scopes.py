"""Saving a rule from the approval prompt (issue 36 item 9): `s` always shows the rules it may
save, narrowest first (the file, its directory, every call of the tool; the exact command, its
program), with the config file they go to and how long they hold; Enter saves the narrowest."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import abhed.tools  # noqa: F401  (the tool registry: the gate judges bash by its traits)
from abhed.cli import approvals
from abhed.cli.approvals import RuleSaver, Scope
from abhed.gate.approval import Answer, Policy
from test_chat_approvals import answers


def edit_at(ws: Path, relative: str) -> SimpleNamespace:
    return SimpleNamespace(path=str(ws / relative), old_string="a", new_string="b")


def test_an_edit_in_a_subdirectory_offers_file_directory_and_tool_narrowest_first(ws):
    policy = Policy.create("ask", [], [], ws)
    call = edit_at(ws, "src/pkg/a.py")
    assert approvals.save_scopes("edit", call, policy) == (
        Scope("edit(src/pkg/a.py)", "edit calls on src/pkg/a.py only"),
        Scope("edit(src/pkg/**)", "edit calls on any file under src/pkg/"),
        Scope("edit", "every edit call, on any file in the workspace"))


def test_an_edit_at_the_root_offers_the_file_then_the_tool(ws):
    policy = Policy.create("ask", [], [], ws)
    assert [s.rule for s in approvals.save_scopes("edit", edit_at(ws, "a.py"), policy)] == ["edit(a.py)", "edit"]


def test_bash_offers_the_command_then_its_program_never_all_of_bash(ws):
    policy = Policy.create("ask", [], [], ws)
    call = SimpleNamespace(command="make test", description="d")
    assert [s.rule for s in approvals.save_scopes("bash", call, policy)] == ["bash(make test)", "bash(make test:*)"]
    runs_a_file = SimpleNamespace(command="make -f Makefile", description="d")  # bash(make:*) would not allow it
    assert approvals.prefix_rules("bash", runs_a_file, ws) == ("bash(make:*)",)
    assert [s.rule for s in approvals.save_scopes("bash", runs_a_file, policy)] == ["bash(make -f Makefile)"]
    in_place = SimpleNamespace(command="sed -e s/a/b/ -i f", description="d")  # no rule would allow it: none saved
    assert approvals.exact_rules("bash", in_place, ws) and approvals.save_scopes("bash", in_place, policy) == ()
    several = SimpleNamespace(command="make a && make b", description="d")
    assert approvals.save_scopes("bash", several, policy) == ()  # one rule a save: none for two commands
    options = approvals.choices("bash", several, policy.check("bash", several), policy, can_save=True)
    assert "s" not in [o.key for o in options]


def test_s_shows_the_scopes_the_file_and_how_long_and_enter_saves_the_narrowest(ws, tmp_path):
    policy = Policy.create("ask", [], [], ws)
    call = edit_at(ws, "src/a.py")
    options = approvals.choices("edit", call, policy.check("edit", call), policy, can_save=True)
    assert [o.key for o in options] == ["y", "a", "p", "s", "n", "r"]
    saved: list[str] = []
    said: list[str] = []
    config = tmp_path / "config.toml"
    saver = RuleSaver(config, lambda rule: saved.append(rule) or f"saved {rule}")
    assert approvals.ask(options, answers("s", ""), said.append, saver) == Answer(True, ("edit(src/a.py)",))
    assert saved == ["edit(src/a.py)"]
    assert said[len(options):len(options) + 4] == [
        f"  save to approval.allow in {config}: it holds in every future session that reads that file, in any "
        "workspace, until it is removed from there. Which rule?",
        "    1  edit(src/a.py)  edit calls on src/a.py only  (narrowest)",
        "    2  edit(src/**)    edit calls on any file under src/",
        "    3  edit            every edit call, on any file in the workspace"]
    assert said[-1] == "  allowed for the rest of this session: edit(src/a.py)"


def test_the_human_picks_a_wider_scope_or_none_and_ctrl_d_is_no(ws):
    policy = Policy.create("ask", [], [], ws)
    call = edit_at(ws, "src/a.py")
    options = approvals.choices("edit", call, policy.check("edit", call), policy, can_save=True)
    saved: list[str] = []
    said: list[str] = []

    def save(rule: str) -> str:
        saved.append(rule)
        return f"saved {rule}"
    assert approvals.ask(options, answers("s", "3"), said.append, save) == Answer(True, ("edit",))
    assert "  save to approval.allow in the operator's config: it holds in every future session that reads that " \
        "file, in any workspace, until it is removed from there. Which rule?" in said
    assert approvals.ask(options, answers("s", "9", "2"), said.append, save) == Answer(True, ("edit(src/**)",))
    assert "  '9' is not an answer here: type one of 1/2/3, Enter for 1, or n to save nothing" in said
    assert approvals.ask(options, answers("s", "n", "y"), said.append, save) == Answer(True)  # back, then yes once
    assert approvals.ask(options, answers("s"), said.append, save) == Answer(False)  # Ctrl-D at the scope: no
    assert saved == ["edit", "edit(src/**)"]


def test_d_pages_the_diff_then_asks_the_same_question_again(ws):
    policy = Policy.create("ask", [], [], ws)
    call = edit_at(ws, "a.py")
    options = approvals.choices("edit", call, policy.check("edit", call), policy, can_save=False, diff_lines=120)
    assert [o.key for o in options] == ["y", "a", "p", "d", "n", "r"]
    assert options[3].label == "show the whole diff (120 lines), then answer"
    paged: list[int] = []
    said: list[str] = []
    assert approvals.ask(options, answers("d", "d", "y"), said.append, str, lambda: paged.append(1)) == Answer(True)
    assert paged == [1, 1] and said.count("  d  show the whole diff (120 lines), then answer") == 3
    assert "d" not in [o.key for o in approvals.choices("edit", call, policy.check("edit", call), policy, False)]
