"""sandbox.gitexec: which work-tree files a repository's config makes host git run.

The real attacks (bash through the sandbox, write/edit through the file tools, judged by a host
`git commit`) are in tests/sandbox/test_escapes.py and tests/test_protected.py; these pin the
parser against git's own reading of the same files, and what counts as a path."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox import gitexec

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git to compare the parser with")

TRICKY = r"""# comment
[core]
	hooksPath = "hooks dir" ; trailing comment
	bare
	quoted = "" x  " y "
	editor = ./tools/ed.sh \
	  --wait
[filter "Mixed Case"]
	clean = "./tools/clean.sh" %f
	smudge = a\tb\"c\\d
[diff.Old]
	textconv = sh scripts/conv.sh
[alias]
	st = !./s.sh # shell alias
[includeIf "gitdir:~/x/"]
	path = other.inc
"""


@needs_git
def test_the_parser_reads_what_git_reads(tmp_path):
    config = tmp_path / "config"
    config.write_text(TRICKY)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    out = subprocess.run(["git", "config", "--file", str(config), "--no-includes", "--list", "-z"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, check=True).stdout
    theirs = []
    for item in out.split("\0")[:-1]:
        key, _, value = item.partition("\n")
        theirs.append((key, value))
    assert gitexec.parse(TRICKY) == theirs


def _repo(tmp_path: Path, config: str) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / ".git" / "config").write_text(config)
    return ws, ws / ".git"


def _paths(ws: Path) -> set[str]:
    return {e.path for e in gitexec.entries(ws, gitexec.enclosing(ws))}


def test_what_counts_as_a_work_tree_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, _ = _repo(tmp_path, TRICKY + "[core]\n\tfsmonitor = true\n\tpager = less\n[gpg \"ssh\"]\n\tprogram = /usr/bin/x\n"
                  "[merge \"m\"]\n\tdriver = ../outside.sh %O \"$GIT_DIR/x\" https://h/p\n[filter \"lfs\"]\n\tprocess = git-lfs filter-process\n")
    assert _paths(ws) == {"hooks dir/", "tools/ed.sh", "tools/clean.sh", "scripts/conv.sh", "s.sh"}
    with (ws / ".git" / "config").open("a") as config:
        config.write("[diff \"py\"]\n\ttextconv = python3 conv.py\n")
    assert "conv.py" in _paths(ws)  # not there yet: creating it is the attack
    (ws / "filter-process").write_text("an existing file named as an argument counts\n")
    assert "filter-process" in _paths(ws)
    (ws / "filter-process").unlink()
    (ws / "filter-process").mkdir()  # a directory is no program: `alias.b = build` must not lock build/
    with (ws / ".git" / "config").open("a") as config:
        config.write("[alias]\n\tlg = log --graph\n")
    (ws / "log").write_text("a git alias runs git, not a file\n")
    assert _paths(ws) == {"hooks dir/", "tools/ed.sh", "tools/clean.sh", "scripts/conv.sh", "s.sh", "conv.py"}


def test_more_keys_that_run_commands(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, _ = _repo(tmp_path, "[remote \"o\"]\n\turl = ../up\n\tuploadpack = ./up.sh\n[lfs \"customtransfer.x\"]\n"
                  "\tpath = bin/agent\n[init]\n\ttemplateDir = tpl\n[core]\n\tsshCommand = ssh -l git.user -i k\n"
                  "[interactive]\n\tdiffFilter = tools/df\n[submodule \"s\"]\n\tupdate = !sh upd.sh\n")
    assert _paths(ws) == {"up.sh", "bin/agent", "tpl/", "tools/df", "upd.sh"}


def test_core_fsmonitor_as_a_path_and_husky_9(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, _ = _repo(tmp_path, "[core]\n\tfsmonitor = tools/fsmonitor\n\thooksPath = .husky/_\n")
    assert _paths(ws) == {"tools/fsmonitor", ".husky/", ".husky/_/"}
    entry = gitexec.covering(ws / ".husky" / "pre-commit", ws, gitexec.entries(ws, gitexec.enclosing(ws)))
    assert entry is not None and f"whose stubs run the scripts in {ws / '.husky'}" in entry.why


def test_includes_global_config_and_a_linked_worktree(tmp_path, monkeypatch):
    """An included file in the work tree is itself protected; the user's ~/.gitconfig counts (a
    relative hooksPath there applies to every repository); a `.git` file's gitdir and commondir too."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    (home / ".gitconfig").write_text("[core]\n\thooksPath = .githooks\n")
    ws, git_dir = _repo(tmp_path, "[include]\n\tpath = ../conf/git.inc\n")
    (ws / "conf").mkdir()
    (ws / "conf" / "git.inc").write_text("[filter \"x\"]\n\tclean = ./clean.py\n")
    assert _paths(ws) == {".githooks/", "conf/git.inc", "clean.py"}
    linked = tmp_path / "linked"
    (git_dir / "worktrees" / "w").mkdir(parents=True)
    (git_dir / "worktrees" / "w" / "commondir").write_text("../..\n")
    linked.mkdir()
    (linked / ".git").write_text(f"gitdir: {git_dir / 'worktrees' / 'w'}\n")
    assert _paths(linked) == {".githooks/", "clean.py"}


def test_config_worktree_counts_when_git_reads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, git_dir = _repo(tmp_path, "[core]\n\tbare = false\n")
    assert _paths(ws) == set()  # off and absent: git reads nothing there (and a placeholder would break `cp -r .git`)
    (git_dir / "config").write_text("[extensions]\n\tworktreeConfig\n")
    assert _paths(ws) == {".git/config.worktree"}


def test_a_changed_config_is_read_again(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, git_dir = _repo(tmp_path, "[core]\n\thooksPath = a\n")
    assert _paths(ws) == {"a/"}
    (git_dir / "config").write_text("[core]\n\thooksPath = bb\n")
    assert _paths(ws) == {"bb/"}


def test_a_hooks_path_at_the_work_tree_root_locks_nothing(tmp_path, monkeypatch):
    """core.hooksPath = . (or husky's `_` at the root) would make the whole tree read-only: left
    out, and named as not covered in docs/security.md."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, _ = _repo(tmp_path, "[core]\n\thooksPath = .\n")
    sub = ws / "sub"
    (sub / ".git").mkdir(parents=True)
    (sub / ".git" / "config").write_text("[core]\n\thooksPath = _\n")
    assert _paths(ws) == set()
    assert {e.path for e in gitexec.entries(ws, gitexec.enclosing(sub))} == {"sub/_/"}


def test_include_cycles_and_odd_paths_end(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, git_dir = _repo(tmp_path, "[include]\n\tpath = config\n\tpath = config\n\tpath = \"a\\\\\"\n"
                        "[core]\n\thooksPath = h\n")
    (git_dir / "a\\").write_text("[include]\n\tpath = ../.git/config\n")
    assert _paths(ws) == {"h/", ".git/a\\"}  # an included file in .git is no name the rule knows: protected here
    assert gitexec.parse("[include]\n\tpath = a\x00b\n") == [("include.path", "a\x00b")]
    (git_dir / "config").write_text("[include]\n\tpath = a\x00b\n[core]\n\thooksPath = h2\n")
    assert _paths(ws) == {"h2/"}


_PIECES = ["[core]\n", '[filter "a b"]\n', '[x "q\\"u"]\n', "[Sec.Sub]\n", "[diff.x]\n", "\n", "# c\n", "; c\n",
           "\thooksPath = .husky\n", "k = a  b\t c\n", 'k = "a ; b" # c\n', "k = a\\\n  b\n", "k=\n", "flag\n",
           'k = x"y z"w\n', "k = \\t\\n\\b\\\\\\\"\n", "  k = trailing   \n", 'k = " lead"\n', "k = a\r\n", "Key-2 = v\n",
           'k = ""  x\n', "k = a # b\\\n"]


@needs_git
@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=8).map("".join))
def test_generated_configs_read_as_git_reads_them(tmp_path_factory, text):
    """Where git accepts a config, the parser reads the same pairs (a difference could hide a hook)."""
    config = tmp_path_factory.mktemp("cfg") / "config"
    config.write_text(text)
    env = {"PATH": os.environ["PATH"], "HOME": str(config.parent), "GIT_CONFIG_NOSYSTEM": "1"}
    out = subprocess.run(["git", "config", "--file", str(config), "--no-includes", "--list", "-z"], cwd=config.parent,
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return  # git refuses the file, so host git runs nothing from it
    theirs = [tuple(item.split("\n", 1)) if "\n" in item else (item, "") for item in out.stdout.split("\0")[:-1]]
    # git also lists a name before any section, under no section: no key read here is one of those
    assert gitexec.parse(text) == [pair for pair in theirs if "." in pair[0]]


# Every key git documents as running a command (git-config(1)), written out here rather than taken
# from gitexec, so that a key dropped from its list fails this test: (config text, the key).
RUNS_A_COMMAND = [
    ("[core]\n\tfsmonitor = ./x/run.sh", "core.fsmonitor"), ("[core]\n\tpager = ./x/run.sh", "core.pager"),
    ("[core]\n\teditor = ./x/run.sh", "core.editor"), ("[core]\n\tsshCommand = ./x/run.sh", "core.sshCommand"),
    ("[core]\n\taskPass = ./x/run.sh", "core.askPass"), ("[core]\n\tgitProxy = ./x/run.sh", "core.gitProxy"),
    ("[core]\n\talternateRefsCommand = ./x/run.sh", "core.alternateRefsCommand"),
    ("[sequence]\n\teditor = ./x/run.sh", "sequence.editor"), ("[gpg]\n\tprogram = ./x/run.sh", "gpg.program"),
    ("[gpg \"x509\"]\n\tprogram = ./x/run.sh", "gpg.x509.program"),
    ("[gpg \"ssh\"]\n\tdefaultKeyCommand = ./x/run.sh", "gpg.ssh.defaultKeyCommand"),
    ("[filter \"f\"]\n\tclean = ./x/run.sh", "filter.f.clean"), ("[filter \"f\"]\n\tsmudge = ./x/run.sh", "filter.f.smudge"),
    ("[filter \"f\"]\n\tprocess = ./x/run.sh", "filter.f.process"), ("[diff \"d\"]\n\tcommand = ./x/run.sh", "diff.d.command"),
    ("[diff \"d\"]\n\ttextconv = ./x/run.sh", "diff.d.textconv"), ("[diff]\n\texternal = ./x/run.sh", "diff.external"),
    ("[merge \"m\"]\n\tdriver = ./x/run.sh %O %A %B", "merge.m.driver"), ("[pager]\n\tlog = ./x/run.sh", "pager.log"),
    ("[alias]\n\tst = !./x/run.sh", "alias.st"), ("[credential]\n\thelper = !./x/run.sh", "credential.helper"),
    ("[credential \"https://h\"]\n\thelper = !./x/run.sh", "credential.https://h.helper"),
    ("[difftool \"t\"]\n\tcmd = ./x/run.sh", "difftool.t.cmd"), ("[difftool \"t\"]\n\tpath = ./x/run.sh", "difftool.t.path"),
    ("[mergetool \"t\"]\n\tcmd = ./x/run.sh", "mergetool.t.cmd"), ("[mergetool \"t\"]\n\tpath = ./x/run.sh", "mergetool.t.path"),
    ("[uploadpack]\n\tpackObjectsHook = ./x/run.sh", "uploadpack.packObjectsHook"),
    ("[remote \"o\"]\n\tuploadpack = ./x/run.sh", "remote.o.uploadpack"),
    ("[remote \"o\"]\n\treceivepack = ./x/run.sh", "remote.o.receivepack"),
    ("[interactive]\n\tdiffFilter = ./x/run.sh", "interactive.diffFilter"),
    ("[submodule \"s\"]\n\tupdate = !./x/run.sh", "submodule.s.update"),
    ("[trailer \"t\"]\n\tcommand = ./x/run.sh", "trailer.t.command"), ("[trailer \"t\"]\n\tcmd = ./x/run.sh", "trailer.t.cmd"),
    ("[sendemail]\n\ttoCmd = ./x/run.sh", "sendemail.toCmd"), ("[sendemail]\n\tccCmd = ./x/run.sh", "sendemail.ccCmd"),
    ("[sendemail]\n\tsmtpServer = ./x/run.sh", "sendemail.smtpServer"), ("[web]\n\tbrowser = ./x/run.sh", "web.browser"),
    ("[browser \"b\"]\n\tcmd = ./x/run.sh", "browser.b.cmd"), ("[browser \"b\"]\n\tpath = ./x/run.sh", "browser.b.path"),
    ("[man \"v\"]\n\tcmd = ./x/run.sh", "man.v.cmd"), ("[man \"v\"]\n\tpath = ./x/run.sh", "man.v.path"),
    ("[lfs \"customtransfer.x\"]\n\tpath = ./x/run.sh", "lfs.customtransfer.x.path"),
]


@pytest.mark.parametrize("config", [c for c, _ in RUNS_A_COMMAND], ids=[k for _, k in RUNS_A_COMMAND])
def test_each_key_that_runs_a_command_protects_its_script(tmp_path, monkeypatch, config):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, _ = _repo(tmp_path, config + "\n")
    assert _paths(ws) == {"x/run.sh"}


def test_a_key_that_runs_nothing_protects_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, _ = _repo(tmp_path, "[user]\n\tname = ./x/run.sh\n[remote \"o\"]\n\turl = ./x/run.sh\n[merge \"m\"]\n\tname = ./x/run.sh\n")
    assert _paths(ws) == set()


@pytest.mark.parametrize("value", ["true", "false", "yes", "no", "on", "off", "1", "0"])
def test_a_boolean_fsmonitor_is_no_path_even_where_a_file_has_its_name(tmp_path, monkeypatch, value):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, _ = _repo(tmp_path, f"[core]\n\tfsmonitor = {value}\n")
    (ws / value).write_text("a file named like the boolean is not what git runs\n")
    assert _paths(ws) == set()


@pytest.mark.parametrize("value", ["false", "no", "off", "0"])
def test_worktree_config_turned_off_and_absent_protects_nothing(tmp_path, monkeypatch, value):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, _ = _repo(tmp_path, f"[extensions]\n\tworktreeConfig = {value}\n")
    assert _paths(ws) == set()


def test_a_git_file_that_names_no_gitdir_is_no_repository(tmp_path):
    (tmp_path / ".git").write_text("not a gitdir line\n")
    assert gitexec.repository_of(tmp_path / ".git") is None and list(gitexec.enclosing(tmp_path)) == []
    (tmp_path / ".git").write_text("")
    assert gitexec.repository_of(tmp_path / ".git") is None   # an empty one too


def test_a_shell_comment_in_a_command_is_no_path_and_the_reason_names_the_key(tmp_path, monkeypatch):
    """git runs such values through the shell, which ignores a comment; the reason shown to the
    human says which setting in which file makes git run what."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, git_dir = _repo(tmp_path, "[core]\n\tpager = ./run.sh \"# tools/other.sh\"\n")
    found = gitexec.entries(ws, gitexec.enclosing(ws))
    assert [(e.path, e.why) for e in found] == [
        ("run.sh", f"core.pager = ./run.sh # tools/other.sh in {git_dir / 'config'} makes host git run {ws / 'run.sh'}")]


def test_core_worktree_is_where_relative_hooks_run(tmp_path, monkeypatch):
    """A git directory elsewhere whose core.worktree names the work tree: hooks paths are relative
    to that work tree."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws = tmp_path / "ws"
    (ws / "repo.git").mkdir(parents=True)
    (ws / "repo.git" / "config").write_text("[core]\n\tworktree = ../tree\n\thooksPath = .githooks\n")
    found = {e.path for e in gitexec.entries(ws, [gitexec.repository_at(ws / "repo.git")])}
    assert "tree/.githooks/" in found


def _git_list(tmp_path: Path, text: str) -> list[tuple[str, str]] | None:
    """git's own reading of a config text, or None where git refuses it."""
    config = tmp_path / "prefix.config"
    config.write_text(text)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    out = subprocess.run(["git", "config", "--file", str(config), "--no-includes", "--list", "-z"], cwd=tmp_path,
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return [(key, value) for key, _, value in (item.partition("\n") for item in out.stdout.split("\0")[:-1])]


@needs_git
def test_a_config_cut_short_anywhere_reads_as_git_reads_it(tmp_path):
    """Every prefix of the tricky config (a file may end anywhere): never an exception, and where
    git reads the prefix, the same pairs (the bounds at the end of the text are where a parser errs)."""
    text = TRICKY + '[x "a\\\\b\\"c"]\n\tk = v\\\\'
    for end in range(len(text) + 1):
        ours, theirs = gitexec.parse(text[:end]), _git_list(tmp_path, text[:end])
        if theirs is not None:
            assert ours == theirs, (end, text[:end])


def test_home_relative_and_environment_named_configs(tmp_path, monkeypatch):
    """`~/` in a value is the user's home; GIT_CONFIG_GLOBAL and GIT_CONFIG_SYSTEM name configs
    git reads too."""
    ws, _ = _repo(tmp_path, "[core]\n\thooksPath = ~/hooks\n")
    monkeypatch.setenv("HOME", str(ws / "home"))
    assert _paths(ws) == {"home/hooks/"}
    for variable, script in (("GIT_CONFIG_GLOBAL", "g.sh"), ("GIT_CONFIG_SYSTEM", "s.sh")):
        named = tmp_path / f"{variable}.config"
        named.write_text(f"[core]\n\tpager = ./{script}\n")
        monkeypatch.setenv(variable, str(named))
    assert _paths(ws) == {"home/hooks/", "g.sh", "s.sh"}


def test_only_include_keys_include(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, git_dir = _repo(tmp_path, "[user]\n\tname = other.inc\n[include]\n\tpath = real.inc\n")
    (git_dir / "other.inc").write_text("[core]\n\thooksPath = not-read\n")
    (git_dir / "real.inc").write_text("[core]\n\thooksPath = read\n")
    assert _paths(ws) == {"read/", ".git/real.inc"}   # (an included file in the workspace is protected too)


def test_includes_are_read_as_deep_as_git_reads_them(tmp_path, monkeypatch):
    """git reads 10 levels of includes (config.c MAX_INCLUDE_DEPTH): a hooks path set on the tenth counts."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, git_dir = _repo(tmp_path, "[include]\n\tpath = i1\n")
    for level in range(1, 11):
        (git_dir / f"i{level}").write_text(f"[include]\n\tpath = i{level + 1}\n" if level < 10 else "[core]\n\thooksPath = deep\n")
    assert "deep/" in _paths(ws)


def test_a_nested_repositorys_hooks_at_its_own_root_lock_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws = tmp_path / "ws"
    (ws / "sub" / ".git").mkdir(parents=True)
    (ws / "sub" / ".git" / "config").write_text("[core]\n\thooksPath = .\n")
    assert {e.path for e in gitexec.entries(ws, gitexec.enclosing(ws / "sub"))} == set()


def test_odd_but_harmless_configs(tmp_path, monkeypatch):
    """An alias without `!` runs git whatever its words; a config that cannot be read (a directory
    named config) gives nothing and raises nothing; a path outside the workspace is covered by nothing."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws, git_dir = _repo(tmp_path, "[alias]\n\tco = checkout ./x/run.sh\n")
    assert _paths(ws) == set()
    (git_dir / "config").unlink()
    (git_dir / "config").mkdir()
    assert _paths(ws) == set()
    found = (gitexec.Entry("x/", "why"),)
    assert gitexec.covering(tmp_path / "elsewhere" / "x" / "f", ws, found) is None
    assert gitexec.covering(ws / "x" / "f", ws, found) == found[0]


def _within(seconds: float, work):
    """`work()`'s result, or a failure naming the block when it has not returned within `seconds`."""
    done: list = []
    thread = threading.Thread(target=lambda: done.append(work()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert done, f"still blocked after {seconds} s"
    return done[0]


def test_a_fifo_or_device_where_git_reads_a_file_is_never_read(tmp_path, monkeypatch):
    """A hostile repository plants a FIFO as .git, commondir or config (an open to read waits for a writer
    for good: the sandbox's start would hang) or a symlink to a device (read forever): none is read, and
    none is a repository or a setting, as for git (whose read of one blocks)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    os.mkfifo(ws / "sub" / ".git")
    assert _within(10, lambda: (gitexec.repository_of(ws / "sub" / ".git"), list(gitexec.enclosing(ws / "sub")))) == (None, [])
    git_dir = ws / "bare.git"
    git_dir.mkdir()
    os.mkfifo(git_dir / "config")
    os.mkfifo(git_dir / "commondir")
    os.symlink("/dev/zero", git_dir / "config.worktree")
    found = _within(10, lambda: gitexec.entries(ws, [gitexec.Repository(git_dir, (ws,))]))
    assert {e.path for e in found} <= {"bare.git/config", "bare.git/config.worktree"}  # (where settings are read)
    with pytest.raises(OSError, match="not a regular file"):
        gitexec.read_file(git_dir / "config.worktree")
    (git_dir / "config").unlink()
    (git_dir / "config").write_text("[core]\n\tfsmonitor = ./watch.sh\n")
    (ws / "watch.sh").write_text("#!/bin/sh\n")
    found = _within(10, lambda: gitexec.entries(ws, [gitexec.Repository(git_dir, (ws,))]))
    assert "watch.sh" in {e.path for e in found}
