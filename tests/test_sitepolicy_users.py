"""Issue 37 item 1: a real unprivileged user tries every way around the site policy, against the real
command line, with the policy at its fixed path (/etc/abhed/policy.toml, placed in a private mount
namespace: tests/sitepolicy_testing.py). Judged by what happened: the command that would have made a
file did not run (the file is absent), no session was written, no connection reached the endpoint."""

from __future__ import annotations

import json
import os
import socket

import pytest

from sitepolicy_testing import site  # noqa: F401  (the fixture)

P = "/etc/abhed/policy.toml"
POLICY = '''
[settings]
sandbox.backend = "bwrap"
checkpoints.enabled = true
sandbox.allow_network = false
approval.deny = ["bash(touch:*)"]

[allowed]
"approval.mode" = ["ask", "plan", "accept-edits"]
"mcp.servers" = ["jira"]
"model.endpoint" = ["http://127.0.0.1:9/v1"]
"model.model" = ["site-model"]
'''


def make(site, name: str = "made", *, mode: str = "accept-edits", env: dict[str, str] | None = None,
         extra: tuple[str, ...] = ()):
    """`abhed tool bash` writing `name` in the workspace (`mkdir`: the policy denies touch), as the user."""
    call = json.dumps({"command": f"mkdir {name}", "description": "make a directory"})
    return site.abhed("tool", "bash", call, "--workspace", str(site.ws), "--mode", mode, "--confirm", *extra, env=env)


def assert_refused(site, proc, *facts: str) -> None:
    assert proc.returncode != 0, proc.stdout + proc.stderr
    for fact in facts:
        assert fact in proc.stderr, proc.stderr
    assert not (site.ws / "made").exists()  # the command did not run
    assert not (site.home / "store").exists()  # no session was written


@pytest.mark.slow
def test_the_user_works_within_the_policy_and_config_show_marks_what_is_locked(site):
    site.policy = POLICY
    proc = make(site)
    assert proc.returncode == 0, proc.stderr
    assert (site.ws / "made").is_dir() and (site.ws / "made").stat().st_uid == site.user.pw_uid
    shown = site.abhed("config", "show")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == (f"# site policy {P} (root's, in force): 4 key(s) locked, 4 with permitted values; "
                        "users cannot change these")
    assert f'sandbox.backend = "bwrap"  # locked by the site policy {P}' in lines
    assert f'checkpoints.enabled = true  # locked by the site policy {P}' in lines
    assert f'approval.mode = "ask"  # default; the site policy {P} permits only "ask", "plan", "accept-edits"' in lines
    assert f'model.endpoint = "http://127.0.0.1:9/v1"  # default; the site policy {P} permits only ' \
           '"http://127.0.0.1:9/v1"' in lines
    assert 'approval.deny = ["bash(touch:*)"]  # locked by the site policy' in shown.stdout
    assert not os.path.exists(P)  # it was in the runs' private mount namespaces only, never the machine's /etc


@pytest.mark.parametrize("config, env, facts", [
    ('[sandbox]\nbackend = "none"\n', {},
     ['locks sandbox.backend to "bwrap"; the config file', 'sets sandbox.backend to "none"']),
    ("", {"ABHED_SANDBOX": "none", "ABHED_POLICY": "/dev/null", "ABHED_SITE_POLICY": "", "ABHED_CONFIG": ""},
     ['locks sandbox.backend to "bwrap"; the environment variable ABHED_SANDBOX sets sandbox.backend to "none"']),
    ("", {"ABHED_CHECKPOINTS": "false"},
     ["locks checkpoints.enabled to true; the environment variable ABHED_CHECKPOINTS sets"]),
    ("[checkpoints]\nenabled = false\n", {}, ["locks checkpoints.enabled to true; the config file"]),
    ("[sandbox]\nallow_network = true\n", {}, ["locks sandbox.allow_network to false; the config file"]),
    ('[approval]\nmode = "auto"\n', {},
     ['permits approval.mode to be only "ask", "plan", "accept-edits"; the config file']),
    ("", {"ABHED_MODE": "auto"}, ["the environment variable ABHED_MODE sets approval.mode to \"auto\""]),
    ('[mcp.servers.evil]\ncommand = ["/bin/true"]\n', {},
     ['permits mcp.servers to be only "jira"', '("evil" not permitted)']),
], ids=["config-sandbox-none", "env-sandbox-none", "env-checkpoints-off", "config-checkpoints-off",
        "config-network", "config-mode", "env-mode", "config-mcp"])
def test_every_user_layer_that_conflicts_is_refused_and_nothing_runs(site, config, env, facts):
    site.policy = POLICY
    site.config = config
    assert_refused(site, make(site, env=env), f"The site policy {P} ", *facts)


@pytest.mark.parametrize("config", ["[audit]\nsinks = []\n", '[audit.syslog]\nsocket = "/tmp/mine.sock"\n'],
                         ids=["no-sinks", "own-socket"])
def test_the_audit_sinks_cannot_be_emptied_or_redirected(site, config):
    site.policy = POLICY + '\n[settings.audit]\nsinks = ["syslog"]\nsyslog.socket = "/run/abhed-audit.sock"\n'
    site.config = config
    assert_refused(site, make(site), f"The site policy {P} locks audit to ", "/run/abhed-audit.sock",
                   "the config file")


def test_sandbox_none_is_refused_even_when_the_policy_never_mentions_the_sandbox(site):
    site.policy = '[settings]\ncheckpoints.enabled = true\n'
    assert_refused(site, make(site, env={"ABHED_SANDBOX": "none"}),
                   f'The site policy {P} forbids sandbox.backend "none" (the environment variable ABHED_SANDBOX '
                   "sets it)")


def test_a_mode_flag_the_policy_does_not_permit_is_refused(site):
    site.policy = POLICY
    assert_refused(site, make(site, mode="auto"),
                   f"The site policy {P} does not permit approval mode 'auto' (key approval.mode): it permits "
                   '"ask", "plan", "accept-edits"')


def test_no_allow_rule_lifts_a_policy_deny(site):
    """The user's config allows touch and empties the deny list; --confirm stands for a human's yes."""
    site.policy = POLICY
    site.config = '[approval]\nallow = ["bash(touch:*)", "bash"]\ndeny = []\nmode = "accept-edits"\n'
    call = json.dumps({"command": f"touch {site.ws / 'made'}", "description": "make a file"})
    proc = site.abhed("tool", "bash", call, "--workspace", str(site.ws), "--confirm", "--json")
    assert not (site.ws / "made").exists(), proc.stdout
    result = json.loads(proc.stdout)
    assert result["is_error"] and "deny bash(touch:*)" in result["content"], result


@pytest.mark.slow
def test_an_endpoint_or_model_the_policy_does_not_permit_is_never_contacted(site):
    site.policy = POLICY
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    try:
        for args, env, fact in [
                (("--endpoint", url), {}, f'the command line (--endpoint) sets model.endpoint to "{url}"'),
                ((), {"ABHED_ENDPOINT": url}, "the environment variable ABHED_ENDPOINT sets model.endpoint"),
                (("--model", "other"), {}, 'the command line (--model) sets model.model to "other"')]:
            proc = site.abhed("run", *args, "--workspace", str(site.ws), f"mkdir {site.ws / 'made'}", env=env)
            assert_refused(site, proc, f"The site policy {P} permits model.", fact)
            with pytest.raises(BlockingIOError):
                listener.accept()  # nobody connected
    finally:
        listener.close()


@pytest.mark.parametrize("who, facts", [
    ("user-owned", ["policy.toml is owned by uid {uid}, not root"]),
    ("world-writable", ["policy.toml is writable by its group and every user (mode 0666)"]),
    ("user-directory", ["/etc/abhed is owned by uid {uid}, not root"]),
    ("unreadable", ["Cannot read the site policy /etc/abhed/policy.toml: Permission denied"]),
])
def test_a_policy_the_user_could_write_or_cannot_read_stops_everything(site, who, facts):
    """Fail closed: a policy the user could have changed binds nothing, so nothing runs at all."""
    site.policy = POLICY
    if who == "user-owned":
        site.policy_uid = site.user.pw_uid
    elif who == "world-writable":
        site.policy_mode = 0o666
    elif who == "user-directory":
        site.dir_uid = site.user.pw_uid
    else:
        site.policy_mode = 0o600
    facts = [f.format(uid=site.user.pw_uid) for f in facts]
    proc = make(site)
    assert_refused(site, proc, *facts)
    if who != "unreadable":
        assert "sudo chown root:root /etc/abhed/policy.toml /etc/abhed && sudo chmod 0644" in proc.stderr
    if who != "user-owned":
        return
    doctor = site.abhed("doctor")
    assert doctor.returncode == 1 and doctor.stdout.startswith("FAIL  site policy"), doctor.stdout + doctor.stderr
    assert facts[0] in doctor.stdout


def test_a_policy_faked_in_a_user_namespace_is_refused(site):
    """The user maps themselves to root in a user namespace of their own and binds a permissive file of
    theirs over the policy: there it looks root's, but uid 0 there is the user."""
    site.policy = POLICY
    fake = site.home / "fake.toml"
    fake.write_text('[allowed]\n"sandbox.backend" = ["none"]\n')
    os.chown(fake, site.user.pw_uid, site.user.pw_gid)
    prefix = ["unshare", "-Urm", "sh", "-c", 'mount --bind "$0" /etc/abhed/policy.toml && exec "$@"', str(fake)]
    proc = site.abhed("tool", "bash", json.dumps({"command": "mkdir made", "description": "d"}), "--workspace",
                      str(site.ws), "--confirm", env={"ABHED_SANDBOX": "none"}, prefix=prefix)
    if "unshare" in proc.stderr and "Operation not permitted" in proc.stderr:
        pytest.skip(f"user namespaces are not open to users here: {proc.stderr.strip()}")
    assert_refused(site, proc, "policy.toml is owned by the root of a user namespace "
                               f"(uid {site.user.pw_uid} of the machine), not the machine's root")


@pytest.mark.slow
def test_doctor_reports_the_policy_in_force(site):
    site.policy = POLICY
    proc = site.abhed("doctor", env={"ABHED_SANDBOX": "bwrap"})
    first = proc.stdout.splitlines()[-1]  # the policy's line comes last, after the checks it shapes
    assert first.startswith(f"OK    site policy   {P} (root's, not writable by others), in force: "
                            'sandbox.backend = "bwrap" (locked); sandbox.allow_network = false (locked); '
                            'checkpoints.enabled = true (locked); approval.deny = ["bash(touch:*)"] (locked); '
                            'approval.mode: one of "ask", "plan", "accept-edits"; mcp.servers: one of "jira"; '), first
    assert 'sandbox.backend: never "none"' not in first  # it is locked to bwrap: said once
    site.policy = None
    proc = site.abhed("doctor")
    assert proc.stdout.splitlines()[-1] == f"OK    site policy   none at {P}: every setting is the user's to choose"


@pytest.mark.slow
def test_checkpoints_the_policy_locks_on_stop_every_command_where_git_is_missing(site):
    """Without git, checkpoints are off: a user who takes git off PATH must not get a session whose
    changes cannot be undone when the site's policy requires them."""
    site.policy = POLICY
    (site.root / "no-git").mkdir()
    call = json.dumps({"command": "mkdir made", "description": "make a directory"})
    proc = site.abhed("tool", "bash", call, "--workspace", str(site.ws), "--mode", "accept-edits", "--confirm",
                      prefix=["/usr/bin/env", f"PATH={site.root / 'no-git'}"])  # (unshare and setpriv keep theirs)
    assert_refused(site, proc, P, "requires checkpoints (checkpoints.enabled = true)", "no `git` on PATH",
                   "nothing was run", "apt-get install git")
