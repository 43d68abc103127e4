"""The image and PDF decoders' child is confined (issue 30, item 10).

A memory bug in Pillow or pypdf would run the attacker's code in the decoder's child. Here a
compromised decoder is simulated by a function that isolate.run executes in the decoder's place
(after the confinement, as the real decode is), or by a monkeypatched decode function behind the
read tool. It tries what an attacker would; each attempt is judged on the host: no file written
or changed outside (there is no scratch directory: nothing anywhere), no secret of the user's in
what came back, no connection seen by a listener on the host's loopback, no set-uid bit, no process
left once Abhed is gone, no code run by the answer it sends back.
"""

from __future__ import annotations

import os
import pickle
import platform
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import decoder_attacks as attacks
from abhed.common import isolate
from abhed.files import images, pdf
from media_testing import image, text_pdf

REPO = Path(__file__).resolve().parents[1]
LONG = isolate.Bounds(seconds=120)


# -- No writes, anywhere ----------------------------------------------------------------------


def test_a_compromised_decoder_writes_nothing_outside_not_even_in_its_own_directory(tmp_path):
    (tmp_path / "existing").write_text("original\n")
    before = {p.name: (p.stat().st_mode, p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.iterdir()}
    outcomes = isolate.run(attacks.write_everywhere, str(tmp_path), bounds=LONG)
    after = {p.name: (p.stat().st_mode, p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.iterdir()}
    assert after == before  # judged on the host: nothing new, nothing changed
    assert attacks.tried(outcomes) == [], outcomes
    assert outcomes["open"] == "PermissionError errno 1"  # the filter's answer: EPERM


# -- No view of the user's files --------------------------------------------------------------


def _user_key(home: Path) -> Path:
    """A 0600 key in `home`, written by another process: its content is never in this process's memory,
    a copy of which the decoder's child has."""
    (home / ".ssh").mkdir(parents=True)
    secret = home / ".ssh" / "id_ed25519"
    subprocess.run(["sh", "-c", f"umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \\n' > {secret}"],
                   check=True)
    return secret


def test_a_compromised_decoder_reads_no_file_of_the_user_s(tmp_path, monkeypatch):
    home = tmp_path / "home"
    secret = _user_key(home)
    monkeypatch.setenv("HOME", str(home))
    held = os.open(secret, os.O_RDONLY)  # Abhed holding the file open: the child must not inherit it
    try:
        found = isolate.run(attacks.read_everything, str(secret), str(home), held, bounds=LONG)
    finally:
        os.close(held)
    words = secret.read_text()
    assert len(words) == 48 and oct(secret.stat().st_mode)[-3:] == "600"
    assert not [name for name, what in found.items() if words in what or ".ssh" in what], found
    assert attacks.tried({k: v for k, v in found.items() if not k.startswith("fd ")}) == [], found
    # 0, 1 and 2 are /dev/null (empty), the answer pipe's write end cannot be read: nothing else is open (EBADF)
    assert [fd for fd in range(1024) if not found[f"fd {fd}"].startswith("OSError errno 9")] == [0, 1, 2], found
    assert {found["fd 0"], found["fd 1"], found["fd 2"]} == {"ok: b''"}


# -- No network -------------------------------------------------------------------------------


def test_a_compromised_decoder_reaches_no_listener_on_the_host():
    with attacks.listeners("abhed-decoder-test") as (tcp, udp, unix, abstract):
        outcomes = isolate.run(attacks.connect, tcp.getsockname()[1], udp.getsockname()[1], abstract, bounds=LONG)
        # A connection completes in the kernel before accept(): had one been made, it would wait there now.
        for listener, take in ((tcp, tcp.accept), (udp, lambda: udp.recvfrom(16)), (unix, unix.accept)):
            with pytest.raises(BlockingIOError):
                take()
    assert attacks.tried(outcomes) == [], outcomes


# -- No set-uid bit ---------------------------------------------------------------------------


def test_a_compromised_decoder_sets_no_set_uid_bit(tmp_path):
    tool = tmp_path / "tool"
    tool.write_bytes(Path("/bin/true").read_bytes())
    tool.chmod(0o755)
    tmp_path.chmod(0o755)
    held = os.open(tool, os.O_RDONLY)
    try:
        found = isolate.run(attacks.set_id_bits, str(tool), str(tmp_path), bounds=LONG)
    finally:
        os.close(held)
    assert oct(tool.stat().st_mode & 0o7777) == oct(0o755) and oct(tmp_path.stat().st_mode & 0o7777) == oct(0o755)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tool"]
    assert attacks.tried(found) == [], found


# -- Nothing outlives Abhed -------------------------------------------------------------------

# Abhed, in a process of its own: the decoder tries to disarm its parent-death signal, to leave
# its session, to fork and to kill Abhed, then sleeps for ten minutes.
ABHED = """
import ctypes, os, signal, sys, time
sys.path[:0] = [REPO]
from abhed.common import isolate
libc = ctypes.CDLL(None, use_errno=True)
def linger():
    libc.syscall(PRCTL, 1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG 0
    for attempt in (os.setsid, os.fork, lambda: os.kill(os.getppid(), signal.SIGTERM)):
        try:
            if attempt() == 0:
                os._exit(0)  # never reached: a grandchild
        except OSError:
            pass
    time.sleep(600)
isolate.run(linger, bounds=isolate.Bounds(seconds=600))
"""


def _marked(marker: str) -> list[int]:
    """Running processes whose command line holds `marker` (a zombie's is empty: it no longer runs)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


def _sleeping_in(pid: int) -> bool:
    """The process sits in nanosleep: its attempts are behind it."""
    try:
        number = int(Path(f"/proc/{pid}/syscall").read_text().split()[0])
    except (OSError, ValueError):  # gone, or running
        return False
    return number in (attacks.NR["clock_nanosleep"], attacks.NR["nanosleep"])


def _wait(predicate) -> bool:
    """Poll `predicate` for up to a minute (the tests judge what happened, never how fast)."""
    deadline = time.monotonic() + 60
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def test_a_compromised_decoder_dies_with_abhed_and_leaves_no_process():
    marker = f"abhed-decoder-{uuid.uuid4().hex}"
    script = ABHED.replace("REPO", repr(str(REPO))).replace("PRCTL", str(attacks.NR["prctl"]))
    abhed = subprocess.Popen([sys.executable, "-c", script, marker])
    try:
        assert _wait(lambda: any(_sleeping_in(pid) for pid in _marked(marker) if pid != abhed.pid))
        decoders = [pid for pid in _marked(marker) if pid != abhed.pid]
        assert len(decoders) == 1 and abhed.poll() is None  # no grandchild; Abhed was not killed
    finally:
        abhed.send_signal(signal.SIGKILL)  # Abhed dies as hard as anything can
        abhed.wait()
        left = [] if _wait(lambda: not _marked(marker)) else _marked(marker)  # judged by the host's process table
        for pid in left:  # a failure leaves nothing behind either
            os.kill(pid, signal.SIGKILL)
    assert left == []


# -- The answer runs nothing in Abhed ---------------------------------------------------------


class _Payload:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _pickled_payload(marker: str):
    return _Payload(f"touch {marker}")


def _send(crafted: bytes):
    """Write `crafted` down the answer pipe, wherever it is, and end: a child that writes its own answer."""
    for fd in range(3, 1024):  # (a test process may hold many descriptors, so the pipe's number may be high)
        try:
            os.write(fd, crafted)
        except OSError:
            pass
    os._exit(0)


def _raw_payload(marker: str):
    _send(f"cbuiltins\neval\n(V__import__('os').system('touch {marker}')\ntR.".encode())


@pytest.mark.parametrize("attack", [_pickled_payload, _raw_payload])
def test_an_answer_that_would_run_code_in_abhed_is_refused(tmp_path, attack):
    marker = tmp_path / "ran-in-abhed"
    with pytest.raises(isolate.Exceeded, match=r"^its answer could not be read \(UnpicklingError: (posix\.system|"
                                               r"builtins\.eval) is not among what a parser sends back\), as if the "
                                               r"file had taken control of the parser$"):
        isolate.run(attack, str(marker), bounds=LONG)
    assert not marker.exists()  # judged on the host


def _exit_abhed():
    _send(pickle.dumps((False, SystemExit(0))))


def _wrong_type():
    return ["not", "an", "image"]


def test_an_answer_may_not_stop_abhed_nor_be_of_another_type():
    with pytest.raises(isolate.Exceeded, match=r"builtins\.SystemExit is not among what a parser sends back"):
        isolate.run(_exit_abhed, bounds=LONG)  # (False, SystemExit()): re-raised here it would end Abhed
    with pytest.raises(isolate.Exceeded, match=r"^its answer was a list, not what the parser returns, as if the file "
                                               r"had taken control of the parser$"):
        isolate.run(_wrong_type, bounds=LONG, returns=images.Prepared)


# -- Through the read tool: the decode function itself compromised ----------------------------


def _hostile_prepare(data, max_pixels, max_bytes):
    """Pillow's decode, taken over: it tries to leave a file, read the user's key, call home."""
    home = os.environ["HOME"]
    notes = (attacks.outcome(lambda: open(os.path.join(home, "planted"), "w").write("x")),
             attacks.outcome(lambda: open(os.path.join(home, ".ssh", "id_ed25519")).read()),
             attacks.outcome(lambda: socket.create_connection(("127.0.0.1", int(os.environ["ABHED_TEST_PORT"])),
                                                              timeout=5)))
    return images.Prepared(url="data:image/png;base64,", format="PNG", original=(1, 1), sent=(1, 1),
                           sent_format="PNG", notes=notes)


def test_the_read_tool_s_decoder_is_confined(tools, ws, tmp_path, monkeypatch):
    from abhed.files.images import ImageLimits
    home = tmp_path / "user-home"
    secret = _user_key(home)
    tools.ctx.vision = ImageLimits()
    (ws / "shot.png").write_bytes(image("PNG", 64, 48))
    monkeypatch.setattr(images, "_prepare", _hostile_prepare)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("ABHED_TEST_PORT", str(listener.getsockname()[1]))
        result = tools("read", path=str(ws / "shot.png"))
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert not result.is_error, result.content
    assert "PermissionError errno 1" in result.content  # the hostile decode did run, confined
    assert secret.read_text() not in result.content and not (home / "planted").exists()


# -- Fail closed ------------------------------------------------------------------------------


def _parsed():
    return "parsed"


def test_where_the_child_cannot_be_confined_nothing_is_parsed(monkeypatch, tools, ws):
    monkeypatch.setattr(platform, "machine", lambda: "sparc64")  # no allowlist for it: the filter cannot be made
    with pytest.raises(isolate.Unconfined, match=r"^BackendUnavailable: no seccomp filter for a decoder on machine "
                                                 r"type 'sparc64'"):
        isolate.run(_parsed, bounds=LONG)
    (ws / "spec.pdf").write_bytes(text_pdf(["Register map"]))
    err = tools.err("read", path=str(ws / "spec.pdf"))
    assert (f"{ws / 'spec.pdf'} is a PDF, but Abhed decodes images and PDFs only in a confined process, and this "
            "host refused the confinement (BackendUnavailable: no seccomp filter for a decoder on machine type "
            "'sparc64'") in err
    assert "so nothing was decoded" in err and f"pdftotext {ws / 'spec.pdf'} - | head -200" in err


def _imports(name: str):
    import importlib
    return importlib.import_module(name)


def test_the_confined_child_imports_nothing_and_says_which_module_it_lacked():
    name = "wave"  # a standard module nothing here loads
    assert name not in sys.modules
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'wave': the confined decoder loads no module "
                                                  r"that Abhed did not load before it started$"):
        isolate.run(_imports, name, bounds=LONG)
    assert name not in sys.modules


# A process that has loaded only what `abhed tool read` loads before it decodes: whatever the
# confined child lacks then (a module imported lazily, a syscall the filter refuses) shows.
READER = """
import pickle, sys
from abhed.files import images, pdf
corpus = pickle.load(open(sys.argv[1], "rb"))
limits = images.ImageLimits()
def outcome(read, *args):
    try:
        return read(*args)
    except Exception as exc:
        return (type(exc).__name__, str(exc))
answers = {name: outcome(pdf.read_pages, data, 1, 10, 100_000, limits) for name, data in corpus["pdfs"].items()}
answers |= {name: outcome(images.prepare, data, limits) for name, data in corpus["pictures"].items()}
sys.stdout.buffer.write(pickle.dumps(answers))
"""


def test_every_decoder_path_answers_the_same_confined_as_in_abhed_s_own_process(tmp_path):
    """What pdf.load and images.pillow import ahead is enough, and the filter allows what decoding needs."""
    import decoder_corpus
    corpus = {"pdfs": decoder_corpus.pdfs(), "pictures": decoder_corpus.pictures()}
    (tmp_path / "corpus").write_bytes(pickle.dumps(corpus))
    run = subprocess.run([sys.executable, "-c", READER, str(tmp_path / "corpus")], capture_output=True, timeout=600)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    confined = pickle.loads(run.stdout)
    limits = images.ImageLimits()
    for name, data in corpus["pdfs"].items():
        assert confined[name] == pdf._read(data, 1, 10, 100_000, limits), name
    for name, data in corpus["pictures"].items():
        assert confined[name] == images._prepare(data, limits.max_pixels, limits.max_bytes), name
    # the corpus takes the paths it is meant to: every PDF gives text or an image
    assert all(page.text or page.images for name in corpus["pdfs"] for page in confined[name].pages), confined


# -- What the parent loads ahead, checked against the libraries' own source ---------------------

# Modules pypdf or Pillow import inside a function, that Abhed does not load, and why the
# confined child never needs them (it would then fail as if they were not installed).
NOT_NEEDED = {
    "brotli": "BrotliDecode: an optional package Abhed does not ship",
    "fontTools.cffLib": "CFF font programs: only with the optional fontTools, which Abhed does not ship",
    "PIL.ImageCms": "conversion from or to LAB: no decoder here yields a LAB image",
    "PIL.ImageFilter": "Image.filter: never called",
    "PIL.ImageQt": "Qt images: never made", "PIL.ImageShow": "Image.show: never called",
    "defusedxml": "Image.getxmp: never called",
    "mmap": "ImageFile maps files opened by name; the decoders get bytes",
    "PIL.BmpImagePlugin": "Image.preinit's: BMP is no format Abhed decodes (refused in the child)",
    "PIL.PpmImagePlugin": "Image.preinit's; pypdf opens PPM only from jbig2dec's output, and the child runs nothing",
}
# The Pillow modules the decoders run (Image.open, convert, resize, save; the plugins).
PILLOW_RUN = ("PIL.Image", "PIL.ImageFile", "PIL.PngImagePlugin", "PIL.JpegImagePlugin", "PIL.GifImagePlugin",
              "PIL.WebPImagePlugin", "PIL.MpoImagePlugin", "PIL.TiffImagePlugin", "PIL.Jpeg2KImagePlugin")


def _is_module(name: str) -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a parent package that is not installed
        return False


def _function_imports(path: Path, module: str) -> set[str]:
    """The modules `path` (module `module`) imports inside a function body."""
    import ast
    found = set()
    for function in ast.walk(ast.parse(path.read_text())):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                parts = module.split(".")
                package = parts[: len(parts) - node.level + (path.name == "__init__.py")]
                base = ".".join([*package, node.module or ""]).strip(".") if node.level else str(node.module)
                # `from . import X`: X is a module of its own when it can be found as one
                found |= {f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base for a in node.names}
    return found


def _modules_of(package: str) -> dict[Path, str]:
    root = Path(__import__(package).__file__).parent
    return {path: ".".join((package, *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
            for path in root.rglob("*.py")}


def test_every_module_the_decoders_import_lazily_is_loaded_before_the_fork():
    import importlib.util
    import json
    loaded = subprocess.run([sys.executable, "-c", "import json, sys; from abhed.files import pdf; pdf.load(True); "
                             "print(json.dumps(sorted(sys.modules)))"], capture_output=True, text=True, check=True)
    wanted = {name for path, module in _modules_of("pypdf").items() for name in _function_imports(path, module)}
    for module in PILLOW_RUN:
        wanted |= _function_imports(Path(importlib.util.find_spec(module).origin), module)
    assert {"pypdf.filters", "pypdf._crypt_providers._fallback", "PIL.MpoImagePlugin"} <= wanted  # the scan works
    assert sorted(wanted - set(json.loads(loaded.stdout)) - set(NOT_NEEDED)) == []
    assert sorted(set(NOT_NEEDED) - wanted) == []  # no stale excuse


def test_every_codec_pypdf_names_is_looked_up_before_the_fork():
    import codecs
    import re
    import pypdf
    named = {match for path in Path(pypdf.__file__).parent.rglob("*.py")
             for match in re.findall(r"\.(?:de|en)code\(\s*\"([\w-]+)\"", path.read_text())}
    assert {"utf-16-be", "charmap"} <= named
    assert {codecs.lookup(name).name for name in named} <= {codecs.lookup(name).name for name in pdf.CODECS}


@pytest.mark.parametrize("fault, said", [
    ("filter", r"seccomp: Invalid argument"),  # a program the kernel refuses (one instruction, an unknown opcode)
    ("signal", r"PR_SET_PDEATHSIG: Invalid argument"),  # a parent-death signal the kernel refuses
])
def test_a_step_the_kernel_refuses_stops_the_parse(monkeypatch, fault, said):
    from types import SimpleNamespace
    from abhed.common import confine
    if fault == "filter":
        monkeypatch.setattr(confine, "decoder_filter", lambda pid: b"\xff\xff\x00\x00\x00\x00\x00\x00")
    else:
        monkeypatch.setattr(confine, "signal", SimpleNamespace(SIGKILL=1000))
    with pytest.raises(isolate.Unconfined, match=rf"^OSError: \[Errno 22\] {said}$"):
        isolate.run(_parsed, bounds=LONG)


def test_a_decoder_s_own_complaint_still_crosses_the_pipe():
    """Pillow's and pypdf's exceptions are among what an answer may carry: a damaged file is told as one."""
    with pytest.raises(images.ImageError, match=r"^Pillow cannot decode it as a PNG, JPEG, GIF or WebP image: "):
        images.prepare(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, images.ImageLimits())
    with pytest.raises(pdf.PdfError, match=r"^pypdf could not parse it \((PdfReadError|PdfStreamError): "):
        pdf.read_pages(b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >> endobj\n", 1, 1, 1000, None)


def _long_name():
    _send(b"c" + b"m" * 400 + b"\nX\n.")  # a global of a 400-character module: the refusal quotes it


def test_a_refused_answer_is_told_in_bounded_words():
    with pytest.raises(isolate.Exceeded) as refused:
        isolate.run(_long_name, bounds=LONG)
    assert "its answer could not be read (" in refused.value.what
    assert len(refused.value.what) == len("its answer could not be read (UnpicklingError: ") + 200 + len(
        "), as if the file had taken control of the parser")


def test_where_the_child_cannot_be_confined_no_image_is_decoded(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "sparc64")
    with pytest.raises(images.ImageError, match=r"^Abhed decodes images and PDFs only in a confined process, and "
                                                r"this host refused the confinement \(BackendUnavailable: no seccomp "
                                                r"filter for a decoder on machine type 'sparc64'"):
        images.prepare(image("PNG", 64, 48), images.ImageLimits())
