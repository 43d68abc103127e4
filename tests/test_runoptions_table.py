"""Every option runoptions names, spelled out (mutation testing, issue 31, item 4).

tests/test_approval_rules.py walks runoptions.RUNS itself, which cannot notice a spelling dropped
from it; this copy can. Each word, given after a prefix rule's words, is one the rule does not
cover: `bash(npm test:*)` does not allow `npm test --script-shell=./x`.
"""

from __future__ import annotations

import pytest

from abhed.gate import runoptions

SPELLINGS = {
    'npm': '--script-shell --node-options --userconfig --globalconfig --prefix -C --workspace --workspaces -w --call -c --shell --editor --browser --viewer --git --node-gyp --onload-script --init-module',
    'npx': '--script-shell --node-options --userconfig --globalconfig --prefix -C --workspace --workspaces -w --call -c --shell --editor --browser --viewer --git --node-gyp --onload-script --init-module',
    'pnpm': '--config --pnpmfile --global-pnpmfile --dir -C --filter -F --recursive -r --workspace-root -w --node-options --shell-mode -c',
    'yarn': '--use-yarnrc --yarnrc --cwd --script-shell',
    'bun': '--preload -r --config -c --eval -e --print -p --cwd --filter -F --shell --env-file',
    'node': '--require -r --import --loader --experimental-loader --eval -e --print -p --env-file --env-file-if-exists --openssl-config --test-reporter',
    'deno': '--config -c --import-map --allow-run --allow-all -A --eval',
    'python': '-c -m',
    'pytest': '-p --config-file -c --override-ini -o --rootdir --confcutdir --pyargs --pdbcls --cov-config --basetemp',
    'tox': '--conf -c --override -x --installpkg',
    'nox': '--noxfile -f',
    'pip': '--editable -e --requirement -r --constraint -c --find-links -f --index-url -i --extra-index-url --src --global-option --install-option --config-settings -C --build-option --prefix --target -t --root --user',
    'uv': '--config-file --directory --project --with --with-requirements --with-editable --python -p',
    'poetry': '--directory -C --project -P',
    'make': '--file --makefile -f --directory -C --include-dir -I --eval -E --environment-overrides -e NAME=',
    'cmake': '-P -C --toolchain -S -D -E',
    'ninja': '-f -C -t',
    'just': '--justfile -f --working-directory -d --shell --shell-arg --command -c --set --dotenv-filename --dotenv-path NAME=',
    'rake': '--rakefile -f --rakelibdir -R --directory -C --require -r --libdir -I --execute -e --execute-print -p --execute-continue -E NAME=',
    'bundle': '--gemfile',
    'bundle exec': '*',
    'gradle': '--build-file -b --settings-file -c --init-script -I --project-dir -p --include-build --system-prop -D',
    'mvn': '--file -f --settings -s --global-settings --toolchains -t --define -D',
    'dotnet': '--property -p --logger -l --test-adapter-path --settings -s',
    'cargo': '--config -Z --manifest-path -C --target +',
    'rustc': '-C --codegen -Z',
    'rustup run': '*',
    'go': '-exec -toolexec -vettool -overlay -modfile -C -ldflags -gccgoflags -compiler',
    'go env': '-w',
    'gcc': '-B -wrapper -fplugin -specs --specs @',
    'clang': '-B -fplugin -fpass-plugin -Xclang --config @',
    'java': '-javaagent -agentpath -agentlib -XX:OnError -XX:OnOutOfMemoryError -cp -classpath --class-path -jar @',
    'perl': '-e -E -M -m -I -x',
    'ruby': '-e -r -I -x',
    'php': '-r -d -c -B -R -F -E',
    'mypy': '--config-file --python-executable',
    'pylint': '--rcfile --load-plugins --init-hook',
    'eslint': '--config -c --rulesdir --plugin --resolve-plugins-relative-to --parser --format -f',
    'prettier': '--config --plugin',
    'jest': '--config -c --rootDir --roots --testRunner --setupFiles --setupFilesAfterEnv --globalSetup --globalTeardown --reporters --transform --testEnvironment --resolver --preset',
    'vitest': '--config -c --root -r --reporter --environment',
    'webpack': '--config -c',
    'pre-commit': '--config -c',
    'sphinx-build': '-c',
    'docker': '--config --host -H --context',
    'podman': '--config --host -H --connection --url',
    'kubectl': '--kubeconfig',
    'helm': '--kubeconfig --post-renderer',
    'terraform': '-chdir',
    'rsync': '--rsh -e --rsync-path',
    'scp': '-S -o -F',
    'ssh': '-o -F',
    'tar': '--to-command --use-compress-program -I --checkpoint-action --info-script --new-volume-script -F --rsh-command',
    'zip': '-TT --unzip-command',
    'git grep': '--open-files-in-pager -O',
    'git rebase': '--exec -x',
    'git bisect run': '*',
    'git submodule foreach': '*',
    'git filter-branch': '*',
    'git instaweb': '*',
    'git difftool': '--extcmd -x --tool -t',
    'git mergetool': '--tool -t',
    'git fetch': '--upload-pack -u',
    'git pull': '--upload-pack -u',
    'git ls-remote': '--upload-pack -u',
    'git clone': '--upload-pack -u --template --config -c',
    'git init': '--template',
    'git push': '--receive-pack --exec',
    'git send-pack': '--receive-pack --exec',
    'git archive': '--exec',
    'git send-email': '--to-cmd --cc-cmd --header-cmd --sendmail-cmd --smtp-server',
}
# How a spelling that is not an option is written on a command line.
WORDS = {"NAME=": "CC=./x", "@": "@opts", "+": "+nightly"}


@pytest.mark.parametrize("key, spelling", [(k, s) for k, v in SPELLINGS.items() for s in v.split()])
def test_every_named_option_is_beyond_a_prefix_rule(key, spelling):
    words = key.split()
    if spelling == "*":  # the subcommand itself runs what it is given: only a rule naming it covers nothing more
        assert runoptions.reason(words + ["x"], len(words) - 1).startswith(f"`{key}` ")
        assert runoptions.reason(words + ["x"], len(words)) is None
        return
    word = WORDS.get(spelling, spelling)
    reason = runoptions.reason(words + [word, "v"], len(words))
    assert reason and reason.startswith(f"`{word}` "), (key, word, reason)
    assert runoptions.reason(words + [word, "v"], len(words) + 1) is None  # a rule that names it covers it


@pytest.mark.parametrize("program, option", [("go", "--exec=./x"), ("gcc", "--wrapper"), ("clang", "--fplugin=x"),
                                             ("java", "-javaagent:x.jar"), ("terraform", "--chdir=x"),
                                             ("g++", "--wrapper"), ("clang++", "--fplugin=x")])
def test_single_dash_programs_read_long_options_with_one_or_two_dashes(program, option):
    """Go's flag package, gcc and java: `-name`, `--name`, `-name=v`, `-name:v` are one option."""
    assert runoptions.reason([program, option], 1).startswith(f"`{option}` ")


@pytest.mark.parametrize("program, option", [("go", "-toolexe"), ("gcc", "-wrappe"), ("clang", "-fplugi"),
                                             ("java", "-javaagen"), ("terraform", "-chdi")])
def test_single_dash_programs_take_no_abbreviations(program, option):
    assert runoptions.reason([program, option], 1) is None


def test_python_options_before_dash_m_and_a_script_before_it():
    assert runoptions.reason(["python3", "-u", "-m", "pytest", "-p", "x"], 4) == \
        "`-p` loads a plugin module (any importable file)"  # -u before -m: the module is still pytest
    assert runoptions.reason(["python3", "x.py", "-m", "pytest", "-p", "y"], 4) is None  # x.py's own arguments
    assert runoptions.reason(["python3", None, "-m", "pytest", "-p", "y"], 4) is None  # not the -m form


def test_a_word_known_only_at_run_time_beyond_the_rule_may_be_any_option():
    assert runoptions.reason(["npm", "test", None], 2) == \
        "`a word known only at run time` runs every package script with this program instead of sh"
    assert runoptions.reason(["npm", "test", "--", None], 2) is None  # after --: the script's arguments


def test_multi_letter_single_dash_options_of_gnu_programs_are_whole_words():
    assert runoptions.reason(["zip", "-T", "a.zip", "x"], 1) is None  # -T tests the archive with unzip
    assert runoptions.reason(["zip", "-TT=touch P", "a.zip"], 1) == "`-TT=touch P` runs this command to test the archive"
