"""Unprivileged users for the tests that run Abhed as an ordinary user.

Test files run side by side (pytest-xdist), and two of them may ask for the same user at once:
useradd takes /etc/passwd's own lock and refuses the second ("user already exists", exit 9), so the
creation is serialised here under a lock every test process shares, and a user found made is used.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import subprocess

import pytest

_LOCK = "/tmp/abhed-tests-useradd.lock"


def ensure_user(name: str, *, home: bool = False, shell: str = "/usr/sbin/nologin") -> pwd.struct_passwd:
    """The user `name`, made (a system user with its own group) when missing; skips without root or useradd."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    if os.geteuid() != 0 or not os.access(useradd, os.X_OK):
        pytest.skip(f"needs root and useradd to create the ordinary user {name!r}")
    with open(_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return pwd.getpwnam(name)
        except KeyError:
            made = ["--create-home"] if home else ["--system", "--no-create-home"]
            subprocess.run([useradd, *made, "--user-group", "--shell", shell, name], check=True, capture_output=True)
            return pwd.getpwnam(name)
