"""Escape tests: each test tries to get out of the bwrap sandbox, and every attempt must fail.

Run as host root and as an unprivileged user (the ``runner`` fixture, see conftest.py)
wherever the difference matters. Each test checks the host side too: what the command
tried to change outside must be unchanged, whatever the command printed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from sbx_helpers import DriverError, chown_to, host_pids_with, unique_marker, vmm_pids, wait_until

import sandbox
from sandbox.protect import PLACEHOLDER_GITFILE

PY = "/usr/bin/python3"  # the host's system Python, visible inside the sandbox through /usr
needs_python = pytest.mark.skipif(not os.access(PY, os.X_OK), reason=f"needs {PY} on the host to script the attempt inside the sandbox")
needs_git = pytest.mark.skipif(shutil.which("git", path="/usr/bin:/bin") is None, reason="needs git in /usr/bin")


def outside_dir(workspace: Path, runner) -> Path:
    """A directory next to the workspace that the runner's user could write if it could see it."""
    path = workspace.parent / f"outside-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    (path / "existing").write_text("original\n")
    chown_to(path, runner)
    return path


# -- Writing outside the workspace -----------------------------------------------------------


def test_cannot_write_outside_the_workspace_directly(runner, workspace):
    outside = outside_dir(workspace, runner)
    host_tmp = Path(f"/tmp/abhed-escape-{uuid.uuid4().hex}")
    targets = [outside / "new", outside / "existing", host_tmp, Path("/etc/abhed-escape"), Path("/usr/abhed-escape"), Path("/abhed-escape")]
    command = "".join(f"echo pwned > {t}; echo pwned >> {t}; " for t in targets) + "true"
    result = runner.run(command, workspace=workspace)
    assert result.exit_code == 0
    assert not (outside / "new").exists()
    assert (outside / "existing").read_text() == "original\n"
    for path in (host_tmp, Path("/etc/abhed-escape"), Path("/usr/abhed-escape"), Path("/abhed-escape")):
        assert not path.exists(), path
    assert "Read-only file system" in result.output  # /etc, /usr and / refuse the write


def test_cannot_write_outside_through_dotdot(runner, workspace):
    outside = outside_dir(workspace, runner)
    name = f"escape-{uuid.uuid4().hex[:8]}"
    command = (
        f"echo pwned > ../{name}; echo pwned > ../{outside.name}/new; echo pwned >> ../{outside.name}/existing; "
        f"cd .. && echo pwned > {name}-2; cd / && echo pwned > {name}-3; true"
    )
    runner.run(command, workspace=workspace)
    assert not (workspace.parent / name).exists()
    assert not (workspace.parent / f"{name}-2").exists()
    assert not Path(f"/{name}-3").exists()
    assert not (outside / "new").exists()
    assert (outside / "existing").read_text() == "original\n"


def test_cannot_write_outside_through_a_symlink_made_inside(runner, workspace):
    outside = outside_dir(workspace, runner)
    host_tmp = Path(f"/tmp/abhed-escape-{uuid.uuid4().hex}")
    command = (
        f"ln -s {outside}/existing to-file && echo pwned > to-file; echo pwned >> to-file; "
        f"ln -s {outside} to-dir && echo pwned > to-dir/new; "
        f"ln -s .. up && echo pwned > up/{outside.name}/new2; "
        f"ln -s {host_tmp} to-tmp && echo pwned > to-tmp; "
        f"ln -s /etc/passwd to-passwd && echo pwned >> to-passwd; true"
    )
    runner.run(command, workspace=workspace)
    assert (outside / "existing").read_text() == "original\n"
    assert not (outside / "new").exists() and not (outside / "new2").exists()
    assert not host_tmp.exists()
    assert "pwned" not in Path("/etc/passwd").read_text()


def test_host_tmp_is_not_visible(runner, workspace):
    secret = Path(f"/tmp/abhed-visible-{uuid.uuid4().hex}")
    secret.write_text("host tmp secret\n")
    secret.chmod(0o644)
    try:
        result = runner.run(f"cat {secret}; echo ---; ls -a /tmp", workspace=workspace)
    finally:
        secret.unlink()
    assert "host tmp secret" not in result.output
    assert "No such file or directory" in result.output
    assert secret.name not in result.output.split("---")[1]


# -- Reading what is not ours ----------------------------------------------------------------


@pytest.fixture
def victim_home():
    """Another user's home with a world-readable secret: readable on the host, not in the sandbox."""
    home_root = Path("/home")
    created_root = not home_root.exists()
    if os.geteuid() != 0:
        pytest.skip("creating another user's home directory needs root")
    home_root.mkdir(exist_ok=True)
    home = home_root / f"abhed-sbx-victim-{uuid.uuid4().hex[:8]}"
    home.mkdir(mode=0o755)
    (home / "secret.txt").write_text("victim secret\n")
    (home / "secret.txt").chmod(0o644)
    try:
        yield home
    finally:
        shutil.rmtree(home)
        if created_root:
            home_root.rmdir()


def test_cannot_read_root_or_another_users_home(runner, workspace, victim_home):
    result = runner.run(f"cat {victim_home}/secret.txt; ls -a /home; ls -a /root; cat /root/.bashrc; echo end", workspace=workspace)
    assert "victim secret" not in result.output
    assert f"cat: {victim_home}/secret.txt: No such file or directory" in result.output
    assert "ls: cannot access '/root': No such file or directory" in result.output
    assert "ls: cannot access '/home': No such file or directory" in result.output


def test_etc_secrets_are_hidden(runner, workspace):
    result = runner.run("cat /etc/shadow /etc/gshadow; ls /etc/ssl/private; echo end", workspace=workspace)
    assert "root:" not in result.output
    assert "cat: /etc/shadow: Permission denied" in result.output
    assert result.output.rstrip().endswith("end")


def test_etc_is_read_only_nosuid_nodev_and_looks_as_on_the_host(runner, workspace):
    # As root, /etc is an overlay under the hide layer (sandbox.hidelayer); it must keep every bind's flags.
    result = runner.run("touch /etc/abhed-probe; chmod 644 /etc/passwd; stat -c %a /etc /etc/passwd; "
                        "grep ' /etc ' /proc/self/mountinfo; echo end", workspace=workspace)
    assert "touch: cannot touch '/etc/abhed-probe': Read-only file system" in result.output
    assert "chmod: changing permissions of '/etc/passwd': Read-only file system" in result.output
    modes = f"{stat.S_IMODE(os.stat('/etc').st_mode):o}\n{stat.S_IMODE(os.stat('/etc/passwd').st_mode):o}\n"
    assert modes in result.output
    fields = next(line.split() for line in result.output.splitlines() if line.split()[4:5] == ["/etc"])
    assert {"ro", "nosuid", "nodev"} <= set(fields[5].split(","))  # the mount point's options
    assert result.output.rstrip().endswith("end")


def test_host_environment_is_not_visible(root_runner):
    import sandbox

    workspace = root_runner.new_workspace()
    environ = {"PATH": "/usr/bin", "ABHED_TEST_SECRET_TOKEN": "hunter2", "SSH_AUTH_SOCK": "/run/agent.sock", "LANG": "de_DE.UTF-8"}
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace, environ=environ) as sb:
        result = sb.run("env", cwd=workspace, timeout_s=60)
    assert "hunter2" not in result.output and "SSH_AUTH_SOCK" not in result.output
    assert "LANG=C.UTF-8" in result.output


# -- Links, device nodes, setuid ---------------------------------------------------------------


def test_hard_links_and_device_nodes_fail(runner, workspace):
    outside = outside_dir(workspace, runner)
    command = (
        "ln /etc/hostname hard-etc; ln /usr/bin/id hard-usr; "
        f"ln {outside}/existing hard-outside; "
        "mknod null-dev c 1 3; mknod disk-dev b 8 0; "
        "ls -l /dev | grep '^b' ; test -e /dev/mem || echo no-mem; test -e /dev/sda || echo no-sda; "
        "test -e /dev/kmsg || echo no-kmsg; echo end"
    )
    result = runner.run(command, workspace=workspace)
    for name in ("hard-etc", "hard-usr", "hard-outside", "null-dev", "disk-dev"):
        assert not (workspace / name).exists(), name
    assert "Invalid cross-device link" in result.output or "Operation not permitted" in result.output
    assert "no-mem" in result.output and "no-sda" in result.output and "no-kmsg" in result.output
    assert not [line for line in result.output.splitlines() if line.startswith("b")]


def test_setuid_binaries_do_not_raise_privileges(runner, workspace):
    suid = workspace / "suid-id"
    if os.geteuid() == 0:
        shutil.copy2("/usr/bin/id", suid)
        os.chown(suid, 0, 0)
        suid.chmod(0o4755)
    command = "grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd|CapAmb)' /proc/self/status; "
    if suid.exists():
        command += "echo euid=$(./suid-id -u)"
    result = runner.run(command, workspace=workspace)
    assert "NoNewPrivs:\t1" in result.output
    for caps in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert f"{caps}:\t0000000000000000" in result.output
    if suid.exists():
        assert f"euid={runner.uid}" in result.output  # the setuid-root bit gave nothing


# -- Processes -----------------------------------------------------------------------------


def test_host_processes_are_invisible_and_unkillable(runner, workspace):
    marker = unique_marker()
    host = subprocess.Popen(["sleep", marker])
    try:
        command = f"cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo; echo count=$(ls -d /proc/[0-9]* | wc -l); kill -9 {host.pid}; echo end"
        result = runner.run(command, workspace=workspace)
        assert marker not in result.output
        count = int(result.output.rsplit("count=", 1)[1].split()[0])  # the first one is our own cmdline
        assert count <= 6  # the sandbox's init, the shell, and the pipeline it runs
        assert host.poll() is None  # the host process survived the kill attempt
    finally:
        host.kill()
        host.wait()


def test_background_processes_die_with_the_command(runner, workspace):
    markers = [unique_marker() for _ in range(5)]
    command = (
        f"sleep {markers[0]} & disown; "
        f"nohup sleep {markers[1]} >/dev/null 2>&1 & "
        f"setsid sleep {markers[2]} & "
        f"( ( sleep {markers[3]} & ) & ); "
        f"setsid -f sh -c 'sleep {markers[4]}' </dev/null >/dev/null 2>&1; "
        "sleep 0.2; echo started"
    )
    result = runner.run(command, workspace=workspace)
    assert "started" in result.output
    for marker in markers:
        assert host_pids_with(marker) == [], marker


def test_background_processes_die_on_timeout(runner, workspace):
    markers = [unique_marker(), unique_marker()]
    result = runner.run(f"setsid sleep {markers[0]} & sleep {markers[1]}", workspace=workspace, timeout_s=1)
    assert result.timed_out and result.exit_code is None
    for marker in markers:
        assert host_pids_with(marker) == [], marker


def test_sandbox_dies_with_its_parent(runner, workspace):
    """SIGKILL the process running the sandbox: everything inside must die too.

    Judged on the host: no process of the command is left (bwrap), no qemu is left
    (microvm: the guest's processes live in it), and the file the command kept writing
    in the workspace stops growing.
    """
    marker = unique_marker()
    import json

    ticks = workspace / "ticks"
    argv, kwargs = runner.driver_argv()
    command = f"setsid sh -c 'while :; do echo {marker} >> ticks; sleep 0.1; done' & sleep {marker}"
    request = {
        "op": "exec",
        "code": (
            f"cfg = config_from({runner.base_config!r})\n"
            f"with sandbox.Sandbox(cfg, {str(workspace)!r}) as sb:\n"
            f"    sb.run({command!r}, cwd={str(workspace)!r}, timeout_s=1200)\n"
        ),
    }
    driver = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
    driver.stdin.write(json.dumps(request).encode())
    driver.stdin.close()
    try:
        assert wait_until(lambda: ticks.exists() and ticks.stat().st_size > 0, timeout_s=600), "the command never started"
        vmms = vmm_pids(driver.pid)
        assert len(vmms) == (1 if runner.backend == "microvm" else 0)
        driver.kill()
        driver.wait()
        assert wait_until(lambda: host_pids_with(marker) == []), f"survivors: {host_pids_with(marker)}"
        assert wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in vmms)), f"qemu survived: {vmms}"
        size = ticks.stat().st_size
        time.sleep(1)  # ten ticks, had anything survived
        assert ticks.stat().st_size == size
    finally:
        driver.kill()
        for pid in host_pids_with(marker) + vmm_pids(driver.pid):
            os.kill(pid, signal.SIGKILL)


def test_fork_bomb_is_contained_and_killed(runner, workspace):
    marker = unique_marker()
    limit = 50
    peak = {"count": 0}
    done = threading.Event()

    def watch():
        while not done.is_set():
            peak["count"] = max(peak["count"], len(host_pids_with(marker)))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        command = f": {marker}; bomb() {{ bomb | bomb & }}; bomb; sleep 2; echo after-the-bomb"
        result = runner.run(command, workspace=workspace, timeout_s=20, config={"limits": {"processes": limit}})
    finally:
        done.set()
        watcher.join()
    assert "Resource temporarily unavailable" in result.output  # the limit was reached...
    assert peak["count"] <= limit  # ...and held
    assert host_pids_with(marker) == []  # and everything was killed when the command ended
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes


# -- Network and sockets -----------------------------------------------------------------------


@pytest.fixture
def tcp_listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _accepted_any(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def test_no_tcp_to_a_host_loopback_listener(runner, workspace, tcp_listener):
    port = tcp_listener.getsockname()[1]
    command = f"echo hi > /dev/tcp/127.0.0.1/{port} && echo CONNECTED-devtcp; "
    if os.access(PY, os.X_OK):
        command += f"{PY} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('CONNECTED-py')\"; "
    command += 'awk -F: \'NR > 2 { gsub(/ /, "", $1); print "interface=" $1 }\' /proc/net/dev; echo end'
    result = runner.run(command, workspace=workspace)
    assert "CONNECTED" not in result.output
    assert "Connection refused" in result.output
    assert not _accepted_any(tcp_listener)
    interfaces = [line.split("=", 1)[1] for line in result.output.splitlines() if line.startswith("interface=")]
    assert interfaces == ["lo"]  # the sandbox's own loopback, nothing else


def test_no_dns_resolution(runner, workspace):
    command = "getent hosts example.com && echo RESOLVED; "
    if os.access(PY, os.X_OK):
        command += f"{PY} -c \"import socket; socket.getaddrinfo('example.com', 80); print('RESOLVED-py')\" 2>&1 | tail -1; "
    command += "echo end"
    result = runner.run(command, workspace=workspace, timeout_s=120)
    assert "RESOLVED" not in result.output
    assert result.output.rstrip().endswith("end")


@needs_python
def test_abstract_unix_socket_on_the_host_is_unreachable(runner, workspace):
    name = f"abhed-sbx-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(8)
    server.setblocking(False)
    try:
        code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0{name}'); print('CONNECTED')"
        result = runner.run(f'{PY} -c "{code}"; echo end', workspace=workspace)
        assert "CONNECTED" not in result.output
        assert "ConnectionRefusedError" in result.output
        assert not _accepted_any(server)
    finally:
        server.close()


@needs_python
def test_network_tests_detect_a_reachable_listener(root_runner, tcp_listener):
    """Control: with allow_network the same attempts succeed, so the tests above can see a leak."""
    workspace = root_runner.new_workspace()
    name = f"abhed-sbx-{uuid.uuid4().hex}"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind("\0" + name)
    unix.listen(8)
    try:
        port = tcp_listener.getsockname()[1]
        code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0{name}'); print('CONNECTED-unix')"
        command = f'echo hi > /dev/tcp/127.0.0.1/{port} && echo CONNECTED-tcp; {PY} -c "{code}"'
        result = root_runner.run(command, workspace=workspace, config={"allow_network": True})
        assert "CONNECTED-tcp" in result.output and "CONNECTED-unix" in result.output
    finally:
        unix.close()


def test_host_sockets_under_run_and_var_are_not_visible(runner, workspace):
    result = runner.run("ls /run /var/run /var /sys 2>&1; test -S /run/docker.sock || echo no-docker; echo end", workspace=workspace)
    assert "no-docker" in result.output
    for path in ("/run", "/var/run", "/var", "/sys"):
        assert f"ls: cannot access '{path}': No such file or directory" in result.output


# -- Terminal injection ------------------------------------------------------------------------


@needs_python
def test_tiocsti_and_tioclinux_are_refused(runner, workspace):
    script = (
        "import ctypes, errno, fcntl, os\n"
        "fd = os.open('/dev/null', os.O_RDWR)\n"
        "for name, req in (('TIOCSTI', 0x5412), ('TIOCLINUX', 0x541C), ('TIOCGWINSZ', 0x5413)):\n"
        "    try:\n"
        "        fcntl.ioctl(fd, req, b'x' * 8)\n"
        "    except OSError as e:\n"
        "        print(name, errno.errorcode[e.errno])\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "nr = {'x86_64': 16, 'aarch64': 29, 'riscv64': 29}[os.uname().machine]\n"
        "rc = libc.syscall(nr, fd, ctypes.c_ulong(0xDEAD00005412), ctypes.c_char_p(b'x'))\n"
        "print('TIOCSTI-high-bits', rc, errno.errorcode.get(ctypes.get_errno()))\n"
        "try:\n"
        "    os.open('/dev/tty', os.O_RDWR)\n"
        "    print('TTY-OPENED')\n"
        "except OSError as e:\n"
        "    print('tty', errno.errorcode[e.errno])\n"
    )
    (workspace / "tiocsti.py").write_text(script)
    chown_to(workspace / "tiocsti.py", runner)
    result = runner.run(f"{PY} tiocsti.py", workspace=workspace)
    assert "TIOCSTI EPERM" in result.output  # the seccomp filter, not "not a tty"
    assert "TIOCLINUX EPERM" in result.output
    assert "TIOCGWINSZ ENOTTY" in result.output  # other ioctls are untouched
    assert "TIOCSTI-high-bits -1 EPERM" in result.output  # the kernel's cmd is 32-bit; so is the check
    assert "tty ENXIO" in result.output and "TTY-OPENED" not in result.output  # no controlling terminal


@needs_python
def test_tiocsti_cannot_type_into_the_callers_terminal(runner, workspace):
    """The process that runs the sandbox has a real terminal; the command must not inject into it."""
    (workspace / "inject.py").write_text(
        "import fcntl, os, termios\n"
        "for path in ['/dev/tty'] + ['/proc/self/fd/%d' % i for i in range(3)]:\n"
        "    try:\n"
        "        fd = os.open(path, os.O_RDWR | os.O_NOCTTY)\n"
        "        for ch in b'INJECTED\\n':\n"
        "            fcntl.ioctl(fd, termios.TIOCSTI, bytes([ch]))\n"
        "        print('injected via', path)\n"
        "    except OSError as e:\n"
        "        print(path, e.strerror)\n"
    )
    chown_to(workspace / "inject.py", runner)
    code = f"""
import fcntl, os, select, termios
master, slave = os.openpty()
pid = os.fork()
if pid == 0:
    os.close(master)
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    try:  # the caller may type into its own terminal: proves we can see injection
        for ch in b'CONTROL\\n':
            fcntl.ioctl(0, termios.TIOCSTI, bytes([ch]))
    except OSError:
        pass  # TIOCSTI disabled host-wide (dev.tty.legacy_tiocsti=0)
    cfg = config_from({{}})
    with sandbox.Sandbox(cfg, {str(workspace)!r}) as sb:
        r = sb.run('{PY} inject.py', cwd={str(workspace)!r}, timeout_s=60)
    with open({str(workspace / "child.out")!r}, 'w') as f:
        f.write(r.output)
    os._exit(0)
os.close(slave)
seen = b''
while True:
    ready, _, _ = select.select([master], [], [], 120)
    if not ready:
        break
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
os.waitpid(pid, 0)
answer = {{'terminal': seen.decode('latin-1'), 'child': open({str(workspace / "child.out")!r}).read()}}
"""
    answer = runner.exec(code)
    assert "injected via" not in answer["child"], answer["child"]
    # Control: typing into one's own terminal works (for non-root only while the host keeps
    # dev.tty.legacy_tiocsti=1), which shows this test would see an injection...
    legacy = Path("/proc/sys/dev/tty/legacy_tiocsti")
    if runner.uid == 0 or not legacy.exists() or legacy.read_text().strip() != "0":
        assert "CONTROL" in answer["terminal"]
    assert "INJECTED" not in answer["terminal"]  # ...and the sandboxed one never reached the terminal


# -- Protected paths in the workspace ----------------------------------------------------------


def make_repo(workspace: Path, runner) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workspace), "GIT_CONFIG_NOSYSTEM": "1"}
    git = ["git", "-C", str(workspace), "-c", "safe.directory=*", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True, env=env)
    (workspace / "README").write_text("hello\n")
    subprocess.run([*git, "add", "README"], check=True, env=env)
    subprocess.run([*git, "commit", "-qm", "init"], check=True, env=env)
    chown_to(workspace, runner)


ATTACKS_ON_GIT = [
    "echo 'echo pwned' > .git/hooks/pre-commit",
    "printf '[core]\\n\\thooksPath = /tmp\\n' >> .git/config",
    "git config core.fsmonitor 'echo pwned'",
    "rm -f .git/config",
    "mv .git/config .git/config.old",
    "rm -rf .git/hooks",
    "mv .git/hooks .git/hooks.old",
    "mv .git .git.old && mkdir .git",
    "mkdir -p .git/modules/x/hooks && echo pwned > .git/modules/x/hooks/post-checkout",
    "ln -sf /tmp/evil .git/hooks/pre-commit",
    "chmod 777 .git/hooks",
    "umount .git/hooks",
]


@needs_git
def test_existing_git_hooks_and_config_cannot_be_changed(runner, workspace):
    make_repo(workspace, runner)
    config_before = (workspace / ".git" / "config").read_text()
    hooks_before = sorted(p.name for p in (workspace / ".git" / "hooks").iterdir())
    command = "; ".join(f"{attack} && echo 'SUCCEEDED: {attack}'" for attack in ATTACKS_ON_GIT)
    result = runner.run(command + "; echo end", workspace=workspace)
    assert "SUCCEEDED" not in result.output, result.output
    assert (workspace / ".git" / "config").read_text() == config_before
    assert sorted(p.name for p in (workspace / ".git" / "hooks").iterdir()) == hooks_before
    assert not (workspace / ".git" / "modules" / "x").exists()
    assert not (workspace / ".git.old").exists()


@needs_git
def test_git_still_works_under_the_protection(runner, workspace):
    make_repo(workspace, runner)
    command = "echo more >> README && git add README && git -c user.name=m -c user.email=m@x commit -qm change && git log --oneline | wc -l && git status --short | wc -l"
    result = runner.run(command, workspace=workspace)
    assert result.exit_code == 0, result.output
    assert result.output.split() == ["2", "0"]


@needs_git
def test_missing_git_dir_and_abhed_dir_cannot_be_created(runner, workspace):
    attacks = [
        "git init -q .",
        "mkdir -p .git/hooks && echo pwned > .git/hooks/pre-commit",
        "echo '[core]' > .git/config",
        "mkdir -p .abhed && echo 'allow = [\"*\"]' > .abhed/config.toml",
        "rmdir .git && mkdir .git && echo pwned > .git/config",
    ]
    command = "; ".join(f"{attack} && echo 'SUCCEEDED: {attack}'" for attack in attacks)
    for _ in range(2):  # a second run must not find more to write into than the first
        result = runner.run(command + "; echo end", workspace=workspace)
        assert "SUCCEEDED" not in result.output, result.output
        assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
        assert not (workspace / ".git" / "config").exists()
        assert not (workspace / ".abhed" / "config.toml").exists()
    # What the protection leaves behind on the host: empty mount-point directories, and at the
    # root the .git file that stops host git (sandbox.protect.place_gitfile).
    assert (workspace / ".git").read_text() == PLACEHOLDER_GITFILE
    assert [p for p in workspace.rglob("*") if p.name != ".git" and (not p.is_dir() or any(p.iterdir()))] == []


@needs_git
def test_missing_hooks_and_config_inside_an_existing_git_dir_cannot_be_created(runner, workspace):
    make_repo(workspace, runner)
    shutil.rmtree(workspace / ".git" / "hooks")
    config_text = (workspace / ".git" / "config").read_text()
    (workspace / ".git" / "config").unlink()
    attacks = [
        "mkdir .git/hooks",
        "mkdir -p .git/hooks && echo pwned > .git/hooks/pre-commit",
        "echo '[core]' > .git/config",
        "mkdir -p .git/modules/x",
    ]
    command = "; ".join(f"{attack} && echo 'SUCCEEDED: {attack}'" for attack in attacks)
    result = runner.run(command + "; echo end", workspace=workspace)
    assert "SUCCEEDED" not in result.output, result.output
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    config = workspace / ".git" / "config"
    assert not config.exists() or config.read_text() == ""
    assert config_text  # the repo had a config before we removed it


def test_a_git_worktree_file_cannot_be_redirected(runner, workspace):
    gitfile = workspace / ".git"
    gitfile.write_text("gitdir: /somewhere/else/.git/worktrees/x\n")
    chown_to(gitfile, runner)
    result = runner.run(
        "echo 'gitdir: evil' > .git && echo SUCCEEDED; rm -f .git && echo SUCCEEDED; mv .git x && echo SUCCEEDED; echo end",
        workspace=workspace,
    )
    assert "SUCCEEDED" not in result.output
    assert gitfile.read_text() == "gitdir: /somewhere/else/.git/worktrees/x\n"


def test_a_symlink_on_a_protected_path_is_refused(runner, workspace):
    (workspace / "elsewhere").mkdir()
    (workspace / ".abhed").symlink_to("elsewhere")
    chown_to(workspace, runner)
    try:
        runner.run("echo should-not-run", workspace=workspace)
    except DriverError as exc:
        assert exc.error_type == "SandboxSetupError"
        message = exc.error
    except Exception as exc:
        assert type(exc).__name__ == "SandboxSetupError"
        message = str(exc)
    else:
        pytest.fail("a protected path through a symlink must stop the command")
    assert "protected path '.abhed/'" in message and "symlink" in message and "elsewhere" in message


# -- Privileged operations inside --------------------------------------------------------------


def test_no_mounts_sysctls_or_nested_namespaces(runner, workspace):
    before = Path("/proc/sys/fs/file-max").read_text()
    command = (
        "cat /proc/sys/fs/file-max > /proc/sys/fs/file-max && echo SUCCEEDED-sysctl; "
        "echo h > /proc/sysrq-trigger && echo SUCCEEDED-sysrq; "
        "mount -t tmpfs none /tmp && echo SUCCEEDED-mount; "
        "mount -o remount,rw /usr && echo SUCCEEDED-remount; "
        "umount /etc && echo SUCCEEDED-umount; "
        "unshare -U -r true && echo SUCCEEDED-userns; "
        "unshare -m true && echo SUCCEEDED-mountns; "
        "echo end"
    )
    result = runner.run(command, workspace=workspace)
    assert "SUCCEEDED" not in result.output, result.output
    assert Path("/proc/sys/fs/file-max").read_text() == before


# -- Set-uid/set-gid files and the kernel keyring (issue 12, item 4) ---------------------------

SETID_ATTEMPTS = """
import ctypes, errno, os, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
machine = os.uname().machine
FCHMODAT2 = 452
OPENAT2 = 437
IO_URING_SETUP = 425
KEYCTL, ADD_KEY, REQUEST_KEY = {'x86_64': (250, 248, 249), 'aarch64': (219, 217, 218), 'riscv64': (219, 217, 218)}[machine]
src = open('/usr/bin/id', 'rb').read()
def fresh(name):
    with open(name, 'wb') as f:
        f.write(src)
    os.chmod(name, 0o755)
    return name
def attempt(label, fn):
    try:
        rc = fn()
        print(label, 'rc', rc, errno.errorcode.get(ctypes.get_errno()))
    except OSError as e:
        print(label, errno.errorcode.get(e.errno))
attempt('chmod', lambda: os.chmod(fresh('s-chmod'), 0o4755))
attempt('chmod-setgid', lambda: os.chmod(fresh('s-chmod-g'), 0o2755))
attempt('fchmod', lambda: os.fchmod(os.open(fresh('s-fchmod'), os.O_RDONLY), 0o4755))
attempt('fchmodat', lambda: libc.fchmodat(-100, fresh('s-fchmodat').encode(), 0o6755, 0))
attempt('fchmodat2', lambda: libc.syscall(FCHMODAT2, -100, fresh('s-fchmodat2').encode(), 0o4755, 0))
attempt('open', lambda: os.open('s-open', os.O_CREAT | os.O_WRONLY, 0o4755))
attempt('openat', lambda: libc.syscall({'x86_64': 257, 'aarch64': 56, 'riscv64': 56}[machine], -100, b's-openat', 0o101, 0o6755))
if machine == 'x86_64':
    attempt('creat', lambda: libc.syscall(85, b's-creat', 0o4755))
    attempt('mknod', lambda: libc.syscall(133, b's-mknod', stat.S_IFREG | 0o4755, 0))
attempt('mknodat', lambda: os.mknod('s-mknodat', stat.S_IFREG | 0o6755))
how = ctypes.create_string_buffer(24)
ctypes.memmove(how, (0o101).to_bytes(8, 'little') + (0o4755).to_bytes(8, 'little'), 16)
attempt('openat2', lambda: libc.syscall(OPENAT2, -100, b's-openat2', how, 24))
params = ctypes.create_string_buffer(120)
attempt('io_uring_setup', lambda: libc.syscall(IO_URING_SETUP, 4, params))
attempt('keyctl-session', lambda: libc.syscall(KEYCTL, 0, ctypes.c_long(-3), 1))
attempt('add_key', lambda: libc.syscall(ADD_KEY, b'user', sys.argv[1].encode(), b'secret', 6, ctypes.c_long(-3)))
attempt('request_key', lambda: libc.syscall(REQUEST_KEY, b'user', sys.argv[1].encode(), None, ctypes.c_long(-3)))
os.system('cp -p s-chmod s-cp-p; install -m 4755 /usr/bin/id s-install; chmod u+s s-fchmod; chmod 6755 s-chmod-g; mkdir -m 2755 s-dir; chmod g+s s-dir; echo shell-done')
"""


def setid_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.lstat().st_mode & 0o6000)


@needs_python
def test_no_setuid_or_setgid_file_reaches_the_host(runner, workspace):
    """`cp /usr/bin/python3 x && chmod 4755 x` and every other way to set the bits, tried for real."""
    (workspace / "setid.py").write_text(SETID_ATTEMPTS)
    chown_to(workspace, runner)
    key = f"abhed-escape-{uuid.uuid4().hex[:8]}"
    result = runner.run(f"{PY} setid.py {key}", workspace=workspace)
    assert "shell-done" in result.output, result.output
    assert setid_files(workspace) == [], result.output  # judged on the host
    for label in ("chmod", "chmod-setgid", "fchmod", "fchmodat", "fchmodat2", "open", "openat", "mknodat"):
        assert f"{label} EPERM" in result.output or f"{label} rc -1 EPERM" in result.output, (label, result.output)
    if os.uname().machine == "x86_64":
        assert "creat rc -1 EPERM" in result.output and "mknod rc -1 EPERM" in result.output
    for label in ("openat2", "io_uring_setup", "keyctl-session", "add_key", "request_key"):
        assert f"{label} rc -1 ENOSYS" in result.output, (label, result.output)
    # The files themselves were created (only the bits were refused): the check is exact, not a blanket deny.
    assert (workspace / "s-chmod").exists() and (workspace / "s-dir").is_dir()
    assert key not in Path("/proc/keys").read_text()  # no key landed in any keyring we can see


# A key in the runner user's own user keyring on the host, added outside the sandbox (the driver
# runs as that user), and the host's /proc/keys and /proc/key-users as that user reads them there.
# The payload's random size makes the user's line in key-users (its bytes in keys) one of its own.
HOST_KEY = """
import ctypes, os, random
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY = {'x86_64': 248, 'aarch64': 217, 'riscv64': 217}[os.uname().machine]
payload = os.urandom(random.randrange(3000, 9000))
serial = libc.syscall(ADD_KEY, b'user', DESCRIPTION, payload, len(payload), ctypes.c_long(-4))  # the user keyring
if serial < 0:
    raise OSError(ctypes.get_errno(), 'add_key')
answer = [serial, open('/proc/keys').read(), open('/proc/key-users').read()]
"""
DROP_HOST_KEY = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
KEYCTL = {'x86_64': 250, 'aarch64': 219, 'riscv64': 219}[os.uname().machine]
answer = libc.syscall(KEYCTL, 21, SERIAL)  # KEYCTL_INVALIDATE
"""


def test_the_host_s_keyring_is_not_listed_in_proc(runner, workspace):
    """/proc/keys and /proc/key-users list the host's keys (the keyring is not namespaced); under
    microvm they are the guest kernel's own, which holds nothing of the host's."""
    description = f"abhed-host-key-{uuid.uuid4().hex[:8]}"
    serial, keys, key_users = runner.exec(HOST_KEY.replace("DESCRIPTION", repr(description.encode())))
    try:
        result = runner.run("cat /proc/keys; cat /proc/key-users; echo listed", workspace=workspace)
    finally:
        runner.exec(DROP_HOST_KEY.replace("SERIAL", str(serial)))
    assert description in keys and f"{serial:08x}" in keys  # on the host, the user sees its key
    mine = next(line.strip() for line in key_users.splitlines() if line.split(":")[0].strip() == str(runner.uid))
    assert "listed" in result.output, result.output
    assert description not in result.output and mine not in result.output, result.output
    host_serials = [line.split()[0] for line in keys.splitlines()]
    assert len(host_serials) >= 2 and not [s for s in host_serials if s in result.output], result.output


# -- Host git runs nothing the session wrote (issue 12, item 3) --------------------------------


def host_git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """git on the host as the operator would run it, trusting every directory (the worst case)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1", "GIT_PAGER": "cat"}
    return subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def marker(tmp_path) -> Path:
    """A file only the payload creates, in a host directory the sandbox cannot see."""
    path = tmp_path / f"pwned-{uuid.uuid4().hex[:8]}"
    tmp_path.chmod(0o777)  # host git as root writes it; an unprivileged operator could too
    yield path


def payload(marker: Path) -> str:
    return f"touch {marker}; false"


@needs_git
def test_git_init_of_a_nested_repo_with_fsmonitor_runs_nothing_on_the_host(runner, workspace, marker):
    make_repo(workspace, runner)
    command = (
        f"git init -q sub && git -C sub config core.fsmonitor '{payload(marker)}' && "
        f"git -C sub config core.hooksPath /tmp && echo made; "
        f"mkdir -p deep/er && cd deep/er && git init -q --bare b.git && git -C b.git config core.fsmonitor '{payload(marker)}'; echo end"
    )
    result = runner.run(command, workspace=workspace)
    assert "made" in result.output and "end" in result.output, result.output
    for where in (workspace / "sub", workspace / "deep" / "er" / "b.git", workspace / "deep" / "er", workspace):
        for args in (("status",), ("log", "-1"), ("diff",)):
            host_git(where, *args)
    assert not marker.exists()
    notes = "\n".join(result.notes)
    assert f"{workspace}/sub/.git was renamed to {workspace}/sub/.git.abhed-quarantined-" in notes, notes
    assert f"{workspace}/deep/er/b.git/HEAD was renamed" in notes, notes


@needs_git
def test_a_git_file_pointing_at_a_hostile_gitdir_runs_nothing_on_the_host(runner, workspace, marker):
    command = (
        f"git init -q --bare evil && git -C evil config core.fsmonitor '{payload(marker)}' && "
        "mkdir -p sub && echo \"gitdir: $PWD/evil\" > sub/.git && mkdir -p lnk && ln -s ../evil lnk/.git && echo made"
    )
    result = runner.run(command, workspace=workspace)
    assert "made" in result.output, result.output
    for where in (workspace / "sub", workspace / "lnk", workspace / "evil"):
        host_git(where, "status")
    assert not marker.exists()
    assert not (workspace / "sub" / ".git").exists() and not os.path.lexists(workspace / "lnk" / ".git")


@needs_git
def test_commondir_pointing_at_a_copied_repo_runs_nothing_on_the_host(runner, workspace, marker):
    make_repo(workspace, runner)
    command = (
        f"cp -r .git copy && git --git-dir=copy config core.fsmonitor '{payload(marker)}' && "
        "echo \"$PWD/copy\" > .git/commondir && echo made; "
        "mkdir -p .git/worktrees/w && echo ../.. > .git/worktrees/w/commondir && echo ref: refs/heads/master > .git/worktrees/w/HEAD; echo end"
    )
    result = runner.run(command, workspace=workspace)
    assert "made" in result.output, result.output
    for where in (workspace, workspace / "copy", workspace / ".git" / "worktrees" / "w"):
        host_git(where, "status")
    assert not marker.exists()
    assert not (workspace / ".git" / "commondir").exists()
    assert host_git(workspace, "log", "--oneline").stdout.count("\n") == 1  # the operator's repo still works


@needs_git
def test_an_existing_nested_repo_and_git_info_stay_protected(runner, workspace, marker):
    make_repo(workspace, runner)
    nested = workspace / "vendor" / "lib"
    nested.mkdir(parents=True)
    make_repo(nested, runner)
    config = (nested / ".git" / "config").read_text()
    attacks = [
        f"git -C vendor/lib config core.fsmonitor '{payload(marker)}'",
        "echo 'echo pwned' > vendor/lib/.git/hooks/post-checkout",
        "echo '* filter=evil' > vendor/lib/.git/info/attributes",
        "echo '* filter=evil' > .git/info/attributes",
        "mv vendor/lib/.git vendor/lib/old",
        "echo ../../../copy > vendor/lib/.git/commondir",
    ]
    command = "; ".join(f"{attack} && echo 'SUCCEEDED: {attack}'" for attack in attacks)
    result = runner.run(command + "; echo end", workspace=workspace)
    assert "SUCCEEDED" not in "\n".join(line for line in result.output.splitlines() if "commondir" not in line), result.output
    assert (nested / ".git" / "config").read_text() == config
    assert not (nested / ".git" / "hooks" / "post-checkout").exists()
    assert not (workspace / ".git" / "info" / "attributes").exists()
    assert not (nested / ".git" / "commondir").exists()  # written, then quarantined
    host_git(nested, "status")
    host_git(workspace, "status")
    assert not marker.exists()
    assert host_git(nested, "log", "--oneline").returncode == 0  # the nested repo is intact


@needs_git
def test_a_repo_created_by_a_background_job_is_quarantined_at_close(root_runner, marker):
    workspace = root_runner.new_workspace()
    box = sandbox.Sandbox(sandbox.SandboxConfig(), workspace)
    try:
        log = workspace.parent / f"{workspace.name}.log"
        box.start_background(
            f"sleep 0.3; git init -q later && git -C later config core.fsmonitor '{payload(marker)}'; sleep 100",
            cwd=workspace,
            log_path=log,
        )
        assert wait_until(lambda: (workspace / "later" / ".git" / "config").exists() and "fsmonitor" in (workspace / "later" / ".git" / "config").read_text())
    finally:
        notes = box.close()
    host_git(workspace / "later", "status")
    assert not marker.exists()
    assert any("later/.git was renamed" in n for n in notes), notes


# -- Host git and symlinked shapes (issue 30, finding 1) -------------------------------------------

# Built by a sandboxed `python3 mk.py`: in sub/ and at the workspace root, a bare-repository shape
# whose objects and refs are symlinks to real directories (git's access() follows them), a valid
# HEAD, and a config whose pager (and fsmonitor) writes a marker; pager.status makes even
# `git status` start the pager on a terminal (before it finds there is no work tree).
MAKE_SYMLINKED_SHAPES = """
import os, sys
marker = sys.argv[1]
config = ('[core]\\n\\tfsmonitor = "touch %s-fsmonitor; false"\\n\\tpager = "touch %s-pager; cat"\\n'
          '[pager]\\n\\tstatus = true\\n\\tlog = true\\n' % (marker, marker))
os.makedirs("store/refs/heads", exist_ok=True)
for where, up in (("sub", "../"), (".", "")):
    os.makedirs(where, exist_ok=True)
    os.symlink("/usr/share", os.path.join(where, "objects"))  # a real directory outside the workspace
    os.symlink(up + "store/refs", os.path.join(where, "refs"))  # and one inside it
    with open(os.path.join(where, "HEAD"), "w") as f:
        f.write("ref: refs/heads/main\\n")
    with open(os.path.join(where, "config"), "w") as f:
        f.write(config)
print("made")
"""


def host_git_on_a_pty(cwd: Path, *args: str) -> str:
    """git on the host as an operator types it, on a terminal (so its pager runs), trusting every directory."""
    primary, secondary = os.openpty()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1", "TERM": "xterm"}
    try:
        subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env, stdin=secondary, stdout=secondary,
                       stderr=secondary, timeout=60)
        return os.read(primary, 65536).decode(errors="replace")
    finally:
        os.close(secondary)
        os.close(primary)


def build_shapes_then_run_host_git(runner, workspace: Path, marker: Path) -> tuple:
    """Run mk.py sandboxed in ``workspace``, then git status and log on a pty in sub/ and at the root;
    no payload may have run (judged by its markers). The result, and what git said each time."""
    (workspace / "mk.py").write_text(MAKE_SYMLINKED_SHAPES)
    chown_to(workspace, runner)
    result = runner.run(f"{PY} mk.py {marker}", workspace=workspace)
    assert "made" in result.output, result.output
    said = [host_git_on_a_pty(where, *args) for where in (workspace / "sub", workspace) for args in (("status",), ("log", "-1"))]
    assert not [m for m in (f"{marker}-fsmonitor", f"{marker}-pager") if os.path.exists(m)], said
    return result, said


@needs_git
@needs_python
def test_symlinked_bare_shapes_the_sandbox_builds_run_nothing_on_the_host(runner, tmp_path, marker):
    """Positive control first: the same script run on the host (no sandbox) makes host git run the
    payload. Then sandboxed, in a workspace that is no repository: no marker, from git in sub/ or
    at the root, on a terminal."""
    control = tmp_path / "control"
    control.mkdir()
    (control / "mk.py").write_text(MAKE_SYMLINKED_SHAPES)
    subprocess.run([PY, "mk.py", f"{marker}-control"], cwd=control, check=True, capture_output=True)
    host_git_on_a_pty(control / "sub", "status")
    assert Path(f"{marker}-control-pager").exists(), "the shape did not make host git run its pager: the test proves nothing"
    workspace = runner.new_workspace()
    result, said = build_shapes_then_run_host_git(runner, workspace, marker)
    notes = "\n".join(result.notes)
    assert f"{workspace}/sub/HEAD was renamed to {workspace}/sub/HEAD.abhed-quarantined-" in notes, notes
    assert f"{workspace}/HEAD was renamed to {workspace}/HEAD.abhed-quarantined-" in notes, notes
    assert (workspace / ".git").read_text() == PLACEHOLDER_GITFILE  # and git stops there first
    assert "fatal: not a git repository: /dev/null/not-a-repository" in said[-1], said


@needs_git
@needs_python
def test_symlinked_bare_shapes_in_a_workspace_inside_a_repository_run_nothing_either(runner, marker):
    """Where a repository encloses the workspace, git must still reach it, so no gitfile stops it at
    the root: the guard alone takes the root's HEAD, and git goes on to the operator's repository."""
    outer = runner.new_workspace()
    make_repo(outer, runner)
    workspace = outer / "ws"
    workspace.mkdir()
    result, said = build_shapes_then_run_host_git(runner, workspace, marker)
    assert (workspace / ".git").is_dir() and not any((workspace / ".git").iterdir())  # the mount point, as before
    assert "init" in said[-1], said  # git at the root found the operator's repository (its commit "init")
    notes = "\n".join(result.notes)
    assert f"{workspace}/HEAD was renamed" in notes and f"{workspace}/sub/HEAD was renamed" in notes, notes


# -- Every channel to Abhed is bounded (issue 12, item 6) ---------------------------------------

FLOOD = """
import resource
cfg = config_from({})
with sandbox.Sandbox(cfg, WORKSPACE) as sb:
    sb.run('true', cwd=WORKSPACE, timeout_s=60)  # warm up: what a normal command costs
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = sb.run('head -c 1500M /dev/zero >&200; head -c 300M /dev/zero; echo done', cwd=WORKSPACE, timeout_s=600,
               output_limit_chars=30000)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
answer = {'before_kib': before, 'after_kib': after, 'notes': list(r.notes), 'exit_code': r.exit_code,
          'tail': r.tail[-20:], 'omitted': r.omitted_chars}
"""


@pytest.mark.slow
def test_flooding_the_control_pipe_and_the_output_does_not_grow_abhed(runner, workspace):
    answer = runner.exec(FLOOD.replace("WORKSPACE", repr(str(workspace))), timeout_s=900)
    grown_mib = (answer["after_kib"] - answer["before_kib"]) / 1024
    assert grown_mib < 64, answer  # 1.8 GB went through; the process's peak barely moved
    assert answer["exit_code"] == 0 and answer["tail"].endswith("done\n"), answer
    assert answer["omitted"] > 300 * 1024**2 - 30000  # the output flood was dropped too, and counted
    dropped = [n for n in answer["notes"] if "bytes into the sandbox's control pipe (fd 200); they were dropped" in n]
    assert dropped and int(dropped[0].split("wrote ")[1].split()[0]) > 1500 * 1024**2 - 9000, answer


# -- Limits: memory, disk, and rlimits the command cannot raise (issue 12, items 7 and 9) --------

MiB = 1024**2


def test_rlimits_are_hard_limits_the_command_cannot_raise(runner, workspace):
    limits = {"file_size_bytes": 1 * MiB, "open_files": 300}
    command = (
        "ulimit -H -f unlimited && echo RAISED-hard; ulimit -S -n 4096 && echo RAISED-nofile; "
        "ulimit -S -f unlimited; echo soft=$(ulimit -S -f) hard=$(ulimit -H -f); "
        "head -c 3M /dev/zero > big; echo end"
    )
    result = runner.run(command, workspace=workspace, config={"limits": limits})
    assert "RAISED" not in result.output, result.output
    assert "soft=1024 hard=1024" in result.output  # bash counts in 1024-byte blocks
    assert (workspace / "big").stat().st_size == 1 * MiB  # judged on the host: the file stopped at the limit


@needs_python
def test_memory_cap_stops_a_big_allocation(runner, workspace):
    grab = f"{PY} -c 'b = bytearray(400 * 1024 * 1024); print(\"ALLOC\" + \"ATED\", len(b))'"
    result = runner.run(f"{grab}; echo rc=$?", workspace=workspace, config={"limits": {"memory_bytes": 128 * MiB}})
    assert "ALLOCATED" not in result.output, result.output
    assert "rc=137" in result.output or "MemoryError" in result.output, result.output
    if "rc=137" in result.output:  # a memory cgroup enforced it: the observation says so
        assert any("reached its memory limit of 134217728 bytes (limits.memory_bytes)" in n for n in result.notes), result.notes


def memory_controller_mounted() -> bool:
    """A cgroup v1 memory hierarchy, or a v2 one offering the memory controller, is mounted."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype, options = right.split()[0], right.split()[2].split(",")
        mount_point = left.split()[4]
        if fstype == "cgroup" and "memory" in options:
            return True
        if fstype == "cgroup2" and "memory" in Path(mount_point, "cgroup.controllers").read_text().split():
            return True
    return False


@needs_python
def test_memory_cap_counts_every_process_of_the_command_under_a_cgroup(root_runner):
    workspace = root_runner.new_workspace()
    box = sandbox.Sandbox(sandbox.SandboxConfig(limits=sandbox.Limits(memory_bytes=128 * MiB)), workspace)
    with box:
        if not any("memory" in p.controllers for p in box._launcher.cgroup_parents):
            assert not memory_controller_mounted(), "as root with a memory controller mounted, a memory cgroup must be used"
            pytest.skip("no memory cgroup on this host: the cap is RLIMIT_DATA, per process (documented)")
        grab = f"{PY} -c 'import time; b = bytearray(60 * 1024 * 1024); time.sleep(2); print(\"HE\" + \"LD\")'"
        result = box.run(f"{grab} & {grab} & {grab} & wait", cwd=workspace, timeout_s=120)
    assert result.output.count("HELD") < 3, result.output
    assert any("killed" in n and "limits.memory_bytes" in n for n in result.notes), result.notes
    assert any("memory limit: 134217728 bytes per command (memory cgroup" in line for line in box.describe())


@pytest.fixture
def small_fs(runner):
    """A 64 MiB filesystem holding the runner's workspace (mounting needs host root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem for the workspace needs root")
    workspace = runner.new_workspace()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", str(workspace)], check=True)
    try:
        os.chown(workspace, runner.uid, runner.gid)
        yield workspace
    finally:
        subprocess.run(["umount", "-l", str(workspace)], check=False)


def test_a_command_filling_the_disk_is_stopped_at_the_reserve(runner, small_fs):
    # Named as the embedding application names it (Abhed: sandbox.disk_reserve_bytes).
    config = {"limits": {"disk_reserve_bytes": 32 * MiB, "setting_names": [["disk_reserve_bytes", "op.reserve"]]}}
    command = "for i in $(seq 60); do head -c 1M /dev/zero > f$i; sleep 0.02; done; echo FINISHED"
    result = runner.run(command, workspace=small_fs, config=config)
    assert "FINISHED" not in result.output, result.output
    assert result.exit_code == 137
    free = os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize
    assert free > 24 * MiB  # stopped within a few MiB of the reserve, far from full (judged on the host)
    note = "\n".join(result.notes)
    assert f"the command was stopped: the workspace's filesystem ({small_fs}) has " in note
    assert f"under the disk reserve of 32.0 MiB ({32 * MiB:,} bytes), set by op.reserve = {32 * MiB}. " in note
    assert "du -sh" in note and note.endswith("or lower op.reserve (0 turns the reserve off).")
    # Still below the reserve: the next command is refused before it runs, and says why.
    with pytest.raises(Exception) as err:
        runner.run("touch ran", workspace=small_fs, config=config)
    assert "DiskReserveReached" in (type(err.value).__name__ + getattr(err.value, "error_type", ""))
    refusal = getattr(err.value, "error", str(err.value))  # the message alone (a driver adds its trace)
    assert f"the command did not run: the workspace's filesystem ({small_fs}) has " in refusal
    assert refusal.endswith(f", set by op.reserve = {32 * MiB}. Free space on that filesystem, or lower op.reserve (0 "
                            "turns the reserve off).")
    assert "du -sh" not in refusal and refusal.count("did not run") == 1  # nothing ran: no output to delete
    assert not (small_fs / "ran").exists()


def test_a_background_job_filling_the_disk_is_stopped_at_the_reserve(root_runner):
    workspace = root_runner.new_workspace()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(workspace)], check=True)
    try:
        box = sandbox.Sandbox(sandbox.SandboxConfig(limits=sandbox.Limits(disk_reserve_bytes=32 * MiB)), workspace)
        with box:
            job = box.start_background(
                "for i in $(seq 60); do head -c 1M /dev/zero > f$i; sleep 0.05; done; echo FINISHED",
                cwd=workspace,
                log_path=workspace.parent / f"{workspace.name}.log",
            )
            assert wait_until(lambda: not job.poll().running, timeout_s=120)
            status = job.poll()
        assert status.stopped and status.exit_code is None
        assert f"background job {job.id} was stopped: the workspace's filesystem ({workspace}) has " in status.note
        assert os.statvfs(workspace).f_bavail * os.statvfs(workspace).f_frsize > 20 * MiB  # judged on the host
        assert "FINISHED" not in (workspace.parent / f"{workspace.name}.log").read_text()
        with sandbox.Sandbox(sandbox.SandboxConfig(limits=sandbox.Limits(disk_reserve_bytes=32 * MiB)), workspace) as box:
            with pytest.raises(sandbox.DiskReserveReached, match="the command did not run: the workspace's filesystem"):
                box.start_background("touch ran", cwd=workspace, log_path=workspace.parent / f"{workspace.name}-2.log")
        assert not (workspace / "ran").exists()
    finally:
        subprocess.run(["umount", "-l", str(workspace)], check=False)


def _host_commit(workspace: Path) -> subprocess.CompletedProcess:
    host_git(workspace, "add", "-A")
    return host_git(workspace, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "host")


@needs_git
@pytest.mark.parametrize("hooks_path", [".husky", ".husky/_"])
def test_a_work_tree_hooks_path_stays_read_only(runner, workspace, marker, hooks_path):
    """core.hooksPath = .husky (husky 4-8; husky 9 sets .husky/_ whose stubs run .husky/<hook>): the
    hooks are work-tree files host git runs, so bash sees them read-only as it sees .git/hooks/
    (sandbox.gitexec). Judged by a host commit."""
    make_repo(workspace, runner)
    host_git(workspace, "config", "core.hooksPath", hooks_path)
    (workspace / ".husky" / "_").mkdir(parents=True)
    hook = workspace / ".husky" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    stub = workspace / ".husky" / "_" / "pre-commit"
    stub.write_text('#!/bin/sh\n. "$(dirname "$0")/../pre-commit"\n')
    for script in (hook, stub):
        script.chmod(0o755)
    chown_to(workspace, runner)
    attacks = [
        f"echo 'touch {marker}' >> .husky/pre-commit",
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > .husky/post-commit && chmod +x .husky/post-commit",
        "mv .husky .husky.old && mkdir .husky",
        "rm -f .husky/pre-commit",
    ]
    command = "; ".join(f"{attack} && echo 'SUCCEEDED: {attack}'" for attack in attacks)
    result = runner.run(command + "; echo end", workspace=workspace)
    assert "SUCCEEDED" not in result.output and "end" in result.output, result.output
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"
    assert "On branch" in runner.run("git status", workspace=workspace).output  # git still works inside
    (workspace / "new.txt").write_text("x\n")
    assert _host_commit(workspace).returncode == 0  # the operator's hook still runs, and passes
    assert not marker.exists()


@needs_git
def test_a_filter_driver_script_in_the_work_tree_stays_read_only(runner, workspace, marker):
    make_repo(workspace, runner)
    host_git(workspace, "config", "filter.x.clean", "./tools/clean.sh")
    (workspace / ".gitattributes").write_text("*.txt filter=x\n")
    (workspace / "tools").mkdir()
    (workspace / "tools" / "clean.sh").write_text("#!/bin/sh\ncat\n")
    (workspace / "tools" / "clean.sh").chmod(0o755)
    chown_to(workspace, runner)
    result = runner.run(f"echo 'touch {marker}' >> tools/clean.sh && echo SUCCEEDED; echo end", workspace=workspace)
    assert "SUCCEEDED" not in result.output and "end" in result.output, result.output
    (workspace / "new.txt").write_text("x\n")
    assert _host_commit(workspace).returncode == 0
    assert not marker.exists()


@needs_git
def test_a_hooks_path_the_operator_sets_mid_session_is_protected_from_the_next_command(root_runner, marker):
    """The configs are read again before every command (cached by their stat), not only at start."""
    from sbx_helpers import config_from

    workspace = root_runner.new_workspace()
    make_repo(workspace, root_runner)
    (workspace / "githooks").mkdir()
    with sandbox.Sandbox(config_from(root_runner.base_config), workspace) as sb:
        assert "written" in sb.run("echo x > githooks/pre-commit && echo written", cwd=workspace, timeout_s=60).output
        host_git(workspace, "config", "core.hooksPath", "githooks")
        result = sb.run(f"echo 'touch {marker}' >> githooks/pre-commit && echo SUCCEEDED; echo end", cwd=workspace, timeout_s=60)
    assert "SUCCEEDED" not in result.output and "end" in result.output, result.output
    assert (workspace / "githooks" / "pre-commit").read_text() == "x\n"


@needs_git
def test_config_worktree_of_a_sparse_checkout_repo_stays_read_only(runner, workspace, marker):
    """`git sparse-checkout init` sets extensions.worktreeConfig: git then reads .git/config.worktree,
    where core.fsmonitor runs on the next host `git status`. Every config git reads is protected."""
    make_repo(workspace, runner)
    host_git(workspace, "config", "extensions.worktreeConfig", "true")
    chown_to(workspace, runner)
    result = runner.run(f"printf '[core]\\n\\tfsmonitor = \"{payload(marker)}\"\\n' > .git/config.worktree && echo SUCCEEDED; "
                        "echo end", workspace=workspace)
    assert "SUCCEEDED" not in result.output and "end" in result.output, result.output
    (workspace / "README").write_text("changed\n")
    host_git(workspace, "status")
    assert not marker.exists()
