"""The repository map (agent/repomap.py, files/outline.py): ranking, the token budget, the cache by
content hash, and a hostile workspace (symlinks out, FIFOs, huge, binary, deep, non-UTF-8 names)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from abhed.agent import repomap
from abhed.files import outline
from abhed.session.config import RepoMapConfig


def opener(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def make(ws: Path, cache: Path | None, budget: int = 2048, seconds: float = 30.0) -> repomap.RepoMap:
    return repomap.build(ws, opener, [".git", "node_modules"], cache, budget, seconds)


def test_each_language_is_outlined(tmp_path):
    files = {"a.py": "class A:\n    def f(self, x: int) -> int:\n        return x\n",
             "b.c": "struct s { int a; };\nstatic int add(int a, int b)\n{\n  return a + b;\n}\nint proto(void);\n",
             "c.js": "export function jsf(a) { return a }\nconst arrow = (x) => x;\n",
             "d.ts": "export interface Shape { area(): number }\nexport class Sq { side(): number { return 1 } }\n",
             "e.go": "package m\n\ntype T struct{ A int }\n\nfunc (t *T) Get(k string) error { return nil }\n",
             "f.rs": "pub struct P;\nimpl P {\n    pub fn new(a: u32) -> Self { P }\n}\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    text = make(tmp_path, None).text
    for line in ("  2: def f(self, x: int) -> int", "  2: static int add(int a, int b)", "  6: int proto(void)",
                 "  1: function jsf(a)", "  2: const arrow = (x) =>", "  1: interface Shape",
                 "    2: side(): number", "  3: type T struct", "  5: func (t *T) Get(k string) error",
                 "    3: pub fn new(a: u32) -> Self"):
        assert line in text, line


def test_the_most_referenced_file_comes_first(tmp_path):
    (tmp_path / "zz_core.py").write_text("def compute_total(x):\n    return x\n")
    (tmp_path / "aa_leaf.py").write_text("def unused_helper():\n    pass\n")
    for i in range(3):
        (tmp_path / f"user{i}.py").write_text(f"from zz_core import compute_total\ndef use{i}():\n"
                                              "    return compute_total(1)\n")
    text = make(tmp_path, None).text
    assert text.index("zz_core.py") < text.index("user0.py") < text.index("aa_leaf.py")


def test_a_name_defined_everywhere_weighs_little(tmp_path):
    for i in range(4):  # main defined in four files, named in none else
        (tmp_path / f"tool{i}.py").write_text("def main():\n    pass\n")
    (tmp_path / "lib.py").write_text("def parse_config():\n    pass\n")
    (tmp_path / "app.py").write_text("from lib import parse_config\nmain = parse_config\n")
    ranked = make(tmp_path, None).text.split("\n")
    assert ranked[1] == "lib.py"


@pytest.mark.parametrize("budget", [256, 512, 1024, 2048])
def test_the_map_stays_within_its_budget(tmp_path, budget):
    for i in range(120):
        (tmp_path / f"mod{i:03}.py").write_text("".join(f"def function_number_{j}_of_module_{i}(alpha, beta, gamma):"
                                                        f"\n    pass\n" for j in range(15)))
    made = make(tmp_path, None, budget)
    assert made.text and made.tokens == repomap.tokens(made.text) <= budget
    assert 0 < made.shown < 120
    assert f"[map: {made.shown} of 120 source files shown, within {budget} tokens" in made.text
    assert "[3 more definitions]" in made.text or budget < 512  # a file shows LINES_PER_FILE of its 15...
    assert "more definitions]" in made.text  # ...or fewer, to fit


def test_a_budget_too_small_for_any_file_gives_no_map(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    pass\n")
    assert make(tmp_path, None, budget=64).text == ""


def test_the_cache_spares_a_second_session_the_parse_and_a_changed_file_is_parsed_again(tmp_path):
    ws, cache = tmp_path / "ws", tmp_path / "cache"
    ws.mkdir()
    for i in range(5):
        (ws / f"m{i}.py").write_text(f"def f{i}():\n    pass\n")
    first = make(ws, cache)
    assert (first.parsed, first.cached) == (5, 0)
    second = make(ws, cache)
    assert (second.parsed, second.cached) == (0, 5)
    assert second.text == first.text
    (ws / "m0.py").write_text("def renamed_function():\n    pass\n")
    third = make(ws, cache)
    assert (third.parsed, third.cached) == (1, 4)
    assert "renamed_function" in third.text and "def f0" not in third.text


def test_a_corrupt_or_hostile_cache_entry_is_parsed_again(tmp_path):
    ws, cache = tmp_path / "ws", tmp_path / "cache"
    ws.mkdir()
    (ws / "m.py").write_text("def real():\n    pass\n")
    make(ws, cache)
    [entry] = list(cache.rglob("*.json"))
    for bad in ("not json", '[[["x", 0, "n", "s"]], []]', '{"a": 1}', '[[[1, 0, "n", "s"]], [3]]'):
        entry.write_text(bad)
        again = make(ws, cache)
        assert (again.parsed, again.cached) == (1, 0) and "def real()" in again.text


def test_hostile_files_are_left_out_and_nothing_outside_is_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("def SECRET_OUTSIDE():\n    pass\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "ok.py").write_text("def fine():\n    pass\n")
    (ws / "link.py").symlink_to(outside / "secret.py")
    (ws / "linkdir").symlink_to(outside)
    os.mkfifo(ws / "fifo.py")
    (ws / "huge.c").write_bytes(b"int f(void);\n" * (repomap.MAX_FILE_BYTES // 13 + 10))
    (ws / "binary.py").write_bytes(b"def bin():\n\0\0\0" + os.urandom(1000))
    deep = ws
    for _ in range(60):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "deep.py").write_text("def deep_one():\n    pass\n")
    (ws / b"caf\xe9.py".decode("utf-8", "surrogateescape")).write_text("def latin1_name():\n    pass\n")
    (ws / "esc\x1b[31m.py").write_text("def escaped(\x1b]0;x\x07):\n    pass\n")
    made = make(ws, tmp_path / "cache")
    assert "SECRET_OUTSIDE" not in made.text
    assert "def fine()" in made.text and "deep_one" in made.text
    assert "caf\\udce9.py" in made.text or "caf\\xe9.py" in made.text  # shown escaped, never raw
    assert "\x1b" not in made.text and "esc\\x1b[31m.py" in made.text
    assert made.skipped == {"binary": 1, "over 512 KiB": 1}
    assert "not outlined: 1 binary; 1 over 512 KiB" in made.text


def test_a_parse_that_goes_over_its_bound_costs_only_that_file(tmp_path, monkeypatch):
    (tmp_path / "good.py").write_text("def good():\n    pass\n")
    (tmp_path / "slow.py").write_text("def slow():\n    pass\n")
    real = outline.outline_batch

    def hang_on_slow(items, *args):
        if any(b"def slow" in source for _, source in items):
            while True:
                pass
        return real(items, *args)
    monkeypatch.setattr(outline, "outline_batch", hang_on_slow)
    monkeypatch.setattr(repomap, "CHILD_SECONDS", 1.0)
    made = make(tmp_path, tmp_path / "cache")
    assert "def good()" in made.text and "slow" not in made.text.split("[map:")[0]
    assert made.skipped == {"over the parser's time or memory bound": 1}


def test_the_time_bound_stops_the_map_and_says_so(tmp_path):
    for i in range(3):
        (tmp_path / f"m{i}.py").write_text(f"def f{i}():\n    pass\n")
    ticks = iter(range(0, 10_000))
    made = repomap.build(tmp_path, opener, [], None, 2048, 2.5, clock=lambda: next(ticks))
    assert made.text == "" or "within the time" in made.text
    assert any("time bound" in why for why in made.skipped)


def test_ignored_and_excluded_files_are_not_mapped(tmp_path):
    (tmp_path / ".gitignore").write_text("build/\n")
    for where in ("build", "node_modules", "src"):
        (tmp_path / where).mkdir()
        (tmp_path / where / "m.py").write_text(f"def in_{where}():\n    pass\n")
    text = make(tmp_path, None).text
    assert "in_src" in text and "in_build" not in text and "in_node_modules" not in text


@pytest.mark.parametrize("enabled,window,expected", [("auto", 32768, True), ("auto", 32769, False),
                                                     ("on", 200_000, True), ("off", 8192, False)])
def test_on_by_default_for_windows_of_32k_or_less(enabled, window, expected):
    assert repomap.wanted(RepoMapConfig(enabled=enabled), window) is expected


def test_the_default_budget_is_a_sixteenth_of_the_window():
    assert repomap.budget_of(RepoMapConfig(), 32768) == 2048
    assert repomap.budget_of(RepoMapConfig(), 8192) == 512
    assert repomap.budget_of(RepoMapConfig(), 1_000_000) == 4096
    assert repomap.budget_of(RepoMapConfig(tokens=300), 32768) == 300


def test_a_swapper_racing_the_walk_and_the_reads_never_brings_an_outside_file_in(tmp_path):
    """The attack: a job keeps swapping a source file and its directory for symlinks to a secret
    outside while maps are made. Judged by what the map holds: never a name defined outside."""
    import ctypes
    import threading
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "pkg").mkdir(parents=True)
    outside.mkdir()
    (outside / "mod.py").write_text("def OUTSIDE_SECRET_FN():\n    pass\n")
    (ws / "pkg" / "mod.py").write_text("def inside_fn():\n    pass\n")
    (ws / "top.py").write_text("def top_fn():\n    pass\n")
    (ws / "link").symlink_to(outside)
    (ws / "alias.py").symlink_to(outside / "mod.py")
    libc = ctypes.CDLL(None, use_errno=True)
    stop = threading.Event()

    def swap() -> None:  # renameat2(RENAME_EXCHANGE): the directory and the file trade places with links out
        while not stop.is_set():
            libc.renameat2(-100, str(ws / "pkg").encode(), -100, str(ws / "link").encode(), 2)
            # (not through pkg/: half the time that is the link, and the swap itself would fetch the file in)
            libc.renameat2(-100, str(ws / "top.py").encode(), -100, str(ws / "alias.py").encode(), 2)
    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        maps = [make(ws, None).text for _ in range(30)]
    finally:
        stop.set()
        swapper.join()
    assert not any("OUTSIDE_SECRET_FN" in text for text in maps)
    assert (outside / "mod.py").read_text() == "def OUTSIDE_SECRET_FN():\n    pass\n"  # nothing outside changed
