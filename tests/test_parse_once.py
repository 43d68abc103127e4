"""A bash call's command line is parsed once (issue 35): the gate's verdict, the checkpoint decision,
the interactive check, the approval prompt's rule choices and the refusal's suggested rule all read
the one analysis the call's arguments keep (tools/bash.py BashInput.analysis)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from abhed.cli import approvals
from abhed.gate import shellparse
from abhed.gate.approval import Answer, Gate, Policy, Verdict
from abhed.tools.bash import BashInput
from abhed_testing import Tools


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every line the shell parser reads (shellparse._read: one per analyze, nested scripts included)."""
    seen: list[str] = []
    read = shellparse._read

    def counted(line: str) -> shellparse.Analysis:
        seen.append(line)
        return read(line)
    monkeypatch.setattr(shellparse, "_read", counted)
    return seen


def _human(gate_of: list[Gate], key: str):
    """A human at the prompt as chat asks (cli/display.py Display.ask): the rule choices, then `key`."""
    def ask(tool: str, args: Any, verdict: Verdict) -> Answer:
        options = approvals.choices(tool, args, verdict, gate_of[0].effective(), can_save=True)
        return approvals.ask(options, lambda _prompt: key, lambda _line: None, str)
    return ask


@pytest.mark.parametrize("line", ["echo hi > out.txt", "ls -la", "sh -c 'echo a; echo b'"])
def test_an_auto_mode_bash_call_parses_its_line_once(ws: Path, home: Path, parses: list[str], line: str) -> None:
    gate = Gate(Policy.create("auto", [], [], ws, undo_gap=None))
    result = Tools(ws, home, gate=gate)("bash", command=line, description="d")
    assert not result.is_error, result.content
    assert parses == [line]


@pytest.mark.parametrize("key", ["y", "a", "p"])
def test_an_ask_mode_bash_call_a_human_approves_parses_its_line_once(ws: Path, home: Path, parses: list[str],
                                                                     key: str) -> None:
    gates: list[Gate] = []
    gate = Gate(Policy.create("ask", [], [], ws), ask_human=_human(gates, key))
    gates.append(gate)
    result = Tools(ws, home, gate=gate)("bash", command="make -v", description="d")
    assert result.metadata["approval"]["decision"] == "allow", result.content
    assert parses == ["make -v"]


def test_a_refused_call_parses_its_line_once_for_its_suggested_rule(ws: Path, home: Path, parses: list[str]) -> None:
    result = Tools(ws, home, gate=Gate(Policy.create("ask", [], [], ws)))("bash", command="make x", description="d")
    assert "bash(make:*)" in result.content  # the refusal's suggested rule, from the same analysis
    assert parses == ["make x"]


def test_the_kept_analysis_follows_the_exact_line(parses: list[str]) -> None:
    call = BashInput(command="ls", description="d")
    assert call.analysis() is call.analysis()
    assert parses == ["ls"]
    call.command = "rm -f x"  # a changed line is never judged by the old one's analysis
    assert call.analysis().commands[0].argv == ["rm", "-f", "x"]
    assert parses == ["ls", "rm -f x"]
