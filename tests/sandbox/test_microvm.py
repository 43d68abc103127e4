"""The microvm backend's own tests: its image check, its errors, its lifetime (kill -9), and the
semantics the bash tool relies on, in one VM shared by the module (sandbox.microvm.shared_vms).

The escape suite and the run/background semantics suites run over this backend too (the
``microvm`` variant of the ``runner`` fixture, conftest.py). Under CI a missing image or qemu
fails these tests instead of skipping them (conftest.require_microvm).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, require_microvm
from sbx_helpers import vmm_pids, wait_until

import sandbox
import sandbox.shell
from sandbox import microvm


def _image_copy(tmp_path: Path) -> Path:
    require_microvm()
    source = microvm.find_image_dir(sandbox.MicrovmConfig(), os.environ)
    copy = tmp_path / "image"
    shutil.copytree(source, copy)
    return copy


# -- the image and the configuration (no VM boots) ---------------------------------------------


def test_an_image_that_does_not_match_its_manifest_is_refused(tmp_path):
    image = _image_copy(tmp_path)
    with open(image / "initramfs.img", "ab") as f:
        f.write(b"tampered")
    with pytest.raises(sandbox.BackendUnavailable) as err:
        microvm.load_image(image)
    message = str(err.value)
    assert f"microvm image {image} is unusable: initramfs.img does not match manifest.json (sha256 " in message
    assert "Rebuild it with scripts/build-microvm, or reinstall it from the signed bundle." in message


def test_a_missing_kernel_is_refused(tmp_path):
    image = _image_copy(tmp_path)
    (image / "vmlinux").unlink()
    with pytest.raises(sandbox.BackendUnavailable, match=r"vmlinux is missing\. Rebuild it with scripts/build-microvm"):
        microvm.load_image(image)


def test_an_image_of_another_agent_protocol_is_refused(tmp_path):
    image = _image_copy(tmp_path)
    manifest = json.loads((image / "manifest.json").read_text())
    manifest["agent_protocol"] = 999
    (image / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(sandbox.BackendUnavailable) as err:
        microvm.load_image(image)
    assert f"holds guest agent protocol 999, this Abhed speaks {microvm.vm_agent.PROTOCOL}" in str(err.value)
    assert "Rebuild the image with scripts/build-microvm" in str(err.value)


def test_a_missing_vmm_is_named_with_the_package_to_install(tmp_path):
    config = sandbox.MicrovmConfig(vmm_path=tmp_path / "qemu-system-x86_64")
    problems, _facts = microvm.host_report(config)
    assert any(f"no qemu-system-x86_64 at {tmp_path / 'qemu-system-x86_64'}" in p and "apt-get install qemu-system-x86" in p
               for p in problems), problems


def test_host_report_names_the_vmm_kvm_and_the_checked_image():
    require_microvm()
    problems, facts = microvm.host_report(sandbox.MicrovmConfig())
    assert problems == []
    assert any(f.startswith("VMM /") for f in facts)
    assert any(f.startswith("KVM") for f in facts)
    assert any("matches its manifest" in f for f in facts)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"memory_mib": 64}, "microvm.memory_mib must be an integer of at least 128, got 64."),
        ({"vcpus": 0}, "microvm.vcpus must be an integer of at least 1, got 0."),
        ({"accel": "xen"}, "microvm.accel must be 'auto', 'kvm' or 'tcg'; got 'xen'."),
        ({"boot": "never"}, "microvm.boot must be 'first-use' or 'session-start'; got 'never'."),
        ({"image_dir": "build/microvm"}, "microvm.image_dir must be an absolute path, got 'build/microvm'."),
        ({"boot_timeout_s": 0}, "microvm.boot_timeout_s must be a positive number of seconds, got 0."),
        ({"rootfs": "usr.img"}, "microvm.rootfs must be an absolute path, got 'usr.img'."),
    ],
)
def test_bad_microvm_settings_are_refused(fields, message):
    with pytest.raises(sandbox.ConfigError) as err:
        sandbox.MicrovmConfig(**fields)
    assert str(err.value) == message


def test_a_comma_in_a_path_cannot_add_a_qemu_option(tmp_path):
    image = microvm.Image(tmp_path / "image", "6.1", microvm.vm_agent.PROTOCOL)
    share = microvm.Share("ws", tmp_path / "ws,readonly=off", "/ws", True)
    spec = microvm.VmSpec(image=image, memory_mib=256, vcpus=1, kvm=False, shares=(share,), links=(),
                          socket_path=tmp_path / "a,b" / "control.sock", console_path=tmp_path / "console.log",
                          network=False, rootfs=tmp_path / "usr,readonly=off.img")
    argv = microvm.Qemu(Path("/usr/bin/qemu-system-x86_64")).argv(spec)
    assert f"local,id=ws,path={tmp_path}/ws,,readonly=off,security_model=none,multidevs=remap,readonly=on" in argv
    assert f"socket,id=abhed,path={tmp_path}/a,,b/control.sock" in argv
    assert f"file={tmp_path}/usr,,readonly=off.img,if=none,id=rootfs,format=raw,readonly=on" in argv


def test_the_etc_copy_keeps_only_what_everyone_may_read(tmp_path):
    source = tmp_path / "etc"
    (source / "ssl" / "private").mkdir(parents=True)
    (source / "hostname").write_text("box\n")
    (source / "shadow").write_text("root:secret\n")
    (source / "shadow").chmod(0o640)
    (source / "ssl" / "private").chmod(0o700)
    (source / "extra").write_text("hidden by the operator\n")
    (source / "localtime").symlink_to("/usr/share/zoneinfo/UTC")
    target = tmp_path / "copy"
    microvm.copy_world_readable_etc(target, {str(source / "extra")}, source)
    assert (target / "hostname").read_text() == "box\n"
    for placeholder in ("shadow", "extra"):
        assert (target / placeholder).stat().st_size == 0 and (target / placeholder).stat().st_mode & 0o777 == 0
    assert (target / "ssl" / "private").stat().st_mode & 0o777 == 0 and list((target / "ssl" / "private").iterdir()) == []
    assert os.readlink(target / "localtime") == "/usr/share/zoneinfo/UTC"


def test_a_nested_pool_leaves_the_outer_one_serving(tmp_path):
    """A test module's shared_vms inside the session's: when it ends, the session's still serves
    (it once dropped every pool, and each later test booted a VM of its own)."""
    require_microvm()
    outer_root, inner_root = tmp_path / "outer", tmp_path / "inner"
    before = list(microvm._pools)  # in a whole run, the session's own pool (tests/sandbox/conftest.py) is there
    for path in (outer_root / "ws", inner_root / "ws"):
        path.mkdir(parents=True)
    with microvm.shared_vms(outer_root) as outer:
        with microvm.shared_vms(inner_root) as inner:
            for root, pool in ((outer_root, outer), (inner_root, inner)):
                with sandbox.Sandbox(sandbox.SandboxConfig(backend="microvm"), root / "ws") as box:
                    assert box._launcher._pool is pool
        with sandbox.Sandbox(sandbox.SandboxConfig(backend="microvm"), outer_root / "ws") as box:
            assert box._launcher._pool is outer
    assert microvm._pools == before


# -- one shared VM: what the bash tool relies on ------------------------------------------------


@pytest.fixture(scope="module")
def vm_base(tmp_path_factory):
    require_microvm()
    base = tmp_path_factory.mktemp("microvm-semantics")
    with microvm.shared_vms(base):
        yield base


@pytest.fixture
def box(vm_base, request):
    workspace = vm_base / request.node.name.replace("[", "-").replace("]", "")
    workspace.mkdir()
    with sandbox.Sandbox(sandbox.SandboxConfig(backend="microvm"), workspace) as sb:
        yield sb


@pytest.mark.slow
def test_fresh_shell_per_call_cwd_carried_exit_code(box):
    ws = box.workspace
    first = box.run("mkdir -p sub && cd sub && X=1 && echo in; exit 7", cwd=ws, timeout_s=300)
    assert (first.exit_code, first.output, first.final_cwd, first.backend) == (7, "in\n", ws / "sub", "microvm")
    second = box.run('pwd; echo "X=${X:-unset}"', cwd=first.final_cwd, timeout_s=300)
    assert second.output == f"{ws}/sub\nX=unset\n" and second.exit_code == 0


@pytest.mark.slow
def test_ten_megabytes_of_output_keep_head_and_tail_with_exact_counts(box):
    result = box.run("head -c 10000000 /dev/zero | tr '\\0' x; echo; echo END", cwd=box.workspace, timeout_s=600,
                     output_limit_chars=1000)
    assert result.head == "x" * 500
    assert result.tail.endswith("x\nEND\n") and len(result.tail) == 500
    assert result.omitted_chars == 10_000_005 - 1000 and result.omitted_lines == 0  # the last newline is in the tail


@pytest.mark.slow
def test_timeout_kills_everything_the_command_started(box):
    result = box.run("echo before; setsid sleep 1000 & sleep 1000", cwd=box.workspace, timeout_s=10)
    assert result.timed_out and result.exit_code is None and result.output == "before\n"
    after = box.run("ps -e -o comm= | grep -c sleep; true", cwd=box.workspace, timeout_s=300)
    assert after.output == "0\n"  # the next command sees nothing of the previous one's processes


@pytest.mark.slow
def test_background_job_has_a_handle_a_log_and_stops(box, tmp_path):
    log = tmp_path / "job.log"
    job = box.start_background("echo started; exec sleep 1000", cwd=box.workspace, log_path=log)
    assert job.id == "job-1" and job.backend == "microvm" and job.sandboxed
    assert wait_until(lambda: log.read_text() == "started\n", timeout_s=300)
    assert job.poll().running
    status = job.stop()
    assert status.stopped and not status.running and status.exit_code is None
    done = box.start_background("echo done; exit 3", cwd=box.workspace, log_path=tmp_path / "done.log")
    assert wait_until(lambda: not done.poll().running, timeout_s=300)
    assert done.poll().exit_code == 3 and (tmp_path / "done.log").read_text() == "done\n"


@pytest.mark.slow
def test_the_protected_paths_hold_and_the_host_sees_no_change(vm_base):
    ws = vm_base / "protected"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)  # before the session: the operator's repository
    config_before = (ws / ".git" / "config").read_bytes()
    with sandbox.Sandbox(sandbox.SandboxConfig(backend="microvm"), ws) as box:
        result = box.run(
            "echo '[core] fsmonitor = evil' >> .git/config; echo evil > .git/hooks/pre-commit; "
            "mv .git gone; rm -rf .git/hooks; echo end", cwd=ws, timeout_s=300,
        )
    assert result.output.rstrip().endswith("end")
    assert "Read-only file system" in result.output
    assert (ws / ".git" / "config").read_bytes() == config_before
    assert not (ws / ".git" / "hooks" / "pre-commit").exists() and not (ws / "gone").exists()


# -- the operator's root filesystem image ([sandbox.microvm] rootfs) -----------------------------


def _usr_image(tmp_path: Path) -> Path:
    """An ext4 image of a tiny /usr: bash, the libraries it loads, and a marker file."""
    mkfs = shutil.which("mkfs.ext4", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if mkfs is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mkfs.ext4 is missing (scripts/setup-test-deps installs e2fsprogs)")
        pytest.skip("needs mkfs.ext4 (e2fsprogs) to build the image")
    root = tmp_path / "usr-tree"

    def copy(host: str) -> None:  # at its path under /usr, symlinks kept with their targets
        path = os.path.join(os.path.realpath(os.path.dirname(host)), os.path.basename(host))
        dest = root / os.path.relpath(path, "/usr")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if os.path.islink(path):
            if not dest.is_symlink():
                dest.symlink_to(os.readlink(path))
            copy(os.path.join(os.path.dirname(path), os.readlink(path)))
        elif not dest.exists():
            shutil.copy2(path, dest)

    shell = os.path.realpath(sandbox.shell.find_shell().path)
    copy(shell)
    for line in subprocess.run(["ldd", shell], capture_output=True, text=True, check=True).stdout.splitlines():
        for library in [w for w in line.split() if w.startswith("/")][:1]:  # "libc.so.6 => /path (addr)"
            copy(library)
    (root / "share").mkdir(exist_ok=True)
    (root / "share" / "abhed-marker").write_text("from the operator's image\n")
    image = tmp_path / "usr.img"
    subprocess.run([mkfs, "-q", "-d", str(root), str(image), "16M"], check=True)
    return image


@pytest.mark.slow
def test_a_rootfs_image_is_the_commands_usr_read_only_and_the_hosts_is_gone(vm_base, tmp_path):
    image = _usr_image(tmp_path)
    before = image.read_bytes()
    ws = vm_base / "rootfs"
    ws.mkdir()
    config = sandbox.SandboxConfig(backend="microvm", microvm=sandbox.MicrovmConfig(rootfs=image))
    with sandbox.Sandbox(config, ws) as box:
        assert f"/usr: the image {image} (read-only)" in box.describe()
        result = box.run('echo "$(< /usr/share/abhed-marker)"; echo /usr/bin/*; [ -e /usr/bin/python3 ] || echo no-python3; '
                         "echo x > /usr/share/new; echo end", cwd=ws, timeout_s=300)
    lines = result.output.splitlines()
    assert lines[:3] == ["from the operator's image", f"/usr/bin/{Path(sandbox.shell.find_shell().path).name}", "no-python3"]
    assert "/usr/share/new: Read-only file system" in lines[3] and lines[4] == "end"
    assert image.read_bytes() == before  # attached read-only: the guest changed nothing in it


def test_a_rootfs_is_recognised_by_its_superblock(tmp_path):
    squashfs, ext4, short = tmp_path / "a.squashfs", tmp_path / "b.ext4", tmp_path / "short.img"
    squashfs.write_bytes(b"hsqs" + bytes(4092))
    ext4.write_bytes(bytes(1080) + b"\x53\xef" + bytes(3014))
    short.write_bytes(b"hsq")
    microvm.check_rootfs(squashfs)
    microvm.check_rootfs(ext4)
    for wrong in (short, tmp_path):  # a truncated header; a directory
        with pytest.raises(sandbox.ConfigError, match=f"microvm.rootfs {wrong} (is neither|cannot be read)"):
            microvm.check_rootfs(wrong)


def test_a_rootfs_that_is_not_an_image_or_missing_is_refused(tmp_path):
    require_microvm()
    ws = tmp_path / "ws"
    ws.mkdir()
    text = tmp_path / "notes.txt"
    text.write_text("not a filesystem\n")
    for path, fact in ((text, f"microvm.rootfs {text} is neither a squashfs nor an ext4 image"),
                       (tmp_path / "missing.img", f"microvm.rootfs {tmp_path / 'missing.img'} cannot be read (No such file or directory)")):
        config = sandbox.SandboxConfig(backend="microvm", microvm=sandbox.MicrovmConfig(rootfs=path))
        with pytest.raises(sandbox.ConfigError) as err:
            sandbox.Sandbox(config, ws)
        assert str(err.value).startswith(fact) and "mksquashfs ROOT/usr usr.img" in str(err.value)


# -- the VMM's own confinement -------------------------------------------------------------------


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


@pytest.mark.slow
def test_qemu_runs_jailed_with_its_seccomp_filter_and_no_privileges(box):
    assert box.run("true", cwd=box.workspace, timeout_s=300).exit_code == 0
    [qemu] = vmm_pids(box._launcher._vm.process.pid)
    status = _status(qemu)
    assert (status["Seccomp"], status["NoNewPrivs"], status["CapEff"], status["CapPrm"]) == ("2", "1", "0" * 16, "0" * 16)
    for namespace in ("mnt", "pid", "net", "ipc"):  # no network device: not even the host's network namespace
        assert os.readlink(f"/proc/{qemu}/ns/{namespace}") != os.readlink(f"/proc/self/ns/{namespace}"), namespace


@pytest.mark.slow
def test_a_secret_in_home_is_beyond_qemu_and_the_guest(box):
    secret = Path.home() / f".abhed-test-secret-{os.getpid()}"
    secret.write_text("host secret\n")
    secret.chmod(0o600)
    try:
        result = box.run(f"cat {secret}; ls -a {Path.home()}; cat /etc/shadow | wc -c; echo end", cwd=box.workspace, timeout_s=300)
        assert "host secret" not in result.output and result.output.endswith("end\n")
        [qemu] = vmm_pids(box._launcher._vm.process.pid)
        root = Path(f"/proc/{qemu}/root")
        # qemu's whole world, as the host sees it: what a guest that took over qemu could reach.
        assert not (root / secret.relative_to("/")).exists() and not (root / Path.home().relative_to("/")).exists()
        assert (root / "etc" / "shadow").stat().st_size == 0  # the guest's /etc copy: a placeholder
        assert (root / "usr" / "bin").is_dir() and (root / str(box.workspace).lstrip("/")).is_dir()
        assert not (root / "dev" / "sda").exists() and not (root / "run").exists() and not (root / "var").exists()
    finally:
        secret.unlink()


# -- lifetime -----------------------------------------------------------------------------------


DRIVER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[1])
    import sandbox
    box = sandbox.Sandbox(sandbox.SandboxConfig(backend="microvm", microvm=sandbox.MicrovmConfig(boot="session-start")), sys.argv[2])
    job = box.start_background("sleep 1000", cwd=sys.argv[2], log_path=sys.argv[2] + "/../job.log")
    print("ready", flush=True)
    time.sleep(1000)
    """
)


@pytest.mark.slow
def test_no_vm_outlives_an_abhed_killed_with_sigkill(tmp_path):
    require_microvm()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(REPO), str(workspace)], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout.readline() == "ready\n"
        qemus = vmm_pids(driver.pid)
        assert len(qemus) == 1
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        assert wait_until(lambda: not Path(f"/proc/{qemus[0]}").exists(), timeout_s=30), "qemu survived its Abhed"
    finally:
        driver.kill()
        driver.wait()


@pytest.mark.slow
def test_closing_the_session_powers_the_vm_off(tmp_path):
    require_microvm()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    box = sandbox.Sandbox(sandbox.SandboxConfig(backend="microvm"), workspace)
    assert box.run("true", cwd=workspace, timeout_s=300).exit_code == 0
    vm = box._launcher._vm
    pid = vm.process.pid
    box.close()
    assert vm.process.returncode is not None and not Path(f"/proc/{pid}").exists()
    assert not vm.state.exists()  # its /etc copy, socket and console log are gone too
    with pytest.raises(sandbox.SandboxError, match="closed"):
        box.run("true", cwd=workspace, timeout_s=300)
