"""Issue 31 item 4: operator rules match what runs, in every spelling.

Each spelling is first run under real bash in a scratch repository and shown to BE the program the
rule names, by what it did on disk: the file is gone (rm), the bare remote's branch moved (git
push), the payload's marker file appeared (an option that runs a file). Then the verdicts: a deny
rule denies every spelling, in every mode; an allow rule covers the spellings that run exactly its
command through wrappers that change nothing (`timeout 5`, `nice`, `env`, `command`...), and never
one that reaches it through sudo, xargs or find, nor one with an option that runs a file or a string.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from abhed.gate import runoptions, wrappers
from abhed.gate.approval import Policy, Rule
from abhed.gate.shellparse import Command, analyze

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
MODES = ("ask", "accept-edits", "auto")
PY = Path(sys.executable).name  # the interpreter's own name, as the spellings below call it


def _bash(root: Path, line: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=root, capture_output=True, text=True, timeout=120,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(root),
                               "npm_config_cache": str(root / ".npm"), "npm_config_update_notifier": "false"})


def _verdict(mode: str, allow: list[str], deny: list[str], line: str, root: Path) -> str:
    return Policy.create(mode, allow, deny, root).check("bash", SimpleNamespace(command=line)).decision


# -- rm in every spelling -------------------------------------------------------------------------

# (line, whether `bash(rm:*)` allowed covers it): each deletes notes.txt under bash.
RM_SPELLINGS = [
    ("rm notes.txt", True), ("/bin/rm notes.txt", True), ("/usr/bin/rm notes.txt", True), ("'rm' notes.txt", True),
    ("r\\m notes.txt", True), ("\\rm notes.txt", True), ("$'\\x72m' notes.txt", True), ('"/bin/rm" notes.txt', True),
    ("command rm notes.txt", True), ("command -p rm notes.txt", True), ("builtin command rm notes.txt", True),
    ("exec rm notes.txt", True), ("exec -a x rm notes.txt", True), ("env rm notes.txt", True),
    ("env -i rm notes.txt", True), ("env - rm notes.txt", True), ("env -u HOME -- rm notes.txt", True),
    ("timeout 5 rm notes.txt", True), ("timeout -s KILL 5 rm notes.txt", True),
    ("timeout --signal=KILL -k 1 5 rm notes.txt", True), ("timeout --sig KILL 5s rm notes.txt", True),
    ("nice rm notes.txt", True), ("nice -n 5 rm notes.txt", True), ("nice -5 rm notes.txt", True),
    ("nice --adj=5 rm notes.txt", True), ("nohup rm notes.txt", True), ("stdbuf -oL rm notes.txt", True),
    ("ionice -c 3 rm notes.txt", True), ("setsid -w rm notes.txt", True), ("taskset -c 0 rm notes.txt", True),
    ("chrt -o 0 rm notes.txt", True), ("time rm notes.txt", True), ("time -p rm notes.txt", True),
    ("/usr/bin/time -q rm notes.txt", True), ("timeout 5 env nice rm notes.txt", True),
    ("nice nohup timeout 5 env -i stdbuf -eL rm notes.txt", True), ("command nice -n 1 rm notes.txt", True), ("sh -c 'rm notes.txt'", True),
    ("bash -c \"timeout 5 rm notes.txt\"", True),
    # a rule covers none of these: another environment, arguments at run time, a command per file found
    ("env -i FOO=1 rm notes.txt", False), ("env A=1 /bin/rm notes.txt", False), ("echo notes.txt | xargs rm", False),
    ("echo notes.txt | xargs -I{} rm {}", False), ("find . -name notes.txt -exec rm {} \\;", False),
    ("find . -name notes.txt -execdir /bin/rm {} +", False), ("busybox rm notes.txt", False),
    ("/usr/bin/time -o t.log rm notes.txt", False), ("nice -n 5 xargs rm < list", False),
    ("eatmydata rm notes.txt" if shutil.which("eatmydata") else "builtin exec rm notes.txt", True),
]
NOT_INSTALLED = ["sudo rm notes.txt", "sudo -u root -- rm notes.txt", "doas rm notes.txt", "sudo -E FOO=1 nice rm x"]


def _files(root: Path) -> Path:
    root.mkdir(exist_ok=True)
    (root / "notes.txt").write_text("notes\n")
    (root / "list").write_text("notes.txt\n")
    return root


@pytest.mark.parametrize("line, covered", RM_SPELLINGS, ids=[s for s, _ in RM_SPELLINGS])
def test_every_spelling_of_rm_is_rm_for_a_rule(tmp_path, line, covered):
    root = _files(tmp_path / "w")
    ran = _bash(root, line)
    assert not (root / "notes.txt").exists(), (line, ran.stdout, ran.stderr)  # it IS rm
    for mode in MODES:
        assert _verdict(mode, ["bash(*)"], ["bash(rm:*)"], line, root) == "deny", (mode, line)
        assert _verdict(mode, ["bash(*)"], ["bash(/usr/bin/rm:*)"], line, root) == "deny", (mode, line)
    assert _verdict("ask", ["bash(rm:*)"], [], line, root) == ("allow" if covered else "ask"), line
    if covered and "notes.txt" in line.split("rm", 1)[-1]:
        assert _verdict("ask", ["bash(rm notes.txt)"], [], line, root) == "allow", line  # the exact rule too
        assert _verdict("auto", [], ["bash(rm notes.txt)"], line, root) == "deny", line


@pytest.mark.parametrize("line", NOT_INSTALLED)
def test_spellings_through_programs_not_installed_here_are_denied_too(tmp_path, line):
    for mode in MODES:
        assert _verdict(mode, ["bash(*)"], ["bash(rm:*)"], line, tmp_path) == "deny", (mode, line)
    assert _verdict("ask", ["bash(rm:*)"], [], line, tmp_path) == "ask", line


def test_a_deny_rule_on_a_wrapper_denies_its_use_and_an_allow_rule_on_one_covers_nothing_it_runs(tmp_path):
    for line in ("timeout 5 ls", "timeout 5 rm x", "nice timeout 1 true"):
        assert _verdict("auto", ["bash(*)"], ["bash(timeout:*)"], line, tmp_path) == "deny", line
    for line in ("timeout 5 rm notes.txt", "timeout 5 ls", "nice ls"):
        assert _verdict("ask", ["bash(timeout:*)", "bash(nice:*)"], [], line, tmp_path) == "ask", line


# -- git push and git's global options ------------------------------------------------------------

# (line, whether `bash(git push:*)` allowed covers it): each pushes the new commit to the bare remote.
PUSH_SPELLINGS = [
    ("git push origin main", True), ("git -C . push origin main", True), ("git --no-pager push origin main", True),
    ("git -C . --no-pager push origin main", True), ("git -P push origin main", True),
    ("git -p push origin main", True), ("git --paginate push origin main", True),
    ("git --work-tree=. push origin main", True), ("git --work-tree . push origin main", True),
    ("git --literal-pathspecs push origin main", True), ("git --glob-pathspecs push origin main", True),
    ("git --icase-pathspecs push origin main", True), ("git --no-optional-locks push origin main", True),
    ("git --no-replace-objects push origin main", True), ("/usr/bin/git push origin main", True),
    ("timeout 5 git push origin main", True), ("env git -C . push origin main", True),
    ("nice -n 1 git --no-pager push origin main", True), ("bash -c 'git -C . push origin main'", True),
    ("/usr/lib/git-core/git-push origin main", True), ("git -C sub/.. push origin main", True),
    # a rule covers none of these: they can make git run other commands, or another repository's
    ("git --git-dir=.git push origin main", False), ("git --git-dir .git push origin main", False),
    ("git -c push.default=simple push origin main", False), ("git --exec-path=/usr/lib/git-core push origin main", False),
    ("git --config-env=user.name=HOME push origin main", False),
    ("echo main | xargs git push origin", False), ("find . -maxdepth 0 -exec git push origin main \\;", False),
]


def _pushing(root: Path) -> tuple[Path, Path]:
    remote, work = root / "remote.git", root / "work"
    subprocess.run(GIT + ["init", "-q", "--bare", str(remote)], check=True)
    work.mkdir()
    (work / "sub").mkdir()
    (work / "f").write_text("1\n")
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"], ["remote", "add", "origin", str(remote)],
                 ["push", "-q", "origin", "main"]):
        subprocess.run(GIT + step, cwd=work, check=True, capture_output=True)
    (work / "f").write_text("2\n")
    subprocess.run(GIT + ["commit", "-qam", "two"], cwd=work, check=True)
    return remote, work


def _head(repo: Path, ref: str) -> str:
    return subprocess.run(["git", "rev-parse", ref], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("line, covered", PUSH_SPELLINGS, ids=[s for s, _ in PUSH_SPELLINGS])
def test_every_spelling_of_git_push_is_git_push_for_a_rule(tmp_path, line, covered):
    remote, work = _pushing(tmp_path)
    assert _head(remote, "main") != _head(work, "HEAD")
    ran = _bash(work, line)
    assert _head(remote, "main") == _head(work, "HEAD"), (line, ran.stdout, ran.stderr)  # it pushed
    for mode in MODES:
        assert _verdict(mode, ["bash(*)"], ["bash(git push:*)"], line, work) == "deny", (mode, line)
        assert _verdict(mode, ["bash(*)"], ["bash(git-push:*)"], line, work) == "deny", (mode, line)
    assert _verdict("ask", ["bash(git push:*)"], [], line, work) == ("allow" if covered else "ask"), line


def test_git_options_between_the_words_of_a_deny_rule_do_not_hide_them(tmp_path):
    deny = ["bash(git push --force:*)", "bash(git config core.pager:*)"]
    for line in ("git push -v --force", "git -C . push --porcelain --force origin", "git config --local core.pager x"):
        assert _verdict("auto", ["bash(*)"], deny, line, tmp_path) == "deny", line
    for line in ("git log --grep push", "git commit -m push", "git status push"):  # `push` as an argument, not the command
        assert _verdict("auto", ["bash(*)"], ["bash(git push:*)"], line, tmp_path) != "deny", line


# -- options that make a program run a file or a string --------------------------------------------

PAYLOAD = "#!/bin/sh\ntouch P\n"


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "x").write_text(PAYLOAD)
    (root / "x").chmod(0o755)
    (root / "package.json").write_text('{"name": "p", "version": "1.0.0", "scripts": {"test": "echo ok", "x": "echo x"}}\n')
    (root / "Makefile").write_text("all:\n\techo ok\n")
    (root / "other.mk").write_text("all:\n\ttouch P\n")
    (root / "evil_plugin.py").write_text("open('P', 'w').close()\n")
    (root / "test_ok.py").write_text("def test_ok():\n    pass\n")
    (root / "hay.txt").write_text("needle\n")
    subprocess.run(GIT + ["init", "-q"], cwd=root, check=True)
    subprocess.run(GIT + ["add", "hay.txt"], cwd=root, check=True)
    return root


# (rule, the plain command it allows, the same with an option that runs ./x or a string): the second,
# run under bash, creates P.
RUN_ATTACKS = [
    ("bash(npm test:*)", "npm test --silent", "npm test --script-shell=./x"),
    ("bash(npm test:*)", "npm test --silent", "npm test --script-sh ./x"),  # nopt reads abbreviations
    ("bash(npm run:*)", "npm run x", "npm run x --script-shell ./x"),
    ("bash(make:*)", "make", "make -f other.mk"),
    ("bash(make:*)", "make", "make --file=other.mk"),
    ("bash(make:*)", "make", "make SHELL=./x"),
    ("bash(make:*)", "make", "make -sf other.mk"),
    ("bash(git grep:*)", "git grep -n needle", "git grep -O'touch P' needle"),
    ("bash(git grep:*)", "git grep -n needle", "git grep --open-files-in-pager='touch P' needle"),
    (f"bash({PY} -m pytest:*)", f"{PY} -m pytest -q test_ok.py", f"{PY} -m pytest -q -p evil_plugin test_ok.py"),
    (f"bash({PY}:*)", f"{PY} test_ok.py", f"{PY} -c 'open(\"P\", \"w\")'"),
    ("bash(tar:*)", "tar -cf a.tar hay.txt", "tar -cf a.tar --checkpoint=1 --checkpoint-action=exec='touch P' hay.txt"),
]


@pytest.mark.parametrize("rule, plain, attack", RUN_ATTACKS, ids=[a for _, _, a in RUN_ATTACKS])
def test_an_allow_rule_never_covers_an_option_that_runs_a_file_or_a_string(tmp_path, rule, plain, attack):
    if shutil.which(attack.split()[0]) is None and attack.split()[0] != PY:
        pytest.skip(f"{attack.split()[0]} is not installed")
    root = _project(tmp_path / "w")
    ran = _bash(root, plain)
    assert ran.returncode == 0 and not (root / "P").exists(), (plain, ran.stdout, ran.stderr)
    ran = _bash(root, attack)
    assert (root / "P").exists(), (attack, ran.stdout, ran.stderr)  # the option really runs it
    assert _verdict("ask", [rule], [], plain, root) == "allow", plain
    assert _verdict("ask", [rule], [], attack, root) == "ask", attack
    assert not any(Rule.parse(rule).allows(c) for c in analyze(attack).commands), attack


def test_an_option_the_rule_names_is_the_humans_choice(tmp_path):
    assert _verdict("ask", ["bash(make -f other.mk:*)"], [], "make -f other.mk all", tmp_path) == "allow"
    assert _verdict("ask", ["bash(make -f other.mk)"], [], "make -f other.mk", tmp_path) == "allow"
    assert _verdict("ask", ["bash(pytest -p myplugin:*)"], [], "pytest -p myplugin tests", tmp_path) == "allow"
    assert _verdict("ask", ["bash(pytest:*)"], [], "pytest -p myplugin tests", tmp_path) == "ask"
    # (`git bisect run` is on the courtesy list: a human sees it whatever the allow rules say)
    assert _verdict("ask", ["bash(git bisect run:*)"], [], "git bisect run ./x", tmp_path) == "ask"
    assert _verdict("ask", ["bash(npm test:*)"], [], "npm test -- --script-shell=./x", tmp_path) == "allow"  # the script's


# Written out here, not read from the module: per program, options that run something (docs/security.md).
TABLE = {
    "npm test": ["--script-shell=./x", "--node-options=--require=./x", "--userconfig=x", "--prefix=x", "-C", "x"],
    "npx x": ["--call=x", "-c"], "pnpm test": ["--config.script-shell=x", "--pnpmfile=x", "-r", "--filter=x"],
    "yarn test": ["--use-yarnrc", "--cwd=x"], "node x.js": ["--require", "-r", "--import=x", "--eval=x"],
    "pytest": ["-p", "x", "-c", "--rootdir=x", "--confcutdir=x", "-o", "--override-ini=x", "--pyargs", "--basetemp=x"],
    "make": ["-f", "-C", "--eval=x", "CC=./x", "SHELL=./x", "-I", "x"], "cmake": ["-P", "-DCMAKE_C_COMPILER=./x"],
    "cargo build": ["--config", "x", "-Zx", "--manifest-path=x", "--target=x.json"],
    "go test": ["-exec=./x", "-toolexec", "./x", "--overlay=x", "-ldflags=-extld=./x"],
    "pip install x": ["-e", ".", "--editable=.", "-r", "x", "--find-links=x", "-i", "x"],
    "git grep x": ["-Ox"], "git rebase main": ["-x", "x", "--exec=x"], "git difftool": ["-x", "x", "--tool=x"],
    "git fetch": ["--upload-pack=x"], "git clone x": ["-u", "x", "--template=x"], "git push": ["--receive-pack=x"],
    "git archive HEAD": ["--exec=x"], "git send-email": ["--sendmail-cmd=x"], "rsync a b": ["-e", "x", "--rsh=x"],
    "tar -xf a": ["--to-command=x", "-I", "x", "--use-compress-program=x"], "zip a b": ["-TT", "x"],
    "gcc x.c": ["-B/x", "-wrapper", "-fplugin=x", "@x", "--specs=x"], "clang x.c": ["--config=x", "-Xclang"],
    "java x": ["-javaagent:x", "-XX:OnError=x", "--class-path=x", "-cp"], "go vet": ["--vettool=x", "-C", "-Cdir"],
    "ssh h": ["-o"], "eslint .": ["-c", "x", "--rulesdir=x"], "just": ["--shell", "x", "A=x"],
}


@pytest.mark.parametrize("command, option", [(c, o) for c, opts in TABLE.items() for o in opts if o.startswith(
    ("-", "@", "+")) or "=" in o])
def test_each_named_option_is_not_covered_by_the_prefix_rule(tmp_path, command, option):
    argv = command.split() + [option]
    prefix = len(command.split())
    assert runoptions.reason(argv, prefix), argv
    assert not Rule.parse(f"bash({command}:*)").allows(Command(argv)), argv
    assert Rule.parse(f"bash({command}:*)").allows(Command(command.split())), command


@pytest.mark.parametrize("key", sorted(runoptions.RUNS))
def test_every_spelling_in_the_table_is_matched(key):
    words = key.split()
    for spellings in runoptions.RUNS[key]:
        for spelling in spellings:
            if spelling == "*":
                assert runoptions.reason(words + ["x"], len(words) - 1), key
                assert runoptions.reason(words + ["x"], len(words)) is None, key
                continue
            word = {"NAME=": "CC=./x", "@": "@file", "+": "+nightly"}.get(spelling, spelling)
            assert runoptions.reason(words + [word], len(words)), (key, word)
            if spelling.startswith("--") and len(spelling) > 4 and runoptions.ALIASES.get(words[0], words[0]) not in \
                    runoptions.SINGLE_DASH:
                assert runoptions.reason(words + [spelling[:-1] + "=v"], len(words)), (key, spelling)  # abbreviated


def test_plain_options_stay_covered(tmp_path):
    for command in ("npm test --watch", "npm test -- --coverage", "pytest -x -q tests", "make -j4 all", "git grep -n x",
                    "cargo build --release", "go test -count=1 ./...", "pip install requests", "tar -tf a.tar"):
        words = command.split()
        rule = Rule.parse(f"bash({' '.join(words[:2] if words[0] in ('npm', 'git', 'cargo', 'go', 'pip') else words[:1])}:*)")
        assert rule.allows(Command(words)), command


def test_python_dash_m_is_read_as_the_module(tmp_path):
    assert runoptions.reason(["python3", "-m", "pytest", "-p", "x"], 3)
    assert runoptions.reason(["python3", "-m", "pytest", "-m", "slow"], 3) is None  # pytest's -m: a marker
    assert runoptions.reason(["python3", "-m", "pytest"], 1)  # `bash(python3:*)` names no module
    assert runoptions.reason(["python3", "-c", "x"], 1) and runoptions.reason(["python3", "x.py"], 1) is None


# -- what normalisation reads, unit by unit --------------------------------------------------------

@pytest.mark.parametrize("argv, want", [
    (["timeout", "5", "env", "nice", "/bin/rm", "x"], (["rm", "x"], ("timeout", "env", "nice"))),
    (["git", "-C", ".", "--no-pager", "push"], (["git", "push"], ())),
    (["/usr/lib/git-core/git-push", "origin"], (["git", "push", "origin"], ())),
    (["git", "--work-tree=.", "--namespace", "n", "-P", "status"], (["git", "status"], ())),
    (["command", "-v", "rm"], (["command", "-v", "rm"], ())), (["nice"], (["nice"], ())),
    (["env", "-u", "X", "-C", "d", "ls"], (["ls"], ("env",))), (["env", "-", "ls"], (["ls"], ("env",))),
    (["timeout", "--kill-after=1", "-sKILL", "1.5m", "ls"], (["ls"], ("timeout",))),
    (["ionice", "-c3", "-n", "7", "-t", "ls"], (["ls"], ("ionice",))), (["taskset", "0x3", "ls"], (["ls"], ("taskset",))),
    (["find", ".", "-name", "x"], (["find", ".", "-name", "x"], ())),
    (["sudo", "ls"], None), (["xargs", "ls"], None), (["find", ".", "-exec", "ls", ";"], None), (["env", "A=1", "ls"], None),
    (["time", "-o", "f", "ls"], None), (["timeout", "-x", "5", "ls"], None), (["timeout", "ls"], None),
    (["git", "-c", "a=b", "status"], None), (["git", "--git-dir=x", "status"], None), (["git", "-C"], None),
    (["git", "--bogus", "status"], None), (["git", "-C=x", "status"], None), (["git", "--no-pager=x", "status"], None),
    (["nice", None, "ls"], None), ([None, "x"], None), (["", "x"], None), ([], None),
    (["nice"] * (wrappers.MAX_CHAIN + 2) + ["ls"], None),
])
def test_normal_is_the_command_a_rule_is_checked_against(argv, want):
    assert wrappers.normal(argv) == want


@pytest.mark.parametrize("argv, start", [
    (["sudo", "-u", "root", "-g", "g", "-E", "--", "rm"], 7), (["sudo", "-uroot", "FOO=1", "rm"], 3),
    (["sudo", "--user=root", "--preserve-env=A,B", "rm"], 3), (["sudo", "--us", "root", "rm"], 3),
    (["xargs", "-0", "-n1", "-I", "{}", "rm"], 5), (["xargs", "-i", "rm"], 2), (["xargs", "--replace=X", "rm"], 2),
    (["xargs", "-e", "rm"], 2), (["xargs", "-eEND", "rm"], 2), (["stdbuf", "-o", "L", "-eL", "rm"], 4),
    (["chrt", "-f", "-T", "5", "1", "rm"], 5), (["exec", "-cl", "-a", "n", "rm"], 4), (["doas", "-u", "r", "rm"], 3),
    (["env", "-iu", "X", "rm"], 3), (["env", "--block-signal", "rm"], 2), (["env", "--block-signal=INT", "rm"], 2),
    (["nohup", "--", "rm"], 2), (["builtin", "rm"], 1), (["timeout", "--fore", "5", "rm"], 3),
])
def test_known_wrappers_options_are_read_as_getopt_reads_them(argv, start):
    assert wrappers.parse(argv).start == start


@pytest.mark.parametrize("argv", [
    ["sudo", "-s", "rm"], ["sudo", "-e", "f"], ["command", "-v", "rm"], ["ionice", "-p", "1"], ["chrt", "-p", "1"],
    ["env", "-S", "rm x"], ["timeout", "--help"], ["doas", "-s"],
])
def test_modes_that_run_no_command_are_left_to_the_generic_reading(argv):
    parsed = wrappers.parse(argv)
    assert parsed is None or parsed.used & wrappers.SPECS[argv[0]].modes
    generic = [argv[i:] for i in range(1, len(argv)) if not argv[i].startswith("-")]
    assert [a for a, _ in wrappers.candidates(argv)] == [argv] + generic


@pytest.mark.parametrize("argv", [
    ["sudo", "--bogus", "rm"], ["sudo", "-u"], ["timeout", "-s"], ["timeout", "--s", "rm"], ["env", "--d", "rm"],
    ["nice", "-n"], ["env", "--debug=x", "rm"], ["timeout", "soon", "rm"], ["chrt", "x", "rm"], ["taskset", "-c", "zz", "rm"],
    ["nice", None, "rm"], ["timeout", None, "rm"], ["unshare", "rm"],
])
def test_what_no_table_reads_exactly_is_not_read_exactly(argv):
    assert wrappers.parse(argv) is None  # an unknown or ambiguous option, a missing value, a wrong operand


def test_known_wrappers_tables_agree_with_the_real_programs(tmp_path):
    """Each exactly read form, run for real: the command the table says starts there is what ran."""
    forms = [["timeout", "-s", "KILL", "-k", "1", "5"], ["timeout", "--signal=TERM", "5s"], ["nice", "-n", "1"],
             ["nice", "-1"], ["nice", "--adjustment", "1"], ["env", "-i", "-u", "X", "-C", "."], ["env", "-"],
             ["env", "-v", "--"], ["stdbuf", "-oL", "-e", "0"], ["stdbuf", "--output=L"], ["ionice", "-c", "3"],
             ["ionice", "-c3", "-t"], ["setsid", "-f", "-w"], ["chrt", "-o", "0"], ["chrt", "--other", "0"],
             ["taskset", "-c", "0"], ["taskset", "1"], ["nohup"], ["xargs", "-0", "-r", "-n", "1"],
             ["xargs", "-I", "X"], ["/usr/bin/time", "-f", "%e", "-q"], ["/usr/bin/time", "-p"]]
    for form in forms:
        if shutil.which(form[0]) is None:
            continue
        argv = form + ["touch", "RAN"]
        parsed = wrappers.parse(argv)
        assert parsed is not None and argv[parsed.start:] == ["touch", "RAN"], form
        stdin = b"x\0" if form[0] == "xargs" else b""
        subprocess.run(argv, cwd=tmp_path, input=stdin, capture_output=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin"})
        assert (tmp_path / "RAN").exists(), form
        (tmp_path / "RAN").unlink()
