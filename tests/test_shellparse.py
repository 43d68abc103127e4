"""The shell analysis under the approval layer: words, the second scan, limits, wrappers, paths."""

from __future__ import annotations

import pytest

from abhed.gate import wrappers
from abhed.gate.approval import unwrap
from abhed.gate.courtesy import destructive, is_device, protected
from abhed.gate.shellparse import MAX_CHARS, MAX_DEPTH, Command, analyze, ansi_c, normalise
from abhed.gate.shellscan import scan


def _argv(line: str) -> list[list[str | None]]:
    return [c.argv for c in analyze(line).commands]


def _opaque(line: str) -> str:
    found = analyze(line).opaque
    assert found, f"{line!r} should be opaque"
    return found[0]


def _understood(line: str) -> None:
    assert analyze(line).opaque == [], line


# -- words after quote removal --------------------------------------------------------------------

@pytest.mark.parametrize("body, value", [
    ("rm\\0", "rm"), ("\\x72m", "rm"), ("\\162m", "rm"), ("\\u0072m", "rm"), ("\\U00000072m", "rm"), ("a\\tb", "a\tb"),
    ("\\n\\r\\a\\b\\f\\v", "\n\r\a\b\f\v"), ("\\e\\E", "\x1b\x1b"), ("\\\\\\'\\\"\\?", "\\'\"?"), ("\\cA", "\x01"),
    ("\\x", "\\x"), ("\\q", "\\q"), ("a\\", "a\\"), ("\\0012", "\x012"), ("\\12", "\n"), ("\\x4a5", "J5"), ("r\\x00m", "r"), ("\\c", "\\c"), ("a\\c", "a\\c"),
])
def test_ansi_c_strings_decode_as_bash_does(body, value):
    assert ansi_c(body) == value


@pytest.mark.parametrize("line, argv", [
    ("'r'm -rf x", ["rm", "-rf", "x"]), ('"r"m x', ["rm", "x"]), ("r\\m x", ["rm", "x"]),
    ('echo "a\\"b\\$c\\\\d\\e"', ["echo", 'a"b$c\\d\\e']), ('echo "a\\\nb"', ["echo", "ab"]),
    ("$'rm\\0' -rf x", ["rm", "-rf", "x"]), ("echo 0x1F", ["echo", "0x1F"]), ("export A=1", ["export", "A=1"]),
    ("unset A", ["unset", "A"]), ("echo ~/x", ["echo", "~/x"]), ("find . -exec rm {} +", ["find", ".", "-exec", "rm", "{}", "+"]),
])
def test_words_are_static_after_quote_removal(line, argv):
    assert _argv(line)[0] == argv


@pytest.mark.parametrize("line, fact", [
    ("ls *.py", "'*.py' is a pattern"), ("rm -? x", "pattern"), ("ls [ab]", "pattern"), ("rm -{r,f} x", "pattern"),
    ("echo {a..c}", "pattern"), ("rm -{r,f} x", "pattern"), ("echo $HOME", "'$HOME' is only known at run time"), ('echo "$x"', "run time"),
    ("$x arg", "command name '$x'"), ("*.sh", "command name"), ("echo > $out", "redirection target '$out'"),
    ("echo > *.log", "redirection target"),
])
def test_run_time_words_are_opaque_and_named(line, fact):
    assert fact in _opaque(line)


@pytest.mark.parametrize("line", ["ls ./*.py", "ls src/*.py", "rm -- *.o", "echo '*'", "echo \\*", 'echo "a*b"',
                                  "find . -name '*.py'", "ls a/b{c}", "rm -- x{a,b}"])
def test_globs_that_cannot_become_options_are_understood(line):
    _understood(line)


# -- the second scan: where bash and the grammar disagree ------------------------------------------

def test_comments_are_compared_and_an_escaped_space_is_not_a_comment_start():
    assert scan("ls # x").comments == {3}
    assert scan("echo a#b").comments == set()
    assert scan("echo \\ #x").comments == set()
    assert scan("echo \\\\ #x").comments == {8}
    assert scan("x;# y").comments == {2}
    assert "disagree about where a comment starts" in _opaque("echo \\ #x")
    _understood("ls # just a comment\necho \\\\ #x")


@pytest.mark.parametrize("line, fact", [
    ("echo `id`", "backtick"), ("echo $(id)", "command substitution"), ("echo $[1+1]", "$[...]"),
    ("cat <(ls)", "process substitution"), ("echo ${!x}", "expansion"), ("echo ${x@P}", "'@P'"),
    ("echo ${x:1}", "':1'"), ("echo ${a[1]}", "'[1'"), ("echo ${#x:-y}", "':-'"),
    ("cat <<EOF\n`id`\nEOF", "backtick command substitution in a here-document"),
    ("cat <<EOF\n$(id)\nEOF", "in a here-document"), ("cat <<EOF\n${x@P}\nEOF", "here-document that is not"),
    ("r\\\nm x", "line continuation inside a word"), ('echo "${x:-"$(id)"}"', "command substitution"),
    ("echo \"${x:-'`id`'}\"", "backtick"),
])
def test_the_scan_flags_what_bash_evaluates(line, fact):
    assert any(fact in why for why in scan(line).evaluating), scan(line)


@pytest.mark.parametrize("line", [
    "echo '$(id)' '`x`'", "echo \\$(id) \\`x\\`", "cat <<'EOF'\n$(id) `x`\nEOF", "cat <<\\EOF\n$(id)\nEOF",
    "cat <<-\"EOF\"\n\t$(id)\n\tEOF\n", "cat <<EOF\nplain $x ${y} \\$(no)\nEOF", "echo ${x:-d} ${x#p} ${x//a/b} ${#x}",
    "cmd \\\n  --flag", "echo $'\\'$(x)'", "cat <<< \"$x\"", "echo ${x%%.*} ${x^^} ${x,}",
])
def test_the_scan_leaves_literal_text_alone(line):
    assert scan(line).evaluating == []


def test_unquoted_heredoc_after_a_quoted_one_is_still_scanned():
    assert scan("cat <<'A' <<B\n$(x)\nA\n`id`\nB").evaluating
    assert scan("cat <<'A'\n$(x)\nA\necho `id`").evaluating
    assert scan("cat <<-B\n\t`id`\n\tB").evaluating


# -- limits: opaque, never a crash ---------------------------------------------------------------

def test_limits_make_input_opaque_with_the_reason():
    assert f"over the {MAX_CHARS} this check reads" in _opaque("echo " + "x" * MAX_CHARS)
    assert f"more than {MAX_DEPTH} levels deep" in _opaque(" && ".join(["true"] * 989))
    assert "levels deep" in _opaque("echo " + "$(" * 248 + "x" + ")" * 248)
    assert "'\\ud800' at column 6" in _opaque("echo \ud800")
    assert "NUL character" in _opaque("echo a\0b")
    assert "syntax nodes" in _opaque("a;" * 6_000)  # 12,000 nodes, parsed well within the grammar's CPU time
    _understood(" && ".join(["true"] * 30))


def test_parse_errors_say_where():
    assert "could not parse it (near" in _opaque("ls (") and "column" in _opaque("ls (")
    assert "could not parse it" in _opaque("if true; then")


# -- constructs bash evaluates later -------------------------------------------------------------

@pytest.mark.parametrize("line, fact", [
    ("eval ls", "`eval`"), ("source x.sh", "`source`"), (". x.sh", "`.`"), ("alias x=y", "`alias`"),
    ("trap 'x' EXIT", "`trap`"), ("enable -f x y", "`enable`"), ("let x=1", "`let`"), ("coproc ls", "`coproc`"),
    ("hash -p /bin/x ls", "`hash -p`"), ("shopt -s expand_aliases", "`shopt -s/-u`"), ("set -T", "`set -T`"),
    ("set -o functrace", "`set -o functrace`"), ("declare -i x=1", "`declare -i`"), ("declare -n r=x", "`declare -n`"),
    ("local -a x", "`local -a`"), ("export 'a[1]=x'", "names 'a[1]'"), ("export PATH=/x", "sets PATH"),
    ("readonly BASH_ENV=x", "sets BASH_ENV"), ("declare $x", "only known at run time"), ("unset 'a[1]'", "'a[1]'"),
    ("read 'a[1]'", "'a[1]'"), ("read -a 'a[1]'", "'a[1]'"), ("printf -v 'a[1]' x", "'a[1]'"),
    ("mapfile -C cb x", "`mapfile -C`"), ("readarray -t 'a[0]'", "'a[0]'"), ("getopts ab 'a[0]'", "'a[0]'"),
    ("wait -p 'a[0]' 1", "'a[0]'"), ("test -v x", "`test -v`"), ("[ -R x ]", "`-R`"), ("[[ x -lt 1 ]]", "`-lt`"),
    ("(( x++ ))", "arithmetic"), ("for ((i=0;i<1;i++)); do :; done", "arithmetic"), ("echo $((1))", "bash evaluates it, subscripts and all"), ("x=$((a[1]))", "bash evaluates it"),
    ("cat <<< $((1))", "bash evaluates it"),
    ("f() { :; }", "the function f"), ("function g { :; }", "the function g"), ("a[1]=x", "has a subscript"),
    ("PS4='$(x)' bash -xc :", "sets PS4"), ("LD_PRELOAD=x ls", "sets LD_PRELOAD"), ("GIT_SSH=x git ls", "sets GIT_SSH"),
    ("env PAGER=x git log", "sets PAGER"), ("env -S 'x y'", "`env -S`"), ("env -vS'x y'", "`env -S`"),
    ("bash", "reads the code it runs from stdin"), ("sh -s", "stdin"), ("bash -", "stdin"), ("bash -c", "not a plain"),
    ('bash -c "$x"', "not a plain"), ("bash -c 'bash -c \"bash -c \\\"bash -c ls\\\"\"'", "not a plain"),
    ("git -c x.y=z status", "`git -c`"), ("git --config-env=a=B log", "`git --config-env"),
    ("git --exec-path=/x log", "`git --exec-path"), ("su -c ls", "`su` runs a command given as one string"),
    ("watch ls", "`watch`"), ("flock l -c ls", "`flock`"), ("select x in a; do :; done", "`select`"),
    ("ssh h $x", "not plain words"), ("cat <(ls)", "process substitution '<(ls)' runs a command"), ("printf -v", "None"), ("read -a", "None"), ("echo $\"t\"", "not one this check understands"),
    ("{ echo; } > f -rf", "words after a redirection"),
])
def test_evaluating_constructs_are_opaque_and_say_why(line, fact):
    assert any(fact in why for why in analyze(line).opaque), analyze(line).opaque


@pytest.mark.parametrize("line", [
    "set -e", "set -euo pipefail", "set +x", "set -- a b", "shopt -p", "shopt -q extglob", "trap -l", "trap -p",
    "declare -x A=1", "export A=1 B", "local x=1", "readonly -p", "unset -v A B", "unset -f g", "read -r line",
    "read -rp prompt -a arr", "printf -v out %s x", "printf '%s' 'a[1]'", "mapfile -t lines", "getopts ab opt",
    "[ -f x ] && [[ -d y || a == b* ]]", "[[ $x == y ]]", "case $x in a|b) ls;; *) :;; esac", "for f in a b; do :; done",
    "while :; do break; done", "if [ -f x ]; then :; elif :; then :; else :; fi", "! ls", "X=1 ls", "x=$y",
    "ls | grep x |& cat", "cat <<< \"$x\"", "bash -euxc 'ls'", "bash -o pipefail -c ls", "ssh h", "ssh -p 2 h ls",
    "git -C d status", "git --no-pager log", "command -v ls", "hash -r", "a=(x y)", "cd /tmp && ls",
    "echo > /dev/null 2>&1 >&- <&0", "bash script.sh", "sh -e ./x.sh arg", "bash - x.sh", "bash -- x.sh -c", "cat <<EOF\nplain $x text\nEOF", "cat <<-EOF > out\n\tx\n\tEOF\nls",
])
def test_plain_shell_is_understood(line):
    _understood(line)


def test_nested_scripts_and_redirects_are_listed():
    analysis = analyze("bash -e -c 'ls; rm x' > out")
    assert [c.argv for c in analysis.commands] == [["bash", "-e", "-c", "ls; rm x"], ["ls"], ["rm", "x"]]
    assert analysis.commands[0].runs_script and analysis.commands[1].via == "bash -c"
    assert analysis.commands[0].redirects[0].target == "out"
    assert not analyze("bash -l -c ls").commands[0].runs_script
    assert analyze("bash -o pipefail -c ls").commands[0].runs_script
    assert not analyze("bash -o pipefail -o posix -c ls").commands[0].runs_script
    assert not analyze("bash -O extglob -c ls").commands[0].runs_script
    assert not analyze("bash --norc -c ls").commands[0].runs_script
    assert not analyze("X=1 bash -c ls").commands[0].runs_script
    assert not analyze("sudo bash -c ls").commands[0].runs_script
    assert [c.argv for c in analyze("ssh -i k h 'ls -l'").commands][-1] == ["ls", "-l"]
    redirects = analyze("cat <<EOF > a >> b\nx\nEOF").commands[0].redirects
    assert [(r.operator, r.target) for r in redirects] == [("<<", None), (">", "a"), (">>", "b")]
    assert [(r.operator, r.target) for r in analyze("{ ls; } 2> e").commands[0].redirects] == [(">", "e")]
    assert analyze("while read l; do :; done < f > o").commands[1].redirects[-1].target == "o"
    assert analyze("cd a && cd b/c; pushd d; cd").directories == ["a", "b/c", "d", "~"]


@pytest.mark.parametrize(("line", "expected"), [
    ("cp a b && echo x > f", [("cp a b", []), ("echo x", ["f"])]),
    ("a | b > f", [("a", []), ("b", ["f"])]),
    ("a && b || c > f", [("a", []), ("b", []), ("c", ["f"])]),
    ("a && b | c > f", [("a", []), ("b", []), ("c", ["f"])]),
    ("a && b 2>e | c > f", [("a", []), ("b", ["e"]), ("c", ["f"])]),
    ("! a && b > f", [("a", []), ("b", ["f"])]),
    ("a && { b; c; } > f", [("a", []), ("b", ["f"]), ("c", ["f"])]),  # a group's redirection is all of it
    ("(a && b) > f", [("a", ["f"]), ("b", ["f"])]),
    ("{ a && b > f; } > g", [("a", ["g"]), ("b", ["g", "f"])]),
])
def test_a_redirection_after_a_list_or_pipeline_is_the_last_commands(line, expected):
    """The grammar hangs `> f` of `a && b > f` on the whole list; bash gives it to b alone (issue 30)."""
    found = [(c.text, [r.target for r in c.redirects]) for c in analyze(line).commands]
    assert found == expected


def test_fork_bombs_direct_and_mutual_are_found():
    assert analyze(":(){ :|:& };:").recursive_functions == [":"]
    assert analyze("a(){ b; }; b(){ a; }; a").recursive_functions == ["a", "b"]
    assert analyze("a(){ b; }; b(){ ls; }; a").recursive_functions == []


# -- the generic option and wrapper model ---------------------------------------------------------

def test_options_read_short_clusters_long_names_and_the_end_of_options():
    opts = wrappers.options(["-rf", "--no-preserve-root", "--color=auto", "x", "--", "-y", None])
    assert opts.short == frozenset("rf") and opts.long == ("no-preserve-root", "color")
    assert opts.operands == ("x", "-y", None)
    assert opts.has("f") and opts.has("", "no-preserve-root") and not opts.has("y")
    assert wrappers.options(["--rec", "--forc"]).has("", "recursive") and wrappers.options(["--forc"]).has("", "force")
    assert not wrappers.options(["--verbose"]).has("", "recursive") and not wrappers.options(["--"]).has("", "x")
    assert not wrappers.abbreviates("", "force") and wrappers.abbreviates("f", "force")


def test_candidates_list_every_command_a_wrapper_may_run():
    found = [argv for argv, _ in wrappers.candidates(["sudo", "-u", "root", "rm", "-rf", "x"])]
    assert found == [["sudo", "-u", "root", "rm", "-rf", "x"], ["rm", "-rf", "x"]]  # its options read exactly
    found = [argv for argv, _ in wrappers.candidates(["sudo", "--bogus", "root", "rm", "-rf", "x"])]
    assert found == [["sudo", "--bogus", "root", "rm", "-rf", "x"], ["root", "rm", "-rf", "x"], ["rm", "-rf", "x"],
                     ["x"]]  # an option not in its table: every later word may start the command
    via = dict((tuple(a), v) for a, v in wrappers.candidates(["nice", "timeout", "5", "rm", "x"]))
    assert via[("rm", "x")] == ("nice", "timeout")
    assert [a for a, _ in wrappers.candidates(["xargs", "rm"])][1] == ["rm", None]
    finds = [a for a, _ in wrappers.candidates(["find", ".", "-exec", "rm", "{}", ";", "-ok", "ls", "+", "-x"])]
    assert finds == [["find", ".", "-exec", "rm", "{}", ";", "-ok", "ls", "+", "-x"], ["rm", "{}"], ["ls"]]
    assert [a for a, _ in wrappers.candidates(["env", "--", "-x"])][1] == ["-x"]
    assert wrappers.candidates(["ls", "rm"]) == [(["ls", "rm"], ())]
    assert not wrappers.candidates(["sudo", "-Q"] + ["x"] * 300).complete  # each suffix a command: over the budget
    finds = wrappers.candidates(["find", "."] + ["-exec", "ls", ";"] * 300)
    assert len(finds) == wrappers.MAX_CANDIDATES and not finds.complete
    assert "nests too many wrappers" in _opaque("sudo -Q " + "x " * 300)
    assert wrappers.candidates(["sudo"] + ["x"] * 300).complete


def test_primary_is_the_likely_command_for_messages_and_the_interactive_check():
    assert wrappers.primary(["sudo", "-u", "root", "vim", "x"]) == (["vim", "x"], ["sudo"])
    assert wrappers.primary(["timeout", "-s", "KILL", "5", "less"]) == (["less"], ["timeout"])
    assert wrappers.primary(["env", "A=1", "--", "top"]) == (["top"], ["env"])
    assert wrappers.primary(["find", "."]) == (["find", "."], [])
    assert unwrap(Command(["nice", "-n", "5", "nohup", "vi"])) == (["vi"], ["nice", "nohup"])


# -- paths ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("path, want", [
    ("/dev/sda", True), ("/dev//sda", True), ("/dev/./sda", True), ("/dev/nvme0n1", True), ("/dev/mapper/root", True),
    ("/dev/null", False), ("/dev/stderr", False), ("/dev/fd/3", False), ("/dev/shm/x", False), ("/devx/sda", False),
    ("/tmp/../dev/sda", True), ("dev/sda", False),
])
def test_devices_are_every_dev_path_but_a_few(path, want):
    assert is_device(path) is want


@pytest.mark.parametrize("path, dirs, want", [
    (".git/hooks/pre-commit", (), True), (".git//hooks/x", (), True), ("./.git/config", (), True), (".git", (), True),
    ("a/.git/", (), True), (".abhed/x", (), True), ("/ws/.git/hooks", (), True), ("hooks/pre-commit", (".git",), True),
    ("../.git/config", ("src",), True), (".github/x", (), False), (".git/HEAD", (), False), ("hooks/x", (), False),
    ("x/.gitignore", (), False), ("src/config", (), False), ("hooks", (), False), (".gitconfig", (), False), ("/abs/hooks/x", (".git",), False), ("config", ("a/.git",), True),
])
def test_protected_paths_are_read_lexically_and_from_every_cd(path, dirs, want):
    assert protected(path, dirs) is want


def test_normalise_collapses_slashes_and_dots():
    assert normalise("/dev//./sda") == "/dev/sda" and normalise("a/b/../c") == "a/c" and normalise("") == ""


# -- destructive, on the normalised command ------------------------------------------------------

@pytest.mark.parametrize("argv, fact", [
    (["rm", "--no-preserve-root", "/"], "rm with"), (["rm", "-R", "x"], "rm with"), (["rm", "x", None], "run time"),
    (["xargs", "rm"], "run time"), (["find", ".", "-exec", "rm", "{}", "+"], "find rm deletes every file it finds"),
    (["mkfs.ext4", "/dev/x"], "mkfs.ext4 destroys"), (["fsck", "-y", "x"], "fsck destroys"), (["nvme", "format"], "nvme"),
    (["shred", "x"], "shred"), (["dd", "if=x", "of=y"], "dd"), (["rsync", "--delete-excluded", "a", "b"], "rsync --delete"),
    (["rsync", "--remove-source-files", "a", "b"], "rsync --delete"), (["tar", "--delete", "-f", "a", "x"], "tar that"),
    (["find", ".", "-delete"], "find that deletes"), (["chmod", "-R", "777", "/"], "chmod -R"),
    (["chown", "--recursive", "me", "~/"], "chown -R"), (["chgrp", "-R", "g", "$HOME/x"], "chgrp -R"),
    (["tee", "/dev/sdb"], "names the block device /dev/sdb"), (["dd", "of=/dev/sdb"], "dd destroys"),
    (["cp", "x", "--target-directory=.git/hooks"], "names the protected path .git/hooks"),
    (["git", "push", "-f"], "rewrites"), (["git", "push", "--force-with-lease"], "rewrites"),
    (["git", "push", "origin", "+main"], "rewrites"), (["git", "push", "--prune"], "rewrites"),
    (["git", "reset", "--merge"], "git reset --hard"), (["git", "clean", "--force"], "git clean"),
    (["git", "checkout", "-f", "main"], "overwrites"), (["git", "checkout", "main", "file"], "overwrites"),
    (["git", "checkout", "src/a.py"], "overwrites"), (["git", "checkout", "-B", "x"], "overwrites"),
    (["git", "checkout", "--ours", "x"], "overwrites"), (["git", "restore", "--staged", "--worktree", "x"], "restore"),
    (["git", "restore", "-W", "x"], "restore"), (["git", "switch", "-f", "x"], "switch"),
    (["git", "switch", "--discard-changes", "x"], "switch"), (["git", "stash", "clear"], "stash"),
    (["git", "rm", "x"], "git rm"), (["git", "branch", "-D", "x"], "branch"), (["git", "branch", "-d", "-f", "x"], "branch"),
    (["git", "branch", "--delete", "--force", "x"], "branch"), (["git", "branch", "-M", "x"], "branch"),
    (["git", "reflog", "expire", "--all"], "reflog"), (["git", "gc", "--prune=now"], "gc --prune"),
    (["git", "filter-branch"], "filter-branch"), (["git", "filter-repo"], "filter-repo"),
    (["git", "update-ref", "-d", "refs/x"], "update-ref"), (["git", "worktree", "remove", "-f", "w"], "worktree"),
    (["git", "config", "core.pager", "x"], "git config that writes"), (["git", "config", "--unset", "a.b"], "writes"),
    (["git", "config", "set", "a.b", "c"], "writes"), (["git", "config", "--add", "a.b", "c"], "writes"),
    (["git", "-C", "x", "--no-pager", "-p", "reset", "--hard"], "reset"), (["git", "--namespace", "n", "clean", "-f"], "clean"),
    (["sudo", "-u", "x", "git", "reset", "--hard"], "reset"), (["git", "push", "origin", None], "rewrites"),
    (["reboot"], "reboot"), (["git", "--attr-source", "x", "reset", "--hard"], "reset"),
    (["git", "--list-cmds", "x", "clean", "-f"], "clean"), (["git", "--super-prefix", "x", "rm", "y"], "git rm"),
    (["git", "--exec-path", "x", "reset", "--hard"], "reset"), (["git", "--work-tree", "x", "clean", "-f"], "clean"),
    # the courtesy list of issue 31: every reset, checkout NAME (file or branch?), update-ref rewrite history or files
    (["git", "reset", "--soft", "HEAD~1"], "git reset moves the branch"), (["git", "reset"], "git reset moves"),
    (["git", "checkout", "main"], "use `git switch NAME`"), (["git", "update-ref", "refs/x", "y"], "rewrites a ref"),
])
def test_destructive_reasons(argv, fact):
    reason = destructive(Command(argv))
    assert reason and fact in reason, (argv, reason)


@pytest.mark.parametrize("argv", [
    ["rm", "x"], ["rm", "--verbose", "x"], ["rm", "--", "-f"], ["chmod", "-R", "755", "build"], ["chmod", "755", "/"],
    ["git", "push", "origin", "main"], ["git", "push", "origin", "a:b"], 
    ["git", "clean", "-n"], ["git", "checkout", "-b", "new"],
    ["git", "restore", "--staged", "x"], ["git", "restore", "-S", "x"], ["git", "switch", "main"], ["git", "stash"],
    ["git", "stash", "pop"], ["git", "rm", "--cached", "x"], ["git", "branch", "-d", "x"], ["git", "reflog"],
    ["git", "gc"], ["git", "worktree", "remove", "w"], ["git", "worktree", "add", "w"],
    ["git", "config", "--get", "a.b"], ["git", "config", "a.b"], ["git", "config", "-l"], ["git"], ["git", "-C", "x"],
    ["git", "status"], ["cat", "/dev/sda"], ["ls", ".git/hooks"], ["grep", "-r", "x", ".git/config"],
    ["rsync", "-a", "--dry-run", "a", "b"], ["tar", "-xf", "a.tar"], ["find", ".", "-name", "x"], ["cp", "a", "b"],
    ["echo", "/dev/sda"], ["tee", "/dev/null"], [], [None], ["pushd", ".git"], ["cd", ".git/hooks"],
    ["git", "--git-dir=.git", "log"], ["find", ".git", "-name", "x"],
])
def test_not_destructive(argv):
    assert destructive(Command(argv)) is None, argv


def test_redirects_to_devices_and_protected_paths_are_destructive_but_inputs_and_duplicates_are_not():
    from abhed.gate.shellparse import Redirect
    assert "block device /dev//sda" in destructive(Command([], redirects=[Redirect(">", "/dev//sda")]))
    assert "protected path .git//hooks/x" in destructive(Command([], redirects=[Redirect(">>", ".git//hooks/x")]))
    assert "protected path hooks/x" in destructive(Command([], redirects=[Redirect(">", "hooks/x")]), (".git",))
    assert "block device" in destructive(Command([], redirects=[Redirect("<>", "/dev/sda")]))
    for redirect in (Redirect("<", "/dev/sda"), Redirect(">&", "1"), Redirect(">&", "-"), Redirect(">", "/dev/null"),
                     Redirect(">", None), Redirect("<<", None), Redirect(">", "-")):
        assert destructive(Command([], redirects=[redirect])) is None, redirect


# -- every entry of every table matters --------------------------------------------------------

# Written out, not imported: a test that reads the module's own table cannot notice an entry dropped.
ALL_SHELLS = [
    'ash', 'bash', 'busybox-sh', 'dash', 'ksh', 'mksh', 'posh', 'rbash', 'sh', 'yash', 'zsh'
]
ALL_WIPERS = [
    'badblocks', 'blkdiscard', 'cfdisk', 'cgdisk', 'cryptsetup', 'dc3dd', 'dcfldd', 'dd', 'ddrescue', 'debugfs',
    'fallocate', 'fdisk', 'gdisk', 'halt', 'hdparm', 'lvremove', 'mdadm', 'mkdosfs', 'mke2fs', 'mkexfatfs',
    'mkfatfs', 'mkisofs', 'mkntfs', 'mkreiserfs', 'mkswap', 'nvme', 'parted', 'poweroff', 'pvremove', 'reboot',
    'sfdisk', 'sg_format', 'sgdisk', 'shred', 'shutdown', 'srm', 'truncate', 'vgremove', 'wipe', 'wipefs', 'zpool'
]
ALL_WRAPPERS = [
    'builtin', 'busybox', 'bwrap', 'caffeinate', 'capsh', 'catchsegv', 'cgexec', 'chpst', 'chroot', 'chrt',
    'command', 'coproc', 'daemonize', 'doas', 'eatmydata', 'entr', 'env', 'exec', 'fakeroot', 'faketime',
    'firejail', 'flock', 'ionice', 'linux32', 'linux64', 'ltrace', 'nice', 'nohup', 'nsenter', 'numactl',
    'parallel', 'pkexec', 'prlimit', 'proot', 'proxychains', 'proxychains4', 'rlwrap', 'runuser', 'script',
    'setarch', 'setpriv', 'setsid', 'sg', 'softlimit', 'start-stop-daemon', 'stdbuf', 'strace', 'su', 'sudo',
    'systemd-run', 'taskset', 'time', 'timeout', 'torsocks', 'ts', 'tsp', 'unbuffer', 'unshare', 'valgrind',
    'watch', 'xargs'
]
ALL_CODE_VARIABLES = [
    'BASHOPTS', 'BASH_ENV', 'BROWSER', 'CDPATH', 'EDITOR', 'ENV', 'GCONV_PATH', 'GLOBIGNORE', 'HOME', 'HOSTALIASES',
    'IFS', 'LESSCLOSE', 'LESSOPEN', 'MANPAGER', 'NODE_OPTIONS', 'PAGER', 'PATH', 'PERL5LIB', 'PERL5OPT',
    'PROMPT_COMMAND', 'PS0', 'PS1', 'PS2', 'PS3', 'PS4', 'PYTHONHOME', 'PYTHONPATH', 'PYTHONSTARTUP', 'RUBYOPT',
    'SHELL', 'SHELLOPTS', 'SSH_ASKPASS', 'SUDO_ASKPASS', 'TERMINFO', 'VISUAL', 'XDG_CONFIG_HOME', 'ZDOTDIR'
]
ALL_EVALUATING = [
    '.', 'alias', 'bind', 'compgen', 'complete', 'compopt', 'coproc', 'enable', 'eval', 'fc', 'history', 'let',
    'select', 'source', 'trap'
]
ALL_READERS = [
    '[', '[[', 'basename', 'blkid', 'cat', 'cmp', 'diff', 'dirname', 'du', 'echo', 'egrep', 'fgrep', 'file', 'grep',
    'head', 'hexdump', 'less', 'ls', 'lsblk', 'md5sum', 'more', 'od', 'printf', 'readlink', 'realpath', 'rg',
    'sha1sum', 'sha256sum', 'sha512sum', 'stat', 'tail', 'test', 'tree', 'type', 'wc', 'which', 'xxd'
]
ALL_HARMLESS_DEVICES = [
    '/dev/full', '/dev/null', '/dev/random', '/dev/stderr', '/dev/stdin', '/dev/stdout', '/dev/tty', '/dev/urandom',
    '/dev/zero'
]


@pytest.mark.parametrize("shell", ALL_SHELLS)
def test_every_shell_runs_its_script_and_reads_stdin(shell):
    assert "rm with recursive" in destructive(analyze(f"{shell} -c 'rm -rf x'").commands[-1])
    assert "reads the code it runs from stdin" in _opaque(f"echo x | {shell}")


@pytest.mark.parametrize("name", ALL_WIPERS)
def test_every_wiper_is_destructive(name):
    assert f"{name} destroys" in destructive(Command([name, "x"]))


@pytest.mark.parametrize("name", ALL_WRAPPERS)
def test_every_wrapper_is_seen_through(name):
    assert "rm with recursive" in destructive(Command([name, "rm", "-rf", "x"]))


@pytest.mark.parametrize("name", ALL_CODE_VARIABLES + ["LD_AUDIT", "GIT_EDITOR", "BASH_FUNC_x%%", "DYLD_X"])
def test_every_code_variable_is_opaque(name):
    assert f"sets {name}" in " ".join(analyze(f"env {name}=x ls").opaque)


@pytest.mark.parametrize("name", ALL_EVALUATING)
def test_every_evaluating_builtin_is_opaque(name):
    assert analyze(f"{name} x").opaque or name == "select"


@pytest.mark.parametrize("name", ALL_READERS)
def test_readers_may_name_protected_paths_and_devices(name):
    assert destructive(Command([name, ".git/hooks/pre-commit", "/dev/sda"])) is None


@pytest.mark.parametrize("path", ALL_HARMLESS_DEVICES)
def test_harmless_devices_are_not_disks(path):
    assert not is_device(path) and destructive(Command(["cp", "x", path])) is None


@pytest.mark.parametrize("name", ["su", "runuser", "sg", "script", "flock", "pkexec", "entr", "tsp", "ts", "daemonize",
                                  "start-stop-daemon", "systemd-run", "capsh", "watch", "parallel"])
def test_programs_that_run_a_string_through_a_shell_are_opaque(name):
    assert f"`{name}` runs a command given as one string" in _opaque(f"{name} -c 'touch P'")
    if name not in ("watch", "parallel"):
        assert not any("one string" in why for why in analyze(f"{name} --version").opaque)


@pytest.mark.parametrize("line", ["ssh -v", "ssh", "ssh -p 22", "ssh --", "ssh -- h"])
def test_ssh_without_a_remote_command_is_an_interactive_login_not_a_crash(line):
    assert [c.argv for c in analyze(line).commands] == [line.split()]


@pytest.mark.parametrize("line", ["env LANG=C ls -l", "env -i LANG=C ls", "env -u HOME ls", "env -- ls"])
def test_env_with_plain_settings_is_understood(line):
    # Only settings that make something run code (BASH_ENV, LD_PRELOAD, ...) are opaque; the rest is seen through.
    _understood(line)


# Every option that takes a value, per wrapper: `primary` must skip the value, or the interactive-program
# check (and every message) names the value as the program. Written out here, not read from the module.
VALUE_OPTIONS = {
    "sudo": "-u -g -h -p -C -D -r -t -U --user --group --host --prompt --chdir --role --type --other-user --close-from",
    "doas": "-u -C", "env": "-u -C -S --unset --chdir --split-string", "exec": "-a", "nice": "-n --adjustment",
    "time": "-f -o --format --output", "timeout": "-s -k --signal --kill-after", "stdbuf": "-i -o -e",
    "ionice": "-c -n -p", "xargs": "-I -n -P -d -L -s -E -a", "flock": "-w -E --timeout --conflict-exit-code",
}


@pytest.mark.parametrize("name, option", [(n, o) for n, opts in VALUE_OPTIONS.items() for o in opts.split()])
def test_primary_skips_each_wrappers_option_values(name, option):
    duration = ["5"] if name == "timeout" else []
    assert wrappers.primary([name, option, "VALUE", *duration, "vim", "x"]) == (["vim", "x"], [name])


def test_primary_passes_a_chain_of_wrappers_and_stops_at_find():
    assert wrappers.primary(["sudo", "--", "env", "A=1", "B=2", "nice", "vim"]) == (["vim"], ["sudo", "env", "nice"])
    assert wrappers.primary(["nohup", "find", ".", "-exec", "rm", "{}", ";"]) == (["find", ".", "-exec", "rm", "{}", ";"], ["nohup"])
    assert wrappers.primary(["timeout"]) == ([], ["timeout"])
    assert wrappers.primary(["sudo", "-E", "vim"]) == (["vim"], ["sudo"])


@pytest.mark.parametrize("op", [":-", ":=", ":?", ":+", "-", "=", "?", "+", "##", "#", "%%", "%", "//", "/", "^^", "^",
                                ",,", ","])
def test_each_plain_parameter_operator_is_understood(op):
    # Defaults, pattern removal, substitution and case changes expand their word like the rest of the line:
    # nothing is evaluated, so the scan reports nothing (the word itself is still only known at run time).
    line = f"echo ${{x{op}a}} \"${{x{op}}}\""
    assert scan(line).evaluating == [], line
    assert all("only known at run time" in why for why in analyze(line).opaque), line


def test_a_nested_parameter_word_ends_at_its_own_brace():
    # `#` inside ${x:-...} is part of the word, not a comment: the $(id) after it runs when x is unset.
    line = "echo ${x:-${y:-a} #$(id)}"
    assert "command substitution" in " ".join(scan(line).evaluating)
    assert scan(line).comments == set()


@pytest.mark.parametrize("line, comment", [("echo ${x:-a} #$(id)", 13), ('echo "a" \'$(id)\' #`id`', 17)])
def test_quoting_ends_where_bash_ends_it(line, comment):
    # After `${x:-a}` and after a closing double quote the scanner is back at the top level: single quotes
    # quote again and `#` starts a comment, so nothing here is evaluated.
    found = scan(line)
    assert found.evaluating == [] and found.comments == {comment}


@pytest.mark.parametrize("line, why", [
    ("echo $(id)", "command substitution"), ("echo a`id`", "backtick"), ('echo "it\'s" $(id)', "command substitution"),
    ("echo 'a' b $[1]", "arithmetic"), ("cat <(id)", "process substitution"), ("echo ${!x}", "substring offsets"),
    ("echo $'a\\'' $(id) 'b'", "command substitution"),
])
def test_the_scan_alone_finds_evaluation(line, why):
    # The second reading must stand on its own, not lean on the grammar: it is there for where they differ.
    assert why in " ".join(scan(line).evaluating)


def test_primary_takes_everything_after_dashes_as_the_command():
    assert wrappers.primary(["nohup", "--", "-odd-name", "x"]) == (["-odd-name", "x"], ["nohup"])


@pytest.mark.parametrize("line, why", [("echo ${%x}", "not a plain variable"), ("echo ${ x}", "not a plain variable"),
                                       ("echo 'never closed $(id)", "")])
def test_the_scan_ends_on_odd_input_without_a_crash(line, why):
    # An unclosed single quote quotes the rest of the line (bash would wait for more input; the grammar errs).
    found = scan(line).evaluating
    assert why in " ".join(found) if why else found == []


@pytest.mark.parametrize("line, flagged", [
    ("echo ${x:-${y} #$(id)}", True), ("cat << 'EOF'\n$(id)\nEOF\n", False), ("cat <<-EOF\n\tEOF\n'$(id)'\n", False),
])
def test_here_documents_and_braces_end_exactly_where_bash_ends_them(line, flagged):
    assert bool(scan(line).evaluating) is flagged, scan(line)
