"""abhed/session/_seed.c, the seed's fast path: the Seeder takes exactly what it takes without it
(the Python loop in seed.py), on real repositories whose index holds every case the loop judges,
with a real census (the git guard's start walk) and the change set's names."""

from __future__ import annotations

import os
import struct
import time
from hashlib import sha1
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abhed.session import gitindex, seed, treeio
from sandbox import census as census_module
from sandbox.gitguard import GitGuard

from test_checkpoint_seed import age, commit, git, no_user_config, repository  # noqa: F401 (a fixture, and the repository)

MODULE = seed._native
NATIVE = MODULE.take if MODULE is not None else None
native = pytest.mark.skipif(NATIVE is None and not os.environ.get("CI"),
                            reason="the seed's native loops are not built (setup.py: no C compiler); CI builds it")


def test_the_seed_s_native_loops_are_built_where_ci_runs() -> None:
    if not os.environ.get("CI"):
        pytest.skip("only CI must have it")
    assert seed._native is not None, "abhed/session/_seed.c was not built: run scripts/setup"


def every_case(ws: Path) -> None:
    """A repository whose index holds each case the seed judges (sandbox.census records for most)."""
    repository(ws)
    (ws / "src" / "lib" / "ok.c").write_text("int ok;\n")
    (ws / "group.txt").write_text("g\n")
    os.chmod(ws / "group.txt", 0o664)
    (ws / "setuid").write_text("s\n")
    os.chmod(ws / "setuid", 0o4755)
    (ws / "big.bin").write_bytes(b"b" * 3000)  # over max_file_bytes below
    (ws / ".hidden").write_text("a name starting with a dot\n")
    (ws / "src" / ".config").write_text("a component starting with a dot\n")
    (ws / "conv").mkdir()
    (ws / "conv" / ".gitattributes").write_text("*.txt text eol=crlf\n")  # a converting scope
    (ws / "conv" / "note.txt").write_text("converted\n")
    (ws / "pair").mkdir()
    (ws / "pair" / "a.txt").write_text("one inode\n")
    os.link(ws / "pair" / "a.txt", ws / "pair" / "b.txt")  # two links: no record
    (ws / "touched").mkdir()
    (ws / "touched" / "x.c").write_text("in a directory the change set names\n")
    (ws / "named.c").write_text("named by the change set\n")
    (ws / "assumed.c").write_text("int assumed;\n")
    commit(ws)
    (ws / "later.c").write_text("later\n")
    git(ws, "add", "-N", "later.c")  # intent to add: an extended flag that makes its entry say nothing
    git(ws, "update-index", "--assume-unchanged", "assumed.c")  # a flag that makes its stat say nothing
    (ws / "staged.c").write_text("int staged;\n")
    git(ws, "add", "staged.c")  # its blob is loose, in no pack
    then = time.time() - 100
    os.utime(ws / "staged.c", (then, then))
    git(ws, "update-index", "-q", "--refresh")
    (ws / "notes.md").write_text("LINE 1\nLINE 2\n")  # changed before the session, same size
    (ws / "run.sh").chmod(0o644)  # its mode changed: git's mode differs
    (ws / "racy.c").write_text("int ok;\n")  # src/lib/ok.c's blob: in the pack
    git(ws, "add", "racy.c")  # now: its mtime is within a second of the index's


def seeded(ws: Path, store: Path, *, touched: set[str], max_file_bytes: int, fast: bool,
           monkeypatch: pytest.MonkeyPatch) -> seed.Seeded:
    found = census_module.Census()
    GitGuard.start(ws, census=found, use_inotify=False)
    assert found.dirs is not None
    by_native: list[bytes] = []

    def take(entries, known, files_of, touched, scopes, limit, fresh, max_bytes, kind, taken, needed, modes):
        rest = NATIVE(entries, known, files_of, touched, scopes, limit, fresh, max_bytes, kind, taken, needed, modes)
        by_native.extend(taken)
        return rest

    monkeypatch.setattr(seed, "_native", SimpleNamespace(**{**vars(MODULE), "take": take}) if fast else None)
    with treeio.Tree(str(ws)) as tree:
        seeder = seed.Seeder(tree, store, time.time_ns() + 10**12, max_file_bytes, 1 << 34,
                             seed.Census(found.dirs, touched))
        seeder._link = lambda packs: len(packs)  # type: ignore[method-assign]  # (what is linked is not the question)
        result = seeder.seed()
    result.by_native = by_native  # type: ignore[attr-defined]  # what the fast path took itself
    return result


def judged(result: seed.Seeded) -> tuple:
    return (result.entries, result.modes, result.untaken, result.why_not)


@native
@pytest.mark.parametrize("version", [2, 3, 4])
@pytest.mark.parametrize("settled", [True, False])  # False: every file was just made, so each is fresh
def test_the_fast_path_takes_exactly_what_the_python_loop_takes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, settled: bool) -> None:
    if settled:
        monkeypatch.setattr(gitindex, "RACY_S", -10)
    ws = tmp_path / "ws"
    every_case(ws)
    git(ws, "update-index", "--index-version", str(version))
    kw = dict(touched={"named.c", "touched"}, max_file_bytes=2048, monkeypatch=monkeypatch)
    python = seeded(ws, tmp_path / "a", fast=False, **kw)
    fast = seeded(ws, tmp_path / "b", fast=True, **kw)
    assert judged(fast) == judged(python)
    if settled:  # the cases are real: some taken, some not, for their reasons
        assert {b"src/lib/ok.c", b"group.txt", b"setuid", b"link", b"pair/a.txt"} <= fast.entries.keys()
        assert fast.modes == {"group.txt": 0o664, "setuid": 0o4755, "src/secret.txt": 0o600}
        assert {b"notes.md", b"run.sh", b"big.bin", b"racy.c", b"conv/note.txt", b"assumed.c", b"staged.c"} <= set(fast.untaken)
        assert b"named.c" in fast.entries and b"touched/x.c" in fast.entries  # stat'ed again: unchanged
        assert b"later.c" not in fast.entries
        # The fast path took the plain ones itself, and left the rest to the loop.
        assert {b"src/lib/ok.c", b"group.txt", b"setuid", b"link", b"src/lib/a.py"} <= set(fast.by_native)
        assert not {b"named.c", b"touched/x.c", b"pair/a.txt", b".hidden", b"src/.config"} & set(fast.by_native)


def rewrite(ws: Path, order: list[int]) -> list[bytes]:
    """The repository's index with its entries in `order` (indexes into the sorted ones; one twice
    for a duplicate): git would refuse it, the seed must judge it all the same."""
    index = gitindex.read(ws / ".git" / "index")
    entries = [index.entries[i] for i in order]
    body = gitindex.HEADER.pack(b"DIRC", 2, len(entries)) + b"".join(e.raw for e in entries)
    (ws / ".git" / "index").write_bytes(body + sha1(body).digest())
    return [e.name for e in entries]


@native
@pytest.mark.parametrize("order", ["duplicate", "duplicate-first", "unsorted", "triple"])
def test_a_crafted_index_with_a_name_twice_or_out_of_order_is_judged_as_python_judges_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    monkeypatch.setattr(gitindex, "RACY_S", -10)
    ws = tmp_path / "ws"
    repository(ws)
    count = len(gitindex.read(ws / ".git" / "index").entries)
    every = list(range(count))
    names = rewrite(ws, {"duplicate": [*every[:3], 2, *every[3:]], "duplicate-first": [0, *every],
                         "unsorted": [*every[1:], 0], "triple": [*every[:2], 1, 1, *every[2:]]}[order])
    assert len(names) > count or names != sorted(names)
    kw = dict(touched=set(), max_file_bytes=1 << 30, monkeypatch=monkeypatch)
    python = seeded(ws, tmp_path / "a", fast=False, **kw)
    fast = seeded(ws, tmp_path / "b", fast=True, **kw)
    assert judged(fast) == judged(python)
    assert fast.entries and (fast.by_native or order == "unsorted")  # the rest was taken
    if order == "unsorted":
        assert fast.by_native == []  # an index not in git's order is the loop's whole


@native
def test_the_fast_path_refuses_bad_arguments() -> None:
    with pytest.raises(TypeError):
        NATIVE([], set(), lambda d: None, set(), (), 0, 0, 0, dict, {}, set(), {})  # not a tuple type
    with pytest.raises(ValueError):
        NATIVE([], set(), lambda d: None, set(), (), 0, 0, 0, gitindex.Entry, {b"x": 1}, set(), {})
    entry = (b"a.c", (0,) * 6 + (0o100644,) + (0,) * 3, b"\0" * 20, True, None)
    with pytest.raises(TypeError):  # files_of must give a dict or None
        NATIVE([entry], {b"\0" * 20}, lambda d: 3, set(), (), 1, 1, 1, gitindex.Entry, {}, set(), {})
    with pytest.raises(ZeroDivisionError):  # its own error passes through
        NATIVE([entry], {b"\0" * 20}, lambda d: 1 / 0, set(), (), 1, 1, 1, gitindex.Entry, {}, set(), {})


# -- each rule of the fast path on its own: one entry it takes, and each change that leaves it to Python --

ID = bytes(range(20))
FIELDS = (1_000, 5, 2_000, 7, 64, 99, 0o100644, 0, 0, 12)  # ctime s, ns, mtime s, ns, dev, ino, mode, uid, gid, size
NOW_NS = 10_000 * 10**9


def record(fields: tuple[int, ...] = FIELDS, st_mode: int = 0o100644) -> bytes:
    return b"".join(v.to_bytes(4, "big") for v in (*fields, st_mode))


def run_take(entries: list, files: dict | None = None, *, touched: frozenset = frozenset(), scopes: tuple = (),
             limit_ns: int = NOW_NS, fresh_ns: int = NOW_NS, max_bytes: int = 100,
             directory: bytes = b"dir") -> tuple[list, dict, set, dict]:
    census = {directory: {"a.c": record()} if files is None else files}
    taken: dict = {}
    needed: set = set()
    modes: dict = {}
    rest = NATIVE(entries, {ID}, census.get, set(touched), scopes, limit_ns, fresh_ns, max_bytes, gitindex.Entry,
                  taken, needed, modes)
    return rest, taken, needed, modes


def entry(name: bytes = b"dir/a.c", fields: tuple[int, ...] = FIELDS, oid: bytes = ID, usable: bool = True,
          raw: bytes | None = None) -> tuple:
    return (name, fields, oid, usable, raw)


@native
def test_the_entry_the_fast_path_takes_is_the_one_gitindex_makes() -> None:
    rest, taken, needed, modes = run_take([entry()])
    assert rest == [] and needed == {ID} and modes == {}
    assert taken == {b"dir/a.c": gitindex.Entry(b"dir/a.c", 0o100644, ID, gitindex._packed(b"dir/a.c", FIELDS, ID).raw)}
    assert type(taken[b"dir/a.c"]) is gitindex.Entry
    raw = gitindex._packed(b"dir/a.c", FIELDS, ID).raw
    assert run_take([entry(raw=raw)])[1][b"dir/a.c"].raw is raw  # the index's own bytes, not a copy
    long_name = b"dir/" + b"x" * 5000
    long_taken = run_take([entry(long_name)], {"x" * 5000: record()})[1]
    assert long_taken[long_name].raw == gitindex._packed(long_name, FIELDS, ID).raw  # its length capped at 0xFFF


@native
@pytest.mark.parametrize("st_mode, kept", [(0o100600, 0o600), (0o104755, 0o4755), (0o100755, None), (0o100644, None)])
def test_the_fast_path_keeps_a_file_s_exact_mode_as_the_loop_does(st_mode: int, kept: int | None) -> None:
    fields = (*FIELDS[:6], 0o100755 if st_mode & 0o100 else 0o100644, *FIELDS[7:])
    _rest, taken, _needed, modes = run_take([entry(fields=fields)], {"a.c": record(fields, st_mode)})
    assert b"dir/a.c" in taken and modes == ({} if kept is None else {"dir/a.c": kept})


@native
def test_a_symlink_s_permission_bits_are_no_mode_to_keep() -> None:
    fields = (*FIELDS[:6], 0o120000, *FIELDS[7:])
    _rest, taken, _needed, modes = run_take([entry(fields=fields)], {"a.c": record(fields, 0o120777)})
    assert b"dir/a.c" in taken and modes == {}


@native
@pytest.mark.parametrize("case", [
    "unusable", "unknown blob", "empty name", "dot first", "dot component", "empty component", "trailing slash", "scope",
    "racy", "fresh mtime", "fresh ctime", "too large", "directory not vouched", "not in the census",
    "a stat_result", "touched", "another stat", "another size", "a short record", "another mode", "not a tuple"])
def test_each_rule_leaves_the_entry_to_the_python_loop(case: str) -> None:
    kw: dict = {}
    files: dict | None = None
    one = entry()
    if case == "unusable":
        one = entry(usable=False)
    elif case == "unknown blob":
        one = entry(oid=bytes(20))
    elif case in ("dot first", "dot component", "empty component", "trailing slash"):
        # (the census vouches for the directory each name's parent is, and holds its last part)
        name, kw["directory"] = {"dot first": (b".a.c", b""), "dot component": (b"dir/.a.c", b"dir"),
                                 "empty component": (b"dir//a.c", b"dir/"),
                                 "trailing slash": (b"dir/a.c/", b"dir/a.c")}[case]
        one = entry(name)
        files = {"a.c": record(), ".a.c": record(), "": record()}
    elif case == "empty name":
        one, kw["directory"], files = entry(b""), b"", {"": record()}
    elif case == "scope":
        kw["scopes"] = (b"di",)
    elif case == "racy":
        kw["limit_ns"] = 2_000 * 10**9 + 7  # the entry's mtime
    elif case == "fresh mtime":
        kw["fresh_ns"] = 2_000 * 10**9 + 7  # its mtime only (its ctime is older)
    elif case == "fresh ctime":
        one = entry(fields=(2_500, 0, *FIELDS[2:]))
        files = {"a.c": record(one[1])}
        kw["fresh_ns"] = 2_500 * 10**9
    elif case == "too large":
        kw["max_bytes"] = 11
    elif case == "directory not vouched":
        one = entry(b"other/a.c")
    elif case == "not in the census":
        files = {"b.c": record()}
    elif case == "a stat_result":
        files = {"a.c": os.lstat("/")}
    elif case == "touched":
        kw["touched"] = frozenset({b"dir/a.c"})
    elif case == "another stat":
        files = {"a.c": record((*FIELDS[:3], 8, *FIELDS[4:]))}  # its mtime's nanoseconds differ
    elif case == "another size":
        files = {"a.c": record((*FIELDS[:9], 13))}
    elif case == "a short record":
        files = {"a.c": record()[:40]}
    elif case == "another mode":
        files = {"a.c": record((*FIELDS[:6], 0o100755, *FIELDS[7:]))}
    elif case == "not a tuple":
        one = list(entry())
    rest, taken, needed, modes = run_take([one], files, **kw)
    assert rest == [one] and taken == {} and needed == set() and modes == {}


@native
def test_a_name_met_again_goes_to_the_loop_and_an_index_out_of_order_goes_whole() -> None:
    a, b = entry(b"dir/a.c"), entry(b"dir/b.c")
    files = {"a.c": record(), "b.c": record()}
    again = entry(b"dir/a.c", oid=ID, raw=None)
    rest, taken, _needed, _modes = run_take([a, again, b], files)
    assert rest == [again] and set(taken) == {b"dir/a.c", b"dir/b.c"}
    rest, taken, needed, modes = run_take([b, a], files)
    assert rest == [b, a] and taken == {} and needed == set() and modes == {}


# -- entries(): parse_index's entries, or None for parse_index to say what is wrong ---------------------


def parsed(data: bytes, native: bool, monkeypatch: pytest.MonkeyPatch) -> object:
    """parse_index's result, or its error as (type, message)."""
    monkeypatch.setattr(seed, "_native", MODULE if native else None)
    try:
        return seed.parse_index(data)
    except (ValueError, IndexError, struct.error) as exc:  # what Seeder.seed takes as an index it cannot use
        return (type(exc), str(exc))


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> dict[int, bytes]:
    """A real index of each version, with an intent-to-add (3 and 4) and names sharing long prefixes."""
    found = {}
    for version in (2, 3, 4):
        ws = tmp_path_factory.mktemp(f"v{version}") / "ws"
        repository(ws)
        (ws / "src" / "lib" / "deeper").mkdir()
        (ws / "src" / "lib" / "deeper" / "a.py").write_text("x\n")
        (ws / "later.c").write_text("later\n")
        git(ws, "add", "src")
        if version > 2:  # (an intent to add is an extended flag: version 3 and up)
            git(ws, "add", "-N", "later.c")
        git(ws, "update-index", "--index-version", str(version))
        found[version] = (ws / ".git" / "index").read_bytes()
    return found


@native
@pytest.mark.parametrize("version", [2, 3, 4])
def test_a_real_index_of_each_version_reads_the_same(indexes: dict[int, bytes], version: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    data = indexes[version]
    assert seed.parse_index(data)[0] == version
    native = parsed(data, True, monkeypatch)
    assert native == parsed(data, False, monkeypatch)
    assert isinstance(native, tuple) and len(native[1]) >= 7 and any(raw is None for *_, raw in native[1]) == (version > 2)


def resealed(data: bytes) -> bytes:
    """`data` with its checksum made right again (a damaged index git would call well formed)."""
    return data[:-20] + sha1(data[:-20]).digest()


@native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(version=st.sampled_from([2, 3, 4]), where=st.integers(0, 1 << 30), value=st.integers(0, 255),
       cut=st.integers(0, 1 << 30), mode=st.sampled_from(["byte", "cut", "count"]))
def test_any_damaged_index_reads_or_fails_as_python_reads_it(indexes: dict[int, bytes], monkeypatch: pytest.MonkeyPatch,
                                                            version: int, where: int, value: int, cut: int, mode: str) -> None:
    data = bytearray(indexes[version][:-20])
    if mode == "byte":
        at = 12 + where % (len(data) - 12)
        data[at] = value
    elif mode == "cut":
        del data[12 + cut % (len(data) - 12):]
    else:
        data[8:12] = (where % 64).to_bytes(4, "big")  # the entry count
    damaged = resealed(bytes(data) + bytes(20))
    assert parsed(damaged, True, monkeypatch) == parsed(damaged, False, monkeypatch)


@native
def test_a_version_2_entry_with_extended_flags_is_named_by_python(indexes: dict[int, bytes],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray(indexes[2][:-20])
    data[12 + 60] |= 0x40  # the first entry's flags: EXTENDED
    damaged = resealed(bytes(data) + bytes(20))
    assert parsed(damaged, False, monkeypatch) == (ValueError, "a version 2 index with extended flags")
    assert parsed(damaged, True, monkeypatch) == parsed(damaged, False, monkeypatch)
    assert MODULE.entries(damaged, 2, 1) is None


@native
def test_a_name_that_runs_into_the_checksum_is_named_by_python(indexes: dict[int, bytes],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 4: the last name's NUL is cut off, so it runs on into the checksum, up to a zero byte there."""
    version, entries = seed.parse_index(indexes[4])
    data = indexes[4][:-20]
    body = data[:data.rindex(entries[-1][0][-3:]) + 3]  # up to the last name's end, its NUL (and the rest) gone
    for filler in range(256):  # a checksum with a zero byte, for the name to end at inside it
        damaged = resealed(body[:-1] + bytes([filler]) + bytes(20))
        if 0 in damaged[-20:-1]:
            break
    assert parsed(damaged, False, monkeypatch) == (ValueError, "it ends inside an entry")
    assert parsed(damaged, True, monkeypatch) == parsed(damaged, False, monkeypatch)


# -- trees(): seed.trees_of's trees and cache of trees -------------------------------------------------

PATH_PARTS = st.sampled_from([b"a", b"b", b"a.c", b"a-b", b"z", b"x y", b"\xe9t\xe9", b""])


@native
@settings(max_examples=300, deadline=None)
@given(names=st.lists(st.lists(PATH_PARTS, min_size=1, max_size=4).map(b"/".join), max_size=25),
       modes=st.lists(st.sampled_from([0o100644, 0o100755, 0o120000, 0o160000]), min_size=25, max_size=25),
       shuffle=st.booleans())
def test_any_index_makes_the_same_trees_natively(names: list[bytes], modes: list[int], shuffle: bool) -> None:
    """Names sorted as an index has them, or not; a file and a directory of one name; a name twice:
    the native trees are the Python ones, or None where those are."""
    ordered = names if shuffle else sorted(names)
    entries = [gitindex.Entry(name, mode, sha1(name).digest(), b"") for name, mode in zip(ordered, modes)]
    assert MODULE.trees(entries, sha1) == seed._trees(entries)


@native
def test_trees_deeper_than_the_limit_are_left_to_git_natively_too() -> None:
    deep = b"/".join([b"d"] * seed.MAX_DEPTH) + b"/f"
    entries = [gitindex.Entry(b"top", 0o100644, bytes(20), b""), gitindex.Entry(deep, 0o100644, bytes(20), b"")]
    assert seed._trees(entries) is None and MODULE.trees(entries, sha1) is None
    shallow = [gitindex.Entry(b"/".join([b"d"] * (seed.MAX_DEPTH - 2)) + b"/f", 0o100644, bytes(20), b"")]
    assert seed._trees(shallow) is not None and MODULE.trees(shallow, sha1) == seed._trees(shallow)


@native
def test_a_real_repository_s_trees_are_git_s_natively(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    repository(ws)
    for name in ("src/lib/deeper/x.c", "src/lib.c", "src-x/y", "a b/c"):
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(name)
    git(ws, "add", "-A")
    index = gitindex.read(ws / ".git" / "index")
    made = MODULE.trees(list(index.entries), sha1)
    assert made == seed._trees(list(index.entries))
    assert made is not None and sha1(b"tree %d\0" % len(made[0][-1]) + made[0][-1]).hexdigest() == \
        git(ws, "write-tree").strip()


@native
def test_bad_entries_are_a_type_error_for_the_native_trees() -> None:
    with pytest.raises(TypeError):
        MODULE.trees([(b"a", 0o100644, b"short")], sha1)
    with pytest.raises(ZeroDivisionError):
        MODULE.trees([gitindex.Entry(b"a", 0o100644, bytes(20), b"")], lambda data: 1 / 0)
