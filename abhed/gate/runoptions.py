"""Options that make a program run a file, a module or a shell string: what an allow rule's prefix never covers.

`bash(npm test:*)` allows `npm test --watch`: the human allowed npm's test script with any
arguments. It does not allow `npm test --script-shell=./x`, which runs ./x instead; nor `make -f
other.mk` under `bash(make:*)`, `pytest -p plugin`, `git grep -O'cmd'`. Each entry below names the
program (or program and subcommand, as the words after it), the options that do this, and why.
The list errs on naming more: a false entry costs one question to a human, a missing one a hole.
An option the rule itself names (`bash(make -f ci.mk:*)`) is the human's choice and is covered.

How a word is matched, failing closed where a program reads its options otherwise:
  `--name`   GNU style: any abbreviation of it, with or without `=value` (`--script` for --script-shell),
             or a dotted key under it (`--config.script-shell`); for SINGLE_DASH programs (go, gcc,
             java...): `-name` or `--name`, exactly, with `=`/`:` values;
  `-x`       a short option anywhere in a cluster (`-xp` holds -p), its value attached or not;
             for SINGLE_DASH programs, any word starting with `-x`;
  `NAME=`    an operand that sets a variable (`make SHELL=./x`, `CC=./x`);
  `@`        an argument file (`gcc @opts`: options read from a file);
  `+`        a toolchain word (`cargo +nightly`: rustup picks the compiler by that name);
  `*`        the (sub)command itself runs what it is given (`git bisect run`, `bundle exec`).
After `--` words are operands (the programs here pass them on, e.g. npm to the script).
`python -m MOD ...` is also read as MOD's entry (`python -m pytest -p x`).

Limits: a program's *operands* are the rule's business (`bash(pytest:*)` runs any test file;
`bash(python:*)`, `bash(sed:*)`, `bash(awk:*)` run any code they are given), and so is what the
project's own files make a program run (a package.json script, a Makefile recipe, a conftest.py):
checkpoints make those undoable, the rule only says which command line the human allowed.
"""

from __future__ import annotations

import re

# Programs whose long options take one dash, without abbreviations (Go's flag package, gcc, java...).
# Named as RUNS names them: ALIASES has already turned g++, cc and clang++ into gcc and clang.
SINGLE_DASH = frozenset({"go", "gcc", "clang", "java", "terraform"})
PYTHONS = re.compile(r"python[0-9.]*|pypy[0-9.]*")
SETTING = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*=")

_NPM = {
    ("--script-shell",): "runs every package script with this program instead of sh",
    ("--node-options",): "passes options to node, `--require` among them (a module to load first)",
    ("--userconfig", "--globalconfig"): "reads another npmrc, which can set script-shell and node-options",
    ("--prefix", "-C", "--workspace", "--workspaces", "-w"): "runs the scripts of another package.json",  # pragma: no mutate  (--workspace abbreviates --workspaces)
    ("--call", "-c", "--shell"): "runs a shell string or another shell",
    ("--editor", "--browser", "--viewer", "--git", "--node-gyp", "--onload-script", "--init-module"):
        "names a program or module that npm runs",
}
_GIT_FETCH: dict[tuple[str, ...], str] = {("--upload-pack", "-u"): "runs this program as the other side of the transfer"}

RUNS: dict[str, dict[tuple[str, ...], str]] = {
    "npm": _NPM, "npx": _NPM,
    "pnpm": {
        ("--config",): "sets any setting, script-shell among them",
        ("--pnpmfile", "--global-pnpmfile"): "loads a .pnpmfile.cjs, which is code",
        ("--dir", "-C", "--filter", "-F", "--recursive", "-r", "--workspace-root", "-w"):
            "runs the scripts of other package.json files",
        ("--node-options",): "passes options to node, `--require` among them",
        ("--shell-mode", "-c"): "runs a shell string",
    },
    "yarn": {
        ("--use-yarnrc", "--yarnrc"): "reads another yarnrc, which can name the program yarn runs (yarn-path)",
        ("--cwd",): "runs the scripts of another package.json",
        ("--script-shell",): "runs scripts with this program",
    },
    "bun": {
        ("--preload", "-r", "--config", "-c"): "loads a module (or a bunfig that names one) before the script",
        ("--eval", "-e", "--print", "-p"): "runs a code string",
        ("--cwd", "--filter", "-F"): "runs the scripts of another package.json",
        ("--shell",): "runs scripts with another shell",
        ("--env-file",): "sets variables from a file (NODE_OPTIONS among them)",
    },
    "node": {
        ("--require", "-r", "--import", "--loader", "--experimental-loader"): "loads a module before the script",
        ("--eval", "-e", "--print", "-p"): "runs a code string",
        ("--env-file", "--env-file-if-exists"): "sets variables from a file, NODE_OPTIONS among them",  # pragma: no mutate  (--env-file abbreviates the other)
        ("--openssl-config",): "an OpenSSL configuration can load a shared library",
        ("--test-reporter",): "loads a reporter module",
    },
    "deno": {
        ("--config", "-c", "--import-map"): "a configuration or import map points imports at other code",
        ("--allow-run", "--allow-all", "-A"): "lets the code run any program",
        ("--eval",): "runs a code string",
    },
    "python": {("-c",): "runs a code string", ("-m",): "runs a module as the program"},
    "pytest": {
        ("-p",): "loads a plugin module (any importable file)",
        ("--config-file", "-c", "--override-ini", "-o"):
            "another configuration, or one setting (addopts, python_files, pythonpath) that loads other files",
        ("--rootdir", "--confcutdir"): "changes which conftest.py files (code) and configuration are loaded",
        ("--pyargs",): "imports test packages by name from anywhere on sys.path",
        ("--pdbcls",): "imports a module for the debugger",
        ("--cov-config",): "a coverage configuration can load plugins",
        ("--basetemp",): "pytest empties this directory before the run",
    },
    "tox": {("--conf", "-c", "--override", "-x"): "another configuration, or overrides of its commands",
            ("--installpkg",): "installs (and builds) another package"},
    "nox": {("--noxfile", "-f"): "runs another noxfile (Python code)"},
    "pip": {
        ("--editable", "-e"): "installs a project from a directory, running its build code",
        ("--requirement", "-r", "--constraint", "-c"): "reads a file that can hold any of these options",
        ("--find-links", "-f", "--index-url", "-i", "--extra-index-url", "--src"):
            "installs (and builds) packages from another source",
        ("--global-option", "--install-option", "--config-settings", "-C", "--build-option"):
            "passes options to a package's build code",
        ("--prefix", "--target", "-t", "--root", "--user"): "installs somewhere Python will later load code from",
    },
    "uv": {
        ("--config-file",): "reads another configuration",
        ("--directory", "--project"): "acts on another project",
        ("--with", "--with-requirements", "--with-editable"): "adds packages to what runs",  # pragma: no mutate  (--with abbreviates the others)
        ("--python", "-p"): "runs another interpreter",
    },
    "poetry": {("--directory", "-C", "--project", "-P"): "acts on another project"},
    "make": {
        ("--file", "--makefile", "-f", "--directory", "-C", "--include-dir", "-I"): "reads another Makefile",
        ("--eval", "-E"): "evaluates a string as Makefile text",
        ("--environment-overrides", "-e"): "lets the environment override the Makefile's variables",
        ("NAME=",): "overrides a variable: SHELL, CC or any command a recipe runs",
    },
    "cmake": {
        ("-P", "-C", "--toolchain", "-S"): "runs another CMake script (or cache, toolchain, source tree)",
        ("-D",): "sets a cache entry: a compiler, a launcher or CMAKE_PROJECT_INCLUDE runs other code",
        ("-E",): "command mode: runs tools, rm and copy among them",
    },
    "ninja": {("-f", "-C"): "reads another build file", ("-t",): "runs a tool (clean deletes files)"},
    "just": {
        ("--justfile", "-f", "--working-directory", "-d"): "reads another justfile",
        ("--shell", "--shell-arg", "--command", "-c"): "runs a shell string or another shell",  # pragma: no mutate  (--shell abbreviates --shell-arg)
        ("--set", "--dotenv-filename", "--dotenv-path"): "overrides variables a recipe runs",
        ("NAME=",): "overrides a variable a recipe runs",
    },
    "rake": {
        ("--rakefile", "-f", "--rakelibdir", "-R", "--directory", "-C"): "reads another Rakefile",
        ("--require", "-r", "--libdir", "-I"): "loads other Ruby code",
        ("--execute", "-e", "--execute-print", "-p", "--execute-continue", "-E"): "runs a code string",  # pragma: no mutate  (--execute abbreviates --execute-print)
        ("NAME=",): "sets a variable the tasks read",
    },
    "bundle": {("--gemfile",): "reads another Gemfile (Ruby code)"},
    "bundle exec": {("*",): "runs any command it is given"},
    "gradle": {
        ("--build-file", "-b", "--settings-file", "-c", "--init-script", "-I", "--project-dir", "-p",
         "--include-build"): "runs other build scripts",
        ("--system-prop", "-D"): "sets properties such as org.gradle.java.home (another Java)",
    },
    "mvn": {
        ("--file", "-f", "--settings", "-s", "--global-settings", "--toolchains", "-t"):
            "reads another project or settings file",
        ("--define", "-D"): "sets properties such as exec.executable, which a plugin runs",
    },
    "dotnet": {("--property", "-p", "--logger", "-l", "--test-adapter-path", "--settings", "-s"):
               "sets MSBuild properties or loads loggers and adapters (code)"},
    "cargo": {
        ("--config",): "sets any configuration, a runner or rustc wrapper among them",
        ("-Z",): "unstable flags",
        ("--manifest-path", "-C"): "builds another package (its build.rs is code)",
        ("--target",): "a target specification file can name the linker",
        ("+",): "picks the toolchain by name",
    },
    "rustc": {("-C", "--codegen"): "`-C linker=` runs a program", ("-Z",): "unstable flags"},
    "rustup run": {("*",): "runs any command it is given"},
    "go": {
        ("-exec", "-toolexec", "-vettool"): "runs programs through the one named",
        ("-overlay", "-modfile", "-C"): "builds other files or another module",
        ("-ldflags", "-gccgoflags", "-compiler"): "`-extld` and its kin name the linker or compiler to run",
    },
    "go env": {("-w",): "writes GOFLAGS and other settings every later go command reads"},
    "gcc": {("-B", "-wrapper", "-fplugin", "-specs", "--specs", "@"): "runs other programs or loads plugins"},  # pragma: no mutate  (gcc reads -specs and --specs alike)
    "clang": {("-B", "-fplugin", "-fpass-plugin", "-Xclang", "--config", "@"): "runs other programs or loads plugins"},
    "java": {
        ("-javaagent", "-agentpath", "-agentlib", "-XX:OnError", "-XX:OnOutOfMemoryError"): "loads or runs other code",
        ("-cp", "-classpath", "--class-path", "-jar", "@"): "runs classes from elsewhere, or reads options from a file",
    },
    "perl": {("-e", "-E", "-M", "-m", "-I", "-x"): "runs a code string or loads other modules"},
    "ruby": {("-e", "-r", "-I", "-x"): "runs a code string or loads other code"},
    "php": {("-r", "-d", "-c", "-B", "-R", "-F", "-E"): "runs a code string, or settings that prepend a file"},
    "mypy": {("--config-file", "--python-executable"): "a configuration loads plugins; or another interpreter"},
    "pylint": {("--rcfile", "--load-plugins", "--init-hook"): "loads plugins or runs a code string"},
    "eslint": {("--config", "-c", "--rulesdir", "--plugin", "--resolve-plugins-relative-to", "--parser",
                "--format", "-f"): "loads JavaScript (a configuration, rules, a parser, a formatter)"},
    "prettier": {("--config", "--plugin"): "loads JavaScript"},
    "jest": {("--config", "-c", "--rootDir", "--roots", "--testRunner", "--setupFiles", "--setupFilesAfterEnv",  # pragma: no mutate  (--setupFiles abbreviates --setupFilesAfterEnv)
              "--globalSetup", "--globalTeardown", "--reporters", "--transform", "--testEnvironment", "--resolver",
              "--preset"): "loads other JavaScript"},
    "vitest": {("--config", "-c", "--root", "-r", "--reporter", "--environment"): "loads other JavaScript"},
    "webpack": {("--config", "-c"): "a configuration is JavaScript"},
    "pre-commit": {("--config", "-c"): "another configuration names the hooks it runs"},
    "sphinx-build": {("-c",): "another conf.py (Python code)"},
    "docker": {("--config", "--host", "-H", "--context"): "another daemon, or credential helpers it runs"},
    "podman": {("--config", "--host", "-H", "--connection", "--url"): "another service, or helpers it runs"},
    "kubectl": {("--kubeconfig",): "a kubeconfig runs exec credential plugins"},
    "helm": {("--kubeconfig",): "a kubeconfig runs exec credential plugins",
             ("--post-renderer",): "runs this program"},
    "terraform": {("-chdir",): "runs another configuration (providers, local-exec)"},
    "rsync": {("--rsh", "-e", "--rsync-path"): "runs this program as the transport or the other side"},
    "scp": {("-S", "-o", "-F"): "runs another program as ssh (or a ProxyCommand)"},
    "ssh": {("-o", "-F"): "an option or configuration can run a ProxyCommand or LocalCommand"},
    "tar": {("--to-command", "--use-compress-program", "-I", "--checkpoint-action", "--info-script",
             "--new-volume-script", "-F", "--rsh-command"): "runs a program or a shell string"},
    "zip": {("-TT", "--unzip-command"): "runs this command to test the archive"},
    "git grep": {("--open-files-in-pager", "-O"): "runs this program on the files found"},
    "git rebase": {("--exec", "-x"): "runs a shell string after each commit"},
    "git bisect run": {("*",): "runs the command it is given at each step"},
    "git submodule foreach": {("*",): "runs a shell string in each submodule"},
    "git filter-branch": {("*",): "runs its filters, which are shell strings"},
    "git instaweb": {("*",): "starts a web server and a browser it is told of"},
    "git difftool": {("--extcmd", "-x", "--tool", "-t"): "runs this program on each file"},
    "git mergetool": {("--tool", "-t"): "runs this program on each file"},
    "git fetch": _GIT_FETCH, "git pull": _GIT_FETCH, "git ls-remote": _GIT_FETCH,
    "git clone": {**_GIT_FETCH, ("--template", "--config", "-c"): "hooks from a template, or configuration"},
    "git init": {("--template",): "copies hooks from a template, which git then runs"},
    "git push": {("--receive-pack", "--exec"): "runs this program as the other side of the transfer"},
    "git send-pack": {("--receive-pack", "--exec"): "runs this program as the other side of the transfer"},
    "git archive": {("--exec",): "runs this program as the other side of --remote"},
    "git send-email": {("--to-cmd", "--cc-cmd", "--header-cmd", "--sendmail-cmd", "--smtp-server"):
                       "runs these programs"},
}
ALIASES = {"gmake": "make", "py.test": "pytest", "pip3": "pip", "gradlew": "gradle", "mvnw": "mvn",
           "clang++": "clang", "g++": "gcc", "cc": "gcc", "c++": "gcc", "podman-remote": "podman"}

PROGRAMS = frozenset(key.split()[0] for key in RUNS)


def reason(argv: list[str | None], covered: int) -> str | None:
    """Why argv (a normalised command: its program's name first) runs something that its first
    `covered` words, which a rule named, do not say; None when nothing in the table applies."""
    name = ALIASES.get(argv[0] or "", argv[0] or "")
    if name not in PROGRAMS and not PYTHONS.fullmatch(name):
        return None
    if PYTHONS.fullmatch(name):
        module = _module(argv)
        if module is not None and covered > module:  # python's options end at -m MOD: the rest is MOD's
            return reason(argv[module:], covered - module)
        name = "python"
    operands = [a for a in argv[1:] if a is None or not a.startswith("-")][:2]
    for depth in range(len(operands) + 1):
        key = " ".join([name] + [str(o) for o in operands[:depth]])
        for spellings, why in RUNS.get(key, {}).items():
            hit = _hit(name, spellings, argv, covered, depth)
            if hit:
                return f"`{hit}` {why}"
    return None


def _module(argv: list[str | None]) -> int | None:
    """Where MOD stands in `python [options] -m MOD ...` (None: not that form)."""
    for i in range(1, len(argv) - 1):
        if argv[i] == "-m":
            return i + 1
        if (arg := argv[i]) is None or not arg.startswith("-") or arg == "--":
            return None
    return None


def _hit(name: str, spellings: tuple[str, ...], argv: list[str | None], covered: int, depth: int) -> str | None:
    """The first word beyond the rule's that is one of these spellings (the key itself for `*`)."""
    if "*" in spellings:
        return " ".join(str(a) for a in argv[:depth + 1]) if covered <= depth else None
    for arg in argv[max(covered, 1):]:  # pragma: no mutate  (argv[0], the program, matches no spelling)
        if arg is None:
            return "a word known only at run time"
        if arg == "--":
            return None
        if any(_matches(name, spelling, arg) for spelling in spellings):
            return arg
    return None


def _matches(name: str, spelling: str, arg: str) -> bool:
    if spelling == "NAME=":
        return SETTING.match(arg) is not None
    if spelling in ("@", "+"):
        return arg.startswith(spelling)
    if name in SINGLE_DASH:
        wanted, given = spelling.lstrip("-"), arg.lstrip("-")
        if len(wanted) == 1:
            return arg.startswith(spelling)  # `-B/dir`: the value attached
        return arg.startswith("-") and (given == wanted or given.startswith((wanted + "=", wanted + ":")))
    if spelling.startswith("--"):
        given = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        return bool(given) and (spelling[2:].startswith(given) or given.startswith(spelling[2:] + "."))
    if len(spelling) == 2:
        return arg.startswith("-") and not arg.startswith("--") and spelling[1] in arg[1:]
    return arg.split("=", 1)[0] == spelling  # multi-letter single-dash names in GNU programs (`zip -TT`)
