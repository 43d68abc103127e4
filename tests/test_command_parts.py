"""What the command line computes lives in the part it drives (issue 35): conformance's categories
and thresholds, the config file's text, the session a checkpoint command acts on, the event tree's
lines. Tested here where they live; tests/test_cli.py and the others run them through `abhed`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from abhed.conformance.report import CATEGORIES, chosen
from abhed.session import config
from abhed.session import checkpoint
from abhed.session.checkpoint import CheckpointError
from abhed.session.configfile import HEADER, example, flat, write_example
from abhed.session.eventtree import preview
from abhed.session.store import SessionError
from abhed.session.undo import checkpointed_session, last_number
from abhed_testing import abhed

# -- conformance: the categories run and the thresholds overridden ---------------------------------


def test_every_category_by_default_and_the_overrides_as_numbers():
    assert chosen(None, ()) == (CATEGORIES, {})
    assert chosen(" scenarios, recovery ,", ("recovery=0.5", "scenarios=1")) == (("scenarios", "recovery"),
                                                                                  {"recovery": 0.5, "scenarios": 1.0})
    assert chosen("adapter", ("adapter=0", "recovery=1.0")) == (("adapter",), {"adapter": 0.0, "recovery": 1.0})


@pytest.mark.parametrize("only,overrides,message", [
    ("adapter,scenario", (), "Unknown category 'scenario': the categories are adapter, scenarios, recovery."),
    (None, ("recover=0.5",), "Unknown category 'recover'"),
    (None, ("recovery",), "--threshold 'recovery': write CATEGORY=SCORE with SCORE a number from 0 to 1"),
    (None, ("recovery=nan",), "--threshold 'recovery=nan': SCORE must be between 0 and 1."),
    (None, ("adapter=-0.1",), "SCORE must be between 0 and 1"),
])
def test_a_wrong_category_or_threshold_says_what_to_write(only, overrides, message):
    with pytest.raises(ValueError) as caught:
        chosen(only, overrides)
    assert message in str(caught.value)


# -- the config file ---------------------------------------------------------------------------------


def test_the_example_uncommented_is_every_setting_at_its_default():
    text = example()
    assert text.splitlines()[:3] == HEADER and text.endswith("\n")
    top = text.split("\n[", 1)[0]  # before the first section: the top-level settings that are not sections
    assert {line[2:].split(" = ")[0] for line in top.splitlines() if " = " in line} == {
        key for key, value in config.Settings().model_dump(mode="json").items() if not isinstance(value, dict)}
    uncommented = "\n".join(line[2:] if line.startswith("# ") and " = " in line else line for line in text.splitlines())
    assert config.Settings(**tomllib.loads(uncommented)) == config.Settings()
    assert "[sandbox.microvm]" in text  # a nested section is a TOML table, not a JSON object
    shown = {key for key, value in flat(config.Settings().model_dump(mode="json")) if value is not None}
    assert shown == {key for key, _ in flat(tomllib.loads(uncommented))}  # a None default has no TOML form


def test_flat_names_every_leaf_by_its_dotted_key():
    assert flat({"a": 1, "b": {"c": [2], "d": {"e": None}}}) == [("a", 1), ("b.c", [2]), ("b.d.e", None)]


def test_the_example_is_written_private_and_never_over_a_file(tmp_path: Path):
    path = tmp_path / "new" / "abhed" / "config.toml"  # its directories made, private
    write_example(path)
    assert path.read_text() == example()
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    write_example(tmp_path / "config.toml")  # in a directory that exists
    assert (tmp_path / "config.toml").read_text() == example()
    path.write_text("mine\n")
    with pytest.raises(FileExistsError):
        write_example(path)
    assert path.read_text() == "mine\n"


def test_config_init_says_why_it_cannot_write(tmp_path: Path, home: Path):
    empty = abhed("config", "init", env={"ABHED_CONFIG": ""})
    assert empty.returncode == 2 and "ABHED_CONFIG is set empty (no config file): set it to the path" in empty.stderr
    (tmp_path / "file").write_text("")
    blocked = abhed("config", "init", env={"ABHED_CONFIG": str(tmp_path / "file" / "config.toml")})
    assert blocked.returncode == 2 and blocked.stdout == ""
    assert f"Cannot write {tmp_path / 'file' / 'config.toml'}: " in blocked.stderr
    assert "Set ABHED_CONFIG to a path you can write." in blocked.stderr


# -- the session a checkpoint command acts on ------------------------------------------------------


def test_the_checkpointed_session_is_found_or_the_reason_given(ws: Path, home: Path, monkeypatch):
    abhed("tool", "write", json.dumps({"path": str(ws / "b.txt"), "content": "x"}), "--session", "s",
          "--workspace", str(ws))
    settings = config.load()
    session_id, found = checkpointed_session(settings, None, ws)  # the newest session working in ws
    assert session_id == "s" and Path(found.shadow.workspace) == ws
    with pytest.raises(CheckpointError, match=f"No session works in {ws.parent}: name one"):
        checkpointed_session(settings, None, ws.parent)
    with pytest.raises(SessionError):
        checkpointed_session(settings, "nosuch", ws)
    off = settings.model_copy(update={"checkpoints": settings.checkpoints.model_copy(update={"enabled": False})})
    with pytest.raises(CheckpointError, match="Checkpoints are off: checkpoints.enabled is false."):
        checkpointed_session(off, "s", ws)
    monkeypatch.setattr(checkpoint, "available", lambda: None)  # no git binary on this machine
    with pytest.raises(CheckpointError, match=r"Checkpoints are off: there is no git binary \(abhed doctor\)."):
        checkpointed_session(settings, "s", ws)


def test_a_run_counts_its_checkpoints_from_the_last_one_before_it(ws: Path, home: Path, monkeypatch):
    settings = config.load()
    found = checkpoint.from_settings(settings, ws)
    assert last_number(None, "s") == 0 and last_number(found, "s") == 0  # checkpoints off; none taken yet
    for name in ("a", "b"):
        abhed("tool", "write", json.dumps({"path": str(ws / name), "content": "x"}), "--session", "s",
              "--workspace", str(ws))
    assert last_number(found, "s") == 2 and last_number(found, "other") == 0

    def broken(session_id: str) -> int:
        raise CheckpointError("the shadow repository cannot be read")
    monkeypatch.setattr(found.shadow, "last_number", broken)
    assert last_number(found, "s") == 0  # the run still runs; it just cannot name its range


def test_checkpoints_off_is_told_by_the_command(ws: Path, home: Path):
    abhed("tool", "write", json.dumps({"path": str(ws / "b.txt"), "content": "x"}), "--session", "s",
          "--workspace", str(ws))
    listed = abhed("checkpoints", "s", env={"ABHED_CHECKPOINTS": "false"})
    assert listed.returncode == 2 and "abhed: Checkpoints are off: checkpoints.enabled is false." in listed.stderr


# -- the event tree's lines --------------------------------------------------------------------------


@pytest.mark.parametrize("text,width,shown", [
    ("one line", 100, "one line"),
    ("first\nsecond", 100, "first ..."),
    ("x" * 12, 10, "x" * 10 + " ..."),
    ("x" * 10, 10, "x" * 10),
    ("", 100, ""),
])
def test_preview_is_the_first_line_cut_and_says_so(text, width, shown):
    assert preview(text, width) == shown


def test_the_command_line_still_offers_the_tree_it_gave_before():
    from abhed.cli import commands
    from abhed.session import eventtree
    assert commands.tree is eventtree.tree and commands._shown_event is eventtree.shown_event
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        commands.nothing  # noqa: B018
