"""Checkpoints: the workspace's state before every call that may change it, and undo (issue 16).

A shadow git repository outside the workspace, in the session store
($ABHED_HOME/checkpoints/<key of the workspace>/git), holds snapshots of the workspace: its own
GIT_DIR, index and refs, with the workspace as work tree. The project's own `.git` (its index, refs,
stash, config, hooks) is never read or written; git itself skips every entry named `.git`.

Why git, and only plumbing: `diff-files` and `ls-files -o` find what changed since the last
snapshot from the index's stat cache, so a snapshot of an unchanged tree costs one directory walk and hashes
nothing; objects are content-addressed, so every snapshot of every session of a workspace shares
one object store. Without a `git` binary checkpoints are off and `abhed doctor` says so (see
available()).

The git here runs on the host over a workspace the model controls, so it is given nothing from
there that could run a command or change bytes: no system or global config, no hooks
(core.hooksPath=/dev/null), no fsmonitor, and `$GIT_DIR/info/attributes` (which outranks every
`.gitattributes`) unsets filter, text, eol, ident and working-tree-encoding for every path, so a
workspace `.gitattributes` naming a filter driver runs nothing and content is stored byte for byte.

What is covered: files git would add with the project's `.gitignore` files and `.git/info/exclude`,
minus the operator's exclusions (checkpoints.exclude), minus files over checkpoints.max_file_bytes
and nested repositories, which every snapshot lists as not covered. git keeps only the executable
bit of a file's mode; the exact permission bits of files that differ from 0644/0755 are kept in a
`modes` blob beside the tree, so undo restores modes exactly.

Each session's snapshots form a chain of commits (ref refs/abhed/<session>): a "before" snapshot,
numbered from 1 in call order, and an "after" snapshot when the call ends. Changes between one
call's "after" and the next "before", or since the last "after", were made by someone else (the
human, another session): undo never overwrites those silently.

One process at a time works on a shadow repository (flock on its `lock`, which also serialises the
threads of subagents); a kill -9 mid-snapshot leaves at most git's own `*.lock` files, removed by
the next holder of the lock, and objects written whole (git renames them into place).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import Any

from abhed.files.atomic import replace_file
from abhed.files.beneath import open_beneath

MAX_LISTED = 50  # paths named in one message or event; the rest are counted
ATTRIBUTES = "* -text -filter -ident -eol -working-tree-encoding -diff -merge\n"
# Speed, and settings the commands run here never consult (info/attributes unsets every attribute that changes
# bytes; -z output; --no-renames; no external diff, transport or commit porcelain): set in case one ever does.
_UNCONSULTED = (  # pragma: no mutate (equivalent: see above)
    "core.attributesFile=/dev/null", "core.autocrlf=false", "core.safecrlf=false", "gc.auto=0", "index.threads=true",
    "core.preloadIndex=true", "protocol.allow=never", "diff.external=", "diff.renames=false", "core.quotePath=false")
# Passed on every command line, so a stale or damaged config file in the shadow repository cannot weaken them.
SAFE_CONFIG = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "core.excludesFile=/dev/null", "core.symlinks=true",
               "core.fileMode=true", "core.ignoreCase=false", "core.bare=false", "core.splitIndex=false",
               "core.sparseCheckout=false") + _UNCONSULTED
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


@dataclass
class Capture:
    """The workspace's state now: its tree, its exact modes, and what is not in it."""

    tree: str
    modes_blob: str
    not_covered: list[str] = field(default_factory=list)  # "path (why)"


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


class Shadow:
    """The shadow repository of one workspace."""

    def __init__(self, home: Path, workspace: Path, *, git: str = "git", exclude: tuple[str, ...] = (),
                 max_file_bytes: int = 50 * 1024 * 1024) -> None:
        self.workspace = workspace
        key = sha256(os.fsencode(str(workspace))).hexdigest()[:24]
        self.dir = home / "checkpoints" / key
        self.git_dir = self.dir / "git"
        self.git_binary = git
        self.exclude = exclude
        self.max_file_bytes = max_file_bytes
        self._roots: dict[tuple[str, str], str] = {}  # (files tree, modes blob) -> the commit's root tree

    # -- running git ----------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(self.dir), "XDG_CONFIG_HOME": str(self.dir),
               "LANG": "C", "LC_ALL": "C", "GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.workspace),
               "GIT_INDEX_FILE": str(self.git_dir / "index"), "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
               "GIT_NO_REPLACE_OBJECTS": "1", "GIT_NO_LAZY_FETCH": "1"}
        env.update(AUTHOR)
        return env

    def git(self, *args: str, data: bytes | None = None, check: bool = True) -> bytes:
        command = [self.git_binary]
        for item in SAFE_CONFIG:
            command += ["-c", item]
        env = self._env()
        if args[0] == "init":  # creating the repository itself: it has no work tree yet
            del env["GIT_WORK_TREE"], env["GIT_DIR"], env["GIT_INDEX_FILE"]
            command = [self.git_binary]
        try:
            done = subprocess.run(command + list(args), input=data, capture_output=True, env=env,
                                  cwd=self.workspace, check=False)
        except OSError as exc:
            raise CheckpointError(f"cannot run git ({self.git_binary}): {exc.strerror or exc}. Install git, or set "
                                  "checkpoints.enabled = false to work without checkpoints.") from None
        if check and done.returncode != 0:
            error = done.stderr.decode("utf-8", "replace").strip()[-800:]  # pragma: no mutate (any short bound)
            raise CheckpointError(f"git {args[0]} failed in the shadow repository {self.git_dir} (exit "
                                  f"{done.returncode}): {error}")
        return done.stdout

    # -- setting up, and the lock -------------------------------------------------------------------

    def _ensure(self) -> None:
        if not (self.git_dir / "HEAD").is_file():
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.git("init", "--quiet", "--bare", str(self.git_dir))
            (self.dir / "workspace").write_text(f"{self.workspace}\n")
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        _write_if_changed(info / "attributes", ATTRIBUTES)
        _write_if_changed(info / "exclude", self._excludes())

    def _excludes(self) -> str:
        """The operator's exclusions, then the project's own .git/info/exclude (its .gitignore files git
        reads itself, from the work tree)."""
        lines = ["# Abhed's own temporary files (atomic.py): half-written, renamed away at once",
                 ".*.abhed-tmp-*", "# checkpoints.exclude (the operator's)", *self.exclude]
        home = self.dir.parent.parent
        if home.is_relative_to(self.workspace) and home != self.workspace:
            # the session store inside the workspace: snapshots must not take in the snapshots
            lines += ["# the session store itself", "/" + _escaped(str(home.relative_to(self.workspace))) + "/"]
        project = self.workspace / ".git" / "info" / "exclude"
        try:
            if project.is_file() and not project.is_symlink():
                lines += ["# the project's .git/info/exclude", project.read_text("utf-8", "replace")]
        except OSError:
            pass
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
            self._ensure()
            self._clear_stale_locks()
            yield
        finally:
            os.close(fd)

    def _clear_stale_locks(self) -> None:
        """git's own lock files: only a holder of our lock writes here, so any left is from a killed one."""
        stale = list(self.git_dir.glob("*.lock")) + list((self.git_dir / "refs").rglob("*.lock"))
        for path in stale:
            path.unlink(missing_ok=True)

    # -- taking a snapshot ----------------------------------------------------------------------

    def capture(self) -> Capture:
        """Bring the index up to the workspace and write its tree (call with the lock held).

        A file can vanish between the listing and the update (a command still running, another
        session): then the whole capture is tried again, a few times, before giving up."""
        for attempt in range(3):  # pragma: no mutate (equivalent: the third failure raises below)
            try:
                return self._capture()
            except CheckpointError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _capture(self) -> Capture:
        # Tracked files whose stat differs from the index (diff-files reads them in parallel, far
        # faster than ls-files -m), then untracked ones the ignore rules let through.
        listed = self.git("diff-files", "-z", "--name-only", "--no-renames").split(b"\0")
        listed += self.git("ls-files", "-z", "-o", "--exclude-standard").split(b"\0")
        paths: set[str] = set()
        not_covered: list[str] = []
        for entry in listed:
            if not entry:
                continue
            path = os.fsdecode(entry)
            if path.endswith("/"):
                not_covered.append(f"{path} (a nested git repository: commit or copy it yourself)")
            else:
                paths.add(path)
        modes = self._modes()
        update, drop = [], []
        for path in sorted(paths):
            try:
                st = os.lstat(self.workspace / path)
            except (FileNotFoundError, NotADirectoryError):
                modes["modes"].pop(path, None)
                update.append(path)  # --remove drops it from the index
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size > self.max_file_bytes:
                not_covered.append(f"{path} ({st.st_size:,} bytes, over checkpoints.max_file_bytes)")
                drop.append(path)
                modes["modes"].pop(path, None)
                continue
            update.append(path)
            perm = stat.S_IMODE(st.st_mode)
            if stat.S_ISREG(st.st_mode) and perm != (0o755 if perm & 0o100 else 0o644):
                modes["modes"][path] = perm
            else:
                modes["modes"].pop(path, None)
        blob = self._save_modes(modes)  # before the index: a kill between them leaves paths to look at again
        if update:
            self.git("update-index", "--add", "--remove", "--replace", "-z", "--stdin",
                     data=b"\0".join(os.fsencode(p) for p in update) + b"\0")
        if drop:
            self.git("update-index", "--force-remove", "-z", "--stdin", data=b"\0".join(map(os.fsencode, drop)) + b"\0")
        tree = self.git("write-tree").decode().strip()
        return Capture(tree, blob, not_covered)

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
        blob = self.git("hash-object", "-w", "--stdin", data=data).decode().strip()
        replace_file(self.dir / "modes.json", json.dumps({"blob": blob, "data": sha256(data).hexdigest(),
                                                          "modes": modes["modes"]}).encode(), mode=0o600)
        return blob

    def commit(self, session_id: str, capture: Capture, meta: dict[str, Any], parent: str | None = None) -> Snapshot:
        """Add `capture` to the session's chain (call with the lock held); `parent`: its tip, if known."""
        ref = _ref(session_id)
        if parent is None:  # pragma: no mutate (equivalent: a caller passes the tip, saving this git call)
            parent = self.tip(session_id)[0]
        key = (capture.tree, capture.modes_blob)
        if key not in self._roots:  # pragma: no mutate (equivalent: a cache; an unchanged workspace has the same root)
            self._roots[key] = self.git("mktree", data=f"040000 tree {capture.tree}\tfiles\n100644 blob "
                                        f"{capture.modes_blob}\tmodes\n".encode()).decode().strip()
        message = json.dumps(meta, sort_keys=True).encode()
        commit = self.git("commit-tree", self._roots[key], *(["-p", parent] if parent else []),
                          data=message).decode().strip()
        # The old value guards against a writer the lock already excludes ("" would mean: must not exist yet).
        self.git("update-ref", ref, commit, *([parent] if parent else []))  # pragma: no mutate (equivalent: see above)
        return Snapshot(commit, capture.tree, meta["kind"], meta["number"], meta)

    def snapshot(self, session_id: str, kind: str, meta: dict[str, Any]) -> tuple[Snapshot, Capture]:
        """Capture and commit in one hold of the lock. A "before" gets the session's next number."""
        with self.locked():
            capture = self.capture()
            parent, tip = self.tip(session_id)
            last = _last(tip)
            number = last + 1 if kind == "before" else meta["number"]
            meta = {**meta, "kind": kind, "number": number, "last": max(last, number), "at": stamp()}
            return self.commit(session_id, capture, meta, parent), capture

    def tip(self, session_id: str) -> tuple[str, dict[str, Any]]:
        """The session's newest snapshot and what its message says; ("", {}) before the first."""
        out = self.git("cat-file", "--batch", data=_ref(session_id).encode() + b"\n")
        head, _, body = out.partition(b"\n")
        if head.endswith(b" missing"):
            return "", {}
        return head.split(b" ")[0].decode(), _meta(body.split(b"\n\n", 1)[1] if b"\n\n" in body else b"")

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

    def _files(self, commit: str) -> str:
        return self.git("rev-parse", f"{commit}:files").decode().strip()

    def diff(self, old_tree: str, new_tree: str) -> list[Change]:
        """What changed from `old_tree` to `new_tree`, path by path."""
        if old_tree == new_tree:
            return []
        out = self.git("diff-tree", "-r", "-z", "--no-renames", "--name-status", old_tree, new_tree).split(b"\0")
        return [Change(out[i].decode(), os.fsdecode(out[i + 1])) for i in range(0, len(out) - 1, 2)]

    # -- undo ---------------------------------------------------------------------------------------

    def plan_undo(self, session_id: str, number: int) -> UndoPlan:
        """What undoing to before checkpoint `number` would change (call with the lock held)."""
        chain = self.chain_locked(session_id)
        befores = {s.number: s for s in chain if s.kind == "before"}
        if number not in befores:
            have = f"1 to {max(befores)}" if befores else "none"
            raise CheckpointError(f"There is no checkpoint {number} in session {session_id} (it has {have}). List "
                                  f"them with `abhed checkpoints {session_id}`.")
        target = befores[number]
        now = self.capture()
        changes = self.diff(now.tree, target.tree)
        outside = self._outside_changes(chain[chain.index(target):], now)
        # Something not covered (ignored, excluded, too large) where undo would recreate a path: git
        # would delete it without a word.
        deleted = {c.path for c in changes if c.status == "D"}
        outside |= {c.path for c in changes if c.status == "A" and self._in_the_way(c.path, deleted)}
        touched = {c.path for c in changes}
        return UndoPlan(target, now, changes, sorted(touched & outside))

    def _in_the_way(self, path: str, deleted: set[str]) -> bool:
        """Whether something stands where undo would recreate `path`: the path itself, or a file (not one
        the plan deletes) where one of its directories must go."""
        if os.path.lexists(self.workspace / path):
            return True
        parent = os.path.dirname(path)
        while parent:  # up to the nearest that exists: a directory is no obstacle, anything else is
            try:
                st = os.lstat(self.workspace / parent)
            except OSError:
                parent = os.path.dirname(parent)
                continue
            return not stat.S_ISDIR(st.st_mode) and parent not in deleted
        return False

    def chain_locked(self, session_id: str) -> list[Snapshot]:
        out = self.git("log", "--first-parent", "-z", "--format=%H%n%B", _ref(session_id), "--", check=False)
        snapshots = []
        for record in out.split(b"\0"):
            if not record.strip():
                continue
            head, _, body = record.strip(b"\n").partition(b"\n")
            meta = _meta(body)
            commit = head.decode()
            snapshots.append(Snapshot(commit, self._files(commit), str(meta.get("kind", "?")),
                                      int(meta.get("number", 0)), meta))
        snapshots.reverse()
        return snapshots

    def _outside_changes(self, chain: list[Snapshot], now: Capture) -> set[str]:
        """Paths changed while none of the session's calls was running: from an "after" to the next
        "before", and from the last "after" to now."""
        outside: set[str] = set()
        running: set[str] = set()
        previous: Snapshot | None = None
        for snapshot in chain:
            if snapshot.kind == "before":
                if previous is not None and previous.kind == "after" and not running:
                    outside |= {c.path for c in self.diff(previous.tree, snapshot.tree)}
                running.add(str(snapshot.meta.get("call", snapshot.number)))
            else:
                running.discard(str(snapshot.meta.get("call", snapshot.number)))
            previous = snapshot
        if previous is not None and previous.kind == "after" and not running:
            outside |= {c.path for c in self.diff(previous.tree, now.tree)}
        return outside

    def apply(self, plan: UndoPlan) -> None:
        """Make the workspace the plan's target (lock held; the index is the plan's `now`)."""
        # read-tree writes file after file: an object missing from a damaged store would stop it half-way.
        listing = self.git("rev-list", "--objects", "--missing=print", f"{plan.to.commit}^{{tree}}", f"^{plan.now.tree}")
        missing = [line[1:] for line in listing.decode().splitlines() if line.startswith("?")]
        if missing:
            raise CheckpointError(f"Undo stopped before changing anything: the shadow repository {self.git_dir} lacks "
                                  f"{len(missing)} of the objects checkpoint {plan.to.number} is made of (e.g. "
                                  f"{missing[0]}): it was damaged (a disk error, or files removed by hand), so those "
                                  "files cannot be restored from it. Undo to a later checkpoint may still work; "
                                  f"`git --git-dir {self.git_dir} fsck` names what is lost.")
        try:
            # --reset: the index was just brought up to the workspace (plan.now), but entries git calls
            # racily clean would fail -m's up-to-date check though their content is what `now` holds.
            self.git("read-tree", "--reset", "-u", plan.now.tree, plan.to.tree)
        except CheckpointError as exc:
            raise CheckpointError(f"Undo stopped part-way: {exc}. Files it restored before it stopped stay "
                                  "restored.") from None
        modes = json.loads(self.git("cat-file", "blob", f"{plan.to.commit}:modes") or b"{}")
        for change in plan.changes:
            if change.status == "D":  # pragma: no mutate (equivalent: a deleted path fails open_beneath below)
                continue
            try:
                fd = open_beneath(self.workspace, self.workspace / change.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue  # a symlink or special file: git wrote it as recorded
            try:
                mode = os.fstat(fd).st_mode
                # Not in `modes`: the file was 0644 or 0755, but git wrote it with the umask's bits (0664 under
                # the common umask 002).
                wanted = modes.get(change.path, 0o755 if mode & 0o100 else 0o644)
                if stat.S_ISREG(mode) and stat.S_IMODE(mode) != wanted:
                    os.fchmod(fd, wanted)
            finally:
                os.close(fd)
        current = self._modes()
        for change in plan.changes:  # the restored files' exact modes are the index's again
            if change.path in modes:
                current["modes"][change.path] = modes[change.path]
            else:
                current["modes"].pop(change.path, None)
        self._save_modes(current)


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
    return f"refs/abhed/{session_id}"


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
    def create(cls, home: Path, workspace: Path, enabled: bool, exclude: list[str],
               max_file_bytes: int) -> Checkpoints | None:
        """None when checkpoints are off (by the operator, or because there is no git binary)."""
        git = available() if enabled else None
        if git is None:
            return None
        return cls(Shadow(home, workspace, git=git, exclude=tuple(exclude), max_file_bytes=max_file_bytes))

    def before(self, session_id: str, call: str | None, tool: str, agent_id: str) -> tuple[Snapshot, Capture]:
        """Snapshot the workspace before the call `call` (an ActionEvent id) of `tool` runs."""
        return self.shadow.snapshot(session_id, "before", {"call": call, "tool": tool, "agent_id": agent_id})

    def after(self, session_id: str, before: Snapshot) -> Snapshot:
        """Snapshot the workspace when the call `before` was taken for has ended."""
        snapshot, _ = self.shadow.snapshot(session_id, "after", {"call": before.meta.get("call"),
                                                                  "tool": before.meta.get("tool"),
                                                                  "number": before.number})
        return snapshot

    def listing(self, session_id: str) -> list[Entry]:
        """The session's checkpoints, oldest first, each with what its call changed."""
        chain = self.shadow.chain(session_id)
        afters = {s.meta.get("call"): s for s in chain if s.kind == "after"}
        entries = []
        for snapshot in chain:
            if snapshot.kind != "before":
                continue
            after = afters.get(snapshot.meta.get("call"))
            changed = self.shadow.diff(snapshot.tree, after.tree) if after else None
            entries.append(Entry(snapshot, changed))
        return entries


def from_settings(settings: Any, workspace: Path) -> Checkpoints | None:
    """The checkpoints of `workspace` under the operator's settings (config.Settings)."""
    c = settings.checkpoints
    return Checkpoints.create(settings.home, workspace, c.enabled, c.exclude, c.max_file_bytes)


@dataclass
class Entry:
    """One checkpoint as `abhed checkpoints` lists it: `changed` None when its call never ended."""

    snapshot: Snapshot
    changed: list[Change] | None
