"""read (spec §2): one test per semantic bullet and per error case."""

from __future__ import annotations

import os
import struct
import tracemalloc
import zlib
from pathlib import Path

import pytest

from abhed.session.store import digest
from abhed_testing import abhed


def test_output_is_cat_n_style(tools, ws):
    (ws / "a.py").write_text("import os\n\tx = 1\n")
    assert tools.ok("read", path=str(ws / "a.py")) == "     1\timport os\n     2\t\tx = 1"


def test_default_limit_is_2000_with_the_spec_truncation_note(tools, ws):
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 8432)))
    out = tools.ok("read", path=str(ws / "big.txt"))
    lines = out.split("\n")
    assert lines[1999] == "  2000\tline 2000"
    assert lines[-1] == "[truncated: showing lines 1-2000 of 8431. Use offset/limit to read more.]"
    assert len(lines) == 2001


def test_offset_and_limit_select_a_window(tools, ws):
    (ws / "f.txt").write_text("".join(f"{i}\n" for i in range(1, 101)))
    out = tools.ok("read", path=str(ws / "f.txt"), offset=10, limit=3)
    assert out == "    10\t10\n    11\t11\n    12\t12\n[truncated: showing lines 10-12 of 100. Use offset/limit to read more.]"


def test_window_reaching_the_end_after_an_offset_still_says_what_is_shown(tools, ws):
    (ws / "f.txt").write_text("a\nb\nc\n")
    out = tools.ok("read", path=str(ws / "f.txt"), offset=2)
    assert out.endswith("[truncated: showing lines 2-3 of 3. Use offset/limit to read more.]")


def test_whole_file_has_no_note(tools, ws):
    (ws / "f.txt").write_text("a\nb")  # no final newline: still two lines
    assert tools.ok("read", path=str(ws / "f.txt")) == "     1\ta\n     2\tb"


def test_long_lines_are_cut_individually(tools, ws):
    (ws / "f.txt").write_text("x" * 2000 + "\n" + "y" * 2001 + "\n" + "é" * 5000 + "\n")
    out = tools.ok("read", path=str(ws / "f.txt")).split("\n")
    assert out[0] == "     1\t" + "x" * 2000
    assert out[1] == "     2\t" + "y" * 2000 + "[...line truncated]"
    assert out[2] == "     3\t" + "é" * 2000 + "[...line truncated]"  # characters, not bytes


def test_empty_file(tools, ws):
    (ws / "empty").write_bytes(b"")
    assert tools.ok("read", path=str(ws / "empty")) == "[file exists but is empty]"


def test_offset_past_the_end_says_how_many_lines(tools, ws):
    (ws / "f.txt").write_text("".join(f"{i}\n" for i in range(120)))
    err = tools.err("read", path=str(ws / "f.txt"), offset=500)
    assert "offset 500 is past the end" in err and str(ws / "f.txt") in err
    assert "it has 120 lines" in err and "from 1 to 120" in err and "omit offset" in err


def test_the_read_is_recorded_with_size_mtime_and_hash(tools, ws):
    path = ws / "f.txt"
    path.write_text("hello\n")
    tools.ok("read", path=str(path), limit=1)
    record = tools.session.last_read(path)
    st = path.stat()
    assert (record.size, record.mtime_ns, record.sha256) == (st.st_size, st.st_mtime_ns, digest(b"hello\n"))


def test_a_failed_read_is_not_recorded(tools, ws):
    (ws / "f.txt").write_text("a\n")
    tools.err("read", path=str(ws / "f.txt"), offset=9)
    assert tools.session.last_read(ws / "f.txt") is None


def _png(w: int, h: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))


@pytest.mark.parametrize("data, name, detail", [
    (_png(800, 600), "PNG image", "800x600 pixels"),
    (b"GIF89a" + struct.pack("<HH", 16, 32) + b"\x00" * 20, "GIF image", "16x32 pixels"),
    (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
     b"\xff\xc0\x00\x11\x08\x00\x40\x00\x80\x03" + b"\x00" * 20, "JPEG image", "128x64 pixels"),
])
def test_images_are_described_and_refused(tools, ws, data, name, detail):
    (ws / "pic").write_bytes(data)
    err = tools.err("read", path=str(ws / "pic"))
    assert name in err and detail in err and "cannot show the image" in err


def test_pdf_is_described_and_refused_with_a_way_to_get_text(tools, ws):
    (ws / "doc.pdf").write_bytes(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n")
    err = tools.err("read", path=str(ws / "doc.pdf"))
    assert "PDF document" in err and "PDF version 1.7" in err and "pdftotext" in err


@pytest.mark.parametrize("data, name", [
    (b"\x7fELF\x02\x01\x01" + b"\x00" * 60, "ELF executable"),
    (b"PK\x03\x04" + b"\x00" * 30, "zip archive"),
    (b"\x1f\x8b\x08\x00" + b"\x00" * 30, "gzip archive"),
    (b"SQLite format 3\x00" + b"\x00" * 80, "SQLite database"),
    (b"some text\x00with a NUL", "binary data (contains NUL bytes)"),
])
def test_binary_files_are_refused_naming_the_type(tools, ws, data, name):
    (ws / "blob").write_bytes(data)
    err = tools.err("read", path=str(ws / "blob"))
    assert name in err and str(ws / "blob") in err and "bash" in err
    assert "\x00" not in err


def test_utf16_is_refused_with_a_conversion_command(tools, ws):
    (ws / "w.txt").write_bytes("hi".encode("utf-16"))
    err = tools.err("read", path=str(ws / "w.txt"))
    assert "UTF-16" in err and "iconv" in err


def test_directory_suggests_glob(tools, ws):
    (ws / "src").mkdir()
    err = tools.err("read", path=str(ws / "src"))
    assert f"{ws / 'src'} is a directory" in err and "glob" in err


def test_missing_file_suggests_the_closest_paths_and_glob(tools, ws):
    (ws / "src" / "auth").mkdir(parents=True)
    (ws / "src" / "auth" / "index.ts").write_text("x")
    (ws / "src" / "author.ts").write_text("x")
    err = tools.err("read", path=str(ws / "src" / "auth.ts"))
    assert err.startswith(f"File not found: {ws / 'src' / 'auth.ts'}.")
    assert "Did you mean" in err and str(ws / "src" / "author.ts") in err
    assert 'glob (e.g. pattern "**/auth*")' in err


def test_missing_file_in_a_missing_directory_still_suggests(tools, ws):
    (ws / "lib").mkdir()
    (ws / "lib" / "util.py").write_text("x")
    err = tools.err("read", path=str(ws / "libs" / "util.py"))
    assert str(ws / "lib" / "util.py") in err


def test_missing_file_with_nothing_similar_says_so(tools, ws):
    err = tools.err("read", path=str(ws / "zzzz.qqq"))
    assert "Nothing with a similar name exists" in err and "glob" in err


def test_non_utf8_is_shown_with_replacement_characters_and_a_note(tools, ws):
    (ws / "latin.txt").write_bytes(b"caf\xe9\nok\n")
    out = tools.ok("read", path=str(ws / "latin.txt"))
    assert "     1\tcaf\ufffd" in out and "not valid UTF-8" in out and "U+FFFD" in out


def test_crlf_is_not_shown_and_is_announced(tools, ws):
    (ws / "dos.txt").write_bytes(b"one\r\ntwo\r\n")
    out = tools.ok("read", path=str(ws / "dos.txt"))
    assert "\r" not in out
    assert out.startswith("     1\tone\n     2\ttwo\n") and "CRLF" in out


def test_bom_is_not_shown_and_is_announced(tools, ws):
    (ws / "bom.txt").write_bytes(b"\xef\xbb\xbfhello\n")
    out = tools.ok("read", path=str(ws / "bom.txt"))
    assert out.startswith("     1\thello\n") and "byte-order mark" in out


def test_output_is_bounded_in_characters_too(make_tools, ws):
    tools = make_tools(max_output_chars=50_000)
    (ws / "wide.txt").write_text(("z" * 1999 + "\n") * 2000)
    out = tools.ok("read", path=str(ws / "wide.txt"))
    assert len(out) <= 50_000 + 200
    assert out.endswith("of 2000. Use offset/limit to read more.]")
    last_shown = int(out.split("\n")[-2].split("\t")[0])
    assert f"showing lines 1-{last_shown} of 2000" in out


def test_fifo_is_refused_without_blocking(tools, ws):
    os.mkfifo(ws / "pipe")
    err = tools.err("read", path=str(ws / "pipe"))
    assert "named pipe" in err and "not a regular file" in err


def test_permission_denied_says_mode_and_owner(ws, home):
    secret = ws / "secret.txt"
    secret.write_text("x\n")
    secret.chmod(0o000)
    proc = abhed("tool", "read", f'{{"path": "{secret}"}}', "--workspace", str(ws), obey_permissions=True)
    assert proc.returncode == 0, proc.stderr
    assert f"Permission denied reading {secret}" in proc.stdout and "mode 0000" in proc.stdout


def test_large_file_window_is_read_without_loading_the_file(tools, ws):
    """A file over the hashing limit is streamed: memory stays near one chunk, not the file size."""
    path = ws / "huge.log"
    line = b"0123456789" * 7 + b"abcdefghi\n"
    with open(path, "wb") as f:
        block = line * 10_000
        for _ in range(100):  # 80 MB, over session.HASH_LIMIT
            f.write(block)
    tracemalloc.start()
    out = tools.ok("read", path=str(path), offset=500_000, limit=1000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert out.endswith("[truncated: showing lines 500000-500999 of 1000000. Use offset/limit to read more.]")
    assert peak < 20 * 1024 * 1024, f"peak {peak} bytes"
    record = tools.session.last_read(path)
    assert record.sha256 is None and record.size == path.stat().st_size


def test_line_index_gives_the_same_windows_as_a_full_scan(tools, ws, monkeypatch):
    """Files over the hashing limit are indexed on first read; later reads start from a mark."""
    import random

    import abhed.files.lines
    import abhed.tools.read

    monkeypatch.setattr(abhed.tools.read, "HASH_LIMIT", 100)
    monkeypatch.setattr(abhed.files.lines, "CHUNK", 37)  # many marks, some inside lines
    rng = random.Random(3)
    text = "".join("x" * rng.randint(0, 30) + ("\r" if rng.random() < 0.1 else "") + "\n" for _ in range(400)) + "tail"
    path = ws / "big.txt"
    path.write_text(text)
    first = tools.ok("read", path=str(path), offset=1, limit=5)
    index_dir = tools.settings.home / "cache" / "line-index"
    assert len(list(index_dir.glob("*.json"))) == 1
    for _ in range(60):
        offset, limit = rng.randint(1, 401), rng.randint(1, 50)
        indexed = tools("read", path=str(path), offset=offset, limit=limit).content
        monkeypatch.setattr(abhed.tools.read, "HASH_LIMIT", 10**9)  # small-file path: no index
        plain = tools("read", path=str(path), offset=offset, limit=limit).content
        monkeypatch.setattr(abhed.tools.read, "HASH_LIMIT", 100)
        assert indexed == plain, (offset, limit)
    assert "of 401" in first
    assert "it has 401 lines" in tools.err("read", path=str(path), offset=402)


def test_a_changed_file_is_never_served_from_a_stale_index(tools, ws, monkeypatch):
    import abhed.tools.read

    monkeypatch.setattr(abhed.tools.read, "HASH_LIMIT", 10)
    path = ws / "log.txt"
    path.write_text("".join(f"{i}\n" for i in range(100)))
    assert "of 100." in tools.ok("read", path=str(path), offset=50, limit=1)
    with open(path, "a") as f:
        f.write("".join(f"{i}\n" for i in range(100, 150)))
    out = tools.ok("read", path=str(path), offset=120, limit=1)
    assert out.startswith("   120\t119") and "of 150." in out
