"""The choices of `abhed chat`'s approval prompt, and the rules they grant.

yes once; yes and allow this exact command (or file) for the rest of the session; yes and allow
its prefix (`bash(git status:*)`, `edit(src/**)`); yes and save that rule to the operator's config
(only with `approval.save_rules = true`); no; no with a reason the model reads. A rule is offered
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
class Choice:
    key: str
    label: str
    answer: Answer
    save: str | None = None  # the rule to write to the operator's config


def choices(tool: str, args: Any, verdict: Verdict, policy: Policy | None, can_save: bool) -> list[Choice]:
    """What the human may answer; rule choices only where the rule would allow this call."""
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
        broadest = prefix or exact
        if can_save and len(broadest) == 1:
            options.append(Choice("s", f"yes, and save {broadest[0]} to the operator's config",
                                  Answer(True, broadest), save=broadest[0]))
    options.append(Choice("n", "no", Answer(False)))
    options.append(Choice("r", "no, and tell the model why", Answer(False)))
    return options


def _covering(rules: tuple[str, ...], tool: str, args: Any, policy: Policy) -> tuple[str, ...]:
    if not rules:
        return ()
    widened = replace(policy, allow=policy.allow + tuple(Rule.parse(r) for r in rules))
    return rules if widened.check(tool, args).decision == "allow" else ()


MAX_UNKNOWN = 3  # answers in a row that are no key: then it is a no (a cat on the keyboard approves nothing)
ALIASES = {"yes": "y", "no": "n", "": "n"}


def ask(options: list[Choice], read: Callable[[str], str], say: Callable[[str], None],
        save: Callable[[str], str]) -> Answer:
    """Ask for one of the listed keys, then do what the choice says. Fails closed: Enter alone,
    end of input (Ctrl-D), Ctrl-C, or MAX_UNKNOWN answers that are no key are a no, which the
    model reads as the human's refusal; an unknown answer gets one line naming the keys, and the
    question again."""
    keys = "/".join(o.key for o in options)
    for option in options:
        say(f"  {option.key}  {option.label}")
    chosen = None
    for attempt in range(1, MAX_UNKNOWN + 1):
        key, ended = _answer(read, f"Allow? [{keys}] (Enter: no) ")
        if ended:
            say(f"  ({ended}: no)")
            return Answer(False)
        chosen = next((o for o in options if o.key == ALIASES.get(key, key)), None)
        if chosen is not None:
            break
        if attempt < MAX_UNKNOWN:
            say(f"  {key!r} is not an answer here: type one of {keys} (the letters above) and Enter; Enter alone, "
                "Ctrl-D or Ctrl-C is no")
    if chosen is None:
        say(f"  ({MAX_UNKNOWN} answers that are not one of {keys}: no)")
        return Answer(False)
    if chosen.key == "r":
        reason, _ = _answer(read, "Why not (the model reads this)? ", lower=False)
        return Answer(False, reason=reason)
    if chosen.save is not None:
        say(save(chosen.save))
    if chosen.answer.rules:
        say(f"  allowed for the rest of this session: {', '.join(chosen.answer.rules)}")
    return chosen.answer


def _answer(read: Callable[[str], str], prompt: str, lower: bool = True) -> tuple[str, str | None]:
    """One line read (stripped, lowercased for keys), or "" and how the human ended the question."""
    try:
        line = read(prompt).strip()
    except EOFError:
        return "", "end of input"
    except KeyboardInterrupt:
        return "", "Ctrl-C"
    return (line.lower() if lower else line), None
