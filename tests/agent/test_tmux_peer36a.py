"""Issue 36, the peers' habits, used as a user would in a real terminal (tmux) against the scripted
model: `@` mentions with a fuzzy file picker, custom slash commands, the operator's hooks. Judged by
the screen, by what the model was sent, and by what changed on the host."""

from __future__ import annotations

import json
import os
import stat

import pytest

from abhed.model.replay import ReplayServer, Turn
from tmux_chat import flat

pytestmark = pytest.mark.slow


def sent(server: ReplayServer) -> str:
    """The last user message the model was sent."""
    message = [m for m in server.requests[-1]["messages"] if m["role"] == "user"][-1]
    content = message["content"]
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)


def test_at_mention_picks_a_file_by_fuzzy_match_and_attaches_it(ws, term):
    (ws / "src" / "parser").mkdir(parents=True)
    (ws / "src" / "parser" / "tokenizer.py").write_text("def tokens():\n    return 42\n")
    (ws / "src" / "main.py").write_text("print('hi')\n")
    (ws / "build").mkdir()
    (ws / "build" / "tokenizer_gen.py").write_text("generated\n")
    (ws / ".gitignore").write_text("build/\n")
    with ReplayServer([Turn(text="It returns 42.")]) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.wait_prompt()
        chat.keys("what does ", "@tknz")
        screen = chat.wait_for("@src/parser/tokenizer.py")
        assert "tokenizer_gen" not in screen  # .gitignore'd, as glob leaves it out
        chat.keys("Tab")
        chat.wait_for("> what does @src/parser/tokenizer.py")
        chat.keys("return?", "Enter")
        screen = chat.wait_for("It returns 42.")
        assert "[attached @src/parser/tokenizer.py:" in screen
    message = sent(server)
    assert message.startswith("what does @src/parser/tokenizer.py return?")
    assert f"[attached @src/parser/tokenizer.py: {ws}/src/parser/tokenizer.py, 2 lines]" in message
    assert "return 42" in message


def test_at_mention_up_down_and_enter_choose_and_a_link_out_is_not_attached(ws, term, tmp_path):
    (ws / "alpha.txt").write_text("A\n")
    (ws / "alps.txt").write_text("B\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET-BYTES\n")
    (ws / "alsolink.txt").symlink_to(secret)
    with ReplayServer([Turn(text="Seen.")]) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.wait_prompt()
        chat.keys("@alps")
        chat.wait_for("@alps.txt")
        chat.keys("BSpace", "BSpace", "BSpace")  # "@a": every file offered, alps.txt (the shortest) first
        chat.wait_for("@alpha.txt")
        chat.keys("Down", "Down", "Enter")  # Enter takes the second choice; it does not send
        chat.wait_for("> @alpha.txt")
        chat.keys(" and @alsolink.txt", "Enter")
        screen = chat.wait_for("Seen.")
        assert "[attached @alpha.txt:" in screen
    # One message with both parts: had the first Enter sent, the model would have had "@alpha.txt" alone.
    message = sent(server)
    assert message.startswith("@alpha.txt  and @alsolink.txt\n"), message
    assert f"[attached @alpha.txt: {ws}/alpha.txt, 1 line]" in message
    assert "HOST-SECRET-BYTES" not in message  # the link leads out of the workspace: never read
    assert "[not attached: @alsolink.txt:" in message


def test_at_mention_keys_typed_faster_than_the_picker_still_choose(ws, term):
    """All the keys in one burst: the picker's list must follow the deletions, and Down must move in it
    (not through the history) before any list was drawn; Enter then takes the file, it does not send."""
    (ws / "alpha.txt").write_text("A\n")
    (ws / "alps.txt").write_text("B\n")
    with ReplayServer([Turn(text="Seen.")]) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws))
        chat.wait_for("ends the session.")
        chat.wait_prompt()
        chat._tmux("send-keys", "-t", "chat", "@", "a", "l", "p", "s", "BSpace", "BSpace", "BSpace", "Down", "Down",
                   "Enter", "x", "Enter")
        chat.wait_for("Seen.")
    assert sent(server).startswith("@alpha.txt x\n\n[attached @alpha.txt:")


def test_custom_slash_command_expands_arguments_and_is_listed_with_its_source(ws, term, tmp_path):
    xdg = tmp_path / "xdg"
    (xdg / "abhed" / "commands").mkdir(parents=True)
    (xdg / "abhed" / "commands" / "review.md").write_text(
        "description: review a file for bugs\nReview $1 for bugs; focus: $ARGUMENTS\n")
    (xdg / "abhed" / "commands" / "help.md").write_text("shadow the built-in\n")
    (ws / ".abhed" / "commands").mkdir(parents=True)  # the model can write here: not read by default
    (ws / ".abhed" / "commands" / "deploy.md").write_text("run the deploy script\n")
    with ReplayServer([Turn(text="Reviewed.")]) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), env={"XDG_CONFIG_HOME": str(xdg)})
        chat.wait_for("ends the session.")  # the greeting, then the commands' problems under it
        chat.wait_for(f"{xdg}/abhed/commands/help.md: /help is a built-in command, so this file is not used")
        chat.type("/help")
        screen = chat.wait_for("/review")
        assert f"review a file for bugs [user: {xdg}/abhed/commands/review.md]" in screen
        chat.type("/deploy")
        chat.wait_for("Unknown command /deploy: nothing was sent to the model")
        chat.wait_prompt()
        chat.keys("/rev", "Tab")
        chat.wait_for("> /review")
        chat.keys(" app.py", "Enter")
        screen = chat.wait_for("Reviewed.")
        assert f"[/review: the prompt from {xdg}/abhed/commands/review.md]" in screen
    assert sent(server) == "Review app.py for bugs; focus: app.py"


def test_workspace_commands_only_when_the_operator_allows(ws, term, tmp_path):
    conf = tmp_path / "op"
    conf.mkdir(mode=0o700)
    (conf / "config.toml").write_text("[commands]\nfrom_workspace = true\n")
    (ws / ".abhed" / "commands").mkdir(parents=True)
    (ws / ".abhed" / "commands" / "deploy.md").write_text("run the deploy script for $ARGUMENTS\n")
    with ReplayServer([Turn(text="Deploying.")]) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws),
                    env={"ABHED_CONFIG": str(conf / "config.toml"), "XDG_CONFIG_HOME": str(tmp_path / "none")})
        chat.wait_for("ends the session.")
        chat.type("/deploy staging")
        chat.wait_for("Deploying.")
    assert sent(server) == "run the deploy script for staging"


def hook_script(path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_hooks_block_a_call_run_after_it_and_at_the_turns_end_and_are_recorded(ws, term, tmp_path, home):
    conf = tmp_path / "op"
    conf.mkdir(mode=0o700)
    seen = tmp_path / "seen.jsonl"
    guard = hook_script(conf / "guard.sh", f"""in=$(cat)
printf '%s\\n' "$in" >> {seen}
case "$in" in *rm\\ -rf*) echo "rm -rf is not allowed here; use trash" >&2; exit 2;; esac
exit 0
""")
    log = hook_script(conf / "log.sh", f"cat >> {seen}; echo >> {seen}; echo \"env:$PATH:$ABHED_API_KEY\" >> {seen}\n")
    broken = hook_script(conf / "broken.sh", "cat >/dev/null; echo 'lint failed' >&2; exit 1\n")
    (conf / "config.toml").write_text(f"""
[[hooks.session_start]]
command = ["{log}"]
[[hooks.pre_tool]]
command = ["{guard}"]
tools = ["bash"]
[[hooks.post_tool]]
command = ["{log}"]
[[hooks.turn_end]]
command = ["{broken}"]
""")
    (ws / "keep.txt").write_text("keep\n")
    turns = [Turn(calls=[("bash", {"command": "rm -rf keep.txt", "description": "remove"})]),
             Turn(calls=[("bash", {"command": "touch made.txt", "description": "make"})]), Turn(text="Done.")]
    with ReplayServer(turns) as server:
        chat = term("--endpoint", server.url, "--workspace", str(ws), "--mode", "auto",
                    env={"ABHED_CONFIG": str(conf / "config.toml"), "ABHED_API_KEY": "sk-not-for-hooks"})
        chat.wait_for("ends the session.")
        chat.type("clean up")
        screen = chat.wait_for("Done.")
        assert "blocked it: rm -rf is not allowed" in flat(screen)
        screen = chat.wait_for(f"warning: hook `{broken}` on turn_end exited 1: lint failed")
        chat.type("/exit")
        chat.wait_for("CHAT-EXITED 0")
    assert (ws / "keep.txt").exists() and (ws / "made.txt").exists()
    blocked = [m for m in server.requests[1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert blocked.startswith(f"Not run: the operator's pre_tool hook `{guard}` blocked it: rm -rf is not allowed")
    text = seen.read_text()
    assert '"event": "session_start"' in text and '"event": "post_tool"' in text
    assert "sk-not-for-hooks" not in text and "env:/usr/local/bin:/usr/bin:/bin:" in text  # a minimal environment
    events = [json.loads(line) for f in (home / "sessions").glob("*/events.jsonl") for line in f.read_text().splitlines()]
    hooks = [(e["event"], e["outcome"]) for e in events if e.get("kind") == "hook"]
    assert ("pre_tool", "blocked") in hooks and ("pre_tool", "ok") in hooks and ("turn_end", "warned") in hooks
    assert ("session_start", "ok") in hooks and ("session_end", "ok") not in hooks  # none configured for it
    assert stat.S_IMODE(os.stat(conf).st_mode) == 0o700
