"""Checkpoints: the workspace's state before every call that may change it, and undo (issue 16).

A shadow git repository outside the workspace, in the session store
($ABHED_HOME/checkpoints/<key of the workspace>/git), holds snapshots of the workspace: its own
GIT_DIR, index and refs, with the workspace as work tree. The project's own `.git` (its index, refs,
stash, config, hooks) is never read or written; git itself skips every entry named `.git`.

Why git, and only plumbing: `diff-files` and `ls-files -o` find what changed since the last
snapshot from the index's stat cache, so a snapshot of an unchanged tree costs one directory walk and hashes
nothing; objects are content-addressed, so every snapshot of every session of a workspace shares
one object store.

A later snapshot of a bash call lists no directory that did not change (changeset.py): once the git guard watches
the workspace with inotify, a snapshot takes what changed since this process's last one from it.
New untracked files are looked for only in directories whose entries changed (`check-ignore` on
those names, instead of `ls-files -o`), FIFOs likewise, the left-out survey re-walks only the tops
the change set touches, and tracked files are read only where the events name them or where a
process maps them shared and writable now (mapped.py: inotify names such a write only when the
mapping goes, and the stat moves only on the first write to a clean page, so reading them is what
sees the human's mapping held across calls). No `diff-files` then, "before" or "after", and the
repository's state is kept unless an event names `.git`. `diff-files` (the lstat of every tracked
file) still runs on a filesystem where inotify does not see every writer, and in an "after"
snapshot while a sandboxed process may be alive. Whatever the change set cannot vouch for (an
overflow, a watch missing, another process's snapshot since, a `.gitignore` changed...) gets the
full listing. A write through a second name outside the workspace (a hard link made there) is
seen only by a full listing: docs/security.md says what that leaves.

Without a `git` binary checkpoints are off and `abhed doctor` says so (see available()).

The git here runs on the host over a workspace the model controls, so it is given nothing from
there that could run a command or change bytes: no system or global config, no hooks
(core.hooksPath=/dev/null), no fsmonitor, and `$GIT_DIR/info/attributes` (which outranks every
`.gitattributes`) unsets filter, text, eol, ident and working-tree-encoding for every path, so a
workspace `.gitattributes` naming a filter driver runs nothing and content is stored byte for byte.

What is covered: files git would add with the project's `.gitignore` files and `.git/info/exclude`,
and the files the repository tracks where those name them too (seed.py: the first snapshot reads
each one it does not take; later ones find them in the shadow index), minus the operator's
exclusions (checkpoints.exclude), minus files over checkpoints.max_file_bytes and nested
repositories, which every snapshot lists as not covered. git keeps only the executable
bit of a file's mode; the exact permission bits of files that differ from 0644/0755 are kept in a
`modes` blob beside the tree, so undo restores modes exactly.

Each session's snapshots form a chain of commits (ref refs/abhed/<session>): a "before" snapshot,
numbered from 1 in call order, and an "after" snapshot when the call ends. Changes between one
call's "after" and the next "before", or since the last "after", were made by someone else (the
human, another session): undo never overwrites those silently.

One process at a time works on a shadow repository (flock on its `lock`, which also serialises the
threads of subagents, and which every git child inherits, so it is free only once they are gone too);
a kill -9 mid-snapshot leaves at most git's own `*.lock` files, removed by the next holder of the
lock, objects written whole (renamed into place), and a journal the next snapshot names
(journal.py; an undo's journal offers to finish or roll it back).

What cannot be read (a file or directory this user may not read, a FIFO, socket or device) is
skipped and named as not covered, never a reason to refuse the call; undo leaves such paths alone.

The workspace is read and written through descriptors opened beneath its root, never by path
(abhed/session/treeio.py): git only lists what changed (`diff-files`, `ls-files -o`: names and
stat data, never contents), while Abhed reads each changed file through a descriptor, stores the
blob itself (gitobjects.py) and writes the index entry with the stat of what it read
(gitindex.py); undo writes each file into its opened directory and renames it there. So a
sandboxed job swapping a directory for a symlink to the user's home while a snapshot or an undo
runs gets no byte of the home into the store, and no file of the model's into the home. Every git
run here has a deadline (checkpoints.timeout_s) and dies with Abhed (abhed/common/hostproc.py).

A workspace's first snapshot (no shadow index yet) does not hash every file of a git workspace: it
takes the blob ids of the repository's own index where they can be trusted and links the packs
that hold them into the store (seed.py says when, and why that is safe); only what differs or is
untracked is read as above. Its trees are stored as one pack, with the index's cache of trees, so
git's write-tree has nothing to write. A first snapshot that still read many files (no git, many
untracked) says so in its call's result (Capture.first).

The store is kept within checkpoints.max_store_bytes and checkpoints.max_count per workspace: past
either, the oldest checkpoints of the workspace (all sessions) are collected (their commits cut off
through git's `shallow` file, then `git prune`), and the snapshot that did it says so.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import Any

from abhed.common import hostproc
from abhed.files.atomic import replace_file
from abhed.session import changeset, collect, gitindex, gitobjects, hashing, journal, mapped, repostate, seed, treeio, uncovered
from sandbox import reserve
from sandbox.gitguard import Lstat

MAX_LISTED = 50  # paths named in one message or event; the rest are counted
# A snapshot that reads this many files writes their objects as packs (gitobjects.Pack): creating a
# loose object's file costs more than git's index-pack of a pack that holds a few more.
PACK_FROM = 32
# Up to this many tracked files, a later snapshot still lstat's every one (diff-files: ~20 ms at most here):
# the one write inotify never names, through a hard link made outside the workspace, is then seen too.
STAT_EVERY_FILE_UP_TO = 20_000
TREE_CACHE = "tree.cache"  # "INDEX-CHECKSUM TREE-ID": the tree of the index with that checksum (_write_tree)
PRUNED = "pruned"  # a new token each time a process prunes the store: an index kept in memory may name what went
# The shadow index is kept in this process's memory between snapshots and written when git is to read it,
# when the session's process is done with it (close), or once this many entries changed since it was written.
FLUSH_AFTER = 4096
# git commands that read no index: the index kept in memory need not be written for them.
_INDEX_FREE = frozenset({"cat-file", "diff-tree", "ls-tree", "log", "rev-list", "for-each-ref", "update-ref",
                         "count-objects", "index-pack", "init"})
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}(?<!\.lock)")
ATTRIBUTES = "* -text -filter -ident -eol -working-tree-encoding -diff -merge\n"
# Speed, and settings the commands run here never consult (info/attributes unsets every attribute that changes
# bytes; -z output; --no-renames; no external diff, transport or commit porcelain): set in case one ever does.
_UNCONSULTED = (  # pragma: no mutate (equivalent: see above)
    "core.attributesFile=/dev/null", "core.autocrlf=false", "core.safecrlf=false", "gc.auto=0", "index.threads=true",
    "core.preloadIndex=true", "protocol.allow=never", "diff.external=", "diff.renames=false", "core.quotePath=false")
# Passed on every command line, so a stale or damaged config file in the shadow repository cannot weaken them.
SAFE_CONFIG = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "core.excludesFile=/dev/null", "core.symlinks=true",
               "core.fileMode=true", "core.ignoreCase=false", "core.bare=false", "core.splitIndex=false",
               "core.sparseCheckout=false", "core.untrackedCache=false", "index.version=2",
               "feature.manyFiles=false", "core.checkStat=default", "core.trustctime=true") + _UNCONSULTED
# What git says on stderr of a directory it could not list (ls-files -o), and of a tracked path it could
# not lstat (diff-files' perror): both carry on without it, so the checkpoint names them (LANG=C: English).
_UNLISTED_DIR = re.compile(r"warning: could not open directory '(.+)/': (.+)")
_UNSTATED = re.compile(r"(.+): ([A-Z][a-z ]+)")
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's id of the tree with nothing in it
AUTHOR = {"GIT_AUTHOR_NAME": "abhed", "GIT_AUTHOR_EMAIL": "abhed@localhost", "GIT_COMMITTER_NAME": "abhed",
          "GIT_COMMITTER_EMAIL": "abhed@localhost"}


class CheckpointError(Exception):
    """A snapshot or an undo failed; the message says what, why and what to do."""


class UndoRefused(CheckpointError):
    """Undo would overwrite changes someone else made since the agent's calls; nothing was changed."""

    def __init__(self, message: str, paths: list[str]) -> None:
        super().__init__(message)
        self.paths = paths


def available() -> str | None:
    """The git binary checkpoints use, or None: then checkpoints are off (doctor says so)."""
    return shutil.which("git")


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to a snapshot)
class Snapshot:
    """One commit of a session's chain, with what its message says."""

    commit: str
    tree: str  # the workspace's tree (the commit's `files`)
    kind: str  # "before" (a numbered checkpoint) or "after" (the call ended)
    number: int
    meta: dict[str, Any]
    repo: str = ""  # the workspace repository's state (the commit's `repo`: repostate.py), "" without one
    modes_blob: str = ""  # the exact permission bits git does not keep (the commit's `modes`)


@dataclass
class Capture:
    """The workspace's state now: its tree, its exact modes, and what is not in it."""

    tree: str
    modes_blob: str
    not_covered: list[str] = field(default_factory=list)  # "path (why)"
    repo: str = ""  # the `.git` state's tree (repostate.py), "" when the workspace has no .git directory
    left_out: list[str] = field(default_factory=list)  # files git listed that it could not take (too large...)
    collected: str = ""  # what the store's collection took away to stay within its caps, in words
    skipped: list[str] = field(default_factory=list)  # "path (why)": unreadable, or a FIFO, socket, device
    interrupted: str = ""  # a snapshot killed before this one, in words (journal.py)
    first: str = ""  # a first snapshot that had to hash much, in words (seed.py)


@dataclass
class Change:
    status: str  # A created, M modified, D deleted (from the snapshot's point of view: what undo does)
    path: str


@dataclass
class UndoPlan:
    """What an undo to checkpoint `to` would do, computed before anything changes."""

    to: Snapshot
    now: Capture
    changes: list[Change]
    outside: list[str]  # paths the plan touches that someone other than the agent changed since
    left: list[str] = field(default_factory=list)  # "path (why)": unreadable now, left as they are


class Shadow:
    """The shadow repository of one workspace."""

    def __init__(self, home: Path, workspace: Path, *, git: str = "git", exclude: tuple[str, ...] = (),
                 max_file_bytes: int = 50 * 1024 * 1024, timeout_s: float = 120.0,
                 max_store_bytes: int = 4 * 1024**3, max_count: int = 2000,
                 disk_reserve_bytes: int | str | None = None) -> None:
        self.workspace = workspace
        key = sha256(os.fsencode(str(workspace))).hexdigest()[:24]
        self.dir = home / "checkpoints" / key
        self.git_dir = self.dir / "git"
        self.git_binary = git
        self.exclude = exclude
        self.max_file_bytes = max_file_bytes
        self.timeout_s = timeout_s
        self.max_store_bytes = max_store_bytes
        self.max_count = max_count
        self.disk_reserve_bytes = disk_reserve_bytes
        self._surveys: dict[str, uncovered.Survey] = {}  # a running call -> what was left out before it
        # The index as this process last read, wrote or changed it, and the checksum and PRUNED token
        # of the index file it came from; `_unwritten`: how many entries it changed since (0: the same).
        self._index: gitindex.Index | None = None
        self._index_sum: str | None = None
        self._pruned_seen = ""
        self._unwritten = 0
        self._held = threading.local()  # the lock's descriptor while this thread holds it (`fd`)
        self.later = Later()  # what a later snapshot of this process takes from the last one (changeset.py)
        self.started_ns = time.time_ns()  # no model command of this session ran before: see seed.py

    @property
    def seeds(self) -> bool:
        """Whether the next snapshot is the workspace's first (no shadow index yet), whose seed lstat's
        every tracked file (seed.py): what the sandbox start's census spares (sandbox.census)."""
        return not (self.git_dir / "index").exists()

    # -- running git ----------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(self.dir), "XDG_CONFIG_HOME": str(self.dir),
               "LANG": "C", "LC_ALL": "C", "GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.workspace),
               "GIT_INDEX_FILE": str(self.git_dir / "index"), "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
               "GIT_NO_REPLACE_OBJECTS": "1", "GIT_NO_LAZY_FETCH": "1"}
        return env  # (no identity: Abhed writes the commits itself, and no git run here writes a reflog)

    def _command(self) -> list[str]:
        command = [self.git_binary]
        for item in SAFE_CONFIG:
            command += ["-c", item]
        return command

    def git(self, *args: str, data: bytes | None = None, check: bool = True, errors: list[str] | None = None) -> bytes:
        """git's output; `errors`: given, gets the lines it printed on stderr."""
        if args[0] not in _INDEX_FREE and not (args[0] == "check-ignore" and "--no-index" in args):
            self._write_index()  # git reads the index from its file: what this process keeps goes there first
        if args[0] == "prune":  # it keeps what the index file names; other processes' kept indexes may name more
            self._pruned_seen = secrets.token_hex(8)
            gitobjects.write_file(self.dir / PRUNED, self._pruned_seen.encode())
        command = self._command()
        env = self._env()
        if args[0] == "init":  # creating the repository itself: it has no work tree yet
            del env["GIT_WORK_TREE"], env["GIT_DIR"], env["GIT_INDEX_FILE"]
            command = [self.git_binary]
        try:
            done = hostproc.run(command + list(args), input=data, env=env, cwd=self.workspace, timeout=self.timeout_s,
                                pass_fds=self.lock_fds())
        except hostproc.Timeout:
            raise CheckpointError(
                f"git {args[0]} did not finish within {self.timeout_s:g} s (checkpoints.timeout_s) in the shadow "
                f"repository {self.git_dir} and was stopped: something in {self.workspace} makes it wait (a FIFO "
                "where git reads a file such as .gitignore, a hung network filesystem) or the disk is very slow. "
                "Remove what blocks it, or raise checkpoints.timeout_s.") from None
        except OSError as exc:
            raise CheckpointError(f"cannot run git ({self.git_binary}): {exc.strerror or exc}. Install git, or set "
                                  "checkpoints.enabled = false to work without checkpoints.") from None
        if check and done.returncode != 0:
            error = done.stderr.decode("utf-8", "replace").strip()[-800:]  # pragma: no mutate (any short bound)
            raise CheckpointError(f"git {args[0]} failed in the shadow repository {self.git_dir} (exit "
                                  f"{done.returncode}): {error}")
        if errors is not None:
            errors += os.fsdecode(done.stderr).splitlines()
        return done.stdout

    def lock_fds(self) -> tuple[int, ...]:
        """The lock's descriptor, for every git child: the lock then outlives a killed Abhed until its
        children are gone too, so the next holder finds no git of ours still writing (journal.py)."""
        fd = getattr(self._held, "fd", None)
        return () if fd is None else (fd,)

    # -- setting up, and the lock -------------------------------------------------------------------

    def _ensure(self) -> None:
        if not all(p.exists() for p in (self.git_dir / "HEAD", self.git_dir / "objects", self.git_dir / "refs")):
            self._init()
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        _write_if_changed(info / "attributes", ATTRIBUTES)
        self.later.excludes = self._excludes()  # a change set is trusted only while these stay as they were
        _write_if_changed(info / "exclude", self.later.excludes)

    def _init(self) -> None:
        """Make the repository under another name and rename it into place: a kill mid-way leaves no
        half-made repository where the next snapshot would look (only the other name, cleared here)."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.git_dir.exists():  # from before this was atomic, or a disk error: a store holds objects
            if any((self.git_dir / "objects").glob("??/*")) or any((self.git_dir / "objects" / "pack").glob("*")):
                raise CheckpointError(f"the shadow repository {self.git_dir} is damaged (it lacks HEAD, objects/ or "
                                      f"refs/) but holds checkpoints; `git --git-dir {self.git_dir} fsck` says more. "
                                      "Move it away to start a new one.")
            shutil.rmtree(self.git_dir)
        making = self.dir / "git.init"
        shutil.rmtree(making, ignore_errors=True)
        self.git("init", "--quiet", "--bare", str(making))
        os.rename(making, self.git_dir)
        (self.dir / "workspace").write_text(f"{self.workspace}\n")

    def _excludes(self) -> str:
        """The operator's exclusions, then the project's own .git/info/exclude (its .gitignore files git
        reads itself, from the work tree)."""
        lines = ["# Abhed's own temporary files (atomic.py): half-written, renamed away at once",
                 ".*.abhed-tmp-*", "# checkpoints.exclude (the operator's)", *self.exclude]
        home = self.dir.parent.parent
        if home.is_relative_to(self.workspace) and home != self.workspace:
            # the session store inside the workspace: snapshots must not take in the snapshots
            lines += ["# the session store itself", "/" + _escaped(str(home.relative_to(self.workspace))) + "/"]
        with treeio.Tree(str(self.workspace)) as tree:  # read through no symlink, and never blocking on a FIFO
            project = tree.read(".git/info/exclude", 1024 * 1024)  # pragma: no mutate (a size bound far past any real file)
        if isinstance(project, treeio.Read) and not stat.S_ISLNK(project.st.st_mode):
            lines += ["# the project's .git/info/exclude", project.data.decode("utf-8", "replace")]
        return "\n".join(lines) + "\n"

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the shadow repository, across processes and threads; clear what a killed holder left."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise CheckpointError(f"cannot use the shadow repository {self.dir}: {exc.strerror or exc}. Make "
                                  f"{self.dir.parent} a writable directory") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._held.fd = fd
            self._ensure()
            self._clear_stale_locks()
            yield
        finally:
            self._held.fd = None
            os.close(fd)

    def _clear_stale_locks(self) -> None:
        """git's own lock files (index.lock...): only a holder of our lock writes here, and its git children
        hold the lock too, so any left now is from a holder and children that are all gone."""
        stale = list(self.git_dir.glob("*.lock")) + list((self.git_dir / "refs").rglob("*.lock"))
        for path in stale:
            path.unlink(missing_ok=True)

    # -- taking a snapshot ----------------------------------------------------------------------

    def capture(self, since: Since | None = None, report: hashing.Report | None = None,
                on_seeded: Callable[[], None] | None = None) -> Capture:
        """Bring the index up to the workspace and write its tree (call with the lock held); `since`:
        what changed since this process's last snapshot, when known (changeset.py); `report`: told how
        far the read loop has got when it has many files to read (hashing.py); `on_seeded`: called once
        the first snapshot's seed is in the index (prepare: the survey's listing starts beside the rest)."""
        self._check_reserve()
        others = _Early(self, self.OTHERS_LISTING)  # started once a seed's entries are in the index (_first)
        repo = _RepoBeside(self) if self.seeds else None  # a first snapshot walks the repository's state beside the seed
        if repo is not None:
            repo.start()
        try:
            first = self._first(others.start, since)
            if on_seeded is not None:
                on_seeded()
            found = first.seeded
            seeded = found is not None and bool(found.entries or found.untaken)
            untaken = found.untaken if found is not None else []
            return first.done(self._capture(since, report, found is not None, seeded, others, repo, untaken), self)
        except gitindex.Unreadable:
            # Not an index this code or git wrote (damaged, another version): start again from none;
            # every file is then read again, and unchanged ones hash to the objects already stored.
            (self.git_dir / "index").unlink(missing_ok=True)  # pragma: no mutate (it was just read: it exists)
            return self._capture(None, report, True, repo_beside=repo)  # (the repository's state as begun)
        finally:
            others.join()
            if repo is not None:
                repo.join()

    # A first snapshot that still reads this many files is named in the call's result (seed.py says why).
    FIRST_NOTE_FILES = 2000

    def _first(self, on_indexed: Callable[[], None], since: Since | None = None) -> _First:
        """A workspace's first snapshot (no shadow index yet): seed the index from the repository's own
        (seed.py), so that only what differs from it is read and hashed; timed, for the call's note.
        `on_indexed`: called once the seed's entries are in the index file (the listing of untracked
        files then starts beside the rest: the entries the exclusions take out after cannot change it).
        `since`: its census spares the seed the lstat of each file it vouches for (seed.Census)."""
        started = time.monotonic()
        census = seed.Census(since.census, since.touched) if since is not None and since.census is not None else None
        if since is not None:
            since.census = None  # pragma: no mutate (memory: held, it is some 200 bytes a file; one snapshot uses it)
        if not self.seeds:
            return _First(None, started, 0)
        with treeio.Tree(str(self.workspace)) as tree:
            found = seed.Seeder(tree, self.dir, self.started_ns, self.max_file_bytes, self.max_store_bytes // 4,
                                census).seed()
        if found.entries or found.untaken:
            path = self.git_dir / "index"
            # Written first without its trees, for git to name what the exclusions leave out; its
            # trees and their pack only once that is known (the kernel's tracked `target/` directories
            # meet the default exclusions: the trees made twice cost half a second there). The tracked
            # files not taken are in it too, by name only, for the same question; the snapshot reads them.
            untaken = {name: gitindex.named(name) for name in found.untaken}
            self._seed_index(path, [*found.entries.values(), *untaken.values()], trees=False)
            # Listed as untracked or not, the entries taken out below are left out of the listing by
            # --exclude-standard (it reads the same info/exclude): it may start now.
            on_indexed()
            # What checkpoints.exclude (and the store itself, .git/info/exclude) leave out: out again. A
            # tracked file that a .gitignore names stays covered: it is the repository's own content.
            rules = f"--exclude-from={self.git_dir / 'info' / 'exclude'}"
            ignored = [n for n in self.git("ls-files", "-z", "-c", "-i", rules).split(b"\0") if n]
            for name in ignored:
                found.entries.pop(name, None)
                found.modes.pop(os.fsdecode(name), None)
                untaken.pop(name, None)
            found.untaken = list(untaken)
            self._seed_index(path, found.entries.values())
            self._index_sum = gitindex.checksum(path)
            modes = self._modes()
            modes["modes"] = {**modes["modes"], **found.modes}
            self._save_modes(modes)
        return _First(found, started, len(found.entries))

    def _seed_index(self, path: Path, seeded: Iterable[gitindex.Entry], trees: bool = True) -> None:
        """Write the seeded index, with its trees as one pack and the index's cache of them (write-tree
        has none to write); the pack first, so that no cache names a tree the store lacks. `trees`
        False: the entries alone (no cache, no pack)."""
        entries = sorted(seeded, key=lambda e: e.name)
        if not trees:
            self._index = gitindex.write(path, gitindex.Index(entries, None))
            return
        made = seed.trees_of(entries)
        if made is not None:
            self.git("index-pack", str(seed.write_pack(self.git_dir / "objects" / "pack", made[0])))
        self._index = gitindex.write(path, gitindex.Index(entries, made[1] if made is not None else None))

    # git's listing of what the ignore rules leave out, for a survey with no earlier one to start from.
    SURVEY_LISTING = ("ls-files", "-z", "-o", "-i", "--exclude-standard", "--directory")

    def _survey(self, capture: Capture, earlier: list[str], since: Since | None = None,
                listing: Callable[[], bytes] | None = None) -> uncovered.Survey:
        """`listing`: SURVEY_LISTING's output, when it was started earlier (prepare)."""
        home = self.dir.parent.parent
        skip = (".abhed", *([str(home.relative_to(self.workspace))] if home.is_relative_to(self.workspace) else []))
        last = self.later.survey
        if since is not None and since.listing is not None and last is not None and not last.partial:
            # Where the change set touched nothing, the tops and what lies below them are as the last survey found.
            names = self._names()
            tops = [t for t in last.tops if not names.has(t)] + since.new_tops
            found = uncovered.survey(str(self.workspace), [*tops, *capture.left_out, *earlier], skip, last,
                                     since.touched | self.later.pending)
        else:
            listed = (listing() if listing is not None else self.git(*self.SURVEY_LISTING)).split(b"\0")
            found = uncovered.survey(str(self.workspace), [*(os.fsdecode(n) for n in listed if n), *capture.left_out,
                                                           *earlier], skip)
        self.later.survey = found
        return found

    STORE_FS = "the checkpoint store's filesystem"

    def _check_reserve(self) -> None:
        """The store's filesystem keeps the disk reserve: a snapshot is not written into the last of it."""
        name = "sandbox.disk_reserve_bytes"
        found = reserve.measure(self.dir, self.disk_reserve_bytes, name)  # None before _ensure made the store
        if found is not None and found.short:
            raise CheckpointError(
                f"{found.shortfall(self.STORE_FS)}; no snapshot is written into the last of the disk. {reserve.remedy(name)}, or move ABHED_HOME to a larger disk")

    # git's listing of the untracked files the ignore rules let through (names only).
    OTHERS_LISTING = ("ls-files", "-z", "-o", "--exclude-standard")

    def _listed(self, tracked: bool = True, others: _Early | None = None) -> tuple[set[str], list[str], list[str]]:
        """Every path that may differ from the index, what git's listing names as not covered, and the
        directories it could not list: the full listing, from no change set. `tracked` False: no
        diff-files, for an index the seed has just written from each file's lstat (seed.py); `others`:
        OTHERS_LISTING, when it was started earlier (capture)."""
        # Tracked files whose stat differs from the index (diff-files lstat's them in parallel), then
        # untracked ones the ignore rules let through: names only; nothing is read by git.
        errors: list[str] = []
        listed = self.git("diff-files", "-z", "--name-only", "--no-renames", errors=errors).split(b"\0") \
            if tracked else []
        unstated = [m[1] for m in map(_UNSTATED.fullmatch, errors) if m]  # tracked, lstat failed: read again
        errors.clear()  # pragma: no mutate (equivalent: diff-files never says "could not open directory")
        listed += (others.result(errors) if others is not None else self.git(*self.OTHERS_LISTING, errors=errors)).split(b"\0")
        paths: set[str] = set(unstated)
        not_covered: list[str] = []
        unlisted = [m for m in map(_UNLISTED_DIR.fullmatch, errors) if m]
        skipped = [f"{m[1]}/ (a directory that cannot be read: {m[2]}; nothing in it is covered)" for m in unlisted]
        self.later.carried = [m[1] for m in unlisted]
        for entry in listed:
            if not entry:
                continue  # pragma: no mutate (the split's empty last name: read, it would be the missing "", a no-op)
            path = os.fsdecode(entry)
            if path.endswith("/"):
                not_covered.append(f"{path} (a nested git repository: commit or copy it yourself)")
                self.later.carried.append(path.rstrip("/"))
            else:
                paths.add(path)
        self.later.listed = (list(not_covered), list(skipped))
        return paths, not_covered, skipped

    def _listed_since(self, since: Since) -> tuple[set[str], list[str], list[str]]:
        """What `_listed` finds, from the change set (changeset.py): the tracked files diff-files names (or,
        in an "after" snapshot with no sandboxed process alive, those the events name), the untracked
        files in the changed directories the ignore rules let through, and the files left out last time."""
        changes = since.changes
        changeset.check_listing_rules(changes.paths, self.later.carried)
        names = self._names()
        if len(names.entries) <= STAT_EVERY_FILE_UP_TO:
            since.stat_all = True
        with treeio.Tree(str(self.workspace)) as tree:
            found = changeset.listing(tree, names, changes.paths, changes.dirs, changes.new_dirs, not since.stat_all)
            if not since.stat_all and changeset.linked(tree, found.tracked | found.untracked):
                since.stat_all = True  # written through one name, the others' content changed too, unnamed
        paths = found.tracked | set(self.later.left_out)
        if since.stat_all:
            errors: list[str] = []
            listed = self.git("diff-files", "-z", "--name-only", "--no-renames", errors=errors).split(b"\0")
            paths |= {os.fsdecode(n) for n in listed if n} | {m[1] for m in map(_UNSTATED.fullmatch, errors) if m}
        candidates = sorted(found.untracked | found.untracked_dirs)
        ignored = set(self._ignored(candidates)) if candidates else set()
        paths |= found.untracked - ignored
        tops = set(self.later.survey.tops) if self.later.survey is not None else set()
        since.new_tops = [c for c in candidates if c in ignored and not _below_any(c, ignored | tops)]
        since.dirs = found.dirs | {p for p in since.touched if names.is_dir(p)}
        since.listing = found
        not_covered, skipped = self.later.listed
        return paths, list(not_covered), list(skipped)

    def _repo(self, tree: treeio.Tree, since: Since | None, beside: _RepoBeside | None = None) -> tuple[str, list[str]]:
        """The repository's state (repostate.py): walked, or, in an "after" snapshot from the change set that
        names nothing under .git, what the last walk found (git writes its files, it maps none).
        `beside`: the walk, when a first snapshot started it with itself (capture)."""
        if since is not None and since.listing is not None and not since.stat_all and self.later.repo is not None \
                and not any(p == repostate.GIT or p.startswith(f"{repostate.GIT}/") for p in since.touched):
            repo, left_out = self.later.repo
        elif beside is not None:
            repo, left_out = beside.result()
        else:
            repo, left_out = repostate.RepoState(self.dir, self.git_dir / "objects").capture(tree)
        self.later.repo = (repo, list(left_out))
        return repo, list(left_out)

    def _ignored(self, paths: list[str]) -> list[str]:
        """Those of the untracked `paths` the ignore rules leave out (git check-ignore: names only)."""
        data = b"".join(os.fsencode(p) + b"\0" for p in paths)
        out = self.git("check-ignore", "-z", "--stdin", "--no-index", data=data, check=False)
        return [os.fsdecode(n) for n in out.split(b"\0") if n]

    def _names(self) -> changeset.Names:
        """The shadow index's paths (changeset.Names), made once per index this process read or wrote."""
        index = self._read_index(self.git_dir / "index")
        if self.later.names is None or self.later.names[0] is not index:
            self.later.names = (index, changeset.Names(index.entries))
        return self.later.names[1]

    def _capture(self, since: Since | None = None, report: hashing.Report | None = None,
                 first: bool = False, seeded: bool = False, others: _Early | None = None,
                 repo_beside: _RepoBeside | None = None, untaken: Iterable[bytes] = ()) -> Capture:
        """`untaken`: tracked files a first snapshot's seed did not take, read whatever a .gitignore says."""
        paths: set[str] | None = None
        if since is not None and since.valid:
            try:
                paths, not_covered, skipped = self._listed_since(since)
            except changeset.Fallback as why:
                since.listing, self.later.fallback = None, str(why)
        if paths is None:
            paths, not_covered, skipped = self._listed(tracked=not seeded, others=others if seeded else None)
        paths.update(map(os.fsdecode, untaken))
        if since is not None and since.mapped:  # written through a live mapping: no stat or event need say so (mapped.py)
            paths |= set(self._names().with_inodes(since.mapped))
        modes = self._modes()
        changes: dict[bytes, gitindex.Entry | None] = {}
        left_out: list[str] = []
        left_here: list[str] = []  # files this listing named that were not taken (read again next time)
        now = time.time()
        objects = self.git_dir / "objects"
        # Many files to read (a first snapshot, a checkout): their objects go into packs, not a file each.
        pack = gitobjects.Pack(objects / "pack") if len(paths) >= PACK_FROM else None
        write = pack.add if pack is not None else functools.partial(gitobjects.write_object, objects)
        ticker = hashing.ticker(report, len(paths), first, self.FIRST_NOTE_FILES)
        with treeio.Tree(str(self.workspace)) as tree, hashing.ended(ticker):
            named_at = len(not_covered)  # the repository's state is named first (below)
            for path in sorted(paths):
                got = tree.read(path, self.max_file_bytes)
                name = os.fsencode(path)
                if ticker is not None:
                    ticker.tick(len(got.data) if isinstance(got, treeio.Read) else 0)
                if not isinstance(got, treeio.Read):
                    if got is not None:
                        (skipped if got.unreadable else not_covered).append(f"{path} ({got.why})")
                        left_out.append(path)
                        left_here.append(path)
                    changes[name] = None  # gone, beyond a symlink now, or not covered: out of the index
                    modes["modes"].pop(path, None)
                    continue
                changes[name] = gitindex.entry(name, got.st, write(b"blob", got.data), now, got.settled)
                perm = stat.S_IMODE(got.st.st_mode)
                if stat.S_ISREG(got.st.st_mode) and perm != (0o755 if perm & 0o100 else 0o644):
                    modes["modes"][path] = perm
                else:
                    modes["modes"].pop(path, None)
            # After the files: a first snapshot's walk of .git runs beside them (_RepoBeside), copying a
            # never-packed repository's loose objects while this reads the work tree.
            repo, repo_left_out = self._repo(tree, since, repo_beside)
            not_covered[named_at:named_at] = repo_left_out
            left_out[:0] = repo_left_out
            journal.pause("snapshot")
        self.later.left_out = left_here
        blob = self._save_modes(modes)  # before the index: a kill between them leaves paths to look at again
        index_file = self.git_dir / "index"
        root = None
        if changes or self._unwritten:
            index = self._read_index(index_file)  # (what was kept is dropped if another process wrote the file)
            changes = gitindex.differing(index.entries, changes)
            if changes:
                # Kept here, not written: rewriting a kernel's 9 MB index cost a later snapshot some 40 ms.
                index = self._index = gitindex.updated(index, changes, lambda body: write(b"tree", body))
                self._unwritten += len(changes)
            if pack is not None:  # indexed before anything names their objects (the index file, a commit)
                for written in pack.written():
                    self.git("index-pack", str(written))
            root = gitindex.root_tree(index)
            if self._unwritten > FLUSH_AFTER:
                self._write_index()
        return Capture(root or self._write_tree(index_file), blob, not_covered + skipped, repo, left_out,
                       skipped=skipped)

    def _specials(self, since: Since | None = None) -> list[str]:
        """FIFOs, sockets and devices in the directories of the covered files (git lists none of them);
        with a change set, only the changed directories are listed again (changeset.specials); else
        what the git guard's listings found when the change set was taken, and the directories it has
        not listed are listed here (sandbox.gitguard.Changes)."""
        last = self.later.specials
        with treeio.Tree(str(self.workspace)) as tree:
            if since is not None and since.listing is not None and last is not None:
                dirs = since.dirs | {d for d in self.later.pending if self._names().is_dir(d)}
                found = changeset.specials(tree, self._names(), last, dirs)
            elif since is not None and since.changes.listed:
                listed, specials, covered = since.changes.listed, since.changes.specials, self._names().dirs()
                found = sorted([treeio.special(d, name, kind) for d in covered for name, kind in specials.get(d, ())
                                if name != ".git"]  # pragma: no mutate (as Tree.specials: a .git there is a nested repository's, its directory no covered one)
                               + tree.specials([d for d in covered if d not in listed]))
            else:
                found = tree.specials(self._names().dirs())
        self.later.specials = found
        return found

    def _read_index(self, path: Path) -> gitindex.Index:
        """The index this process keeps, while no other process changed the index file or pruned the
        store since; else the file's, parsed (a kernel-sized index takes a tenth of a second to read).

        What this process kept and did not write is then dropped, and that is safe: the index is a
        cache of what the files hash to, and an older one differs from the files by its stat data where
        they changed, so the next snapshot reads those again (a listing of everything, since the change
        set's base was that kept index)."""
        checksum, pruned = gitindex.checksum(path), self._pruned()
        if self._index is None or checksum is None or not self._kept_current(checksum, pruned):
            self._index, self._index_sum, self._pruned_seen = gitindex.read(path), checksum, pruned
            self._unwritten = 0
        return self._index

    def _pruned(self) -> str:
        try:
            return (self.dir / PRUNED).read_text()
        except OSError:
            return ""

    def _kept_current(self, checksum: str | None, pruned: str) -> bool:
        """Whether the index this process keeps still stands: no other process wrote the index file
        (its checksum) or pruned the store (the PRUNED token) since this one last read or wrote it."""
        return checksum == self._index_sum and pruned == self._pruned_seen

    def _write_index(self) -> None:
        """Write the index this process keeps to its file, if it changed it (lock held): before git reads
        the file, at close, and every FLUSH_AFTER changed entries (so that a killed process leaves little
        for the next one to read again). Dropped instead when another process wrote the file or pruned
        the store since (_read_index)."""
        if not self._unwritten or not self.lock_fds():
            return
        path = self.git_dir / "index"
        self._unwritten = 0
        if self._index is None or not self._kept_current(gitindex.checksum(path), self._pruned()):
            return
        self._index.body = gitindex.write(path, self._index).body  # the same object: the change set's base names it
        self._index_sum = gitindex.checksum(path)
        root = gitindex.root_tree(self._index)
        if root is not None and self._index_sum is not None:  # its trees computed: no write-tree, now or later
            gitobjects.write_file(self.dir / TREE_CACHE, f"{self._index_sum} {root}\n".encode())

    def close(self) -> None:
        """The session's process is done with the store: the index it kept goes to the file, for the next."""
        if self._unwritten:
            with self.locked():
                self._write_index()

    def _write_tree(self, path: Path) -> str:
        """The index's tree: git's write-tree, or, when the index is the one it last read, its answer then."""
        self._write_index()  # the file is what git reads, and what the cache's checksum names
        cache = self.dir / TREE_CACHE
        checksum = gitindex.checksum(path)
        try:
            known, tree_id = cache.read_text().split()
            if checksum is not None and known == checksum:
                return tree_id
        except (OSError, ValueError):
            pass
        # Blobs taken from the repository's packs are not in the store's object directory (seed.py).
        tree_id = self.git("write-tree", *(["--missing-ok"] if seed.linked(self.dir) else [])).decode().strip()
        checksum = gitindex.checksum(path)  # git wrote it again, with its cache of trees
        if checksum is not None:
            gitobjects.write_file(cache, f"{checksum} {tree_id}\n".encode())
            if self._index is not None and checksum != self._index_sum:  # pragma: no mutate (a cache, as above)
                self._index, self._index_sum = gitindex.after_git(path, self._index), checksum
        return tree_id

    def _modes(self) -> dict[str, Any]:
        try:
            value = json.loads((self.dir / "modes.json").read_bytes())
            if isinstance(value, dict) and isinstance(value.get("modes"), dict):
                return value
        except (OSError, ValueError):
            pass
        return {"blob": None, "modes": {}}

    def _save_modes(self, modes: dict[str, Any]) -> str:
        data = json.dumps(modes["modes"], sort_keys=True).encode()
        if modes.get("blob") and modes.get("data") == sha256(data).hexdigest():
            return str(modes["blob"])
        blob = gitobjects.write_blob(self.git_dir / "objects", data).hex()
        replace_file(self.dir / "modes.json", json.dumps({"blob": blob, "data": sha256(data).hexdigest(),
                                                          "modes": modes["modes"]}).encode(), mode=0o600)
        return blob

    def commit(self, session_id: str, capture: Capture, meta: dict[str, Any], parent: str | None = None) -> Snapshot:
        """Add `capture` to the session's chain (call with the lock held); `parent`: its tip, if known.

        The tree, the commit and the ref are written here, not by git: they are the store's own files
        (as git writes them), and three git processes fewer make the snapshot of an unchanged tree cheap."""
        if parent is None:  # pragma: no mutate (equivalent: a caller passes the tip, saving this lookup)
            parent = self.tip(session_id)[0]
        objects = self.git_dir / "objects"
        root = gitobjects.write_object(objects, b"tree", b"40000 files\0" + bytes.fromhex(capture.tree) +
                                       b"100644 modes\0" + bytes.fromhex(capture.modes_blob) +
                                       (b"40000 repo\0" + bytes.fromhex(capture.repo) if capture.repo else b"")).hex()
        when = f"{int(time.time())} +0000"
        head = f"tree {root}\n" + (f"parent {parent}\n" if parent else "") + \
            f"author {AUTHOR['GIT_AUTHOR_NAME']} <{AUTHOR['GIT_AUTHOR_EMAIL']}> {when}\n" \
            f"committer {AUTHOR['GIT_COMMITTER_NAME']} <{AUTHOR['GIT_COMMITTER_EMAIL']}> {when}\n\n"
        commit = gitobjects.write_object(objects, b"commit", head.encode() + json.dumps(meta, sort_keys=True).encode())
        gitobjects.write_file(self.git_dir / _ref(session_id), commit.hex().encode() + b"\n")
        return Snapshot(commit.hex(), capture.tree, meta["kind"], meta["number"], meta, capture.repo,
                        capture.modes_blob)

    def snapshot(self, session_id: str, kind: str, meta: dict[str, Any], *, watch: bool = False,
                 changes: ChangeSource | None = None, report: hashing.Report | None = None) -> tuple[Snapshot, Capture]:
        """Capture and commit in one hold of the lock. A "before" gets the session's next number.
        `watch`: survey what checkpoints leave out, before the call and after it (uncovered.py), so that
        what the call did there, which undo cannot take back, is said (the after snapshot's `uncovered`).
        `changes`: the sandbox's change set (changeset.py), taken here, before anything is read.
        `report`: how far a read of many files has got (hashing.py)."""
        with self.locked():
            killed = journal.read(self.dir, journal.SNAPSHOT)
            journal.write(self.dir, journal.SNAPSHOT, {"session": session_id, "kind": kind, "call": meta.get("call"),
                                                       "tool": meta.get("tool"), "started": stamp()})
            try:
                since = self._since(changes, kind)
                done = self._snapshot(session_id, kind, meta, watch, killed, since, report)
                self._chain(changes, since, watch)
                return done
            finally:  # done, or failed and said so: only a kill leaves the journal
                journal.clear(self.dir, journal.SNAPSHOT)

    def prepare(self, changes: ChangeSource | None = None, report: hashing.Report | None = None) -> Capture:
        """A first snapshot's work ahead of the first call (tools/warmup.py): the index seeded and
        brought up to the workspace, its tree, the specials and the survey, with no commit; with
        `changes`, the base the next snapshot's change set starts from (as after a snapshot)."""
        with self.locked():
            since = self._since(changes, "before")
            early = _Early(self, self.SURVEY_LISTING) if self.later.survey is None else None  # the survey will list everything
            try:
                capture = self.capture(since, report, early.start if early is not None else None)
                self._specials(since)
                self._survey(capture, [], since, early.result if early is not None else None)
            finally:
                if early is not None:
                    early.join()
            self._chain(changes, since, True)
            return capture

    def _since(self, changes: ChangeSource | None, kind: str) -> Since | None:
        """The change set since this process's last snapshot, `valid` only when it covers that whole
        interval and the shadow index is still the one that snapshot left (changeset.py)."""
        base, self.later.base = self.later.base, None  # a snapshot that fails leaves no base to trust
        # The mappings before the change set: one that goes between the two has sent its IN_CLOSE_WRITE by then.
        inodes, unseen = self._mapped() if changes is not None else (set(), None)
        got = changes() if changes is not None else None
        if got is None:
            self.later.pending = set()
            return None
        taken, quiet = got
        # inotify names every write but one through a mapping that lives on (mapped.py): those files are read.
        # Still lstat every file where that cannot be known, and in an "after" while a sandboxed process lives.
        since = Since(taken, stat_all=unseen is not None or (kind == "after" and not quiet),
                      touched=taken.paths | taken.new_dirs, mapped=inodes,
                      census=taken.census if unseen is None else None)  # inotify must see every writer
        since.valid = (taken.complete and base is not None and base[:2] == (changes, taken.number - 1)
                       and base[2] is self._read_index(self.git_dir / "index") and base[3] == self.later.excludes)
        self.later.fallback = "" if since.valid else "no complete change set since this process's last snapshot"
        return since

    def _mapped(self) -> tuple[set[int], str | None]:
        """The inodes mapped shared and writable on the workspace's filesystems now (mapped.py), and why
        inotify cannot be trusted with the rest here (None: it can)."""
        try:
            fd = os.open(self.workspace, treeio.DIR_FLAGS)
        except OSError as exc:
            return set(), f"the workspace cannot be opened ({exc.strerror})"
        try:
            unseen = mapped.trusted_filesystem(fd)
        finally:
            os.close(fd)
        devs = mapped.devices(str(self.workspace))
        if devs is None:
            return set(), unseen or "/proc/self/mountinfo cannot be read"
        return mapped.shared_writable(devs), unseen

    def _chain(self, changes: ChangeSource | None, since: Since | None, watch: bool) -> None:
        """Make this snapshot the base the next one's change set starts from."""
        if since is None:
            return
        self.later.base = (changes, since.changes.number, self._read_index(self.git_dir / "index"), self.later.excludes)
        if watch:  # its specials and survey looked at all that changed (or at everything)
            self.later.pending = set()
        elif since.valid and not since.changes.new_dirs:  # for the next snapshot that looks at them
            self.later.pending |= since.touched | since.changes.dirs
        else:  # what changed is not known, or is a tree of directories: the next one looks at everything
            self.later.specials = self.later.survey = None
            self.later.pending = set()

    def _snapshot(self, session_id: str, kind: str, meta: dict[str, Any], watch: bool,
                  killed: dict[str, Any] | None, since: Since | None = None,
                  report: hashing.Report | None = None) -> tuple[Snapshot, Capture]:
        """snapshot()'s work, lock held; `killed`: the journal of a snapshot killed before it, if any."""
        capture = self.capture(since, report)
        if killed is not None:
            capture.interrupted = journal.snapshot_notice(killed)
            meta = {**meta, "interrupted": capture.interrupted}
        if watch:  # only a bash call can make one (write and edit make regular files)
            found_specials = [s for s in self._specials(since) if s not in capture.skipped]
            capture.skipped += found_specials
            capture.not_covered += found_specials
        parent, tip = self.tip(session_id)
        last = _last(tip)
        number = last + 1 if kind == "before" else meta["number"]
        meta = {**meta, "kind": kind, "number": number, "last": max(last, number), "at": stamp(),
                "ns": time.time_ns()}  # "at" for people; "ns" orders the checkpoints of all sessions (collect.py)
        if watch:
            earlier = self._surveys.pop(str(meta.get("call")), None) if kind == "after" else None
            found = self._survey(capture, earlier.tops if earlier else [], since)
            if kind == "before":
                self._surveys[str(meta.get("call"))] = found
            elif earlier is not None:
                meta["uncovered"] = uncovered.changes(earlier, found)
        snapshot = self.commit(session_id, capture, meta, parent)
        if kind == "before":
            capture.collected = collect.keep_within(self, session_id)
        return snapshot, capture

    def tip(self, session_id: str) -> tuple[str, dict[str, Any]]:
        """The session's newest snapshot and what its message says; ("", {}) before the first."""
        commit = _read_ref(self.git_dir, _ref(session_id))
        if not commit:
            return "", {}
        body = self._object("commit", commit)
        return commit, _meta(body.split(b"\n\n", 1)[1] if b"\n\n" in body else b"")

    def _object(self, kind: str, oid: str) -> bytes:
        """The body of the store's object `oid` of `kind`: read from its loose file, as the store wrote
        it, with no git to run; else (packed by hand, say) git reads it."""
        loose = gitobjects.read_loose(self.git_dir / "objects", oid)
        if loose is not None and loose[0] == kind.encode():
            return loose[1]
        return self.git("cat-file", kind, oid)

    def last_number(self, session_id: str) -> int:
        """The highest checkpoint number the session has (lock held)."""
        return _last(self.tip(session_id)[1])

    # -- reading a session's chain ----------------------------------------------------------------

    def chain(self, session_id: str) -> list[Snapshot]:
        """The session's snapshots, oldest first."""
        if not (self.git_dir / "HEAD").is_file():
            return []
        with self.locked():
            return self.chain_locked(session_id)

    def diff(self, old: Snapshot | Capture, new: Snapshot | Capture) -> list[Change]:
        """What changed from `old` to `new`, path by path (the repository's own files as .git/...)."""
        return [Change(c.status, c.path) for c in self._raw_diff(old, new)]

    def _raw_diff(self, old: Snapshot | Capture, new: Snapshot | Capture) -> list[_Raw]:
        """The changes from `old` to `new` with the new side's mode and object (git's raw format); a file
        whose exact permission bits alone changed (0600 -> 0644: git keeps only the executable bit) too."""
        changes = self._tree_diff(old.tree, new.tree, "")
        if old.modes_blob != new.modes_blob:
            changes += self._mode_changes(old, new, {c.path for c in changes})
        return changes + self._tree_diff(old.repo or EMPTY_TREE, new.repo or EMPTY_TREE, f"{repostate.GIT}/")

    def _mode_changes(self, old: Snapshot | Capture, new: Snapshot | Capture, seen: set[str]) -> list[_Raw]:
        before, after = self._mode_map(old.modes_blob), self._mode_map(new.modes_blob)
        paths = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p) and p not in seen)
        if not paths:
            return []
        listing = self.git("ls-tree", "-z", new.tree, "--", *paths).split(b"\0")
        changes = []
        for line in filter(None, listing):
            info, _, name = line.partition(b"\t")
            mode, _kind, oid = info.decode().split(" ")
            path = os.fsdecode(name)
            if path in before or path in after:  # ls-tree names a directory's entries only when asked by name
                changes.append(_Raw("M", path, int(mode, 8), oid))
        return changes

    def _mode_map(self, blob: str) -> dict[str, int]:
        if not blob:
            return {}
        try:
            value = json.loads(self._object("blob", blob) or b"{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def _tree_diff(self, old_tree: str, new_tree: str, prefix: str) -> list[_Raw]:
        if old_tree == new_tree:
            return []
        out = self.git("diff-tree", "-r", "-z", "--no-renames", "--raw", old_tree, new_tree).split(b"\0")
        changes = []
        for i in range(0, len(out) - 1, 2):
            _old_mode, new_mode, _old_id, new_id, status = out[i].decode().lstrip(":").split(" ")
            changes.append(_Raw("M" if status == "T" else status, prefix + os.fsdecode(out[i + 1]), int(new_mode, 8),
                                new_id))
        return changes

    # -- undo ---------------------------------------------------------------------------------------

    def current(self, changes: ChangeSource | None = None) -> Capture:
        """The workspace as it is now (lock held), for undo: from the sandbox's change set since this
        process's last snapshot when it has a complete one, as a snapshot reads it, and then the base
        the next one starts from; else from the full listing. Without it, each of an undo's three
        reads and the next call's snapshot listed the whole tree (some 0.3 s each on the kernel)."""
        since = self._since(changes, "before")
        capture = self.capture(since)
        self._chain(changes, since, False)
        return capture

    def plan_undo(self, session_id: str, number: int, changes: ChangeSource | None = None) -> UndoPlan:
        """What undoing to before checkpoint `number` would change (call with the lock held); `changes`:
        the sandbox's change set (current)."""
        chain = self.chain_locked(session_id)
        befores = {s.number: s for s in chain if s.kind == "before"}
        if number not in befores:
            have = f"{min(befores)} to {max(befores)}" if befores else "none"
            gone = (f"; checkpoints before {min(befores)} were collected to keep the store within its caps "
                    "(checkpoints.max_store_bytes, checkpoints.max_count)") if befores and number < min(befores) else ""
            raise CheckpointError(f"There is no checkpoint {number} in session {session_id} (it has {have}{gone}). "
                                  f"List them with `abhed checkpoints {session_id}`.")
        target = befores[number]
        now = self.current(changes)
        diffs = self.diff(now, target)
        outside = self._outside_changes(chain[chain.index(target):], now)
        # Something not covered (ignored, excluded, too large) where undo would recreate a path: it
        # would have to go without a word.
        deleted = {c.path for c in diffs if c.status == "D"}
        with treeio.Tree(str(self.workspace)) as tree:
            # What cannot be read now (an unreadable file or directory, a FIFO) was not covered: undo
            # neither deletes nor overwrites it, and says so.
            why = {c.path: tree.unreadable(c.path) for c in diffs}
            left = [f"{path} ({reason})" for path, reason in why.items() if reason]
            diffs = [c for c in diffs if not why[c.path]]
            outside |= {c.path for c in diffs if c.status == "A" and _in_the_way(tree, c.path, deleted)}
        touched = {c.path for c in diffs}
        return UndoPlan(target, now, diffs, sorted(touched & outside), left)

    def fix_modes(self, to: Snapshot, paths: list[str]) -> None:
        """The restored `paths`' exact modes are the index's again (those of `to`): after every restore,
        and when an interrupted undo is finished (undo.py), for every path that undo touched."""
        modes = self._mode_map(to.modes_blob)
        current = self._modes()
        # Equivalent mutants, all four: the capture that follows every restore reads each restored file
        # again (renamed into place: a new inode) and sets its mode; this keeps modes.json right until then.
        for path in paths:
            if path in modes:  # pragma: no mutate (see above)
                current["modes"][path] = modes[path]  # pragma: no mutate (see above)
            else:
                current["modes"].pop(path, None)  # pragma: no mutate (see above)
        self._save_modes(current)  # pragma: no mutate (see above)

    def chain_locked(self, session_id: str) -> list[Snapshot]:
        out = self.git("log", "--first-parent", "-z", "--format=%H%n%T%n%B", _ref(session_id), "--", check=False)
        records = [r.strip(b"\n").split(b"\n", 2) for r in out.split(b"\0") if r.strip()]
        roots = self._roots_of([r[1].decode() for r in records])
        snapshots = []
        for commit, root, *body in records:
            meta = _meta(body[0] if body else b"")  # pragma: no mutate (Abhed writes every message: never empty)
            files, repo, modes = roots[root.decode()]
            snapshots.append(Snapshot(commit.decode(), files, str(meta.get("kind", "?")),
                                      int(meta.get("number", 0)), meta, repo, modes))
        snapshots.reverse()
        return snapshots

    def _roots_of(self, roots: list[str]) -> dict[str, tuple[str, str, str]]:
        """Each commit's root tree -> its `files` and `repo` trees and `modes` blob, read in one git call."""
        unique = list(dict.fromkeys(roots))
        if not unique:  # pragma: no mutate (equivalent: git would read nothing and find nothing)
            return {}
        out = self.git("cat-file", "--batch", data="".join(f"{r}\n" for r in unique).encode())
        found, offset = {}, 0
        for root in unique:
            end = out.index(b"\n", offset)
            size = int(out[offset:end].split(b" ")[2])
            body = out[end + 1:end + 1 + size]
            offset = end + 1 + size + 1
            found[root] = (_tree_entry(body, b"files"), _tree_entry(body, b"repo"), _tree_entry(body, b"modes"))
        return found

    def _outside_changes(self, chain: list[Snapshot], now: Capture) -> set[str]:
        """Paths changed while none of the session's calls was running: from an "after" to the next
        "before", and from the last "after" to now."""
        outside: set[str] = set()
        running: set[str] = set()
        previous: Snapshot | None = None
        for snapshot in chain:
            if snapshot.kind == "before":
                if previous is not None and previous.kind == "after" and not running:
                    outside |= {c.path for c in self.diff(previous, snapshot)}
                running.add(str(snapshot.meta.get("call", snapshot.number)))
            else:
                running.discard(str(snapshot.meta.get("call", snapshot.number)))
            previous = snapshot
        if previous is not None and previous.kind == "after" and not running:
            outside |= {c.path for c in self.diff(previous, now)}
        return outside

    def apply(self, plan: UndoPlan) -> None:
        """Make the workspace the plan's target (lock held; the index is the plan's `now`).

        Each path is written or removed through the workspace's descriptors (treeio.Tree): deletions
        first, deepest first, emptied directories with them, then every file and symlink of the
        target, with its exact mode."""
        # Reading stops at the first object a damaged store lacks: look for all of them before any change.
        listing = self.git("rev-list", "--objects", "--missing=print", f"{plan.to.commit}^{{tree}}", f"^{plan.now.tree}")
        missing = seed.missing_elsewhere([line[1:] for line in listing.decode().splitlines() if line.startswith("?")],
                                         self.dir)
        if missing:
            raise CheckpointError(f"Undo stopped before changing anything: the shadow repository {self.git_dir} lacks "
                                  f"{len(missing)} of the objects checkpoint {plan.to.number} is made of (e.g. "
                                  f"{missing[0]}): it was damaged (a disk error, or files removed by hand), so those "
                                  "files cannot be restored from it. Undo to a later checkpoint may still work; "
                                  f"`git --git-dir {self.git_dir} fsck` names what is lost.")
        kept = {c.path for c in plan.changes}
        raw = [c for c in self._raw_diff(plan.now, plan.to) if c.path in kept]
        modes = self._mode_map(plan.to.modes_blob)
        failed: list[str] = []
        try:
            with treeio.Tree(str(self.workspace)) as tree, \
                    seed.reader(self._command(), self._env(), self.timeout_s, self.lock_fds(), self.dir) as objects:
                _remove_all(tree, [c.path for c in raw if c.status == "D"], failed)
                if any(c.path.startswith(f"{repostate.GIT}/") for c in raw):  # the objects its refs name first
                    repostate.RepoState(self.dir, self.git_dir / "objects").restore_objects(tree)
                for done, change in enumerate(sorted((c for c in raw if c.status != "D"), key=lambda c: c.path), 1):
                    mode = change.mode if change.mode == 0o120000 else \
                        modes.get(change.path, 0o755 if change.mode & 0o100 else 0o644)
                    data = objects.blob(change.oid)
                    try:
                        tree.write(change.path, data, mode)
                    except OSError as exc:
                        failed.append(f"{change.path} ({exc.strerror})")
                    journal.pause(f"undo:{done}")
                tree.sync()
        except gitobjects.Missing as exc:
            raise CheckpointError(f"Undo stopped part-way: the shadow repository {self.git_dir} could not give "
                                  f"the object {exc} (it is damaged: `git --git-dir {self.git_dir} fsck` says "
                                  "more). Files it restored before it stopped stay restored.") from None
        except hostproc.Timeout:
            raise CheckpointError(f"Undo stopped part-way: reading the shadow repository {self.git_dir} took longer "
                                  f"than {self.timeout_s:g} s (checkpoints.timeout_s). Files it restored before it "
                                  "stopped stay restored.") from None
        self.fix_modes(plan.to, [c.path for c in raw])
        if failed:
            raise CheckpointError(f"Undo stopped part-way: {len(failed)} path{'s' * (len(failed) != 1)} could not be "
                                  f"restored:\n{listed(failed)}\nSomething not covered by checkpoints stands there "
                                  "(a directory with ignored files, a file over checkpoints.max_file_bytes), or the "
                                  "directory is not writable. The other files are restored.")


ChangeSource = Callable[[], "tuple[Any, bool] | None"]  # sandbox.Sandbox.take_changes: (Changes, quiet) or None


@dataclass
class Since:
    """One snapshot's change set (sandbox.gitguard.Changes) and what the snapshot made of it."""

    changes: Any
    stat_all: bool  # diff-files still lstat's every tracked file (see _since)
    touched: set[str]
    mapped: set[int] = field(default_factory=set)  # inodes mapped shared and writable now: their files are read
    valid: bool = False
    listing: changeset.Listing | None = None  # set when the snapshot was taken from the change set
    new_tops: list[str] = field(default_factory=list)  # left-out entries that appeared (for the survey)
    dirs: set[str] = field(default_factory=set)  # directories whose entries may differ (for the specials)
    census: dict[str, dict[str, Lstat]] | None = None  # the sandbox start's lstat's (seed.Census)


@dataclass
class Later:
    """What this process keeps from its last snapshot of the workspace, for the next (changeset.py)."""

    base: tuple[Any, ...] | None = None  # (change source, its interval number, the index it left, excludes)
    excludes: str = ""  # info/exclude as written at this hold of the lock
    carried: list[str] = field(default_factory=list)  # nested repositories, unlistable directories: git's to name
    listed: tuple[list[str], list[str]] = ([], [])  # their not_covered and skipped lines
    left_out: list[str] = field(default_factory=list)  # files named but not taken: read again next time
    specials: list[str] | None = None
    survey: uncovered.Survey | None = None
    pending: set[str] = field(default_factory=set)  # touched since the last specials and survey
    names: tuple[gitindex.Index, changeset.Names] | None = None
    repo: tuple[str, list[str]] | None = None  # the last repostate capture: its tree, and what it left out
    fallback: str = ""  # why the last snapshot listed everything (tests, profiles)


class _Beside:
    """Part of a snapshot run in a thread beside the rest, so that work outside this process's Python
    (a git child, zlib, SHA-1) runs on the other core; result() waits for it, raising what it raised,
    and runs it here when it was never started."""

    name = "abhed-beside"

    def __init__(self) -> None:
        self._out: Any = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _work(self) -> Any:
        raise NotImplementedError

    def _run(self) -> None:
        try:
            self._out = self._work()
        except BaseException as exc:  # noqa: BLE001 (handed to the caller by result())
            self._error = exc

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def result(self) -> Any:
        if self._thread is None:
            return self._work()
        self.join()
        if self._error is not None:
            raise self._error
        return self._out


class _Early(_Beside):
    """A first snapshot's git listing run in a thread as soon as the seed is in the index, so that git
    walks the tree on one core while this process goes on on the other. Its git child holds the
    store's lock like every other (Shadow.lock_fds). Two of them:

    - Shadow.OTHERS_LISTING (capture): the untracked files the ignore rules let through, started
      before the exclusions take entries out of the seeded index and its trees are written; those
      entries match info/exclude, which the listing reads too, so it leaves them out either way;
    - Shadow.SURVEY_LISTING (prepare): the untracked files the ignore rules leave out, started once
      the seed is done: the capture that runs meanwhile adds to the index only files those rules let
      through (and what it leaves out it hands to the survey itself), so the answer is the one the
      listing would give after it."""

    name = "abhed-survey-listing"

    def __init__(self, shadow: Shadow, command: tuple[str, ...]) -> None:
        super().__init__()
        self._shadow = shadow
        self._command = command
        self._fd = shadow.lock_fds()
        self._errors: list[str] = []  # what git said on its standard error

    def _work(self) -> bytes:
        held = self._thread is not None and self._thread is threading.current_thread()
        if held:  # in the thread: the lock's descriptor for the git child, as the caller's thread has it
            self._shadow._held.fd = self._fd[0] if self._fd else None
        try:
            return self._shadow.git(*self._command, errors=self._errors)
        finally:
            if held:
                self._shadow._held.fd = None

    def result(self, errors: list[str] | None = None) -> bytes:
        """The listing's output (run here when it was not started); its error, raised here. `errors`:
        given, gets the lines git printed on its standard error (Shadow.git)."""
        out = super().result()
        if errors is not None:
            errors += self._errors
        return out


class _RepoBeside(_Beside):
    """A first snapshot's capture of the repository's state (repostate.py), started with the snapshot
    and waited for after the work tree's files are read: its cost is hashing and compressing the
    repository's index as a blob (9 MB on the kernel tree, a tenth of a second), which zlib and
    hashlib do without the GIL, on the other core while the seed's Python runs on this one, and in a
    repository never packed, copying its loose objects (a file each) while the work tree is read. It
    reads through a Tree of its own, like every capture after the sandbox's start (a change to .git
    from then on is in the next snapshot's change set)."""

    name = "abhed-repo-state"

    def __init__(self, shadow: Shadow) -> None:
        super().__init__()
        self._shadow = shadow

    def _work(self) -> tuple[str, list[str]]:
        shadow = self._shadow
        with treeio.Tree(str(shadow.workspace)) as tree:
            return repostate.RepoState(shadow.dir, shadow.git_dir / "objects").capture(tree)


def _below_any(path: str, tops: set[str]) -> bool:
    """Whether a proper ancestor of `path` is one of `tops`."""
    parent = path.rpartition("/")[0]
    while parent:
        if parent in tops:
            return True
        parent = parent.rpartition("/")[0]
    return False


@dataclass
class _First:
    """A first snapshot under way: what it took from the repository, when it started."""

    seeded: seed.Seeded | None  # None: not a first snapshot
    started: float
    taken: int  # index entries taken from the repository

    def done(self, capture: Capture, shadow: Shadow) -> Capture:
        """`capture`, with a note when this first snapshot still had to read many files."""
        if self.seeded is None:
            return capture
        read = len(shadow._read_index(shadow.git_dir / "index").entries) - self.taken
        if read >= Shadow.FIRST_NOTE_FILES:
            why = f" ({self.seeded.why_not})" if self.seeded.why_not else ""
            capture.first = (f"the first checkpoint of this workspace read and hashed {read:,} files in "
                             f"{time.monotonic() - self.started:.0f} s{why}; later ones only read what changed")
        return capture


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to it)
class _Raw:
    status: str  # A, M or D, as Change
    path: str
    mode: int  # the target's git mode (0o100644, 0o100755, 0o120000); 0 for D
    oid: str


def _tree_entry(body: bytes, name: bytes) -> str:
    """The object id of the entry `name` in a raw tree object."""
    offset = 0  # pragma: no mutate (from 1, the first mode reads 0000 and the same names are found)
    while offset < len(body):
        space = body.index(b" ", offset)
        nul = body.index(b"\0", space)
        if body[space + 1:nul] == name:
            return body[nul + 1:nul + 21].hex()
        offset = nul + 21
    return ""


def _remove_all(tree: treeio.Tree, paths: list[str], failed: list[str]) -> None:
    """Remove `paths`, deepest first, then each directory they leave empty (git's checkout does the same)."""
    emptied: set[str] = set()
    for path in sorted(paths, key=lambda p: (-p.count("/"), p)):
        try:
            tree.remove(path)
        except OSError as exc:
            failed.append(f"{path} ({exc.strerror})")
        parent = path.rpartition("/")[0]
        while parent:
            emptied.add(parent)
            parent = parent.rpartition("/")[0]
    for directory in sorted(emptied, key=lambda p: (-p.count("/"), p)):
        if directory == repostate.GIT or directory.startswith(f"{repostate.GIT}/"):
            continue  # git wants its own directories (refs/, objects/...) even when empty
        try:
            tree.remove(directory)
        except OSError:
            pass  # not empty: it holds something else


def _in_the_way(tree: treeio.Tree, path: str, deleted: set[str]) -> bool:
    """Whether something stands where undo would recreate `path`: the path itself (a directory only when
    it holds something the plan does not delete), or a file (not one the plan deletes) where one of its
    directories must go."""
    parent, _, name = path.rpartition("/")
    dirfd = tree.dir(parent)
    if dirfd is not None:
        below = tree.dir(path)
        if below is not None:
            return not _only(below, path, deleted)
        return treeio.exists(dirfd, name)
    while parent:  # up to the nearest that exists: a directory is no obstacle, anything else is
        above, _, name = parent.rpartition("/")
        dirfd = tree.dir(above)
        if dirfd is not None:
            return treeio.exists(dirfd, name) and parent not in deleted
        parent = above
    return False  # pragma: no cover (the root always opens)


def _only(dirfd: int, path: str, deleted: set[str]) -> bool:
    """Whether everything below the directory `path` (open as `dirfd`) is a path in `deleted`, or a directory."""
    for top, _dirs, files, _fd in os.fwalk(".", dir_fd=dirfd):
        prefix = path if top == "." else f"{path}/{top[2:]}"
        if any(f"{prefix}/{name}" not in deleted for name in files):
            return False
    return True


def _last(meta: dict[str, Any]) -> int:
    """The highest number a session had when this snapshot was taken: its `last`. An "after" may be
    the tip while a later-numbered call still runs (subagents), hence not its `number`."""
    return int(meta.get("last", meta.get("number", 0)))


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _escaped(path: str) -> str:
    """A literal path as a gitignore pattern: its special characters escaped."""
    return "".join("\\" + c if c in "\\*?[]!# " else c for c in path)


def _ref(session_id: str) -> str:
    if not _SESSION_ID.fullmatch(session_id):  # a name git would take as a ref, and a file name of ours
        raise CheckpointError(f"a session id such as {session_id!r} cannot name a checkpoint chain: use letters, "
                              "digits, '.', '_' and '-' only, not first.")
    return f"refs/abhed/{session_id}"


def _read_ref(git_dir: Path, ref: str) -> str:
    """The commit a ref names ("" none): its own file, else its line in packed-refs."""
    try:
        return (git_dir / ref).read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        pass
    try:
        packed = (git_dir / "packed-refs").read_text()
    except FileNotFoundError:
        return ""
    for line in packed.splitlines():
        if line.endswith(f" {ref}"):
            return line.split(" ", 1)[0]
    return ""


def _meta(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _write_if_changed(path: Path, text: str) -> None:
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    replace_file(path, text.encode(), mode=0o600)


def listed(paths: list[str], limit: int = MAX_LISTED) -> str:
    """Paths one a line, at most `limit`, then how many more."""
    shown = "\n".join(f"  {p}" for p in paths[:limit])
    more = f"\n  ... and {len(paths) - limit} more" if len(paths) > limit else ""
    return shown + more


Confirm = Callable[[str], bool]


class Checkpoints:
    """Checkpoints of one workspace for the sessions that work in it: what dispatch and the CLI use."""

    def __init__(self, shadow: Shadow) -> None:
        self.shadow = shadow

    @classmethod
    def create(cls, home: Path, workspace: Path, enabled: bool, exclude: list[str], max_file_bytes: int,
               **caps: Any) -> Checkpoints | None:
        """None when checkpoints are off (by the operator, or because there is no git binary).
        `caps`: Shadow's timeout_s, max_store_bytes, max_count, disk_reserve_bytes."""
        git = available() if enabled else None
        if git is None:
            return None
        return cls(Shadow(home, workspace, git=git, exclude=tuple(exclude), max_file_bytes=max_file_bytes, **caps))

    def session_started(self, when: float) -> None:
        """The session began at `when` (seconds): a repository index written since is not trusted by a
        first snapshot (seed.py), even one taken in a later process of the session (`abhed tool`)."""
        self.shadow.started_ns = min(self.shadow.started_ns, int(when * 1_000_000_000))

    def before(self, session_id: str, call: str | None, tool: str, agent_id: str,
               changes: ChangeSource | None = None, report: hashing.Report | None = None) -> tuple[Snapshot, Capture]:
        """Snapshot the workspace before the call `call` (an ActionEvent id) of `tool` runs. A bash call
        may change anything: what checkpoints leave out is surveyed too (write and edit name their file).
        `changes`: the sandbox's change set (sandbox.Sandbox.take_changes), when it has one.
        `report`: how far the snapshot has got, while it reads many files (hashing.py)."""
        return self.shadow.snapshot(session_id, "before", {"call": call, "tool": tool, "agent_id": agent_id},
                                    watch=tool == "bash", changes=changes, report=report)

    def prepare(self, changes: ChangeSource | None = None, report: hashing.Report | None = None) -> Capture:
        """The first snapshot's work, done before a call needs it (Shadow.prepare)."""
        return self.shadow.prepare(changes, report)

    def after(self, session_id: str, before: Snapshot, changes: ChangeSource | None = None,
              report: hashing.Report | None = None) -> Snapshot:
        """Snapshot the workspace when the call `before` was taken for has ended; its meta's `uncovered`
        says what the call changed that the checkpoint does not cover."""
        snapshot, _ = self.shadow.snapshot(session_id, "after", {"call": before.meta.get("call"),
                                                                  "tool": before.meta.get("tool"),
                                                                  "number": before.number},
                                           watch=before.meta.get("tool") == "bash", changes=changes, report=report)
        return snapshot

    def close(self) -> None:
        """This process is done with the workspace's checkpoints (Shadow.close). A failure to write
        loses nothing but time: the next snapshot reads again what changed since the file was written."""
        try:
            self.shadow.close()
        except (OSError, CheckpointError):
            pass

    def listing(self, session_id: str) -> list[Entry]:
        """The session's checkpoints, oldest first, each with what its call changed."""
        chain = self.shadow.chain(session_id)
        afters = {s.meta.get("call"): s for s in chain if s.kind == "after"}
        entries = []
        for snapshot in chain:
            if snapshot.kind != "before":
                continue
            after = afters.get(snapshot.meta.get("call"))
            changed = self.shadow.diff(snapshot, after) if after else None
            entries.append(Entry(snapshot, changed, list(after.meta.get("uncovered", [])) if after else []))
        return entries


def from_settings(settings: Any, workspace: Path) -> Checkpoints | None:
    """The checkpoints of `workspace` under the operator's settings (config.Settings). Without git
    they are off, unless the site's policy locks them on: then nothing runs (CheckpointError), since
    the policy promises that every change can be undone."""
    c = settings.checkpoints
    found = Checkpoints.create(settings.home, workspace, c.enabled, c.exclude, c.max_file_bytes, timeout_s=c.timeout_s,
                               max_store_bytes=c.max_store_bytes, max_count=c.max_count,
                               disk_reserve_bytes=settings.sandbox.disk_reserve_bytes)
    site = settings.site_policy
    if found is None and c.enabled and site is not None and site.locks("checkpoints.enabled"):
        raise CheckpointError(
            f"The site policy {site.path} requires checkpoints (checkpoints.enabled = true), and they are taken "
            "with git, which is not installed here (no `git` on PATH): nothing was run. Install git (Debian, "
            "Ubuntu: apt-get install git), or ask the site's operator.")
    return found


@dataclass
class Entry:
    """One checkpoint as `abhed checkpoints` lists it: `changed` None when its call never ended."""

    snapshot: Snapshot
    changed: list[Change] | None
    uncovered: list[str] = field(default_factory=list)  # what the call changed that undo cannot take back
