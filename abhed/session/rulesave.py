"""Saving an allow rule the human granted in `abhed chat` into the operator's config file.

Only where the operator allows it (`approval.save_rules = true`, default off): the config decides
what runs unasked, so a chat may add to it only by the operator's leave. The file keeps its
comments and layout: the rule is inserted as text, the result is parsed again and must differ from
the old settings by exactly that rule, else nothing is written. The write is atomic and locked
against other Abhed processes saving at the same time.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

from abhed.files.atomic import replace_at
from abhed.files import filelock
from abhed.gate.approval import Rule

SECTION = re.compile(r"^[ \t]*\[approval\][ \t]*(#.*)?$", re.M)
NEXT_SECTION = re.compile(r"^[ \t]*\[", re.M)
ALLOW = re.compile(r"^[ \t]*allow[ \t]*=[ \t]*\[", re.M)


class SaveError(Exception):
    pass


def save_rule(config: Path, rule: str) -> str:
    """Add `rule` to approval.allow in `config` (created if missing); what was done, for the human.
    Locked by the config directory itself (filelock), so any two processes take turns."""
    text_rule = str(Rule.parse(rule))
    config.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    dirfd = os.open(config.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with filelock.locked(dirfd, filelock.WAIT_S):
            try:
                old = config.read_text(encoding="utf-8") if config.exists() else ""
                before = tomllib.loads(old)
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise SaveError(f"The rule {text_rule} was not saved: {config} cannot be read as TOML ({exc}). "
                                "Fix the file, or add the rule to approval.allow by hand.") from None
            allow = before.get("approval", {}).get("allow", [])
            if text_rule in allow:
                return f"{text_rule} is already in approval.allow of {config}"
            new = _insert(old, text_rule)
            if not _adds_exactly(before, new, text_rule):
                raise SaveError(f"The rule {text_rule} was not saved: {config} writes approval.allow in a form this "
                                f"cannot edit safely. Add \"{text_rule}\" to approval.allow there by hand.")
            mode = config.stat().st_mode if config.exists() else 0o600
            replace_at(dirfd, config.name, new.encode("utf-8"), mode=mode)
    except filelock.Busy as exc:
        raise SaveError(f"The rule {text_rule} was not saved: the directory {config.parent} is {exc} (another Abhed "
                        "process saving there?). Retry in a moment, or add the rule to approval.allow by hand.") from None
    finally:
        os.close(dirfd)
    return f"saved {text_rule} to approval.allow in {config}"


def _insert(text: str, rule: str) -> str:
    item = json.dumps(rule)  # a JSON string is a valid TOML basic string
    section = SECTION.search(text)
    if section is None:
        gap = "" if not text else ("\n" if text.endswith("\n") else "\n\n")
        return text + gap + f"[approval]\nallow = [{item}]\n"
    end = NEXT_SECTION.search(text, section.end())
    body_end = end.start() if end else len(text)
    allow = ALLOW.search(text, section.end(), body_end)
    if allow is None:
        return text[: section.end()] + f"\nallow = [{item}]" + text[section.end():]
    return text[: allow.end()] + f"{item}, " + text[allow.end():]


def _adds_exactly(before: dict, new: str, rule: str) -> bool:
    try:
        after = tomllib.loads(new)
    except tomllib.TOMLDecodeError:
        return False
    approval = dict(before.get("approval", {}))
    approval["allow"] = [rule, *approval.get("allow", [])]
    return after == {**before, "approval": approval}
