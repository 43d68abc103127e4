"""The git status summary the system prompt carries: branch and changed files, from the host's git.

Host git obeys what lies in the repository (core.fsmonitor runs a program on every status; hooks;
an untracked cache written by another git). It is asked once, when the top-level agent starts and
before this session has run any command; at that point what the workspace's repositories hold is
the operator's (sandbox.protect keeps their config read-only to sessions, and sandbox.gitguard
quarantines repositories a session created). On top of that, the command line switches off every
setting of the repository that runs a program during `git status`, the system and global config
are not read, nothing prompts, and no lock or index refresh is written. Filter drivers
(`filter.NAME.clean`, applied by `.gitattributes`, which the model may write) would run when status
re-reads a file, and no command-line switch turns attributes off in git 2.39: when the repository's
config defines any, only the branch is given (`git config` and `rev-parse` run nothing). Any
failure (no git, not a repository, a repository git refuses) leaves the summary out: it is a
courtesy, not a need.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from abhed.common import hostproc

MAX_FILES = 30  # changed files listed; the rest are counted
TIMEOUT_S = 5.0  # a huge repository's status must not hold up the start: left out instead
# Settings given on the command line win over the repository's own.
HARDENED = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.untrackedCache=false",
            "-c", "core.pager=cat", "-c", "status.showUntrackedFiles=normal", "--no-optional-locks")


def git_summary(workspace: Path) -> str | None:
    """"Branch: X" and up to MAX_FILES changed files as `git status --short` shows them; None
    when the workspace is not in a git repository or git cannot say."""
    git = shutil.which("git", path="/usr/bin:/bin:/usr/local/bin")
    if git is None or not any((d / ".git").exists() for d in (workspace, *workspace.parents)):
        return None
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/"), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}


    def ask(*args: str) -> subprocess.CompletedProcess[bytes] | None:
        try:
            done = hostproc.run([git, *HARDENED, "-C", str(workspace), *args], env=env, timeout=TIMEOUT_S)
        except (OSError, hostproc.Timeout):
            return None
        return done

    filters = ask("config", "--name-only", "--get-regexp", r"^filter\.")
    if filters is None or filters.stdout.strip():
        head = ask("rev-parse", "--abbrev-ref", "HEAD")
        if head is None or head.returncode != 0:
            return None
        return (f"Branch: {head.stdout.decode('utf-8', 'replace').strip()}\nChanged files: not listed (the "
                "repository's config defines filter drivers, which `git status` would run)")
    proc = ask("status", "--porcelain=v1", "--branch", "-z")
    if proc is None or proc.returncode != 0:
        return None
    entries = [e.decode("utf-8", "replace") for e in proc.stdout.split(b"\0") if e]
    if not entries or not entries[0].startswith("## "):
        return None
    branch, changed, renamed_from = entries[0][3:], [], False
    for entry in entries[1:]:
        if renamed_from:  # -z puts a rename's old name in an entry of its own
            renamed_from = False
            continue
        changed.append(entry)
        renamed_from = entry[:1] in "RC"
    lines = [f"Branch: {branch}", f"Changed files: {len(changed) or 'none'}"]
    lines += [f"  {entry}" for entry in changed[:MAX_FILES]]
    if len(changed) > MAX_FILES:
        lines.append(f"  [{len(changed) - MAX_FILES} more; run `git status` for all]")
    return "\n".join(lines)
