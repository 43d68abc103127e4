"""The image and PDF decoders' confinement (abhed/common/confine.py) holds for an unprivileged
Abhed too: the attacks of tests/decoder_attacks.py run in the decoder's place, in the confined
child of isolate.run, in a process of the unprivileged test user (the ``user_runner`` fixture),
against that user's own files, which it could change if the child were not confined. Judged on the
host. (As root: tests/test_decoder_confinement.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import decoder_attacks as attacks

REPO = Path(__file__).resolve().parents[2]
STAGED = ("abhed/__init__.py", "abhed/common/__init__.py", "abhed/common/isolate.py", "abhed/common/confine.py",
          "tests/decoder_attacks.py")

ATTACKS = """
import os, sys
sys.path[:0] = [STAGE]
from abhed.common import isolate
import decoder_attacks as attacks
bounds = isolate.Bounds(seconds=120)
held = os.open(SECRET, os.O_RDONLY)  # Abhed holding the user's file open: the child must not inherit it
answer = {"uid": os.getuid(),
          "write": isolate.run(attacks.write_everywhere, WRITABLE, bounds=bounds),
          "read": isolate.run(attacks.read_everything, SECRET, HOME, held, bounds=bounds),
          "connect": isolate.run(attacks.connect, TCP, UDP, ABSTRACT, bounds=bounds),
          "set_id": isolate.run(attacks.set_id_bits, TOOL, TOOLS, bounds=bounds)}
"""


def _own(path: Path, runner) -> None:
    for item in [path, *path.rglob("*")]:
        os.chown(item, runner.uid, runner.gid)


def _snapshot(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    return {p.name: (p.stat().st_mode, p.stat().st_mtime_ns, p.read_bytes()) for p in directory.iterdir()}


def test_a_compromised_decoder_of_an_unprivileged_abhed_changes_reads_and_reaches_nothing(user_runner):
    runner = user_runner
    base = runner.new_workspace()
    stage, writable, home, tools = base / "stage", base / "writable", base / "home", base / "tools"
    for name in STAGED:  # the confinement's modules, and the attacks beside them
        target = stage / (Path(name).name if name.startswith("tests/") else name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, target)
    writable.mkdir()
    (writable / "existing").write_text("original\n")
    (home / ".ssh").mkdir(parents=True)
    secret = home / ".ssh" / "id_ed25519"
    subprocess.run(["sh", "-c", f"umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \\n' > {secret}"],
                   check=True)
    tools.mkdir(mode=0o755)
    tool = tools / "tool"
    tool.write_bytes(Path("/bin/true").read_bytes())
    tool.chmod(0o755)
    _own(base, runner)  # the user's own files: unconfined, it could change every one of them
    before = _snapshot(writable)
    with attacks.listeners("abhed-decoder-user") as (tcp, udp, unix, abstract):
        values = {"STAGE": stage, "SECRET": secret, "HOME": home, "WRITABLE": writable, "TOOL": tool, "TOOLS": tools,
                  "TCP": tcp.getsockname()[1], "UDP": udp.getsockname()[1], "ABSTRACT": abstract}
        code = ATTACKS
        for name, value in sorted(values.items(), key=lambda item: -len(item[0])):  # TOOLS before TOOL
            code = code.replace(name, repr(str(value)) if isinstance(value, (str, Path)) else str(value))
        answer = runner.exec(code, timeout_s=600)
        for take in (tcp.accept, lambda: udp.recvfrom(16), unix.accept):  # no connection waits in any of them
            with pytest.raises(BlockingIOError):
                take()
    assert answer["uid"] == runner.uid
    assert _snapshot(writable) == before
    assert oct(tool.stat().st_mode & 0o7777) == oct(0o755) and oct(tools.stat().st_mode & 0o7777) == oct(0o755)
    assert sorted(p.name for p in tools.iterdir()) == ["tool"]
    words = secret.read_text()
    assert len(words) == 48 and not [k for k, v in answer["read"].items() if words in v or ".ssh" in v]
    opened = [fd for fd in range(1024) if not answer["read"][f"fd {fd}"].startswith("OSError errno 9")]
    assert opened == [0, 1, 2], answer["read"]
    for report in ("write", "connect", "set_id"):
        assert [f"{k}: {v}" for k, v in answer[report].items() if v.startswith("ok") or v == "0"] == [], answer[report]
