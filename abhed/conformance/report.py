"""The conformance report: per test, per category against its threshold, and the verdict.

The JSON form (pydantic, `schema_version`) is what gets saved (one file per run, under
$ABHED_HOME/conformance, never inside the installed package) and what machines read; `table` is the same for people. A category passes when its score reaches its
threshold; the model passes when every category run does.

Categories and their scores:
  adapter    share of the nine tools called in a form that parses and validates (threshold 1.0: all)
  scenarios  share of the everyday scenarios whose outcome on disk is right (0.8)
  recovery   the recovery rate: of the errors the recovery tasks provoked, the share whose next call
             of the same tool succeeded (0.6); also, at least `RECOVERY_OUTCOMES` of those tasks must
             end right. No error at all leaves the rate "n/a" (None): nothing was recovered from, so
             there is nothing to score, and the tasks done decide alone.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, Field

from abhed import __version__
from abhed.files.atomic import replace_file

SCHEMA_VERSION = 1
CATEGORIES = ("adapter", "scenarios", "recovery")
THRESHOLDS: dict[str, float] = {"adapter": 1.0, "scenarios": 0.8, "recovery": 0.6}
RECOVERY_OUTCOMES = 0.75


class TestReport(BaseModel):
    __test__: ClassVar[bool] = False  # not a pytest test class, whatever its name says

    category: str
    name: str
    passed: bool
    detail: str = ""  # why it failed; for recovery, what it recovered from
    turns: int = 0  # model replies, subagents' included
    tool_calls: int = 0
    tool_errors: int = 0
    recovered: int = 0  # errors whose next call of the same tool succeeded
    recoverable: int = 0  # errors counted for the recovery rate
    seconds: float = 0.0
    session: str = ""  # its session id (kept with --keep)


class CategoryReport(BaseModel):
    name: str
    passed: int
    total: int
    score: float | None  # adapter, scenarios: passed/total; recovery: the recovery rate (None: no error)
    threshold: float
    ok: bool
    note: str = ""


class Report(BaseModel):
    schema_version: int = SCHEMA_VERSION
    abhed_version: str = __version__
    endpoint: str
    model: str
    profile: str
    tool_format: str
    started_at: datetime
    seconds: float = 0.0
    passed: bool = False
    recovery_rate: float | None = None  # None: no recovery test ran, or it provoked no error to recover from
    categories: list[CategoryReport] = Field(default_factory=list)
    tests: list[TestReport] = Field(default_factory=list)


def grade(report: Report, thresholds: dict[str, float]) -> Report:
    """Score each category that ran, and the verdict."""
    report.categories = []
    for name in CATEGORIES:
        tests = [t for t in report.tests if t.category == name]
        if not tests:
            continue
        passed = sum(t.passed for t in tests)
        threshold = thresholds.get(name, THRESHOLDS[name])
        if name == "recovery":
            report.categories.append(_recovery(tests, passed, threshold))
            report.recovery_rate = report.categories[-1].score
        else:
            score = passed / len(tests)
            report.categories.append(CategoryReport(name=name, passed=passed, total=len(tests), score=round(score, 3),
                                                    threshold=threshold, ok=score >= threshold))
    report.passed = bool(report.categories) and all(c.ok for c in report.categories)
    return report


def _recovery(tests: list[TestReport], passed: int, threshold: float) -> CategoryReport:
    errors = sum(t.recoverable for t in tests)
    recovered = sum(t.recovered for t in tests)
    rate = round(recovered / errors, 3) if errors else None
    outcomes = passed / len(tests)
    ok = (rate is None or rate >= threshold) and outcomes >= RECOVERY_OUTCOMES
    note = (f"recovered {recovered} of {errors} errors by the next call" if errors else
            "no errors to recover from") + f"; {passed} of {len(tests)} tasks done (needs {RECOVERY_OUTCOMES:.0%})"
    return CategoryReport(name="recovery", passed=passed, total=len(tests), score=rate, threshold=threshold,
                          ok=ok, note=note)


def table(report: Report) -> str:
    """The report for people: one line per test, one per category, and the verdict."""
    lines = [f"abhed conformance: {report.model} at {report.endpoint}; profile {report.profile}; tool calls "
             f"{report.tool_format}", ""]
    lines.append(f"{'category':<10} {'test':<18} {'result':<6} {'turns':>5} {'calls':>5} {'errors':>6}  detail")
    for t in report.tests:
        detail = " / ".join(t.detail.split("\n")) if not t.passed or t.category == "recovery" else ""
        lines.append(f"{t.category:<10} {t.name:<18} {'PASS' if t.passed else 'FAIL':<6} {t.turns:>5} "
                     f"{t.tool_calls:>5} {t.tool_errors:>6}  {detail}".rstrip())
    lines += ["", f"{'category':<10} {'passed':>7} {'score':>6} {'needs':>6}  result"]
    for c in report.categories:
        score = "n/a" if c.score is None else f"{c.score:.2f}"
        lines.append(f"{c.name:<10} {f'{c.passed}/{c.total}':>7} {score:>6} {c.threshold:>6.2f}  "
                     f"{'PASS' if c.ok else 'FAIL'}{f'  ({c.note})' if c.note else ''}")
    verdict = ("PASS: the model may serve traffic" if report.passed else
               "FAIL: the model must not serve traffic until it passes")
    lines += ["", f"{verdict} ({report.seconds:.0f} s)."]
    return "\n".join(lines)


def file_name(report: Report) -> str:
    """One name per run (profile, model, start time to the microsecond): a new run never overwrites
    an earlier one's report."""
    slug = "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in report.model.replace("/", "--"))
    return f"{report.profile}.{slug}.{report.started_at:%Y%m%d-%H%M%S-%f}.conformance.json"


def reports_dir(home: Path) -> Path:
    """Where `--save` keeps reports: beside the sessions in $ABHED_HOME, never in the installed package
    (read-only for its users, and replaced by the next install)."""
    return home / "conformance"


def save(report: Report, directory: Path) -> Path:
    """Write the report as JSON into `directory`, made if missing (OSError when it cannot be written)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / file_name(report)
    replace_file(path, (report.model_dump_json(indent=1) + "\n").encode("utf-8"), mode=0o644)
    return path


def saved(name: str, home: Path) -> list[Report]:
    """The reports `--save` kept for the profile `name`, oldest first (unreadable ones are skipped)."""
    found = []
    for path in sorted(reports_dir(home).glob(f"{name}.*.conformance.json")):
        try:
            found.append(Report.model_validate_json(path.read_bytes()))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda r: r.started_at)


def one_line(report: Report) -> str:
    rate = "n/a" if report.recovery_rate is None else f"{report.recovery_rate:.2f}"
    return (f"{'PASS' if report.passed else 'FAIL'} {report.started_at:%Y-%m-%d} {report.model} ({report.tool_format}; "
            + ", ".join(f"{c.name} {c.passed}/{c.total}" for c in report.categories) + f"; recovery rate {rate})")
