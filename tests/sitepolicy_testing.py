"""Running the real `abhed` as an ordinary user with a site policy at its fixed path, /etc/abhed/policy.toml,
without touching the machine's /etc and without any way in the product to move the path.

Each run gets a private mount namespace (as root: `unshare -m`), where /etc is an overlay whose upper
layer holds only abhed/policy.toml with the owner and mode the test chose; then the process drops to
the user (setpriv) and execs abhed. The machine's own /etc and every other process see nothing.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from users import ensure_user

REPO = Path(__file__).resolve().parent.parent
USER = "abhed-policy"

# In the namespace: /etc becomes an overlay with the test's policy; a root-only directory on the way to
# this Python (a pyenv under /root) is made traversable there by a tmpfs holding a bind of the one
# subtree needed; then the user's process.
SCRIPT = r"""
set -e
upper=$1 work=$2 hide=$3 keep=$4; shift 4
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$upper,workdir=$work" /etc
if [ -n "$hide" ]; then
    mkdir -p "$work.keep" && mount --bind "$keep" "$work.keep"
    mount -t tmpfs -o mode=0755 tmpfs "$hide"
    mkdir -p "$keep" && mount --bind "$work.keep" "$keep"
fi
exec "$@"
"""


def _closed_ancestor(path: Path) -> Path | None:
    """The outermost directory above `path` that other users cannot traverse (e.g. /root), or None."""
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return parent
    return None


@dataclass
class Site:
    """A user's home, workspace and config, and the policy the next run finds at /etc/abhed/policy.toml."""

    root: Path
    user: pwd.struct_passwd
    policy: str | None = None  # None: no policy file at all
    policy_uid: int = 0
    policy_mode: int = 0o644
    dir_uid: int = 0
    dir_mode: int = 0o755
    config: str = ""
    runs: int = field(default=0)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def ws(self) -> Path:
        return self.home / "ws"

    def env(self, extra: dict[str, str]) -> dict[str, str]:
        base = {"HOME": str(self.home), "XDG_CONFIG_HOME": str(self.home / ".config"), "PATH": os.environ["PATH"],
                "ABHED_HOME": str(self.home / "store"), "PYTHONPATH": str(REPO), "LANG": "C.UTF-8"}
        return {**base, **extra}

    def abhed(self, *args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run `abhed ARGS` as the user, the policy in place; `prefix` runs before python (as the user)."""
        self.runs += 1
        layer = self.root / f"layer{self.runs}"
        upper, work = layer / "upper", layer / "work"
        work.mkdir(parents=True)
        upper.mkdir()
        if self.policy is not None:
            directory = upper / "abhed"
            directory.mkdir()
            (directory / "policy.toml").write_text(self.policy)
            os.chown(directory / "policy.toml", self.policy_uid, 0)
            os.chmod(directory / "policy.toml", self.policy_mode)
            os.chown(directory, self.dir_uid, 0)
            os.chmod(directory, self.dir_mode)
        config = self.home / ".config" / "abhed" / "config.toml"
        config.write_text(self.config)
        closed = _closed_ancestor(Path(sys.base_prefix))
        hide, keep = (str(closed), str(Path(sys.base_prefix))) if closed else ("", "")
        user = ["setpriv", f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--init-groups", "--"]
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", SCRIPT, "sh", str(upper), str(work), hide,
               keep, *user, *(prefix or []), sys.executable, "-m", "abhed", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=self.env(env or {}), cwd=self.ws,
                              timeout=timeout)


@pytest.fixture
def site():
    """A Site for the user abhed-policy in a temp dir others can reach (pytest's own is root's, 0700)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.skip("placing a policy at /etc/abhed in a private mount namespace needs root, unshare and setpriv")
    user = ensure_user(USER)
    root = Path(tempfile.mkdtemp(prefix="abhed-sitepolicy-"))
    root.chmod(0o755)
    made = Site(root, user)
    (made.home / ".config" / "abhed").mkdir(parents=True)
    made.ws.mkdir()
    for path in (made.home, made.home / ".config", made.home / ".config" / "abhed", made.ws):
        os.chown(path, user.pw_uid, user.pw_gid)
    (made.home / ".config" / "abhed" / "config.toml").touch()
    os.chown(made.home / ".config" / "abhed" / "config.toml", user.pw_uid, user.pw_gid)
    os.chmod(made.home / ".config" / "abhed" / "config.toml", 0o600)
    yield made
    shutil.rmtree(root, ignore_errors=True)
