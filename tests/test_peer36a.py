"""Issue 36's peer features, unit by unit: the `@` picker's matching and attachment
(cli/mentions.py), custom slash commands' loading and expansion (cli/usercommands.py), and the
hook protocol (agent/hooks.py, dispatch). The same features in a real terminal:
tests/agent/test_tmux_peer36a.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from abhed.agent.hooks import Hooks, environment
from abhed.cli import mentions, usercommands
from abhed.cli.slash import HELP, parse
from abhed.gate.approval import Gate, Policy
from abhed.session import config
from abhed.session.config import HooksConfig

# -- @ mentions: matching ----------------------------------------------------------------------------


def test_fuzzy_rank_prefers_the_files_name_then_word_starts_then_shorter_paths():
    paths = ["docs/token-notes.md", "src/parser/tokenizer.py", "src/tk.py", "tests/test_tokenizer.py", "build.sh"]
    assert mentions.rank("tknz", paths)[:2] == ["src/parser/tokenizer.py", "tests/test_tokenizer.py"]
    assert mentions.rank("tk", paths)[0] == "src/tk.py"
    assert mentions.rank("zzz", paths) == []
    assert mentions.rank("SRC/TK", paths)[0] == "src/tk.py"  # case ignored
    assert len(mentions.rank("", [f"f{i}" for i in range(100)])) == mentions.MAX_SHOWN  # bounded


def test_a_query_spanning_directories_matches_in_the_path():
    assert mentions.score("srpa", "src/parser/x.py") is not None
    assert mentions.score("xsrc", "src/parser/x.py") is None  # in order only


def test_mentions_are_found_escaped_and_trailing_punctuation_is_not_the_names():
    text = r"look at @src/a.py, and @my\ notes.txt then mail@example.com @b.py."
    assert mentions.mentioned(text) == ["src/a.py", "src/a.py,", "my notes.txt", "b.py", "b.py."]
    assert mentions.escape("my notes\\x.txt") == r"my\ notes\\x.txt"
    assert mentions.unescape(mentions.escape("a b\\c")) == "a b\\c"


def test_the_file_list_is_globs_walk_under_gitignore_and_the_excludes(ws):
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("a\n")
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "x.js").write_text("x\n")
    (ws / "gen").mkdir()
    (ws / "gen" / "g.py").write_text("g\n")
    (ws / ".gitignore").write_text("gen/\n")
    files = mentions.FileList(mentions.workspace_walk(ws, config.Settings().search.exclude)).files()
    assert files == [".gitignore", "src/a.py"]


# -- @ mentions: attaching -------------------------------------------------------------------------


def test_a_mentioned_file_is_read_through_the_read_tool_and_attached(tools, ws):
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    gate = Gate(Policy.create("ask", [], [], ws))
    found = mentions.attach("explain @a.py please", tools.ctx, gate)
    assert found.lines == [f"[attached @a.py: {ws}/a.py, 2 lines]"]
    assert found.prompt.startswith("explain @a.py please\n\n[attached @a.py:")
    assert "1\tx = 1" in found.prompt or "x = 1" in found.prompt
    assert str(ws / "a.py") in tools.ctx.session.state.reads  # the model has seen it: an edit needs no second read


def test_a_large_file_is_cut_with_a_note(tools, ws):
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(20_000)))
    found = mentions.attach("@big.txt", tools.ctx, Gate(Policy.create("ask", [], [], ws)))
    assert "cut at 20000 characters" in found.lines[0]
    assert f"[cut: the attachment holds the first 20000 characters of {ws}/big.txt; read it with offset" in found.prompt
    assert len(found.prompt) < 25_000


def test_a_deny_rule_for_read_keeps_a_file_out(tools, ws):
    (ws / "secrets.env").write_text("TOKEN=1\n")
    gate = Gate(Policy.create("ask", [], ["read(*.env)"], ws))
    found = mentions.attach("see @secrets.env", tools.ctx, gate)
    assert found.lines == ["[not attached: @secrets.env: the operator's rule deny read(*.env) forbids it]"]
    assert "TOKEN=1" not in found.prompt


def test_a_symlink_out_and_a_binary_file_are_not_attached(tools, ws, tmp_path):
    (tmp_path / "outside.txt").write_text("HOST-SECRET\n")
    (ws / "link.txt").symlink_to(tmp_path / "outside.txt")
    (ws / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    (ws / "sub").mkdir()
    found = mentions.attach("@link.txt @blob.bin @missing.txt @sub @../ws/x", tools.ctx,
                            Gate(Policy.create("ask", [], [], ws)))
    assert "HOST-SECRET" not in found.prompt
    assert found.lines[0].startswith(f"[not attached: @link.txt: `path` {ws}/link.txt is outside")
    assert found.lines[1] == "[not attached: @sub: it is a directory (the model can list it with glob)]"
    assert found.lines[2].startswith("[not attached: @blob.bin:") and len(found.lines) == 3


def test_more_mentions_than_a_message_takes_are_named_not_dropped_silently(tools, ws):
    for i in range(7):
        (ws / f"f{i}.txt").write_text(f"{i}\n")
    found = mentions.attach(" ".join(f"@f{i}.txt" for i in range(7)), tools.ctx, Gate(Policy.create("ask", [], [], ws)))
    assert found.lines[-1] == "[not attached: 2 more @-mentioned files, over the 5 a message takes; the model can read them]"


# -- custom slash commands -------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def dirs(tmp_path, ws):
    xdg, op = tmp_path / "xdg", tmp_path / "op"
    env = {"XDG_CONFIG_HOME": str(xdg), "ABHED_CONFIG": str(op / "config.toml")}
    return env, xdg / "abhed" / "commands", op / "commands"


def test_expansion_fills_arguments_words_and_dollars():
    command = usercommands.Command("fix", "Fix $1 in $2 ($ARGUMENTS) for $$5; $9 is empty", "/x", "user")
    assert usercommands.expand(command, 'bug "a b.py"') == 'Fix bug in a b.py (bug "a b.py") for $5;  is empty'


def test_a_prompt_without_placeholders_gets_the_arguments_appended():
    command = usercommands.Command("t", "Run the tests.\n", "/x", "user")
    assert usercommands.expand(command, "-k slow") == "Run the tests.\n\nARGUMENTS: -k slow"
    assert usercommands.expand(command, "") == "Run the tests."


def test_description_line_is_shown_not_sent():
    assert usercommands.split_description("description: does X\n\nDo X now.") == ("does X", "Do X now.")
    assert usercommands.split_description("Do X.") == ("", "Do X.")


def test_user_and_operator_commands_load_the_operators_winning_a_name(dirs, ws):
    env, user, op = dirs
    write(user / "review.md", "user review")
    write(user / "only-user.md", "mine")
    write(op / "review.md", "operator review")
    write(op / "README.txt", "not a command")
    catalog = usercommands.load(env, ws, set(HELP))
    assert {n: c.origin for n, c in catalog.commands.items()} == {"only-user": "user", "review": "operator"}
    assert catalog.commands["review"].text == "operator review" and catalog.problems == []


def test_a_builtin_name_a_bad_name_a_link_and_a_writable_file_are_refused_with_why(dirs, ws, tmp_path):
    env, user, _ = dirs
    write(user / "mode.md", "x")
    write(user / "Bad Name.md", "x")
    write(tmp_path / "elsewhere.md", "x")
    (user / "linked.md").symlink_to(tmp_path / "elsewhere.md")
    os.chmod(write(user / "open.md", "x"), 0o666)
    catalog = usercommands.load(env, ws, set(HELP))
    assert catalog.commands == {}
    problems = "\n".join(catalog.problems)
    assert f"{user}/mode.md: /mode is a built-in command, so this file is not used; rename it (e.g. my-mode.md)" in problems
    assert f"{user}/Bad Name.md: a command's name is lowercase letters, digits, - and _" in problems
    assert f"{user}/linked.md is not used: it is a symbolic link" in problems
    assert f"{user}/open.md is not used: {user}/open.md is writable by its group and every user (mode 0666)" in problems


def test_workspace_commands_need_the_operators_leave(dirs, ws):
    env, _, _ = dirs
    write(ws / ".abhed" / "commands" / "deploy.md", "deploy it")
    assert usercommands.load(env, ws, set(HELP)).commands == {}
    allowed = config.Settings.model_validate({"commands": {"from_workspace": True}})
    catalog = usercommands.load(env, ws, set(HELP), allowed)
    assert catalog.commands["deploy"].origin == "workspace"


def test_a_user_directory_inside_the_workspace_is_not_read(ws):
    write(ws / "cfg" / "abhed" / "commands" / "x.md", "planted by the model")
    catalog = usercommands.load({"XDG_CONFIG_HOME": str(ws / "cfg"), "ABHED_CONFIG": ""}, ws, set(HELP))
    assert catalog.commands == {}
    assert catalog.problems[0].startswith(f"{ws}/cfg/abhed/commands is not read: it lies in {ws} or an allowed root")


def test_a_workspace_commands_link_out_is_refused(dirs, ws, tmp_path):
    env, _, _ = dirs
    write(tmp_path / "out" / "x.md", "outside")
    (ws / ".abhed").mkdir()
    (ws / ".abhed" / "commands").symlink_to(tmp_path / "out")
    allowed = config.Settings.model_validate({"commands": {"from_workspace": True}})
    catalog = usercommands.load(env, ws, set(HELP), allowed)
    assert catalog.commands == {} and "is not read" in catalog.problems[0]


def test_custom_names_parse_as_commands_and_paths_stay_messages():
    assert parse("/review-pr 12") == ("review-pr", "12")
    assert parse("/fix_2") == ("fix_2", "")
    assert parse("/etc/hosts is wrong") is None


# -- hooks -----------------------------------------------------------------------------------------


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def hooks_of(tmp_path: Path, event: str, body: str, **extra) -> tuple[Hooks, list, list, str]:
    command = script(tmp_path / f"{event}.sh", body)
    cfg = HooksConfig.model_validate({event: [{"command": [command], **extra}]})
    events: list = []
    notices: list = []
    return Hooks(cfg, "sid", tmp_path, events.append, notices.append), events, notices, command


def test_exit_0_is_fine_and_the_event_json_arrives_on_stdin(tmp_path):
    hooks, events, notices, _ = hooks_of(tmp_path, "pre_tool", f"cat > {tmp_path}/in.json\n")
    verdict = hooks.fire("pre_tool", "main", "bash", input={"command": "ls"})
    assert verdict.blocked is None and notices == [] and events[0].outcome == "ok" and events[0].exit_code == 0
    assert json.loads((tmp_path / "in.json").read_text()) == {
        "event": "pre_tool", "session_id": "sid", "workspace": str(tmp_path), "agent_id": "main", "tool": "bash",
        "input": {"command": "ls"}}


def test_exit_2_blocks_a_pre_tool_call_with_stderr_as_the_reason(tmp_path):
    hooks, events, _, command = hooks_of(tmp_path, "pre_tool", "echo 'no network tools' >&2; exit 2\n")
    verdict = hooks.fire("pre_tool", "main", "bash", input={})
    assert verdict.blocked == f"the operator's pre_tool hook `{command}` blocked it: no network tools"
    assert (events[0].outcome, events[0].exit_code, events[0].stderr) == ("blocked", 2, "no network tools")


def test_exit_2_elsewhere_and_any_other_status_warn(tmp_path):
    hooks, events, notices, command = hooks_of(tmp_path, "post_tool", "exit 2\n")
    assert hooks.fire("post_tool", "main", "read").blocked is None
    assert notices == [f"warning: hook `{command}` on post_tool exited 2: (it wrote nothing on stderr)"]
    hooks, events, notices, command = hooks_of(tmp_path, "pre_tool", "echo oops >&2; exit 1\n")
    assert hooks.fire("pre_tool", "main", "read").blocked is None
    assert notices == [f"warning: hook `{command}` on pre_tool exited 1: oops"] and events[0].outcome == "warned"


def test_a_pre_tool_hook_past_its_deadline_is_killed_and_blocks(tmp_path):
    hooks, events, _, command = hooks_of(tmp_path, "pre_tool", "sleep 30\n", timeout_s=0.5)
    verdict = hooks.fire("pre_tool", "main", "bash")
    assert verdict.blocked == (f"the operator's pre_tool hook `{command}` gave no answer (it was still running after "
                               "0.5 s and was stopped), and a hook that guards calls blocks when it cannot answer")
    assert events[0].exit_code is None and events[0].outcome == "blocked"


def test_hooks_name_tools_and_run_only_for_those(tmp_path):
    hooks, events, _, _ = hooks_of(tmp_path, "pre_tool", "exit 2\n", tools=["bash"])
    assert hooks.fire("pre_tool", "main", "read").blocked is None and events == []
    assert hooks.fire("pre_tool", "main", "bash").blocked is not None


def test_the_environment_is_minimal():
    env = environment("pre_tool", "sid", Path("/w"))
    assert set(env) == {"PATH", "HOME", "LANG", "ABHED_HOOK_EVENT", "ABHED_SESSION_ID", "ABHED_WORKSPACE"}
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"


def test_a_hook_command_must_be_an_absolute_program():
    with pytest.raises(Exception) as caught:
        HooksConfig.model_validate({"pre_tool": [{"command": ["check.sh"]}]})
    assert "command must start with the program's absolute path" in str(caught.value)


def test_a_blocked_call_does_not_run_and_the_model_is_told_why(tools, ws, tmp_path):
    hooks, events, _, command = hooks_of(tmp_path, "pre_tool", "echo 'writes are frozen' >&2; exit 2\n")
    tools.ctx.hooks = hooks
    result = tools("write", path=str(ws / "new.txt"), content="x")
    assert result.is_error and result.metadata["error_kind"] == "hook_blocked"
    assert result.content == (f"Not run: the operator's pre_tool hook `{command}` blocked it: writes are frozen. Nothing "
                              "was run or changed. Do not retry the same call: do the work another way, or tell the "
                              "user what you need.")
    assert not (ws / "new.txt").exists()


def test_post_tool_sees_the_result(tools, ws, tmp_path):
    (ws / "a.txt").write_text("hello\n")
    hooks, events, _, _ = hooks_of(tmp_path, "post_tool", f"cat > {tmp_path}/post.json\n")
    tools.ctx.hooks = hooks
    tools.ok("read", path=str(ws / "a.txt"))
    payload = json.loads((tmp_path / "post.json").read_text())
    assert payload["tool"] == "read" and "hello" in payload["result"]["content"] and payload["result"]["is_error"] is False


def test_hook_runs_are_events_of_the_session_log(tools, ws, tmp_path):
    command = script(tmp_path / "ok.sh", "exit 0\n")
    tools.ctx.hooks = Hooks(HooksConfig.model_validate({"pre_tool": [{"command": [command]}]}), tools.session.id, ws,
                            tools.session.record, lambda _: None)
    tools.ok("glob", pattern="*")
    kinds = [e.kind for e in tools.session.log.load().events]
    assert kinds.index("hook") == kinds.index("action") + 1  # after the call is recorded, before its result


def test_a_directory_others_can_write_is_not_read(dirs, ws):
    env, user, _ = dirs
    write(user / "x.md", "x")
    os.chmod(user, 0o777)
    catalog = usercommands.load(env, ws, set(HELP))
    assert catalog.commands == {}
    assert catalog.problems == [f"{user} is not read: {user} is writable by its group and every user (mode 0777): "
                                "whoever can write it chooses what you send to the model"]


def test_a_file_over_the_size_bound_or_not_utf8_is_refused(dirs, ws):
    env, user, _ = dirs
    write(user / "big.md", "x" * (usercommands.MAX_BYTES + 1))
    (user / "bin.md").write_bytes(b"\xff\xfe")
    problems = usercommands.load(env, ws, set(HELP)).problems
    assert problems == [f"{user}/big.md is not used: it is {usercommands.MAX_BYTES + 1} bytes, over the 65536 a "
                        "command may have", f"{user}/bin.md is not used: it is not UTF-8 text"]


def test_a_program_that_cannot_start_blocks_a_pre_tool_call_and_warns_elsewhere(tmp_path):
    cfg = {"command": [str(tmp_path / "missing-hook")]}
    notices: list = []
    hooks = Hooks(HooksConfig.model_validate({"pre_tool": [cfg], "turn_end": [cfg]}), "sid", tmp_path,
                  lambda _: None, notices.append)
    assert hooks.fire("pre_tool", "main", "bash").blocked == (
        f"the operator's pre_tool hook `{tmp_path}/missing-hook` gave no answer (it could not be started: No such file "
        "or directory), and a hook that guards calls blocks when it cannot answer")
    verdict = hooks.fire("turn_end", status="done")
    assert verdict.blocked is None
    assert verdict.warnings == [f"hook `{tmp_path}/missing-hook` on turn_end: it could not be started: No such file or "
                                "directory"]
    assert notices[-1] == "warning: " + verdict.warnings[0]


def test_a_timeout_elsewhere_warns_and_a_long_stderr_is_cut(tmp_path):
    hooks, events, notices, command = hooks_of(tmp_path, "session_end", "sleep 30\n", timeout_s=0.3)
    assert hooks.fire("session_end").warnings == [
        f"hook `{command}` on session_end: it was still running after 0.3 s and was stopped"]
    hooks, events, _, _ = hooks_of(tmp_path, "pre_tool", "head -c 5000 /dev/zero | tr '\\0' e >&2; exit 2\n")
    reason = hooks.fire("pre_tool", "main", "bash").blocked
    assert reason.endswith("e" * 100 + " [cut: 5000 characters]") and len(events[0].stderr) == 2000 + len(" [cut: 5000 characters]")


def test_a_block_ends_the_round_and_later_hooks_do_not_run(tmp_path):
    first = script(tmp_path / "first.sh", "exit 2\n")
    second = script(tmp_path / "second.sh", f"touch {tmp_path}/second-ran\n")
    events: list = []
    hooks = Hooks(HooksConfig.model_validate({"pre_tool": [{"command": [first]}, {"command": [second]}]}), "sid",
                  tmp_path, events.append, lambda _: None)
    assert hooks.fire("pre_tool", "main", "bash").blocked is not None
    assert not (tmp_path / "second-ran").exists() and len(events) == 1


def test_a_hook_run_the_log_cannot_hold_blocks_a_pre_tool_call(tmp_path):
    from abhed.session.storefail import StoreError
    command = script(tmp_path / "ok.sh", "exit 0\n")

    def full(_event):
        raise StoreError("the disk is full", tmp_path, 28)
    notices: list = []
    hooks = Hooks(HooksConfig.model_validate({"pre_tool": [{"command": [command]}], "post_tool": [{"command": [command]}]}),
                  "sid", tmp_path, full, notices.append)
    assert hooks.fire("pre_tool", "main", "bash").blocked == (
        f"the run of hook `{command}` on pre_tool could not be recorded: the disk is full")
    assert hooks.fire("post_tool", "main", "bash").warnings == [
        f"the run of hook `{command}` on post_tool could not be recorded: the disk is full"]


def test_a_post_tool_event_carries_a_bounded_result():
    from abhed.agent.hooks import MAX_RESULT, bounded_result
    assert bounded_result("x" * MAX_RESULT) == "x" * MAX_RESULT
    assert bounded_result("x" * (MAX_RESULT + 5)) == "x" * MAX_RESULT + f"\n[cut: the result has {MAX_RESULT + 5} characters]"


def test_hook_runs_show_in_sessions_show_and_in_the_audit_export(tools, ws, tmp_path):
    from abhed.session.audit import export
    from abhed.session.eventtree import shown_event
    command = script(tmp_path / "no.sh", "echo frozen >&2; exit 2\n")
    tools.ctx.hooks = Hooks(HooksConfig.model_validate({"pre_tool": [{"command": [command]}]}), tools.session.id, ws,
                            tools.session.record, lambda _: None)
    tools.err("glob", pattern="*")
    hook = next(e for e in tools.session.log.load().events if e.kind == "hook")
    assert shown_event(hook, "", False).endswith(f"[main] hook pre_tool (glob) {command}: blocked, exit 2: frozen")
    record = next(r for r in export(tools.session) if r["type"] == "hook")
    assert (record["event"], record["tool"], record["exit_code"], record["outcome"]) == ("pre_tool", "glob", 2, "blocked")


def test_a_commands_directory_inside_an_allowed_root_is_not_read(tmp_path, ws):
    root = tmp_path / "shared"
    write(root / "abhed" / "commands" / "x.md", "planted")
    settings = config.Settings.model_validate({"allowed_roots": [str(root)]})
    catalog = usercommands.load({"XDG_CONFIG_HOME": str(root), "ABHED_CONFIG": ""}, ws, set(HELP), settings)
    assert catalog.commands == {} and "where the model can write files" in catalog.problems[0]


def test_commands_past_the_bound_are_named(dirs, ws, monkeypatch):
    env, user, _ = dirs
    for name in ("a", "b", "c"):
        write(user / f"{name}.md", name)
    monkeypatch.setattr(usercommands, "MAX_COMMANDS", 2)
    catalog = usercommands.load(env, ws, set(HELP))
    assert list(catalog.commands) == ["a", "b"]
    assert catalog.problems == [f"{user}/c.md: not used, over 2 custom commands"]


def test_a_fifo_is_refused_without_waiting_for_a_writer(dirs, ws):
    env, user, _ = dirs
    user.mkdir(parents=True)
    os.mkfifo(user / "pipe.md")
    assert usercommands.load(env, ws, set(HELP)).problems == [f"{user}/pipe.md is not used: it is not a regular file"]


def test_expansion_edge_cases():
    command = usercommands.Command("x", "a=$1 c=$3 cost $$", "/x", "user")
    assert usercommands.expand(command, "one two") == "a=one c= cost $"
    dollars = usercommands.Command("x", "costs $$5", "/x", "user")
    assert usercommands.expand(dollars, "now") == "costs $5\n\nARGUMENTS: now"  # $$ is no placeholder for them
    quoted = usercommands.Command("x", "[$1] [$ARGUMENTS]", "/x", "user")
    assert usercommands.expand(quoted, "it's here") == "[it's] [it's here]"  # an unbalanced quote: words as typed


def test_a_hook_flooding_stdout_is_stopped_and_warns(tmp_path):
    hooks, events, notices, command = hooks_of(tmp_path, "turn_end", "cat >/dev/null; head -c 3000000 /dev/zero\n")
    assert hooks.fire("turn_end").warnings == [f"hook `{command}` on turn_end: it printed over 1048576 bytes and was stopped"]
    hooks, _, notices, command = hooks_of(tmp_path, "pre_tool", "exit 2\n")
    hooks.fire("pre_tool", "main", "bash")
    assert notices == [f"blocked bash: the operator's pre_tool hook `{command}` blocked it: (it wrote nothing on stderr)"]
