"""Hooks: programs the operator's config runs on the session's events (`[[hooks.EVENT]]`).

The events, in the order a session meets them:

- `session_start`: the session is open, before the first prompt;
- `pre_tool`: a tool call is about to be judged by the approval gate; the hook can block it;
- `post_tool`: a tool call has run (its result, bounded, is in the event; not for a call the
  gate refused or a hook blocked);
- `turn_end`: the top-level agent has finished working on one prompt;
- `session_end`: the session's process is done with it.

Each hook gets the event as one JSON object on its standard input (`event`, `session_id`,
`workspace`, `agent_id`, and per event `tool`, `input`, `result`, `status`). Its exit status:
0 is fine; 2 blocks a `pre_tool` call, its standard error being the reason the model and the
human are told (on other events 2 is a warning); any other status is a warning shown to the human
with its standard error, and the call goes on. A `pre_tool` hook that gives no answer at all (it
ran past its `timeout_s` and was killed, or could not be started) blocks the call: a hook that
guards calls fails closed. Standard output is not read.

Hooks run on the host, not in the sandbox, with the operator's rights: that is why they come
from the operator's config alone, never from the workspace. Each runs through common/hostproc
(a deadline, its own process group, dies with Abhed) in the workspace's directory with a minimal
environment (PATH=/usr/local/bin:/usr/bin:/bin, HOME, LANG, ABHED_HOOK_EVENT, ABHED_SESSION_ID,
ABHED_WORKSPACE). Every run is a HookEvent in the session's log.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abhed.common import hostproc
from abhed.common.terminal import printable
from abhed.session.config import HookCommand, HooksConfig
from abhed.session.events import HookEvent
from abhed.session.storefail import StoreError

BLOCK = 2  # the exit status that blocks a pre_tool call
MAX_REASON = 2000  # characters of a hook's standard error kept (the reason, the warning)
MAX_RESULT = 20_000  # characters of a call's result put into a post_tool event
MAX_STDOUT = 1024 * 1024  # a hook printing more is stopped (its output is not read)
PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass
class Verdict:
    """What the hooks of one event said: `blocked` is the reason a pre_tool call must not run."""

    blocked: str | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class Ran:
    """One hook's run: its exit status (None: no status, see `failure`), standard error, time."""

    code: int | None
    stderr: str
    seconds: float
    failure: str = ""  # why there is no status: it timed out, or could not be started


def environment(event: str, session_id: str, workspace: Path) -> dict[str, str]:
    """The hook's whole environment: nothing of Abhed's own (no API key, no ABHED_* settings)."""
    return {"PATH": PATH, "HOME": os.path.expanduser("~"), "LANG": "C.UTF-8", "ABHED_HOOK_EVENT": event,
            "ABHED_SESSION_ID": session_id, "ABHED_WORKSPACE": str(workspace)}


def run_one(hook: HookCommand, payload: dict[str, Any], env: dict[str, str], cwd: Path) -> Ran:
    """Run `hook` with `payload` as JSON on its standard input."""
    data = json.dumps(payload, default=str).encode("utf-8", "surrogateescape")
    started = time.monotonic()
    try:
        done = hostproc.run(hook.command, timeout=hook.timeout_s, input=data, env=env, cwd=cwd, max_output=MAX_STDOUT)
    except hostproc.Timeout:
        return Ran(None, "", time.monotonic() - started, f"it was still running after {hook.timeout_s:g} s and was stopped")
    except hostproc.TooMuch:
        return Ran(None, "", time.monotonic() - started, f"it printed over {MAX_STDOUT} bytes and was stopped")
    except OSError as exc:
        return Ran(None, "", time.monotonic() - started, f"it could not be started: {exc.strerror or exc}")
    stderr = done.stderr.decode("utf-8", "replace").strip()
    if len(stderr) > MAX_REASON:
        stderr = stderr[:MAX_REASON] + f" [cut: {len(stderr)} characters]"
    return Ran(done.returncode, stderr, time.monotonic() - started)


def judge(event: str, hook: HookCommand, ran: Ran) -> tuple[str, str]:
    """(outcome, what the human or the model is told) for one run: outcome ok, blocked or warned."""
    name = printable(" ".join(hook.command))
    said = printable(ran.stderr) if ran.stderr else "(it wrote nothing on stderr)"
    if ran.code == 0:
        return "ok", ""
    if ran.code is None:
        if event == "pre_tool":
            return "blocked", (f"the operator's pre_tool hook `{name}` gave no answer ({ran.failure}), and a hook "
                               "that guards calls blocks when it cannot answer")
        return "warned", f"hook `{name}` on {event}: {ran.failure}"
    if ran.code == BLOCK and event == "pre_tool":
        return "blocked", f"the operator's pre_tool hook `{name}` blocked it: {said}"
    return "warned", f"hook `{name}` on {event} exited {ran.code}: {said}"


class Hooks:
    """The operator's hooks for one session. `record` puts an event in the session's log; `notice`
    tells the human (the display's)."""

    def __init__(self, config: HooksConfig, session_id: str, workspace: Path,
                 record: Callable[[HookEvent], None], notice: Callable[[str], None]) -> None:
        self.config, self.session_id, self.workspace = config, session_id, workspace
        self.record, self.notice = record, notice

    def fire(self, event: str, agent_id: str = "main", tool: str | None = None, **facts: Any) -> Verdict:
        """Run the hooks of `event` (those naming `tool`, when they name tools) one after another; a
        pre_tool hook that blocks ends the round: the call is not run, the rest need not judge it."""
        verdict = Verdict()
        hooks = [h for h in getattr(self.config, event) if tool is None or not h.tools or tool in h.tools]
        if not hooks:
            return verdict
        payload = {"event": event, "session_id": self.session_id, "workspace": str(self.workspace),
                   "agent_id": agent_id, **({"tool": tool} if tool is not None else {}), **facts}
        env = environment(event, self.session_id, self.workspace)
        for hook in hooks:
            ran = run_one(hook, payload, env, self.workspace)
            outcome, told = judge(event, hook, ran)
            try:
                self.record(HookEvent(session_id=self.session_id, agent_id=agent_id, event=event, command=hook.command,
                                      tool=tool, exit_code=ran.code, outcome=outcome,
                                      stderr=ran.stderr or ran.failure, duration_ms=round(ran.seconds * 1000, 3)))
            except StoreError as exc:  # a call whose hook run the log cannot hold does not run either
                outcome, told = ("blocked" if event == "pre_tool" else "warned",
                                 f"the run of hook `{printable(' '.join(hook.command))}` on {event} could not be "
                                 f"recorded: {exc.message}")
            if outcome == "warned":
                verdict.warnings.append(told)
                self.notice(f"warning: {told}")
            elif outcome == "blocked":
                verdict.blocked = told
                self.notice(f"blocked {tool}: {told}")
                return verdict
        return verdict


def bounded_result(content: str) -> str:
    """A call's result as a post_tool event carries it."""
    if len(content) <= MAX_RESULT:
        return content
    return content[:MAX_RESULT] + f"\n[cut: the result has {len(content)} characters]"
