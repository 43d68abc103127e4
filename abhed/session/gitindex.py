"""git's index file (version 2), read and written by Abhed for the shadow repository (checkpoints).

Why not `git update-index`: it reads each file by its path, and a path in the workspace can be
swapped for a symlink to a file outside, or for a FIFO, between git's lstat and its open. The
checkpoint reads each file itself, through the beneath-root descriptors, writes the blob, and
puts the entry here with the stat data of the descriptor it read (so git's `diff-files` can
tell an unchanged file from a changed one without reading either).

git compares an entry with what lstat says of its path; when the two agree but the file was
changed within the same second as the index was written ("racily clean"), git would re-read
the file by path to be sure. An entry whose file changed too recently (its mtime, or its ctime: a
chmod that git's 100644 does not show) is therefore written with mtime 0: git reports it as
changed, and the next snapshot reads it again through a descriptor.

The trees: git's write-tree keeps a cache of them in the index (the TREE extension). `updated`
invalidates the trees a change touches, as git does, and with a store computes them again here
(`built`: git's own cache-tree update, tested against write-tree), so a later snapshot runs no git.

The format (Documentation/gitformat-index.txt): "DIRC", version, entry count; the entries sorted
by name, each 62 bytes of stat data, object id and flags, then the name and 1-8 NUL bytes up to a
multiple of 8; extensions; a SHA-1 of everything before it. Only version 2 without required
extensions is read here (the shadow repository is written by this module and by git under
`index.version=2`); anything else is reported as unreadable, and the caller starts afresh.
"""

from __future__ import annotations

import os
import stat
import struct
from bisect import bisect_left, insort
from collections.abc import Callable
from dataclasses import dataclass, field
from hashlib import sha1
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

from abhed.files.atomic import replace_unsynced

HEADER = struct.Struct(">4sLL")
STAT = struct.Struct(">10L20sH")  # ctime s, ns, mtime s, ns, dev, ino, mode, uid, gid, size; oid; flags
NAME_MASK = 0xFFF
RACY_S = 2  # an entry whose mtime is this close to now is written with mtime 0 (see the module docstring)


class Unreadable(Exception):
    """The index is not one this module writes (damaged, another version, a required extension)."""


class Entry(NamedTuple):  # a tuple: a kernel-sized index makes 80,000 of them at once (4x a frozen dataclass's speed)
    name: bytes
    mode: int  # 0o100644, 0o100755 or 0o120000
    oid: bytes  # 20 bytes
    raw: bytes  # the entry as stored (stat data, oid, flags, name, padding)


_RAW = itemgetter(3)  # Entry.raw


def mode_of(st: os.stat_result) -> int:
    """The index mode git gives a file with this stat: a symlink, or a file executable by its owner or not."""
    if stat.S_ISLNK(st.st_mode):
        return 0o120000
    return 0o100755 if st.st_mode & 0o100 else 0o100644


def entry(name: bytes, st: os.stat_result, oid: bytes, now: float, settled: bool = True) -> Entry:
    """The entry of `name` as read through a descriptor whose fstat was `st`; `settled` False when it
    changed while it was read (then, as when racily clean, git is made to report it next time)."""
    ctime_s, ctime_ns = divmod(st.st_ctime_ns, 1_000_000_000)
    mtime_s, mtime_ns = divmod(st.st_mtime_ns, 1_000_000_000)
    return entry_of(name, (ctime_s, ctime_ns, mtime_s, mtime_ns, st.st_dev, st.st_ino, mode_of(st), st.st_uid,
                           st.st_gid, st.st_size), oid, now, settled)


def entry_of(name: bytes, fields: tuple[int, ...], oid: bytes, now: float, settled: bool = True) -> Entry:
    """entry(), from the file's ten stat fields as an index keeps them (ctime s, ns, mtime s, ns, dev,
    ino, mode, uid, gid, size): the seed has them from the repository's index, which they matched."""
    # Racily clean: changed too close to this snapshot for git's whole-second stat compare to see
    # the next change. The inode's change time counts too: a chmod 600 -> 644 leaves the mtime and
    # git's mode (100644) alone, so only ctime could tell, and in the same second it cannot. (The
    # times as os.stat_result's floats are: seconds + nanoseconds * 1e-9.)
    if not settled or max(fields[2] + fields[3] * 1e-9, fields[0] + fields[1] * 1e-9) >= now - RACY_S:
        fields = (*fields[:2], 0, 0, *fields[4:])  # make git report it: read again
    return _packed(name, fields, oid)


def named(name: bytes) -> Entry:
    """An entry of `name` alone: no stat data, no blob (the null id). Only ever in an index git is asked
    which names a rule matches (ls-files -c -i); git would find its file changed, and no tree names it."""
    return _packed(name, (0, 0, 0, 0, 0, 0, 0o100644, 0, 0, 0), bytes(20))


def _packed(name: bytes, fields: tuple[int, ...], oid: bytes) -> Entry:
    head = STAT.pack(*(f & 0xFFFFFFFF for f in fields), oid, min(len(name), NAME_MASK))
    return Entry(name, fields[6], oid, head + name + b"\0" * (8 - (len(head) + len(name)) % 8))


def checksum(path: str | os.PathLike[str]) -> str | None:
    """The index's trailing SHA-1 (what names its content), or None when there is none."""
    try:
        with open(path, "rb") as f:
            f.seek(-20, os.SEEK_END)
            return f.read(20).hex()
    except OSError:
        return None  # pragma: no mutate (equivalent: falling off the end returns None too)


@dataclass
class Index:
    """An index: its entries, and git's cache of the trees they make (the TREE extension, raw), if any."""

    entries: list[Entry]
    trees: bytes | None = None
    body: bytes = b""  # the header and entries as last read or written (what git's rewrite must keep)
    # `trees` parsed, once this process has had to (updated): never changed in place, so that a later
    # snapshot starts from it (parsing a kernel's cache of trees costs some 10-20 ms a snapshot).
    root: _Tree | None = field(default=None, compare=False, repr=False)


def read(path: str | os.PathLike[str]) -> Index:
    """The index at `path` (empty when it does not exist)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return Index([])
    except OSError as exc:
        raise Unreadable(f"cannot read {path}: {exc.strerror}") from None
    return parse(data)


def parse(data: bytes) -> Index:
    if len(data) < HEADER.size + 20 or sha1(data[:-20]).digest() != data[-20:]:
        raise Unreadable("its checksum does not match")
    signature, version, count = HEADER.unpack_from(data)
    if signature != b"DIRC" or version != 2:
        raise Unreadable(f"it is not a version 2 index ({signature!r}, version {version})")
    entries, offset, end = [], HEADER.size, len(data) - 20
    for _ in range(count):
        if offset + STAT.size > end:
            raise Unreadable("it ends inside an entry")
        fields = STAT.unpack_from(data, offset)
        flags = fields[11]
        if flags & 0x7000:  # an extended entry (not in version 2) or a merge stage
            raise Unreadable("it holds an entry with a merge stage or extended flags")
        start = offset + STAT.size
        # A name of 0xFFF bytes or more ends at its NUL (any name does: the padding's first byte).
        stop = data.index(b"\0", start) if flags & NAME_MASK == NAME_MASK else start + (flags & NAME_MASK)  # pragma: no mutate (equivalent: see above)
        size = (STAT.size + stop - start + 8) & ~7
        if offset + size > end:
            raise Unreadable("it ends inside an entry")
        entries.append(Entry(data[start:stop], fields[6], fields[10], data[offset:offset + size]))
        offset += size
    return Index(entries, _extensions(data, offset), data[:offset])


def _extensions(data: bytes, offset: int) -> bytes | None:
    """The TREE extension's data among the extensions from `offset`; optional others (A-Z) are dropped,
    a required one (a lower-case name: split index, sparse...) makes the index unreadable here."""
    trees, end = None, len(data) - 20
    while offset + 8 <= end:
        signature, size = struct.unpack_from(">4sL", data, offset)
        if not signature[:1].isupper():
            raise Unreadable(f"it needs the extension {signature!r}")
        if signature == b"TREE":
            trees = data[offset + 8:offset + 8 + size]
        offset += 8 + size
    return trees


def after_git(path: str | os.PathLike[str], index: Index) -> Index:
    """`index` as git wrote it back (write-tree adds its cache of trees): only the extension is read
    again, when the entries are still the ones written; else the whole file."""
    with open(path, "rb") as f:
        data = f.read()
    if index.body and data.startswith(index.body) and sha1(data[:-20]).digest() == data[-20:]:
        return Index(index.entries, _extensions(data, len(index.body)), index.body)
    return parse(data)


def write(path: str | os.PathLike[str], index: Index) -> Index:
    """Write `index` (entries sorted by name, no duplicates) at `path`, atomically; what was written."""
    body = HEADER.pack(b"DIRC", 2, len(index.entries)) + b"".join(map(_RAW, index.entries))  # map: half a genexpr's time
    tail = b"" if index.trees is None else b"TREE" + struct.pack(">L", len(index.trees)) + index.trees
    digest = sha1(body)
    digest.update(tail)
    # Without fsync: the index is a cache of what the workspace's files hash to. A power cut leaves
    # an older one (read as it is: a changed file's stat still differs from its entry) or a damaged
    # one (its checksum fails: Unreadable, and the next snapshot starts afresh); a kernel's 9 MB
    # synced cost a later snapshot some 10 ms.
    replace_unsynced(Path(path), b"".join((body, tail, digest.digest())))
    return Index(index.entries, index.trees, body, index.root)


def updated(index: Index, changes: dict[bytes, Entry | None], store: Callable[[bytes], bytes] | None = None) -> Index:
    """`index` with `changes` (merged) and the cached trees of every changed path invalidated, as git's
    own cache_tree_invalidate_path does: git's write-tree then hashes only those trees again. With
    `store` (writes a tree object, gives its id), those trees are computed here instead (built), so
    that a later snapshot of a few files needs no write-tree: git read and wrote the whole index for
    it (some 70 ms on the kernel's 78,000 entries)."""
    entries = merged(index.entries, changes)
    if index.trees is None:
        return Index(entries)
    root = index.root
    if root is None:
        try:
            root = _parse_trees(index.trees)
        except (ValueError, IndexError):
            return Index(entries)  # damaged: git computes every tree again
    for name in changes:
        root = _invalidated(root, name)
    if store is not None:
        root = built(root, entries, store) or root
    return Index(entries, _serialise(root), root=root)


def root_tree(index: Index) -> str | None:
    """The id of the index's whole tree, when its cache of trees holds it (valid), else None."""
    if not index.trees:
        return None
    nul = index.trees.find(b"\0")
    newline = index.trees.find(b"\n", nul)
    if nul != 0 or newline < 0 or int(index.trees[1:newline].split(b" ")[0]) < 0:
        return None
    oid = index.trees[newline + 1:newline + 21]
    return oid.hex() if len(oid) == 20 else None


BUILD_UP_TO = 1024  # trees computed by `built` at most; more (an unpacked archive, say): git's write-tree


class _TooMany(Exception):
    pass


def built(root: _Tree, entries: list[Entry], store: Callable[[bytes], bytes]) -> _Tree | None:
    """The cache `root` with every tree it lacks computed from `entries` (the index's, sorted), as
    git's cache-tree update does, each one stored; None when more than BUILD_UP_TO were needed or
    they nest deeper than Python recurses (git's write-tree computes them then). A tree the cache
    holds is taken as it is (its count and id); `root` itself is not changed."""
    budget = [BUILD_UP_TO]
    try:
        return _build(root, b"", entries, 0, store, budget)
    except (_TooMany, RecursionError):
        return None


def _build(node: _Tree, prefix: bytes, entries: list[Entry], start: int, store: Callable[[bytes], bytes],
           budget: list[int]) -> _Tree:
    """`node`, the tree of the directory `prefix` whose entries begin at entries[start], valid: itself
    when it is, else a new node. In index order a directory `d` sorts as "d/", as it does in a tree."""
    if node.oid is not None:  # valid (_parse_trees and _invalidated keep no id on an invalid tree)
        return node
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooMany
    known = {d.name: d for d in node.down}
    body: list[bytes] = []
    down: list[_Tree] = []
    at, end = start, len(entries)
    while at < end and entries[at].name.startswith(prefix):
        rest = entries[at].name[len(prefix):]
        slash = rest.find(b"/")
        if slash < 0:
            body.append(b"%o %s\0%s" % (entries[at].mode, rest, entries[at].oid))
            at += 1
            continue
        child = _build(known.get(rest[:slash]) or _Tree(rest[:slash], -1, None), prefix + rest[:slash] + b"/",
                       entries, at, store, budget)
        at += child.count
        body.append(b"40000 %s\0%s" % (child.name, child.oid))
        down.append(child)
    made = _Tree(node.name, at - start, store(b"".join(body)))
    made.down = sorted(down, key=lambda d: (len(d.name), d.name))  # git's order of subtrees (subtree_name_cmp)
    return made


class _Tree:
    """One node of git's cache of trees: a directory, how many entries it spans (-1: invalid), its id."""

    __slots__ = ("name", "count", "oid", "down")  # pragma: no mutate (equivalent: memory only)

    def __init__(self, name: bytes, count: int, oid: bytes | None) -> None:
        self.name, self.count, self.oid = name, count, oid
        self.down: list[_Tree] = []


def _parse_trees(data: bytes) -> _Tree:
    """The TREE extension, depth first (without recursion: a directory may be nested thousands deep)."""
    pos = 0
    root: _Tree | None = None
    stack: list[list] = []  # [a node, how many of its subtrees are still to come]
    while root is None or stack:
        nul = data.index(b"\0", pos)
        newline = data.index(b"\n", nul)
        count, subtrees = (int(n) for n in data[nul + 1:newline].split(b" "))
        oid = data[newline + 1:newline + 21] if count >= 0 else None
        node = _Tree(data[pos:nul], count, oid)
        pos = newline + 1 + (20 if count >= 0 else 0)
        if stack:
            stack[-1][0].down.append(node)
            stack[-1][1] -= 1
            if not stack[-1][1]:
                stack.pop()
        else:
            root = node
        if subtrees:
            stack.append([node, subtrees])
    if pos != len(data):
        raise ValueError("bytes after the last tree")
    return root


def _invalidated(root: _Tree, name: bytes) -> _Tree:
    """`root` with every tree on the way to `name` invalid (computed again) and a subtree of that
    name gone: the nodes on that way are copied, `root` itself is not changed."""
    parts = name.split(b"/")
    top = node = _Tree(root.name, -1, None)
    top.down = list(root.down)
    for part in parts[:-1]:
        at = next((i for i, d in enumerate(node.down) if d.name == part), None)
        if at is None:
            return top
        copy = _Tree(part, -1, None)
        copy.down = list(node.down[at].down)
        node.down[at] = node = copy
    node.down = [d for d in node.down if d.name != parts[-1]]
    return top


def _serialise(root: _Tree) -> bytes:
    out: list[bytes] = []
    stack = [root]
    while stack:
        node = stack.pop()
        out.append(b"%s\0%d %d\n" % (node.name, node.count, len(node.down)))
        if node.count >= 0 and node.oid is not None:
            out.append(node.oid)
        stack.extend(reversed(node.down))
    return b"".join(out)


def differing(entries: list[Entry], changes: dict[bytes, Entry | None]) -> dict[bytes, Entry | None]:
    """Those of `changes` that change `entries` (sorted): a file read again to the very same entry is
    no change, and leaves the index (and its cache of trees) as it was."""
    def current(name: bytes) -> Entry | None:
        at = bisect_left(entries, name, key=_name)
        return entries[at] if at < len(entries) and entries[at].name == name else None
    return {name: new for name, new in changes.items() if current(name) != new}


def merged(old: list[Entry], changes: dict[bytes, Entry | None]) -> list[Entry]:
    """`old` (sorted) with each name in `changes` replaced, added (an Entry) or removed (None).

    A file and a directory cannot share a name: adding `d` removes `d/...`, adding `d/f` removes
    `d` (git's own rule, as update-index --replace applies it). A later snapshot changes a few of a
    kernel's 78,000 entries: they are found by bisection and the rest copied in slices, not looped
    over in Python (that loop and a sort took some 40 ms a snapshot there)."""
    drop: set[int] = set()

    def drop_name(name: bytes) -> None:
        at = bisect_left(old, name, key=_name)
        if at < len(old) and old[at].name == name:
            drop.add(at)
    for name, new in changes.items():
        drop_name(name)
        if new is None:  # pragma: no mutate (equivalent: a valid index holds nothing below a file's name)
            continue
        for directory in _directories(name):
            drop_name(directory)  # a file where a directory of `name` must be
        # every entry below `name/` ("0" is the byte after "/": the range is contiguous in this order)
        drop.update(range(bisect_left(old, name + b"/", key=_name), bisect_left(old, name + b"0", key=_name)))
    kept: list[Entry] = []
    start = 0
    for at in sorted(drop):
        kept += old[start:at]
        start = at + 1
    kept += old[start:]
    # A workspace changing while it was read can give both `d` (a symlink now) and `d/f` (read while `d`
    # was a directory): the file wins, as git's own --replace would have it.
    files = {name for name, new in changes.items() if new is not None}
    added = [e for e in changes.values() if e is not None and not _below(e.name, files)]
    if len(added) > _INSERT_UP_TO:
        kept += added
        kept.sort(key=_name)
    else:
        for e in added:
            insort(kept, e, key=_name)
    return kept


_INSERT_UP_TO = 64  # more new entries than this are sorted in at once (an insertion moves every entry after it)


def _name(entry: Entry) -> bytes:
    return entry.name


def _below(name: bytes, files: set[bytes]) -> bool:
    """Whether one of the directories on the way to `name` is one of `files`."""
    return any(directory in files for directory in _directories(name))


def _directories(name: bytes) -> list[bytes]:
    """The directories on the way to `name`: a/b/c -> a, a/b."""
    parts = name.split(b"/")
    return [b"/".join(parts[:i]) for i in range(1, len(parts))]
