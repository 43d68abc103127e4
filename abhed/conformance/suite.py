"""Run the conformance suite against a connected model and build its report."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from abhed.session.config import Settings
from abhed.conformance import adapter
from abhed.conformance.report import CATEGORIES, Report, TestReport, grade
from abhed.conformance.scenarios import RECOVERY, SCENARIOS, Scenario
from abhed.conformance.trial import Trial, TrialResult
from abhed.agent.display import Display
from abhed.model.connect import Model


@dataclass
class Options:
    categories: tuple[str, ...] = CATEGORIES
    repeat: int = 1  # runs of each test: a sampled model does not answer the same way twice
    thresholds: dict[str, float] = field(default_factory=dict)
    on_test: Callable[[TestReport], None] = lambda test: None  # progress, as each test ends
    display: Callable[[str], Display] = lambda name: Display()  # what a test's agent reports on


def run(settings: Settings, model: Model, root: Path, options: Options) -> Report:
    """Every test of the chosen categories, each in a throwaway workspace under `root` (sessions in
    root/home), graded against the thresholds."""
    started = time.monotonic()
    report = Report(endpoint=model.client.endpoint, model=model.id, profile=model.profile.name,
                    tool_format=model.tool_format, started_at=datetime.now(UTC))
    home = root / "home"
    for number, (category, name, test) in enumerate(_tests(options)):
        for attempt in range(options.repeat):
            trial = Trial(root / f"{number:02d}-{name.replace(':', '-')}-{attempt + 1}", home, settings, model,
                          display=options.display(name))
            result = test(trial)
            report.tests.append(result)
            options.on_test(result)
    report.tool_format = model.tool_format  # the text protocol, if the server turned out to have no parser
    report.seconds = round(time.monotonic() - started, 1)
    return grade(report, options.thresholds)


def _tests(options: Options) -> Iterator[tuple[str, str, Callable[[Trial], TestReport]]]:
    if "adapter" in options.categories:
        for case in adapter.CASES + adapter.TEXT_CASES:
            yield "adapter", case.name, partial(_adapter, case)
    for category, scenarios in (("scenarios", SCENARIOS), ("recovery", RECOVERY)):
        if category in options.categories:
            for scenario in scenarios:
                yield category, scenario.name, partial(_scenario, scenario)


def _adapter(case: adapter.Case, trial: Trial) -> TestReport:
    trial.files(case.files)
    trial.pre_read(case.pre_read)
    result = trial.run(case.prompt(str(trial.workspace)), max_turns=1, tool_format=case.protocol or None)
    problem = _failed(result) or adapter.judge(case, result.record, str(trial.workspace))
    test = _report("adapter", case.name, result, problem)
    test.protocol = case.protocol
    return test


def _scenario(scenario: Scenario, trial: Trial) -> TestReport:
    trial.files(scenario.files)
    trial.pre_read(scenario.pre_read)
    result = trial.run(scenario.text(trial.workspace), scenario.max_turns)
    problem = _failed(result) or scenario.check(trial.workspace, result)
    if problem is None and result.outcome.status != "done":
        problem = f"the work is done but the run did not end: {result.outcome.detail}"
    test = _report(scenario.category, scenario.name, result, problem)
    if scenario.category == "recovery":
        recoveries = result.record.recoveries()
        test.recoverable, test.recovered = len(recoveries), sum(r.recovered for r in recoveries)
        fixed = (f"{test.recovered} of {test.recoverable} errors fixed by the next call" if recoveries else
                 "no error to recover from")
        test.detail = f"{fixed}; {problem}" if problem else fixed
    return test


def _failed(result: TrialResult) -> str | None:
    if result.outcome.status in ("failed", "interrupted"):
        return f"the run {result.outcome.status}: {result.outcome.detail}"
    return None


def _report(category: str, name: str, result: TrialResult, problem: str | None) -> TestReport:
    record = result.record
    return TestReport(category=category, name=name, passed=problem is None, detail=problem or "",
                      turns=record.replies, tool_calls=len(record.calls), tool_errors=len(record.errors),
                      forms=record.forms, seconds=round(result.seconds, 2), session=result.session_id)
