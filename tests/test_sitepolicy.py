"""Issue 37 item 1, in process: the site policy's parsing, trust checks and how it overrides or refuses
each user layer, every refusal's key facts pinned. The same paths, tried by a real user against the real
command line with the policy at /etc/abhed/policy.toml, are in test_sitepolicy_users.py."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from abhed.gate.approval import Gate, Policy
from abhed.session import config, sitepolicy

P = sitepolicy.POLICY_PATH
FILE = Path("/home/u/.config/abhed/config.toml")


def policy(text: str, tmp_path: Path, mode: int = 0o644) -> sitepolicy.SitePolicy:
    directory = tmp_path / "etc-abhed"
    directory.mkdir(mode=0o755, exist_ok=True)
    path = directory / "policy.toml"
    path.write_text(text)
    path.chmod(mode)
    site = sitepolicy.read(config.Settings, path)
    assert site is not None
    site.path = P  # messages name the fixed path, as in the product
    return site


def effective(site: sitepolicy.SitePolicy, file: dict[str, Any] | None = None, env: dict[str, str] | None = None,
              flags: dict[str, Any] | None = None) -> config.Settings:
    layers = [file or {}, config._from_env(env or {}), flags or {}]
    merged = config._merge(config._merge(layers[0], layers[1]), layers[2])
    tree = sitepolicy.apply(site, config.named_layers(FILE, layers), merged, config.Settings().model_dump(mode="json"))
    return config.Settings.model_validate(tree)


def refused(site: sitepolicy.SitePolicy, **layers: Any) -> str:
    with pytest.raises(sitepolicy.PolicyError) as err:
        effective(site, **layers)
    return str(err.value)


LOCKS = '''
[settings]
sandbox.backend = "bwrap"
checkpoints.enabled = true
sandbox.allow_network = false
approval.deny = ["bash(curl:*)"]
'''


def test_no_policy_file_is_no_policy(tmp_path):
    assert sitepolicy.read(config.Settings, tmp_path / "absent.toml") is None


def test_the_path_is_fixed_and_nothing_moves_it():
    assert sitepolicy.POLICY_PATH == Path("/etc/abhed/policy.toml")
    source = Path(sitepolicy.__file__).read_text()
    assert "os.environ" not in source and "getenv" not in source  # no variable names another file
    callers = [p for p in Path(sitepolicy.__file__).parent.parent.rglob("*.py") if "sitepolicy.read(" in p.read_text()]
    for caller in callers:  # the product reads the fixed path only
        assert "sitepolicy.read(Settings)" in caller.read_text(), caller
    assert callers


@pytest.mark.parametrize("layer, where", [
    ({"file": {"sandbox": {"backend": "none"}}}, f"the config file {FILE}"),
    ({"env": {"ABHED_SANDBOX": "none"}}, "the environment variable ABHED_SANDBOX"),
    ({"flags": {"sandbox": {"backend": "none"}}}, "the command line (a flag)")])
def test_a_locked_key_set_otherwise_by_any_layer_is_refused(tmp_path, layer, where):
    text = refused(policy(LOCKS, tmp_path), **layer)
    assert text.startswith(f'The site policy {P} locks sandbox.backend to "bwrap"; {where} sets sandbox.backend '
                           'to "none". Remove that setting: the site\'s operator decides this key')


def test_a_locked_key_restated_in_any_spelling_is_accepted(tmp_path):
    site = policy(LOCKS, tmp_path)
    settings = effective(site, env={"ABHED_CHECKPOINTS": "1", "ABHED_SANDBOX": "bwrap"},
                         file={"sandbox": {"allow_network": False}})
    assert settings.checkpoints.enabled and settings.sandbox.backend == "bwrap"


def test_checkpoints_off_is_refused(tmp_path):
    text = refused(policy(LOCKS, tmp_path), env={"ABHED_CHECKPOINTS": "false"})
    assert "locks checkpoints.enabled to true; the environment variable ABHED_CHECKPOINTS sets" in text


def test_network_on_is_refused(tmp_path):
    text = refused(policy(LOCKS, tmp_path), file={"sandbox": {"allow_network": True}})
    assert f"locks sandbox.allow_network to false; the config file {FILE} sets sandbox.allow_network to true" in text


def test_the_policy_s_deny_rules_stay_and_the_user_s_are_added(tmp_path):
    site = policy(LOCKS, tmp_path)
    settings = effective(site, file={"approval": {"deny": ["bash(wget:*)"], "allow": ["bash(curl:*)"]}})
    assert settings.approval.deny == ["bash(curl:*)", "bash(wget:*)"]
    assert effective(site, file={"approval": {"deny": []}}).approval.deny == ["bash(curl:*)"]
    gate = Policy.from_settings(settings, tmp_path, checkpoints=True, mode="auto",
                                allow=["bash(curl:*)", "bash"])  # config, saved and --allow rules alike
    verdict = gate.check("bash", SimpleNamespace(command="curl http://x"))
    assert verdict.decision == "deny" and "deny bash(curl:*)" in verdict.reason


def test_sandbox_none_is_refused_whenever_a_policy_exists(tmp_path):
    site = policy("[settings]\ncheckpoints.enabled = true\n", tmp_path)  # says nothing of the sandbox
    text = refused(site, env={"ABHED_SANDBOX": "none"})
    assert text.startswith(f'The site policy {P} forbids sandbox.backend "none" (the environment variable '
                           "ABHED_SANDBOX sets it): every command runs in the sandbox on this machine.")
    assert effective(site, env={"ABHED_SANDBOX": "microvm"}).sandbox.backend == "microvm"


def test_the_policy_may_allow_sandbox_none_itself(tmp_path):
    site = policy('[allowed]\n"sandbox.backend" = ["bwrap", "none"]\n', tmp_path)
    assert effective(site, env={"ABHED_SANDBOX": "none"}).sandbox.backend == "none"
    text = refused(site, env={"ABHED_SANDBOX": "microvm"})
    assert 'permits sandbox.backend to be only "bwrap", "none"; the environment variable ABHED_SANDBOX sets' in text


MODES = '[allowed]\n"approval.mode" = ["ask", "plan"]\n'


@pytest.mark.parametrize("layer, where", [
    ({"file": {"approval": {"mode": "auto"}}}, f"the config file {FILE}"),
    ({"env": {"ABHED_MODE": "auto"}}, "the environment variable ABHED_MODE"),
    ({"flags": {"approval": {"mode": "auto"}}}, "the command line (--mode)")])
def test_a_mode_the_policy_does_not_permit_is_refused(tmp_path, layer, where):
    text = refused(policy(MODES, tmp_path), **layer)
    assert (f'The site policy {P} permits approval.mode to be only "ask", "plan"; {where} sets approval.mode to '
            '"auto" ("auto" not permitted). Choose one the policy permits.') == text


def test_chat_s_mode_switch_is_held_to_the_permitted_modes(tmp_path):
    settings = effective(policy(MODES, tmp_path))
    settings._site_policy = policy(MODES, tmp_path)
    gate = Gate(Policy.from_settings(settings, tmp_path, checkpoints=True),
                mode_refused=sitepolicy.mode_refused(settings))
    with pytest.raises(ValueError) as err:
        gate.set_mode("accept-edits")
    assert str(err.value) == (f"The site policy {P} does not permit approval mode 'accept-edits' (key approval.mode): "
                              'it permits "ask", "plan". Choose one of those.')
    assert gate.effective().mode == "ask"
    gate.set_mode("plan")
    assert gate.effective().mode == "plan"


ENDPOINTS = '''[allowed]
"model.endpoint" = ["http://gpu1.lan:8000/v1", "http://gpu2.lan:8000/v1"]
"model.model" = ["qwen3-coder"]
'''


def test_an_endpoint_or_model_the_policy_does_not_permit_is_refused(tmp_path):
    site = policy(ENDPOINTS, tmp_path)
    text = refused(site, flags={"model": {"endpoint": "http://evil:80/v1"}})
    assert (f'permits model.endpoint to be only "http://gpu1.lan:8000/v1", "http://gpu2.lan:8000/v1"; the command '
            'line (--endpoint) sets model.endpoint to "http://evil:80/v1"') in text
    text = refused(site, env={"ABHED_MODEL": "other"})
    assert 'permits model.model to be only "qwen3-coder"; the environment variable ABHED_MODEL sets' in text


def test_defaults_the_policy_does_not_permit_become_its_first_choice(tmp_path):
    settings = effective(policy(ENDPOINTS, tmp_path))
    assert settings.model.endpoint == "http://gpu1.lan:8000/v1" and settings.model.model == "qwen3-coder"
    chosen = effective(policy(ENDPOINTS, tmp_path), file={"model": {"endpoint": "http://gpu2.lan:8000/v1"}})
    assert chosen.model.endpoint == "http://gpu2.lan:8000/v1"


def test_a_list_of_endpoints_is_checked_url_by_url(tmp_path):
    """endpoints37's model.endpoints (a list beside model.endpoint) is held to the same permitted URLs."""
    site = policy(ENDPOINTS, tmp_path)
    merged = {"model": {"endpoints": ["http://gpu1.lan:8000/v1", "http://evil:80/v1"]}}
    layers = config.named_layers(FILE, [merged, {}, {}])
    with pytest.raises(sitepolicy.PolicyError) as err:
        sitepolicy.apply(site, layers, merged, {"model": {"endpoints": []}})
    assert (f'the config file {FILE} sets model.endpoints to ["http://gpu1.lan:8000/v1", "http://evil:80/v1"] '
            '("http://evil:80/v1" not permitted)') in str(err.value)


MCP = '''[allowed]
"mcp.servers" = ["jira"]
"mcp.servers.*.allow_hosts" = ["jira.lan:443"]
'''


def test_an_mcp_server_or_host_the_policy_does_not_permit_is_refused(tmp_path):
    site = policy(MCP, tmp_path)
    ok = {"mcp": {"servers": {"jira": {"command": ["/opt/jira"], "allow_hosts": ["jira.lan:443"]}}}}
    assert list(effective(site, file=ok).mcp.servers) == ["jira"]
    text = refused(site, file={"mcp": {"servers": {"evil": {"url": "http://evil/mcp"}}}})
    assert f'permits mcp.servers to be only "jira"; the config file {FILE} sets mcp.servers to' in text
    assert '("evil" not permitted)' in text
    text = refused(site, file={"mcp": {"servers": {"jira": {"command": ["/opt/jira"], "allow_hosts": ["x.lan:22"]}}}})
    assert 'permits mcp.servers.*.allow_hosts to be only "jira.lan:443"' in text
    assert 'sets mcp.servers.jira.allow_hosts to ["x.lan:22"]' in text


def test_a_table_locked_whole_takes_no_key_the_policy_does_not_hold(tmp_path):
    site = policy('[settings.mcp.servers.jira]\ncommand = ["/opt/jira"]\n', tmp_path)
    assert list(effective(site).mcp.servers) == ["jira"]
    text = refused(site, file={"mcp": {"servers": {"jira": {"command": ["/opt/jira"]}, "evil": {"url": "http://e/"}}}})
    assert text.startswith(f'The site policy {P} locks mcp.servers to {{"jira": {{"command": ["/opt/jira"]}}}}; '
                           f"the config file {FILE} sets mcp.servers to")


def test_the_audit_table_is_locked_whole(tmp_path):
    """The [audit] section: the policy's value wins, validated as Settings' own, and a user can add no
    sink beside it nor change a sink's destination."""
    assert "audit" in sitepolicy.WHOLE
    site = policy('[settings.audit]\nsinks = ["syslog", "jsonl"]\njsonl.path = "/var/log/abhed"\n', tmp_path)
    chosen = effective(site).audit
    assert chosen.sinks == ["syslog", "jsonl"] and str(chosen.jsonl.path) == "/var/log/abhed"
    text = refused(site, file={"audit": {"sinks": ["syslog"]}})
    assert text.startswith(f"The site policy {P} locks audit to ") and f"the config file {FILE} sets audit to" in text
    assert "/var/log/abhed" in refused(site, file={"audit": {"jsonl": {"path": "/tmp/mine"}}})
    with pytest.raises(sitepolicy.PolicyError):
        policy('[settings.audit]\nsinks = ["carrier-pigeon"]\n', tmp_path)  # checked against Settings


def test_config_show_notes(tmp_path):
    site = policy(LOCKS + MODES, tmp_path)
    assert site.annotate("sandbox.backend", "default") == f"locked by the site policy {P}"
    assert site.annotate("approval.mode", "file X") == f'file X; the site policy {P} permits only "ask", "plan"'
    assert site.annotate("approval.deny", "default").startswith(f"locked by the site policy {P}: its entries always")
    assert site.annotate("model.model", "default") == "default"


# The file itself: root's alone, readable, valid.

@pytest.mark.parametrize("mode, who", [(0o664, "its group"), (0o646, "every user"), (0o666, "its group and every user")])
def test_a_policy_others_can_write_is_refused(tmp_path, mode, who):
    with pytest.raises(sitepolicy.PolicyError) as err:
        policy(LOCKS, tmp_path, mode=mode)
    path = tmp_path / "etc-abhed" / "policy.toml"
    assert str(err.value).startswith(f"Refusing to run: the site policy {path} could have been written by someone "
                                     f"other than root ({path} is writable by {who} (mode {mode:04o}))")
    assert f"sudo chown root:root {path} {path.parent} && sudo chmod 0644 {path}" in str(err.value)


def test_a_policy_in_a_directory_others_can_write_is_refused(tmp_path):
    directory = tmp_path / "etc-abhed"
    directory.mkdir()
    directory.chmod(0o1777)  # sticky or not: whoever writes the directory can replace a file's name
    with pytest.raises(sitepolicy.PolicyError, match=f"{directory} is writable by its group and every user"):
        policy(LOCKS, tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_policy_someone_else_owns_is_refused(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(LOCKS)
    os.chown(path, 65534, -1)
    with pytest.raises(sitepolicy.PolicyError, match=f"{path} is owned by uid 65534, not root"):
        sitepolicy.read(config.Settings, path)


def test_a_symlink_is_not_followed(tmp_path):
    (tmp_path / "real.toml").write_text(LOCKS)
    (tmp_path / "policy.toml").symlink_to(tmp_path / "real.toml")
    with pytest.raises(sitepolicy.PolicyError) as err:
        sitepolicy.read(config.Settings, tmp_path / "policy.toml")
    assert f"Cannot read the site policy {tmp_path / 'policy.toml'}:" in str(err.value)
    assert "does not run while a site policy exists that it cannot read" in str(err.value)


@pytest.mark.parametrize("text, why", [
    ("[settings\n", "Cannot read the site policy"),
    ("[rules]\n", "unknown table(s) rules (a policy has [settings] and [allowed])"),
    ('[settings]\nsandbox.backend = "nope"\n', "[settings] sandbox.backend:"),
    ('[settings]\nsandbox.bakend = "bwrap"\n', "[settings] sandbox.bakend: Extra inputs are not permitted"),
    ('[allowed]\n"approval.mood" = ["ask"]\n', "[allowed] 'approval.mood' names no setting"),
    ('[allowed]\n"approval.mode" = "ask"\n', "[allowed] 'approval.mode' must be a non-empty list"),
    ('[allowed]\n"approval.mode.x" = ["a"]\n', "[allowed] 'approval.mode.x' names no setting"),
    ('[allowed]\n"mcp.servers.*.nope" = ["a"]\n', "[allowed] 'mcp.servers.*.nope' names no setting"),
    ('settings = 1\n', "[settings] and [allowed] must be tables"),
    ('allowed = 1\n', "[settings] and [allowed] must be tables")])
def test_a_broken_policy_stops_everything(tmp_path, text, why):
    with pytest.raises(sitepolicy.PolicyError) as err:
        policy(text, tmp_path)
    assert why in str(err.value) and "does not run while it is broken" in str(err.value)


def test_a_policy_locking_what_its_own_list_forbids_is_its_own_error(tmp_path):
    site = policy('[settings]\napproval.mode = "auto"\n' + MODES, tmp_path)
    assert "it locks approval.mode to \"auto\", which its own [allowed] 'approval.mode' does not list" in refused(site)


@pytest.mark.parametrize("uid_map, root", [
    ("         0          0 4294967295\n", 0),  # the machine's own namespace
    ("         0       1001          1\n", "uid 1001 of the machine"),  # unshare -Ur by uid 1001
    ("         0     100000      65536\n", "uid 100000 of the machine"),  # a container's range
    ("      1000       1000          1\n", "uid 0 is not mapped"),
    ("         1          1 4294967294\n         0     100000          1\n", "uid 100000 of the machine"),
    ("        -5          0         10\n", "uid 5 of the machine")])
def test_root_is_the_machine_s_root_only(uid_map, root):
    assert sitepolicy.root_in(uid_map) == root


def test_a_user_table_over_a_locked_key_is_refused_not_a_traceback(tmp_path):
    text = refused(policy(LOCKS, tmp_path), file={"sandbox": "none"})
    assert f'locks sandbox.backend to "bwrap"; the config file {FILE} sets sandbox to "none"' in text


def test_an_invalid_value_for_a_locked_key_is_still_refused(tmp_path):
    text = refused(policy(LOCKS, tmp_path), env={"ABHED_CHECKPOINTS": "maybe"})
    assert 'ABHED_CHECKPOINTS sets checkpoints.enabled to "maybe"' in text


def test_a_falsy_value_is_traced_to_its_layer(tmp_path):
    site = policy('[allowed]\n"files.new_file_mode" = [420]\n', tmp_path)
    text = refused(site, file={"files": {"new_file_mode": 0}})
    assert f"the config file {FILE} sets files.new_file_mode to 0 (0 not permitted)" in text


def test_without_a_policy_every_mode_may_be_chosen(tmp_path):
    assert sitepolicy.mode_refused(config.load(env={"ABHED_CONFIG": ""})) is None


def test_describe_says_what_is_locked_and_permitted(tmp_path):
    site = policy(LOCKS + MODES, tmp_path)
    assert site.describe() == ['sandbox.backend = "bwrap" (locked)', "sandbox.allow_network = false (locked)",
                               "checkpoints.enabled = true (locked)", 'approval.deny = ["bash(curl:*)"] (locked)',
                               'approval.mode: one of "ask", "plan"']
    bare = policy("[settings]\ncheckpoints.enabled = true\n", tmp_path)
    assert bare.describe()[-1] == 'sandbox.backend: never "none" (a policy forbids it unless it allows it)'
    assert bare.annotate("sandbox.backend", "default") == f'default; the site policy {P} forbids "none"'


def test_a_locked_mode_is_the_only_one(tmp_path):
    from abhed.gate.modes import MODES as ALL
    site = policy('[settings]\napproval.mode = "plan"\n', tmp_path)
    assert site.permitted_modes(ALL) == ("plan",)
    assert site.mode_refusal("ask", ALL).endswith('it permits "plan". Choose one of those.')


def test_a_huge_file_is_no_policy(tmp_path):
    with pytest.raises(sitepolicy.PolicyError, match="is larger than 1 MiB: it is not a policy file"):
        policy("#" * (1024 * 1024) + "\n", tmp_path)
    assert policy("#" * (1024 * 1024 - 1) + "\n", tmp_path).locked == {}  # exactly 1 MiB is read whole


def test_a_directory_at_the_path_is_refused(tmp_path):
    (tmp_path / "policy.toml").mkdir(mode=0o755)
    with pytest.raises(sitepolicy.PolicyError, match=f"{tmp_path / 'policy.toml'} is not a regular file"):
        sitepolicy.read(config.Settings, tmp_path / "policy.toml")


def test_root_of_a_user_namespace_is_not_root(tmp_path, monkeypatch):
    monkeypatch.setattr(sitepolicy, "_host_root", lambda: "uid 1001 of the machine")
    with pytest.raises(sitepolicy.PolicyError) as err:
        policy(LOCKS, tmp_path)
    assert "policy.toml is owned by the root of a user namespace (uid 1001 of the machine), not the machine's root" \
        in str(err.value)


def test_checkpoints_the_policy_locks_on_are_an_error_without_git_and_off_without_a_policy(tmp_path, monkeypatch):
    from abhed.session import checkpoint
    site = policy(LOCKS, tmp_path)
    settings = effective(site)
    settings._site_policy = site
    monkeypatch.setattr(checkpoint, "available", lambda: None)  # no git on PATH
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.from_settings(settings, tmp_path)
    assert str(err.value).startswith(f"The site policy {P} requires checkpoints (checkpoints.enabled = true)")
    assert "nothing was run" in str(err.value) and "apt-get install git" in str(err.value)
    assert checkpoint.from_settings(config.Settings(), tmp_path) is None  # no policy: off, as doctor says
