"""Issue 12 item 2: the operator's config decides the approval mode and the sandbox, so it is loaded
only when nobody else could have written it, and never from where the model can write."""

from __future__ import annotations

import json
import os

import pytest

from abhed.session import config
from abhed_testing import abhed

OTHER_UID = 65534  # nobody: any uid that is neither ours nor root


@pytest.fixture
def cfg(tmp_path):
    directory = tmp_path / "conf"
    directory.mkdir(mode=0o755)
    path = directory / "config.toml"
    path.write_text('[approval]\nmode = "auto"\n')
    path.chmod(0o644)
    return path


def load(path):
    return config.load(env={"ABHED_CONFIG": str(path), "ABHED_HOME": str(path.parent / "home")})


def test_a_private_config_is_loaded(cfg):
    assert load(cfg).approval.mode == "auto"


@pytest.mark.parametrize("mode, who", [(0o664, "its group"), (0o646, "every user"), (0o666, "its group and every user")])
def test_a_config_others_can_write_is_refused(cfg, mode, who):
    cfg.chmod(mode)
    with pytest.raises(config.ConfigError) as err:
        load(cfg)
    text = str(err.value)
    assert f"Refusing to load the config file {cfg}: {cfg} is writable by {who} (mode {mode:04o})" in text
    assert f"chmod go-w {cfg} {cfg.parent}" in text and "ABHED_CONFIG" in text


def test_a_config_in_a_directory_others_can_write_is_refused(cfg):
    cfg.parent.chmod(0o777)
    with pytest.raises(config.ConfigError, match=f"{cfg.parent} is writable by its group and every user"):
        load(cfg)


def test_a_sticky_directory_like_tmp_is_accepted(cfg):
    cfg.parent.chmod(0o1777)
    assert load(cfg).approval.mode == "auto"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_config_owned_by_someone_else_is_refused(cfg):
    os.chown(cfg, OTHER_UID, -1)
    with pytest.raises(config.ConfigError) as err:
        load(cfg)
    assert f"{cfg} is owned by uid {OTHER_UID}, not by you (uid {os.geteuid()}) or root" in str(err.value)
    assert f"chown $(id -u) {cfg}" in str(err.value)


def test_a_group_writable_config_is_refused_by_the_cli_before_any_tool_runs(cfg, tmp_path):
    ws = tmp_path / "w"
    ws.mkdir()
    cfg.chmod(0o666)
    proc = abhed("tool", "write", json.dumps({"path": str(ws / "f.txt"), "content": "x"}), "--workspace", str(ws),
                 env={"ABHED_CONFIG": str(cfg), "ABHED_HOME": str(tmp_path / "home")})
    assert proc.returncode != 0 and "Refusing to load the config file" in proc.stderr
    assert not (ws / "f.txt").exists()


@pytest.mark.parametrize("inside", ["config", "home"])
def test_the_config_and_the_session_store_must_lie_outside_the_workspace(tmp_path, inside):
    ws = tmp_path / "w"
    ws.mkdir()
    cfg = (ws / ".cfg" / "config.toml") if inside == "config" else (tmp_path / "config.toml")
    home = (ws / "store") if inside == "home" else (tmp_path / "home")
    env = {"ABHED_CONFIG": str(cfg), "ABHED_HOME": str(home)}
    cfg.parent.mkdir(exist_ok=True)
    cfg.write_text("")  # ABHED_CONFIG must name a file that exists
    settings = config.load(env=env)
    with pytest.raises(config.ConfigError) as err:
        config.refuse_workspace_control(settings, ws, env)
    what = "config file" if inside == "config" else "session store (ABHED_HOME)"
    assert f"The {what} {cfg if inside == 'config' else home} lies inside {ws}, where the model can write" in str(err.value)
    proc = abhed("tool", "write", json.dumps({"path": str(ws / "f.txt"), "content": "x"}), "--workspace", str(ws),
                 env=env)
    assert proc.returncode == 2 and f"The {what}" in proc.stderr and not (ws / "f.txt").exists()


def test_an_allowed_root_counts_like_the_workspace(tmp_path):
    ws, shared = tmp_path / "w", tmp_path / "shared"
    ws.mkdir()
    shared.mkdir()
    env = {"XDG_CONFIG_HOME": str(tmp_path), "ABHED_HOME": str(shared / "abhed")}
    settings = config.load({"allowed_roots": [str(shared)]}, env=env)
    with pytest.raises(config.ConfigError, match=f"lies inside {shared}"):
        config.refuse_workspace_control(settings, ws, env)
    config.refuse_workspace_control(config.load(env=env), ws, env)  # not a root: fine
