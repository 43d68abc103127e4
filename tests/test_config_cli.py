"""`abhed config path|show|init` and what configuration errors say (issue 17, item 10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from abhed.session import config

REPO = Path(__file__).resolve().parents[1]


def abhed(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "abhed", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **env}, timeout=120)


def test_init_writes_a_commented_example_that_loads_and_show_says_where_each_setting_came_from(tmp_path, home):
    path = tmp_path / "cfg" / "config.toml"
    env = {"ABHED_CONFIG": str(path), "ABHED_HOME": str(home)}
    missing = abhed("config", "path", env=env)
    assert missing.stdout == f"{path}\n" and "`abhed config init` writes a commented example" in missing.stderr
    assert abhed("config", "init", env=env).stdout == f"Wrote {path}\n"
    assert (path.stat().st_mode & 0o777) == 0o600 and "# mode = \"ask\"" in path.read_text()
    assert config.load(env={"ABHED_CONFIG": str(path)}) == config.Settings()  # all comments: the defaults
    again = abhed("config", "init", env=env)
    assert again.returncode == 2 and f"{path} already exists" in again.stderr
    path.write_text("[approval]\nmode = \"accept-edits\"\n")
    shown = abhed("config", "show", env={**env, "ABHED_GREP_BACKEND": "python"}).stdout.splitlines()
    assert f'approval.mode = "accept-edits"  # file {path}' in shown
    assert 'search.backend = "python"  # environment ABHED_GREP_BACKEND' in shown
    assert 'approval.deny = []  # default' in shown


@pytest.mark.parametrize("text,message", [
    ("[approval]\nmdoe = \"auto\"\n", "approval.mdoe: Extra inputs are not permitted (did you mean approval.mode?)"),
    ("[modle]\nendpoint = \"x\"\n", "modle: Extra inputs are not permitted (did you mean model?)"),
    ("[approval]\nzzz = 1\n", "approval.zzz: Extra inputs are not permitted (the keys here: mode, allow, deny, save_rules, auto_destructive)"),
])
def test_unknown_keys_get_did_you_mean(tmp_path, text, message):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(config.ConfigError) as raised:
        config.load(env={"ABHED_CONFIG": str(path)})
    assert message in str(raised.value) and f"Check {path} and the ABHED_* environment variables." in str(raised.value)


def test_an_error_never_points_at_a_config_file_that_does_not_exist(tmp_path):
    with pytest.raises(config.ConfigError) as raised:
        config.load(env={"XDG_CONFIG_HOME": str(tmp_path), "ABHED_MODE": "sometimes"})
    default = tmp_path / "abhed" / "config.toml"
    assert f"Check the ABHED_* environment variables (there is no config file at {default})." in str(raised.value)
    assert f"Check {default}" not in str(raised.value)
    with pytest.raises(config.ConfigError) as raised:
        config.load(env={"ABHED_CONFIG": "", "ABHED_MODE": "sometimes"})
    assert "(there is no config file: ABHED_CONFIG is empty)." in str(raised.value)


def test_a_missing_abhed_config_file_is_an_error_and_empty_means_none(tmp_path, home):
    path = tmp_path / "typo.toml"
    with pytest.raises(config.ConfigError) as raised:
        config.load(env={"ABHED_CONFIG": str(path)})
    assert str(raised.value) == (f"ABHED_CONFIG names {path}, which does not exist. Point ABHED_CONFIG at your config "
                                 "file, create this one (`abhed config init` writes a commented example there), or "
                                 "set ABHED_CONFIG= (empty) to run with no config file.")
    proc = abhed("config", "path", env={"ABHED_CONFIG": str(path)})
    assert proc.returncode == 0 and proc.stdout == f"{path}\n"  # a command that reads no settings is not stopped by it
    for command in (("sessions", "list"), ("tools",)):  # tools reads the config's MCP servers
        proc = abhed(*command, env={"ABHED_CONFIG": str(path), "ABHED_HOME": str(home)})
        assert proc.returncode == 1 and f"ABHED_CONFIG names {path}, which does not exist" in proc.stderr
    assert config.load(env={"ABHED_CONFIG": ""}) == config.Settings()
    assert abhed("config", "path", env={"ABHED_CONFIG": ""}).stderr.startswith("[no config file: ABHED_CONFIG is")
