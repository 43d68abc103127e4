"""The choices of `abhed chat`'s approval prompt, and the rules they grant.

yes once; yes and allow this exact command (or file) for the rest of the session; yes and allow
its prefix (`bash(git status:*)`, `edit(src/**)`); yes and save a rule to the operator's config
(only with `approval.save_rules = true`): the human is shown the scopes, from the narrowest (the
file, or the exact command) to the widest (the directory, every call of the tool), with the file
the rule goes to and how long it holds, and picks one (Enter: the narrowest); show the whole diff
when the panel shows only its start; no; no with a reason the model reads. A rule is offered
only if, added to the session's policy, it would allow this very call: destructive and opaque
commands are asked every time, so they get no rule choices at all.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from abhed.gate import wrappers
from abhed.gate.approval import Answer, Policy, Rule, Verdict
from abhed.gate.readonly import HARMLESS
from abhed.gate.shellparse import analysis_of

SUBCOMMAND = re.compile(r"[A-Za-z][\w.-]*")
# Programs whose second word names what they do (`git status`, `npm test`): their prefix rule keeps it.
WITH_SUBCOMMANDS = frozenset({
    "git", "npm", "pnpm", "yarn", "npx", "cargo", "go", "docker", "podman", "kubectl", "helm", "pip", "pip3", "uv",
    "poetry", "dotnet", "mvn", "gradle", "make", "cmake", "apt", "apt-get", "dnf", "yum", "brew", "conda", "gem",
    "bundle", "rake", "terraform", "systemctl", "rustup", "deno", "bun", "hatch", "tox", "nox", "just", "ninja",
})


def exact_rules(tool: str, args: Any, workspace: Path) -> tuple[str, ...]:
    """Rules allowing exactly this call: every command of a bash line as a rule sees it (what a
    wrapper such as `timeout 5` runs, never the wrapper), or this one file."""
    if tool == "bash":
        commands = _ruled(args)
        return tuple(dict.fromkeys(f"bash({shlex.join(argv)})" for argv in commands))
    relative = _relative(getattr(args, "path", None), workspace)
    return (f"{tool}({relative})",) if relative else ()


def prefix_rules(tool: str, args: Any, workspace: Path) -> tuple[str, ...]:
    """Broader rules: each command's program (and subcommand, `git status`) with any arguments, as a
    rule sees it (`timeout 5 npm test` -> `bash(npm test:*)`); the file's directory."""
    if tool == "bash":
        rules = []
        for argv in _ruled(args):
            words = argv[:2] if argv[0] in WITH_SUBCOMMANDS and len(argv) > 1 \
                and SUBCOMMAND.fullmatch(argv[1] or "") else argv[:1]
            rules.append(f"bash({shlex.join(words)}:*)")
        return tuple(dict.fromkeys(rules))
    relative = _relative(getattr(args, "path", None), workspace)
    if not relative:
        return ()
    folder = os.path.dirname(relative)
    return (f"{tool}({folder}/**)",) if folder else (tool,)


def _ruled(args: Any) -> list[list[str]]:
    """Each command of the call's line (its one analysis, shellparse.analysis_of) that needs a rule, normalised as rules are matched (wrappers.normal);
    none at all when one of them cannot be said exactly or is a wrapper itself (`sudo x`, `xargs x`,
    `nice` alone): a rule on a wrapper would read as allowing what it wraps, so none is offered."""
    found: list[list[str]] = []
    for command in analysis_of(args).commands:
        if command.program in HARMLESS or command.runs_script:
            continue
        normal = wrappers.normal(command.argv)
        words = [] if normal is None else [word for word in normal[0] if word is not None]
        if normal is None or len(words) < len(normal[0]) or _wraps(normal[0]):
            return []
        found.append(words)
    return found


def _wraps(argv: list[str | None]) -> bool:
    """A wrapper's own name (`command -v x`, `nice`): a find that runs nothing is just find."""
    return argv[0] in wrappers.WRAPPERS and not (argv[0] == "find" and not set(argv) & wrappers.FIND_ACTIONS)


def _relative(path: Any, workspace: Path) -> str | None:
    if not isinstance(path, str) or not path:
        return None
    relative = os.path.relpath(path, workspace)
    if relative.startswith("..") or any(ch in relative for ch in "*?[]{}()\n"):
        return None  # outside the workspace, or a name a glob rule would misread
    return relative


@dataclass(frozen=True)
class Scope:
    """A rule the human may save, and what it allows in words."""
    rule: str
    what: str


@dataclass(frozen=True)
class Choice:
    key: str
    label: str
    answer: Answer
    scopes: tuple[Scope, ...] = ()  # `s`: the rules it may save, narrowest first (the human picks one)


class RuleSaver:
    """How chat saves a granted rule: `save(rule)` says what was done; `config` names the file it goes to."""

    def __init__(self, config: Path, save: Callable[[str], str]) -> None:
        self.config, self._save = config, save

    def __call__(self, rule: str) -> str:
        return self._save(rule)


PAGE = "d"  # the key that shows the whole diff, then asks again


def choices(tool: str, args: Any, verdict: Verdict, policy: Policy | None, can_save: bool,
            diff_lines: int = 0) -> list[Choice]:
    """What the human may answer; rule choices only where the rule would allow this call.
    `diff_lines`: the call's diff is longer than the panel shows, so a key pages it whole."""
    options = [Choice("y", "yes, once", Answer(True))]
    if policy is not None and not (verdict.destructive or verdict.opaque):
        exact = _covering(exact_rules(tool, args, policy.workspace), tool, args, policy)
        prefix = _covering(prefix_rules(tool, args, policy.workspace), tool, args, policy)
        if prefix == exact:
            prefix = ()
        if exact:
            options.append(Choice("a", f"yes, and allow {', '.join(exact)} for this session", Answer(True, exact)))
        if prefix:
            options.append(Choice("p", f"yes, and allow {', '.join(prefix)} for this session", Answer(True, prefix)))
        saved = save_scopes(tool, args, policy) if can_save else ()
        if saved:
            options.append(Choice("s", "yes, and save a rule to the operator's config for future sessions (asks how "
                                       "wide: " + ", ".join(s.rule for s in saved) + ")", Answer(True), saved))
    if diff_lines:
        options.append(Choice(PAGE, f"show the whole diff ({diff_lines} lines), then answer", Answer(False)))
    options.append(Choice("n", "no", Answer(False)))
    options.append(Choice("r", "no, and tell the model why", Answer(False)))
    return options


def save_scopes(tool: str, args: Any, policy: Policy) -> tuple[Scope, ...]:
    """The rules a human may save for this call, narrowest first, each only if it would allow the
    call: a command exactly, then its program with any arguments (never all of bash); a file, then
    its directory, then every call of the tool. One rule each: a line of several commands gets none."""
    if tool == "bash":
        found = [(exact_rules(tool, args, policy.workspace), "this exact command line only"),
                 (prefix_rules(tool, args, policy.workspace), "this program (and subcommand) with any arguments")]
    else:
        relative = _relative(getattr(args, "path", None), policy.workspace)
        if not relative:
            return ()
        folder = os.path.dirname(relative)
        found = [((f"{tool}({relative})",), f"{tool} calls on {relative} only")]
        if folder:
            found.append(((f"{tool}({folder}/**)",), f"{tool} calls on any file under {folder}/"))
        found.append(((tool,), f"every {tool} call, on any file in the workspace"))
    scopes: list[Scope] = []
    for rules, what in found:
        if len(rules) == 1 and _covering(rules, tool, args, policy) and rules[0] not in [s.rule for s in scopes]:
            scopes.append(Scope(rules[0], what))
    return tuple(scopes)


def _covering(rules: tuple[str, ...], tool: str, args: Any, policy: Policy) -> tuple[str, ...]:
    if not rules:
        return ()
    widened = replace(policy, allow=policy.allow + tuple(Rule.parse(r) for r in rules))
    return rules if widened.check(tool, args).decision == "allow" else ()


MAX_UNKNOWN = 3  # answers in a row that are no key: then it is a no (a cat on the keyboard approves nothing)
ALIASES = {"yes": "y", "no": "n", "": "n"}


def ask(options: list[Choice], read: Callable[[str], str], say: Callable[[str], None],
        save: Callable[[str], str], page: Callable[[], None] | None = None) -> Answer:
    """Ask for one of the listed keys, then do what the choice says. Fails closed: Enter alone,
    end of input (Ctrl-D), Ctrl-C, or MAX_UNKNOWN answers that are no key are a no, which the
    model reads as the human's refusal; an unknown answer gets one line naming the keys, and the
    question again. `d` pages the whole diff (`page`) and asks again; `s` asks which rule to save."""
    keys = "/".join(o.key for o in options)
    _list(options, say)
    slips = 0
    while True:
        key, ended = _answer(read, f"Allow? [{keys}] (Enter: no) ")
        if ended:
            say(f"  ({ended}: no)")
            return Answer(False)
        chosen = next((o for o in options if o.key == ALIASES.get(key, key)), None)
        if chosen is None:
            slips += 1
            if slips >= MAX_UNKNOWN:
                say(f"  ({MAX_UNKNOWN} answers that are not one of {keys}: no)")
                return Answer(False)
            say(f"  {key!r} is not an answer here: type one of {keys} (the letters above) and Enter; Enter alone, "
                "Ctrl-D or Ctrl-C is no")
            continue
        if chosen.key == PAGE:
            if page is not None:
                page()
            _list(options, say)  # the same question again, its choices in sight
            continue
        if chosen.key == "r":
            reason, _ = _answer(read, "Why not (the model reads this)? ", lower=False)
            return Answer(False, reason=reason)
        if chosen.scopes:
            rule, ended = _scope(chosen.scopes, read, say, getattr(save, "config", None))
            if ended:
                say(f"  ({ended}: no)")
                return Answer(False)
            if rule is None:
                _list(options, say)
                continue
            say(save(rule))
            say(f"  allowed for the rest of this session: {rule}")
            return Answer(True, (rule,))
        if chosen.answer.rules:
            say(f"  allowed for the rest of this session: {', '.join(chosen.answer.rules)}")
        return chosen.answer


def _list(options: list[Choice], say: Callable[[str], None]) -> None:
    for option in options:
        say(f"  {option.key}  {option.label}")


def _scope(scopes: tuple[Scope, ...], read: Callable[[str], str], say: Callable[[str], None],
           config: Path | None) -> tuple[str | None, str | None]:
    """Which rule to save, the human's pick: Enter is the narrowest (the first), `n` none (back to
    the question). The rule (or None) and how the human ended the question, if they did."""
    where = f"approval.allow in {config}" if config is not None else "approval.allow in the operator's config"
    say(f"  save to {where}: it holds in every future session that reads that file, in any workspace, until it "
        "is removed from there. Which rule?")
    width = max(len(s.rule) for s in scopes)
    for number, scope in enumerate(scopes, 1):
        say(f"    {number}  {scope.rule:<{width}}  {scope.what}{'  (narrowest)' if number == 1 else ''}")
    numbers = "/".join(str(n) for n in range(1, len(scopes) + 1))
    for _ in range(MAX_UNKNOWN):
        key, ended = _answer(read, f"Save which? [{numbers}/n] (Enter: 1, the narrowest; n: save nothing) ")
        if ended:
            return None, ended
        if key == "":
            return scopes[0].rule, None
        if key in ("n", "no"):
            return None, None
        if key.isdigit() and 1 <= int(key) <= len(scopes):
            return scopes[int(key) - 1].rule, None
        say(f"  {key!r} is not an answer here: type one of {numbers}, Enter for 1, or n to save nothing")
    return None, None


def _answer(read: Callable[[str], str], prompt: str, lower: bool = True) -> tuple[str, str | None]:
    """One line read (stripped, lowercased for keys), or "" and how the human ended the question."""
    try:
        line = read(prompt).strip()
    except EOFError:
        return "", "end of input"
    except KeyboardInterrupt:
        return "", "Ctrl-C"
    return (line.lower() if lower else line), None
