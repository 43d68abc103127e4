"""SandboxConfig and Limits: secure defaults, and errors that say how to fix the configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import DEFAULT_PROTECTED_PATHS, ConfigError, Limits, SandboxConfig


def test_defaults_are_the_secure_choice():
    config = SandboxConfig()
    assert config.backend == "bwrap" and config.bwrap_path is None and config.allow_network is False
    assert config.env_passthrough == () and config.ro_binds == () and config.rw_binds == ()
    assert config.protected_paths == DEFAULT_PROTECTED_PATHS == (".git/hooks/", ".git/config", ".git/modules/", ".git/info/", ".abhed/",
                                                                 ".git/objects/pack/")
    limits = config.limits
    assert limits.processes == 1024 and limits.file_size_bytes == 2 * 1024**3 and limits.open_files == 4096
    assert limits.core_dump_bytes == 0 and limits.address_space_bytes is None and limits.cpu_seconds is None
    assert limits.memory_bytes == 4 * 1024**3 and limits.disk_reserve_bytes == "auto"  # min(1 GiB, 5%): sandbox.reserve


def test_lists_and_strings_from_a_config_file_are_normalised():
    config = SandboxConfig(
        ro_binds=["/opt/tools"],
        rw_binds=["/srv/cache"],
        env_passthrough=["HTTP_PROXY"],
        protected_paths=[".abhed/"],
        bwrap_path="/usr/bin/bwrap",
    )
    assert config.ro_binds == (Path("/opt/tools"),) and config.rw_binds == (Path("/srv/cache"),)
    assert config.env_passthrough == ("HTTP_PROXY",) and config.protected_paths == (".abhed/",)
    assert config.bwrap_path == Path("/usr/bin/bwrap")
    hash(config)  # immutable and hashable


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "docker"}, "backend must be one of bwrap, none, microvm; got 'docker'"),
        ({"bwrap_path": "bwrap"}, "bwrap_path must be an absolute path, got 'bwrap'"),
        ({"bwrap_path": "./bin/bwrap"}, "which the model can write to"),
        ({"allow_network": "yes"}, "allow_network must be true or false"),
        ({"env_passthrough": ["1BAD"]}, "is not a valid variable name"),
        ({"env_passthrough": ["HOME"]}, "env_passthrough cannot include HOME: the sandbox sets it itself"),
        ({"env_passthrough": ["GIT_EDITOR"]}, "env_passthrough cannot include GIT_EDITOR"),
        ({"env_passthrough": ["BASH_ENV"]}, "the shell acts on it at startup"),
        ({"env_passthrough": ["BASH_FUNC_ls%%"]}, "is not a valid variable name"),
        ({"ro_binds": ["opt"]}, "ro_binds entries must be absolute host paths, got 'opt'"),
        ({"rw_binds": ["cache"]}, "rw_binds entries must be absolute host paths"),
        ({"hidden_paths": ["secret"]}, "hidden_paths entries must be absolute host paths"),
        ({"protected_paths": ["/etc/passwd"]}, "must be a plain workspace-relative path"),
        ({"protected_paths": ["../outside"]}, "must be a plain workspace-relative path"),
        ({"protected_paths": ["a//b"]}, "must be a plain workspace-relative path"),
        ({"protected_paths": [""]}, "is empty"),
        ({"tmp_size_bytes": 10}, "tmp_size_bytes must be an integer of at least 1 MiB"),
        ({"limits": {"processes": 5}}, "limits must be a sandbox.Limits"),
    ],
)
def test_invalid_configuration_is_explained(kwargs, message):
    with pytest.raises(ConfigError) as err:
        SandboxConfig(**kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"processes": -1}, "limits.processes must be a non-negative integer or None"),
        ({"file_size_bytes": 1.5}, "limits.file_size_bytes must be a non-negative integer or None"),
        ({"open_files": 64}, "limits.open_files must be at least 256 (the launcher keeps its control pipe at fd 200)"),
        ({"cpu_seconds": True}, "limits.cpu_seconds must be a non-negative integer or None"),
        ({"memory_bytes": 1024}, "limits.memory_bytes must be at least 64 MiB (the shell and the sandbox's setup need memory too), got 1024; use None"),
        ({"memory_bytes": -1}, "limits.memory_bytes must be a non-negative integer or None"),
        ({"disk_reserve_bytes": "1G"}, 'limits.disk_reserve_bytes must be a non-negative integer, "auto" or None (no '
                                       "reserve), got '1G'."),
        ({"session_memory_bytes": 1024}, "limits.session_memory_bytes must be at least 64 MiB (the shell and the sandbox's setup "
                                         "need memory too), got 1024; use None for no memory limit."),
        ({"session_processes": 0}, "limits.session_processes must be at least 1 (each command is a process); use None for no limit."),
        ({"background_jobs": 0}, "limits.background_jobs must be at least 1 (0 would refuse every background job); use None for no limit."),
        ({"processes": 0}, "limits.processes must be at least 1 (the command itself is a process); use None for no limit."),
    ],
)
def test_invalid_limits_are_explained(kwargs, message):
    with pytest.raises(ConfigError) as err:
        Limits(**kwargs)
    assert message in str(err.value)


def test_limits_can_be_switched_off_explicitly():
    limits = Limits(processes=None, file_size_bytes=None, open_files=None, core_dump_bytes=None)
    assert SandboxConfig(limits=limits).limits.processes is None


# Written out here, not taken from the module: dropping a name there must fail a test.
OWNED = ("HOME", "TMPDIR", "TERM", "PAGER", "GIT_PAGER", "GIT_EDITOR", "GIT_TERMINAL_PROMPT", "PWD", "OLDPWD")
STARTUP = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "BASH_XTRACEFD", "BASH_FUNC_x")


@pytest.mark.parametrize("name", OWNED)
def test_every_variable_the_sandbox_sets_itself_is_refused(name):
    with pytest.raises(ConfigError) as caught:
        SandboxConfig(env_passthrough=[name])
    assert str(caught.value) == (
        f"env_passthrough cannot include {name}: the sandbox sets it itself so commands behave "
        "non-interactively and inside the sandbox. Remove it from env_passthrough."
    )


@pytest.mark.parametrize("name", STARTUP)
def test_every_variable_the_shell_acts_on_at_startup_is_refused(name):
    with pytest.raises(ConfigError) as caught:
        SandboxConfig(env_passthrough=[name])
    assert str(caught.value) == (
        f"env_passthrough cannot include {name}: the shell acts on it at startup, before the sandbox "
        "launcher applies its own setup. Remove it from env_passthrough."
    )


def test_limits_accept_their_minimum_exactly():
    assert Limits(open_files=256, memory_bytes=64 * 1024**2, processes=1).open_files == 256
    with pytest.raises(ConfigError, match="limits.open_files must be at least 256 .* got 255"):
        Limits(open_files=255)
    with pytest.raises(ConfigError, match=f"limits.memory_bytes must be at least 64 MiB .* got {64 * 1024**2 - 1}"):
        Limits(memory_bytes=64 * 1024**2 - 1)
    least = Limits(session_memory_bytes=64 * 1024**2, session_processes=1, background_jobs=1)
    assert (least.session_memory_bytes, least.session_processes, least.background_jobs) == (64 * 1024**2, 1, 1)
    with pytest.raises(ConfigError, match=f"limits.session_memory_bytes must be at least 64 MiB .* got {64 * 1024**2 - 1}"):
        Limits(session_memory_bytes=64 * 1024**2 - 1)
    none = Limits(session_memory_bytes=None, session_processes=None, background_jobs=None)
    assert (none.session_memory_bytes, none.session_processes, none.background_jobs) == (None, None, None)
    assert (Limits().session_memory_bytes, Limits().session_processes, Limits().background_jobs) == (8 * 1024**3, 2048, 8)
    assert SandboxConfig(tmp_size_bytes=1024**2).tmp_size_bytes == 1024**2
    with pytest.raises(ConfigError, match=f"at least 1 MiB, got {1024**2 - 1}"):
        SandboxConfig(tmp_size_bytes=1024**2 - 1)


@pytest.mark.parametrize("name", ["processes", "file_size_bytes", "open_files", "address_space_bytes", "cpu_seconds",
                                  "core_dump_bytes", "memory_bytes", "disk_reserve_bytes", "session_memory_bytes",
                                  "session_processes", "background_jobs"])
@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_every_limit_refuses_what_is_not_a_non_negative_integer(name, bad):
    with pytest.raises(ConfigError) as err:
        Limits(**{name: bad})
    if name == "disk_reserve_bytes":  # "auto" too (sandbox.reserve)
        assert str(err.value) == f'limits.{name} must be a non-negative integer, "auto" or None (no reserve), got {bad!r}.'
    else:
        assert str(err.value) == f"limits.{name} must be a non-negative integer or None (no limit), got {bad!r}."


def test_a_limit_is_named_as_the_embedding_application_names_it():
    assert Limits().setting("memory_bytes") == "limits.memory_bytes"   # nothing given: the field
    named = Limits(setting_names=[["memory_bytes", "sandbox.max_memory_bytes"]])   # as JSON gives it
    assert named.setting("memory_bytes") == "sandbox.max_memory_bytes"
    assert named.setting("processes") == "limits.processes"
    assert hash(named) == hash(Limits(setting_names=(("memory_bytes", "sandbox.max_memory_bytes"),)))
