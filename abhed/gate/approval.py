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
import posixpath
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from abhed.gate.modes import MODES, Mode
from sandbox.protect import protected_reason

# The shell parser, the wrapper tables, job control, the glob compiler and the protected-path check
# are imported where a bash line, a path rule or a file tool's path is judged: a call of a read-only
# tool (`abhed tool read`, issue 18) needs none of them, and they were well over half of this module's load.
if TYPE_CHECKING:
    from abhed.gate import wrappers
    from abhed.gate.shellparse import Analysis, Command, Redirect

READ_ONLY_TOOLS = frozenset({"read", "glob", "grep", "plan", "todo"})
FILE_TOOLS = frozenset({"write", "edit"})
Decision = Literal["allow", "ask", "deny"]  # pragma: no mutate  (a type hint: nothing reads it at run time)

# How many path components sandbox.protect.protected_reason looks at together (tests/test_protected_agreement.py pins it).
RULE_REACH = 3
# Commands with no effect beyond the shell itself: they need no rule (redirections are still checked).
HARMLESS = frozenset({"true", "false", ":", "echo", "printf", "pwd", "cd", "test", "[", "[["})
# Programs that only read the paths they are given: naming a device or a protected path is fine.
READERS = frozenset({"cat", "head", "tail", "less", "more", "ls", "wc", "grep", "egrep", "fgrep", "rg", "stat", "file",
                     "diff", "cmp", "md5sum", "sha1sum", "sha256sum", "sha512sum", "od", "xxd", "hexdump", "readlink",
                     "realpath", "test", "[", "[[", "echo", "printf", "du", "tree", "which", "type", "basename",
                     "dirname", "lsblk", "blkid"})
# Devices that are not disks: writing them destroys nothing. Every other /dev path counts as a disk.
HARMLESS_DEVICES = frozenset({"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/stdin",
                              "/dev/stdout", "/dev/stderr", "/dev/tty"})
HARMLESS_DEVICE_DIRS = ("/dev/fd/", "/dev/pts/", "/dev/shm/")
INPUTS = ("<", "<<", "<<<", "<&", "<<-")
# Programs that destroy data whatever their options.
WIPERS = frozenset({
    "dd", "dcfldd", "dc3dd", "ddrescue", "shred", "wipe", "srm", "wipefs", "blkdiscard", "mkswap", "fdisk", "sfdisk",
    "cfdisk", "gdisk", "sgdisk", "cgdisk", "parted", "mke2fs", "mkdosfs", "mkntfs", "mkexfatfs", "mkfatfs", "mkreiserfs",
    "mkisofs", "hdparm", "nvme", "sg_format", "cryptsetup", "lvremove", "vgremove", "pvremove", "mdadm", "zpool",
    "truncate", "fallocate", "badblocks", "debugfs", "reboot", "shutdown", "poweroff", "halt",
})


@dataclass(frozen=True)  # pragma: no mutate  (immutability guards against our own bugs; no decision depends on it)
class Verdict:
    decision: Decision
    reason: str  # why, in words the model and the human both read
    rule: str = ""  # the rule or check that decided
    destructive: bool = False
    opaque: bool = False  # the analysis could not see what would run: a human must look, as for destructive


@dataclass(frozen=True)  # pragma: no mutate  (immutability guards against our own bugs; no decision depends on it)
class Answer:
    """What the human answered to an approval prompt (a bare bool means yes once / no)."""

    approved: bool
    rules: tuple[str, ...] = ()  # allow these for the rest of the session (approved answers only)
    reason: str = ""  # why declined, in the human's words: the model reads it


@dataclass(frozen=True)  # pragma: no mutate  (immutability guards against our own bugs; no decision depends on it)
class Rule:
    tool: str
    spec: str | None  # None: the whole tool

    @classmethod
    def parse(cls, text: str) -> Rule:
        match = re.fullmatch(r"\s*([a-z_]+|mcp__[A-Za-z0-9_-]*\*?)\s*(?:\((.*)\))?\s*", text, re.S)
        if not match:
            raise ValueError(f"Invalid approval rule {text!r}: write tool or tool(spec), e.g. bash(npm test), "
                             "bash(git status:*), edit(src/**), mcp__jira__create_issue, mcp__jira__*.")
        return cls(match.group(1), match.group(2).strip() if match.group(2) is not None else None)

    def __str__(self) -> str:
        return self.tool if self.spec is None else f"{self.tool}({self.spec})"

    def names(self, tool: str) -> bool:
        """Whether the rule is about `tool`: its exact name, or an MCP prefix ending in * (mcp__jira__*)."""
        return self.tool == tool or (self.tool.endswith("*") and tool.startswith(self.tool[:-1]))

    def matches_command(self, command: Command) -> bool:
        if self.tool != "bash":
            return False
        if self.spec in (None, "*"):
            return True
        import shlex  # here: only a bash rule needs it
        prefix = self.spec.endswith(":*")
        words = shlex.split(self.spec[:-2] if prefix else self.spec)
        argv = command.argv
        if prefix:
            return argv[: len(words)] == words
        return argv == words

    def matches_path(self, path: str, workspace: Path) -> bool:
        if self.spec in (None, "*"):
            return True
        from abhed.files.globpattern import compile_glob  # here: only a path rule needs it
        root = str(workspace)
        regex, _ = compile_glob(self.spec, root)
        rel = os.path.relpath(path, root)
        return not rel.startswith("..") and regex.fullmatch(rel) is not None


# -- destructive patterns ---------------------------------------------------------------------


def unwrap(command: Command) -> tuple[list[str | None], list[str]]:
    """The argv that most likely runs, looking through sudo/env/xargs/...; and the wrappers passed.

    A guess for messages and the interactive check; the security checks judge every candidate.
    """
    import abhed.gate.wrappers as wrappers  # here, as below: only a bash line needs it (see the imports above)
    return wrappers.primary(command.argv)


def destructive(command: Command, directories: tuple[str, ...] = ()) -> str | None:
    """Why this command needs a human's confirmation in every mode, or None.

    Judged on the normalised command: every command a wrapper may run (wrappers.candidates), options
    read generically with GNU abbreviations, git's global options skipped; and any redirection or
    argument that names a block device or a protected path, whatever the statement.
    """
    written = _redirect_danger(command, directories)
    if written:
        return written
    import abhed.gate.wrappers as wrappers
    for argv, via in wrappers.candidates(command.argv):
        reason = _program(argv, via) or _named_paths(argv, directories)
        if reason:
            return reason
    return None  # pragma: no mutate  (falling off the end returns None too)


def _redirect_danger(command: Command, directories: tuple[str, ...] = ()) -> str | None:
    """Why the command's redirections need a human: one writes a block device or a protected path."""
    for redirect in command.redirects:
        if redirect.operator in INPUTS or redirect.target is None or _duplicates(redirect):
            continue
        if is_device(redirect.target):
            return f"writes to the block device {redirect.target}"
        if protected(redirect.target, directories):
            return f"writes the protected path {redirect.target}"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _duplicates(redirect: Redirect) -> bool:
    """`2>&1`, `>&-`: descriptors, not files."""
    return "&" in redirect.operator and (redirect.target or "-").lstrip("-").isdigit() or redirect.target == "-"


def is_device(path: str) -> bool:
    from abhed.gate.shellparse import normalise
    path = normalise(path)
    return path.startswith("/dev/") and path not in HARMLESS_DEVICES and not path.startswith(HARMLESS_DEVICE_DIRS)


def protected(path: str, directories: tuple[str, ...] = ()) -> bool:
    """Whether a path is (or is inside) one the agent must not write unconfirmed, by the one rule the
    file tools and the sandbox apply (sandbox.protect.protected_reason): a repository's config, hooks,
    commondir, info and modules, any `.git` entry, Abhed's own `.abhed/`. Relative paths are also read
    from every directory a `cd` of the line may have entered. Where the workspace root lies in a path
    named on a command line is not known here, so every tail of the path is judged as if the root
    were just above it (`.abhed` then counts at any depth: stricter, never looser, than the rule)."""
    from abhed.gate.shellparse import normalise
    paths = [path] + [posixpath.join(d, path) for d in directories if not path.startswith("/")]
    for candidate in paths:
        parts = [p for p in normalise(candidate).split("/") if p not in ("", ".")]
        if any(_window_protected(parts[i:i + RULE_REACH], i + RULE_REACH < len(parts)) for i in range(len(parts))):
            return True
    return False


def _window_protected(window: list[str], more: bool) -> bool:
    """The rule on a few components of a path: judging each tail whole would be quadratic (a 64 KiB
    line may hold 30,000 components), and the rule looks only at a component and the one after it
    and whether the path ends there. A NUL, which no real name holds, stands for the rest."""
    return protected_reason("/".join(window + ["\0"] if more else window)) is not None


def _named_paths(argv: list[str | None], directories: tuple[str, ...]) -> str | None:
    import abhed.gate.wrappers as wrappers
    name = wrappers.program(argv)
    if name is None or name in READERS:
        return None
    # git looks after its own directory (its writes are judged by _git); cd only moves; a find
    # that runs nothing and writes nothing only reads.
    own_business = name in ("git", "cd", "pushd") or (name == "find" and not set(argv) & wrappers.FIND_WRITES)
    for arg in argv[1:]:
        for value in (arg, arg.split("=", 1)[1] if arg and "=" in arg else None):
            if not value:
                continue
            if is_device(value):
                return f"{name} names the block device {value}"
            if protected(value, directories) and not own_business:
                return f"{name} names the protected path {value}"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _program(argv: list[str | None], via: tuple[str, ...]) -> str | None:
    import abhed.gate.wrappers as wrappers
    name = wrappers.program(argv)
    if name is None:
        return None
    args = argv[1:]
    opts = wrappers.options(args)
    if name == "rm":
        if opts.has("rRf", "recursive", "force", "no-preserve-root"):
            return "rm with recursive or force flags"
        if None in args:
            return "rm with arguments only known at run time (they may be -rf)"
        if via and via[-1] == "find":  # (through xargs, rm gets run-time arguments: caught above)
            return "find rm deletes every file it finds"
    if name in WIPERS or name.startswith(("mkfs", "fsck")):
        return f"{name} destroys filesystems or data"
    if name == "rsync" and (opts.has("", "delete", "del", "remove-source-files")
                            or any(given.startswith("delete") for given in opts.long)):
        return "rsync --delete removes files at the destination"
    if name == "tar" and opts.has("", "remove-files", "delete", "recursive-unlink"):
        return "tar that deletes files"
    if name == "find" and "-delete" in args:
        return "find that deletes what it finds"
    if name in ("chmod", "chown", "chgrp") and opts.has("R", "recursive"):
        if any(t is None or t.rstrip("/") in ("", "~", "/*", "~/*") or t.startswith("$HOME")
               for t in opts.operands[1:]):
            return f"{name} -R on / or the home directory"
    if name == "git":
        return _git(args)
    return None  # pragma: no mutate  (falling off the end returns None too)


# git's global options that take a value as the next word
_GIT_VALUE_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env",
                                "--super-prefix", "--exec-path", "--list-cmds", "--attr-source"})


def _git(args: list[str | None]) -> str | None:
    import abhed.gate.wrappers as wrappers
    i = 0
    while i < len(args) and args[i] is not None and args[i].startswith("-"):  # type: ignore[union-attr]
        i += 2 if args[i] in _GIT_VALUE_OPTIONS else 1
    if i >= len(args):
        return None
    sub, rest = args[i], args[i + 1:]
    opts = wrappers.options(rest)
    check = _GIT_CHECKS.get(sub or "")
    return check(opts, rest) if check else None


def _git_push(opts: wrappers.Options, rest: list[str | None]) -> str | None:
    if (opts.has("fd", "force", "force-with-lease", "force-if-includes", "mirror", "delete", "prune")
            or any(a is None or a.startswith(("+", ":")) for a in opts.operands)):
        return "git push that rewrites or deletes remote history"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _git_checkout(opts: wrappers.Options, rest: list[str | None]) -> str | None:
    paths = "--" in rest or opts.has("fpB", "force", "ours", "theirs", "merge", "patch", "pathspec-from-file")
    operands = [a for a in opts.operands if a is not None]
    if paths or len(operands) > 1 or any(a == "." or "/" in a or "*" in a for a in operands) or None in opts.operands:
        return "git checkout that overwrites files in the working tree"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _git_config(opts: wrappers.Options, rest: list[str | None]) -> str | None:
    reads = opts.has("l", "get", "get-all", "get-regexp", "get-urlmatch", "list", "show-origin", "show-scope")
    writes = opts.has("e", "add", "replace-all", "unset", "unset-all", "rename-section", "remove-section", "edit")
    operands = [a for a in opts.operands]
    if writes or (not reads and (len(operands) >= 2 or list(operands[:1]) in (["set"], ["unset"], ["edit"]))):
        return "git config that writes the configuration (which can name commands git runs)"
    return None  # pragma: no mutate  (falling off the end returns None too)


_GIT_CHECKS = {
    "push": _git_push,
    "checkout": _git_checkout,
    "config": _git_config,
    "reset": lambda o, r: "git reset --hard discards uncommitted work" if o.has("", "hard", "merge") else None,
    "clean": lambda o, r: "git clean -f deletes untracked files" if o.has("f", "force") else None,
    "restore": lambda o, r: None if o.has("S", "staged") and not o.has("W", "worktree")
    else "git restore overwrites files in the working tree",
    "switch": lambda o, r: "git switch that discards changes" if o.has("fC", "force", "discard-changes",
                                                                          "force-create") else None,
    "stash": lambda o, r: "git stash drop/clear deletes stashed work" if list(o.operands[:1]) in (["drop"], ["clear"])
    else None,
    "rm": lambda o, r: None if o.has("", "cached") else "git rm deletes files from the working tree",
    "branch": lambda o, r: "git branch that deletes or overwrites a branch" if (
        o.has("DMC") or (o.has("d", "delete") and o.has("f", "force"))) else None,
    "reflog": lambda o, r: "git reflog expire/delete drops history" if list(o.operands[:1]) in (["expire"], ["delete"])
    else None,
    "gc": lambda o, r: "git gc --prune drops unreachable commits" if o.has("", "prune") else None,
    "filter-branch": lambda o, r: "git filter-branch rewrites history",
    "filter-repo": lambda o, r: "git filter-repo rewrites history",
    "update-ref": lambda o, r: "git update-ref -d deletes a ref" if o.has("d", "delete") else None,
    "worktree": lambda o, r: "git worktree remove --force deletes a working tree" if (
        list(o.operands[:1]) == ["remove"] and o.has("f", "force")) else None,
}


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
        deny = next((r for r in self.deny if r.names(tool) and self._tool_rule_hits(r, args)), None)
        if deny is not None:
            return Verdict("deny", f"the operator's rule deny {deny} forbids it", f"deny: {deny}")
        if tool in READ_ONLY_TOOLS or tool == "task":
            return Verdict("allow", "read-only tool", "read-only")
        if tool in FILE_TOOLS:
            if self.mode == "plan":
                return Verdict("deny", "plan mode allows read-only tools only", "mode: plan")
            from abhed.gate.protected import confirmation_needed  # here: only a file tool's path needs it
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
        if tool.startswith("mcp__"):
            return self._mcp(tool)
        return Verdict("ask", f"no rule covers the tool {tool}", "unknown tool")

    def _mcp(self, tool: str) -> Verdict:
        """An admitted MCP tool: what it does is the server's business, so no mode allows it by itself
        (plan mode refuses it); only an allow rule naming it, or a human."""
        if self.mode == "plan":
            return Verdict("deny", "plan mode allows read-only tools only; MCP tools are not known to be", "mode: plan")
        rule = next((r for r in self.allow if r.spec is None and r.names(tool)), None)
        if rule is not None:
            return Verdict("allow", f"allowed by the rule {rule}", f"allow: {rule}")
        return Verdict("ask", f"{tool} is an MCP tool and no allow rule names it", "mcp: not allowlisted")

    def _tool_rule_hits(self, rule: Rule, args: Any) -> bool:
        path = getattr(args, "path", None)
        return rule.spec is None or (path is not None and rule.matches_path(str(path), self.workspace))

    def _bash(self, line: str) -> Verdict:
        import abhed.gate.wrappers as wrappers
        from abhed.gate.jobs import job_command
        from abhed.gate.shellparse import analyze
        if job_command(line) is not None:
            return Verdict("allow", "lists or stops this session's own background jobs", "job control")
        if self.mode == "plan":
            return Verdict("deny", "plan mode allows read-only tools only; bash is not one", "mode: plan")
        analysis = analyze(line)
        for command in analysis.commands:
            rule = next((r for r in self.deny for argv, _ in wrappers.candidates(command.argv)
                         if r.matches_command(replace(command, argv=argv))), None)
            if rule is not None:
                return Verdict("deny", f"`{command.text}` is forbidden by the operator's rule deny {rule}",
                               f"deny: {rule}")
        danger = self._danger(analysis)
        if danger:
            return Verdict("ask", f"destructive: {danger}; it needs a human's confirmation in every mode",
                           f"destructive: {danger}", destructive=True)
        if analysis.opaque:
            return Verdict("ask", f"cannot be checked in advance: {analysis.opaque[0]}; it needs a human's "
                           "confirmation in every mode", "opaque", opaque=True)
        if self.mode == "auto":
            return Verdict("allow", "mode auto allows everything the check fully understands and finds not "
                           "destructive", "mode: auto")
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
        # A statement that certainly writes (a redirection into a protected path or a device) is
        # named before one that only names such a path: `cp -r .git x && echo y > .git/commondir`
        # is refused for the write, not for the copy.
        for judge in (_redirect_danger, destructive):
            for command in analysis.commands:
                reason = judge(command, tuple(analysis.directories))
                if reason:
                    return f"{reason} (`{command.text[:200]}`)"
        return None  # pragma: no mutate  (falling off the end returns None too)


# Programs that only read files and print, and have no option that writes a file or runs a program
# (not rg: --pre runs one; not xxd, tree, sort: they can write a file; not less: LESSOPEN runs one).
VIEWERS = frozenset({"cat", "head", "tail", "ls", "wc", "grep", "egrep", "fgrep", "stat", "diff", "cmp", "md5sum",
                     "sha1sum", "sha256sum", "sha512sum", "od", "hexdump", "readlink", "realpath", "du", "which",
                     "basename", "dirname", "find"}) | HARMLESS


def read_only_command(line: str) -> bool:
    """Whether a bash line provably changes no file: every command it may run (through wrappers
    too) is a viewer, nothing is redirected into a file, and the analysis saw everything. Anything
    else may change the workspace, so it is checkpointed first (abhed/session/checkpoint.py)."""
    import abhed.gate.wrappers as wrappers
    from abhed.gate.shellparse import analyze
    analysis = analyze(line)
    if analysis.opaque or analysis.recursive_functions or not analysis.commands:
        return False
    for command in analysis.commands:
        if command.assignments or _writes_files(command):
            return False
        if command.runs_script:
            continue  # its script's commands are listed and judged too
        for argv, _ in wrappers.candidates(command.argv):
            name = wrappers.program(argv)
            if name not in VIEWERS or (name == "find" and set(argv) & wrappers.FIND_WRITES):
                return False
    return True


def _writes_files(command: Command) -> bool:
    """Output redirected into a file (anything but harmless devices and descriptor duplication)."""
    return any(r.operator not in INPUTS and not _duplicates(r) and not (r.target and r.target in HARMLESS_DEVICES)
               for r in command.redirects)


@dataclass
class Granted:
    """What the human changed during the session, shared by a gate and its subagents' gates."""

    allow: list[Rule] = field(default_factory=list)
    mode: str | None = None


@dataclass
class Gate:
    """Turns a policy's "ask" into a final answer, depending on who is there to be asked.

    `ask_human`: an interactive prompt (abhed chat). `invoked_by_human`: the call was typed by a
    person (abhed tool), which approves it, except a destructive one, which also needs
    `confirmed` (--confirm). With none of these (abhed run), "ask" stays unanswered: refused.
    """

    policy: Policy
    ask_human: Callable[[str, Any, Verdict], bool | Answer] | None = None
    invoked_by_human: bool = False
    confirmed: bool = False
    # One question at a time: subagents running side by side share the human (and the terminal).
    asking: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    granted: Granted = field(default_factory=Granted, repr=False, compare=False)

    def labelled(self, agent_id: str, label: str | None, stopped: Callable[[], str | None] = lambda: None) -> Gate:
        """This gate for a subagent: the same policy, human and lock; its questions say who asks.

        A subagent asks from a worker thread, and Ctrl-C reaches the main thread only: the agent
        that started it stops it (`stopped` then says why) while the question still waits. An
        answer given after that is too late, even a yes: the call is refused and no rule granted."""
        ask = self.ask_human
        if ask is None:
            return self
        who = f"subagent {agent_id}" + (f" ({label})" if label else "")

        def ask_for_subagent(tool: str, args: Any, verdict: Verdict) -> bool | Answer:
            answer = ask(tool, args, replace(verdict, reason=f"{verdict.reason} [asked by {who}]"))
            why = stopped()
            return Answer(False, reason=f"not run, the subagent was stopped ({why})") if why else answer
        return replace(self, ask_human=ask_for_subagent)

    def effective(self) -> Policy:
        """The operator's policy with what the human granted in this session (rules, a /mode)."""
        mode = self.granted.mode or self.policy.mode
        return replace(self.policy, mode=mode, allow=self.policy.allow + tuple(self.granted.allow))  # type: ignore[arg-type]

    def review(self, tool: str, args: Any) -> Verdict:
        verdict = self.effective().check(tool, args)
        if verdict.decision != "ask":
            return verdict
        return self.confirm(tool, args, verdict)

    def confirm(self, tool: str, args: Any, verdict: Verdict) -> Verdict:
        """The human's answer to `verdict` (an "ask"), or the verdict unanswered when nobody can be asked.
        A destructive or opaque one needs the human in every mode: `abhed tool` without --confirm does not do."""
        if self.confirmed:
            return replace(verdict, decision="allow", reason=f"confirmed by the human (--confirm); {verdict.reason}")
        if self.invoked_by_human and not (verdict.destructive or verdict.opaque):
            return Verdict("allow", "run by hand by the human", verdict.rule)
        if self.ask_human is not None:
            with self.asking:
                answer = self.ask_human(tool, args, verdict)
                if not isinstance(answer, Answer):
                    answer = Answer(bool(answer))
                if answer.approved and answer.rules:
                    self.allow_for_session(answer.rules)
            if answer.approved:
                return replace(verdict, decision="allow", reason=f"approved by the human; {verdict.reason}")
            why = f": {answer.reason}" if answer.reason.strip() else ""
            return replace(verdict, decision="deny", reason=f"the human declined it{why}")
        return verdict

    def allow_for_session(self, rules: tuple[str, ...]) -> None:
        """Rules the human granted for the rest of this session: the policy grows, never the deny side."""
        self.granted.allow.extend(Rule.parse(r) for r in rules)

    def set_mode(self, mode: str) -> None:
        """`/mode`: the same rules under another mode (destructive and opaque calls still ask in every mode)."""
        if mode not in MODES:
            raise ValueError(f"Unknown approval mode {mode!r}: use one of {', '.join(MODES)}.")
        self.granted.mode = mode


def refusal(tool: str, verdict: Verdict, args: Any) -> str:
    """The error a call gets when it needs a human and none is attached (non-interactive)."""
    if verdict.decision == "deny":
        return (f"Not run: {tool} was refused ({verdict.reason}). The operator's configuration decides this; do "
                "something else, or ask the user.")
    if verdict.destructive or verdict.opaque:
        how = ("A human must confirm it: in `abhed tool` rerun with --confirm; in `abhed chat` answer the "
               "prompt. No mode or allow rule skips this.")
        if verdict.opaque:
            how += (" Or write it so every command name and argument is a plain word, without $(...), eval, "
                    "variables in commands, or functions.")
    elif tool == "bash":
        how = (f"No human is attached to approve it (non-interactive). The operator can allow it with "
               f"approval.allow = [\"bash({_first_word(str(getattr(args, 'command', '')))}:*)\"] in the config, or run "
               "with --mode auto; a human can pass --confirm.")
    else:
        how = ("No human is attached to approve it (non-interactive). The operator can allow it with approval.allow "
               f"= [\"{tool}\"] in the config, or run with --mode accept-edits; a human can pass --confirm.")
    return f"Not run: this {tool} call needs approval ({verdict.reason}). {how}"


def _first_word(command: str) -> str:
    """The program of the line's first command, for the suggested rule (bounded: the analysis is)."""
    from abhed.gate.shellparse import analyze
    commands = analyze(command).commands
    first = next((c.argv[0] for c in commands if c.argv), None)
    return first if first and re.fullmatch(r"[\w./+-]{1,100}", first) else "CMD"
