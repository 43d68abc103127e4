"""The workspace repository's own state in every checkpoint, so that undo puts it back byte for byte.

A sandboxed command changes more than the work tree: `git reset --hard`, `commit --amend`, `branch
-f`, `update-ref`, `stash drop`, `reflog expire` rewrite what `.git` holds -- HEAD, every ref
(branches, tags, stash, notes, remotes), packed-refs, the reflogs, the index -- and `git prune`
deletes the objects only those held. So each checkpoint also records:

- every file of the workspace's `.git` but its objects and the entries a sandboxed command cannot
  change anyway (config, hooks/, info/, modules/: read-only in the sandbox, and never rewritten by
  undo), as the `repo` tree of the snapshot; read through descriptors beneath the workspace, like
  the work tree, and only when their stat changed since the last snapshot (a walk of a few hundred
  entries);
- every loose object of `.git/objects`, copied once into the store's `repo-objects/` (the file
  as it is: a loose object is the same bytes wherever it lies), after checking that its content
  hashes to its name. Loose objects are what `git prune` deletes; packed ones cannot go: the
  sandbox keeps `.git/objects/pack/` read-only (sandbox.protect), so `git gc` and `repack` cannot
  replace or delete a pack (they fail, and say so), and a pack outlives every command.

Undo writes the recorded files back through the same descriptors, removes the ones that did not
exist then, and first puts back every copied object the repository has lost.

`repo-objects/` is the store's own directory, not the shadow repository's object store: git's
prune there would delete the objects (nothing of the shadow's reaches them) or fail on the
project's history it does not hold. It is never collected; it holds what the session's git
commands wrote, which is small beside the work tree.
"""

from __future__ import annotations

import json
import os
import stat
import zlib
from dataclasses import dataclass, field
from hashlib import sha1
from pathlib import Path

from abhed.session import gitobjects, treeio

GIT = ".git"
# Entries of .git never recorded: the object store (packs stay, loose objects are copied apart),
# what the sandbox keeps read-only (undo never writes there), and large caches git rebuilds.
SKIP = frozenset({"objects", "hooks", "info", "config", "config.worktree", "modules", "commondir", "lfs",
                  "fsmonitor--daemon.ipc"})
OBJECTS_INFO = ("alternates", "http-alternates")  # objects/info files that change what git finds
MAX_FILE = 256 * 1024 * 1024  # a state file larger than this is left out and named (an index of a huge tree fits)
HEX = frozenset("0123456789abcdef")


@dataclass
class Seen:
    """What the last capture saw, kept between snapshots (repo.json in the store)."""

    files: dict[str, list] = field(default_factory=dict)  # rel -> [ino, size, mtime_ns, ctime_ns, mode, oid]
    fans: dict[str, list] = field(default_factory=dict)  # objects/xx -> [ino, mtime_ns, ctime_ns]
    tree: str = ""


class RepoState:
    """The `.git` side of one workspace's checkpoints (its store directory `store`)."""

    def __init__(self, store: Path, objects: Path) -> None:
        self.store = store
        self.objects = objects  # the shadow repository's object directory (for blobs and trees)
        self.copies = store / "repo-objects"

    # -- capture ------------------------------------------------------------------------------------

    def capture(self, tree: treeio.Tree, max_bytes: int = MAX_FILE) -> tuple[str, list[str]]:
        """The `repo` tree id ("" when the workspace has no .git directory) and what was left out."""
        try:
            gitfd = tree.dir(GIT)
        except OSError as exc:  # this user may not open it: named, and undo leaves it alone (treeio.unreadable)
            return "", [f"{GIT}/ (a directory that cannot be read: {exc.strerror}; the repository's state is not covered)"]
        if gitfd is None:
            return "", []
        seen = self._load()
        fans = dict(seen.fans)
        files, not_covered = self._walk(tree, gitfd, seen, max_bytes)
        self._copy_loose(gitfd, seen)
        if files == seen.files and seen.tree and fans == seen.fans:
            return seen.tree, not_covered  # nothing changed: nothing to write
        if files != seen.files or not seen.tree:
            seen.tree = _write_trees(self.objects, {rel: (v[4], v[5]) for rel, v in files.items()})
        seen.files = files
        self._save(seen)
        return seen.tree, not_covered

    def _walk(self, tree: treeio.Tree, gitfd: int, seen: Seen, max_bytes: int) -> tuple[dict[str, list], list[str]]:
        files: dict[str, list] = {}
        not_covered: list[str] = []
        stack: list[tuple[int, str, bool]] = [(os.dup(gitfd), "", True)]
        while stack:
            fd, rel, top = stack.pop()
            try:
                try:
                    with os.scandir(fd) as entries:
                        listed = list(entries)
                except OSError as exc:  # opened, but not listable (mode 0300): skipped and named
                    not_covered.append(f"{GIT}/{rel} (cannot be read: {exc.strerror})")
                    continue
                for entry in listed:
                    name = f"{rel}{entry.name}"
                    if top and entry.name in SKIP:
                        if entry.name == "objects":
                            self._objects_info(tree, name, files, seen, max_bytes)
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue  # gone since the listing
                    if stat.S_ISDIR(st.st_mode):
                        try:
                            stack.append((os.open(entry.name, treeio.DIR_FLAGS, dir_fd=fd), f"{name}/", False))
                        except OSError:
                            not_covered.append(f"{GIT}/{name}/ (cannot be read)")
                        continue
                    self._file(tree, name, st, files, seen, not_covered, max_bytes)
            finally:
                os.close(fd)
        return files, not_covered

    def _objects_info(self, tree: treeio.Tree, objects: str, files: dict[str, list], seen: Seen,
                      max_bytes: int) -> None:
        info = tree.dir(f"{GIT}/{objects}/info")
        if info is None:
            return
        for name in OBJECTS_INFO:
            try:
                st = os.stat(name, dir_fd=info, follow_symlinks=False)
            except OSError:
                continue
            self._file(tree, f"{objects}/info/{name}", st, files, seen, [], max_bytes)

    def _file(self, tree: treeio.Tree, rel: str, st: os.stat_result, files: dict[str, list], seen: Seen,
              not_covered: list[str], max_bytes: int) -> None:
        key = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        old = seen.files.get(rel)
        if old is not None and old[:4] == key:
            files[rel] = old
            return
        got = tree.read(f"{GIT}/{rel}", max_bytes)
        if isinstance(got, treeio.Skipped):
            not_covered.append(f"{GIT}/{rel} ({got.why})")
            return
        if got is None:
            return  # gone since it was listed
        mode = 0o120000 if stat.S_ISLNK(got.st.st_mode) else (0o100755 if got.st.st_mode & 0o100 else 0o100644)
        oid = gitobjects.write_blob(self.objects, got.data).hex()
        # A file written while it was read is kept as read, and read again next time (no stat to trust).
        files[rel] = [*([got.st.st_ino, got.st.st_size, got.st.st_mtime_ns, got.st.st_ctime_ns] if got.settled
                        else [0, -1, 0, 0]), mode, oid]

    def _copy_loose(self, gitfd: int, seen: Seen) -> None:
        """Copy each loose object not copied yet; only object directories whose listing changed are read."""
        try:
            objects = os.open("objects", treeio.DIR_FLAGS, dir_fd=gitfd)
        except OSError:
            return
        try:
            with os.scandir(objects) as entries:
                fans = [e for e in entries if len(e.name) == 2 and set(e.name) <= HEX]
            for fan in fans:
                try:
                    st = fan.stat(follow_symlinks=False)
                except OSError:
                    continue  # gone since the listing (a `git gc` packing loose objects, say)
                if not stat.S_ISDIR(st.st_mode):
                    continue
                key = [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
                if seen.fans.get(fan.name) == key:
                    continue
                self._copy_fan(objects, fan.name)
                seen.fans[fan.name] = key
        finally:
            os.close(objects)

    def _copy_fan(self, objects: int, fan: str) -> None:
        try:
            fd = os.open(fan, treeio.DIR_FLAGS, dir_fd=objects)
        except OSError:
            return
        try:
            with os.scandir(fd) as entries:
                names = [e.name for e in entries if len(e.name) == 38 and set(e.name) <= HEX]
            for name in names:
                target = self.copies / fan / name
                if target.exists():
                    continue
                data = _read_object(fd, name, MAX_FILE)
                if data is not None and _names(data) == fan + name:
                    gitobjects.write_file(target, data)
        finally:
            os.close(fd)

    # -- restore ------------------------------------------------------------------------------------

    def restore_objects(self, tree: treeio.Tree) -> int:
        """Put back every copied loose object the repository lacks; how many."""
        if not self.copies.is_dir() or tree.dir(GIT) is None:
            return 0
        restored = 0
        for fan in sorted(p for p in self.copies.iterdir() if p.is_dir()):
            fandir = None
            for copy in sorted(fan.iterdir()):
                rel = f"{GIT}/objects/{fan.name}/{copy.name}"
                if fandir is None:
                    fandir = tree.dir(f"{GIT}/objects/{fan.name}")
                if fandir is not None and treeio.exists(fandir, copy.name):
                    continue
                tree.write(rel, copy.read_bytes(), 0o444)
                fandir = tree.dir(f"{GIT}/objects/{fan.name}")
                restored += 1
        return restored

    # -- keeping what was seen ----------------------------------------------------------------------

    def _load(self) -> Seen:
        try:
            value = json.loads((self.store / "repo.json").read_bytes())
            return Seen(dict(value["files"]), dict(value["fans"]), str(value["tree"]))
        except (OSError, ValueError, KeyError, TypeError):
            return Seen()

    def _save(self, seen: Seen) -> None:
        gitobjects.write_file(self.store / "repo.json",
                              json.dumps({"files": seen.files, "fans": seen.fans, "tree": seen.tree}).encode())


def _read_object(dirfd: int, name: str, limit: int) -> bytes | None:
    try:
        fd = os.open(name, treeio.READ_FLAGS, dir_fd=dirfd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _names(data: bytes) -> str:
    """The id a loose object's bytes stand for ("" when they are no loose object)."""
    try:
        return sha1(zlib.decompress(data)).hexdigest()
    except zlib.error:
        return ""


def _write_trees(objects: Path, files: dict[str, tuple[int, str]]) -> str:
    """Tree objects for `files` (rel -> (mode, blob id)), deepest first; the root's id."""
    children: dict[str, dict[str, tuple[int, str]]] = {"": {}}
    for rel in files:
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            children.setdefault("/".join(parts[:depth]), {})
    for rel, entry in files.items():
        parent, _, name = rel.rpartition("/")
        children[parent][name] = entry
    for directory in sorted(children, key=lambda d: -d.count("/") - (d != "")):
        if not directory:
            continue
        parent, _, name = directory.rpartition("/")
        children[parent][name] = (0o40000, _tree(objects, children[directory]))
    return _tree(objects, children[""])


def _tree(objects: Path, entries: dict[str, tuple[int, str]]) -> str:
    def order(name: str) -> bytes:  # git sorts a directory as if its name ended in "/"
        return os.fsencode(name) + (b"/" if entries[name][0] == 0o40000 else b"")
    body = b"".join(b"%o %s\0%s" % (entries[n][0], os.fsencode(n), bytes.fromhex(entries[n][1]))
                    for n in sorted(entries, key=order))
    return gitobjects.write_object(objects, b"tree", body).hex()
