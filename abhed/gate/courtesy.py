"""The courtesy list: commands that clearly destroy data, rewrite history or run code nobody read.

Not the boundary. The sandbox bounds where a command acts and a checkpoint makes what it changes in
the workspace undoable, so auto mode runs even what this list does not know (docs/security.md §4).
The list is a courtesy to the human: a command on it is shown before it runs, in ask mode always and
in auto mode unless `approval.auto_destructive = "undoable"`. Writing into a block device or a
protected path, and fork bombs, are on it too, and are never left to undo (`always_asks`).

Judged on the normalised command: every command a wrapper may run (wrappers.candidates, and the
few wrappers below that table), options read generically with GNU abbreviations, every word that
may be git's subcommand after its global options.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator

from abhed.gate import wrappers
from abhed.gate.shellparse import SHELLS, Command, Redirect, normalise
from abhed.gate.wrappers import Options, abbreviates
from sandbox.protect import protected_reason

# How many path components sandbox.protect.protected_reason looks at together (tests/test_protected_agreement.py pins it).
RULE_REACH = 3
# Programs that only read the paths they are given: naming a device or a protected path is fine.
READERS = frozenset({"cat", "head", "tail", "less", "more", "ls", "wc", "grep", "egrep", "fgrep", "rg", "stat", "file",
                     "diff", "cmp", "md5sum", "sha1sum", "sha256sum", "sha512sum", "od", "xxd", "hexdump", "readlink",
                     "realpath", "test", "[", "[[", "echo", "printf", "du", "tree", "which", "type", "basename",
                     "dirname", "lsblk", "blkid"})
# Devices that are not disks: writing them destroys nothing. Every other /dev path counts as a disk.
HARMLESS_DEVICES = frozenset({"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/stdin",
                              "/dev/stdout", "/dev/stderr", "/dev/tty"})
HARMLESS_DEVICE_DIRS = ("/dev/fd/", "/dev/pts/", "/dev/shm/")
# A process's view of the root: /proc/self/root/dev/sda is /dev/sda.
PROC_ROOT = re.compile(r"/proc/[^/]+(?:/task/[^/]+)?/root(?=/|$)")
INPUTS = ("<", "<<", "<<<", "<&", "<<-")
TRUNCATING = (">", ">|", "&>", ">&")  # `>>` and `&>>` append: they empty nothing
# Programs that destroy data whatever their options.
WIPERS = frozenset({
    "dd", "dcfldd", "dc3dd", "ddrescue", "shred", "wipe", "srm", "wipefs", "blkdiscard", "mkswap", "fdisk", "sfdisk",
    "cfdisk", "gdisk", "sgdisk", "cgdisk", "parted", "mke2fs", "mkdosfs", "mkntfs", "mkexfatfs", "mkfatfs", "mkreiserfs",
    "mkisofs", "hdparm", "nvme", "sg_format", "cryptsetup", "lvremove", "vgremove", "pvremove", "mdadm", "zpool",
    "truncate", "fallocate", "badblocks", "debugfs", "reboot", "shutdown", "poweroff", "halt",
})
# Commands that write nothing to stdout: `: > f` and `> f` only empty f.
SILENT = frozenset({":", "true", "false", "test", "[", "[[", "cd", "export", "unset", "shift", "wait", "umask",
                    "readonly", "local", "declare", "typeset", "sleep"})
# Sources that empty (or endlessly fill) the file they are copied to.
EMPTY_SOURCES = frozenset({"/dev/null", "/dev/zero"})
# Interpreters that run a script file named as their first operand (`-` is stdin).
INTERPRETER = re.compile(r"python[0-9.]*|perl|ruby|node|nodejs|php")
# A script read from the command's own input: /dev/stdin, a descriptor, a process's descriptor.
STDIN_SCRIPT = re.compile(r"/dev/stdin|/dev/fd/[0-9]+|/proc/[^/]+(?:/task/[^/]+)?/fd/[0-9]+")
# Programs that hand the words they read at run time to another program as its arguments.
FEEDERS = ("xargs", "parallel")
# Programs whose run-time arguments can be options that delete, overwrite or run code.
FED = frozenset({"git", "rsync", "tar", "find", "rm"}) | SHELLS
# Environment variables that give a program options (which can run programs).
OPTION_VARIABLES = {"TAR_OPTIONS": "tar", "RSYNC_RSH": "rsync", "RSYNC_CONNECT_PROG": "rsync"}
# Programs that run a command given after their own words, beyond wrappers.WRAPPERS: every later
# word that is not an option may start it (judged through wrappers.candidates too), up to EXTRA_STARTS.
EXTRA_WRAPPERS = frozenset({"perf", "gdb", "ssh-agent"})
EXTRA_STARTS = 16
EXTRA_CALLS = 16  # wrappers.candidates runs for at most this many extra starts per command: bounded time and memory


def destructive(command: Command, directories: tuple[str, ...] = ()) -> str | None:
    """Why this command is on the courtesy list (a human sees it first), or None.

    `directories`: every directory a `cd` of the line may have entered (relative paths may be there).
    """
    return harm(command) or always_asks(command, directories)


def always_asks(command: Command, directories: tuple[str, ...] = ()) -> str | None:
    """The part of the list no checkpoint makes acceptable: a write into a block device (outside the
    workspace) or into a protected path (host git's configuration and hooks: docs/security.md §2)."""
    return written(command, directories) or next(
        filter(None, (_named_paths(argv, directories) for argv, _ in wrappers.candidates(command.argv))), None)


def written(command: Command, directories: tuple[str, ...] = ()) -> str | None:
    """Why the command's redirections need a human: one writes a block device or a protected path."""
    for redirect in command.redirects:
        if redirect.operator in INPUTS or redirect.target is None or duplicates(redirect):
            continue
        if is_device(redirect.target):
            return f"writes to the block device {redirect.target}"
        if protected(redirect.target, directories):
            return f"writes the protected path {redirect.target}"
    return None  # pragma: no mutate  (falling off the end returns None too)


def harm(command: Command) -> str | None:
    """The part of the list a checkpoint can undo (the workspace's files and its repository)."""
    reason = _option_variables(command)
    if reason:
        return reason
    found, reason = commands_run(command.argv)
    if reason:
        return reason
    for argv, via in found:
        reason = _program(argv, via)
        if reason:
            return reason
    return None  # pragma: no mutate  (falling off the end returns None too)


def commands_run(argv: list[str | None]) -> tuple[list[tuple[list[str | None], tuple[str, ...]]], str | None]:
    """Every command this argv may run (wrappers.candidates, and through EXTRA_WRAPPERS), and why the
    search gave up (too many words to follow: then the command is on the list, fail closed)."""
    found = wrappers.candidates(argv)
    extra: list[tuple[list[str | None], tuple[str, ...]]] = []
    calls = 0
    for inner, via in found:
        name = wrappers.program(inner)
        if name not in EXTRA_WRAPPERS:
            continue
        starts = [i for i, word in enumerate(inner) if i and (word is None or not word.startswith("-"))]
        if len(starts) > EXTRA_STARTS or calls + len(starts) > EXTRA_CALLS:
            return found, f"{name} runs a command this check cannot find among its many words"
        calls += len(starts)
        for start in starts:
            extra.extend((a, via + (name,) + v) for a, v in wrappers.candidates(inner[start:]))
    return found + extra, None


def duplicates(redirect: Redirect) -> bool:
    """`2>&1`, `>&-`: descriptors, not files."""
    return "&" in redirect.operator and (redirect.target or "-").lstrip("-").isdigit() or redirect.target == "-"


def writes_files(command: Command) -> bool:
    """Output redirected into a file (anything but harmless devices and descriptor duplication)."""
    return any(r.operator not in INPUTS and not duplicates(r) and not (r.target and r.target in HARMLESS_DEVICES)
               for r in command.redirects)


def is_device(path: str) -> bool:
    if "dev" not in path:  # pragma: no mutate  (a shortcut: without it the same paths are judged, only slower)
        return False  # no lexical normalisation makes a /dev path of one without "dev" (and this is per word)
    path = normalise(path)
    while (root := PROC_ROOT.match(path)) is not None:
        path = path[root.end():] or "/"
    return path.startswith("/dev/") and path not in HARMLESS_DEVICES and not path.startswith(HARMLESS_DEVICE_DIRS)


def protected(path: str, directories: tuple[str, ...] = ()) -> bool:
    """Whether a path is (or is inside) one the agent must not write unconfirmed, by the one rule the
    file tools and the sandbox apply (sandbox.protect.protected_reason): a repository's config, hooks,
    commondir, info and modules, any `.git` entry, Abhed's own `.abhed/`. Relative paths are also read
    from every directory a `cd` of the line may have entered. Where the workspace root lies in a path
    named on a command line is not known here, so every tail of the path is judged as if the root
    were just above it (`.abhed` then counts at any depth: stricter, never looser, than the rule)."""
    if ".git" not in path and ".abhed" not in path and not any(".git" in d or ".abhed" in d for d in directories):
        return False  # the rule needs a component named .git or .abhed (and this runs for every word)
    paths = [path] + [posixpath.join(d, path) for d in directories if not path.startswith("/")]
    for candidate in paths:
        parts = [p for p in normalise(candidate).split("/") if p not in ("", ".")]
        if any(_window_protected(parts[i:i + RULE_REACH], i + RULE_REACH < len(parts)) for i in range(len(parts))):
            return True
    return False


def _window_protected(window: list[str], more: bool) -> bool:
    """The rule on a few components of a path: judging each tail whole would be quadratic (a 64 KiB
    line may hold 30,000 components), and the rule looks only at a component and the one after it
    and whether the path ends there. A NUL, which no real name holds, stands for the rest."""
    return protected_reason("/".join(window + ["\0"] if more else window)) is not None


def _named_paths(argv: list[str | None], directories: tuple[str, ...]) -> str | None:
    name = wrappers.program(argv)
    if name is None or name in READERS:
        return None
    # git looks after its own directory (its writes are judged by _git); cd only moves; a find
    # that runs nothing and writes nothing only reads.
    own_business = name in ("git", "cd", "pushd") or (name == "find" and not set(argv) & wrappers.FIND_WRITES)
    for arg in argv[1:]:
        for value in (arg, arg.split("=", 1)[1] if arg and "=" in arg else None):
            if not value:
                continue
            if is_device(value):
                return f"{name} names the block device {value}"
            if protected(value, directories) and not own_business:
                return f"{name} names the protected path {value}"
    return None  # pragma: no mutate  (falling off the end returns None too)


# -- emptying a file, options from the environment ---------------------------------------------


def emptied(commands: list[Command]) -> str | None:
    """`: > f`, `> f`, `{ true; } > f`, `cat /dev/null > f`: a truncating redirect that only commands
    writing nothing reach. Judged over the line: the commands of `while true; do date; done > log`
    share one redirect (the same object), and `date` writes into it."""
    silent: dict[int, tuple[Redirect, bool]] = {}
    for command in commands:
        quiet = _silent(command.argv)
        for r in command.redirects:
            if r.operator in TRUNCATING and r.target and not duplicates(r) and r.target not in HARMLESS_DEVICES:
                silent[id(r)] = (r, silent.get(id(r), (r, True))[1] and quiet)
    target = next((r.target for r, quiet in silent.values() if quiet), None)
    return f"`> {target}` empties the file {target}" if target else None


def _silent(argv: list[str | None]) -> bool:
    name = wrappers.program(argv)
    args = argv[1:]
    if name is None:
        return not argv  # `> f` alone; a run-time name (None) may print anything
    if name == "cat":
        return all(a is not None and normalise(a) == "/dev/null" for a in args) and bool(args)
    if name in ("echo", "printf"):  # nothing but options and blanks: an empty or blank file
        return not [a for a in args if a is None or a.strip() and not re.fullmatch(r"-[neE]+", a)]
    return name in SILENT


def _option_variables(command: Command) -> str | None:
    """TAR_OPTIONS=... tar, `export RSYNC_RSH=...`, `env TAR_OPTIONS=... tar`: options from the environment."""
    for text in [*command.assignments, *(a for a in command.argv if a)]:
        name, assigns, _ = text.partition("=")
        if assigns and name in OPTION_VARIABLES:
            return f"{name} gives {OPTION_VARIABLES[name]} options from the environment, which can run programs"
    return None  # pragma: no mutate  (falling off the end returns None too)


# -- programs -----------------------------------------------------------------------------------


def _program(argv: list[str | None], via: tuple[str, ...]) -> str | None:
    name = wrappers.program(argv)
    if name is None:
        return None
    args = argv[1:]
    if name in WIPERS or name.startswith(("mkfs", "fsck")):
        return f"{name} destroys filesystems or data"
    check = _PROGRAMS.get(name)
    reason = check(args, wrappers.options(args), via) if check else None
    if reason:
        return reason
    feeder = next((f for f in FEEDERS if f in via), None)
    if feeder and (name in FED or INTERPRETER.fullmatch(name)):
        return f"{feeder} gives {name} arguments read at run time, which can be options or code"
    hidden = next((w for w in via if w in EXTRA_WRAPPERS), None)
    if hidden and name in SHELLS and any(a and re.fullmatch(r"-[^-]*c.*", a) for a in args):
        return f"{hidden} runs a {name} -c script, which this check does not read"  # shellparse does not see it
    if name in SHELLS or INTERPRETER.fullmatch(name):
        return _stdin_script(name, args)
    return None  # pragma: no mutate  (falling off the end returns None too)


Check = Callable[[list[str | None], Options, tuple[str, ...]], str | None]  # pragma: no mutate  (a type alias)


def _rm(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
    if opts.has("rRf", "recursive", "force", "no-preserve-root"):
        return "rm with recursive or force flags"
    if None in args:
        return "rm with arguments only known at run time (they may be -rf)"
    if via and via[-1] == "find":
        return "find rm deletes every file it finds"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _rsync(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
    if opts.has("", "delete", "del", "remove-source-files", "remove-sent-files") or any(
            given.startswith("delete") for given in opts.long):
        return "rsync --delete/--remove-source-files removes files"
    if opts.has("e", "rsh", "rsync-path"):
        return "rsync -e/--rsh/--rsync-path runs a command given as a string"
    return None  # pragma: no mutate  (falling off the end returns None too)


# tar's options that run a program or a command string; `--checkpoint` alone only counts records.
TAR_RUNS = ("checkpoint-action", "use-compress-program", "to-command", "info-script", "new-volume-script",
            "rsh-command", "rmt-command")


def _tar(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
    if opts.has("", "remove-files", "delete", "recursive-unlink"):
        return "tar that deletes files"
    old_style = set(args[0]) if args and args[0] and not args[0].startswith("-") else set()  # `tar cIf prog a.tar`
    if opts.has("IF") or old_style & {"I", "F"} or any(
            abbreviates(given, name) and given != "checkpoint" for given in opts.long for name in TAR_RUNS):
        return "tar that runs a program (-I, -F, --use-compress-program, --to-command, --checkpoint-action...)"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _find(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
    if "-delete" in args:
        return "find that deletes what it finds"
    if set(args) & {"-fprint", "-fprint0", "-fprintf", "-fls"}:
        return "find -fprint/-fls writes (first emptying) a file"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _recursive(name: str) -> Check:
    def check(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
        if opts.has("R", "recursive") and any(t is None or t.rstrip("/") in ("", "~", "/*", "~/*")
                                              or t.startswith("$HOME") for t in opts.operands[1:]):
            return f"{name} -R on / or the home directory"
        return None  # pragma: no mutate  (falling off the end returns None too)
    return check


def _mv(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
    return "mv -f overwrites the destination without asking" if opts.has("f", "force") else None


def _sort(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
    if opts.has("o", "output"):
        return "sort -o writes its output file (emptying it first)"
    return "sort --compress-program runs a program" if opts.has("", "compress-program") else None


def _copy(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
    """`cp /dev/null f`, `install /dev/null f`, `ln -sf /dev/null f`: the destination is emptied."""
    operands = [normalise(a) for a in opts.operands if a]
    sources = operands if opts.has("t", "target-directory") else operands[:-1]
    empty = next((s for s in sources if s in EMPTY_SOURCES), None)
    return f"copying {empty} empties (or fills) the file it writes" if empty else None


def _ln(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
    return _copy(args, opts, via) if opts.has("f", "force") else None


def _in_place(what: str, value_letters: str) -> Check:
    """sed -i, perl -i: the file is rewritten in place. In a cluster (`-ni`, `-pi.bak`) a letter
    that takes a value ends it: `sed -es/i/x/` has no -i."""
    def check(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
        for arg in args:
            if arg is None or arg == "--" or not arg.startswith("-"):
                continue
            if arg.startswith("--") and abbreviates(arg[2:].split("=", 1)[0], "in-place"):
                return f"{what} -i rewrites files in place"
            for letter in arg[1:] if not arg.startswith("--") else "":  # pragma: no mutate  (arg[0] "-" is no letter)
                if letter == "i":
                    return f"{what} -i rewrites files in place"
                if letter in value_letters:
                    break
        return None  # pragma: no mutate  (falling off the end returns None too)
    return check


def _zip(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
    if any(a and not a.startswith("--") and a.startswith("-") and "TT" in a for a in args) or opts.has(
            "", "unzip-command"):
        return "zip -TT/--unzip-command runs a command given as a string"
    return None  # pragma: no mutate  (falling off the end returns None too)


# ssh_config keywords that run a local command or load code (`-o ProxyCommand=...`), or read more config.
SSH_RUNNING = frozenset({"proxycommand", "localcommand", "knownhostscommand", "pkcs11provider",
                         "securitykeyprovider", "include", "match"})
SSH_VALUE_LETTERS = {"ssh": "BbcDEeFIiJLlmOopQRSWw", "scp": "cDFiJloPSX", "sftp": "BbcDFiJloPRSsX"}
# Options that name a program to run, a library to load or a config file (which can run commands).
SSH_RUN_LETTERS = {"ssh": "FI", "scp": "FS", "sftp": "FSD"}


def _ssh(name: str) -> Check:
    def check(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
        for letter in _short_options(args, SSH_VALUE_LETTERS[name]):
            if letter in SSH_RUN_LETTERS[name]:
                return f"{name} -{letter} names a program, library or configuration that runs local commands"
        for value in _ssh_config_values(args):
            keyword = re.split(r"[\s=]", (value or "").strip(), maxsplit=1)[0].lower()
            if value is None or keyword in SSH_RUNNING:
                return f"{name} -o {keyword or '(run-time value)'} runs a local command"
        return None  # pragma: no mutate  (falling off the end returns None too)
    return check


def _short_options(args: list[str | None], value_letters: str) -> Iterator[str]:
    """BSD getopt: the option letters up to the first operand; a value letter takes the rest of its
    word or the next word (which is then no option)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg is None or arg == "--" or not arg.startswith("-") or arg == "-":
            return
        for j, letter in enumerate(arg[1:], 1):
            yield letter
            if letter in value_letters:
                if j == len(arg) - 1:  # the value is the next word
                    i += 1
                break
        i += 1


def _ssh_config_values(args: list[str | None]) -> Iterator[str | None]:
    """Every `-o VALUE` anywhere in the line (ssh also reads options after the host)."""
    for i, arg in enumerate(args):
        if arg is not None and re.fullmatch(r"-[A-Za-z0-9]*o.*", arg):
            at = arg.index("o")
            yield arg[at + 1:] or (args[i + 1] if i + 1 < len(args) else "")


GDB_RUNS = ("ex", "eval-command", "x", "command", "iex", "init-eval-command", "ix", "init-command")


def _gdb(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
    """gdb reads long options with one dash and unique prefixes: `-ex`, `-eval`, `--command=f`."""
    for arg in args:
        given = (arg or "").lstrip("-").split("=", 1)[0]
        if arg and arg.startswith("-") and any(given == n or len(given) > 1 and n.startswith(given) for n in GDB_RUNS):
            return "gdb -ex/-x runs debugger commands, which can run a shell"
    return None  # pragma: no mutate  (falling off the end returns None too)


_SCRIPT_VALUES = {"shell": ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"), "interpreter": ("-W", "-X", "-r", "-I")}


def _stdin_script(name: str, args: list[str | None]) -> str | None:
    """`sh /dev/stdin`, `bash /proc/self/fd/0`, `python3 -`: a script read from the input."""
    shell = name in SHELLS
    values = _SCRIPT_VALUES["shell" if shell else "interpreter"]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg is None:
            return None
        if arg == "--" or (arg == "-" and shell):
            i += 1
            break
        if arg == "-" or not arg.startswith(("-", "+") if shell else "-"):
            break
        if (shell and arg[:1] == "-" and "c" in arg[1:] and not arg.startswith("--")) or (
                not shell and re.fullmatch(r"-[A-Za-z]*[cemE].*|--eval.*|--print.*|-p", arg)):
            return None  # the code is a string on the line: analysed, or an interpreter's business
        i += 2 if arg in values else 1
    script = args[i] if i < len(args) else None
    if script is not None and (STDIN_SCRIPT.fullmatch(normalise(script)) or (script == "-" and not shell)):
        return f"{name} runs a script read from {script} (its input), which nobody has read"
    return None  # pragma: no mutate  (falling off the end returns None too)


# -- git ------------------------------------------------------------------------------------------

# git's global options that take the next word as their value (`--shallow-file` is internal, and
# real: `git --shallow-file x reset --hard` resets).
GIT_VALUE_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env",
                               "--super-prefix", "--exec-path", "--list-cmds", "--attr-source", "--shallow-file"})
# git's global options known to take none.
GIT_FLAGS = frozenset({"-p", "--paginate", "-P", "--no-pager", "--bare", "--no-replace-objects", "--no-lazy-fetch",
                       "--no-optional-locks", "--no-advice", "--literal-pathspecs", "--glob-pathspecs",
                       "--noglob-pathspecs", "--icase-pathspecs", "--html-path", "--man-path", "--info-path",
                       "-v", "--version", "-h", "--help"})


def git_subcommands(args: list[str | None]) -> Iterator[int]:
    """Where git's subcommand may be: after the global options, and after every word an option
    this module does not know may have taken as its value (each such word is judged as a
    subcommand too: fail closed)."""
    maybe_value = False
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg is not None and arg.startswith("-") and not maybe_value:
            skip = arg in GIT_VALUE_OPTIONS
            maybe_value = not skip and arg not in GIT_FLAGS and "=" not in arg
            continue
        yield i
        if not maybe_value and arg is not None:
            return
        maybe_value = arg is None


def _git(args: list[str | None], opts: Options, via: tuple[str, ...]) -> str | None:
    for i in git_subcommands(args):
        check = _GIT_CHECKS.get(args[i] or "")
        rest = args[i + 1:]
        reason = check(wrappers.options(rest), rest) if check else None
        if reason:
            return reason
    return None  # pragma: no mutate  (falling off the end returns None too)


GitCheck = Callable[[Options, list[str | None]], str | None]  # pragma: no mutate  (a type alias)


def _runs(sub: str, letters: str, *names: str) -> GitCheck:
    """A git subcommand's options that run a command given as a string."""
    def check(opts: Options, rest: list[str | None]) -> str | None:
        if opts.has(letters, *names):
            return f"git {sub} {'/'.join(['-' + c for c in letters] + ['--' + n for n in names])} runs a command string"
        return None  # pragma: no mutate  (falling off the end returns None too)
    return check


def _first(*words: str) -> Callable[[Options], bool]:
    return lambda opts: list(opts.operands[:1]) in [[w] for w in words]


def _git_push(opts: Options, rest: list[str | None]) -> str | None:
    if opts.has("", "receive-pack", "exec"):
        return "git push --receive-pack/--exec runs a command string"
    if (opts.has("fd", "force", "force-with-lease", "force-if-includes", "mirror", "delete", "prune")
            or any(a is None or a.startswith(("+", ":")) for a in opts.operands)):
        return "git push that rewrites or deletes remote history"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _git_checkout(opts: Options, rest: list[str | None]) -> str | None:
    if "--" in rest or opts.has("fpmB", "force", "ours", "theirs", "merge", "patch", "pathspec-from-file"):
        return "git checkout that overwrites files in the working tree"
    operands = [a for a in opts.operands if a != "-"]
    # -b NEW [START], --orphan NEW [START]; --detach/-t [START]: no operand is a file
    allowed = 2 if opts.has("b", "orphan") else 1 if opts.has("t", "detach", "track") else 0
    if len(operands) > allowed:
        return ("git checkout NAME overwrites the file NAME when there is one (a file and a branch are spelled "
                "alike): to change branches, use `git switch NAME`")
    return None  # pragma: no mutate  (falling off the end returns None too)


def _git_config(opts: Options, rest: list[str | None]) -> str | None:
    reads = opts.has("l", "get", "get-all", "get-regexp", "get-urlmatch", "list", "show-origin", "show-scope")
    writes = opts.has("e", "add", "replace-all", "unset", "unset-all", "rename-section", "remove-section", "edit")
    operands = list(opts.operands)
    if writes or (not reads and (len(operands) >= 2 or operands[:1] in (["set"], ["unset"], ["edit"]))):
        return "git config that writes the configuration (which can name commands git runs)"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _git_reset(opts: Options, rest: list[str | None]) -> str | None:
    if opts.has("", "hard", "merge", "keep"):
        return "git reset --hard discards uncommitted work"
    return "git reset moves the branch or the index (history or staged work)"


def _git_clone(opts: Options, rest: list[str | None]) -> str | None:
    if opts.has("u", "upload-pack"):
        return "git clone -u/--upload-pack runs a command string"
    if opts.has("c", "config", "template"):
        return "git clone -c/--config/--template sets configuration or hooks that run in the new repository"
    return None  # pragma: no mutate  (falling off the end returns None too)


_REBASE_EXEC = _runs("rebase", "x", "exec")
_GIT_CHECKS: dict[str, GitCheck] = {
    "push": _git_push,
    "checkout": _git_checkout,
    "config": _git_config,
    "reset": _git_reset,
    "clone": _git_clone,
    "clean": lambda o, r: "git clean -f deletes untracked files" if o.has("f", "force") else None,
    "restore": lambda o, r: None if o.has("S", "staged") and not o.has("W", "worktree")
    else "git restore overwrites files in the working tree",
    "switch": lambda o, r: "git switch that discards changes" if o.has("fC", "force", "discard-changes",
                                                                          "force-create") else None,
    "stash": lambda o, r: "git stash drop/clear deletes stashed work" if _first("drop", "clear")(o) else None,
    "rm": lambda o, r: None if o.has("", "cached") else "git rm deletes files from the working tree",
    "branch": lambda o, r: "git branch that deletes or overwrites a branch" if o.has("DMCf", "force") else None,
    "tag": lambda o, r: "git tag -d/-f deletes or moves a tag" if o.has("df", "delete", "force") else None,
    "reflog": lambda o, r: "git reflog expire/delete drops history" if _first("expire", "delete")(o) else None,
    "gc": lambda o, r: "git gc --prune drops unreachable commits" if o.has("", "prune") else None,
    "filter-branch": lambda o, r: "git filter-branch rewrites history",
    "filter-repo": lambda o, r: "git filter-repo rewrites history",
    "update-ref": lambda o, r: "git update-ref -d deletes a ref" if o.has("d", "delete") else
    "git update-ref rewrites a ref (history)",
    "worktree": lambda o, r: "git worktree remove --force deletes a working tree" if (
        _first("remove")(o) and o.has("f", "force")) else None,
    "commit": lambda o, r: "git commit --amend rewrites the last commit" if o.has("", "amend") else None,
    "rebase": lambda o, r: _REBASE_EXEC(o, r) or "git rebase rewrites history",
    "checkout-index": lambda o, r: "git checkout-index -f overwrites files in the working tree" if o.has(
        "f", "force") else None,
    "read-tree": lambda o, r: "git read-tree -u/--reset overwrites the index or the working tree" if o.has(
        "u", "reset") else None,
    "fetch": _runs("fetch", "", "upload-pack"),
    "pull": _runs("pull", "", "upload-pack"),
    "ls-remote": _runs("ls-remote", "", "upload-pack"),
    "fetch-pack": _runs("fetch-pack", "", "upload-pack", "exec"),
    "send-pack": _runs("send-pack", "", "receive-pack", "exec"),
    "archive": _runs("archive", "", "exec"),
    "grep": _runs("grep", "O", "open-files-in-pager"),
    "difftool": _runs("difftool", "x", "extcmd"),
    "bisect": lambda o, r: "git bisect run runs a command" if _first("run")(o) else None,
    "submodule": lambda o, r: "git submodule foreach runs a command string" if _first("foreach")(o) else None,
}


_PROGRAMS: dict[str, Check] = {
    "rm": _rm, "rsync": _rsync, "tar": _tar, "find": _find, "chmod": _recursive("chmod"), "chown": _recursive("chown"),
    "chgrp": _recursive("chgrp"),
    "mv": _mv, "sort": _sort, "cp": _copy, "install": _copy, "ln": _ln, "zip": _zip, "gdb": _gdb, "git": _git,
    "sed": _in_place("sed", "efl"), "perl": _in_place("perl", "CdDFIMmVxeE"), "ruby": _in_place("ruby", "CEFIKrTWxe"),
    "ssh": _ssh("ssh"), "scp": _ssh("scp"), "sftp": _ssh("sftp"),
}
