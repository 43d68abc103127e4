"""python -m fallback_grep -jN as real processes: a worker killed mid-search, Ctrl-C, and output
byte-identical to -j1 on a real tree (this repository's own source)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The CLI with small batches (many runs, so order across them matters) and, with FG_HANG set, a
# worker that stops on the batch of directory FG_HANG_DIR: it creates FG_HANG.<its pid> for the
# test to act on (kill it, or press Ctrl-C), and ignores SIGINT, so only the CLI can end it.
CLI = """
import os, signal, sys, time
from fallback_grep import parallel
from fallback_grep.__main__ import main
parallel.BATCH_FILES = 3
parallel.SHARE_BATCHES = 2
hang, parent = os.environ.get("FG_HANG"), os.getpid()
if hang:
    real = parallel._search
    def search(matcher, batch, *rest):
        if os.getpid() != parent and any(d.endswith(os.environ["FG_HANG_DIR"]) for d, _ in batch):
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            open(f"{hang}.{os.getpid()}", "w").close()
            time.sleep(3600)
        return real(matcher, batch, *rest)
    parallel._search = search
sys.exit(main(sys.argv[1:], own_process=True))
"""


def _cli(args, **env):
    return subprocess.Popen([sys.executable, "-c", CLI, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            env=dict(os.environ, **{k: str(v) for k, v in env.items()}))


def _session(sid):
    """Processes of session sid left on the host (the CLI's, started in its own session)."""
    left = []
    for pid in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if pid.isdigit() and int(stat.rsplit(")", 1)[1].split()[3]) == sid:
            left.append(int(pid))
    return left


def _wait_for(marker_dir, proc):
    """The pid of the stopped worker, once it has said so (or fail if the CLI ended first)."""
    while True:
        found = [p for p in marker_dir.iterdir() if p.name.startswith("hang.")]
        if found:
            return int(found[0].name.split(".")[1])
        assert proc.poll() is None, f"the CLI ended before a worker stopped: {proc.communicate()}"
        time.sleep(0.01)


@pytest.fixture()
def tree(tmp_path):
    """Many small directories, matches spread over them, one of them (d07) to stop in."""
    root = tmp_path / "tree"
    for d in range(14):
        for f in range(5):
            p = root / f"d{d:02}" / f"f{f}.c"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(f"int a{f};\n" + ("PM_RESUME;\n" if (d + f) % 3 else "") + "end\n")
    return root


ARGS = ["--output-mode", "content", "-C", "1", "PM_RESUME"]


def test_a_worker_killed_mid_search_gives_the_complete_output_and_leaves_no_process(tree, tmp_path):
    one = subprocess.run([sys.executable, "-m", "fallback_grep", "-j1", *ARGS, tree], capture_output=True)
    assert one.returncode == 0 and one.stdout.count(b"PM_RESUME") == 47
    proc = _cli(["-j3", *ARGS, tree], FG_HANG=tmp_path / "hang", FG_HANG_DIR="d07")
    worker = _wait_for(tmp_path, proc)
    os.kill(worker, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (0, b"")
    assert out == one.stdout
    assert _session(proc.pid) == []


@pytest.mark.parametrize("send, sig, code", [
    # SIGINT to the whole process group, as a terminal sends it: even the worker that ignores
    # SIGINT is gone.
    (os.killpg, signal.SIGINT, 130),
    # `kill PID` reaches the command, not its workers: it ends them before it exits.
    (os.kill, signal.SIGTERM, 143),
], ids=["ctrl-c", "sigterm"])
def test_a_stopped_command_exits_without_a_traceback_and_leaves_no_worker(tree, tmp_path, send, sig, code):
    proc = _cli(["-j2", *ARGS, tree], FG_HANG=tmp_path / "hang", FG_HANG_DIR="d07")
    _wait_for(tmp_path, proc)
    send(proc.pid, sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code and b"Traceback" not in err
    assert _session(proc.pid) == []


@pytest.mark.parametrize("args", [["--output-mode", "content", "-C", "2", "def \\w+\\(self"],
                                  ["--output-mode", "count", "(?i)import"],
                                  ["--output-mode", "files_with_matches", "fork_map|Matcher"]])
def test_workers_print_byte_for_byte_what_one_process_prints(args):
    """On a real tree: this repository's fallback_grep, abhed and tests (hundreds of files, a
    batch of three files each, so scores of forked runs)."""
    roots = [REPO / "fallback_grep", REPO / "abhed", REPO / "tests"]
    one = subprocess.run([sys.executable, "-m", "fallback_grep", "-j1", *args, *roots], capture_output=True)
    assert one.returncode == 0 and one.stdout.count(b"\n") > 10
    many = subprocess.run([sys.executable, "-c", CLI, "-j3", *args, *roots], capture_output=True)
    assert (many.returncode, many.stdout, many.stderr) == (one.returncode, one.stdout, one.stderr)
