"""What a command really runs: a generic reading of options and of commands that run other commands.

`sudo --user root rm -rf /`, `timeout --signal KILL 5 rm -rf x`, `find . -exec /bin/rm -rf {} +`:
a wrapper runs its arguments as a command, and knowing where that command starts needs each
wrapper's option table -- the table that is always one option short. So the security checks do not
guess: through a wrapper, *every* word that is not an option may be where the inner command
starts, and each such suffix is judged (`candidates`). Options are read generically: clusters of
short letters, long options with GNU abbreviations (`--rec` is `--recursive`), `--` ending them.

`primary` is the one best guess (for messages and the interactive-program check, not security).
"""

from __future__ import annotations

import os
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
MAX_CANDIDATES = 256

# A best guess at option values, for `primary` only.
_VALUE_OPTIONS = {
    "sudo": {"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "--user", "--group", "--host", "--prompt",
             "--chdir", "--role", "--type", "--other-user", "--close-from"},
    "doas": {"-u", "-C"}, "env": {"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}, "exec": {"-a"},
    "nice": {"-n", "--adjustment"}, "time": {"-f", "-o", "--format", "--output"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"}, "stdbuf": {"-i", "-o", "-e"},
    "ionice": {"-c", "-n", "-p"}, "xargs": {"-I", "-n", "-P", "-d", "-L", "-s", "-E", "-a"},
    "flock": {"-w", "-E", "--timeout", "--conflict-exit-code"},
}


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
    return os.path.basename(argv[0]) if argv and argv[0] else None


def candidates(argv: list[str | None]) -> list[tuple[list[str | None], tuple[str, ...]]]:
    """Every command this argv may run, with the wrappers passed to reach it; argv itself first.

    Through a wrapper, each later word that is not an option may start the inner command: all are
    listed. `xargs` adds arguments read at run time (a None at the end); `find -exec` runs the words
    up to `;` or `+`. Bounded: beyond MAX_CANDIDATES the caller treats the line as opaque.
    """
    found: list[tuple[list[str | None], tuple[str, ...]]] = []
    seen: set[tuple[str | None, ...]] = set()
    todo = [(list(argv), ())]
    while todo and len(found) < MAX_CANDIDATES:
        current, via = todo.pop(0)
        key = tuple(current) + via
        if key in seen:
            continue
        seen.add(key)
        found.append((current, via))
        name = program(current)
        if name in WRAPPERS:
            for inner in _inner_commands(name, current):
                todo.append((inner, via + (name,)))
    return found


def _inner_commands(name: str, argv: list[str | None]) -> list[list[str | None]]:
    if name == "find":
        inner = []
        for i, arg in enumerate(argv):
            if arg in FIND_ACTIONS:
                rest = argv[i + 1:]
                end = next((j for j, a in enumerate(rest) if a in (";", "+")), len(rest))
                inner.append(rest[:end])
        return inner
    tail: list[str | None] = [None] if name == "xargs" else []
    starts, ended = [], False
    for i in range(1, len(argv)):
        arg = argv[i]
        if arg == "--" and not ended:
            ended = True
            continue
        if ended or arg is None or not arg.startswith(("-", "+")):
            starts.append(i)
    return [argv[i:] + tail for i in starts]


def primary(argv: list[str | None]) -> tuple[list[str | None], list[str]]:
    """The command a wrapper most likely runs, with the wrappers passed (a guess: not for security)."""
    argv, passed = list(argv), []
    while (name := program(argv)) in WRAPPERS and name != "find":
        passed.append(name)
        takes_value = _VALUE_OPTIONS.get(name, set())
        i = 1
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
        argv = argv[i:]
    return argv, passed
