"""The conformance report: per test, per category against its threshold, and the verdict.

The JSON form (pydantic, `schema_version`) is what gets saved beside the model's profile and what
machines read; `table` is the same for people. A category passes when its score reaches its
threshold; the model passes when every category run does.

Categories and their scores:
  adapter    share of the nine tools called in a form that parses and validates (threshold 1.0: all)
  scenarios  share of the everyday scenarios whose outcome on disk is right (0.8)
  recovery   the recovery rate: of the errors the recovery tasks provoked, the share whose next call
             of the same tool succeeded (0.6); also, at least `RECOVERY_OUTCOMES` of those tasks must
             end right. No error at all (a model that got everything right first time) scores 1.0.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, Field

from abhed import __version__
from abhed.files.atomic import replace_file
from abhed.model import profiles

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
    score: float  # adapter, scenarios: passed/total; recovery: the recovery rate
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
    recovery_rate: float | None = None  # None: no recovery test ran
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
    rate = recovered / errors if errors else 1.0
    outcomes = passed / len(tests)
    ok = rate >= threshold and outcomes >= RECOVERY_OUTCOMES
    note = (f"recovered {recovered} of {errors} errors by the next call" if errors else
            "no errors to recover from") + f"; {passed} of {len(tests)} tasks done (needs {RECOVERY_OUTCOMES:.0%})"
    return CategoryReport(name="recovery", passed=passed, total=len(tests), score=round(rate, 3), threshold=threshold,
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
        lines.append(f"{c.name:<10} {f'{c.passed}/{c.total}':>7} {c.score:>6.2f} {c.threshold:>6.2f}  "
                     f"{'PASS' if c.ok else 'FAIL'}{f'  ({c.note})' if c.note else ''}")
    verdict = ("PASS: the model may serve traffic" if report.passed else
               "FAIL: the model must not serve traffic until it passes")
    lines += ["", f"{verdict} ({report.seconds:.0f} s)."]
    return "\n".join(lines)


def file_name(report: Report) -> str:
    slug = "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in report.model.replace("/", "--"))
    return f"{report.profile}.{slug}.conformance.json"


def profile_dir(name: str, operator_dir: Path | None) -> Path:
    """The directory holding the profile `name`: the operator's profiles_dir if one of its files
    defines it, else the shipped offline_models package."""
    if operator_dir is not None and operator_dir.is_dir():
        for path in sorted(operator_dir.glob("*.toml")):
            try:
                if profiles.parse(path.name, path.read_text(encoding="utf-8")).name == name:
                    return operator_dir
            except profiles.ProfileError:
                continue
    import offline_models
    return Path(offline_models.__file__).resolve().parent


def save(report: Report, directory: Path) -> Path:
    """Write the report as JSON into `directory` (OSError when it cannot be written)."""
    path = directory / file_name(report)
    replace_file(path, (report.model_dump_json(indent=1) + "\n").encode("utf-8"), mode=0o644)
    return path


def saved(name: str, operator_dir: Path | None) -> list[Report]:
    """The reports saved beside the profile `name`, oldest first (unreadable ones are skipped)."""
    found = []
    for path in sorted(profile_dir(name, operator_dir).glob(f"{name}.*.conformance.json")):
        try:
            found.append(Report.model_validate_json(path.read_bytes()))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda r: r.started_at)


def one_line(report: Report) -> str:
    rate = "n/a" if report.recovery_rate is None else f"{report.recovery_rate:.2f}"
    return (f"{'PASS' if report.passed else 'FAIL'} {report.started_at:%Y-%m-%d} {report.model} ({report.tool_format}; "
            + ", ".join(f"{c.name} {c.passed}/{c.total}" for c in report.categories) + f"; recovery rate {rate})")
