"""The pins file: what review writes is what the gateway admits, byte for byte; anything else
(a hand edit, a foreign owner, a writable file, broken JSON) admits nothing and says why."""

from __future__ import annotations

import json
import os

import pytest

from abhed.session.config import ConfigError
from abhed.mcp.pins import Pin, load, pins_path, save_server, tool_hash

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def test_saved_pins_load_back_and_other_servers_are_kept(tmp_path):
    path = tmp_path / "etc" / "abhed" / "mcp-pins.json"  # directories made as needed
    save_server(path, "a", {"t": Pin.of("t", "T.", SCHEMA, {"readOnlyHint": True})})
    save_server(path, "b", {"u": Pin.of("u", "U.", SCHEMA)})
    loaded = load(path)
    assert loaded["a"]["t"] == Pin("t", "T.", SCHEMA, tool_hash("t", "T.", SCHEMA), {"readOnlyHint": True})
    assert list(loaded["b"]) == ["u"]
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    data = json.loads(path.read_text())
    assert data["version"] == 1 and data["servers"]["a"]["reviewed_at"].endswith("+00:00")
    save_server(path, "a", None)
    assert list(load(path)) == ["b"]


def test_a_pin_that_does_not_match_its_text_is_dropped(tmp_path):
    path = tmp_path / "mcp-pins.json"
    save_server(path, "a", {"t": Pin.of("t", "T.", SCHEMA), "v": Pin.of("v", "V.", SCHEMA)})
    data = json.loads(path.read_text())
    data["servers"]["a"]["tools"]["t"]["inputSchema"]["properties"]["q"]["type"] = "integer"
    data["servers"]["a"]["tools"]["v"]["hash"] = "0" * 64
    data["servers"]["a"]["tools"]["w"] = "not a pin"
    path.write_text(json.dumps(data))
    assert load(path) == {"a": {}}


def test_missing_is_empty_and_broken_is_an_instruction(tmp_path):
    assert load(tmp_path / "none.json") == {}
    broken = tmp_path / "mcp-pins.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match=f"Cannot read the MCP pins {broken}: .* Fix or remove it, then review the "
                                          "servers again"):
        load(broken)
    with pytest.raises(ConfigError, match="Fix or remove it"):
        save_server(broken, "a", {})


def test_a_pins_file_others_could_write_is_refused(tmp_path):
    path = tmp_path / "mcp-pins.json"
    save_server(path, "a", {"t": Pin.of("t", "T.", SCHEMA)})
    os.chmod(path, 0o620)
    with pytest.raises(ConfigError, match="is writable by its group"):
        load(path)


def test_the_pins_live_beside_the_config_file(tmp_path):
    assert pins_path({"ABHED_CONFIG": str(tmp_path / "c" / "config.toml")}) == tmp_path / "c" / "mcp-pins.json"
    assert pins_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "abhed" / "mcp-pins.json"


def test_with_no_config_file_the_pins_live_in_the_default_config_directory(tmp_path):
    # ABHED_CONFIG set empty means "no config file": the pins still have a home (was a traceback).
    env = {"ABHED_CONFIG": "", "XDG_CONFIG_HOME": str(tmp_path)}
    assert pins_path(env) == tmp_path / "abhed" / "mcp-pins.json"


def test_odd_shapes_admit_nothing_and_can_be_replaced(tmp_path):
    path = tmp_path / "mcp-pins.json"
    for text, expected in (("[]", {}), ('{"servers": {"a": "x"}}', {"a": {}}), ('{"servers": null}', {})):
        path.write_text(text)
        assert load(path) == expected
    path.write_text("[]")
    save_server(path, "a", {"t": Pin.of("t", "T.", SCHEMA)})
    assert list(load(path)["a"]) == ["t"]


def test_any_text_round_trips_as_ascii_json(tmp_path):
    path = tmp_path / "mcp-pins.json"
    text = "Sucht \u00e9t\u00e9 \u202e" + chr(0xE0041)
    save_server(path, "a", {"t": Pin.of("t", text, SCHEMA)})
    assert path.read_bytes().isascii()
    assert load(path)["a"]["t"].description == text


def test_saving_refuses_a_file_others_could_write_and_leaks_no_descriptor(tmp_path):
    path = tmp_path / "mcp-pins.json"
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        save_server(path, "a", {"t": Pin.of("t", "T.", SCHEMA)})
    assert len(os.listdir("/proc/self/fd")) == before
    os.chmod(path, 0o666)
    with pytest.raises(ConfigError, match="writable by its group and every user"):
        save_server(path, "b", {})


def test_the_default_pins_path_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ABHED_CONFIG", str(tmp_path / "site" / "config.toml"))
    assert pins_path() == tmp_path / "site" / "mcp-pins.json"
