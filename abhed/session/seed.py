"""The first snapshot of a git workspace, from what its repository already knows (issue 34).

A workspace's first snapshot has no shadow index: without help every file would be read and hashed
(37 s on the Linux tree). But a git workspace has an index of its own that pairs each tracked file's
stat data with the id of its content, and packs that hold that content. So the first snapshot
takes, for every entry it can trust, the repository's blob id and the file's current stat, and
makes the blobs readable to the store; git's `diff-files` and `ls-files -o` then name only what
differs or is untracked, which the snapshot reads and hashes as always.

Everything is read through descriptors opened beneath the workspace root (treeio.Tree): the index
(`.git/index`), the packs' `.idx` files, each file's lstat. Host git never reads the workspace. A
file's lstat may come from the sandbox's start instead, which took it the same way once the git
guard watched every directory (sandbox.census): `Census` keeps each one that no change since names.

When the repository's index is trusted (else nothing is taken from it and every file is hashed):
- it is a regular file whose checksum is right (a SHA-1 index: a SHA-256 repository, or one
  written with index.skipHash, is not used), versions 2 to 4, no required extension (a split
  index, a sparse index);
- its ctime is older than the session (`since`): a model writes `.git/index` only through a
  sandboxed command (one the gate proved read-only too, such as `git status`, which refreshes it)
  or a tool call, so an index changed during this session could pair a file's real stat with
  another blob's id (undo would restore the wrong bytes); any such write moves its ctime past the
  session's start, and no one can set a ctime back. An index crafted elsewhere (a copied tarball) cannot
  name the stat of files made here: their inode and ctime are new.

Which entries are taken (every other file or symlink is read and hashed like an untracked file, also
where a .gitignore names it -- git's listing of untracked files would leave it out, and the
repository's own content went uncovered; so too every one of an index not trusted, names only):
- stage 0, none of assume-unchanged, skip-worktree or intent-to-add set, a file or a symlink
  (not a submodule), a name without `.`, `..` or `.git` components;
- the file's lstat equals the entry's stat data in every field git keeps (ctime, mtime, device,
  inode, uid, gid, size, and the mode git sees), and its mtime is older than the index's own
  (git's racy-clean rule: a file changed in the second the index was written may differ);
- its blob is in one of the repository's packs (loose objects are written by sandboxed commands);
- no attribute or setting converts its bytes between the work tree and the index: the store keeps
  bytes as they are, and a `text`, `eol`, `crlf`, `filter`, `ident` or `working-tree-encoding`
  attribute in a `.gitattributes` makes every entry below it hashed, one in `.git/info/attributes`
  or an `[attr]` macro every entry; `core.autocrlf` set (or a config `include`, which may set it)
  in the repository's, the user's or the system's config makes none taken;
- no `.git` stands in its directory or one above it (a nested repository: not covered).

The packs holding the taken blobs are hard-linked (linkat of the opened descriptor) into the
store's `repo-packs/pack/`, or copied when the store is on another filesystem (then only while
they take under a quarter of checkpoints.max_store_bytes). Only a pack of 16 MiB or more is
linked, never its `.idx` or a smaller pack (copied: they are small): the sandbox copies apart every
workspace file that has a name outside the workspace, at each session's start, but binds a large
pack read-only instead (sandbox.hardlinks), which changes nothing here; their ctime must precede the session
too (the sandbox keeps `.git/objects/pack` read-only and the write tool refuses it: no model
writes a pack). A link keeps the pack's inode after the user's own `git gc` deletes it from the
repository, so undo can still read those blobs; it costs no disk until then.

These packs are never an object directory of the shadow repository (no alternates): git looks
for an object in every pack before the loose objects, so a crafted pack would override the
store's own objects. Undo reads a blob from the store first and only a blob the store lacks from
`repo-packs` (Reader below), and the tree that names such blobs is written with --missing-ok.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import struct
import sys
import time
import zlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from hashlib import sha1
from pathlib import Path
from types import ModuleType

from abhed.session import gitindex, gitobjects, treeio
from sandbox.gitguard import Lstat
from sandbox.hardlinks import BIND_MIN_BYTES

PACKS = "repo-packs"  # the store's directory of linked packs (an object directory: pack/ below it)
MAX_INDEX = 1 << 30  # a repository index larger than this is not read
CONVERTING = frozenset({"text", "eol", "crlf", "filter", "ident", "working-tree-encoding"})
_AUTOCRLF = re.compile(rb"^\s*autocrlf\s*(=\s*(?!(false|no|off|0)\s*(#|;|$))|$)", re.I | re.M)
_INCLUDE = re.compile(rb"^\s*\[\s*include", re.I | re.M)
TAKEN_MODES = frozenset({0o100644, 0o100755, 0o120000})
_FS = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())  # os.fsdecode's, without its call per name
MASK = 0xFFFFFFFF
_STAT40 = struct.Struct(">10L")  # an index entry's stat fields (gitindex.STAT's first ten)
ASSUME_VALID, EXTENDED, STAGE = 0x8000, 0x4000, 0x3000
SKIP_WORKTREE, INTENT_TO_ADD = 0x4000, 0x2000  # in the extended flags (index version 3 and up)


# One entry of the repository's index, as a plain tuple (80,000 of them are read at once):
# (name, git's 10 stat fields: ctime s, ns, mtime s, ns, dev, ino, mode, uid, gid, size as 32-bit values,
#  blob id, usable: stage 0 and no flag that makes its stat data say nothing of the file,
#  raw: the entry's bytes when they are a version 2 entry as the shadow index has them, else None)
RepoEntry = tuple

_native: ModuleType | None
try:  # the seed's native loops (abhed/session/_seed.c), built by setup.py when a C compiler was at hand
    from abhed.session import _seed as _native
except ImportError:  # pragma: no cover (CI builds it: tests/test_seed_native.py says when it is missing)
    _native = None


@dataclass
class Seeded:
    """What the first snapshot took from the repository."""

    entries: dict[bytes, gitindex.Entry] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)  # exact permission bits other than 0644/0755
    packs: int = 0  # packs linked (or copied) into the store
    why_not: str = ""  # why nothing was taken, in words ("" when something was)
    # The repository's tracked files (and symlinks) not taken, sorted: the snapshot reads them as it reads
    # untracked ones, but whatever a .gitignore says (git's listing of untracked files would leave those out).
    untaken: list[bytes] = field(default_factory=list)


def parse_index(data: bytes) -> tuple[int, list[RepoEntry]]:
    """The version and entries of a repository index (2, 3 or 4). ValueError when it is not one
    this module trusts (damaged, SHA-256, a required extension)."""
    if len(data) < 32 or sha1(data[:-20]).digest() != data[-20:]:
        raise ValueError("its SHA-1 checksum does not match (damaged, SHA-256, or written with index.skipHash)")
    signature, version, count = gitindex.HEADER.unpack_from(data)
    if signature != b"DIRC" or version not in (2, 3, 4):
        raise ValueError(f"it is not an index of version 2 to 4 ({signature!r}, version {version})")
    # Natively when the module is built (the same entries; None for any entry not well formed, which
    # the loop below then names).
    found = _native.entries(data, version, count) if _native is not None else None
    entries, offset = found if found is not None else _entries(data, version, count)
    end = len(data) - 20
    while offset + 8 <= end:  # extensions: an upper-case one is optional, any other required (split, sparse)
        signature, size = struct.unpack_from(">4sL", data, offset)
        if not signature[:1].isupper():
            raise ValueError(f"it needs the extension {signature!r} (a split or sparse index)")
        offset += 8 + size
    return version, entries


def _entries(data: bytes, version: int, count: int) -> tuple[list[RepoEntry], int]:
    """parse_index's entries, and the offset after them."""
    entries: list[RepoEntry] = []
    offset, end, previous = gitindex.HEADER.size, len(data) - 20, b""
    unpack, size = gitindex.STAT.unpack_from, gitindex.STAT.size
    for _ in range(count):
        if offset + size > end:
            raise ValueError("it ends inside an entry")
        at = offset
        values = unpack(data, offset)
        oid, flags = values[10], values[11]
        start = offset + size
        extended = 0
        if flags & EXTENDED:
            if version < 3:
                raise ValueError("a version 2 index with extended flags")
            extended = struct.unpack_from(">H", data, start)[0]
            start += 2
        if version == 4:
            strip, start = _varint(data, start)
            stop = data.index(b"\0", start)
            if strip > len(previous):
                raise ValueError("a name strips more than the name before it")
            name = previous[:len(previous) - strip] + data[start:stop]
            offset = stop + 1
        else:
            stop = data.index(b"\0", start)
            name = data[start:stop]
            offset += (start - offset + len(name) + 8) & ~7
        if offset > end:
            raise ValueError("it ends inside an entry")
        previous = name
        usable = not (flags & (ASSUME_VALID | STAGE)) and not (extended & (SKIP_WORKTREE | INTENT_TO_ADD))
        raw = data[at:offset] if version != 4 and not flags & EXTENDED else None
        entries.append((name, values[:10], oid, usable, raw))
    return entries, offset


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """git's offset varint (index version 4): the value and where it ends."""
    byte = data[at]
    value = byte & 0x7F
    while byte & 0x80:
        at += 1
        byte = data[at]
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, at + 1


def pack_ids(data: bytes) -> set[bytes]:
    """The object ids a pack index (version 2) names. ValueError for anything else."""
    if data[:8] != b"\377tOc\0\0\0\2" or len(data) < 8 + 1024 + 40:
        raise ValueError("not a version 2 pack index")
    count = struct.unpack_from(">L", data, 8 + 1020)[0]
    start = 8 + 1024
    if len(data) < start + count * 28 + 40:
        raise ValueError("a pack index shorter than its object count")
    return {data[i:i + 20] for i in range(start, start + count * 20, 20)}


def converting(attributes: bytes) -> tuple[bool, bool]:
    """Whether a gitattributes file sets an attribute that changes bytes (text, eol, filter...), and
    whether it defines a macro at all (`[attr]`: it may be used anywhere)."""
    sets = macro = False
    for line in attributes.splitlines():
        tokens = line.split()
        if not tokens or tokens[0].startswith(b"#"):
            continue
        macro |= tokens[0].startswith(b"[attr]")
        for token in tokens[1:]:
            if token[:1] in (b"-", b"!"):
                continue  # unset, or unspecified: no conversion
            if token.split(b"=", 1)[0].decode("utf-8", "replace") in CONVERTING:
                sets = True
    return sets, macro


def configs_convert(repo_config: bytes | None) -> str:
    """Why the configs may convert bytes ("" when they do not): core.autocrlf, or an include."""
    home = Path(os.environ.get("HOME", "/nonexistent"))
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    sources = [(".git/config", repo_config), *((str(p), _read_host(p)) for p in
                                               (home / ".gitconfig", xdg / "git" / "config", Path("/etc/gitconfig")))]
    for where, text in sources:
        if text and _AUTOCRLF.search(text):
            return f"core.autocrlf is set in {where}"
        if text and _INCLUDE.search(text):
            return f"{where} includes other config files (one may set core.autocrlf)"
        if text and re.search(rb"attributesfile", text, re.I):
            return f"{where} names a core.attributesFile"
    return ""


def _read_host(path: Path) -> bytes | None:
    """One of the user's or the system's git configs (outside the workspace)."""
    try:
        return path.read_bytes()
    except OSError:
        return None


def _bad_name(name: bytes) -> bool:
    return any(part in (b"", b".", b"..") or part.lower() == b".git" for part in name.split(b"/"))


class Census:
    """The sandbox start's lstat of each file (sandbox.census) and the paths the change set since then
    names: a file's lstat stands for one taken now while neither it nor a directory above it is named
    and it has one name (a write through another name of it is named there, not here). A directory
    it vouches for was reached from the root without a symlink (the walk opened each below its
    parent with O_NOFOLLOW) and is no nested repository's: neither it nor one above it held a
    `.git` then, and the change set names none made since; so the seed opens none of them."""

    def __init__(self, dirs: dict[str, dict[str, Lstat]], touched: set[str]) -> None:
        self.dirs = dirs
        self.touched = {os.fsencode(path) for path in touched}
        # The directories below the root holding a .git, as the walk found them or as the change set names one.
        self._nested = {os.fsencode(d) for d, files in dirs.items() if d and ".git" in files} | \
            {path[:-5] for path in self.touched if path.endswith(b"/.git")}
        self._files: dict[bytes, dict[str, Lstat] | None] = {}  # directory -> its files, None: not vouched

    def stat(self, name: bytes, parent: bytes, base: bytes) -> Lstat | None:
        """The lstat of `name` (`base` in the directory `parent`) the census vouches for, or None; a
        record (bytes) is of a file with one link (sandbox.census)."""
        files = self.files(parent)
        if files is None:
            return None
        st = files.get(base.decode(*_FS))
        if st is None or (not isinstance(st, bytes) and st.st_nlink != 1) or name in self.touched:
            return None
        return st

    def files(self, parent: bytes) -> dict[str, Lstat] | None:
        """The files of the directory `parent` (name -> lstat) when the census vouches for it, else None."""
        if parent not in self._files:
            self._files[parent] = self.dirs.get(os.fsdecode(parent)) if self._vouched(parent) else None
        return self._files[parent]

    def _vouched(self, directory: bytes) -> bool:
        """Whether neither `directory` nor one above it is named by the change set (the root, b"",
        included) or holds a `.git` (the root's own excepted)."""
        while True:
            if directory in self.touched or directory in self._nested:
                return False
            if not directory:
                return True
            directory = directory.rpartition(b"/")[0]


class Seeder:
    """Takes what can be trusted of one repository's index, for the first snapshot of its workspace."""

    def __init__(self, tree: treeio.Tree, store: Path, since_ns: int, max_file_bytes: int, max_copy_bytes: int,
                 census: Census | None = None) -> None:
        self.tree = tree
        self.census = census
        self.store = store
        self.since_ns = since_ns
        self.max_file_bytes = max_file_bytes
        self.max_copy_bytes = max_copy_bytes
        self._nested: dict[str, bool] = {}
        self._dirs: dict[bytes, int | None] = {}  # directory -> its descriptor (the tree's), None: not taken

    def seed(self) -> Seeded:
        try:
            if self.tree.dir(".git") is None:
                return Seeded(why_not="the workspace is no git repository whose index could say what is unchanged")
        except OSError:
            return Seeded(why_not="the repository's .git cannot be read")
        index = self.tree.read(".git/index", MAX_INDEX)
        if not isinstance(index, treeio.Read) or not stat.S_ISREG(index.st.st_mode) or not index.settled:
            return Seeded(why_not="the repository has no index Abhed can read")
        try:
            _version, entries = parse_index(index.data)
        except (ValueError, IndexError, struct.error) as exc:
            return Seeded(why_not=f"the repository's index cannot be used: {exc}")
        # From here on, an index not trusted still names the tracked files to read (names only).
        if index.st.st_ctime_ns >= self.since_ns:
            return self._none_taken(entries, "the repository's index changed during this session")
        config = self.tree.read(".git/config", 1 << 20)
        why = configs_convert(config.data if isinstance(config, treeio.Read) else None)
        if why:
            return self._none_taken(entries, why)
        scopes = self._converting_scopes(entries)
        if scopes is None:
            return self._none_taken(entries, "an attribute in .git/info/attributes or an [attr] macro may convert any file")
        packs = self._packs()
        # (one pack, as after a gc: its own set, not a copy of 80,000 ids)
        known = packs[0][2] if len(packs) == 1 else set().union(*(ids for _name, _fds, ids in packs))
        seeded = Seeded()
        needed: set[bytes] = set()
        now = time.time()
        fresh_ns = int((now - gitindex.RACY_S - 1) * 1_000_000_000)  # newer: rewritten with mtime 0 (gitindex.entry)
        limit = index.st.st_mtime_ns - 1_000_000_000  # racily clean (git's rule, to the whole second) from here
        untaken: set[bytes] = set()
        rest = entries
        if self.census is not None and _native is not None:  # takes what it can as the loop below would
            rest = _native.take(entries, known, self.census.files, self.census.touched, tuple(scopes), limit, fresh_ns,
                                self.max_file_bytes, gitindex.Entry, seeded.entries, needed, seeded.modes)
        for entry in rest:
            mode = self._take(entry, known, scopes, limit)
            if mode is None:
                if entry[1][6] in TAKEN_MODES:  # a file or a symlink (a submodule is a nested repository: not covered)
                    untaken.add(entry[0])
                continue
            # Taken: the file's stat is the entry's (to the nanosecond), so the entry's fields stand for it.
            name, fields, oid, _usable, raw = entry
            if raw is not None and fields[2] * 1_000_000_000 + fields[3] < fresh_ns \
                    and fields[0] * 1_000_000_000 + fields[1] < fresh_ns:
                taken = gitindex.Entry(name, fields[6], oid, raw)  # the same bytes
            else:
                taken = gitindex.entry_of(name, fields, oid, now)
            seeded.entries[name] = taken
            needed.add(oid)
            perm = mode & 0o7777
            if perm != 0o644 and perm != 0o755 and stat.S_ISREG(mode):
                seeded.modes[os.fsdecode(name)] = perm
        try:
            seeded.packs = self._link([(n, fds) for n, fds, ids in packs if not ids.isdisjoint(needed)])
        except OSError as exc:
            return self._none_taken(entries, f"the repository's packs could not be linked into the store: {exc.strerror or exc}")
        finally:
            for _name, fds, _ids in packs:
                for fd in fds:
                    os.close(fd)
        if seeded.packs < 0:
            return self._none_taken(entries, "the repository's packs are on another filesystem and too large to copy")
        seeded.untaken = self._coverable(untaken - seeded.entries.keys())  # (a conflict's stages share a name)
        return seeded

    def _none_taken(self, entries: list[RepoEntry], why: str) -> Seeded:
        return Seeded(why_not=why, untaken=self._coverable({entry[0] for entry in entries if entry[1][6] in TAKEN_MODES}))

    def _coverable(self, names: set[bytes]) -> list[bytes]:
        """Those of the tracked `names` a snapshot reads: no bad name, none in a nested repository (a
        name that is a directory now reads as none there)."""
        return sorted(name for name in names if not _bad_name(name)
                      and not self._nested_below(os.fsdecode(name.rpartition(b"/")[0])))

    def _take(self, entry: RepoEntry, known: set[bytes], scopes: list[bytes], limit_ns: int) -> int | None:
        """The file's st_mode when the entry can be taken, else None."""
        name, f, oid, usable, _raw = entry
        if not usable or oid not in known or f[6] not in TAKEN_MODES:
            return None  # a submodule (160000) or anything git would not write; a blob not in a pack
        if (name.startswith((b".", b"/")) or b"/." in name or b"//" in name or name.endswith(b"/")) and _bad_name(name):
            return None
        if scopes and any(name.startswith(scope) for scope in scopes):
            return None
        mtime_ns = f[2] * 1_000_000_000 + f[3]
        if mtime_ns >= limit_ns:
            return None  # racily clean: changed within a second of the index
        parent, _, base = name.rpartition(b"/")
        st = self.census.stat(name, parent, base) if self.census is not None else None
        if isinstance(st, bytes):  # the start's record of it (sandbox.census): git's 40 bytes, then st_mode
            if st[:40] != (entry[4][:40] if entry[4] is not None else _STAT40.pack(*f)) or f[9] > self.max_file_bytes:
                return None
            return int.from_bytes(st[40:], "big")
        if st is None:  # not vouched for: its directory opened here (and refused when it is a nested repository's)
            dirfd = self._dirs.get(parent, -1)
            if dirfd == -1:
                dirfd = self._dirs[parent] = self._open_dir(parent)
            if dirfd is None:
                return None
            try:
                st = os.stat(base, dir_fd=dirfd, follow_symlinks=False)
            except OSError:
                return None
        # Every field git keeps, as git keeps it (32 bits); the mode as git sees it (a symlink, or a regular
        # file and its executable bit: anything else is 0, which no entry taken has). Inline: 80,000 calls.
        mode = st.st_mode
        kind = mode & 0o170000
        git_mode = 0o120000 if kind == 0o120000 else (0o100755 if mode & 0o100 else 0o100644) if kind == 0o100000 else 0
        if (st.st_mtime_ns != mtime_ns or st.st_ctime_ns != f[0] * 1_000_000_000 + f[1] or st.st_ino & MASK != f[5]
                or st.st_size & MASK != f[9] or st.st_dev & MASK != f[4] or st.st_uid & MASK != f[7]
                or st.st_gid & MASK != f[8] or git_mode != f[6]):
            return None
        if st.st_size > self.max_file_bytes:
            return None
        return mode

    def _open_dir(self, parent: bytes) -> int | None:
        """The directory `parent`, or None when it is not a plain directory below the root, or a
        nested repository's (or below one)."""
        directory = os.fsdecode(parent)
        if self._nested_below(directory):
            return None
        try:
            return self.tree.dir(directory)
        except OSError:
            return None

    def _nested_below(self, directory: str) -> bool:
        """Whether `directory` or one above it (not the root) holds a `.git`: a nested repository."""
        if not directory:
            return False
        if directory not in self._nested:
            parent = directory.rpartition("/")[0]
            found = self._nested_below(parent)
            if not found:
                try:
                    fd = self.tree.dir(directory)
                    found = fd is not None and treeio.exists(fd, ".git")
                except OSError:
                    found = True  # cannot tell: not taken
            self._nested[directory] = found
        return self._nested[directory]

    def _converting_scopes(self, entries: list[RepoEntry]) -> list[bytes] | None:
        """The directories (b"dir/", b"" the whole tree) below which attributes may convert bytes;
        None when that may be anywhere (a macro, .git/info/attributes)."""
        info = self.tree.read(".git/info/attributes", 1 << 20)
        if isinstance(info, treeio.Read) and any(converting(info.data)):
            return None
        scopes = []
        for name in [entry[0] for entry in entries if entry[0].endswith(b".gitattributes")]:  # (80,000 entries: no unpacking)
            if name != b".gitattributes" and not name.endswith(b"/.gitattributes"):
                continue
            got = self.tree.read(os.fsdecode(name), 1 << 20)
            if not isinstance(got, treeio.Read):
                continue  # gone: nothing applies
            sets, macro = converting(got.data)
            if macro:
                return None
            if sets:
                scopes.append(name[:-len(b".gitattributes")])
        return scopes

    def _packs(self) -> list[tuple[str, tuple[int, int], set[bytes]]]:
        """Each trusted pack of the repository: its name, its .pack and .idx descriptors, its ids."""
        try:
            packdir = self.tree.dir(".git/objects/pack")
        except OSError:
            return []
        if packdir is None:
            return []
        found = []
        for name in sorted(os.listdir(packdir)):
            if not (name.startswith("pack-") and name.endswith(".idx")):
                continue
            base = name[:-4]
            fds: list[int] = []
            try:
                for suffix in (".pack", ".idx"):
                    fds.append(os.open(base + suffix, treeio.READ_FLAGS, dir_fd=packdir))
                sts = [os.fstat(fd) for fd in fds]
                if all(stat.S_ISREG(s.st_mode) and s.st_ctime_ns < self.since_ns for s in sts):
                    with os.fdopen(os.dup(fds[1]), "rb") as f:
                        ids = pack_ids(f.read())
                    found.append((base, (fds[0], fds[1]), ids))
                    continue
            except (OSError, ValueError):
                pass
            for fd in fds:
                os.close(fd)
        return found

    def _link(self, packs: list[tuple[str, tuple[int, int]]]) -> int:
        """Link (or copy) `packs` into the store's repo-packs/pack; how many, -1 when too large to copy."""
        target = self.store / PACKS / "pack"
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        plan = [(f"{base}{suffix}", fd) for base, fds in packs for suffix, fd in zip((".pack", ".idx"), fds)]
        todo = [(n, fd) for n, fd in plan if not (target / n).exists()]
        copies = []
        for name, fd in todo:
            # Only a large pack is linked: a file with a name outside the workspace is copied apart by the
            # sandbox at each session's start (sandbox.hardlinks), except a large pack, which it binds
            # read-only (as sandbox.protect keeps the whole pack directory anyway). The rest is small.
            large = name.endswith(".pack") and os.fstat(fd).st_size >= BIND_MIN_BYTES
            if not (large and _link_fd(fd, target, name)):
                copies.append((name, fd))
        if sum(os.fstat(fd).st_size for _n, fd in copies) > self.max_copy_bytes:
            for name, _fd in todo:
                (target / name).unlink(missing_ok=True)
            return -1
        for name, fd in copies:
            _copy_fd(fd, target, name)
        dirfd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dirfd)  # the links survive a power cut with the index that names their blobs
        finally:
            os.close(dirfd)
        return len(packs)


def _link_fd(fd: int, target: Path, name: str) -> bool:
    """Hard-link the opened file into `target` as `name` (linkat of /proc/self/fd/N, following that
    one link: the inode that was opened, whatever its path is now). False when it must be copied
    (another filesystem; fs.protected_hardlinks and a pack this user does not own)."""
    temp = target / f".{name}.tmp-{os.getpid()}"
    temp.unlink(missing_ok=True)
    proc = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:  # a source directory descriptor makes os.link call linkat(AT_SYMLINK_FOLLOW), not link()
        os.link(str(fd), temp, src_dir_fd=proc, follow_symlinks=True)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EACCES, errno.ENOENT):
            return False
        raise
    finally:
        os.close(proc)
    os.rename(temp, target / name)
    return True


def _copy_fd(fd: int, target: Path, name: str) -> None:
    temp = target / f".{name}.tmp-{os.getpid()}"
    out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444)
    try:
        with os.fdopen(os.dup(fd), "rb") as src, os.fdopen(out, "wb", closefd=False) as dst:
            src.seek(0)
            shutil.copyfileobj(src, dst, 1 << 20)
        os.fsync(out)
    finally:
        os.close(out)
    os.rename(temp, target / name)


def linked(store: Path) -> bool:
    """Whether the store holds packs of the repository (then some blobs are only there)."""
    return (store / PACKS / "pack").is_dir()


class Reader:
    """Blobs for undo: the store's own first, then (only for a blob the store lacks) its linked packs.
    Never the other way round: a pack must not override what Abhed hashed itself."""

    def __init__(self, own: gitobjects.Reader, packs: AbstractContextManager[gitobjects.Reader] | None) -> None:
        self._own = own
        self._packs_cm = packs
        self._packs: gitobjects.Reader | None = None

    def blob(self, oid: str) -> bytes:
        try:
            return self._own.blob(oid)
        except gitobjects.Missing:
            if self._packs_cm is None:
                raise
        if self._packs is None:
            self._packs = self._packs_cm.__enter__()
        return self._packs.blob(oid)

    def close(self) -> None:
        if self._packs is not None and self._packs_cm is not None:
            self._packs_cm.__exit__(None, None, None)


@contextmanager
def reader(git: list[str], env: dict[str, str], timeout: float, pass_fds: tuple[int, ...],
           store: Path) -> Iterator[Reader | gitobjects.Reader]:
    """gitobjects.reader over the store, falling back to its linked packs when it has any."""
    with gitobjects.reader(git, env, timeout, pass_fds) as own:
        if not linked(store):
            yield own
            return
        packs = gitobjects.reader(git, {**env, "GIT_OBJECT_DIRECTORY": str(store / PACKS)}, timeout, pass_fds)
        both = Reader(own, packs)
        try:
            yield both
        finally:
            both.close()


def missing_elsewhere(git_output_missing: list[str], store: Path) -> list[str]:
    """Of the ids the store lacks, those its linked packs lack too (what undo cannot read)."""
    if not git_output_missing or not linked(store):
        return git_output_missing
    ids: set[bytes] = set()
    for idx in (store / PACKS / "pack").glob("pack-*.idx"):
        try:
            ids |= pack_ids(idx.read_bytes())
        except (OSError, ValueError):
            continue
    return [oid for oid in git_output_missing if bytes.fromhex(oid) not in ids]


# -- the trees of the first snapshot, as one pack ----------------------------------------------------
#
# git's write-tree would write each directory's tree as a loose object: 5,000 files for the Linux tree
# (0.7-2 s). The first snapshot computes them here, from the index it just wrote, and stores them as
# one pack (`git index-pack` names every object from its content, so the pack holds nothing else),
# and gives the index the cache of trees (its TREE extension), so write-tree has nothing to do.

MAX_DEPTH = 256  # deeper trees are left to git's write-tree (no recursion limit to meet here)
_MODE_FIELD = {mode: b"%o " % mode for mode in TAKEN_MODES}  # a tree entry's mode and space (a third of a format's cost)


def trees_of(entries: list[gitindex.Entry]) -> tuple[list[bytes], bytes] | None:
    """The tree objects' bodies (deepest first) and the index's TREE extension data for `entries`
    (sorted by name, as in an index: each directory's entries are contiguous); None when they make
    no tree (a file where a directory is, too deep). Natively when the module is built (the same)."""
    if _native is not None:
        return _native.trees(entries, sha1)
    return _trees(entries)


def _trees(entries: list[gitindex.Entry]) -> tuple[list[bytes], bytes] | None:
    """trees_of, in Python."""
    bodies: list[bytes] = []
    done: dict[bytes, tuple[bytes, int, list[bytes]]] = {}  # directory -> (tree id, entries below, subdirectories)
    # The directories open on the way to the current entry: [path, its items (sort key, bytes), entries in
    # its subdirectories, subdirs]; its own files are its items that are no subdirectory's.
    open_dirs: list[list] = [[b"", [], 0, []]]

    def close() -> None:
        path, items, below, subdirs = open_dirs.pop()
        _one_each(items)
        items.sort()
        body = b"".join([item for _key, item in items])
        oid = sha1(b"tree %d\0" % len(body) + body).digest()
        bodies.append(body)
        count = below + len(items) - len(subdirs)
        done[path] = (oid, count, subdirs)
        name = path.rpartition(b"/")[2]
        parent = open_dirs[-1]
        parent[1].append((name + b"/", b"40000 %s\0%s" % (name, oid)))
        parent[2] += count
        parent[3].append(path)

    join, current, items = b"".join, b"", open_dirs[0][1]
    for name, mode, oid, _raw in entries:  # 80,000 on the Linux tree: nothing per entry that can be done per directory
        directory, _, base = name.rpartition(b"/")
        if not base:
            return None  # an empty name, or one ending in "/": no tree names it
        if directory != current:
            if directory.startswith(b"/") or directory.endswith(b"/") or b"//" in directory:
                return None  # an empty component: it would make a directory with no name
            while open_dirs[-1][0] and not directory.startswith(open_dirs[-1][0] + b"/") \
                    and directory != open_dirs[-1][0]:
                try:
                    close()
                except ValueError:
                    return None
            top = open_dirs[-1][0]
            rest = directory[len(top) + 1:] if top else directory
            if rest:
                parts = rest.split(b"/")
                if len(open_dirs) + len(parts) > MAX_DEPTH:
                    return None
                for part in parts:
                    path = open_dirs[-1][0] + b"/" + part if open_dirs[-1][0] else part
                    if path in done:
                        return None  # not sorted as an index is
                    open_dirs.append([path, [], 0, []])
            current, items = directory, open_dirs[-1][1]
        field = _MODE_FIELD.get(mode) or b"%o " % mode  # pragma: no mutate (the table is the format's own result)
        items.append((base, join((field, base, b"\0", oid))))
    while len(open_dirs) > 1:
        try:
            close()
        except ValueError:
            return None
    root = open_dirs[0]
    try:
        for node in open_dirs:  # pragma: no mutate (only the root is left)
            _one_each(node[1])
    except ValueError:
        return None
    root[1].sort()
    body = b"".join([item for _key, item in root[1]])
    bodies.append(body)
    done[b""] = (sha1(b"tree %d\0" % len(body) + body).digest(), root[2] + len(root[1]) - len(root[3]), root[3])
    out: list[bytes] = []
    walk = [b""]
    while walk:  # pre-order: each directory, then its subdirectories
        path = walk.pop()
        oid, count, subdirs = done[path]
        out.append(b"%s\0%d %d\n%s" % (path.rpartition(b"/")[2], count, len(subdirs), oid))
        walk.extend(reversed(subdirs))
    return bodies, b"".join(out)


def _one_each(items: list[tuple[bytes, bytes]]) -> None:
    """ValueError when a name is both a file and a directory here (a crafted index): git would write a
    tree with both; write-tree is left to refuse it."""
    if len({key.rstrip(b"/") for key, _item in items}) != len(items):
        raise ValueError("a name is both a file and a directory")


def write_pack(pack_dir: Path, bodies: list[bytes]) -> Path:
    """`bodies` as tree objects in one pack file under `pack_dir` (not yet indexed); its path."""
    # Stored, not compressed (level 0, a valid zlib stream for git): 0.13 s of CPU less on the Linux
    # tree's 5,000 trees, for 3.4 MB of pack instead of about 1.5 (git's own gc packs them again).
    return gitobjects.write_pack_file(pack_dir, [gitobjects.pack_entry(b"tree", body, 0) for body in bodies])
