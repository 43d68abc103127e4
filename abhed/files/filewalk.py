"""The files a search sees: the ignore rules of ripgrep, applied the same way by every backend.

glob and both grep backends list files through these rules, so the answer never depends on
whether `rg` is installed. The rules, in falling precedence:

1. the operator's exclusions (default: node_modules, .git, target, dist, __pycache__), at any depth,
   as ripgrep's `--glob '!name'` overrides;
2. `.gitignore` files, a deeper one overriding a shallower one, negation (`!keep.me`) included, read
   in the search root, below it, and in its parents (as `rg --no-require-git` does);
3. `.git/info/exclude` of the repository the root lies in.

The path a search is started at is never itself excluded: asking for it is how the model includes
an ignored directory. Symbolic links are not followed, as ripgrep does not by default.
"""

from __future__ import annotations

import os
import re
import stat
from collections import deque
from collections.abc import Callable, Iterable, MutableSequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import compress, repeat
from functools import lru_cache
from operator import add
from pathlib import Path

from abhed.files import atomic, beneath

ANY_DEPTH = "^(?:.+/)?"  # how pathspec starts a pattern without a slash: it matches a name at any depth
GLOB_CHARS = frozenset("*?[\\")


@lru_cache(maxsize=1024)  # pragma: no mutate (a bound on memory, a few MB: the Linux tree needs ~170)
def _compile(source: str) -> re.Pattern[str]:
    """re.compile(source), memoized for the life of the process. re's own cache holds 512 patterns
    and drops the oldest first: the Linux tree's ignore files alone make ~170, and a long session
    compiles many more, so a walk found its regexes evicted and compiled them all again."""
    return re.compile(source)


def _combine(alternatives: list[str]) -> re.Pattern[str] | None:
    """One regex for many rules, each a named group "(?P<i12>^...)".

    Git's rule is "the last matching pattern decides": try them in reverse and take the first
    hit. The shared `^` is hoisted out of the groups so the regex engine can reject a subject by
    its first character instead of entering every alternative.
    """
    if not alternatives:
        return None
    hoisted = [a.replace(">^", ">", 1) for a in reversed(alternatives)]
    return _compile("^(?:" + "|".join(hoisted) + ")")


def _simple(line: str) -> tuple[str, str, bool, bool] | None:
    """("exact"|"suffix", text, include, dir_only) for the common pattern shapes, else None.

    `name`, `name/`, `*.ext`, `**/name`: no regex needed, a set lookup or an endswith does it.
    """
    include = not line.startswith("!")
    body = line[1:] if not include else line
    if body.startswith("**/"):
        body = body[3:]
    dir_only = body.endswith("/")
    body = body.rstrip("/") if dir_only else body
    if not body or body != body.strip() or "/" in body or body.startswith("#"):
        return None
    if not GLOB_CHARS.intersection(body):
        return "exact", body, include, dir_only
    if body.startswith("*") and not GLOB_CHARS.intersection(body[1:]) and body[1:]:
        return "suffix", body[1:], include, dir_only
    return None


def _names_one_entry(line: str) -> bool:
    """Whether a rule that may match at any depth names one entry (`**/build/`, `*.o`), so it can
    be matched against the entry's name alone; `**/lib/*.o` names a path of two."""
    body = line[1:] if line.startswith("!") else line
    body = body.rstrip()
    while body.startswith("**/"):
        body = body[3:]
    return "/" not in body.removesuffix("/")


def _depth(line: str) -> int | None:
    """How many components deep below its file's directory a path rule matches (`/doc/*.html`: 2),
    or None when that is not fixed (`**`) or not plain to see (escapes, classes): such a rule is
    tried at every depth."""
    body = line[1:] if line.startswith("!") else line
    body = body.rstrip()  # trailing blanks are not part of a gitignore pattern
    body = body.removeprefix("/").removesuffix("/")
    if not body or "**" in body or "//" in body or "\\" in body or "[" in body:
        return None
    return body.count("/") + 1


def _pathspec_regex(line: str) -> tuple[str | None, bool | None]:
    """pathspec's regex for a gitignore line the shortcuts above do not cover. Imported here, at the
    first such line: pathspec loads its engines (re2, hyperscan) and cost every chat's start-up."""
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern
    return GitIgnoreSpecPattern.pattern_to_regex(line)


class IgnoreFile:
    """The rules of one gitignore-format file, relative to the directory `base`.

    Most patterns (`*.o`, `node_modules`, `build/`) name a file at any depth, so they are matched
    against the entry's name alone: exact names by a dict lookup, `*.ext` by one `endswith` over
    a tuple, the rest by a regex on the short name. Only patterns with a slash look at the path
    below `base`. Every rule keeps its line position, and the last matching rule decides.

    A rule matches an entry's whole path, never a prefix of it: what lies inside an ignored
    directory is skipped because the walk never enters it, so a search started inside one (a
    path the model asked for) still sees its contents, as ripgrep does.
    """

    def __init__(self, base: str, lines: Iterable[str]) -> None:
        self.base = base
        self._prefix = len(base) + 1 if base != "/" else 1
        self._exact: dict[str, list[tuple[int, bool, bool]]] = {}
        self._suffixes: list[tuple[str, int, bool, bool]] = []
        by_name, by_path = [], []
        self._path_rules: list[tuple[int | None, str]] = []  # (depth, regex): for Chain's per-depth test
        self._at_depth: dict[int, re.Pattern[str] | None] = {}
        for position, line in enumerate(lines):
            simple = _simple(line)
            if simple is not None:
                kind, text, include, dir_only = simple
                if kind == "exact":
                    self._exact.setdefault(text, []).append((position, include, dir_only))
                else:
                    self._suffixes.append((text, position, include, dir_only))
                continue
            try:
                regex, ignores = _pathspec_regex(line)
            except ValueError:
                continue  # git skips a malformed line too
            if ignores is None or regex is None:
                continue
            include = ignores
            regex = regex.replace("(?P<ps_d>/)", "/")
            if line.rstrip().endswith("/**"):
                # pathspec leaves "everything below" to a prefix match; we match whole paths, and
                # `lib/**` names what lies inside lib, not lib itself (a `!lib/keep` can re-include)
                regex += ".+"
            group = f"(?P<{'i' if include else 'w'}{position}>"  # i: ignore, w: whitelist (`!` negation)
            if regex.startswith(ANY_DEPTH) and _names_one_entry(line):
                by_name.append(group + "^" + regex[len(ANY_DEPTH):] + ")")
            else:
                by_path.append(group + regex + ")")
                self._path_rules.append((_depth(line), regex.removeprefix("^")))
        self._suffix_tuple = tuple(text for text, *_ in self._suffixes)
        self._by_name, self._by_path = _combine(by_name), _combine(by_path)

    @classmethod
    def load(cls, path: str, base: str, dirfd: int | None = None, parts: list[str] | None = None) -> IgnoreFile | None:
        """The rules of the ignore file `path`; with `dirfd`, read as `parts` below that directory
        through no symlink (a .gitignore swapped for a link is not followed)."""
        try:
            if dirfd is None:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            else:
                fd = beneath.open_rel(dirfd, parts or [], os.O_RDONLY | os.O_NONBLOCK)
            with open(fd, encoding="utf-8", errors="surrogateescape") as handle:
                if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                    return None
                rules = cls(base, handle.read().splitlines())
        except (OSError, ValueError):
            return None
        return rules if rules.has_rules else None

    def at_depth(self, depth: int) -> re.Pattern[str] | None:
        """One regex for the path rules that can match an entry `depth` components below `base`
        (anonymous groups: a yes/no test of the path below `base` with "/" appended), or None."""
        if depth not in self._at_depth:
            self._at_depth[depth] = _union([rule for at, rule in self._path_rules if at is None or at == depth])
        return self._at_depth[depth]

    @property
    def has_rules(self) -> bool:
        return bool(self._exact or self._suffixes or self._by_name or self._by_path)

    def verdict(self, path: str, name: str, is_dir: bool) -> bool | None:
        """True: ignored; False: explicitly kept (negation); None: these rules say nothing.

        `path` is absolute and lies below `base`; `name` is its last component.
        """
        best, verdict = -1, None
        for position, include, dir_only in self._exact.get(name, ()):
            if position > best and (is_dir or not dir_only):
                best, verdict = position, include
        if self._suffix_tuple and name.endswith(self._suffix_tuple):
            for text, position, include, dir_only in self._suffixes:
                if position > best and name.endswith(text) and (is_dir or not dir_only):
                    best, verdict = position, include
        suffix = "/" if is_dir else ""
        for regex, subject in ((self._by_name, name), (self._by_path, path[self._prefix:])):
            match = regex.fullmatch(subject + suffix) if regex is not None else None
            group = match.lastgroup if match is not None else None  # (every alternative is a named group)
            if group is not None and int(group[1:]) > best:
                best, verdict = int(group[1:]), group[0] == "i"
        return verdict


_RULE_GROUP = re.compile(r"\(\?P<[iw]\d+>")  # the named groups _combine wraps each rule in


def _union(sources: list[str]) -> re.Pattern[str] | None:
    """A regex whose fullmatch holds where any of `sources`' does (their rule groups made
    anonymous, since two files may number their rules alike): a yes/no test, not the verdict."""
    if not sources:
        return None
    return _compile("|".join(f"(?:{_RULE_GROUP.sub('(?:', src)})" for src in sources))


class Chain:
    """The ignore files in force in one directory, outermost first, with a quick negative test.

    Nearly every entry of a tree matches no rule at all; the union of all exact names and
    suffixes in the chain, plus the few regexes, answers "no rule can apply" without evaluating
    each file's precedence. Only a hit pays for the precise evaluation.
    """

    def __init__(self, files: tuple[IgnoreFile, ...], override: IgnoreFile) -> None:
        self.files = files
        self.override = override  # the operator's exclusions: above every ignore file
        every = (override, *files)
        self.exact = frozenset(name for f in every for name in f._exact)
        # The suffixes by their last character: one endswith over the two or three that can
        # apply to a name instead of over all forty of the Linux tree's .gitignore.
        self.suffixes: dict[str, tuple[str, ...]] = {}
        for text in (text for f in every for text in f._suffix_tuple):
            self.suffixes[text[-1]] = (*self.suffixes.get(text[-1], ()), text)
        # The name rules of each file in the chain (each file's own regex, compiled with it): not one
        # regex for the chain. A union per chain was compiled for every directory holding a
        # .gitignore (~200 over the Linux tree, 0.1-0.2 s), again in every child of a split walk,
        # whose compilations die with it; a file's regex is compiled once for its content.
        self.by_name = tuple(f._by_name for f in every if f._by_name is not None)
        # Path rules are relative to their file's directory. Most match at one depth only
        # (`/vmlinux*`, `arch/*/include/generated/`), so each file is tried only with its rules
        # for the depth at hand (IgnoreFile.at_depth); below the top levels of a tree that is
        # usually none, and costs nothing.
        self.path_files = tuple((f, f.base.rstrip("/").count("/")) for f in every if f._path_rules)

    def by_path(self, slashes: int) -> list[tuple[int, re.Pattern[str]]]:
        """(where its subject starts, regex) of each file's path rules that can match an entry whose
        absolute path holds `slashes` slashes, the subject being that path relative to the file's
        directory with "/" appended (a yes/no test)."""
        found = []
        for rules, base_slashes in self.path_files:
            regex = rules.at_depth(slashes - base_slashes)
            if regex is not None:
                found.append((rules._prefix, regex))
        return found

    def extend(self, more: list[IgnoreFile]) -> Chain:
        return Chain(self.files + tuple(more), self.override) if more else self

    def flagged(self, prefix: str, names: list[str], slashed: list[str]) -> set[str]:
        """The `names` (entries of the directory `prefix`, which ends in "/") some rule may apply to:
        a superset, each to be decided by ignored(). `slashed`: the names with "/" appended.

        Nearly every entry matches no rule, so the test runs over the whole directory in C
        (set intersection, filter over map) and Python looks only at the few hits. Each rule
        regex ends in `/` or `(?:/|$)`, so testing with a slash appended is a superset test for
        the entry as a file and as a directory: one match instead of two."""
        exact, ending = self.exact, self.suffixes.get
        hits = {name for name in names if name in exact or name.endswith(ending(name[-1:], ()))}
        for regex in self.by_name:
            hits.update(name[:-1] for name in filter(regex.fullmatch, slashed))
        for start, regex in self.by_path(prefix.count("/")):
            below, cut = prefix[start:], len(prefix) - start
            hits.update(path[cut:-1] for path in filter(regex.fullmatch, map(add, repeat(below), slashed)))
        return hits

    def ignored(self, path: str, name: str, is_dir: bool) -> bool:
        """Whether the entry `path` (`name` its last component) is ignored: the precise verdict."""
        if self.override.verdict(path, name, is_dir):
            return True
        for rules in reversed(self.files):  # deepest first: a nearer .gitignore overrides a farther one
            verdict = rules.verdict(path, name, is_dir)
            if verdict is not None:
                return verdict
        return False


class Rules:
    """Everything that decides whether a path below `root` is seen."""

    def __init__(self, root: str, excludes: Iterable[str]) -> None:
        self.root = root
        self.inherited = Chain(tuple(self._parents(root)), IgnoreFile(root, excludes))

    @staticmethod
    def _parents(root: str) -> list[IgnoreFile]:
        """Ignore files that apply from above the root: parents' .gitignore and .git/info/exclude."""
        found: list[IgnoreFile] = []
        parts = Path(root).parts
        for depth in range(1, len(parts)):
            directory = os.path.join(*parts[:depth]) if depth > 1 else "/"
            if os.path.isdir(os.path.join(directory, ".git")):
                info = IgnoreFile.load(os.path.join(directory, ".git", "info", "exclude"), directory)
                found.append(info) if info else None
            rules = IgnoreFile.load(os.path.join(directory, ".gitignore"), directory)
            found.append(rules) if rules else None
        return found

    def here(self, directory: str, names: AbstractSet[str], dirfd: int | None = None) -> list[IgnoreFile]:
        """The ignore files a directory itself contributes (`names`: what it contains; `dirfd`: its
        descriptor, through which they are read without following a symlink)."""
        found = []
        if directory == self.root and ".git" in names:
            info = IgnoreFile.load(os.path.join(directory, ".git", "info", "exclude"), directory, dirfd,
                                   [".git", "info", "exclude"])
            found.append(info) if info else None
        if ".gitignore" in names:
            rules = IgnoreFile.load(os.path.join(directory, ".gitignore"), directory, dirfd, [".gitignore"])
            found.append(rules) if rules else None
        return found


@dataclass
class Listing:
    files: list[str] = field(default_factory=list)  # absolute paths, in walk order
    hidden_dirs: list[str] = field(default_factory=list)  # directories skipped by the rules
    hidden_files: list[str] = field(default_factory=list)  # files skipped by the rules
    unreadable: list[str] = field(default_factory=list)  # directories that could not be listed
    stamped: list[str] = field(default_factory=list)  # walk(stamp=...): the files stamped, in walk order
    stamps: list[int] = field(default_factory=list)  # and their modification times (ns), index for index
    seen: int = 0  # regular files in the directories listed, whatever the rules or `stamp` (only_stamped) say


def walk(root: Path, excludes: Iterable[str], keep: Callable[[str], bool] | None = None,
         open_root: Callable[[Path], int] | None = None, stamp: Callable[[str], bool] | None = None,
         descend: Callable[[str], bool] | None = None,
         found: Callable[[list[str], list[int]], None] | None = None, only_stamped: bool = False) -> Listing:
    """Every regular file below `root` that the rules let through (and that `keep` accepts).

    `keep` gets the path relative to `root`. The order is the walk's, not sorted: every caller
    sorts by what it reports (path, or modification time). Every directory is listed through a
    descriptor opened below `root`'s (from `open_root`, e.g. PathPolicy.open_dir) through no
    symlink, so a directory swapped for a link mid-walk is not listed. Abhed's own temporary
    files (atomic.is_temp) are never listed. `stamp`: the files (relative path) whose
    modification time to record in `Listing.stamps`, read through the same descriptors.
    `descend`: whether a directory (relative path) can hold a wanted file; False prunes it, which
    must then hold nothing `keep` or `stamp` wants, nor any hidden entry the caller reports.
    `found(files, sizes)`: called with each listed directory's files (those `Listing.files`
    gains, in walk order) and their sizes as the walk goes, so that a caller can start on them
    before the walk ends. The sizes are read through the directory's descriptor, no link
    followed (a name swapped since for a link gives the link's size), -1 for a file gone since.
    `only_stamped`: the files `stamp` rejects are not seen at all, as if absent: neither listed nor
    counted as hidden (glob: it reports matches only, and the ignore rules then test only those).
    """
    with Walk(root, excludes, keep, open_root, stamp, descend, only_stamped) as walking:
        listing = Listing()
        walking.run(listing, found=found)
        return listing


class Walk:
    """A walk under way: the directories still to list (`pending`, each with the ignore rules in
    force in it) and what to record, so that it can be run in steps, and its pending directories
    shared out (splitwalk: forked children inherit the object, descriptor included)."""

    def __init__(self, root: Path, excludes: Iterable[str], keep: Callable[[str], bool] | None = None,
                 open_root: Callable[[Path], int] | None = None, stamp: Callable[[str], bool] | None = None,
                 descend: Callable[[str], bool] | None = None, only_stamped: bool = False) -> None:
        self.top = str(root)
        self.rules = Rules(self.top, excludes)
        self.keep, self.stamp, self.descend = keep, stamp, descend
        self.only_stamped = only_stamped and stamp is not None  # see walk
        self.rootfd = open_root(root) if open_root else os.open(self.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.pending: deque[tuple[str, Chain]] = deque([(self.top, self.rules.inherited)])

    def __enter__(self) -> Walk:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.rootfd)

    def run(self, listing: Listing, limit: int | None = None,
            found: Callable[[list[str], list[int]], None] | None = None) -> int:
        """List pending directories into `listing` until none is left, or `limit` have been listed:
        then breadth first, so that what is left pending is many directories near the top (shares
        of about equal work), not one deep directory's siblings beside the rest of the tree.
        `found`: see walk. Returns how many were listed."""
        pending, listed = self.pending, 0
        while pending and (limit is None or listed < limit):
            # depth first when walking to the end: the fewest directories pending
            self._list(*(pending.pop() if limit is None else pending.popleft()), listing, found)
            listed += 1
        return listed

    def _list(self, directory: str, chain: Chain, listing: Listing,
              found: Callable[[list[str], list[int]], None] | None = None) -> None:
        """One directory, whole (map, filter, compress: loops in C), so that the Python code runs per
        directory and per ignored entry, not per file: over the Linux tree that halves the walk's time.
        Its subdirectories go onto self.pending."""
        top, cut = self.top, len(self.top) + 1
        try:
            fd = os.dup(self.rootfd) if directory == top else beneath.open_rel(
                self.rootfd, directory[cut:].split("/"), os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            listing.unreadable.append(directory)
            return
        had, sized = len(listing.files), None
        try:
            with os.scandir(fd) as scan:
                entries = list(scan)
            # follow_symlinks=False: a symlink is neither, so it is skipped, as ripgrep does by
            # default; so are sockets, fifos and devices. (Comprehensions: a methodcaller with a
            # keyword, in filter, costs three times as much a call.)
            names = [entry.name for entry in entries if entry.is_file(follow_symlinks=False)]
            subdirs = [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
            rule_files = _RULE_FILES.intersection(names).union(_RULE_FILES.intersection(subdirs))
            listing.seen += len(names)
            stamp = self.stamp
            if self.only_stamped:  # the rest are not seen: every file left is stamped
                assert stamp is not None  # (walk() takes only_stamped with a stamp)
                names = list(compress(names, map(stamp, map(add, repeat((directory + "/")[cut:]), names))))
                stamp = _every_file
            if atomic.TEMP_MARK in "/".join(names):  # "/" is in no name, so the join makes no false mark
                names = [name for name in names if not atomic.is_temp(name)]  # writes in progress or interrupted
            chain = chain.extend(self.rules.here(directory, rule_files, fd))
            _directory(fd, directory + "/", cut, names, subdirs, chain, self.pending, listing, self.keep, stamp,
                       self.descend)
            if found is not None and len(listing.files) > had:
                sized = _sized(fd, listing.files[had:], len(directory) + 1)
        except OSError:
            listing.unreadable.append(directory)
        finally:
            os.close(fd)
        if sized is not None and found is not None:  # (sized only with found)
            found(*sized)  # (outside the try: the caller's own errors are not this directory's)


_RULE_FILES = frozenset((".git", ".gitignore"))  # the entries Rules.here reads


def _every_file(relative: str) -> bool:
    """The `stamp` of a walk whose files were all chosen by it already (only_stamped)."""
    return True


def _directory(fd: int, prefix: str, cut: int, names: list[str], subdirs: list[str], chain: Chain,
               stack: MutableSequence[tuple[str, Chain]], listing: Listing, keep: Callable[[str], bool] | None,
               stamp: Callable[[str], bool] | None, descend: Callable[[str], bool] | None) -> None:
    """One listed directory (`prefix`, ending in "/"): its files into `listing`, its subdirectories
    onto `stack`, what the rules ignore into the hidden lists."""
    flagged = chain.flagged(prefix, names + subdirs, list(map(add, names + subdirs, repeat("/"))))
    if flagged:
        directories = set(subdirs)
        hidden = {name for name in flagged if chain.ignored(prefix + name, name, name in directories)}
        # Subdirectories first, files second: a name is one or the other, never both.
        listing.hidden_dirs.extend(prefix + name for name in subdirs if name in hidden)
        listing.hidden_files.extend(prefix + name for name in names if name in hidden)
        names = [name for name in names if name not in hidden]
        subdirs = [name for name in subdirs if name not in hidden]
    for name in subdirs:
        path = prefix + name
        if descend is None or descend(path[cut:]):
            stack.append((path, chain))
    relative = prefix[cut:]
    if keep is not None:
        names = list(compress(names, map(keep, map(add, repeat(relative), names))))
    paths = list(map(add, repeat(prefix), names))
    listing.files.extend(paths)
    if stamp is None:
        return
    if stamp is not _every_file:
        wanted = list(map(stamp, map(add, repeat(relative), names)))
        if not all(wanted):
            names, paths = list(compress(names, wanted)), list(compress(paths, wanted))
    stat = os.stat  # (a comprehension: a partial with keywords costs a dict per call)
    try:
        times = [stat(name, dir_fd=fd, follow_symlinks=False).st_mtime_ns for name in names]
    except OSError:  # a file vanished since the listing: it sorts last, still listed as found
        times = [_mtime(fd, name) for name in names]
    listing.stamped.extend(paths)
    listing.stamps.extend(times)


def _sized(fd: int, paths: list[str], cut: int) -> tuple[list[str], list[int]]:
    """`paths`, files of the directory open as `fd` (each `cut` characters of directory before its
    name), and their sizes read through `fd` without following a link; -1 for one gone since."""
    stat = os.stat
    try:
        return paths, [stat(path[cut:], dir_fd=fd, follow_symlinks=False).st_size for path in paths]
    except OSError:
        return paths, [_size(fd, path[cut:]) for path in paths]


def _size(fd: int, name: str) -> int:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False).st_size
    except OSError:
        return -1


def _mtime(fd: int, name: str) -> int:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False).st_mtime_ns
    except OSError:
        return 0
