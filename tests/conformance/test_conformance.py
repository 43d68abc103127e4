"""The conformance suite against fake models on the replay server: a competent one passes, one
that writes malformed calls fails the adapter layer, one that never recovers from errors fails
recovery; the text protocols' cases count only for the format a model's calls travel in, and each
test names the form its calls came back in. The fakes read their prompts and results (fake_models.py), so the suite is judged on
what really happens: a tool error message that stops teaching makes even the competent one fail."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from abhed.session import config
from abhed.conformance import adapter, suite
from abhed.conformance import report as reports
from abhed.conformance.report import Report
from abhed.common.errors import ToolError
from abhed.model.connect import connect
from abhed.model.replay import ReplayServer
from abhed.tools import all_tools
from abhed.tools.edit import Edit
from abhed_testing import abhed
from fake_models import Competent, Escaping, Habitual, Malformed, Stubborn, Unparsed

MODEL = "Qwen/Qwen2.5-Coder-32B-Instruct"
TOOLS = len(adapter.CASES)  # one adapter case per tool; a text protocol's own case counts beside them
OWN = TOOLS + 1


def test_every_tool_has_an_adapter_case():
    assert [case.tool for case in adapter.CASES] == [tool.name for tool in all_tools()]


def conformance(policy, home: Path, tmp_path: Path, *, tool_parser: bool = True, model_id: str = MODEL,
                tool_format: str = "auto", **options) -> Report:  # type: ignore[no-untyped-def]
    settings = config.load({}, env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
    with ReplayServer(policy, tool_parser=tool_parser, model_id=model_id) as server:
        model = connect(server.url, backoff_s=0, tool_format=tool_format)
        try:
            return suite.run(settings, model, tmp_path / "suite", suite.Options(**options))
        finally:
            model.client.close()


def by_name(report: Report) -> dict[str, object]:
    return {f"{t.category}/{t.name}": t for t in report.tests}


def categories(report: Report) -> dict[str, tuple[int, int, bool]]:
    return {c.name: (c.passed, c.total, c.ok) for c in report.categories}


def test_a_competent_model_passes_every_category(home, tmp_path):
    report = conformance(Competent(), home, tmp_path)
    assert report.passed, [(t.name, t.detail) for t in report.tests if not t.passed]
    assert categories(report) == {"adapter": (TOOLS, TOOLS, True), "scenarios": (5, 5, True), "recovery": (4, 4, True)}
    assert report.recovery_rate == 1.0 and report.tool_format == "native" and report.profile == "qwen2.5-coder"
    tests = by_name(report)
    # every recovery task provoked its error, and the next call fixed it
    for name in ("whitespace", "relative_path", "lookahead", "several_matches"):
        test = tests[f"recovery/{name}"]
        assert (test.recoverable, test.recovered) == (1, 1) and test.detail == "1 of 1 errors fixed by the next call"
    assert tests["scenarios/delegate"].turns == 5  # the parent's three replies and its explore subagent's two
    assert [t.name for t in report.tests if t.category == "adapter"] == [
        "read", "write", "edit", "glob", "grep", "bash", "task", "plan", "todo", "text:hermes", "text:qwen3_coder"]
    # served natively: each text protocol's case is run and shown, in its own form, but does not count
    assert all(t.forms == ["native"] and t.counted for t in report.tests if not t.protocol)
    for fmt in ("hermes", "qwen3_coder"):
        text = tests[f"adapter/text:{fmt}"]
        assert text.passed and not text.counted and text.protocol == fmt and text.forms == [fmt]
    assert report.categories[0].note == ("informative, not counted since the calls travel in native: text:hermes PASS, "
                                         "text:qwen3_coder PASS")


@pytest.mark.parametrize("model_id,fmt,other", [(MODEL, "hermes", "qwen3_coder"),
                                                ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder", "hermes")])
def test_a_competent_model_passes_through_a_text_protocol_too(home, tmp_path, model_id, fmt, other):
    report = conformance(Competent(), home, tmp_path, tool_parser=False, model_id=model_id)
    assert report.passed and report.tool_format == fmt
    tests = by_name(report)
    # its own protocol's hardest call counts like the nine; the other protocol is informative
    assert categories(report)["adapter"] == (OWN, OWN, True)
    assert tests[f"adapter/text:{fmt}"].counted and not tests[f"adapter/text:{other}"].counted
    assert all(t.forms == [fmt] for t in report.tests if t.protocol != other)


def test_the_text_protocols_count_only_for_the_format_the_calls_travel_in(home, tmp_path):
    """A model that escapes markup in Qwen3-Coder's raw values: a natively served one passes (the
    qwen3_coder case is shown, failed, as informative); one whose calls travel in qwen3_coder fails,
    since its real edits of markup would say something else than meant."""
    native = conformance(Escaping(), home, tmp_path / "native", categories=("adapter",))
    failed = by_name(native)["adapter/text:qwen3_coder"]
    assert native.passed and categories(native) == {"adapter": (TOOLS, TOOLS, True)}
    assert not failed.passed and not failed.counted and failed.forms == ["qwen3_coder"]
    assert failed.detail.startswith("edit was called with other arguments than asked: old_string=\"    if len(items) "
                                    "&lt; 1:")
    assert "text:hermes PASS, text:qwen3_coder FAIL" in native.categories[0].note
    table = reports.table(native)
    assert re.search(r"adapter    text:qwen3_coder   FAIL .* qwen3_coder  informative; edit was called with other", table)
    assert f"adapter        {TOOLS}/{TOOLS}   1.00   1.00  PASS  (informative, not counted since the calls travel in native" in table
    for fmt, model_id in (("qwen3_coder", "Qwen/Qwen3-Coder-30B-A3B-Instruct"), ("hermes", MODEL)):
        pinned = conformance(Escaping(), home, tmp_path / fmt, tool_format=fmt, model_id=model_id,
                             categories=("adapter",))
        assert pinned.tool_format == fmt and pinned.passed == (fmt == "hermes")
        assert by_name(pinned)["adapter/text:qwen3_coder"].counted == (fmt == "qwen3_coder")
        assert categories(pinned) == {"adapter": (TOOLS if fmt == "qwen3_coder" else OWN, OWN, fmt == "hermes")}


@pytest.mark.parametrize("form", ["qwen3_coder", "qwen25"])
def test_the_report_names_the_form_the_model_actually_wrote(home, tmp_path, form):
    """Asked for hermes (the server has no parser), a model that writes its family's own form (one
    Abhed can ask for, or Qwen2.5-Coder's <tools>, which it only reads) still passes, Abhed reading
    every form; each test says which form came back."""
    report = conformance(Habitual(form), home, tmp_path, tool_parser=False, categories=("adapter",))
    assert report.passed and report.tool_format == "hermes" and categories(report) == {"adapter": (OWN, OWN, True)}
    assert all(t.forms == [form] for t in report.tests)
    lines = reports.table(report).splitlines()
    hermes = next(line for line in lines if "text:hermes" in line)
    assert hermes.split()[2:7] == ["PASS", "1", "1", "0", form]
    assert hermes.endswith(f"asked for hermes, the model wrote the {form} form")
    qwen3 = next(line for line in lines if "text:qwen3_coder" in line)
    assert qwen3.endswith("qwen3_coder  informative" if form == "qwen3_coder" else
                          "qwen25       informative; asked for qwen3_coder, the model wrote the qwen25 form")
    assert sum(f"the model wrote the {form} form" in line for line in lines) == (OWN if form == "qwen3_coder" else OWN + 1)


def test_calls_a_native_servers_parser_left_in_the_text_are_reported(home, tmp_path):
    report = conformance(Unparsed(), home, tmp_path, categories=("adapter",))
    assert report.passed and report.tool_format == "native"  # Abhed recovers them: the calls work
    read = by_name(report)["adapter/read"]
    assert read.forms == ["hermes"]
    line = next(line for line in reports.table(report).splitlines() if line.startswith("adapter    read "))
    assert line.endswith("hermes       the server's tool-call parser left calls in the text (hermes form); Abhed "
                         "recovered them: check the server's --tool-call-parser")


def test_a_model_that_writes_malformed_calls_fails_the_adapter_layer(home, tmp_path):
    report = conformance(Malformed(), home, tmp_path, categories=("adapter",))
    assert not report.passed and categories(report) == {"adapter": (4, TOOLS, False)}
    tests = by_name(report)
    assert {name.split("/")[1] for name, t in tests.items() if t.passed} == {"write", "glob", "grep", "todo"}
    assert not any(t.passed or t.counted for t in report.tests if t.protocol)  # broken markup in both forms
    assert tests["adapter/text:qwen3_coder"].forms == ["qwen3_coder"]
    assert "Your tool call is malformed: it must start with <function=NAME>" in tests["adapter/text:qwen3_coder"].detail
    assert tests["adapter/read"].detail.startswith("read was malformed (invalid_input): Invalid arguments for `read`: "
                                                   "- `limit`")
    assert tests["adapter/edit"].detail.startswith("edit was malformed (bad_json)")
    assert "`command` is required" in tests["adapter/bash"].detail
    assert "`description` is required" in tests["adapter/task"].detail
    assert "`steps`" in tests["adapter/plan"].detail


def test_a_model_whose_text_protocol_markup_is_broken_fails_every_adapter_test(home, tmp_path):
    report = conformance(Malformed(), home, tmp_path, tool_parser=False, categories=("adapter",))
    assert categories(report) == {"adapter": (0, OWN, False)} and report.tool_format == "hermes"
    assert all("(malformed_call): The JSON in your <tool_call> block does not parse" in t.detail
               for t in report.tests if t.protocol != "qwen3_coder")
    assert "(malformed_call): Your tool call is malformed" in by_name(report)["adapter/text:qwen3_coder"].detail


def test_a_model_that_never_recovers_fails_recovery(home, tmp_path):
    report = conformance(Stubborn(), home, tmp_path)
    assert not report.passed and report.recovery_rate == 0.0
    assert categories(report) == {"adapter": (TOOLS, TOOLS, True), "scenarios": (5, 5, True), "recovery": (0, 4, False)}
    whitespace = by_name(report)["recovery/whitespace"]
    assert whitespace.tool_errors == 3 and whitespace.recovered == 0  # the same call three times, then the guard
    assert whitespace.detail == ("0 of 3 errors fixed by the next call; settings.py line 3 is '\\t\\tself.timeout = "
                                 "30', expected '\\t\\tself.timeout = 60'")


def test_an_error_message_that_stops_teaching_fails_even_the_competent_model(home, tmp_path, monkeypatch):
    def unhelpful(self, path, text, positions):  # type: ignore[no-untyped-def]
        return ToolError("old_string is not unique; nothing was changed.")  # no count, no line numbers

    monkeypatch.setattr(Edit, "_several", unhelpful)
    report = conformance(Competent(), home, tmp_path, categories=("recovery",))
    several = by_name(report)["recovery/several_matches"]
    assert not several.passed and several.recovered == 0
    assert report.recovery_rate == 0.75 and categories(report)["recovery"] == (3, 4, True)


def test_thresholds_decide_and_can_be_raised(home, tmp_path, monkeypatch):
    monkeypatch.setattr(Edit, "_several", lambda self, path, text, positions: ToolError("not unique"))
    strict = conformance(Competent(), home, tmp_path, categories=("recovery",), thresholds={"recovery": 0.9})
    assert not strict.passed and strict.categories[0].threshold == 0.9


def test_repeat_runs_every_test_again(home, tmp_path):
    report = conformance(Competent(), home, tmp_path, categories=("adapter",), repeat=2)
    assert len(report.tests) == 22 and categories(report) == {"adapter": (18, 18, True)}
    assert report.categories[0].note.endswith("text:hermes 2/2, text:qwen3_coder 2/2")


# -- the command line -----------------------------------------------------------------------------------


def test_the_command_prints_the_table_writes_json_and_exits_0_for_a_passing_model(home, tmp_path):
    out = tmp_path / "report.json"
    with ReplayServer(Competent(), model_id=MODEL) as server:
        proc = abhed("conformance", "--endpoint", server.url, "--json", str(out), "--save-to", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "PASS: the model may serve traffic" in proc.stdout
    assert "recovery   whitespace         PASS" in proc.stdout and f"adapter        {TOOLS}/{TOOLS}   1.00   1.00  PASS" in proc.stdout
    assert "adapter    text:qwen3_coder   PASS       1     1      0  qwen3_coder  informative\n" in proc.stdout
    assert "adapter    read               PASS  (1 replies, 0 tool errors)" in proc.stderr  # progress as it goes
    report = json.loads(out.read_text())
    assert report["passed"] is True and report["recovery_rate"] == 1.0 and len(report["tests"]) == 20
    assert report["schema_version"] == 2 and report["tests"][0]["forms"] == ["native"]
    assert set(report["tests"][0]) >= {"category", "name", "passed", "turns", "tool_calls", "tool_errors", "counted"}
    assert [(t["protocol"], t["counted"]) for t in report["tests"][TOOLS:TOOLS + 2]] == [("hermes", False), ("qwen3_coder", False)]
    (saved,) = tmp_path.glob("qwen2.5-coder.Qwen--Qwen2.5-Coder-32B-Instruct.*.conformance.json")
    assert json.loads(saved.read_text())["model"] == MODEL and f"Saved the report to {saved}" in proc.stderr
    root = Path(proc.stderr.split("workspaces in ")[1].split("\n")[0])
    assert root.name.startswith("abhed-conformance-") and not root.exists()  # thrown away without --keep


def test_the_command_exits_1_for_a_model_that_fails(home, tmp_path):
    with ReplayServer(Stubborn(), model_id=MODEL) as server:
        proc = abhed("conformance", "--endpoint", server.url, "--only", "recovery", "--json", "-")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["passed"] is False and [c["name"] for c in report["categories"]] == ["recovery"]
    assert "FAIL: the model must not serve traffic until it passes" in proc.stderr  # the table, beside the JSON


def test_save_keeps_each_runs_report_under_the_session_store_not_in_the_package(home, tmp_path):
    import offline_models
    package = Path(offline_models.__file__).resolve().parent
    before = sorted(p.name for p in package.iterdir())
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "house.toml").write_text('name = "house"\nfamily = "ours"\nmatch = ["*house*"]\ncontext_window = 32768\n'
                                         'max_output_tokens = 4096\nvllm_serve = "vllm serve ours/house-coder"\n')
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[model]\nprofiles_dir = "{profiles}"\n')
    for _ in range(2):  # two runs: two reports, the first not overwritten
        with ReplayServer(Competent(), model_id="ours/house-coder-7b") as server:
            proc = abhed("conformance", "--endpoint", server.url, "--only", "adapter", "--save",
                         env={"ABHED_CONFIG": str(cfg)})
        assert proc.returncode == 0, proc.stderr
    saved = sorted((home / "conformance").glob("house.ours--house-coder-7b.*.conformance.json"))
    assert len(saved) == 2 and f"Saved the report to {saved[-1]}" in proc.stderr
    assert json.loads(saved[0].read_text())["profile"] == "house"
    assert sorted(p.name for p in package.iterdir()) == before and list(profiles.iterdir()) == [profiles / "house.toml"]
    shown = abhed("models", "house", env={"ABHED_CONFIG": str(cfg)})
    assert "Conformance (abhed conformance --save):" in shown.stdout
    assert shown.stdout.count(f"ours/house-coder-7b (native; adapter {TOOLS}/{TOOLS}; recovery rate n/a)") == 2


def test_keep_leaves_the_workspaces_and_sessions_to_inspect(home, tmp_path):
    with ReplayServer(Competent(), model_id=MODEL) as server:
        proc = abhed("conformance", "--endpoint", server.url, "--only", "adapter", "--keep", "--json", "-")
    kept = Path(proc.stderr.split("Workspaces and sessions kept in ")[1].split(" ")[0])
    session = json.loads(proc.stdout)["tests"][0]["session"]
    shown = abhed("sessions", "show", session, env={"ABHED_HOME": str(kept / "home")})
    assert shown.returncode == 0 and "read" in shown.stdout and (kept / "00-read-1" / "ws" / "notes.txt").is_file()


@pytest.mark.parametrize("args,message", [
    (["--only", "adapters"], "Unknown category 'adapters': the categories are adapter, scenarios, recovery."),
    (["--threshold", "recovery=high"], "--threshold 'recovery=high': write CATEGORY=SCORE"),
    (["--threshold", "recovery=1.5"], "SCORE must be between 0 and 1"),
])
def test_bad_invocations_exit_2(home, args, message):
    proc = abhed("conformance", "--endpoint", "http://127.0.0.1:9/v1", *args)
    assert proc.returncode == 2 and message in proc.stderr


def test_an_unreachable_server_exits_1_with_the_reason(home, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[model]\nattempts = 1\n")
    proc = abhed("conformance", "--endpoint", "http://127.0.0.1:9/v1", env={"ABHED_CONFIG": str(cfg)})
    assert proc.returncode == 1 and "Cannot connect to the model server at http://127.0.0.1:9/v1" in proc.stderr
