"""The tool definitions sent to the model are exactly the spec's (docs/tool-contracts.txt)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from abhed.tools import BY_NAME, definitions
from abhed_testing import REPO

SPEC = REPO / "docs" / "tool-contracts.txt"
SHARED = REPO.parent / "shared" / "spec" / "tool-contracts.txt"


def spec_tools() -> dict[str, dict]:
    """Every JSON block of the spec that defines a tool, by name."""
    text = SPEC.read_text()
    found = {}
    for match in re.finditer(r"^\{\n.*?^\}$", text, re.S | re.M):
        block = json.loads(match.group(0))
        found[block["name"]] = block
    return found


def test_the_spec_copy_matches_the_shared_original_when_present():
    if SHARED.exists():
        assert SPEC.read_bytes() == SHARED.read_bytes()


def test_the_spec_defines_every_native_tool():
    assert set(spec_tools()) == set(BY_NAME) - {"plan", "todo"}  # §9 describes plan and todo in prose, without a schema block


WITHOUT_SCHEMA = {"plan", "todo"}  # §9 gives them in prose; their schemas are Abhed's (tests/agent/test_plan_todo.py)


def test_only_plan_and_todo_have_no_schema_block():
    assert set(BY_NAME) - set(spec_tools()) <= WITHOUT_SCHEMA


@pytest.mark.parametrize("name", sorted(set(BY_NAME) - WITHOUT_SCHEMA))
def test_parameters_are_exactly_the_spec_schema(name):
    assert BY_NAME[name].parameters() == spec_tools()[name]["input_schema"]


@pytest.mark.parametrize("name", sorted(set(BY_NAME) - WITHOUT_SCHEMA))
def test_description_is_the_spec_description(name):
    assert BY_NAME[name].description.startswith(spec_tools()[name]["description"])


def test_tools_json_prints_the_openai_tools_array():
    out = subprocess.run([sys.executable, "-m", "abhed", "tools", "--json"], capture_output=True, text=True, check=True)
    printed = json.loads(out.stdout)
    assert printed == definitions()
    for entry in printed:
        assert entry["type"] == "function" and set(entry["function"]) == {"name", "description", "parameters"}
