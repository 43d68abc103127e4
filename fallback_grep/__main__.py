"""Command line: python -m fallback_grep PATTERN [PATH...]

Options mirror the grep tool: --output-mode content|files_with_matches|count (default
files_with_matches), -C/--context N, -i/--case-insensitive, --multiline, --glob GLOB (repeatable,
`!GLOB` excludes), -j/--threads N (processes; default one per core, as rg).  Output follows
ripgrep's: `path` / `path:count` / `path:line:text` with `path-line-text` for context lines and
`--` between separate groups.  Hidden files and
directories are skipped unless --hidden (as rg does); .gitignore files are NOT read (the grep
tool applies ignore rules itself through the walk filter).

Exit status like grep: 0 = something matched, 1 = nothing matched, 2 = error (the pattern was
rejected - the teaching message goes to stderr - or a file could not be read).
"""
from __future__ import annotations

import argparse
import os
import re
import sys

from .errors import error
from . import parallel
from .filesearch import OUTPUT_MODES, Matcher, walk

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TextIO

    from .filesearch import FileResult

    Keep = Callable[[str, bool], bool]


def glob_regex(glob: str) -> re.Pattern[str]:
    """Compile a gitignore-style glob (`*`, `?`, `[..]`, `**`, `{a,b}`) to a Python regex.

    A glob without `/` matches the file name at any depth; with `/` it matches the path relative
    to the search root.  Globs are short and the translation has no nested repetition, so sre's
    backtracking stays cheap here.
    """
    anchored = "/" in glob.rstrip("/")
    g = glob.lstrip("/")
    out: list[str] = []
    i = 0
    while i < len(g):
        c = g[i]
        if g.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif g.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = g.find("]", i + 2)
            if j < 0:
                out.append(re.escape(c))
                i += 1
                continue
            body = g[i + 1:j]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j + 1
        elif c == "{":
            j = g.find("}", i)
            if j < 0:
                out.append(re.escape(c))
                i += 1
                continue
            alts = g[i + 1:j].split(",")
            out.append("(?:" + "|".join(glob_regex_body(a) for a in alts) + ")")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    body = "".join(out)
    return re.compile(("" if anchored else "(?:.*/)?") + body + r"\Z", re.DOTALL)


def glob_regex_body(alt: str) -> str:
    return glob_regex("/" + alt if "/" in alt else alt).pattern.replace(r"\Z", "").removeprefix("(?:.*/)?")


def make_filter(root: str, globs: list[str], hidden: bool) -> Keep:
    """keep(path, is_dir) for walk(): hidden entries unless `hidden`, never .git, the globs.

    It runs once per entry of the tree (35,000 on drivers/), so the common cases are short
    functions of their own: without globs none computes a relative path, and the name is cut
    from the path by hand (os.path.basename cost a microsecond per entry, 3% of a search)."""
    includes = [glob_regex(g) for g in globs if not g.startswith("!")]
    excludes = [glob_regex(g[1:]) for g in globs if g.startswith("!")]
    if not includes and not excludes:
        if hidden:
            return lambda path, is_dir: not is_dir or not path.endswith("/.git")
        return lambda path, is_dir: path[path.rfind("/") + 1] != "."   # hidden, .git included

    def keep(path: str, is_dir: bool) -> bool:
        name = path[path.rfind("/") + 1:]
        if not hidden and name.startswith("."):
            return False
        if is_dir:
            return name != ".git"
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if excludes and any(r.match(rel) for r in excludes):
            return False
        return not includes or any(r.match(rel) for r in includes)

    return keep


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, with the terminal width found here: argparse imports shutil for
    it (and shutil imports zlib, bz2 and lzma), and makes a formatter for every add_argument,
    not only for --help; that was a tenth of a search's start-up."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_terminal_columns() - 2)


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns: $COLUMNS, else stdout's terminal, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        stdout = sys.__stdout__
        if stdout is None:   # no stdout
            return 80
        return os.get_terminal_size(stdout.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):   # not a terminal
        return 80


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fallback_grep", formatter_class=_Formatter,
        description="Search files with an RE2 regular expression (pure Python, linear time).")
    p.add_argument("pattern", help="RE2 regular expression")
    p.add_argument("paths", nargs="*", default=["."], help="files or directories (default .)")
    p.add_argument("--output-mode", choices=OUTPUT_MODES, default="files_with_matches")
    p.add_argument("-C", "--context", type=int, default=0, metavar="N",
                   help="lines of context around each match (content mode)")
    p.add_argument("-i", "--case-insensitive", action="store_true")
    p.add_argument("--multiline", action="store_true",
                   help="let . match newline and matches span lines")
    p.add_argument("--glob", action="append", default=[], metavar="GLOB",
                   help="only search files matching GLOB (`!GLOB` excludes); repeatable")
    p.add_argument("--hidden", action="store_true", help="search hidden files and directories")
    p.add_argument("-j", "--threads", type=int, default=0, metavar="N",
                   help="search with N processes (default 0: one per core; 1: this process only)")
    return p


def _print_content(res: FileResult, show_path: bool, context: int, sep_first: bool, out: TextIO) -> None:
    # rg separates non-adjacent groups with `--`, but only when context lines were asked for.
    prev = None
    for line in res.lines:
        gap = line.number != prev + 1 if prev is not None else sep_first
        if context and gap:
            out.write("--\n")
        sep = ":" if line.is_match else "-"
        prefix = f"{res.path}{sep}" if show_path else ""
        out.write(f"{prefix}{line.number}{sep}{line.text}\n")
        prev = line.number


def _search_root(root: str, args: argparse.Namespace, matcher: Matcher, workers: int, show_path: bool,
                 tally: dict[str, int], out: TextIO, err: TextIO) -> None:
    """Search one PATH argument, print its results and count them into tally."""
    if not os.path.exists(root):
        err.write(f"fallback_grep: {root}: no such file or directory\n")
        tally["errors"] += 1
        return
    keep = make_filter(root, args.glob, args.hidden)
    # search_paths: one reused read buffer and the per-file literal rejection, as the grep tool;
    # with several workers, runs of directories go to forked processes (same results, same order).
    # Only what is printed or counted comes back: no object per file the prefilter rules out.
    results = parallel.search_paths(matcher, walk(root, keep), args.output_mode, args.context,
                                    args.context, workers=workers, every_file=False)
    try:
        for res in results:
            if res.error:
                err.write(f"fallback_grep: {res.error}\n")
                tally["errors"] += 1
            elif res.binary:
                tally["binary"] += 1
            elif res.matched:
                tally["matched"] += 1
                if args.output_mode == "files_with_matches":
                    out.write(f"{res.path}\n")
                elif args.output_mode == "count":
                    out.write(f"{res.path}:{res.count}\n" if show_path else f"{res.count}\n")
                else:
                    _print_content(res, show_path, args.context, tally["matched"] > 1, out)
    finally:
        # Now, not when the generator is collected: a Ctrl-C or a closed stdout must not leave
        # worker processes searching.
        results.close()


def _exit_on_sigterm() -> None:
    """`kill` (SIGTERM) ends the search as Ctrl-C does, through the code that kills and reaps the
    workers; by default it would end this process alone and leave them searching."""
    import signal
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None,
         own_process: bool = False) -> int:
    """The command line; own_process: this process is the command (python -m fallback_grep),
    so it may set signal handlers (a caller's process keeps its own)."""
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    if args.context < 0:
        err.write("fallback_grep: --context must be 0 or more\n")
        return 2
    if args.threads < 0:
        err.write(f"fallback_grep: --threads must be 0 (one per core) or more; got {args.threads}\n")
        return 2
    workers = args.threads or parallel.default_workers()
    try:
        matcher = Matcher(args.pattern, case_insensitive=args.case_insensitive,
                          multiline=args.multiline)
    except error as e:
        err.write(f"{e}\n")
        return 2
    show_path = len(args.paths) > 1 or any(os.path.isdir(p) for p in args.paths)
    tally = {"matched": 0, "errors": 0, "binary": 0}
    if workers > 1 and own_process:
        _exit_on_sigterm()
    try:
        for root in args.paths:
            _search_root(root, args, matcher, workers, show_path, tally, out, err)
    except KeyboardInterrupt:   # Ctrl-C: the workers are gone (see _search_root); no traceback
        return 130
    matched, errors, binary = tally["matched"], tally["errors"], tally["binary"]
    if binary:
        err.write(f"fallback_grep: skipped {binary} binary file(s) (NUL byte in the first 64 KiB)\n")
    if errors:
        return 2
    return 0 if matched else 1


if __name__ == "__main__":
    sys.exit(main(own_process=True))
