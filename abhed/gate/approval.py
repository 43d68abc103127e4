"""Whether a tool call may run: per-command scoped rules, the courtesy list, modes (spec §7).

`bash(npm test)` allowlisted does not allowlist `bash(rm -rf /)`: a bash line is split into its
simple commands (shellparse) and every one must only read (readonly.py) or match a rule. In auto mode
nothing irreversible happens without a human: a command runs unasked when the check understands it,
or when it can be undone (the sandbox keeps it in the workspace without network, and a checkpoint is
taken first), whatever it is; the courtesy list of clearly destructive commands (courtesy.py) still
asks unless approval.auto_destructive = "undoable". When unsure and not undoable, ask: the layer
fails closed.

Rules (operator config, `approval.allow` / `approval.deny`):
  bash(npm test)       exactly this command line
  bash(git status:*)   this command and any arguments after it
  bash(*)              any bash command (destructive and opaque ones still ask)
  edit, write          a whole tool
  edit(src/**)         a file tool on paths matching a glob (relative to the workspace, or absolute)

What a tool is (read-only, a file tool, a runner of command lines, of unknown effect) the gate takes
from the tool's declared traits (abhed/common/traits.py), never from a list of names here.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sandbox.backends import capabilities

from abhed.common import traits as tool_traits
from abhed.common.traits import Traits
from abhed.gate.modes import MODES, Mode, is_mode

# The shell parser, the wrapper tables, the courtesy and read-only lists, job control, the glob
# compiler and the protected-path check are imported where a bash line, a path rule or a file
# tool's path is judged: a call of a read-only tool (`abhed tool read`, issue 18) needs none of
# them, and they were well over half of this module's load.
if TYPE_CHECKING:
    from abhed.gate.shellparse import Analysis, Command

Decision = Literal["allow", "ask", "deny"]  # pragma: no mutate  (a type hint: nothing reads it at run time)

# Why a call that may change the workspace might not be undoable, when the operator's settings are not known.
UNDO_UNKNOWN = "Abhed was not told that checkpoints are on and the sandbox keeps commands in the workspace"
AUTO_DESTRUCTIVE = ("ask", "undoable")
# What makes a call undoable, in the reasons auto mode gives for running it unasked.
UNDO_BOUND = ("the sandbox keeps it in the workspace without network, and a checkpoint taken first lets "
              "`abhed undo` take it back")


# What the gate writes in a verdict's reason when a human decided it (Approvals.confirm); decided_by
# reads the same words back, so the session log needs no field of its own for who decided.
APPROVED, CONFIRMED = "approved by the human", "confirmed by the human (--confirm)"
DECLINED, BY_HAND = "the human declined it", "run by hand by the human"
HOOK_BLOCKED = "hook_blocked"  # dispatch's error kind for a call an operator's pre_tool hook blocked: it did not run
DECIDERS = ("human", "nobody", "rule", "mode", "hook", "check")


def decided_by(approval: dict[str, Any], error_kind: str | None = None) -> str:
    """Who decided a call, from the approval dispatch put in its result's metadata (and its error kind):
    `human` (asked at a prompt, --confirm, or typed by hand), `nobody` (a human was needed and none
    was there), `rule` (an allow or deny rule), `mode` (the approval mode; auto mode's undoable runs
    too), `hook` (a pre_tool hook blocked it) or `check` (the built-in check: a read-only tool or
    command, job control). The stream (cli/streamjson.py) and the audit (session/auditrecord.py) both
    say it with these words."""
    if error_kind == HOOK_BLOCKED:
        return "hook"
    reason, rule = str(approval.get("reason") or ""), str(approval.get("rule") or "")
    if reason.startswith((APPROVED, CONFIRMED, DECLINED, BY_HAND)):
        return "human"
    if approval.get("decision") == "ask":
        return "nobody"
    if rule.startswith(("allow: ", "deny: ")):
        return "rule"
    if rule.startswith(("mode: ", "destructive: ")) or rule == "undoable":
        return "mode"
    return "check"


@dataclass(frozen=True)  # pragma: no mutate  (immutability guards against our own bugs; no decision depends on it)
class Verdict:
    decision: Decision
    reason: str  # why, in words the model and the human both read
    rule: str = ""  # the rule or check that decided
    destructive: bool = False  # on the courtesy list (abhed/gate/courtesy.py): a human sees it first
    opaque: bool = False  # the analysis could not see what would run: a human must look, unless it can be undone
    undoable: bool = False  # allowed only because it can be undone: dispatch must take a checkpoint first
    declined: bool = False  # denied by the human at the prompt, not by the operator's rules


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

    @cached_property
    def _pattern(self) -> tuple[list[str | None], bool]:
        """The rule's words, normalised as a command is (`bash(/bin/rm:*)` is about `rm`), and whether
        it is a prefix rule (`:*`)."""
        import shlex  # here: only a bash rule needs it

        import abhed.gate.wrappers as wrappers
        spec = self.spec or ""
        prefix = spec.endswith(":*")
        words: list[str | None] = list(shlex.split(spec[:-2] if prefix else spec))
        found = wrappers.normal(words) if words else None
        return (found[0] if found else words), prefix

    def allows(self, command: Command) -> bool:
        """Whether this allow rule covers the command: its normalised form (wrappers that change
        nothing passed, `/bin/rm` as `rm`, git's plain global options dropped) is the rule's words,
        or starts with them for a prefix rule, and the rest holds no option that makes the program
        run a file or a string (runoptions). A run-time word, a wrapper that is not transparent,
        an option a table does not know: not covered (a human is asked)."""
        if self.tool != "bash":
            return False
        if self.spec in (None, "*"):
            return True
        import abhed.gate.runoptions as runoptions
        import abhed.gate.wrappers as wrappers
        found = wrappers.normal(command.argv)
        if found is None or None in found[0]:
            return False
        argv, (words, prefix) = found[0], self._pattern
        if not prefix:
            return argv == words
        return argv[:len(words)] == words and runoptions.reason(argv, len(words)) is None

    def denies(self, command: Command) -> bool:
        """Whether this deny rule forbids the command in any spelling: every command the line may run
        (wrappers.candidates: through any wrapper, find -exec, xargs), its program by name
        (`/usr/bin/rm`, `git-push`), and between the rule's words any options and their values
        (`git -C . --no-pager push` is `git push`). When the candidates could not all be followed,
        any word naming the rule's program denies (fail closed)."""
        if self.tool != "bash":
            return False
        if self.spec in (None, "*"):
            return True
        import abhed.gate.wrappers as wrappers
        words, prefix = self._pattern
        found = wrappers.candidates(command.argv)
        if any(_spelled(argv, words, prefix) for argv, _ in found):
            return True
        return not found.complete and any(_named(a) == _named(words[0]) for a in command.argv if a)

    def matches_path(self, path: str, workspace: Path) -> bool:
        if self.spec in (None, "*"):
            return True
        from abhed.files.globpattern import compile_glob  # here: only a path rule needs it
        root = str(workspace)
        regex, _ = compile_glob(self.spec, root)
        rel = os.path.relpath(path, root)
        return not rel.startswith("..") and regex.fullmatch(rel) is not None


def _named(word: str | None) -> list[str]:
    """A program word as rules name it: `/usr/bin/rm` -> [rm], `git-push` -> [git, push]."""
    name = (word or "").rpartition("/")[2]
    return ["git", name[4:]] if name.startswith("git-") and len(name) > 4 else [name]


def _spelled(argv: list[str | None], words: list[str | None], prefix: bool) -> bool:
    """Whether argv spells the rule's words: its program by name, then each later word in order,
    with only options (a word starting with `-`, or one only known at run time) and the word after
    an option (maybe its value) between them; for an exact rule, nothing after but a `find`
    terminator. Linear in len(argv)."""
    if not argv or argv[0] is None:
        return False
    given = _named(argv[0]) + argv[1:]
    if given[0] != words[0]:
        return False
    i, after_option = 1, False
    for word in words[1:]:
        while i < len(given) and given[i] != word:
            option = (arg := given[i]) is None or arg.startswith("-")
            if not (option or after_option):
                return False
            after_option = option
            i += 1
        if i == len(given):
            return False
        i, after_option = i + 1, False
    return prefix or i == len(given) or given[i] in (";", "+")


# -- what runs through a wrapper --------------------------------------------------------------


def unwrap(command: Command) -> tuple[list[str | None], list[str]]:
    """The argv that most likely runs, looking through sudo/env/xargs/...; and the wrappers passed.

    A guess for messages and the interactive check; the security checks judge every candidate.
    """
    import abhed.gate.wrappers as wrappers  # here, as below: only a bash line needs it (see the imports above)
    return wrappers.primary(command.argv)


def undo_gap(settings: Any, checkpoints: bool) -> str | None:
    """Why a bash command's effects might not all be undoable under these settings (config.Settings),
    or None when they are: a checkpoint is taken before it (`checkpoints`: the session has them), and
    the sandbox confines it to the workspace, without network, with nothing else writable."""
    sandbox = settings.sandbox
    if not checkpoints:
        return "checkpoints are off (checkpoints.enabled = false, or no git binary)"
    if not capabilities(sandbox.backend).isolates:
        return f"sandbox.backend = \"{sandbox.backend}\" confines nothing"
    if sandbox.allow_network:
        return "commands have network access (sandbox.allow_network), which no checkpoint takes back"
    if sandbox.rw_binds:
        return "commands can write outside the workspace (sandbox.rw_binds), where no checkpoint reaches"
    return None  # pragma: no mutate  (falling off the end returns None too)


# -- the policy -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    mode: Mode
    allow: tuple[Rule, ...]
    deny: tuple[Rule, ...]
    workspace: Path
    # Why a command might not be undoable (undo_gap), or None: then auto mode runs what the analysis
    # cannot see into, since the sandbox bounds it and the checkpoint before it takes it back.
    undo_gap: str | None = UNDO_UNKNOWN
    auto_destructive: str = "ask"  # "undoable": auto mode runs the courtesy list too, after a checkpoint

    @classmethod
    def create(cls, mode: str, allow: list[str], deny: list[str], workspace: Path, *,
               undo_gap: str | None = UNDO_UNKNOWN, auto_destructive: str = "ask") -> Policy:
        if not is_mode(mode):
            raise ValueError(f"Unknown approval mode {mode!r}: use one of {', '.join(MODES)}.")
        if auto_destructive not in AUTO_DESTRUCTIVE:
            raise ValueError(f"Unknown approval.auto_destructive {auto_destructive!r}: use ask or undoable.")
        return cls(mode, tuple(map(Rule.parse, allow)), tuple(map(Rule.parse, deny)), workspace,
                   undo_gap, auto_destructive)

    @classmethod
    def from_settings(cls, settings: Any, workspace: Path, *, checkpoints: bool, mode: str | None = None,
                      allow: list[str] | None = None) -> Policy:
        """The operator's policy (config.Settings) for a session that has checkpoints or not; `mode`
        and `allow` replace the configured ones (command-line flags)."""
        rules = settings.approval
        return cls.create(mode or rules.mode, rules.allow if allow is None else allow, rules.deny, workspace,
                          undo_gap=undo_gap(settings, checkpoints), auto_destructive=rules.auto_destructive)

    def check(self, tool: str, args: Any, traits: Traits | None = None) -> Verdict:
        """The verdict on a call of `tool` with `args`, by what the tool declares it does (`traits`;
        when not given, what the tool registry says of the name: common/traits.of)."""
        traits = traits or tool_traits.of(tool)
        if traits is not None and traits.known and traits.runs_code:
            return self._bash(args)
        deny = next((r for r in self.deny if r.names(tool) and self._tool_rule_hits(r, args)), None)
        if deny is not None:
            return Verdict("deny", f"the operator's rule deny {deny} forbids it", f"deny: {deny}")
        if traits is None or not traits.known:
            return self._mcp(tool) if tool.startswith("mcp__") else Verdict(
                "ask", f"no rule covers the tool {tool}", "unknown tool")
        if not traits.mutates:  # task too: it changes nothing itself, and each call of its subagent is approved
            return Verdict("allow", "read-only tool", "read-only")
        return self._file_tool(tool, args)

    def _file_tool(self, tool: str, args: Any) -> Verdict:
        """A tool that changes the file its `path` names (write, edit)."""
        if self.mode == "plan":
            return Verdict("deny", "plan mode allows read-only tools only", "mode: plan")
        if not hasattr(args, "path"):  # fail closed: a tool that changes files but names none the check can see
            return Verdict("ask", f"{tool} changes files but its arguments name no `path` the protected-path "
                           "check can judge; it needs a human's confirmation in every mode", "no path", destructive=True)
        from abhed.gate.protected import confirmation_needed  # here: only a file tool's path needs it
        guarded = confirmation_needed(args.path, self.workspace)
        if guarded:
            return Verdict("ask", f"{tool} {guarded}; it needs a human's confirmation in every mode",
                           "protected path", destructive=True)
        if self.mode in ("accept-edits", "auto"):
            return Verdict("allow", f"mode {self.mode} allows file edits", f"mode: {self.mode}")
        rule = next((r for r in self.allow if r.tool == tool and self._tool_rule_hits(r, args)), None)
        if rule is not None:
            return Verdict("allow", f"allowed by the rule {rule}", f"allow: {rule}")
        return Verdict("ask", f"{tool} changes files and no rule allows it in mode ask", "mode: ask")

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

    def _bash(self, args: Any) -> Verdict:
        """A command line (`args.command`), judged by the call's one analysis (shellparse.analysis_of)."""
        from abhed.gate.jobs import job_command
        from abhed.gate.readonly import read_only
        from abhed.gate.shellparse import analysis_of
        if job_command(str(getattr(args, "command", ""))) is not None:
            return Verdict("allow", "lists or stops this session's own background jobs", "job control")
        analysis = analysis_of(args)
        for command in analysis.commands:
            rule = next((r for r in self.deny if r.denies(command)), None)
            if rule is not None:
                return Verdict("deny", f"`{command.text}` is forbidden by the operator's rule deny {rule}",
                               f"deny: {rule}")
        danger = self._danger(analysis)
        reads = danger is None and read_only(analysis)
        if reads:
            return Verdict("allow", "it only reads: every command is on the read-only list", "read-only")
        if self.mode == "plan":
            return Verdict("deny", "plan mode allows read-only tools, and bash only for commands that only read "
                           "(ls, cat, grep, git status, git log...); this line is not one", "mode: plan")
        if danger:
            return self._destructive(*danger, self._gap(analysis))
        if analysis.opaque:
            return self._opaque(analysis.opaque[0], self._gap(analysis))
        if self.mode == "auto":
            return Verdict("allow", "mode auto allows everything the check fully understands and finds not "
                           "destructive", "mode: auto")
        return self._allowlisted(analysis)

    def _allowlisted(self, analysis: Analysis) -> Verdict:
        """Ask and accept-edits modes: each command must only read, or match an allow rule."""
        from abhed.gate.courtesy import writes_files
        from abhed.gate.readonly import reads
        reading = False
        for command in analysis.commands:
            if command.assignments or writes_files(command):
                what = "sets environment variables" if command.assignments else "redirects output into a file"
                return Verdict("ask", f"`{command.text}` {what}, which no allow rule covers", "not allowlisted")
            if reads(command):
                reading = True
            elif not command.runs_script and not any(r.allows(command) for r in self.allow):
                return Verdict("ask", f"`{command.text}` matches no allow rule", "not allowlisted")
            # (a `sh -c 'script'` is judged by the commands of its script, listed too)
        rules = sorted({str(r) for c in analysis.commands for r in self.allow if r.allows(c)})
        which = ", ".join(rules) or "no rule: it runs no command"
        others = " (the other commands only read)" if reading else ""
        return Verdict("allow", f"allowed by {which}{others}", f"allow: {which}")

    def _gap(self, analysis: Analysis) -> str | None:
        """Why running this line unasked might be irreversible, or escape the operator's deny rules: a
        deny rule cannot be shown not to match what the check cannot see (`c=curl; $c x`)."""
        if self.undo_gap is not None or not analysis.opaque:
            return self.undo_gap
        return next((f"the operator's rule deny {r} may match what it runs" for r in self.deny if r.tool == "bash"),
                    None)

    def _destructive(self, reason: str, undoable: bool, gap: str | None) -> Verdict:
        """On the courtesy list: a human sees it first, unless the operator lets auto mode undo it instead."""
        rule = f"destructive: {reason}"
        if undoable and self.mode == "auto" and self.auto_destructive == "undoable" and gap is None:
            return Verdict("allow", f"destructive: {reason}; approval.auto_destructive = \"undoable\" runs it after a "
                           f"checkpoint ({UNDO_BOUND})", rule, destructive=True, undoable=True)
        if not undoable or self.mode != "auto":
            instead = ""
        elif gap is not None:
            instead = f" (auto mode does not run it unasked: {gap})"
        else:
            instead = " (approval.auto_destructive = \"undoable\" would run it after a checkpoint instead)"
        return Verdict("ask", f"destructive: {reason}; it needs a human's confirmation{instead}", rule,
                       destructive=True)

    def _opaque(self, why: str, gap: str | None) -> Verdict:
        """The analysis cannot see all it runs: auto mode runs it when it can be undone; otherwise a human decides."""
        if self.mode == "auto" and gap is None:
            return Verdict("allow", f"mode auto runs it unasked because it can be undone ({UNDO_BOUND}), though the "
                           f"check cannot see all it runs: {why}", "undoable", opaque=True, undoable=True)
        instead = f"; auto mode would not run it unasked either: {gap}" if self.mode == "auto" else (
            "; auto mode runs such a line unasked when a checkpoint can undo it")
        return Verdict("ask", f"cannot be checked in advance: {why}; it needs a human's confirmation{instead}",
                       "opaque", opaque=True)

    @staticmethod
    def _danger(analysis: Analysis) -> tuple[str, bool] | None:
        """Why the line is on the courtesy list, and whether a checkpoint could undo it."""
        from abhed.gate.courtesy import always_asks, emptied, harm, written
        if analysis.recursive_functions:
            return f"the function {analysis.recursive_functions[0]} calls itself (a fork bomb)", False
        directories = tuple(analysis.directories)
        # A statement that certainly writes (a redirection into a protected path or a device) is
        # named before one that only names such a path: `cp -r .git x && echo y > .git/commondir`
        # is refused for the write, not for the copy.
        for judge in (written, always_asks):
            for command in analysis.commands:
                reason = judge(command, directories)
                if reason:
                    return f"{reason} (`{command.text[:200]}`)", False
        for command in analysis.commands:
            reason = harm(command)
            if reason:
                return f"{reason} (`{command.text[:200]}`)", True
        reason = emptied(analysis.commands)
        return (reason, True) if reason else None


def read_only_command(line: str) -> bool:
    """Whether a bash line provably changes no file (the read-only list, abhed/gate/readonly.py): then
    dispatch takes no checkpoint before it, and ask and plan modes run it unasked. Anything else may
    change the workspace, so it is checkpointed first (abhed/session/checkpoint.py). A call's own
    line is judged through its one analysis instead (tools/bash.py Bash.call_traits); this is the
    same question asked of a bare line (the read-only list's tests)."""
    from abhed.gate.readonly import read_only
    from abhed.gate.shellparse import analyze
    return read_only(analyze(line))


@dataclass
class Granted:
    """What the human changed during the session, shared by a gate and its subagents' gates."""

    allow: list[Rule] = field(default_factory=list)
    mode: Mode | None = None


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
    # Why a /mode may not be chosen (the site policy's permitted modes), or None when it may.
    mode_refused: Callable[[str], str | None] | None = field(default=None, repr=False, compare=False)

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
        return replace(self.policy, mode=mode, allow=self.policy.allow + tuple(self.granted.allow))

    def review(self, tool: str, args: Any, traits: Traits | None = None) -> Verdict:
        verdict = self.effective().check(tool, args, traits)
        if verdict.decision != "ask":
            return verdict
        return self.confirm(tool, args, verdict)

    def confirm(self, tool: str, args: Any, verdict: Verdict) -> Verdict:
        """The human's answer to `verdict` (an "ask"), or the verdict unanswered when nobody can be asked.
        A destructive or opaque one needs the human: `abhed tool` without --confirm does not do."""
        if self.confirmed:
            return replace(verdict, decision="allow", reason=f"{CONFIRMED}; {verdict.reason}")
        if self.invoked_by_human and not (verdict.destructive or verdict.opaque):
            return Verdict("allow", BY_HAND, verdict.rule)
        if self.ask_human is not None:
            with self.asking:
                answer = self.ask_human(tool, args, verdict)
                if not isinstance(answer, Answer):
                    answer = Answer(bool(answer))
                if answer.approved and answer.rules:
                    self.allow_for_session(answer.rules)
            if answer.approved:
                return replace(verdict, decision="allow", reason=f"{APPROVED}; {verdict.reason}")
            why = f": {answer.reason}" if answer.reason.strip() else ""
            return replace(verdict, decision="deny", reason=f"{DECLINED}{why}", declined=True)
        return verdict

    def allow_for_session(self, rules: tuple[str, ...]) -> None:
        """Rules the human granted for the rest of this session: the policy grows, never the deny side."""
        self.granted.allow.extend(Rule.parse(r) for r in rules)

    def permits_mode(self, mode: str) -> bool:
        """Whether `mode` may be chosen (set_mode), under the site's policy when there is one."""
        return is_mode(mode) and (self.mode_refused is None or not self.mode_refused(mode))

    def set_mode(self, mode: str) -> None:
        """`/mode`: the same rules under another mode (the courtesy list still asks, auto mode as configured)."""
        if not is_mode(mode):
            raise ValueError(f"Unknown approval mode {mode!r}: use one of {', '.join(MODES)}.")
        why = self.mode_refused(mode) if self.mode_refused is not None else None
        if why:
            raise ValueError(why)
        self.granted.mode = mode


def refusal(tool: str, verdict: Verdict, args: Any) -> str:
    """The error a call gets when it needs a human and none is attached (non-interactive), when the
    operator's rules deny it, or when the human declined it."""
    if verdict.decision == "deny" and verdict.declined:  # a person said no: their words, not the config's
        said = ("Their reason is above: do what it says instead" if verdict.reason.startswith(f"{DECLINED}: ")
                else "They gave no reason: ask them what they want, or do something else")
        return (f"Not run: {tool} was refused ({verdict.reason}). A human at the terminal declined this call (not "
                f"the operator's configuration). {said}; do not repeat the same call.")
    if verdict.decision == "deny":
        return (f"Not run: {tool} was refused ({verdict.reason}). The operator's configuration decides this; do "
                "something else, or ask the user.")
    if verdict.destructive or verdict.opaque:
        how = ("A human must confirm it: in `abhed tool` rerun with --confirm; in `abhed chat` answer the "
               "prompt. No allow rule skips this.")
        if verdict.opaque:
            how += (" Or write it so every command name and argument is a plain word, without $(...), eval, "
                    "variables in commands, or functions.")
    elif tool == "bash":
        how = (f"No human is attached to approve it (non-interactive). The operator can allow it with "
               f"approval.allow = [\"bash({_first_word(args)}:*)\"] in the config, or run "
               "with --mode auto; a human can pass --confirm.")
    else:
        how = ("No human is attached to approve it (non-interactive). The operator can allow it with approval.allow "
               f"= [\"{tool}\"] in the config, or run with --mode accept-edits; a human can pass --confirm.")
    return f"Not run: this {tool} call needs approval ({verdict.reason}). {how}"


def _first_word(args: Any) -> str:
    """The program of the call's line's first command, for the suggested rule (bounded: the analysis is)."""
    from abhed.gate.shellparse import analysis_of
    commands = analysis_of(args).commands
    first = next((c.argv[0] for c in commands if c.argv), None)
    return first if first and re.fullmatch(r"[\w./+-]{1,100}", first) else "CMD"
