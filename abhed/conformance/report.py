"""The conformance report: per test, per category against its threshold, and the verdict.

The JSON form (pydantic, `schema_version`) is what gets saved (one file per run, under
$ABHED_HOME/conformance, never inside the installed package) and what machines read; `table` is the same for people. A category passes when its score reaches its
threshold; the model passes when every category run does.

Categories and their scores:
  adapter    share of the counted adapter cases whose call parses, validates and says what was
             asked (threshold 1.0: all). Counted: the nine tools, in the format the model's calls
             travel in, and the text:FMT case of that format when it is a text protocol. The
             text:FMT cases of the other text protocols are informative: the table marks them so and
             the adapter line lists them, but they never decide the verdict. A model served
             natively need not master hermes and qwen3_coder both, while one whose calls travel in a
             text protocol must write that protocol's hardest call (see adapter.py).
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
from abhed.common import formats
from abhed.files.atomic import replace_file

# 2: tests carry protocol (the text protocol a text:FMT case asked for), forms (what the model's calls
# came in) and counted (whether the test counts toward its category's score); reports of 1 still load.
SCHEMA_VERSION = 2
CATEGORIES = ("adapter", "scenarios", "recovery")
THRESHOLDS: dict[str, float] = {"adapter": 1.0, "scenarios": 0.8, "recovery": 0.6}
RECOVERY_OUTCOMES = 0.75


def chosen(only: str | None, overrides: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, float]]:
    """The categories to run (`only`: comma-separated, None: all) and the thresholds overridden
    (`CATEGORY=SCORE` each, SCORE from 0 to 1), as `abhed conformance --only/--threshold` give them.
    A mistake raises ValueError saying what to write instead."""
    categories = tuple(c.strip() for c in only.split(",") if c.strip()) if only else CATEGORIES
    unknown = [c for c in categories + tuple(t.partition("=")[0] for t in overrides) if c not in CATEGORIES]
    if unknown:
        raise ValueError(f"Unknown category {unknown[0]!r}: the categories are {', '.join(CATEGORIES)}.")
    limits: dict[str, float] = {}
    for item in overrides:
        name, _, value = item.partition("=")
        try:
            limits[name] = float(value)
        except ValueError:
            raise ValueError(f"--threshold {item!r}: write CATEGORY=SCORE with SCORE a number from 0 to 1, e.g. "
                             "scenarios=1.0.") from None
        if not 0 <= limits[name] <= 1:
            raise ValueError(f"--threshold {item!r}: SCORE must be between 0 and 1.")
    return categories, limits


class TestReport(BaseModel):
    __test__: ClassVar[bool] = False  # not a pytest test class, whatever its name says

    category: str
    name: str
    passed: bool
    detail: str = ""  # why it failed; for recovery, what it recovered from
    protocol: str = ""  # adapter text:FMT cases: the text protocol asked for; "": the model's own format
    forms: list[str] = Field(default_factory=list)  # what the calls came in: "native", "hermes", "qwen3_coder", ...
    counted: bool = True  # False: informative, not part of its category's score (set by grade)
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
    """Score each category that ran, and the verdict. A test that asked for a text protocol counts
    only when that protocol is the format the model's calls travel in (report.tool_format)."""
    report.categories = []
    for test in report.tests:
        test.counted = not test.protocol or test.protocol == report.tool_format
    for name in CATEGORIES:
        ran = [t for t in report.tests if t.category == name]
        if not ran:
            continue
        tests = [t for t in ran if t.counted]
        passed = sum(t.passed for t in tests)
        threshold = thresholds.get(name, THRESHOLDS[name])
        note = _informative([t for t in ran if not t.counted], report.tool_format)
        if name == "recovery":
            report.categories.append(_recovery(tests, passed, threshold))
            report.recovery_rate = report.categories[-1].score
        elif not tests:  # only informative tests: nothing that counts was run, which is no pass
            report.categories.append(CategoryReport(name=name, passed=0, total=0, score=None, threshold=threshold,
                                                    ok=False, note=note))
        else:
            score = passed / len(tests)
            report.categories.append(CategoryReport(name=name, passed=passed, total=len(tests), score=round(score, 3),
                                                    threshold=threshold, ok=score >= threshold, note=note))
    report.passed = bool(report.categories) and all(c.ok for c in report.categories)
    return report


def _informative(tests: list[TestReport], tool_format: str) -> str:
    """The adapter line's note on the text protocols that do not count: each one's result."""
    if not tests:
        return ""
    names = list(dict.fromkeys(t.name for t in tests))
    results = []
    for name in names:
        runs = [t for t in tests if t.name == name]
        passed = sum(t.passed for t in runs)
        results.append(f"{name} " + (("PASS" if passed else "FAIL") if len(runs) == 1 else f"{passed}/{len(runs)}"))
    return f"informative, not counted since the calls travel in {tool_format}: " + ", ".join(results)


def form_note(test: TestReport, tool_format: str) -> str:
    """What a person should know about the form a test's calls came in, or "": a text form other than
    the one asked for (Abhed read it, as it reads every form), or, natively, calls the server's
    parser left in the text for Abhed to recover."""
    asked = test.protocol or tool_format
    other = [form for form in test.forms if form not in (formats.form_of(asked), "native")]
    if not other:
        return ""
    if asked == "native":
        return (f"the server's tool-call parser left calls in the text ({', '.join(other)} form); Abhed recovered "
                "them: check the server's --tool-call-parser")
    return f"asked for {asked}, the model wrote the {' and '.join(other)} form"


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
    lines.append(f"{'category':<10} {'test':<18} {'result':<6} {'turns':>5} {'calls':>5} {'errors':>6}  "
                 f"{'form':<12} detail")
    for t in report.tests:
        notes = ["informative"] if not t.counted else []
        if not t.passed or t.category == "recovery":
            notes.append(" / ".join(t.detail.split("\n")))
        notes.append(form_note(t, report.tool_format))
        form = ",".join(t.forms) or "-"
        lines.append(f"{t.category:<10} {t.name:<18} {'PASS' if t.passed else 'FAIL':<6} {t.turns:>5} "
                     f"{t.tool_calls:>5} {t.tool_errors:>6}  {form:<12} {'; '.join(n for n in notes if n)}".rstrip())
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
