"""task (spec §8): hand a self-contained subtask to a subagent and get back only its summary.

The subagent is the same loop (agent/loop.py) with a fresh conversation: its own system prompt with
its profile's role, the project's ABHED.md, and the prompt given here; none of the parent's turns.
This module decides what the subagent is (its profile's tools and role), refuses prompts that are
not self-contained (selfcontained.py), and turns the subagent's outcome into a bounded result.
Running it belongs to the agent, which hands its task calls a context whose `spawn` starts a
child under its own budget (`Spawn` below); without one (`abhed tool`) there is nothing to run it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import Field

from abhed.common.traits import Traits
from abhed.common.errors import ToolError
from abhed.tools.base import Tool, ToolContext, ToolInput, ToolResult, fail, head_tail, ok

# The spec's target is a summary of 1-2k tokens: 8000 characters is about 2000 tokens of prose.
SUMMARY_CHARS = 8000
DESCRIPTION_WORDS = 10


class BudgetLimitReached(Exception):
    """Raised by a spawn when the budget it would draw on is already spent: nothing was started."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Outcome(Protocol):
    """How a subagent's run ended, as the task tool reads it. The agent's own Outcome
    (agent/loop.py) has this shape; tools name only what they need, and never import the agent."""

    @property
    def status(self) -> str: ...  # "done", "budget", "interrupted" or "failed"
    @property
    def answer(self) -> str: ...  # its final answer; for a stop, where it stopped
    @property
    def detail(self) -> str: ...  # why it stopped
    @property
    def agent_id(self) -> str: ...
    @property
    def turns(self) -> int: ...
    @property
    def tool_calls(self) -> int: ...
    @property
    def changed(self) -> list[str]: ...  # files it wrote or edited
    @property
    def ancestor_budget(self) -> bool: ...  # status "budget" because a budget above its own ran out


class Spawn(Protocol):
    """What an agent puts in the context of its task calls: run one subagent to its end.

    `tools`: the names of the tools it gets (None: the parent's, without task unless nesting is
    allowed); the parent never hands out a tool it does not have itself. Raises
    BudgetLimitReached when the budget is spent before the subagent could start.
    """

    def __call__(self, prompt: str, *, max_turns: int | None, tools: Sequence[str] | None, role: str,
                 label: str) -> Outcome: ...


COMMON_ROLE = (
    "You are a subagent: another agent started you for one self-contained task, given below as the user's "
    "message. You see none of its conversation, and nobody will answer questions: if something blocks you, say what "
    "in your report. When you are done, stop calling tools and answer with your report. It is the only thing "
    "returned, so make it stand alone: absolute paths, line numbers, names, the exact text of errors that matter, "
    "what you changed (if anything) and how you checked it. Keep it under about 1500 words; longer reports are cut.")


@dataclass(frozen=True)
class Profile:
    name: str
    summary: str  # one line, for the model choosing a profile
    tools: tuple[str, ...] | None  # None: everything the parent has but task
    role: str

    def brief(self) -> str:
        return f"Subagent profile: {self.name}. {self.role}\n\n{COMMON_ROLE}"


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("explore", "read, glob, grep: find and read code, report what is where", ("read", "glob", "grep"),
            "Your tools only look (read, glob, grep): find what the task asks about and report what you found. Use "
            "grep and glob to locate things before reading whole files."),
    Profile("test", "read, glob, grep, bash: run tests or builds and report the results",
            ("read", "glob", "grep", "bash"),
            "You can look (read, glob, grep) and run commands (bash): run the tests or builds the task names and "
            "report each command, its exit code and the output that matters (the failing tests and the key lines of "
            "each failure). Do not change files unless the task says so."),
    Profile("review", "read-only tools: review code and report problems", ("read", "glob", "grep", "plan", "todo"),
            "You only look, never change (read, glob, grep; plan and todo for your own notes): review what the task "
            "names and report each problem with its file and line, how serious it is, and a suggested fix."),
    Profile("general", "every tool but task: do a self-contained piece of work, changes included", None,
            "You have the tools of the agent that started you, except task. Do the work the task asks for, "
            "check it, and report what you changed."),
)}
DEFAULT_PROFILE = "general"


class TaskInput(ToolInput):
    prompt: str = Field(description="Complete, self-contained task. The subagent sees none of this conversation.")
    description: str = Field(description="3-5 word label.")
    agent_type: str | None = Field(None, description="Which subagent profile: explore | test | review | general.")
    max_turns: int | None = Field(None, ge=1)


DESCRIPTION = (
    "Spawn a subagent with a fresh context to handle a self-contained subtask. Use when a task requires extensive "
    "exploration whose intermediate detail you do not need. The subagent returns only a summary.\n\n"
    "The prompt must stand alone: the subagent has not seen this conversation, so a prompt that points back into it "
    "(\"the file we discussed\", \"as above\", \"that function\") is refused. Name files by absolute path and code by "
    "name, quote the errors it needs, and say what to report.\n"
    "agent_type (default general): " + "; ".join(f"{p.name} = {p.summary}" for p in PROFILES.values()) + ".\n"
    "Several task calls in one reply run at the same time. Subagents spend from your budget; max_turns caps one "
    "subagent's replies. Unless the operator allows nesting, a subagent cannot start subagents of its own.")


def _check(args: TaskInput) -> Profile:
    name = (args.agent_type or DEFAULT_PROFILE).strip().lower()
    if name not in PROFILES:
        listing = "; ".join(f"{p.name} ({p.summary})" for p in PROFILES.values())
        raise ToolError(f"agent_type {args.agent_type!r} is not a subagent profile; nothing was started. Use one of: "
                        f"{listing}.", reason="agent_type")
    if not args.prompt.strip():
        raise ToolError("`prompt` is empty; nothing was started. Write the whole task: what to do, on which files "
                        "(absolute paths), and what to report.", reason="empty_prompt")
    words = len(args.description.split())
    if not words or words > DESCRIPTION_WORDS:
        raise ToolError(f"`description` is a 3-5 word label the human sees (this one has {words} words); nothing "
                        "was started. Put the task itself in `prompt`.", reason="description")
    # Here, not at the top: its rules are large regular expressions, compiled on import, and a
    # session that never starts a subagent should not pay for them at start-up (issue 18).
    from abhed.tools.selfcontained import refusal, vague_reference
    found = vague_reference(args.prompt)
    if found is not None:
        raise ToolError(refusal(found), reason="not_self_contained", phrase=found.phrase)
    return PROFILES[name]


def summary(text: str, limit: int = SUMMARY_CHARS) -> tuple[str, bool]:
    """The subagent's report within `limit` characters (head and tail kept), and whether it was cut."""
    kept, cut = head_tail(text, limit)
    if not cut:
        return text, False
    return (kept + f"\n[the subagent's report was {len(text)} characters; {cut} were cut from the middle to keep it "
            f"near 2000 tokens. Read the files it names, or ask a subagent for a narrower report.]"), True


class Task(Tool):
    name = "task"
    description = DESCRIPTION
    Input = TaskInput
    # The spec's footnote: task changes nothing itself, but its subagent can (each of its calls is
    # approved), so it is allowed in every mode and not listed as read-only.
    traits = Traits(spawns=True)
    example = {"prompt": "Find where WORKSPACE/src reads the environment variable DATABASE_URL and report each file "
                         "and line.", "description": "Find DATABASE_URL reads", "agent_type": "explore"}

    def run(self, args: TaskInput, ctx: ToolContext) -> ToolResult:
        if ctx.spawn is None:
            raise ToolError("task starts a subagent, which needs a running agent (abhed run or abhed chat); this "
                            "call has none (`abhed tool` runs one call without a model). Nothing was started.",
                            reason="no_agent")
        profile = _check(args)
        label = args.description.strip()
        try:
            outcome = ctx.spawn(args.prompt.strip(), max_turns=args.max_turns, tools=profile.tools,
                                role=profile.brief(), label=label)
        except BudgetLimitReached as exc:
            return fail(f"Budget limit reached: {exc.reason}. No subagent was started. Finish with what you know, "
                        "or stop and tell the user what is left.", reason="budget", started=False)
        return report(outcome, profile.name, label)


def report(outcome: Outcome, profile: str, label: str) -> ToolResult:
    """The task call's result: a line on who ran and what it spent, then the bounded summary."""
    who = f"Subagent {outcome.agent_id} ({profile}, \"{label}\")"
    spent = f"{outcome.turns} replies, {outcome.tool_calls} tool calls"
    facts = {"agent_id": outcome.agent_id, "agent_type": profile, "status": outcome.status, "turns": outcome.turns,
             "tool_calls": outcome.tool_calls, "changed": outcome.changed}
    changed = ""
    if outcome.changed:
        files = ", ".join(dict.fromkeys(outcome.changed))
        changed = (f"\nFiles it changed: {files}. Read them again before you edit them: what you read before is out "
                   "of date.")
    if outcome.status == "done":
        text, cut = summary(outcome.answer)
        return ok(f"{who} finished ({spent}).{changed}\n\n{text}", summary_cut=cut, **facts)
    partial, cut = summary(outcome.answer) if outcome.answer else ("", False)
    if outcome.status == "budget" and outcome.ancestor_budget:
        head = (f"Budget limit reached: {outcome.detail.removeprefix('stopped: ')}; {who} was stopped ({spent}). "
                "Do not start more subagents; finish with what you know, or stop and tell the user what is left.")
    elif outcome.status == "budget":
        head = (f"{who} stopped at its own limit of {outcome.turns} replies before finishing. Call task again with "
                "a larger max_turns or a narrower prompt, or carry on from what it reported.")
    elif outcome.status == "interrupted":
        head = f"{who} was interrupted by the user ({spent})."
    else:
        head = f"{who} failed ({spent}): {outcome.detail}"
    body = f"\n\nWhat it reported before it stopped:\n{partial}" if partial else ""
    return fail(f"{head}{changed}{body}", reason=outcome.status, summary_cut=cut, **facts)
