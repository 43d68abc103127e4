"""Operator settings: defaults < file < environment < flags."""

from __future__ import annotations

import pytest

from abhed.session import config


def test_defaults(tmp_path):
    s = config.load(env={"XDG_CONFIG_HOME": str(tmp_path)})  # the default place, with no file there: fine
    assert s.files.create_parents is False and s.files.new_file_mode == 0o644 and s.allowed_roots == []
    assert s.model.endpoint == "http://127.0.0.1:8000/v1"


def test_file_then_env_then_flags(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('allowed_roots = ["/a"]\n[files]\ncreate_parents = true\nnew_file_mode = "0600"\n'
                    '[model]\nendpoint = "http://file:1/v1"\nmodel = "from-file"\n')
    env = {"ABHED_CONFIG": str(path), "ABHED_ENDPOINT": "http://env:2/v1", "ABHED_ALLOWED_ROOTS": "/b:/c"}
    s = config.load({"model": {"model": "from-flag"}}, env=env)
    assert s.files.create_parents is True and s.files.new_file_mode == 0o600
    assert s.model.endpoint == "http://env:2/v1" and s.model.model == "from-flag"
    assert [str(p) for p in s.allowed_roots] == ["/b", "/c"]


@pytest.mark.parametrize("text, key", [("[files]\nnew_file_mode = 99999\n", "files.new_file_mode"),
                                       ("unknown_key = 1\n", "unknown_key"),
                                       ("[files\n", "Cannot read the config file")])
def test_bad_config_names_the_key_and_the_file(tmp_path, text, key):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(config.ConfigError) as info:
        config.load(env={"ABHED_CONFIG": str(path)})
    assert key in str(info.value) and str(path) in str(info.value)


def test_a_config_path_that_cannot_be_read_names_it(tmp_path):
    """ABHED_CONFIG naming a directory (as a mistyped path may): the error names it, nothing is
    read with defaults in its place."""
    with pytest.raises(config.ConfigError) as info:
        config.load(env={"ABHED_CONFIG": str(tmp_path)})
    assert str(info.value).startswith(f"Cannot read the config file {tmp_path}: [Errno 21] Is a directory")
    assert str(info.value).endswith("Fix or remove it.")


def test_a_config_file_that_is_not_utf8_names_the_file_and_the_byte(tmp_path):
    path = tmp_path / "c.toml"
    path.write_bytes(b"[files]\ncreate_parents = true # caf\xe9\n")
    with pytest.raises(config.ConfigError) as info:
        config.load(env={"ABHED_CONFIG": str(path)})
    assert f"Cannot read the config file {path}" in str(info.value) and "0xe9" in str(info.value)
    assert "Fix or remove it." in str(info.value)
