"""A declined tool (issue 36 item 6): recorded with its definition's hash beside the pins; the
gateway keeps it withheld without calling it new; a changed definition is new again; the record
cannot admit anything, whatever a hand edit puts there."""

from __future__ import annotations

import json

from abhed.mcp.gateway import compare
from abhed.mcp.pins import Pin, load, load_declined, save_server, tool_hash

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def test_declines_are_saved_with_their_hash_and_load_back(tmp_path):
    path = tmp_path / "mcp-pins.json"
    save_server(path, "a", {"t": Pin.of("t", "T.", SCHEMA)}, {"u": tool_hash("u", "U.", SCHEMA)})
    save_server(path, "b", {})
    assert load_declined(path) == {"a": {"u": tool_hash("u", "U.", SCHEMA)}, "b": {}}
    assert list(load(path)["a"]) == ["t"]  # a decline is no pin
    data = json.loads(path.read_text())
    assert data["servers"]["a"]["declined"] == {"u": {"hash": tool_hash("u", "U.", SCHEMA)}}
    assert "declined" not in data["servers"]["b"]
    assert load_declined(tmp_path / "none.json") == {}


def test_a_declined_tool_is_withheld_not_new_until_it_changes():
    declined = {"u": tool_hash("u", "U.", SCHEMA), "v": tool_hash("v", "V.", SCHEMA)}
    listed = [{"name": "u", "description": "U.", "inputSchema": SCHEMA},
              {"name": "v", "description": "V, changed.", "inputSchema": SCHEMA}]
    result = compare("srv", listed, {}, declined)
    assert result.declined == {"u": "declined by the operator at review (abhed mcp review srv --reconsider asks again)"}
    assert result.withheld == {"v": "new: never reviewed"} and result.admitted == {}


def test_a_hand_edited_decline_admits_nothing(tmp_path):
    path = tmp_path / "mcp-pins.json"
    path.write_text(json.dumps({"version": 1, "servers": {"a": {"tools": {}, "declined": {
        "u": {"hash": "0" * 64}, "w": "not an entry", "x": {"hash": 7}}}, "b": "not a server"}}))
    path.chmod(0o600)
    assert load_declined(path) == {"a": {"u": "0" * 64}, "b": {}}
    listed = [{"name": "u", "description": "U.", "inputSchema": SCHEMA}]
    result = compare("a", listed, load(path)["a"], load_declined(path)["a"])
    assert result.admitted == {} and result.withheld == {"u": "new: never reviewed"}
