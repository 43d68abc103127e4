"""grep (spec §6): RE2 search over the workspace, bounded, on rg or the pure-Python fallback."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Literal

import fallback_grep
from fallback_grep.syntax import Node
from pydantic import Field

from abhed.files import filewalk, rgjail, ripgrep, rgwalk
from abhed.common.traits import Traits
from abhed.common.errors import ToolError
from abhed.files.textfile import human_size
from abhed.files.globpattern import GlobError, expand_braces
from abhed.files.grepsearch import FileHits, Query, check_regular, python_search, search_workers
from abhed.tools.base import Tool, ToolContext, ToolInput, ToolResult, cut_line, more_items, ok
from abhed.tools.glob import hidden_note, search_root, stat_root, walk_checked

MAX_MATCHES = 100  # content mode: matching lines shown in all (spec §6)
MAX_FILE_LINES = 50  # content mode: lines shown per file, context included (spec §6)
MAX_FILES = 1000  # files_with_matches / count: files listed
MAX_CONTEXT = 20
# The longest pattern grep takes (UTF-8 bytes). Preparing one is linear in its length (a fraction of
# a second at this size, benchmarks/pattern_prep_bench.py); a call's arguments may be 4 MiB.
MAX_PATTERN_BYTES = 64 * 1024
SHOWN_PATTERN = 200  # characters of the pattern an answer repeats
CONTENT_CHUNK = 16  # content mode searches matching files a few at a time until the cap is met
SHOWN_EXAMPLES = 3
# Content mode on rg's own walk: one run prints the lines (each file's first MAX_FILE_LINES + 1) when
# they come to at most this much; past it, a files_with_matches walk, then lines of the first files.
CONTENT_WALK_BYTES = 1 << 20
# rg walks by itself in the view where its walk lists what the Python walk lists (rgwalk); False:
# the Python walk always lists the files (the path every backend shares; tests pin races on it).
RG_WALK = True


def shown(pattern: str) -> str:
    """The pattern as an answer repeats it: whole up to SHOWN_PATTERN characters, else its head and
    its length (a 64 KiB pattern must not come back whole: bounded output)."""
    if len(pattern) <= SHOWN_PATTERN:
        return pattern
    return f"{pattern[:SHOWN_PATTERN]}... ({len(pattern):,} characters)"


def _unbound(path: str) -> int:
    raise RuntimeError(f"grep: {path} asked for before the search was bound to its opener (a bug in the grep tool)")


class _Search:
    """How one call searches: search(files, query, workers=1) -> hits. With rg, the pattern's
    translation; with fallback_grep, its matcher, built when the search is prepared (before the
    walk: its errors come first). rg hands over to fallback_grep for the rest of the call when it
    cannot search with the pattern (its regex engine nests at most 250 groups, RE2 1000), and a
    note says so."""

    def __init__(self, query: Query, rg: Path | None = None, regex: str | None = None, note: str | None = None):
        self.rg, self.regex = rg, regex
        self.matcher = None if rg is not None else query.matcher()
        self.notes = [note] if note else []
        self.cwd = ""
        self.opener: Callable[[str], int] = _unbound  # bind() sets the confined opener
        self.jail: rgjail.Jail | None = None
        self.large: frozenset[str] = frozenset()  # files rg maps (ripgrep.MMAP_FROM)
        self.stream: ripgrep.Stream | None = None

    @property
    def name(self) -> str:
        return "rg" if self.rg is not None else "fallback_grep"

    def bind(self, cwd: Path, open_file: Callable[[str], int], jail: rgjail.Jail | None = None) -> _Search:
        """Search below cwd, opening every file through open_file (a confined opener); rg reads
        names in `jail` when there is one (rgjail), what it cannot read there through open_file."""
        self.cwd = str(cwd)
        self.opener = lambda path: check_regular(open_file(path))
        self.jail = jail
        return self

    def __call__(self, files: list[str], query: Query, workers: int = 1) -> list[FileHits]:
        if self.rg is not None:
            try:
                return list(ripgrep.rg_search(self.rg, self.cwd, files, query, self.opener, self.regex, self.jail,
                                              self.large))
            except ripgrep.RgRejected as exc:
                self._without_rg(exc, query)
        return list(python_search(files, query, self.opener, workers, self.matcher))

    def _without_rg(self, exc: ripgrep.RgRejected, query: Query) -> None:
        """rg refused the pattern: the built-in engine searches from now on, and the answer says why."""
        self.notes.append(f"[searched with the built-in engine: rg could not search with this pattern ({exc})]")
        self.rg, self.matcher = None, query.matcher()

    def begin(self, query: Query) -> None:
        """Search with `query` the files `take` is given as the walk finds them, where rg can
        start on them at once (rg in the jail); else they are searched by `finish`."""
        rg, jail, regex = self.rg, self.jail, self.regex
        if rg is not None and jail is not None and regex is not None and ripgrep.streams(jail, regex):
            self.stream = ripgrep.Stream(rg, jail, regex, self.cwd, query, self.opener)

    def take(self, files: list[str], large: list[str]) -> None:
        if self.stream is not None:
            self.stream.add(files, large)

    def finish(self, files: list[str], query: Query, workers: int) -> list[FileHits]:
        """The hits of `files` (every file `take` was given): the answer of self(files, query, workers)."""
        if self.stream is None:
            return self(files, query, workers)
        try:
            return list(self.stream.hits())
        except ripgrep.RgRejected as exc:
            self.end()
            self._without_rg(exc, query)
            return list(python_search(files, query, self.opener, workers, self.matcher))

    def end(self) -> None:
        """Wait for the stream's runs (always, also when the walk failed)."""
        if self.stream is not None:
            self.stream.close()
            self.stream = None


class _Sizes:
    """The per-file size check, a directory's files at a time as the walk lists them: what is
    within search.max_file_bytes goes on to the search at once, a note names the rest."""

    def __init__(self, limit: int, search: _Search) -> None:
        self.limit, self.search = limit, search
        self.kept: list[str] = []
        self.big: list[tuple[str, int]] = []
        self.large: list[str] = []  # kept files rg maps (ripgrep.MMAP_FROM)
        self.total = 0

    def add(self, files: list[str], sizes: list[int]) -> None:
        """Files as the walk lists them, with their sizes (filewalk: read through the directory's
        descriptor, no link followed; -1 when it could not be read: the backend says why)."""
        limit, top = self.limit, max(sizes, default=-1)
        large: list[str]
        if top < ripgrep.MMAP_FROM and top <= limit:   # the common case: every file kept, none mapped
            kept, large = files, []
            self.total += sum(sizes) + sizes.count(-1)
        else:
            kept, large = [], []
            for path, size in zip(files, sizes):
                if size > limit:
                    self.big.append((path, size))
                    continue
                kept.append(path)
                self.total += max(size, 0)
                if size >= ripgrep.MMAP_FROM:
                    large.append(path)
        self.kept += kept
        self.large += large
        self.search.take(kept, large)

    def add_named(self, path: str) -> None:
        """A file named by the call (resolved, so a link here was swapped in since: not followed;
        the confined open refuses it, and its target's size stays unsaid)."""
        try:
            size = os.stat(path, follow_symlinks=False).st_size
        except OSError:
            size = -1
        self.add([path], [size])

    def notes(self) -> list[str]:
        if not self.big:
            return []
        shown = ", ".join(f"{p} ({human_size(size)})" for p, size in sorted(self.big)[:SHOWN_EXAMPLES])
        return [f"[{len(self.big)} file(s) NOT searched, over grep's limit of {human_size(self.limit)} per file "
                f"(search.max_file_bytes): {shown}{more_items(SHOWN_EXAMPLES, len(self.big), 'files')}. Search "
                "them with bash, showing only the head of long lines: rg -n --max-columns 300 "
                "--max-columns-preview 'PATTERN' FILE (or grep -c 'PATTERN' FILE to count).]"]


class GrepInput(ToolInput):
    pattern: str = Field(description="Regular expression (RE2 syntax).")
    path: str | None = Field(None, description="File or directory to search. Defaults to workspace root.")
    glob: str | None = Field(None, description="Filter files by glob, e.g. *.go")
    output_mode: Literal["content", "files_with_matches", "count"] | None = Field(
        None, description="Default files_with_matches.")
    context: int | None = Field(None, ge=0, le=MAX_CONTEXT,
                                description="Lines of context around each match (content mode only).")
    case_insensitive: bool | None = None
    multiline: bool | None = Field(None, description="Allow . to match newlines.")


def glob_filter(glob: str | None, root: Path):
    """rg's --glob semantics: gitignore-style, a slashless glob matches a name at any depth,
    `!glob` excludes, braces expand."""
    if not glob:
        return None
    negate = glob.startswith("!")
    try:
        patterns = expand_braces(glob[1:] if negate else glob)
    except GlobError as exc:
        raise ToolError(exc.message.replace("The braces", "The braces of glob")) from None
    rules = filewalk.IgnoreFile(str(root), patterns)
    if not rules.has_rules:
        raise ToolError(f"glob {glob!r} matches no file name. Use a pattern such as \"*.py\" or \"src/**/*.ts\".")

    def keep(path: str) -> bool:
        return bool(rules.verdict(path, os.path.basename(path), False)) != negate
    return keep


class Grep(Tool):
    name = "grep"
    description = ("Search file contents with a regular expression. This is the primary code-navigation tool — "
                   "prefer it over reading files speculatively. The syntax is RE2: no lookahead/lookbehind or "
                   "backreferences (an error says what to use instead); \\w, \\d, \\b are ASCII.")
    Input = GrepInput
    traits = Traits(reads_only=True, parallel=True)
    example = {"pattern": "def \\w+\\(", "glob": "*.py", "output_mode": "content"}

    def run(self, args: GrepInput, ctx: ToolContext) -> ToolResult:
        mode = args.output_mode or "files_with_matches"
        if args.context is not None and mode != "content":
            raise ToolError(f"context only applies to output_mode \"content\" (this call uses \"{mode}\"). Set "
                            "output_mode to \"content\", or leave context out.")
        query = Query(args.pattern, mode, bool(args.case_insensitive), bool(args.multiline), args.context or 0)
        length = len(args.pattern.encode("utf-8", "surrogatepass"))
        if length > MAX_PATTERN_BYTES:
            raise ToolError(f"The pattern is {length:,} bytes, over grep's limit of {MAX_PATTERN_BYTES:,} bytes. "
                            "Search for a shorter, distinctive part of it (a few dozen characters of a literal find "
                            "the same lines), or split an alternation into several grep calls.",
                            pattern=shown(args.pattern))
        try:
            # Only what the backend needs: rg the parse and a translation, fallback_grep its matcher.
            search = self._prepare(ctx, query, query.check())
        except fallback_grep.error as exc:
            raise ToolError(str(exc), pattern=args.pattern) from None
        root, single, keep = self._root(args, ctx)
        where = root.parent if single else root
        # One descriptor of the workspace root for every open of this call (and of its workers).
        with ctx.paths.opener_below(where, os.O_RDONLY | os.O_NONBLOCK) as open_file:
            search.bind(where, open_file, self._jail(ctx, search, where))
            # Content mode first learns which files match (cheap), then fetches lines from as few as it needs.
            first = query if mode != "content" else replace(query, mode="files_with_matches")
            fetched: Callable[..., list[FileHits]] = search   # (where content mode's lines come from)
            try:
                walked = None if single else self._walked(args, ctx, search, root, query, open_file)
                if walked is None:
                    search.begin(first)
                if walked is not None:
                    searched, notes, skipped, hits, fetched = walked
                else:
                    # The walk hands each directory's files to the search as it goes (rg starts before it ends).
                    files, notes, skipped, size = self._files(root, single, keep, ctx, search)
                    hits = search.finish(files, first, search_workers(len(files), size))
                    searched = len(files)
                hits = sorted(hits, key=lambda h: h.path)
                found = [h for h in hits if not h.binary and h.error is None]
                body = self._content(found, query, fetched) if found and mode == "content" else []
            except fallback_grep.error as exc:   # when rg handed over: fallback_grep's own limits
                raise ToolError(str(exc), pattern=args.pattern) from None
            finally:
                search.end()
            notes += search.notes + self._problem_notes(hits)
            facts = {"backend": search.name, "files_searched": searched, "files_matched": len(found),
                     "mode": mode, "rg_jail": search.jail is not None, "rg_walk": walked is not None}
            if not found:
                return ok("\n".join([self._nothing(args, root, searched, hits, skipped), *notes]), **facts)
            if mode == "files_with_matches":
                body = [h.path for h in found[:MAX_FILES]]
                body += [self._cut_note(len(found), "files")] if len(found) > MAX_FILES else []
            elif mode == "count":
                body = [f"{h.path}:{h.count}" for h in found[:MAX_FILES]]
                body += [self._cut_note(len(found), "files")] if len(found) > MAX_FILES else []
                body.append(f"[total: {sum(h.count for h in found)} matching lines in {len(found)} files]")
            return ok("\n".join(body + notes), **facts)

    # -- which files ---------------------------------------------------------------------------

    def _root(self, args: GrepInput, ctx: ToolContext) -> tuple[Path, bool, Callable[[str], bool] | None]:
        """The search root, whether it is a single file, and the glob's test of a path."""
        root = ctx.resolve(args.path) if args.path else ctx.paths.workspace
        st = stat_root(root, ctx)
        if st is not None and stat.S_ISREG(st.st_mode):
            return root, True, glob_filter(args.glob, root.parent)
        root = search_root(args.path, ctx, self.name)
        return root, False, glob_filter(args.glob, root)

    @staticmethod
    def _files(root: Path, single: bool, keep: Callable[[str], bool] | None, ctx: ToolContext,
               search: _Search) -> tuple[list[str], list[str], int, int]:
        """The files to search, notes, how many files were left out for size, and the bytes to
        search; each file within the size limit goes to `search.take` as soon as it is listed."""
        sizes = _Sizes(ctx.settings.search.max_file_bytes, search)
        if single:
            listed = [str(root)] if keep is None or keep(str(root)) else []
            for path in listed:
                sizes.add_named(path)
            search.large = frozenset(sizes.large)
            return sizes.kept, sizes.notes(), len(listed) - len(sizes.kept), sizes.total
        prefix = str(root) + "/"
        listing = walk_checked(root, ctx, keep and (lambda rel: keep(prefix + rel)), found=sizes.add)
        search.large = frozenset(sizes.large)
        notes = sizes.notes()
        hidden = hidden_note(root, listing.hidden_dirs, len(listing.hidden_files))
        notes += [hidden] if hidden else []
        if listing.unreadable:
            notes.append(f"[{len(listing.unreadable)} directories could not be read, e.g. {listing.unreadable[0]}]")
        return sizes.kept, notes, len(listing.files) - len(sizes.kept), sizes.total

    @staticmethod
    def _walked(args: GrepInput, ctx: ToolContext, search: _Search, root: Path, query: Query,
                open_any: Callable[[str], int]) -> tuple[int, list[str], int, list[FileHits], Callable] | None:
        """The directory `root` searched by rg walking by itself in the view (rgwalk): files
        searched, notes, files left out for size, hits, and where content mode's lines come from
        (the walk's own when it printed them, else `search`). None where its walk could list other
        files than the Python walk, or cannot say what the notes need: then the Python walk lists them."""
        if (not RG_WALK or search.rg is None or search.jail is None or search.regex is None
                or not ripgrep.streams(search.jail, search.regex)):
            return None
        flags = rgwalk.usable(search.jail.root, ctx.settings.search.exclude, args.glob)
        if flags is None:
            return None
        limit = ctx.settings.search.max_file_bytes
        walk = lambda wanted, cap=None: rgwalk.walk(search.rg, search.jail, search.regex, str(root), wanted,  # noqa: E731
                                                    search.opener, open_any, flags, limit, cap)
        fetched: Callable = search
        try:
            if query.mode == "content":
                try:   # the lines in the same run, when they are few (as the content pass asks for them)
                    walked = walk(replace(query, per_file=MAX_FILE_LINES + 1), CONTENT_WALK_BYTES)
                    lines = {h.path: h for h in walked.hits}
                    fetched = lambda paths, wanted: [lines[p] for p in paths if p in lines]  # noqa: E731
                except rgwalk.TooLong:
                    walked = walk(replace(query, mode="files_with_matches"))
            else:
                walked = walk(query)
        except rgwalk.Fallback:
            return None
        except ripgrep.RgRejected as exc:
            search._without_rg(exc, query)
            return None
        search.large = frozenset(walked.large)
        sizes = _Sizes(limit, search)
        sizes.big = walked.big
        hidden = hidden_note(root, walked.hidden_dirs, walked.hidden_files)
        return walked.searched, sizes.notes() + ([hidden] if hidden else []), len(walked.big), walked.hits, fetched

    @staticmethod
    def _jail(ctx: ToolContext, search: _Search, where: Path) -> rgjail.Jail | None:
        """rg's read-only view of the root being searched, when rg searches and bwrap can make one;
        None: rg reads descriptors opened here (as safe, slower on many files)."""
        if search.rg is None:
            return None
        sandbox = ctx.settings.sandbox
        writable = (*ctx.paths.roots, *(Path(os.path.realpath(p)) for p in sandbox.rw_binds))
        return rgjail.jail_for(search.rg, ctx.paths.root_of(where), backend=sandbox.backend,
                               bwrap_path=sandbox.bwrap_path, writable=writable, home=ctx.settings.home)

    @staticmethod
    def _prepare(ctx: ToolContext, query: Query, tree: Node) -> _Search:
        """The call's search: rg when present (unless the operator says otherwise; rg picks its own
        threads), else fallback_grep (forked worker processes when workers > 1), which also searches
        when the pattern's translation is too long for rg. Raises fallback_grep.error."""
        choice = ctx.settings.search.backend
        rg = ripgrep.find_rg(ctx.paths.workspace) if choice != "python" else None
        if rg is None and choice == "rg":
            raise ToolError("The operator requires the rg backend (search.backend = \"rg\"), but no rg executable "
                            "was found beside Abhed or on PATH. Ask the operator to install it or set the backend "
                            "to \"auto\".")
        if rg is None:
            return _Search(query)
        regex = ripgrep.rg_regex(tree, query)
        if regex is None:
            return _Search(query, note=f"[searched with the built-in engine: this pattern's translation for rg is over "
                                       f"{ripgrep.RG_MAX_PATTERN // 1024} KiB (each class becomes explicit ranges)]")
        return _Search(query, rg, regex)

    # -- what to show --------------------------------------------------------------------------

    @staticmethod
    def _nothing(args: GrepInput, root: Path, searched: int, hits: list[FileHits], skipped: int) -> str:
        """The head of an answer without matches: never a plain "no matches" when files went unsearched."""
        where = f"{root}" + (f" (glob {args.glob})" if args.glob else "")
        unread = sum(1 for h in hits if h.error)
        if root.is_file() and skipped:
            return f"[{root} was NOT searched (see below): this is not a \"no match\", no line of it was looked at.]"
        if unread or skipped:
            return (f"[no matches for {shown(args.pattern)} in the {searched - unread} file(s) searched in {where}; some "
                    "files were NOT searched (see below)]")
        return f"[no matches for {shown(args.pattern)} in {where}]"

    @staticmethod
    def _cut_note(total: int, what: str) -> str:
        return (f"[truncated: showing {MAX_FILES} of {total} {what}. Narrow the search with path or glob, or a more "
                "specific pattern.]")

    @staticmethod
    def _problem_notes(hits: list[FileHits]) -> list[str]:
        notes = []
        binary = [h.path for h in hits if h.binary]
        if binary:
            notes.append(f"[{len(binary)} binary file(s) matched and were skipped: {', '.join(binary[:SHOWN_EXAMPLES])}"
                         f"{more_items(SHOWN_EXAMPLES, len(binary), 'files')}]")
        broken = [h for h in hits if h.error]
        if broken:
            notes.append(f"[{len(broken)} file(s) could not be read: " + ", ".join(
                f"{h.path} ({h.error})" for h in broken[:SHOWN_EXAMPLES]) + "]")
        return notes

    def _content(self, found: list[FileHits], query: Query, search) -> list[str]:
        """Matching lines with context, file by file in path order, within both caps."""
        body: list[str] = []
        budget, shown_files = MAX_MATCHES, 0
        wanted = replace(query, per_file=MAX_FILE_LINES + 1)
        # Every file shown holds a match, so MAX_MATCHES files always suffice: without context, one
        # run (each costs a process start, a bwrap start in the jail); with context, fewer files a
        # run, so that a run fetches about as many lines as before.
        step = max(CONTENT_CHUNK, MAX_MATCHES // (1 + 2 * query.context))
        for start in range(0, len(found), step):
            if budget <= 0:
                break
            chunk = {h.path: h for h in search([h.path for h in found[start:start + step]], wanted)}
            for hit in found[start:start + step]:
                if budget <= 0:
                    break
                detail = chunk.get(hit.path)
                if detail is None or not detail.lines:
                    continue
                lines, used = self._file_block(detail, budget, query.context > 0)
                body += ([""] if body else []) + lines
                budget -= used
                shown_files += 1
        if shown_files < len(found):
            body.append(f"[truncated: showing {MAX_MATCHES - budget} matching lines from {shown_files} of {len(found)} "
                        "files with matches. Narrow path, glob or pattern, or use output_mode files_with_matches to "
                        "list every file.]")
        return body

    @staticmethod
    def _file_block(hits: FileHits, budget: int, separate: bool) -> tuple[list[str], int]:
        """One file's lines; with context, `--` marks a gap between groups, as grep and rg print it."""
        out, used, previous = [hits.path], 0, None
        shown = 0
        for number, text, is_match in hits.lines:
            if shown >= MAX_FILE_LINES or (is_match and used >= budget):
                break
            if separate and previous is not None and number > previous + 1:
                out.append("--")
            out.append(f"{number}{':' if is_match else '-'}{cut_line(text.removesuffix(chr(13)))}")
            used += is_match
            shown += 1
            previous = number
        rest = [n for n, _, m in hits.lines[shown:] if m]
        if rest or hits.count > used:
            first = rest[0] if rest else (previous or 0) + 1
            out.append(f"[more matches in this file not shown (at most {MAX_FILE_LINES} lines per file, {MAX_MATCHES} "
                       f"matches in all): read {hits.path} with offset {first}, or narrow the pattern]")
        return out, used
