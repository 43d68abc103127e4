"""Smoke tests of dist/abhed itself, the one-file binary build.sh makes (not the source tree).

Every call runs the binary with a PATH that holds no python, no bwrap and no rg, so whatever it
needs must be inside it. scripts/test builds the binary first; run alone, these tests use the
binary at $ABHED_BINARY or dist/abhed and are skipped, saying so, when there is none (never under
CI, where a missing binary is a failure).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from abhed import __version__
from abhed.model.replay import ReplayServer, Turn

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("ABHED_BINARY", REPO / "dist" / "abhed"))


@pytest.fixture(scope="session")
def binary() -> Path:
    if not BINARY.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{BINARY} is missing: CI must build it (scripts/test runs ./build.sh first)")
        pytest.skip(f"{BINARY} is not built: run ./build.sh (scripts/test does)")
    return BINARY


@pytest.fixture(scope="session")
def bare_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH with a few basic tools and none of python, bwrap or rg."""
    bin_dir = tmp_path_factory.mktemp("bare-bin")
    for tool in ("sh", "env", "cat", "ls"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    return str(bin_dir)


@pytest.fixture(scope="session")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache dir for the whole run, so the binary unpacks once, as it would for a user."""
    return tmp_path_factory.mktemp("xdg-cache")


class Binary:
    def __init__(self, path: Path, bare_path: str, cache_home: Path, home: Path) -> None:
        self.path, self.home = path, home
        self.env = {"PATH": bare_path, "HOME": str(home), "XDG_CACHE_HOME": str(cache_home), "LANG": "C.UTF-8",
                    "ABHED_HOME": str(home / "abhed"), "ABHED_CONFIG": ""}

    def __call__(self, *args: str, input: str | None = None, cwd: Path | None = None, env: dict | None = None,
                 user: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.path), *args]
        if user:
            cmd = [shutil.which("setpriv"), f"--reuid={user}", f"--regid={user}", "--init-groups", *cmd]
        return subprocess.run(cmd, input=input, capture_output=True, text=True, cwd=cwd or self.home,
                              env={**self.env, **(env or {})}, timeout=timeout)

    def tool(self, name: str, ws: Path, *extra: str, **arguments: object) -> dict:
        proc = self("tool", name, json.dumps(arguments), "--workspace", str(ws), "--session", "smoke", "--json",
                    *extra)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture
def run(binary: Path, bare_path: str, cache_home: Path, tmp_path: Path) -> Binary:
    home = tmp_path / "home"
    home.mkdir()
    return Binary(binary, bare_path, cache_home, home)


def test_the_path_really_lacks_python_bwrap_and_rg(bare_path):
    for name in ("python", "python3", "bwrap", "rg"):
        assert shutil.which(name, path=bare_path) is None


def test_version(run):
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"abhed, version {__version__}", proc.stderr


def test_tools_json_lists_the_native_tools(run):
    from abhed.tools import CLASSES
    proc = run("tools", "--json")
    names = [entry["function"]["name"] for entry in json.loads(proc.stdout)]
    assert names == list(CLASSES)


def test_write_read_edit(run, ws):
    path = ws / "notes.txt"
    assert not run.tool("write", ws, path=str(path), content="alpha\nbeta\n")["is_error"]
    read = run.tool("read", ws, path=str(path))
    assert read["content"].startswith("     1\talpha\n     2\tbeta")
    edited = run.tool("edit", ws, path=str(path), old_string="beta", new_string="gamma")
    assert not edited["is_error"], edited["content"]
    assert path.read_text() == "alpha\ngamma\n"
    missing = run.tool("read", ws, path=str(ws / "nottes.txt"))
    assert missing["is_error"] and str(path) in missing["content"]  # the nearest name is suggested


@pytest.mark.parametrize("backend", ["rg", "python"])
def test_grep_on_both_backends(run, ws, backend):
    (ws / "a.py").write_text("def handler():\n    return 1\n")
    (ws / "b.txt").write_text("no match here\n")
    arguments = {"pattern": r"def \w+\(", "path": str(ws), "output_mode": "content"}
    proc = run("tool", "grep", json.dumps(arguments), "--workspace", str(ws), env={"ABHED_GREP_BACKEND": backend})
    assert proc.returncode == 0, proc.stderr
    assert f"{ws / 'a.py'}\n1:def handler():" in proc.stdout, proc.stdout
    assert "b.txt" not in proc.stdout


def test_the_rg_it_runs_is_the_one_inside_it(run, cache_home):
    proc = run("doctor", "--endpoint", "http://127.0.0.1:9/v1")
    line = next(line for line in proc.stdout.splitlines() if re.search(r"\brg\b", line) and "OK" in line)
    assert str(cache_home / "abhed" / __version__) in line and line.rstrip().endswith(f"/abhed/{__version__}/rg"), proc.stdout


def test_bash_runs_in_the_bundled_sandbox(run, ws):
    result = run.tool("bash", ws, "--mode", "auto", command="echo made > out.txt && env",
                      description="write a file and show the environment")
    assert not result["is_error"], result["content"]
    assert (ws / "out.txt").read_text() == "made\n"
    assert "NUITKA" not in result["content"] and "_MEI" not in result["content"]  # no bootloader traces


def test_the_native_modules_are_in_the_binary(run, bare_path, tmp_path):
    """doctor's checkpoints line is a WARN naming the native listing when sandbox/_listdir.c is not in
    (abhed/cli/doctor.py); it needs git to get that far, so git alone joins the bare PATH."""
    gitbin = tmp_path / "gitbin"
    gitbin.mkdir()
    (gitbin / "git").symlink_to(shutil.which("git"))
    proc = run("doctor", "--endpoint", "http://127.0.0.1:9/v1", env={"PATH": f"{bare_path}:{gitbin}"})
    assert re.search(r"OK\s+checkpoints\b", proc.stdout), proc.stdout


def test_doctor_against_the_fake_model_server(run, ws):
    turns = [Turn(calls=[("glob", {"pattern": "*"})]), Turn(text="done")]
    with ReplayServer(turns * 2, model_id="Qwen/Qwen2.5-Coder-7B-Instruct") as server:
        proc = run("doctor", "--endpoint", server.url, cwd=ws)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for check in ("endpoint", "model", "sandbox", "rg"):
        assert re.search(rf"OK\s+{check}\b", proc.stdout), proc.stdout


def test_a_scripted_agent_session(run, ws):
    (ws / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    turns = [Turn(text="Reading.", calls=[("read", {"path": str(ws / "calc.py")})]),
             Turn(calls=[("edit", {"path": str(ws / "calc.py"), "old_string": "a - b", "new_string": "a + b"})]),
             Turn(calls=[("bash", {"command": "grep -c 'a + b' calc.py", "description": "check the fix"})]),
             Turn(text="Fixed: add now adds.")]
    with ReplayServer(turns, model_id="Qwen/Qwen2.5-Coder-7B-Instruct") as server:
        proc = run("run", "fix add", "--endpoint", server.url, "--workspace", str(ws), "--mode", "auto", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Fixed: add now adds.\n"
    assert (ws / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    sessions = run("sessions", "list", "--json")
    assert len(json.loads(sessions.stdout)) == 1


def test_acp_answers_an_editor(run, ws):
    """The ACP SDK (agent-client-protocol) is inside: `abhed acp` answers initialize and session/list
    on its stdout, frames only."""
    frames = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
              {"jsonrpc": "2.0", "id": 2, "method": "session/list", "params": {"cwd": str(ws)}}]
    proc = run("acp", input="".join(json.dumps(frame) + "\n" for frame in frames), cwd=ws)
    assert proc.returncode == 0, proc.stderr
    answers = {answer["id"]: answer for answer in map(json.loads, proc.stdout.splitlines())}
    assert answers[1]["result"]["agentInfo"]["name"] == "abhed" and answers[2]["result"] == {"sessions": []}


def test_a_chat_session_with_slash_commands(run, ws):
    """The chat's modules (prompt_toolkit, markdown, slash commands) load in the binary: it once died
    there at start-up on prompt_toolkit's import of xml, which the binary leaves out."""
    turns = [Turn(text="## Hello\n\n- one\n- two")]
    with ReplayServer(turns, model_id="Qwen/Qwen2.5-Coder-7B-Instruct") as server:
        proc = run("chat", "--endpoint", server.url, "--workspace", str(ws), input="/help\nhi\n/exit\n", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert "/undo" in proc.stdout and "Hello" in proc.stdout and len(server.requests) == 1


def test_it_reads_pdfs_and_shows_images_to_a_vision_model(run, ws):
    """Pillow (C extensions and their libraries) and pypdf (with no xml inside) work in the binary."""
    import base64
    import io
    from PIL import Image
    sys.path.insert(0, str(REPO / "tests"))
    from media_testing import image, text_pdf
    (ws / "spec.pdf").write_bytes(text_pdf(["Register map", "Timing"]))
    (ws / "shot.png").write_bytes(image("PNG", 1600, 1200))
    (ws / "photo.webp").write_bytes(image("WEBP", 300, 200))
    pdf = run.tool("read", ws, path=str(ws / "spec.pdf"))
    assert not pdf["is_error"] and "--- page 2 of 2 ---\nTiming" in pdf["content"], pdf["content"]
    turns = [Turn(calls=[("read", {"path": str(ws / "shot.png")}), ("read", {"path": str(ws / "photo.webp")})]),
             Turn(text="Two pictures.")]
    with ReplayServer(turns, model_id="Qwen/Qwen3-VL-8B-Instruct", images=8) as server:
        proc = run("run", "look", "--endpoint", server.url, "--workspace", str(ws), cwd=ws)
    assert proc.returncode == 0, proc.stderr
    sent = [m["content"][1]["image_url"]["url"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    sizes = [Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size for url in sent]
    assert sizes[1] == (300, 200) and sizes[0][0] * sizes[0][1] <= 1048576 and server.refused == []


def test_demo(run):
    proc = run("demo", "--fast")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_models_reads_the_profiles_inside_it(run):
    proc = run("models", "--json")
    assert proc.returncode == 0 and len(json.loads(proc.stdout)) >= 7, proc.stderr


def test_unpacks_once_into_the_versioned_cache_dir(run, cache_home):
    run("--version")
    folder = cache_home / "abhed" / __version__
    stamp = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    assert stamp, f"nothing unpacked into {folder}"
    assert run("--version").returncode == 0
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} == stamp


def test_an_unprivileged_user_runs_it(binary, bare_path, shared_tmp):
    """Own home, own cache, a sandboxed bash call: nothing needs root."""
    tmp_path = shared_tmp
    user = ensure_user("abhed-smoke")
    home = tmp_path / "user-home"
    ws = home / "ws"
    ws.mkdir(parents=True)
    shutil.chown(home, user, user)
    shutil.chown(ws, user, user)
    tmp_path.chmod(0o755)
    run = Binary(binary, bare_path, home / ".cache", home)
    run.env.pop("XDG_CACHE_HOME")
    proc = run("tool", "bash", json.dumps({"command": "id -u; touch made", "description": "make a file"}), "--workspace", str(ws), "--mode", "auto",
               "--json", user=user)
    assert proc.returncode == 0, proc.stderr
    assert not json.loads(proc.stdout)["is_error"], proc.stdout
    assert (ws / "made").stat().st_uid != 0
    assert (home / ".cache" / "abhed" / __version__).is_dir()


def test_the_glibc_it_needs_is_the_documented_one(run, cache_home):
    """docs/binary.md states the oldest glibc the binary runs on; read it off every ELF file in it:
    the bootstrap and everything it unpacks (Python's extension modules, bwrap, libcap, rg)."""
    # The build compiles against the Python of .venv, this one: a distribution's Python (under
    # /usr) carries that distribution's glibc, a source-built one the glibc it was built on.
    kind = "distribution" if Path(sys.base_prefix) == Path("/usr") else "source-built"
    documented = re.search(kind + r" Python[^:]*: glibc (\d+\.\d+) or newer",
                           (REPO / "docs" / "binary.md").read_text())
    assert documented, f"docs/binary.md must say '{kind} Python (...): glibc X.Y or newer'"
    assert run("--version").returncode == 0
    unpacked = [p for p in (cache_home / "abhed" / __version__).rglob("*") if p.is_file() and is_elf(p)]
    assert len(unpacked) > 5
    needed = max(glibc_versions(p) for p in [run.path, *unpacked])
    assert ".".join(map(str, needed)) == documented.group(1), \
        f"the binary, built with {kind} Python {sys.base_prefix}, needs glibc {needed}; " \
        f"docs/binary.md says {documented.group(1)}: update the doc"


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def glibc_versions(path: Path) -> tuple[int, ...]:
    """The newest GLIBC_x.y symbol version the ELF file asks for ((0,) when none: static, like rg)."""
    dynamic = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True).stdout
    found = [tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", dynamic)]
    return max(found, default=(0,))


def test_a_read_only_home_falls_back_to_a_private_temp_dir(binary, bare_path, shared_tmp):
    """An unprivileged user whose cache dir cannot be written: the binary unpacks into a folder of
    its own under TMPDIR, works, and leaves nothing behind."""
    tmp_path = shared_tmp
    user = ensure_user("abhed-smoke")
    home, tmpdir = tmp_path / "ro-home", tmp_path / "tmp"
    home.mkdir(mode=0o555)
    tmpdir.mkdir()
    tmpdir.chmod(0o1777)  # as /tmp is
    tmp_path.chmod(0o755)
    run = Binary(binary, bare_path, home / ".cache", home)
    run.env.pop("XDG_CACHE_HOME")
    proc = run("--version", env={"TMPDIR": str(tmpdir)}, user=user)
    assert proc.returncode == 0 and __version__ in proc.stdout, proc.stderr
    assert not (home / ".cache").exists()
    assert list(tmpdir.iterdir()) == []  # the private unpack folder is gone


def test_a_cache_folder_another_user_can_change_is_not_used(binary, bare_path, shared_tmp):
    """The attack: root runs abhed with a cache folder another user controls (sudo keeping the
    caller's HOME, XDG_CACHE_HOME in a shared folder), where that user planted a program and a
    stamp naming this very binary. The bootstrap must not run it: it says why, unpacks into a
    private temporary folder instead, and works."""
    tmp_path = shared_tmp
    user = ensure_user("abhed-smoke")
    legit = Binary(binary, bare_path, tmp_path / "legit-cache", tmp_path)
    assert legit("--version").returncode == 0
    identity = (tmp_path / "legit-cache" / "abhed" / __version__ / ".abhed-unpacked").read_text().splitlines()[0]
    theirs = tmp_path / "their-cache"
    planted = theirs / "abhed" / __version__
    planted.mkdir(parents=True)
    marker = tmp_path / "planted-program-ran"
    program = planted / "abhed.bin"
    program.write_text(f"#!/bin/sh\necho owned > {marker}\n")
    program.chmod(0o755)
    (planted / ".abhed-unpacked").write_text(f"{identity}\n{program}")
    for path in (theirs, theirs / "abhed", planted, program, planted / ".abhed-unpacked"):
        shutil.chown(path, user, user)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    tmpdir.chmod(0o1777)
    proc = Binary(binary, bare_path, theirs, tmp_path)("--version", env={"TMPDIR": str(tmpdir)})
    assert not marker.exists(), "the bootstrap ran a program another user planted in its cache folder"
    assert proc.returncode == 0 and __version__ in proc.stdout, proc.stderr
    assert f"not using the unpack cache {planted}" in proc.stderr and "belongs to uid" in proc.stderr, proc.stderr
    assert list(tmpdir.iterdir()) == []  # the private folder it used instead is gone
    # Writable by others is refused the same way, even when the folder is ours.
    for path in (theirs, theirs / "abhed", planted):
        shutil.chown(path, "root", "root")
    planted.chmod(0o777)
    proc = Binary(binary, bare_path, theirs, tmp_path)("--version", env={"TMPDIR": str(tmpdir)})
    assert not marker.exists() and proc.returncode == 0 and "can be written by others" in proc.stderr, proc.stderr


def test_a_replaced_binary_is_unpacked_again(binary, bare_path, tmp_path):
    """The start-up stamp names the binary (size, mtime, inode): a copy elsewhere, or a new
    binary of the same version, takes the full path and rewrites what differs."""
    copy = tmp_path / "abhed"
    shutil.copy2(binary, copy)
    run = Binary(copy, bare_path, tmp_path / "cache", tmp_path)
    assert run("--version").returncode == 0
    folder = tmp_path / "cache" / "abhed" / __version__
    stamp = (folder / ".abhed-unpacked").read_text()
    victim = folder / "rg"
    victim.write_bytes(b"damaged")
    os.utime(copy)  # as a re-install would leave it
    assert run("--version").returncode == 0
    assert (folder / ".abhed-unpacked").read_text() != stamp
    assert victim.stat().st_size > 1_000_000  # the damaged file was restored from the payload


def test_the_bundle_of_this_binary_verifies_installs_and_refuses_a_changed_byte(run, binary, tmp_path):
    keys = tmp_path / "keys"
    made = subprocess.run([sys.executable, "-m", "bundle.keygen", "--out", str(keys)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    key_id = re.search(r"[0-9A-F]{16}", (keys / "abhed.pub").read_text().splitlines()[0]).group(0)
    out = tmp_path / "out"
    made = subprocess.run([sys.executable, "-m", "bundle.make", "--binary", str(binary), "--secret-key",
                           str(keys / "abhed.key"), "--out", str(out)], capture_output=True, text=True, cwd=REPO,
                          timeout=900)
    assert made.returncode == 0, made.stderr
    bundle = Path(made.stdout.strip())

    verified = run("bundle", "verify", str(bundle), "--key-id", key_id)
    assert verified.returncode == 0 and "verified" in verified.stdout and key_id in verified.stdout, verified.stderr
    prefix = tmp_path / "prefix"
    system_path = {**run.env, "PATH": "/usr/bin:/bin"}
    installed = subprocess.run(["bash", str(bundle / "install.sh"), "--prefix", str(prefix), "--key-id", key_id],
                               capture_output=True, text=True, env=system_path)
    assert installed.returncode == 0, installed.stderr
    again = run.__class__(prefix / "bin" / "abhed", run.env["PATH"], Path(run.env["XDG_CACHE_HOME"]), run.home)
    assert again("--version").stdout.strip() == f"abhed, version {__version__}"
    pinned = again("bundle", "verify", str(bundle))  # the installed binary finds the key install.sh pinned
    assert pinned.returncode == 0 and key_id in pinned.stdout, pinned.stderr

    tampered = tmp_path / "tampered" / bundle.name
    shutil.copytree(bundle, tampered, symlinks=True)
    data = bytearray((tampered / "abhed").read_bytes())
    data[len(data) // 2] ^= 0x01
    (tampered / "abhed").write_bytes(data)
    refused = run("bundle", "verify", str(tampered), "--key-id", key_id)
    assert refused.returncode == 1 and "abhed" in refused.stdout + refused.stderr
    other = tmp_path / "other-prefix"
    refused = subprocess.run(["bash", str(tampered / "install.sh"), "--prefix", str(other), "--key-id", key_id],
                             capture_output=True, text=True, env=system_path)
    assert refused.returncode != 0 and "abhed" in refused.stderr and "checksum" in refused.stderr, refused.stderr
    assert not other.exists() or not any(other.rglob("abhed"))


@pytest.fixture
def shared_tmp():
    """A temp dir another user can reach (pytest's own lies under a 0700 folder of root's)."""
    path = Path(tempfile.mkdtemp(prefix="abhed-smoke-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def ensure_user(name: str) -> str:
    if subprocess.run(["id", name], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    return name


def test_every_decoder_path_works_confined_in_the_binary(run, ws):
    """The decoders' child confines itself in the binary too (no interpreter but the binary; Nuitka's
    loader): each image format and each image filter of a PDF (tests/decoder_corpus.py) reads as
    from source, none refused for a module or a syscall."""
    sys.path.insert(0, str(REPO / "tests"))
    import decoder_corpus
    from abhed.files import images, pdf
    files = {f"p{i}.pdf": data for i, data in enumerate(decoder_corpus.pdfs().values())}
    files |= {f"i{i}.{name.split()[0].lower()}": data
              for i, (name, data) in enumerate(decoder_corpus.pictures().items())}
    for name, data in files.items():
        (ws / name).write_bytes(data)
    names = list(files)
    for start in range(0, len(names), 8):  # a few a session: no compaction of the conversation between
        chunk = names[start:start + 8]
        turns = [Turn(calls=[("read", {"path": str(ws / name)})]) for name in chunk] + [Turn(text="Read.")]
        with ReplayServer(turns, model_id="Qwen/Qwen3-VL-8B-Instruct", images=8) as server:
            proc = run("run", "look", "--endpoint", server.url, "--workspace", str(ws), cwd=ws)
        assert proc.returncode == 0, proc.stderr
        answers = [request["messages"][-1]["content"] for request in server.requests[1:]]
        assert len(answers) == len(chunk)
        for name, answer in zip(chunk, answers):
            parts = answer if isinstance(answer, list) else [{"type": "text", "text": answer}]
            text = " ".join(part.get("text", "") for part in parts)
            assert "Internal error" not in text and "cannot be shown" not in text, (name, text)
            shown = sum(part["type"] == "image_url" for part in parts)
            if name.endswith(".pdf"):  # the text and the images a read from source gives
                doc = pdf._read(files[name], 1, 10, 100_000, images.ImageLimits())
                assert all(page.text in text for page in doc.pages), (name, text)
                assert shown == sum(len(page.images) for page in doc.pages), (name, text)
            else:
                assert shown == 1, (name, text)
