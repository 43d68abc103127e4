"""plan (spec §9): the model's structured plan, kept in the session and re-injected after compaction.

The plan is written whole on every call (goal, ordered steps, notes): a replacement is idempotent
and leaves no doubt about what the plan now says, which is what survives when older turns are
summarised away. Progress lives in todo, not here.
"""

from __future__ import annotations

from pydantic import Field

from abhed.common.traits import Traits
from abhed.common.errors import ToolError
from abhed.session.store import Plan
from abhed.tools.base import Tool, ToolContext, ToolInput, ToolResult, ok

MAX_STEPS = 50
GOAL_CHARS = 2000
STEP_CHARS = 1000
NOTES_CHARS = 8000


class PlanInput(ToolInput):
    goal: str = Field(description="What the task must achieve, in a sentence or two.")
    steps: list[str] = Field(description="The steps in order, one short sentence each. Replaces the previous steps.")
    notes: str | None = Field(None, description="Decisions, constraints and open questions worth keeping.")


def render_plan(plan: Plan) -> str:
    lines = [f"Plan (version {plan.version})", f"Goal: {plan.goal}", "Steps:"]
    lines += [f"{number}. {step}" for number, step in enumerate(plan.steps, start=1)]
    if plan.notes:
        lines.append(f"Notes: {plan.notes}")
    return "\n".join(lines)


def _check(args: PlanInput) -> None:
    problems = []
    if not args.goal.strip():
        problems.append("`goal` is empty: say in a sentence what the task must achieve.")
    elif len(args.goal) > GOAL_CHARS:
        problems.append(f"`goal` has {len(args.goal)} characters; keep it under {GOAL_CHARS}.")
    if not args.steps:
        problems.append("`steps` is empty: give at least one step.")
    elif len(args.steps) > MAX_STEPS:
        problems.append(f"`steps` has {len(args.steps)} entries; a plan holds at most {MAX_STEPS}. Group small steps.")
    blank = [str(i) for i, step in enumerate(args.steps, start=1) if not step.strip()]
    if blank:
        problems.append(f"step {', '.join(blank)} {'is' if len(blank) == 1 else 'are'} empty: remove or fill it.")
    long = [str(i) for i, step in enumerate(args.steps, start=1) if len(step) > STEP_CHARS]
    if long:
        problems.append(f"step {', '.join(long)} exceeds {STEP_CHARS} characters: one short sentence per step; "
                        "put detail in notes.")
    if args.notes and len(args.notes) > NOTES_CHARS:
        problems.append(f"`notes` has {len(args.notes)} characters; keep it under {NOTES_CHARS}.")
    if problems:
        raise ToolError("The plan was not saved:\n- " + "\n- ".join(problems) + "\nCall plan again with the "
                        "whole plan corrected.")


class PlanTool(Tool):
    name = "plan"
    description = ("Write or update the plan for the current task: its goal, the steps in order, and notes. Each "
                   "call replaces the whole plan. The plan is kept when older conversation is summarised, so write "
                   "one at the start of multi-step work and update it whenever the approach changes.")
    Input = PlanInput
    # It changes no file, only the session's plan (the loop shows it when it changed): approved in
    # every mode, but not run beside other calls.
    traits = Traits(reads_only=True)
    example = {"goal": "Make the failing test in tests/test_calc.py pass",
               "steps": ["Run the tests to see the failure", "Read the code under test", "Fix it", "Re-run the tests"]}

    def run(self, args: PlanInput, ctx: ToolContext) -> ToolResult:
        _check(args)
        session = ctx.session
        old = session.state.plan
        goal, steps, notes = args.goal.strip(), [s.strip() for s in args.steps], (args.notes or "").strip()
        if old is not None and (old.goal, old.steps, old.notes) == (goal, steps, notes):
            return ok(f"Unchanged: the plan already says exactly this.\n\n{render_plan(old)}", version=old.version,
                      changed=False)
        plan = Plan(goal=goal, steps=steps, notes=notes, version=(old.version + 1) if old else 1)
        with session.lock:
            session.state.plan = plan
        what = "Saved the plan" if old is None else f"Updated the plan (version {old.version} replaced)"
        return ok(f"{what}.\n\n{render_plan(plan)}", version=plan.version, changed=True)
