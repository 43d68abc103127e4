"""The courtesy list (issue 31, item 5): clearly destructive spellings, each with the reason it must give.

A human sees these first: in ask mode always, in auto mode unless approval.auto_destructive =
"undoable". The table pins the labels; whether undo really restores what each does is the issue's
corpus, run under real bash (the lead's tests). Each line is judged whole by the policy, as the
bash tool's call would be.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from abhed.gate.approval import Policy
from abhed.gate.courtesy import commands_run, destructive, emptied, is_device
from abhed.gate.shellparse import Command, Redirect, analyze

WS = Path("/nonexistent/ws")

HARMFUL = [
    # git's value-taking global options, and options it does not know, hide nothing
    ("git --shallow-file x reset --hard", "git reset --hard"), ("git --shallow-file=x reset --hard", "git reset --hard"),
    ("git -C . --shallow-file x clean -fdx", "git clean -f"), ("git --namespace n reset --hard", "git reset --hard"),
    ("git --attr-source HEAD checkout -- .", "git checkout that overwrites"),
    ("git --super-prefix x/ reset --hard", "git reset --hard"), ("git --no-lazy-fetch reset --hard", "git reset --hard"),
    ("git --some-new-option value reset --hard", "git reset --hard"),
    ("git -Z x reset --hard", "git reset --hard"),
    ("git --git-dir .git --work-tree . checkout -- .", "git checkout that overwrites"),
    ("git -P --no-optional-locks stash drop", "git stash drop"), ("git --literal-pathspecs rm -r src", "git rm deletes"),
    ("git -C src --no-pager branch -D topic", "git branch that deletes"),
    # a shell or interpreter reading its script from its input
    ("echo 'rm -rf src' | sh /dev/stdin", "sh runs a script read from /dev/stdin"),
    ("echo x | bash /dev/fd/0", "bash runs a script read from /dev/fd/0"),
    ("echo x | bash /proc/self/fd/0", "read from /proc/self/fd/0"), ("echo x | dash -e /dev/stdin", "dash runs a script"),
    ("echo x | bash -- /dev/stdin", "bash runs a script"), ("echo x | sh /dev/./stdin", "read from /dev/./stdin"),
    ("echo x | zsh /proc/thread-self/fd/0", "zsh runs a script"), ("echo x | bash - /dev/stdin", "bash runs a script"),
    ("bash /dev/fd/3 3< x.sh", "bash runs a script read from /dev/fd/3"),
    ("echo x | bash --norc /dev/stdin", "bash runs a script"), ("echo x | bash -o errexit /dev/stdin", "bash runs"),
    ("echo 'import shutil' | python3 -", "python3 runs a script read from -"),
    ("echo x | python3 /dev/stdin", "python3 runs a script"), ("echo x | python3 -u -W ignore /dev/stdin", "python3 runs"),
    ("echo x | perl /dev/stdin", "perl runs a script"), ("echo x | node /dev/stdin", "node runs a script"),
    ("echo x | ruby -", "ruby runs a script read from -"), ("echo x | python3.11 /proc/self/fd/0", "python3.11 runs"),
    # xargs and parallel: arguments that arrive at run time can be options or code
    ("echo src | xargs -I X sh -c X", "xargs gives sh arguments read at run time"),
    ("echo src | xargs -I{} bash -c '{}'", "xargs gives bash arguments"), ("ls | xargs git add", "xargs gives git"),
    ("find . | xargs rsync -a dst/", "xargs gives rsync"), ("find . | xargs tar cf a.tar", "xargs gives tar"),
    ("echo . | xargs find", "xargs gives find"), ("ls | xargs rm", "rm with arguments only known at run time"),
    ("ls | xargs -n1 rm", "run time"), ("parallel rm ::: a b", "parallel gives rm arguments"),
    ("ls | parallel tar xf", "parallel gives tar"), ("ls | xargs python3", "xargs gives python3"),
    ("ls | xargs -P4 -n1 sh -c x", "xargs gives sh"), ("ls | xargs -0 git checkout", "git checkout NAME"),
    ("ls | sudo xargs git log", "xargs gives git"), ("ls | xargs nice rsync a b", "xargs gives rsync"),
    # files overwritten from the index or a commit
    ("git checkout README.md", "git checkout NAME overwrites the file NAME"), ("git checkout Makefile", "git switch NAME"),
    ("git checkout -- .", "git checkout that overwrites"), ("git checkout .", "git checkout NAME"),
    ("git checkout HEAD -- src", "git checkout that overwrites"), ("git checkout HEAD~1 a.txt", "git checkout NAME"),
    ("git checkout -f", "git checkout that overwrites"), ("git checkout -m main", "git checkout that overwrites"),
    ("git checkout --ours x", "git checkout that overwrites"), ("git checkout -p", "git checkout that overwrites"),
    ("git checkout --pathspec-from-file=list", "git checkout that overwrites"),
    ("git checkout -b new main x.txt", "git checkout NAME"), ("git checkout --detach main x", "git checkout NAME"),
    ("git restore .", "git restore overwrites"), ("git restore --source=HEAD~1 src", "git restore overwrites"),
    ("git restore -W -S x", "git restore overwrites"), ("git checkout-index -f -a", "git checkout-index -f"),
    ("git checkout-index --force --all", "git checkout-index -f"), ("git checkout-index -fu -a", "checkout-index -f"),
    ("git read-tree -u -m HEAD", "git read-tree -u/--reset"), ("git read-tree --reset -u HEAD", "git read-tree"),
    ("git read-tree --reset HEAD", "git read-tree -u/--reset"), ("mv -f a b", "mv -f overwrites"),
    ("mv --force a b", "mv -f overwrites"), ("mv -vf a b", "mv -f overwrites"), ("git switch -f main", "git switch"),
    ("git switch --discard-changes x", "git switch that discards"),
    # git options that run a command given as a string
    ("git rebase --exec 'touch P' HEAD~1", "git rebase -x/--exec runs a command string"),
    ("git rebase -x 'touch P' HEAD~1", "git rebase -x/--exec"), ("git rebase --ex='touch P' HEAD~1", "--exec runs"),
    ("git fetch --upload-pack='touch P' origin", "git fetch --upload-pack runs a command string"),
    ("git fetch --upload='touch P' origin", "--upload-pack runs"), ("git pull --upload-pack 'touch P'", "git pull"),
    ("git clone -u 'touch P' src dst", "git clone -u/--upload-pack runs"),
    ("git clone --upload-pack='touch P' src dst", "git clone -u/--upload-pack"),
    ("git clone --template=./tpl src dst", "git clone -c/--config/--template"),
    ("git clone -c core.fsmonitor='touch P' src dst", "git clone -c/--config/--template"),
    ("git ls-remote --upload-pack='touch P' .", "git ls-remote --upload-pack"),
    ("git fetch-pack --exec='touch P' .", "git fetch-pack --upload-pack/--exec"),
    ("git push --receive-pack='touch P' . main", "git push --receive-pack/--exec runs"),
    ("git push --exec='touch P' . main", "git push --receive-pack/--exec"),
    ("git send-pack --receive-pack='touch P' . main", "git send-pack --receive-pack/--exec"),
    ("git archive --remote=. --exec='touch P' HEAD", "git archive --exec runs"),
    ("git grep -O'touch P' x", "git grep -O/--open-files-in-pager runs"),
    ("git grep --open-files-in-pager='touch P' x", "git grep -O"), ("git grep --open x", "git grep -O"),
    ("git grep -nO x", "git grep -O"), ("git difftool -x 'touch P' HEAD", "git difftool -x/--extcmd runs"),
    ("git difftool --extcmd='touch P'", "git difftool -x/--extcmd"), ("git bisect run make test", "git bisect run"),
    ("git submodule foreach 'rm -rf .'", "git submodule foreach runs"),
    # ssh and friends: options that run a local command, load code, or read a config that can
    ("ssh -o ProxyCommand='touch P' host", "ssh -o proxycommand runs a local command"),
    ("ssh -oProxyCommand='touch P' host", "ssh -o proxycommand"), ("ssh -o 'ProxyCommand touch P' host", "proxycommand"),
    ("ssh -vo ProxyCommand=x host", "ssh -o proxycommand"), ("ssh host -o ProxyCommand=x", "ssh -o proxycommand"),
    ("ssh -o LocalCommand=x -o PermitLocalCommand=yes host", "ssh -o localcommand"),
    ("ssh -o KnownHostsCommand=x host", "ssh -o knownhostscommand"), ("ssh -o PKCS11Provider=./l.so h", "pkcs11provider"),
    ("ssh -o SecurityKeyProvider=./l.so h", "securitykeyprovider"), ("ssh -o proxycommand=x host", "proxycommand"),
    ("ssh -o Include=./cfg host", "ssh -o include"), ("ssh -F ./cfg host", "ssh -F names a program"),
    ("ssh -I ./lib.so host", "ssh -I names a program"), ("ssh -vF ./cfg host", "ssh -F"),
    ("scp -o ProxyCommand=x a host:b", "scp -o proxycommand"), ("scp -S ./prog a host:b", "scp -S names a program"),
    ("sftp -o ProxyCommand=x host", "sftp -o proxycommand"), ("sftp -D ./server host", "sftp -D names a program"),
    # tar, zip, rsync: options (and variables) that run programs
    ("tar --checkpoint=1 --checkpoint-action=exec='touch P' -cf a.tar x", "tar that runs a program"),
    ("tar -I 'touch P' -cf a.tar x", "tar that runs a program"), ("tar --use-compress-program=x -xf a.tar", "tar that runs"),
    ("tar --use-c=x -xf a.tar", "tar that runs"), ("tar --to-command='touch P' -xf a.tar", "tar that runs"),
    ("tar -F ./script -cf a.tar x", "tar that runs"), ("tar --info-script=./s -cf a.tar x", "tar that runs"),
    ("tar --new-volume-script=./s -cf a.tar x", "tar that runs"), ("tar --rsh-command=./x -cf h:a.tar x", "tar that runs"),
    ("tar --rmt-command=./x -cf h:a.tar x", "tar that runs"), ("tar cIf 'touch P' a.tar x", "tar that runs"),
    ("tar xFf ./s a.tar", "tar that runs"), ("tar --checkpoint-a=exec=x -cf a.tar x", "tar that runs"),
    ("TAR_OPTIONS='--to-command=touch' tar xf a.tar", "TAR_OPTIONS gives tar options from the environment"),
    ("env TAR_OPTIONS=--to-command=x tar xf a.tar", "TAR_OPTIONS gives tar options"),
    ("export TAR_OPTIONS=--to-command=x", "TAR_OPTIONS"), ("TAR_OPTIONS=-I./x; export TAR_OPTIONS", "TAR_OPTIONS"),
    ("tar -xf a.tar --recursive-unlink", "tar that deletes"), ("tar --remove-files -cf a.tar src", "tar that deletes"),
    ("zip -T -TT 'touch P' a.zip x", "zip -TT/--unzip-command runs"), ("zip -TT='touch P' -T a.zip x", "zip -TT"),
    ("zip --unzip-command 'touch P' -T a.zip x", "zip -TT/--unzip-command"),
    ("rsync -e 'touch P' a host:b", "rsync -e/--rsh/--rsync-path runs"), ("rsync --rsh='touch P' a h:b", "rsync -e"),
    ("rsync -avze 'sh -c x' a host:b", "rsync -e"), ("rsync --rsync-path='touch P' a host:b", "rsync -e/--rsh"),
    ("rsync --remove-sent-files a b", "rsync --delete/--remove-source-files"),
    ("rsync --remove-source-files a b", "rsync --delete/--remove-source-files"),
    ("RSYNC_RSH='touch P' rsync a host:b", "RSYNC_RSH gives rsync options"), ("export RSYNC_RSH=x", "RSYNC_RSH"),
    ("RSYNC_CONNECT_PROG=x rsync rsync://h/m d", "RSYNC_CONNECT_PROG gives rsync"),
    # wrappers the generic table lacked, and those it has
    ("perf stat rm -rf src", "rm with recursive"), ("perf record -o /tmp/x rm -rf src", "rm with recursive"),
    ("perf stat -e cycles git reset --hard", "git reset --hard"), ("gdb --args rm -rf src", "rm with recursive"),
    ("gdb -batch -ex 'shell rm -rf src'", "gdb -ex/-x runs debugger commands"), ("gdb -x cmds.gdb", "gdb -ex/-x"),
    ("gdb --eval-command='shell touch P'", "gdb -ex/-x"), ("gdb -eval='shell touch P'", "gdb -ex/-x"),
    ("gdb -iex 'shell touch P' prog", "gdb -ex/-x"), ("ssh-agent rm -rf src", "rm with recursive"),
    ("ssh-agent sh -c 'rm -rf src'", "ssh-agent runs a sh -c script"), ("perf stat bash -ec x", "perf runs a bash -c"),
    ("valgrind rm -rf src", "rm with recursive"), ("strace -f rm -rf src", "rm with recursive"),
    ("ltrace rm -rf src", "rm with recursive"), ("time rm -rf src", "rm with recursive"),
    ("perf stat perf stat git clean -fdx", "git clean -f"), ("nice perf stat sudo git reset --hard", "git reset --hard"),
    ("perf " + "x " * 20 + "rm -rf src", "perf runs a command this check cannot find"),
    # history rewritten
    ("git commit --amend -m x", "git commit --amend rewrites the last commit"), ("git commit --amend --no-edit", "amend"),
    ("git commit -a --amend", "git commit --amend"), ("git commit --am", "git commit --amend"),
    ("git rebase main", "git rebase rewrites history"), ("git rebase --onto a b c", "git rebase rewrites history"),
    ("git reset HEAD~1", "git reset moves the branch"), ("git reset --soft HEAD~3", "git reset moves the branch"),
    ("git reset --mixed", "git reset moves"), ("git reset --keep HEAD~1", "git reset --hard discards"),
    ("git reset x.txt", "git reset moves"), ("git update-ref refs/heads/main HEAD~1", "git update-ref rewrites a ref"),
    ("git update-ref -d refs/heads/x", "git update-ref -d deletes a ref"), ("git update-ref --stdin", "update-ref"),
    ("git branch -f main HEAD~1", "git branch that deletes or overwrites"), ("git branch --force main HEAD~1", "branch"),
    ("git branch -D topic", "git branch that deletes"), ("git branch -M old new", "git branch that"),
    ("git branch -C a b", "git branch that"), ("git stash drop", "git stash drop/clear"),
    ("git stash clear", "git stash drop/clear"), ("git tag -f v1", "git tag -d/-f deletes or moves a tag"),
    ("git tag -d v1", "git tag -d/-f"), ("git tag --delete v1", "git tag -d/-f"),
    ("git reflog expire --expire=now --all", "git reflog expire/delete"), ("git gc --prune=now", "git gc --prune"),
    ("git filter-branch --tree-filter x HEAD", "git filter-branch"), ("git push --force", "git push that rewrites"),
    # emptying a file
    (": > notes.md", "`> notes.md` empties the file notes.md"), ("> notes.md", "empties the file notes.md"),
    ("true > notes.md", "empties the file"), (": >| notes.md", "empties the file"),
    ("cat /dev/null > notes.md", "empties the file"), ("echo -n > notes.md", "empties the file"),
    ("printf '' > notes.md", "empties the file"), ("echo > notes.md", "empties the file"),
    ("{ :; } > notes.md", "empties the file"), (": &> notes.md", "empties the file"),
    ("if true; then :; fi > notes.md", "empties the file"), ("cd src && : > notes.md", "empties the file"),
    ("bash -c ': > notes.md'", "empties the file"), ("sleep 0 2> notes.md", "empties the file"),
    ("cp /dev/null notes.md", "copying /dev/null empties"), ("cp -f /dev/null notes.md", "copying /dev/null"),
    ("cp -t dir /dev/null", "copying /dev/null"), ("install /dev/null notes.md", "copying /dev/null"),
    ("install -m 644 /dev/null notes.md", "copying /dev/null"), ("ln -sf /dev/null notes.md", "copying /dev/null"),
    ("cp /dev/zero notes.md", "copying /dev/zero empties (or fills)"), ("cp /dev//null notes.md", "copying /dev/null"),
    ("sort -o notes.md other.txt", "sort -o writes its output file"), ("sort --output=notes.md o", "sort -o"),
    ("sort -rno notes.md x", "sort -o"), ("sort --compress-program=x big", "sort --compress-program runs"),
    ("sed -i 's/a/b/' notes.md", "sed -i rewrites files in place"), ("sed -i.bak -e 1d notes.md", "sed -i"),
    ("sed -ni p notes.md", "sed -i"), ("sed --in-place 1d notes.md", "sed -i"), ("sed --in=.b 1d notes.md", "sed -i"),
    ("perl -pi -e 's/a/b/' notes.md", "perl -i rewrites files in place"), ("perl -i -pe 1 notes.md", "perl -i"),
    ("perl -pie 1 notes.md", "perl -i"), ("perl -0pi -e 1 notes.md", "perl -i"), ("ruby -i -pe 1 notes.md", "ruby -i"),
    ("find . -name x -fprint notes.md", "find -fprint/-fls writes"), ("find . -fls notes.md", "find -fprint/-fls"),
    ("find . -fprintf notes.md '%p'", "find -fprint/-fls"), ("find . -fprint0 notes.md", "find -fprint/-fls"),
    ("truncate -s 0 notes.md", "truncate destroys"), ("dd of=notes.md if=/dev/null", "dd destroys"),
    ("fallocate -p -o 0 -l 9 notes.md", "fallocate destroys"),
]

# Never left to undo: a block device lies outside the workspace, a protected path is host git's.
ALWAYS = [
    ("echo x > /proc/self/root/dev/sda", "writes to the block device /proc/self/root/dev/sda"),
    ("cat img > /proc/1/root/dev/sdb", "writes to the block device"),
    ("echo x > /proc/self/task/1/root/dev/sda", "writes to the block device"),
    ("cp img /proc/self/root/dev/nvme0n1", "cp names the block device /proc/self/root/dev/nvme0n1"),
    ("tee /proc/thread-self/root/dev/sda", "tee names the block device"),
    ("echo x > /proc/self/root/proc/self/root/dev/sda", "writes to the block device"),
    ("echo x > .git/hooks/pre-commit", "writes the protected path .git/hooks/pre-commit"),
    ("cp evil .git/config", "cp names the protected path .git/config"),
    (":(){ :|:& };:", "calls itself (a fork bomb)"),
]

HARMLESS = [
    "git switch main", "git checkout -b new", "git checkout -b new main", "git checkout -", "git checkout",
    "git checkout --detach HEAD~1", "git checkout -t origin/x", "git checkout --orphan x", "git status",
    "git log --oneline", "git stash", "git stash pop", "git branch -d x", "git branch new", "git tag v1",
    "git commit -m x", "git -C reset status", "git fetch origin", "git pull", "git clone src dst", "git grep -n x",
    "git bisect start", "git submodule update", "git archive HEAD -o a.tar", "git push origin main",
    "sort a.txt", "sort -k2 -t, a", "sed -n 1p a", "sed -e 's/i/x/' a", "sed -es/i/x/ a", "perl -Mstrict -e 1",
    "perl -ne print a", "echo hi > f", "echo hi >> f", ": >> f", "while true; do date; sleep 1; done > log",
    "if [ -f a ]; then cat a; fi > out", "ssh -o ConnectTimeout=5 host true", "ssh -p 22 host true",
    "ssh host ls -o", "tar --checkpoint=10 -cf a.tar x", "tar -czf a.tar.gz x", "tar xf a.tar", "cp a /dev/null",
    "cp a b", "ln -s a b", "ln -sf a b", "ln /dev/null x", "mv a b", "rsync -a src/ dst/", "rsync -avz src/ dst/",
    "zip -r a.zip x", "zip -T a.zip x", "find . -name x -print", "xargs echo", "perf stat ls", "gdb --version",
    "gdb -batch prog", "gdb -e prog", "python3 script.py", "python3 -c 'print(1)'", "bash script.sh",
    "sh -c 'echo hi'", "echo x | python3 -c 'import sys'", "cat /dev/stdin", "bash /dev/null", "perl -e 1 /dev/stdin",
    "echo x > /proc/self/fd/1", "nice perf stat make", "ssh-agent make", "bash -c 'cat /dev/stdin'",
    "echo x | bash -s", "printf x > f", "cat a > f", "exec > log",
]


def verdict(line: str, mode: str = "ask", **kw):
    return Policy.create(mode, ["bash(*)"], [], WS, **kw).check("bash", SimpleNamespace(command=line))


def test_the_tables_are_big_enough():
    assert len(HARMFUL) >= 150 and len({line for line, _ in HARMFUL}) == len(HARMFUL)


@pytest.mark.parametrize("line, reason", HARMFUL, ids=[line[:60] for line, _ in HARMFUL])
def test_each_harmful_spelling_is_labelled_with_its_reason(line, reason):
    """Asked in ask mode even under bash(*); in auto mode asked by default and run after a
    checkpoint under approval.auto_destructive = "undoable"."""
    asked = verdict(line)
    assert asked.decision == "ask" and asked.destructive and reason in asked.reason, asked
    assert asked.rule.startswith("destructive: "), asked
    auto = verdict(line, "auto", undo_gap=None)
    assert auto.decision == "ask" and auto.destructive, auto
    assert 'approval.auto_destructive = "undoable" would run it after a checkpoint instead' in auto.reason
    undone = verdict(line, "auto", undo_gap=None, auto_destructive="undoable")
    assert undone.decision == "allow" and undone.undoable and reason in undone.reason, undone
    assert verdict(line, "plan").decision == "deny"


@pytest.mark.parametrize("line, reason", ALWAYS, ids=[line[:60] for line, _ in ALWAYS])
def test_devices_protected_paths_and_fork_bombs_always_ask(line, reason):
    for mode in ("ask", "accept-edits", "auto"):
        v = verdict(line, mode, undo_gap=None, auto_destructive="undoable")
        assert v.decision == "ask" and v.destructive and not v.undoable and reason in v.reason, (mode, v)
        assert "auto_destructive" not in v.reason  # no setting lifts it: nothing to suggest


@pytest.mark.parametrize("line", HARMLESS)
def test_harmless_look_alikes_are_not_on_the_list(line):
    v = verdict(line)
    assert not v.destructive, v


def test_in_auto_mode_the_reason_says_why_it_cannot_be_undone_when_it_cannot(tmp_path):
    v = verdict("git reset --hard", "auto", undo_gap="checkpoints are off (x)", auto_destructive="undoable")
    assert v.decision == "ask" and v.reason.endswith("(auto mode does not run it unasked: checkpoints are off (x))"), v
    v = verdict("git reset --hard", "ask", undo_gap=None, auto_destructive="undoable")
    assert v.decision == "ask" and v.reason == ("destructive: git reset --hard discards uncommitted work "
                                                "(`git reset --hard`); it needs a human's confirmation"), v


def test_an_unknown_auto_destructive_value_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="Unknown approval.auto_destructive 'always': use ask or undoable"):
        Policy.create("auto", [], [], WS, auto_destructive="always")


# -- the parts, one by one ------------------------------------------------------------------------


@pytest.mark.parametrize("path, want", [
    ("/proc/self/root/dev/sda", True), ("/proc/1/root/dev/sda", True), ("/proc/self/task/7/root/dev/sda", True),
    ("/proc/self/root", False), ("/proc/self/root/dev/null", False), ("/proc/self/rootx/dev/sda", False),
    ("/proc/self/root/tmp/x", False), ("/proc/self/cwd/dev/sda", False), ("/x/proc/self/root/dev/sda", False),
])
def test_a_process_root_leads_to_the_same_devices(path, want):
    assert is_device(path) is want


def test_emptying_is_judged_over_the_commands_that_share_a_redirect():
    shared = Redirect(">", "log")
    assert emptied([Command(["true"], redirects=[shared]), Command(["date"], redirects=[shared])]) is None
    assert emptied([Command(["true"], redirects=[shared]), Command(["true"], redirects=[shared])]) is not None
    # two redirects to the same name are two redirects: the silent one still empties it
    assert "empties the file log" in emptied([Command(["true"], redirects=[Redirect(">", "log")]),
                                             Command(["date"], redirects=[Redirect(">", "log")])])
    for redirect in (Redirect(">>", "f"), Redirect(">", "/dev/null"), Redirect(">&", "2"), Redirect(">", None),
                     Redirect("<", "f"), Redirect(">", "-")):
        assert emptied([Command([":"], redirects=[redirect])]) is None, redirect
    assert emptied([Command([None], redirects=[Redirect(">", "f")])]) is None  # a run-time name may print
    assert emptied([Command(["cat"], redirects=[Redirect(">", "f")])]) is None  # cat of its input
    assert emptied([Command(["cat", "/dev/null", "x"], redirects=[Redirect(">", "f")])]) is None
    assert emptied([Command(["echo", None], redirects=[Redirect(">", "f")])]) is None


def test_the_extra_wrappers_are_followed_within_bounds():
    found, why = commands_run(["perf", "stat", "-e", "x", "sudo", "rm", "-rf", "a"])
    assert why is None and (["rm", "-rf", "a"], ("perf", "sudo")) in found
    found, why = commands_run(["perf"] + ["w"] * 15 + ["rm"])
    assert why is None and (["rm"], ("perf",)) in found  # 16 words after perf: EXTRA_STARTS
    _, why = commands_run(["perf"] + ["w"] * 16 + ["rm"])
    assert why == "perf runs a command this check cannot find among its many words"
    # the budget is per command: two extra wrappers of 9 starts each pass it
    _, why = commands_run(["nice", "perf"] + ["w"] * 8 + ["gdb"] + ["v"] * 8)
    assert why is not None
    found, why = commands_run(["gdb", "--args", "ls"])
    assert why is None and [argv for argv, _ in found] == [["gdb", "--args", "ls"], ["ls"]]


def test_a_64_kib_line_of_extra_wrappers_is_decided():
    line = "perf " * 13_000 + "rm -rf x"
    decided = verdict(line)
    # Read no further: whichever bound the grammar meets first on this machine (its node count, or its
    # CPU time on a slow or busy one) leaves the line unread, and a human decides it.
    assert decided.decision == "ask" and decided.opaque
    assert ("more than 10000 syntax nodes" in decided.reason
            or "more than the 30 ms of CPU time this check gives it" in decided.reason)
    assert "perf runs a command this check cannot find" in verdict("perf " * 2_000 + "rm -rf x").reason


@pytest.mark.parametrize("argv, fact", [
    (["git", "-x", "-y", "reset"], "git reset moves"), (["git", None, "reset", "--hard"], "git reset --hard"),
    (["git", "-C", "-x", "reset", "--hard"], "git reset --hard"), (["git", "--flag=v", "reset", "--hard"], "reset"),
])
def test_every_word_that_may_be_gits_subcommand_is_judged(argv, fact):
    reason = destructive(Command(argv))
    assert reason and fact in reason, reason


@pytest.mark.parametrize("argv", [["git", "-C", "reset", "status"], ["git", "status", "reset"],
                                  ["git", "--no-pager", "log", "reset"], ["git", "-p", "status"]])
def test_a_known_options_value_and_later_words_are_not_subcommands(argv):
    assert destructive(Command(argv)) is None


def test_the_analysis_sees_the_same_commands_the_list_judges():
    """The stdin spellings are not opaque to the analysis: the courtesy list is what catches them."""
    for line in ("echo x | sh /dev/stdin", "git checkout README.md", "ssh -o ProxyCommand=x h"):
        assert not analyze(line).opaque, line
