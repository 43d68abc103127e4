"""The read-only list: bash commands that provably change no file and run no other program.

A positive list. A line is on it only when the analysis saw every word of it (nothing opaque),
nothing is redirected into a file, no variable is set, and every command is a program below given
no option that writes a file or runs a program (`sort -o`, `rg --pre`, `find -exec`, `git diff
--output`, `git log --show-signature`...); through a wrapper, nothing is on it. One test for two
uses, so they cannot disagree: ask and plan modes run such a line unasked (approval.Policy), and
dispatch takes no checkpoint before it (tools/bash.py Bash.call_traits).

git's read-only subcommands may run what the user's own git configuration names (a pager, a
textconv driver, fsmonitor): the sandbox keeps that configuration read-only (docs/security.md §2),
so they run only what the user set up. `git status` refreshes the index's stat cache, which changes
no content.
"""

from __future__ import annotations

from collections.abc import Callable

from abhed.gate import wrappers
from abhed.gate.courtesy import writes_files
from abhed.gate.shellparse import Analysis, Command
from abhed.gate.wrappers import Options

# Commands with no effect beyond the shell itself.
HARMLESS = frozenset({"true", "false", ":", "echo", "printf", "pwd", "cd", "test", "[", "[["})

Args = list[str | None]  # pragma: no mutate  (a type alias)

# Programs with no option that writes a file or runs a program.
ALWAYS = frozenset({
    "cat", "head", "tail", "wc", "ls", "stat", "du", "df", "cmp", "cut", "grep", "egrep", "fgrep", "basename",
    "dirname", "realpath", "readlink", "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum",
    "b2sum", "cksum", "od", "hexdump", "nl", "tac", "rev", "fold", "expand", "unexpand", "comm", "join", "paste",
    "tr", "column", "strings", "which", "whoami", "id", "uname", "nproc", "printenv", "seq",
}) | HARMLESS


def read_only(analysis: Analysis) -> bool:
    """Whether every command of the analysed line is on the read-only list."""
    if analysis.opaque or analysis.recursive_functions or not analysis.commands:
        return False
    return all(command.runs_script or reads(command) for command in analysis.commands)


def reads(command: Command) -> bool:
    """Whether one simple command only reads: no variable set, no output into a file, a listed program
    with no option that writes or runs. (`sh -c 'script'` itself is not: its script's commands are.)"""
    if command.assignments or writes_files(command):
        return False
    name = wrappers.program(command.argv)
    args = command.argv[1:]
    if name in ALWAYS:
        return True
    check = CHECKS.get(name or "")
    return check is not None and check(args)


def _without(letters: str, *names: str) -> Callable[[Args], bool]:
    """A program on the list unless given one of these options (GNU abbreviations count)."""
    return lambda args: not wrappers.options(args).has(letters, *names)


def _find(args: Args) -> bool:
    return not set(args) & wrappers.FIND_WRITES


def _uniq(args: Args) -> bool:
    """`uniq IN OUT` writes OUT: at most one operand, and none only known at run time (a glob)."""
    operands = _operands(args, "fsw", ("skip-fields", "skip-chars", "check-chars"))
    return len(operands) <= 1 and None not in operands


def _operands(args: Args, value_letters: str, value_names: tuple[str, ...]) -> Args:
    """The operands as getopt_long sees them: an option's value (attached, or the next word) is none."""
    operands: Args = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            operands.extend(args[i:])
            break
        if arg is None or arg == "-" or not arg.startswith("-"):
            operands.append(arg)
        elif arg.startswith("--"):
            given = arg[2:]
            i += "=" not in given and any(wrappers.abbreviates(given, n) for n in value_names)
        else:
            at = next((j for j, c in enumerate(arg[1:], 1) if c in value_letters), None)
            i += at is not None and at == len(arg) - 1
    return operands


# -- git --------------------------------------------------------------------------------------------

# Global options that neither write nor run, and those among them that take the next word.
GIT_GLOBAL_FLAGS = frozenset({"--no-pager", "-P", "--no-replace-objects", "--literal-pathspecs", "--glob-pathspecs",
                              "--noglob-pathspecs", "--icase-pathspecs", "--no-optional-locks", "--no-advice", "--bare"})
GIT_GLOBAL_VALUES = frozenset({"-C", "--git-dir", "--work-tree"})
# Options of git's diff and log family that write a file or run a program (diff.external, textconv, gpg).
DIFF_RUNS = ("output", "ext-diff", "textconv", "show-signature")


def _git(args: Args) -> bool:
    i = 0
    while i < len(args) and (arg := args[i]) is not None and arg.startswith("-"):
        if arg in GIT_GLOBAL_VALUES:
            i += 2
        elif arg in GIT_GLOBAL_FLAGS or arg.split("=", 1)[0] in GIT_GLOBAL_VALUES:
            i += 1
        else:
            return False
    if i >= len(args) or any(a is not None and ("%G" in a or "%(signature" in a) for a in args):
        return False  # `git -C x` alone; a format that verifies signatures runs gpg
    check = GIT_READERS.get(args[i] or "")
    rest = args[i + 1:]
    return check is not None and check(wrappers.options(rest), rest)


GitCheck = Callable[[Options, Args], bool]  # pragma: no mutate  (a type alias)


def _git_without(letters: str, *names: str) -> GitCheck:
    return lambda opts, rest: not opts.has(letters, *names)


def _git_lists(letters: str, names: frozenset[str], filters: tuple[str, ...]) -> GitCheck:
    """`git branch`/`git tag` list when given no name, or with a listing or filter option; every
    option must be one of the listing ones, spelled out (an abbreviation may be a writing one)."""
    def check(opts: Options, rest: Args) -> bool:
        if not opts.short <= set(letters) or not set(opts.long) <= names:
            return False
        return not opts.operands or bool(opts.short & set("l")) or bool(set(opts.long) & {"list", *filters})
    return check


_FILTERS = ("contains", "no-contains", "merged", "no-merged", "points-at")
_LISTING = frozenset({"list", "all", "remotes", "verbose", "sort", "format", "color", "no-color", "column",
                      "no-column", "abbrev", "no-abbrev", "ignore-case", "omit-empty", "show-current", *_FILTERS})
_DIFF = _git_without("", *DIFF_RUNS)


def _git_subcommand(*words: str, then: GitCheck = _DIFF) -> GitCheck:
    """`git stash list|show`, `git worktree list`...: only these first operands (none: not listed)."""
    return lambda opts, rest: list(opts.operands[:1]) in [[w] for w in words] and then(opts, rest)


GIT_READERS: dict[str, GitCheck] = {
    **dict.fromkeys(("status", "rev-parse", "ls-files", "ls-tree", "describe", "rev-list", "shortlog", "show-ref",
                     "for-each-ref", "merge-base", "name-rev", "count-objects", "check-ignore", "check-attr",
                     "version"), lambda opts, rest: True),
    **dict.fromkeys(("diff", "log", "show", "diff-tree", "diff-index", "diff-files", "whatchanged"), _DIFF),
    "blame": _git_without("", "textconv"),
    "annotate": _git_without("", "textconv"),
    "cat-file": _git_without("", "textconv", "filters"),
    "grep": _git_without("O", "open-files-in-pager", "textconv", "ext-grep"),
    "branch": _git_lists("arvl", _LISTING, _FILTERS),
    "tag": _git_lists("lin0123456789", _LISTING - {"all", "remotes", "verbose", "show-current", "abbrev",
                                                    "no-abbrev"}, _FILTERS),
    "stash": _git_subcommand("list", "show"),
    "worktree": _git_subcommand("list"),
    "reflog": lambda opts, rest: _DIFF(opts, rest) if not opts.operands else _git_subcommand("show", "exists")(opts,
                                                                                                         rest),
    "remote": lambda opts, rest: not opts.operands and opts.short <= {"v"} and set(opts.long) <= {"verbose"}
    or _git_subcommand("get-url")(opts, rest),
}


CHECKS: dict[str, Callable[[Args], bool]] = {
    "file": _without("CzZ", "compile", "uncompress", "uncompress-noreport"),
    "tree": _without("oR", "output"),
    "diff": _without("l", "paginate"),
    "rg": _without("z", "pre", "search-zip", "hostname-bin"),
    "sort": _without("oT", "output", "compress-program", "temporary-directory"),
    "date": _without("s", "set"),
    "find": _find,
    "uniq": _uniq,
    "git": _git,
}
