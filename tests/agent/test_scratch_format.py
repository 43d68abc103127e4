"""A tool-call format is defined once (abhed/common/formats.py, issue 35). A scratch format is added
here the way a new one is (a `register` call naming its adapter, description and the form its calls
are written in) and nothing else is touched: config validation and profiles accept it, the CLI
offers it (both --tool-format options), doctor probes and reports it, conformance judges its form,
and the agent's adapter is the one it names. A second test keeps the built-in names spelled only where docs/architecture.md
says a format lives."""

from __future__ import annotations

import ast
import re
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from abhed.cli import doctor
from abhed.cli.commands import main
from abhed.common import formats
from abhed.conformance.report import TestReport, form_note
from abhed.model import profiles
from abhed.model.adapters import TextAdapter, adapter_for
from abhed.model.connect import connect
from abhed.model.replay import ReplayServer, Turn
from abhed.session import config
from agent_helpers import REPO, make_agent

BUILT_IN = formats.names()  # before the scratch format is registered (each test takes it away again)
TEXT = formats.text_names()
HERMES_GLOB = '<tool_call>\n{"name": "glob", "arguments": {"pattern": "*.md"}}\n</tool_call>'


class ScratchAdapter(TextAdapter):
    """The scratch format's adapter: its own prompt; the calls come back in the hermes form."""

    def system_addendum(self) -> str:
        return "SCRATCH PROTOCOL\n" + super().system_addendum()


SCRATCH = formats.Format("scratch", f"{__name__}:ScratchAdapter", "a scratch format of this test", form="hermes")


@pytest.fixture
def scratch() -> Iterator[formats.Format]:
    formats.register(SCRATCH)
    try:
        yield SCRATCH
    finally:
        formats.unregister(SCRATCH.name)


def one_of(names: tuple[str, ...]) -> str:
    """Names as pydantic lists a Literal's values: 'a', 'b' or 'c'."""
    quoted = [repr(name) for name in names]
    return f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def settings_with(tool_format: str) -> config.Settings:
    return config.load({"model": {"tool_format": tool_format}}, env={"ABHED_CONFIG": ""})


PROFILE = """name = "scratchy"\nfamily = "scratch"\ncontext_window = 8192\nmax_output_tokens = 1024
vllm_serve = "vllm serve scratch"\ntool_format = "scratch"\ntext_format = "scratch"\n"""


def test_config_and_profiles_take_a_format_once_it_is_registered(scratch):
    assert settings_with("scratch").model.tool_format == "scratch"
    with pytest.raises(config.ConfigError, match=re.escape(one_of((*BUILT_IN, "scratch")))):
        settings_with("xml")  # the error names it among the known ones
    profile = profiles.parse("scratchy.toml", PROFILE)
    assert (profile.tool_format, profile.text_format) == ("scratch", "scratch")
    assert formats.names() == (*BUILT_IN, "scratch") and formats.text_names() == (*TEXT, "scratch")


def test_before_registration_config_and_profiles_refuse_it():
    with pytest.raises(config.ConfigError) as caught:
        settings_with("scratch")  # the registry is read when a value is validated, not when the class is made
    assert f"model.tool_format: Input should be {one_of(('auto', *BUILT_IN))}" in str(caught.value)
    with pytest.raises(profiles.ProfileError, match=re.escape(f"Input should be {one_of(TEXT)}")):
        profiles.parse("scratchy.toml", PROFILE)


@pytest.mark.parametrize("command", [["run"], ["conformance"]])
def test_the_cli_offers_it_in_both_tool_format_options(scratch, command):
    shown = CliRunner().invoke(main, [*command, "--help"])
    assert f"--tool-format [auto|{'|'.join(BUILT_IN)}|scratch]" in shown.output
    refused = CliRunner().invoke(main, [*command, "--tool-format", "xml"])
    assert refused.exit_code == 2 and ", ".join(map(repr, ("auto", *BUILT_IN, "scratch"))) in refused.output
    formats.unregister("scratch")
    gone = CliRunner().invoke(main, [*command, "--help"])
    assert f"--tool-format [auto|{'|'.join(BUILT_IN)}]" in gone.output


def probe(turn: Turn, tool_format: str) -> tuple[doctor.Check, list[dict[str, Any]]]:
    with ReplayServer([turn], model_id="Qwen/Qwen2.5-Coder-7B-Instruct", tool_parser=False) as server:
        model = connect(server.url, backoff_s=0, attempts=1, tool_format=tool_format)
        try:
            return doctor._probe(model), server.requests
        finally:
            model.client.close()


def test_models_describes_a_profiles_formats(scratch, tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "scratchy.toml").write_text(PROFILE)
    (tmp_path / "config.toml").write_text(f'[model]\nprofiles_dir = "{tmp_path / "profiles"}"\n')
    env = {"ABHED_CONFIG": str(tmp_path / "config.toml"), "ABHED_HOME": str(tmp_path / "home")}
    shown = CliRunner().invoke(main, ["models", "scratchy"], env=env)
    assert "tool_format        scratch: a scratch format of this test\n" in shown.output, shown.output


def test_doctor_probes_it_and_reports_it(scratch):
    check, requests = probe(Turn(text=HERMES_GLOB), "scratch")
    assert (check.status, check.message) == ("OK", 'the model called glob {"pattern": "*.md"} (scratch tool calls)')
    assert requests[0]["messages"][0]["content"].startswith("You are a test harness. SCRATCH PROTOCOL\n")
    ignored, _ = probe(Turn(text="I would rather not."), "scratch")
    assert ignored.status == "FAIL" and "ignored the text protocol (scratch: a scratch format of this test)" in \
        ignored.message


def test_the_agent_asks_in_it_and_runs_the_calls(scratch, ws, home):
    (ws / "notes.md").write_text("hi\n")
    assert type(adapter_for("scratch", [])) is ScratchAdapter
    with ReplayServer([Turn(text=HERMES_GLOB), Turn(text="One file.")], tool_parser=False) as server:
        agent = make_agent(ws, home, server, tool_format="scratch")
        outcome = agent.run("which markdown files are there?")
        sent = server.requests
    assert (outcome.answer, outcome.tool_calls) == ("One file.", 1)
    assert "SCRATCH PROTOCOL" in sent[0]["messages"][0]["content"] and "tools" not in sent[0]
    assert "notes.md" in sent[1]["messages"][-1]["content"]  # the glob ran; its result came back as text


def test_conformance_has_it_write_its_form_and_judges_that_form_its_own(scratch):
    case = TestReport(category="adapter", name="text:scratch", passed=True, protocol="scratch", forms=["hermes"])
    assert form_note(case, "native") == ""  # hermes markup is how the scratch format writes calls
    other = TestReport(category="adapter", name="text:scratch", passed=True, protocol="scratch",
                       forms=["qwen3_coder"])
    assert form_note(other, "native") == "asked for scratch, the model wrote the qwen3_coder form"


def test_a_format_whose_adapter_is_not_one_is_told():
    broken = formats.Format("broken", f"{__name__}:SCRATCH", "names a Format, not an Adapter", form="hermes")
    with pytest.raises(TypeError, match="'broken' names .*:SCRATCH' as its adapter, which is not an Adapter"):
        from abhed.model.adapters import adapter_class
        adapter_class(broken)
    with pytest.raises(ValueError, match=re.escape(f"Unknown tool format 'broken': use one of {', '.join(BUILT_IN)}.")):
        adapter_for("broken", [])
    with pytest.raises(ValueError, match="already registered"):
        formats.register(formats.Format("hermes", "abhed.model.adapters:TextAdapter", "again", form="hermes"))
    with pytest.raises(ValueError, match="already registered .or reserved"):
        formats.register(formats.Format("auto", "abhed.model.adapters:TextAdapter", "--tool-format's own", form="hermes"))
    with pytest.raises(ValueError, match='names its adapter as "module:Class", not \'TextAdapter\''):
        formats.register(formats.Format("bare", "TextAdapter", "no module", form="hermes"))
    assert formats.names() == BUILT_IN


def test_the_built_in_format_names_are_spelled_only_where_a_format_lives():
    """Where a text format's name is a string constant in the package: its registration
    (common/formats.py) and the textcalls form that reads its calls (the form's `name`). Anywhere
    else it would be a second list to keep in step with the registry."""
    found = set()
    for path in sorted((REPO / "abhed").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in formats.text_names():
                found.add((str(path.relative_to(REPO)), node.value))
    assert all(where == "abhed/common/formats.py" or where.startswith("abhed/model/textcalls/")
               for where, _ in found), sorted(found)
    assert {name for _, name in found} == set(TEXT)  # each is found: the check looks in the right places


def format_entry(doc: str) -> str:
    """The tool-call format entry of "Where a change goes": a `### A tool-call format` block (with its
    `Touches:` list), or a `- **A tool-call format**` item of the section's list."""
    if "\n### A tool-call format\n" in doc:
        return re.split(r"\n##+ ", doc.split("\n### A tool-call format\n", 1)[1], maxsplit=1)[0]
    return doc.split("- **A tool-call format**", 1)[1].split("\n- **", 1)[0]


def test_the_architecture_doc_names_the_files_a_format_changes():
    """docs/architecture.md, "Where a change goes": the tool-call format entry names the registry
    and every file it names exists (a renamed or moved one makes the entry wrong)."""
    entry = format_entry((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    named = re.findall(r"((?:abhed|tests)/[\w/.]+\.py)", entry)
    assert "abhed/common/formats.py" in named and "tests/agent/test_scratch_format.py" in named
    assert [path for path in named if not (REPO / path).is_file()] == []


def test_the_readme_offers_every_format_to_the_operator():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `model.tool_format`"))
    assert [name for name in BUILT_IN if f"`{name}`" not in row] == []


def test_every_registered_format_has_an_adapter_and_a_form_that_reads_its_calls():
    from abhed.model import textcalls
    from abhed.model.adapters import Adapter, adapter_class
    forms = {form.name for form in textcalls.FORMS}
    for name in BUILT_IN:
        fmt = formats.get(name)
        assert issubclass(adapter_class(fmt), Adapter) and fmt.description
        assert fmt.form is None or fmt.form in forms, f"{name} is written in {fmt.form}, which no textcalls form reads"
