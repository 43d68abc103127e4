"""Commands that wait for a terminal, caught before they run (spec §7).

A bash call has no terminal and stdin is /dev/null: an editor, a pager, a REPL without a script
or an interactive git mode would hang until the timeout or do nothing useful. Each rule names
the program, when it is interactive, and the non-interactive form to use instead.
"""

from __future__ import annotations

from abhed.gate.approval import unwrap
from abhed.gate.shellparse import Analysis, Command

EDITORS = frozenset({"vi", "vim", "nvim", "view", "nano", "pico", "emacs", "joe", "mcedit", "ed", "ex", "micro"})
PAGERS = frozenset({"less", "more", "most", "pg"})
SCREENS = frozenset({"top", "htop", "btop", "atop", "iotop", "watch", "tmux", "screen", "mc", "ranger", "nmtui"})
REPLS = {  # program -> flags that make it run a script or a one-liner instead of a REPL
    "python": {"-c", "-m"}, "python3": {"-c", "-m"}, "python2": {"-c", "-m"}, "node": {"-e", "-p", "--eval",
    "--print"}, "irb": set(), "ipython": {"-c", "-m"}, "ghci": {"-e"}, "lua": {"-e"}, "php": {"-r", "-f"},
    "perl": {"-e", "-E"}, "ruby": {"-e"}, "R": {"-e", "-f"}, "sqlite3": set(), "psql": {"-c", "-f"},
    "mysql": {"-e", "--execute"}, "redis-cli": set(), "bash": {"-c"}, "sh": {"-c"}, "zsh": {"-c"},
}


def _has_operand(args: list[str | None]) -> bool:
    return any(a is None or not a.startswith("-") for a in args)


def interactive_reason(analysis: Analysis) -> str | None:
    for command in analysis.commands:
        reason = _check(command)
        if reason:
            return reason
    return None


def _check(command: Command) -> str | None:
    argv, _ = unwrap(command)
    if not argv or argv[0] is None:
        return None
    name, args = argv[0].rsplit("/", 1)[-1], argv[1:]
    if name in EDITORS:
        return (f"`{name}` is an interactive editor and would wait for a terminal that bash does not have. Change "
                "files with the edit or write tools; for scripted edits use sed -i or a short script.")
    if name in PAGERS:
        return (f"`{name}` is a pager. Read files with the read tool, or print with cat/head/tail (output is already "
                "captured and bounded).")
    if name in SCREENS:
        return (f"`{name}` draws a full-screen interface and never exits by itself. Use a one-shot form: "
                "`top -b -n 1`, `ps aux`, or a loop with a count.")
    if name == "ssh" and len([a for a in args if a is None or not a.startswith("-")]) < 2:
        return ("`ssh` without a remote command opens an interactive login. Pass the command to run "
                "(ssh host 'uname -a') — and note that the sandbox has no network unless the operator allows it.")
    if name in REPLS:
        script_flags = REPLS[name]
        if not _has_operand(args) and not any(a in script_flags for a in args):
            hint = {"python": "python script.py or python -c '...'", "node": "node script.js or node -e '...'"}.get(
                name.rstrip("23"), f"{name} with a script file or a one-line command")
            return (f"`{name}` with no script starts an interactive session, and stdin is /dev/null. Run "
                    f"{hint} instead.")
    if name == "git" and args:
        return _git(args[0], args[1:])
    return None


def _git(sub: str | None, args: list[str | None]) -> str | None:
    if sub == "rebase" and ("-i" in args or "--interactive" in args):
        return ("`git rebase -i` opens an editor for the todo list. Give it a scripted one: "
                "GIT_SEQUENCE_EDITOR=\"sed -i 's/^pick <sha>/squash <sha>/'\" git rebase -i <base>, or use "
                "git rebase --onto / git commit --fixup with --autosquash.")
    if sub in ("add", "checkout", "reset", "restore", "stash") and ("-p" in args or "--patch" in args or
                                                                     (sub == "add" and ("-i" in args or
                                                                                        "--interactive" in args))):
        return (f"`git {sub} -p` asks about each hunk interactively. Name whole files (git {sub} path/to/file), or "
                "change the file with edit first and then add it.")
    if sub == "commit" and not any(a and (a in ("-m", "-F", "--file", "-C", "--no-edit", "--reuse-message")
                                          or a.startswith(("-m", "--message", "-F", "--file=", "-C"))) for a in args):
        return ("`git commit` without a message opens an editor. Give the message: git commit -m \"subject\" "
                "(repeat -m for more paragraphs), or git commit --no-edit when amending.")
    if sub in ("mergetool", "difftool"):
        return f"`git {sub}` starts an interactive tool. Use git diff, or resolve conflicts with the edit tool."
    return None
