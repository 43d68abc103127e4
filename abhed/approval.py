"""Whether a tool call may run: per-command scoped rules, destructive patterns, modes (spec §7).

`bash(npm test)` allowlisted does not allowlist `bash(rm -rf /)`: a bash line is split into its
simple commands (shellparse) and every one must match a rule. Destructive commands need a human's
confirmation in every mode, including `auto`; anything the parser cannot fully understand is never
approved automatically. When unsure, ask: the layer fails closed.

Rules (operator config, `approval.allow` / `approval.deny`):
  bash(npm test)       exactly this command line
  bash(git status:*)   this command and any arguments after it
  bash(*)              any bash command (destructive and opaque ones still ask)
  edit, write          a whole tool
  edit(src/**)         a file tool on paths matching a glob (relative to the workspace, or absolute)
"""

from __future__ import annotations

import os
import re
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from abhed.globpattern import compile_glob
from abhed.jobs import job_command
from abhed.protected import confirmation_needed
from abhed.shellparse import Analysis, Command, analyze

MODES = ("ask", "plan", "accept-edits", "auto")
READ_ONLY_TOOLS = frozenset({"read", "glob", "grep", "plan", "todo"})
FILE_TOOLS = frozenset({"write", "edit"})
Mode = Literal["ask", "plan", "accept-edits", "auto"]
Decision = Literal["allow", "ask", "deny"]

# Commands that only run their arguments as another command: look through them.
WRAPPERS = {
    "sudo": {"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U"}, "doas": {"-u", "-C"}, "env": {"-u", "-C", "-S"},
    "command": set(), "builtin": set(), "exec": {"-a"}, "nice": {"-n"}, "nohup": set(), "time": {"-f", "-o"},
    "timeout": {"-s", "-k"}, "stdbuf": {"-i", "-o", "-e"}, "ionice": {"-c", "-n", "-p"}, "setsid": set(),
    "chrt": set(), "busybox": set(), "unbuffer": set(), "xargs": {"-I", "-n", "-P", "-d", "-L", "-s", "-E", "-a"},
}
PROTECTED_PARTS = (".git/hooks", ".git/config", ".abhed")
# Commands with no effect beyond the shell itself: they need no rule (redirections are still checked).
HARMLESS = frozenset({"true", "false", ":", "echo", "printf", "pwd", "cd", "test", "[", "[["})
DEVICE = re.compile(r"^/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|dm-|md|loop)")
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reason: str  # why, in words the model and the human both read
    rule: str = ""  # the rule or check that decided
    destructive: bool = False


@dataclass(frozen=True)
class Rule:
    tool: str
    spec: str | None  # None: the whole tool

    @classmethod
    def parse(cls, text: str) -> Rule:
        match = re.fullmatch(r"\s*([a-z_]+)\s*(?:\((.*)\))?\s*", text, re.S)
        if not match:
            raise ValueError(f"Invalid approval rule {text!r}: write tool or tool(spec), e.g. bash(npm test), "
                             "bash(git status:*), edit(src/**).")
        return cls(match.group(1), match.group(2).strip() if match.group(2) is not None else None)

    def __str__(self) -> str:
        return self.tool if self.spec is None else f"{self.tool}({self.spec})"

    def matches_command(self, command: Command) -> bool:
        if self.tool != "bash":
            return False
        if self.spec in (None, "*"):
            return True
        prefix = self.spec.endswith(":*")
        words = shlex.split(self.spec[:-2] if prefix else self.spec)
        argv = command.argv
        if prefix:
            return argv[: len(words)] == words
        return argv == words

    def matches_path(self, path: str, workspace: Path) -> bool:
        if self.spec in (None, "*"):
            return True
        root = str(workspace)
        regex, _ = compile_glob(self.spec, root)
        rel = os.path.relpath(path, root)
        return not rel.startswith("..") and regex.fullmatch(rel) is not None


# -- destructive patterns ---------------------------------------------------------------------


def unwrap(command: Command) -> tuple[list[str | None], list[str]]:
    """The argv that really runs, looking through sudo/env/xargs/...; and the wrappers passed."""
    argv, passed = list(command.argv), []
    while argv and argv[0] is not None and os.path.basename(argv[0]) in WRAPPERS:
        name = os.path.basename(argv[0])
        takes_value = WRAPPERS[name]
        passed.append(name)
        i = 1
        while i < len(argv):
            arg = argv[i]
            if arg is None or not (arg.startswith("-") or (name == "env" and "=" in arg)):
                break
            i += 2 if arg in takes_value else 1
        if name == "timeout" and i < len(argv):
            i += 1  # the duration
        argv = argv[i:]
    return argv, passed


def _short_flags(args: list[str | None]) -> set[str]:
    flags: set[str] = set()
    for arg in args:
        if arg and arg.startswith("-") and not arg.startswith("--"):
            flags.update(arg[1:])
    return flags


def _long(args: list[str | None]) -> set[str]:
    return {a.split("=", 1)[0] for a in args if a and a.startswith("--")}


def destructive(command: Command) -> str | None:
    """Why this command needs a human's confirmation in every mode, or None."""
    argv, wrappers = unwrap(command)
    for redirect in command.redirects:
        if redirect.target and DEVICE.match(redirect.target) and redirect.operator not in ("<", "<<", "<<<"):
            return f"writes to the block device {redirect.target}"
    if not argv or argv[0] is None:
        return None
    name, args = os.path.basename(argv[0]), argv[1:]
    short, long = _short_flags(args), _long(args)
    if name == "rm":
        if "xargs" in wrappers:
            return "xargs rm deletes every file named on its input"
        if short & {"r", "R", "f"} or long & {"--recursive", "--force"}:
            return "rm with recursive or force flags"
    if name == "dd":
        return "dd overwrites files and devices byte for byte"
    if name.startswith("mkfs") or name in ("wipefs", "shred", "fdisk", "sfdisk", "parted", "mkswap"):
        return f"{name} destroys filesystems or data"
    if name in ("chmod", "chown", "chgrp") and ("R" in short or "--recursive" in long):
        targets = [a for a in args if a is None or not a.startswith("-")]
        if any(t is None or t.rstrip("/") in ("", "~", "/*", "~/*") or t.startswith("$HOME") for t in targets[1:]):
            return f"{name} -R on / or the home directory"
    if name in ("tee", "cp", "mv", "install") and any(a and DEVICE.match(a) for a in args):
        return f"{name} writes to a block device"
    if name == "find" and ("-delete" in args or any(a in ("-exec", "-execdir") and "rm" in args for a in args)):
        return "find that deletes what it finds"
    if name == "git" and args:
        return _git(args[0], args[1:])
    return None


def _git(sub: str | None, args: list[str | None]) -> str | None:
    short, long = _short_flags(args), _long(args)
    if sub == "push" and ("f" in short or long & {"--force", "--force-with-lease", "--force-if-includes", "--mirror",
                                                  "--delete"}
                          or any(a and a.startswith("+") for a in args)):
        return "git push that rewrites or deletes remote history"
    if sub == "reset" and "--hard" in long:
        return "git reset --hard discards uncommitted work"
    if sub == "clean" and ("f" in short or "--force" in long):
        return "git clean -f deletes untracked files"
    return None


def _protected_write(command: Command) -> str | None:
    for redirect in command.redirects:
        target = redirect.target
        if redirect.operator in ("<", "<<", "<<<") or target is None:
            continue
        if any(part in target for part in PROTECTED_PARTS):
            return f"writes the protected path {target}"
    return None


def _writes_files(command: Command) -> bool:
    """Output redirected into a file (anything but /dev/null and descriptor duplication)."""
    for redirect in command.redirects:
        if redirect.operator in ("<", "<<", "<<<"):
            continue  # input
        duplicate = redirect.operator in (">&", "<&") and (redirect.target or "").lstrip("-").isdigit()
        if not duplicate and redirect.target != "-" and redirect.target not in HARMLESS_TARGETS:
            return True
    return False


# -- the policy -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    mode: Mode
    allow: tuple[Rule, ...]
    deny: tuple[Rule, ...]
    workspace: Path

    @classmethod
    def create(cls, mode: str, allow: list[str], deny: list[str], workspace: Path) -> Policy:
        if mode not in MODES:
            raise ValueError(f"Unknown approval mode {mode!r}: use one of {', '.join(MODES)}.")
        return cls(mode, tuple(map(Rule.parse, allow)), tuple(map(Rule.parse, deny)), workspace)  # type: ignore[arg-type]

    def check(self, tool: str, args: Any) -> Verdict:
        if tool == "bash":
            return self._bash(str(getattr(args, "command", "")))
        deny = next((r for r in self.deny if r.tool == tool and self._tool_rule_hits(r, args)), None)
        if deny is not None:
            return Verdict("deny", f"the operator's rule deny {deny} forbids it", f"deny: {deny}")
        if tool in READ_ONLY_TOOLS or tool == "task":
            return Verdict("allow", "read-only tool", "read-only")
        if tool in FILE_TOOLS:
            if self.mode == "plan":
                return Verdict("deny", "plan mode allows read-only tools only", "mode: plan")
            guarded = confirmation_needed(getattr(args, "path", None), self.workspace)
            if guarded:
                return Verdict("ask", f"{tool} {guarded}; it needs a human's confirmation in every mode",
                               "protected path", destructive=True)
            if self.mode in ("accept-edits", "auto"):
                return Verdict("allow", f"mode {self.mode} allows file edits", f"mode: {self.mode}")
            rule = next((r for r in self.allow if r.tool == tool and self._tool_rule_hits(r, args)), None)
            if rule is not None:
                return Verdict("allow", f"allowed by the rule {rule}", f"allow: {rule}")
            return Verdict("ask", f"{tool} changes files and no rule allows it in mode ask", "mode: ask")
        return Verdict("ask", f"no rule covers the tool {tool}", "unknown tool")

    def _tool_rule_hits(self, rule: Rule, args: Any) -> bool:
        path = getattr(args, "path", None)
        return rule.spec is None or (path is not None and rule.matches_path(str(path), self.workspace))

    def _bash(self, line: str) -> Verdict:
        if job_command(line) is not None:
            return Verdict("allow", "lists or stops this session's own background jobs", "job control")
        if self.mode == "plan":
            return Verdict("deny", "plan mode allows read-only tools only; bash is not one", "mode: plan")
        analysis = analyze(line)
        for command in analysis.commands:
            rule = next((r for r in self.deny if r.matches_command(command)), None)
            if rule is not None:
                return Verdict("deny", f"`{command.text}` is forbidden by the operator's rule deny {rule}",
                               f"deny: {rule}")
        danger = self._danger(analysis)
        if danger:
            return Verdict("ask", f"destructive: {danger}; it needs a human's confirmation in every mode",
                           f"destructive: {danger}", destructive=True)
        if analysis.opaque:
            return Verdict("ask", f"cannot be checked in advance: {analysis.opaque[0]}", "opaque")
        if self.mode == "auto":
            return Verdict("allow", "mode auto allows everything but destructive commands", "mode: auto")
        for command in analysis.commands:
            if command.assignments or _writes_files(command):
                what = "sets environment variables" if command.assignments else "redirects output into a file"
                return Verdict("ask", f"`{command.text}` {what}, which no allow rule covers", "not allowlisted")
            if command.program in HARMLESS or command.runs_script:
                continue  # a `sh -c 'script'` is judged by the commands of its script, listed too
            if not any(r.matches_command(command) for r in self.allow):
                return Verdict("ask", f"`{command.text}` matches no allow rule", "not allowlisted")
        rules = sorted({str(r) for c in analysis.commands for r in self.allow if r.matches_command(c)})
        which = ", ".join(rules) or "harmless shell builtins"
        return Verdict("allow", f"allowed by {which}", f"allow: {which}")

    @staticmethod
    def _danger(analysis: Analysis) -> str | None:
        if analysis.recursive_functions:
            return f"the function {analysis.recursive_functions[0]} calls itself (a fork bomb)"
        for command in analysis.commands:
            reason = destructive(command) or _protected_write(command)
            if reason:
                return f"{reason} (`{command.text}`)"
        return None


@dataclass
class Gate:
    """Turns a policy's "ask" into a final answer, depending on who is there to be asked.

    `ask_human`: an interactive prompt (abhed chat). `invoked_by_human`: the call was typed by a
    person (abhed tool), which approves it, except a destructive one, which also needs
    `confirmed` (--confirm). With none of these (abhed run), "ask" stays unanswered: refused.
    """

    policy: Policy
    ask_human: Callable[[str, Any, Verdict], bool] | None = None
    invoked_by_human: bool = False
    confirmed: bool = False
    # One question at a time: subagents running side by side share the human (and the terminal).
    asking: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def labelled(self, agent_id: str, label: str | None) -> Gate:
        """This gate for a subagent: the same policy, human and lock; its questions say who asks."""
        ask = self.ask_human
        if ask is None:
            return self
        who = f"subagent {agent_id}" + (f" ({label})" if label else "")

        def ask_for_subagent(tool: str, args: Any, verdict: Verdict) -> bool:
            return ask(tool, args, replace(verdict, reason=f"{verdict.reason} [asked by {who}]"))
        return replace(self, ask_human=ask_for_subagent)

    def review(self, tool: str, args: Any) -> Verdict:
        verdict = self.policy.check(tool, args)
        if verdict.decision != "ask":
            return verdict
        if self.confirmed:
            return Verdict("allow", f"confirmed by the human (--confirm); {verdict.reason}", verdict.rule,
                           verdict.destructive)
        if self.invoked_by_human and not verdict.destructive:
            return Verdict("allow", "run by hand by the human", verdict.rule)
        if self.ask_human is not None:
            with self.asking:
                approved = self.ask_human(tool, args, verdict)
            if approved:
                return Verdict("allow", f"approved by the human; {verdict.reason}", verdict.rule, verdict.destructive)
            return Verdict("deny", "the human declined it", verdict.rule, verdict.destructive)
        return verdict


def refusal(tool: str, verdict: Verdict, args: Any) -> str:
    """The error a call gets when it needs a human and none is attached (non-interactive)."""
    if verdict.decision == "deny":
        return (f"Not run: {tool} was refused ({verdict.reason}). The operator's configuration decides this; do "
                "something else, or ask the user.")
    if verdict.destructive:
        how = ("A human must confirm it: in `abhed tool` rerun with --confirm; in `abhed chat` answer the "
               "prompt. No mode or allow rule skips this.")
    elif tool == "bash":
        command = getattr(args, "command", "")
        first = shlex.split(command)[0] if command.strip() and _splittable(command) else "CMD"
        how = (f"No human is attached to approve it (non-interactive). The operator can allow it with "
               f"approval.allow = [\"bash({first}:*)\"] in the config, or run with --mode auto; a human can pass "
               "--confirm.")
    else:
        how = ("No human is attached to approve it (non-interactive). The operator can allow it with approval.allow "
               f"= [\"{tool}\"] in the config, or run with --mode accept-edits; a human can pass --confirm.")
    return f"Not run: this {tool} call needs approval ({verdict.reason}). {how}"


def _splittable(command: str) -> bool:
    try:
        shlex.split(command)
    except ValueError:
        return False
    return True
