"""What a command really runs: commands that run other commands, read exactly where their options are
known and generically where they are not; and the normalised command an operator's rule is checked against.

`sudo --user root rm -rf /`, `timeout --signal KILL 5 rm -rf x`, `find . -exec /bin/rm -rf {} +`:
a wrapper runs its arguments as a command. For the wrappers in SPECS, every option is known
(GNU getopt: short clusters, attached or separate values, long names and their abbreviations,
`--`): their command starts at one known word. Anything else -- an option not in the table, a
run-time word among the options, a mode that runs no command -- falls back to the generic reading
that needs no table: *every* later word that is not an option may be where the inner command starts,
and each such suffix is judged (`candidates`). Options of any program are read generically
(`options`): clusters of short letters, long options with GNU abbreviations (`--rec` is `--recursive`).

Bounded: `candidates` follows at most MAX_CANDIDATES commands and materialises and scans at most
`budget(len(argv))` words, so any argv is followed in linear time and memory; past that the
result says it is incomplete, and the caller treats the line as opaque.

`normal` is the command a rule is checked against (`bash(rm:*)`): through wrappers that change
nothing about what runs (TRANSPARENT: `timeout 5`, `nice`, `command`, `env` without settings...),
`/bin/rm` as `rm`, `git-push` as `git push`, git's global options that change nothing about what
runs dropped (`git -C dir --no-pager push` is `git push`). `primary` is the one best guess for
messages and the interactive-program check (not for security).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

# Programs that run the rest of their arguments as a command (after options and their own operands).
WRAPPERS = frozenset({
    "sudo", "doas", "env", "command", "builtin", "exec", "nice", "nohup", "time", "timeout", "stdbuf", "ionice",
    "setsid", "chrt", "taskset", "flock", "unshare", "setpriv", "nsenter", "chroot", "runuser", "busybox",
    "unbuffer", "xargs", "find", "fakeroot", "proot", "firejail", "strace", "ltrace", "valgrind", "catchsegv",
    "numactl", "cgexec", "systemd-run", "eatmydata", "faketime", "torsocks", "proxychains", "proxychains4",
    "bwrap", "setarch", "linux32", "linux64", "prlimit", "capsh", "daemonize", "start-stop-daemon", "caffeinate",
    "watch", "entr", "parallel", "pkexec", "sg", "su", "script", "rlwrap", "tsp", "ts", "chpst", "softlimit",
    "coproc",
})
FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
FIND_WRITES = FIND_ACTIONS | {"-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}  # a find that changes files
FIND_ENDS = frozenset({";", "+"})
MAX_CANDIDATES = 256
MAX_QUEUED = 4 * MAX_CANDIDATES  # inner commands waiting to be followed: more could never be listed
MAX_CHAIN = 16  # wrappers `normal` passes: a rule does not cover a longer chain (a human is asked)


def budget(words: int) -> int:
    """How many words `candidates` may copy and scan for an argv of `words` words: linear in it, so a
    long wrapper chain (`nice nice ... ls`, each suffix a command) stops early instead of growing as
    its square; generous enough that a few wrappers before thousands of arguments are followed whole."""
    return 2 * words + 2048


@dataclass(frozen=True)
class Options:
    """A command's arguments read generically: short letters, long names, operands."""

    short: frozenset[str]
    long: tuple[str, ...]  # without the dashes and without =value
    operands: tuple[str | None, ...]  # None: only known at run time

    def has(self, letters: str = "", *names: str) -> bool:
        """Whether any of these short letters, or any of these long options (possibly abbreviated), is set."""
        return bool(self.short & set(letters)) or any(abbreviates(given, name) for given in self.long for name in names)


def abbreviates(given: str, name: str) -> bool:
    """GNU getopt_long accepts any unambiguous prefix; an ambiguous one counts too (fail closed)."""
    return bool(given) and name.startswith(given)


def options(args: list[str | None] | tuple[str | None, ...]) -> Options:
    short: set[str] = set()
    long: list[str] = []
    operands: list[str | None] = []
    ended = False
    for arg in args:
        if ended or arg is None or arg == "-" or not arg.startswith("-"):
            operands.append(arg)
        elif arg == "--":
            ended = True
        elif arg.startswith("--"):
            long.append(arg[2:].split("=", 1)[0])
        else:
            short.update(arg[1:])
    return Options(frozenset(short), tuple(long), tuple(operands))


def program(argv: list[str | None]) -> str | None:
    """The command's name without its directory: `/bin/rm` -> `rm`."""
    return argv[0].rpartition("/")[2] if argv and argv[0] else None


# -- exact option tables ---------------------------------------------------------------------------

FLAG, VALUE, OPTIONAL = 0, 1, 2  # an option takes no value, a value (attached or the next word), an attached one


@dataclass(frozen=True)  # pragma: no mutate  (immutability guards against our own bugs; no decision depends on it)
class Spec:
    """One wrapper's options, from its manual: what getopt_long reads before the command starts.

    Options are named by a key (the short letter, or the long name where there is none).
    `operands`: the forms of its own words before the command (timeout's duration, chrt's priority);
    a word of another form is read as getopt would not (the wrapper refuses it): not exact.
    `settings`: NAME=value words before the command (env, sudo). `modes`: options after which it
    runs no command, or a shell string (`command -v`, `sudo -s`): not followed exactly.
    `effects`: options that make it do more than run the command as given (`time -o FILE` writes a
    file, `env -u`... no): a rule does not see through a wrapper using one."""

    short: dict[str, int]
    long: dict[str, tuple[str, int]]  # long name -> (key, kind)
    operands: tuple[str, ...] = ()
    settings: bool = False
    modes: frozenset[str] = frozenset()
    effects: frozenset[str] = frozenset()
    dash: str | None = None  # the key a lone `-` stands for (`env -` is `env -i`)


DURATION = r"([0-9]+\.?[0-9]*|\.[0-9]+)[smhd]?"


def _short(optstring: str) -> dict[str, int]:
    """getopt's optstring: `n:` takes a value, `h::` an optional attached one."""
    return {m.group(1): len(m.group(2)) for m in re.finditer(r"([^:])(:{0,2})", optstring)}


SPECS: dict[str, Spec] = {
    "command": Spec(_short("pvV"), {}, modes=frozenset("vV")),
    "builtin": Spec({}, {}),
    "exec": Spec(_short("cla:"), {}),
    "nohup": Spec({}, {"help": ("help", FLAG), "version": ("version", FLAG)}, modes=frozenset({"help", "version"})),
    "eatmydata": Spec({}, {}),
    "nice": Spec(_short("n:"), {"adjustment": ("n", VALUE), "help": ("help", FLAG), "version": ("version", FLAG)},
                 modes=frozenset({"help", "version"})),
    "timeout": Spec(_short("k:s:v"), {"kill-after": ("k", VALUE), "signal": ("s", VALUE), "verbose": ("v", FLAG),
                                      "preserve-status": ("preserve-status", FLAG),
                                      "foreground": ("foreground", FLAG), "help": ("help", FLAG),
                                      "version": ("version", FLAG)}, operands=(DURATION,), modes=frozenset({"help", "version"})),
    "stdbuf": Spec(_short("i:o:e:"), {"input": ("i", VALUE), "output": ("o", VALUE), "error": ("e", VALUE),
                                      "help": ("help", FLAG), "version": ("version", FLAG)},
                   modes=frozenset({"help", "version"})),
    "time": Spec(_short("af:o:pqvVh"), {"append": ("a", FLAG), "format": ("f", VALUE), "output": ("o", VALUE),
                                        "portability": ("p", FLAG), "quiet": ("q", FLAG), "verbose": ("v", FLAG),
                                        "version": ("V", FLAG), "help": ("h", FLAG)},
                 modes=frozenset("Vh"), effects=frozenset("ao")),
    "ionice": Spec(_short("c:n:ptPuhV"), {"class": ("c", VALUE), "classdata": ("n", VALUE), "pid": ("p", FLAG),
                                          "pgid": ("P", FLAG), "uid": ("u", FLAG), "ignore": ("t", FLAG),
                                          "help": ("h", FLAG), "version": ("V", FLAG)},
                   modes=frozenset("pPuhV")),
    "setsid": Spec(_short("cfwhV"), {"ctty": ("c", FLAG), "fork": ("f", FLAG), "wait": ("w", FLAG),
                                     "help": ("h", FLAG), "version": ("V", FLAG)}, modes=frozenset("hV")),
    "chrt": Spec(_short("abdfimoprRvT:P:D:hV"), {
        "all-tasks": ("a", FLAG), "batch": ("b", FLAG), "deadline": ("d", FLAG), "fifo": ("f", FLAG),
        "idle": ("i", FLAG), "max": ("m", FLAG), "other": ("o", FLAG), "pid": ("p", FLAG), "rr": ("r", FLAG),
        "reset-on-fork": ("R", FLAG), "verbose": ("v", FLAG), "sched-runtime": ("T", VALUE),
        "sched-period": ("P", VALUE), "sched-deadline": ("D", VALUE), "help": ("h", FLAG), "version": ("V", FLAG)},
        operands=(r"[0-9]+",), modes=frozenset("mphV")),
    "taskset": Spec(_short("acphV"), {"all-tasks": ("a", FLAG), "cpu-list": ("c", FLAG), "pid": ("p", FLAG),
                                      "help": ("h", FLAG), "version": ("V", FLAG)}, operands=(r"[0-9a-fA-FxX,:-]+",),
                    modes=frozenset("phV")),
    "env": Spec(_short("iu:C:S:v0"), {
        "ignore-environment": ("i", FLAG), "unset": ("u", VALUE), "chdir": ("C", VALUE), "split-string": ("S", VALUE),
        "debug": ("v", FLAG), "null": ("0", FLAG), "block-signal": ("block-signal", OPTIONAL),
        "default-signal": ("default-signal", OPTIONAL), "ignore-signal": ("ignore-signal", OPTIONAL),
        "list-signal-handling": ("list-signal-handling", FLAG), "help": ("help", FLAG), "version": ("version", FLAG)},
        settings=True, modes=frozenset({"S", "help", "version"}), dash="i"),
    "xargs": Spec(_short("0a:d:E:e::I:i::L:l::n:oprP:s:tx"), {
        "null": ("0", FLAG), "arg-file": ("a", VALUE), "delimiter": ("d", VALUE), "eof": ("e", OPTIONAL),
        "replace": ("i", OPTIONAL), "max-lines": ("L", VALUE), "max-args": ("n", VALUE), "open-tty": ("o", FLAG),
        "interactive": ("p", FLAG), "max-procs": ("P", VALUE), "process-slot-var": ("process-slot-var", VALUE),
        "no-run-if-empty": ("r", FLAG), "max-chars": ("s", VALUE), "show-limits": ("show-limits", FLAG),
        "verbose": ("t", FLAG), "exit": ("x", FLAG), "help": ("help", FLAG), "version": ("version", FLAG)},
        modes=frozenset({"help", "version"})),
    "sudo": Spec(_short("Aa:BbC:c:D:Eeg:Hh::iKklNnPp:R:r:SsT:t:U:u:Vv"), {
        "askpass": ("A", FLAG), "auth-type": ("a", VALUE), "bell": ("B", FLAG), "background": ("b", FLAG),
        "close-from": ("C", VALUE), "login-class": ("c", VALUE), "chdir": ("D", VALUE),
        "preserve-env": ("E", OPTIONAL), "edit": ("e", FLAG), "group": ("g", VALUE), "set-home": ("H", FLAG),
        "host": ("host", VALUE), "help": ("h", FLAG), "login": ("i", FLAG), "remove-timestamp": ("K", FLAG),
        "reset-timestamp": ("k", FLAG), "list": ("l", FLAG), "no-update": ("N", FLAG),
        "non-interactive": ("n", FLAG), "preserve-groups": ("P", FLAG), "prompt": ("p", VALUE),
        "chroot": ("R", VALUE), "role": ("r", VALUE), "stdin": ("S", FLAG), "shell": ("s", FLAG),
        "command-timeout": ("T", VALUE), "type": ("t", VALUE), "other-user": ("U", VALUE), "user": ("u", VALUE),
        "version": ("V", FLAG), "validate": ("v", FLAG)},
        settings=True, modes=frozenset("ehiKklsVv")),
    "doas": Spec(_short("C:Lnsu:"), {}, modes=frozenset("CLs")),
}
# Wrappers that change nothing about what their command does to files: a rule sees through them.
# Not sudo/doas (another user), xargs (arguments read at run time), find (runs it per file), nor the
# rest of WRAPPERS (other namespaces, roots, users, tracing, strings): a rule never covers those.
TRANSPARENT = frozenset({"command", "builtin", "exec", "nohup", "eatmydata", "nice", "timeout", "stdbuf", "time",
                         "ionice", "setsid", "chrt", "taskset", "env"})
SETTING = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
NICE_NUMBER = re.compile(r"-[+-]?[0-9]+")


@dataclass(frozen=True)  # pragma: no mutate  (immutability guards against our own bugs; no decision depends on it)
class Parsed:
    start: int  # where the wrapped command starts (len(argv): none)
    used: frozenset[str]  # the option keys given
    settings: bool  # NAME=value words before the command


def parse(argv: list[str | None], at: int = 0, end: int | None = None) -> Parsed | None:
    """The wrapper at argv[at] read with its option table: where its command starts. None when the
    reading is not exact: no table, an option not in it, a run-time word before the command, an
    ambiguous abbreviation, a missing value."""
    end = len(argv) if end is None else end
    spec = SPECS.get(program(argv[at:at + 1]) or "")
    if spec is None:
        return None
    i, used = at + 1, set()
    if program(argv[at:at + 1]) == "nice" and i < end and (word := argv[i]) is not None and NICE_NUMBER.fullmatch(word):
        used.add("n")  # the old form, `nice -5 cmd`
        i += 1
    while i < end:
        arg = argv[i]
        if arg is None:
            return None
        if arg == "--":
            i += 1
            break
        if arg == "-" and spec.dash:  # after it, getopt has ended: settings and the command follow
            used.add(spec.dash)
            i += 1
            break
        if arg == "-" or not arg.startswith("-"):
            break
        step = _long(spec, arg, used) if arg.startswith("--") else _cluster(spec, arg, used)
        if step is None:
            return None
        i += step
    start, settings = _operands(spec, argv, i, end)
    return None if start is None or start > end else Parsed(start, frozenset(used), settings)


def _long(spec: Spec, arg: str, used: set[str]) -> int | None:
    name, eq, _ = arg[2:].partition("=")
    exact = spec.long.get(name)
    found = [spec.long[n] for n in spec.long if abbreviates(name, n)] if exact is None else [exact]
    if len(set(found)) != 1:
        return None  # unknown, or an ambiguous abbreviation (getopt refuses it)
    key, kind = found[0]
    if kind == FLAG and eq:
        return None
    used.add(key)
    return 2 if kind == VALUE and not eq else 1


def _cluster(spec: Spec, arg: str, used: set[str]) -> int | None:
    for j in range(1, len(arg)):
        kind = spec.short.get(arg[j])
        if kind is None:
            return None
        used.add(arg[j])
        if kind != FLAG:
            return 2 if kind == VALUE and j + 1 == len(arg) else 1  # the value is the rest, or the next word
    return 1


def _operands(spec: Spec, argv: list[str | None], i: int, end: int) -> tuple[int | None, bool]:
    for form in spec.operands:
        if i >= end or (word := argv[i]) is None or not re.fullmatch(form, word):
            return None, False
        i += 1
    settings = False
    while spec.settings and i < end and (word := argv[i]) is not None and SETTING.match(word):
        settings = True
        i += 1
    return i, settings


def inner_starts(argv: list[str | None], at: int, end: int) -> list[int]:
    """Where the command run by the wrapper at argv[at] may start: one word when its options read
    exactly; else every later word that is not an option (and every word after `--`)."""
    parsed = parse(argv, at, end)
    if parsed is not None and not parsed.used & SPECS[program(argv[at:at + 1]) or ""].modes:  # parsed: a known program
        return [parsed.start] if parsed.start < end else []
    starts, ended = [], False
    for i in range(at + 1, end):
        arg = argv[i]
        if arg == "--" and not ended:
            ended = True
            continue
        if ended or arg is None or not arg.startswith(("-", "+")):
            starts.append(i)
    return starts


def _find_ranges(argv: list[str | None], at: int, end: int) -> list[tuple[int, int]]:
    """`find ... -exec CMD ARGS ;`: each action's command runs up to its `;` or `+` (or the end)."""
    ranges, i = [], at + 1
    while i < end:
        if argv[i] in FIND_ACTIONS:
            stop = next((j for j in range(i + 1, end) if argv[j] in FIND_ENDS), end)
            ranges.append((i + 1, stop))
            i = stop
        i += 1
    return ranges


class Found(list):
    """The candidates: (argv, the wrappers passed to reach it); `complete` False when the bounds cut them short."""

    complete = True


def candidates(argv: list[str | None]) -> Found:
    """Every command this argv may run, with the wrappers passed to reach it; argv itself first.

    `xargs` adds arguments read at run time (a None at the end); `find -exec` runs the words up to
    `;` or `+`. Bounded (MAX_CANDIDATES commands, `budget` words copied and scanned): beyond, the
    list is cut and `complete` is False, and the caller treats the line as opaque.
    """
    found, left = Found(), budget(len(argv))
    if program(argv) not in WRAPPERS:
        found.append((list(argv), ()))  # the common case, without the queue
        return found
    queue: deque[tuple[int, int, bool, tuple[str, ...]]] = deque([(0, len(argv), False, ())])
    queued, seen = 1, set()
    while queue:
        start, end, tail, via = queue.popleft()
        key = (start, end, tail, via[-1:])
        if key in seen:
            continue
        seen.add(key)
        left -= (end - start) if found else 0  # each copy is paid for (and so is its scan below)
        if len(found) == MAX_CANDIDATES or left < 0:
            found.complete = False
            break
        current = argv[start:end] + ([None] if tail else [])
        found.append((current, via))
        name = program(current)
        if name == "find":
            inner = [(s, e, tail and e == end) for s, e in _find_ranges(argv, start, end) if s < e]
        elif name in WRAPPERS:
            inner = [(s, end, tail or name == "xargs") for s in inner_starts(argv, start, end)]
        else:
            continue
        if queued + len(inner) > MAX_QUEUED:
            found.complete = False
            break
        queued += len(inner)
        queue.extend((s, e, t, via + (name,)) for s, e, t in inner)
    return found


# -- the normalised command, for rules ---------------------------------------------------------------

# git's global options (git.c handle_options; no abbreviations): those that change nothing about what
# runs, with whether they take the next word as their value. The rest (-c, --config-env, --git-dir,
# --exec-path=, --attr-source, --shallow-file, ...) can make git run other commands or act on
# another repository's configuration: a rule does not see through them.
GIT_PLAIN_OPTIONS = {"-p": False, "--paginate": False, "-P": False, "--no-pager": False, "--bare": False,
                     "--no-replace-objects": False, "--no-lazy-fetch": False, "--no-optional-locks": False,
                     "--no-advice": False, "--literal-pathspecs": False, "--glob-pathspecs": False,
                     "--noglob-pathspecs": False, "--icase-pathspecs": False, "-C": True, "--work-tree": True,
                     "--namespace": True}


def normal(argv: list[str | None]) -> tuple[list[str | None], tuple[str, ...]] | None:
    """The command an operator's rule is checked against, and the wrappers passed to reach it; None
    when that cannot be said exactly (an option not in a table, a run-time word where a wrapper's
    options are, a wrapper that is not TRANSPARENT, a git global option that runs or redirects).

    `timeout 5 env nice /bin/rm x` -> `rm x`; `git -C . --no-pager push` -> `git push`."""
    i = 0
    passed: list[str] = []
    while i < len(argv) and len(passed) <= MAX_CHAIN:
        name = program(argv[i:i + 1])
        if name not in WRAPPERS:
            break
        if name == "find" and not set(argv[i:]) & FIND_ACTIONS:
            break  # a find that runs nothing is the program itself
        parsed = parse(argv, i)
        if name not in TRANSPARENT or parsed is None or parsed.settings or parsed.used & SPECS[name].effects:
            return None
        if parsed.used & SPECS[name].modes or parsed.start == len(argv):
            break  # `command -v x`, `nice`: the wrapper runs nothing; it is the command
        passed.append(name)
        i = parsed.start
    if i == len(argv) or not argv[i] or len(passed) > MAX_CHAIN:
        return None  # nothing, a run-time word or an empty name (`"" x`: bash finds no such command)
    name = program(argv[i:i + 1]) or ""  # argv[i] is a non-empty word here
    command: list[str | None] | None = [name, *argv[i + 1:]]
    if name.startswith("git-") and len(name) > 4:
        command, name = ["git", name[4:], *argv[i + 1:]], "git"
    if name == "git":
        command = _git(command or [])
    return None if command is None else (command, tuple(passed))


def _git(argv: list[str | None]) -> list[str | None] | None:
    i = 1
    while i < len(argv) and (arg := argv[i]) is not None and arg.startswith("-"):
        name, eq, _ = arg.partition("=")
        takes = GIT_PLAIN_OPTIONS.get(name)
        if takes is None or (eq and not takes) or (eq and name == "-C"):
            return None
        i += 2 if takes and not eq else 1
    return None if i > len(argv) else ["git", *argv[i:]]


# -- the likely command, for messages --------------------------------------------------------------

# A best guess at option values where a wrapper's reading is not exact, for `primary` only.
_VALUE_OPTIONS = {
    "sudo": {"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "--user", "--group", "--host", "--prompt",
             "--chdir", "--role", "--type", "--other-user", "--close-from"},
    "doas": {"-u", "-C"}, "env": {"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}, "exec": {"-a"},
    "nice": {"-n", "--adjustment"}, "time": {"-f", "-o", "--format", "--output"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"}, "stdbuf": {"-i", "-o", "-e"},
    "ionice": {"-c", "-n", "-p"}, "xargs": {"-I", "-n", "-P", "-d", "-L", "-s", "-E", "-a"},
    "flock": {"-w", "-E", "--timeout", "--conflict-exit-code"},
}


def primary(argv: list[str | None]) -> tuple[list[str | None], list[str]]:
    """The command a wrapper most likely runs, with the wrappers passed (a guess: not for security)."""
    at, passed = 0, []
    while (name := program(argv[at:at + 1])) in WRAPPERS and name != "find":
        passed.append(name)
        takes_value = _VALUE_OPTIONS.get(name, set())
        i = at + 1
        while i < len(argv):
            arg = argv[i]
            if arg == "--":
                i += 1
                break
            if arg is None or not (arg.startswith("-") or (name == "env" and "=" in arg)):
                break
            i += 2 if arg in takes_value else 1
        if name == "timeout" and i < len(argv):
            i += 1  # the duration
        at = min(i, len(argv))
    return argv[at:], passed
