"""The suite's parts on their own: reading a log into calls and recoveries, judging an adapter case,
grading a report and printing it."""

from __future__ import annotations

from datetime import UTC, datetime

from abhed.conformance import adapter
from abhed.conformance.report import Report, TestReport, form_note, grade, one_line, table
from abhed.conformance.trial import HARNESS, Record
from abhed.session.events import ActionEvent, MessageEvent, ObservationEvent


class Log:
    """Builds an event log: replies with calls, and their results."""

    def __init__(self) -> None:
        self.events: list = []
        self.n = 0

    def reply(self, *calls: tuple[str, str, bool, str | None], agent: str = "main", text: str = "",
              forms: tuple[str, ...] = ()) -> Log:
        """calls: (tool, arguments, is_error, error_kind); forms: the text forms they were read from."""
        ids = []
        for _ in calls:
            self.n += 1
            ids.append(f"c{self.n}")
        self.events.append(MessageEvent(session_id="s", agent_id=agent, role="assistant", content=text,
                                        tool_calls=[{"id": i, "name": c[0], "arguments": c[1]}
                                                    for i, c in zip(ids, calls)], forms=list(forms)))
        for call_id, (tool, arguments, is_error, kind) in zip(ids, calls):
            action = ActionEvent(session_id="s", agent_id=agent, tool=tool, tool_call_id=call_id, input=arguments)
            self.events.append(action)
            self.events.append(ObservationEvent(session_id="s", agent_id=agent, action_id=action.id, tool=tool,
                                                content="failed" if is_error else "fine", is_error=is_error,
                                                metadata={"error_kind": kind} if kind else {}, duration_ms=1))
        return self


def ok(tool: str, arguments: str = "{}") -> tuple[str, str, bool, None]:
    return (tool, arguments, False, None)


def bad(tool: str, kind: str = "tool_error", arguments: str = "{}") -> tuple[str, str, bool, str]:
    return (tool, arguments, True, kind)


def test_the_record_lists_calls_in_order_with_their_results_and_skips_the_harness():
    log = Log().reply(ok("read", '{"path": "/w/a"}'), agent=HARNESS).reply(ok("read", '{"path": "/w/b"}'))
    log.reply(bad("edit", arguments='{"path": "/w/b", "old_string": "x"'), agent="main.1")
    record = Record.read(log.events)
    assert [(c.agent_id, c.reply, c.name) for c in record.calls] == [("main", 0, "read"), ("main.1", 0, "edit")]
    assert record.calls[0].args == {"path": "/w/b"} and record.calls[1].args == {}  # unparsed arguments
    assert record.replies == 2 and record.agents == ["main", "main.1"] and len(record.errors) == 1


def test_the_record_lists_the_forms_the_calls_came_in_in_order():
    log = (Log().reply(ok("read"), forms=("qwen3_coder",)).reply(text="thinking aloud")
           .reply(ok("glob")).reply(ok("grep"), forms=("hermes", "qwen3_coder")).reply(ok("read"), forms=("hermes",)))
    assert Record.read(log.events).forms == ["qwen3_coder", "native", "hermes"]  # "native": the server's own
    assert Record.read(Log().reply(text="no calls at all").events).forms == []


def test_a_recovery_is_the_next_reply_making_the_same_call_work():
    log = (Log().reply(bad("edit"), ok("read"))          # reply 0: the edit fails
           .reply(ok("edit"))                             # reply 1: fixed at once: recovered
           .reply(bad("grep"))                            # reply 2: fails
           .reply(ok("read"))                             # reply 3: another tool first: not by the error alone
           .reply(ok("grep"))
           .reply(bad("bash", kind="not_approved"))       # a refusal by policy is not a mistake to fix
           .reply(bad("glob")).reply(bad("glob")))        # fails, then fails again: not recovered
    recoveries = Record.read(log.events).recoveries()
    assert [(r.call.name, r.call.reply, r.recovered) for r in recoveries] == [
        ("edit", 0, True), ("grep", 2, False), ("glob", 6, False), ("glob", 7, False)]


def test_recoveries_are_per_agent():
    log = Log().reply(bad("edit"), agent="main.1").reply(ok("edit"), agent="main.2").reply(ok("edit"), agent="main.1")
    [recovery] = Record.read(log.events).recoveries()
    assert recovery.call.agent_id == "main.1" and recovery.recovered


def test_adapter_judge_names_what_is_wrong():
    case = next(c for c in adapter.CASES if c.tool == "read")
    args = '{"path": "/w/notes.txt", "offset": 2, "limit": 5}'
    assert adapter.judge(case, Record.read(Log().reply(ok("read", args)).events), "/w") is None
    spelt = '{"path": "/w/notes.txt\\n", "offset": 2, "limit": 5, "extra": null}'  # a trailing newline is fine
    assert adapter.judge(case, Record.read(Log().reply(ok("read", spelt)).events), "/w") is None
    other = Record.read(Log().reply(ok("read", '{"path": "/w/other.txt", "offset": 2, "limit": 5}')).events)
    assert adapter.judge(case, other, "/w") == 'read was called with other arguments than asked: path="/w/other.txt"'
    typed = Record.read(Log().reply(ok("read", '{"path": "/w/notes.txt", "offset": 2.0, "limit": 5}')).events)
    assert "offset=2.0" in adapter.judge(case, typed, "/w")
    assert adapter.judge(case, Record.read(Log().reply(ok("glob")).events), "/w") == "no call of read (called: glob)"
    assert adapter.judge(case, Record.read(Log().reply(text="Here is the file.").events), "/w") == (
        "no tool call: the model answered in text instead of calling read")
    broken = Record.read(Log().reply(bad("read", "bad_json")).events)
    assert adapter.judge(case, broken, "/w") == "read was malformed (bad_json): failed"


def test_every_adapter_case_asks_for_a_valid_call_of_its_tool(tmp_path):
    from pydantic import ValidationError

    from abhed.tools import BY_NAME
    assert [c.tool for c in adapter.CASES] == list(BY_NAME)  # the nine tools, in the order the model sees them
    assert [c.name for c in adapter.TEXT_CASES] == ["text:hermes", "text:qwen3_coder"]  # each promptable protocol
    for case in adapter.TEXT_CASES:  # values that break each form: lines, markup, quotes, backslashes, braces
        for value in (case.arguments["old_string"], case.arguments["new_string"]):
            assert all(part in value for part in ("\n", "<p", "</", "'", '"', "\\n", "{i}"))
        assert "&amp;" in case.arguments["new_string"] and case.arguments["old_string"] in case.files["render.py"]
    for case in adapter.CASES + adapter.TEXT_CASES:
        try:
            BY_NAME[case.tool].Input.model_validate(case.args(str(tmp_path)))
        except ValidationError as exc:  # pragma: no cover - the message says which
            raise AssertionError(f"{case.tool}: {exc}") from None
        assert case.prompt(str(tmp_path)).startswith("This is a tool-calling check.")


def report_of(*tests: TestReport, tool_format: str = "native") -> Report:
    return Report(endpoint="http://gpu1:8000/v1", model="m", profile="generic", tool_format=tool_format,
                  started_at=datetime.now(UTC), tests=list(tests))


def test_a_text_protocols_case_counts_only_when_the_calls_travel_in_it():
    def tests() -> list[TestReport]:
        nine = [TestReport(category="adapter", name=f"t{n}", passed=True) for n in range(9)]
        return nine + [TestReport(category="adapter", name="text:hermes", protocol="hermes", passed=True),
                       TestReport(category="adapter", name="text:qwen3_coder", protocol="qwen3_coder", passed=False)]
    native = grade(report_of(*tests()), {})
    assert native.passed and (native.categories[0].passed, native.categories[0].total) == (9, 9)
    assert [t.counted for t in native.tests[-2:]] == [False, False]
    assert native.categories[0].note == ("informative, not counted since the calls travel in native: text:hermes PASS, "
                                         "text:qwen3_coder FAIL")
    hermes = grade(report_of(*tests(), tool_format="hermes"), {})
    assert hermes.passed and (hermes.categories[0].passed, hermes.categories[0].total) == (10, 10)
    assert hermes.categories[0].note.endswith("travel in hermes: text:qwen3_coder FAIL")
    qwen3 = grade(report_of(*tests(), tool_format="qwen3_coder"), {})
    assert not qwen3.passed and (qwen3.categories[0].passed, qwen3.categories[0].total) == (9, 10)
    only = grade(report_of(*tests()[9:]), {})  # nothing that counts was run: no pass
    assert not only.passed and only.categories[0].total == 0 and only.categories[0].score is None


def test_the_form_note_says_what_came_back_when_it_is_not_what_was_asked():
    def note(forms: list[str], protocol: str = "", tool_format: str = "native") -> str:
        return form_note(TestReport(category="adapter", name="t", passed=True, forms=forms, protocol=protocol),
                         tool_format)
    assert note(["native"]) == note([]) == note(["hermes"], "hermes") == note(["hermes"], tool_format="hermes") == ""
    assert note(["qwen3_coder"], "hermes") == "asked for hermes, the model wrote the qwen3_coder form"
    assert note(["hermes", "qwen3_coder"], tool_format="hermes") == "asked for hermes, the model wrote the qwen3_coder form"
    assert note(["native", "hermes"]) == ("the server's tool-call parser left calls in the text (hermes form); Abhed "
                                         "recovered them: check the server's --tool-call-parser")


def test_a_report_saved_before_the_text_protocol_cases_still_loads():
    old = {"schema_version": 1, "abhed_version": "0.1", "endpoint": "http://gpu1:8000/v1", "model": "m",
           "profile": "generic", "tool_format": "native", "started_at": "2025-01-02T03:04:05Z", "passed": True,
           "categories": [{"name": "adapter", "passed": 9, "total": 9, "score": 1.0, "threshold": 1.0, "ok": True}],
           "tests": [{"category": "adapter", "name": "read", "passed": True}]}
    report = Report.model_validate(old)
    assert report.tests[0].counted and report.tests[0].forms == [] and report.tests[0].protocol == ""
    assert one_line(report).startswith("PASS 2025-01-02 m (native; adapter 9/9;")


def test_grading_against_thresholds():
    tests = [TestReport(category="adapter", name=f"t{n}", passed=n != 0) for n in range(9)]
    tests += [TestReport(category="scenarios", name=f"s{n}", passed=n != 0) for n in range(5)]
    tests += [TestReport(category="recovery", name="r1", passed=True, recoverable=2, recovered=1),
              TestReport(category="recovery", name="r2", passed=True, recoverable=0),
              TestReport(category="recovery", name="r3", passed=True, recoverable=1, recovered=1),
              TestReport(category="recovery", name="r4", passed=False, recoverable=1, recovered=1)]
    report = grade(report_of(*tests), {})
    by = {c.name: c for c in report.categories}
    assert (by["adapter"].passed, by["adapter"].ok) == (8, False)  # every tool must pass
    assert (by["scenarios"].score, by["scenarios"].ok) == (0.8, True)
    assert (by["recovery"].score, by["recovery"].ok) == (0.75, True) and report.recovery_rate == 0.75
    assert by["recovery"].note == "recovered 3 of 4 errors by the next call; 3 of 4 tasks done (needs 75%)"
    assert not report.passed
    assert grade(report_of(*tests), {"adapter": 0.8}).passed


def test_recovery_needs_most_tasks_done_and_no_errors_is_no_rate_at_all():
    clean = grade(report_of(*[TestReport(category="recovery", name=f"r{n}", passed=True) for n in range(4)]), {})
    assert clean.recovery_rate is None and clean.categories[0].score is None and clean.passed
    assert clean.categories[0].note.startswith("no errors to recover from")
    assert "recovery       4/4    n/a   0.60  PASS" in table(clean) and "recovery rate n/a" in one_line(clean)
    idle = grade(report_of(*[TestReport(category="recovery", name=f"r{n}", passed=False) for n in range(4)]), {})
    assert idle.recovery_rate is None and not idle.passed  # a model that did nothing: n/a, never 1.00, and a FAIL
    assert "recovery       0/4    n/a   0.60  FAIL" in table(idle)
    half = [TestReport(category="recovery", name=f"r{n}", passed=n < 2, recoverable=1, recovered=1) for n in range(4)]
    assert not grade(report_of(*half), {}).passed  # every error fixed, but half the tasks undone


def test_nothing_run_is_not_a_pass():
    assert not grade(report_of(), {}).passed


def test_the_table_has_a_line_per_test_and_category_and_the_verdict():
    report = grade(report_of(TestReport(category="adapter", name="read", passed=False, turns=1, tool_calls=1,
                                        tool_errors=1, detail="read was malformed (bad_json): x\ny")), {})
    lines = table(report).splitlines()
    assert lines[0] == "abhed conformance: m at http://gpu1:8000/v1; profile generic; tool calls native"
    assert lines[2] == "category   test               result turns calls errors  form         detail"
    assert "adapter    read               FAIL       1     1      1  -            read was malformed (bad_json): x / y" in lines
    assert "adapter        0/1   0.00   1.00  FAIL" in lines
    assert lines[-1].startswith("FAIL: the model must not serve traffic until it passes")
