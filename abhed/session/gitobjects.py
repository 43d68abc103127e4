"""Objects of the shadow repository, written from bytes Abhed read itself and read back for undo.

Writing: a blob is what `git hash-object -w --stdin` would store (a loose object: zlib at git's
loose-object level 1 of "blob <size>\\0" + the bytes, named by the SHA-1 of that), written under a
temporary name in the object's directory and renamed into place, so a kill leaves either nothing or
the whole object. git is never handed a workspace path to read. A snapshot that reads many files
(checkpoint.PACK_FROM) gathers their objects into packs instead (`Pack`), which git's index-pack
names from their content: one file instead of one per object.

Reading: one `git cat-file --batch` for a whole undo, with a deadline (abhed.common.hostproc).
"""

from __future__ import annotations

import os
import secrets
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from hashlib import sha1
from pathlib import Path

from abhed.common import hostproc


class Missing(Exception):
    """An object the store should hold is not there (a damaged store)."""


def write_blob(objects: Path, data: bytes) -> bytes:
    """Store `data` as a blob in the object directory `objects`; its 20-byte id."""
    return write_object(objects, b"blob", data)


def write_object(objects: Path, kind: bytes, body: bytes) -> bytes:
    """Store an object of `kind` (blob, tree, commit) in the object directory `objects`; its 20-byte id."""
    header = b"%s %d\0" % (kind, len(body))
    oid = sha1(header + body).digest()
    name = oid.hex()
    directory = objects / name[:2]
    final = directory / name[2:]
    if final.exists():
        return oid
    temp = directory / f"tmp_obj_{secrets.token_hex(6)}"
    fd = _create(temp, 0o444, parents=False)
    try:
        compressor = zlib.compressobj(1)
        with os.fdopen(fd, "wb", closefd=False) as out:
            out.write(compressor.compress(header))
            out.write(compressor.compress(body))
            out.write(compressor.flush())
    finally:
        os.close(fd)
    os.rename(temp, final)
    return oid


# A pack's object types (git's pack format).
PACK_TYPES = {b"commit": 1, b"tree": 2, b"blob": 3}
PACK_BYTES = 64 << 20  # compressed objects a Pack holds in memory before it writes them out


def pack_entry(kind: bytes, body: bytes, level: int) -> bytes:
    """One object as a pack holds it: its type and size (git's varint), then its body through zlib."""
    size = len(body)
    head = bytearray([(PACK_TYPES[kind] << 4) | (size & 0x0F)])
    size >>= 4
    while size:
        head[-1] |= 0x80
        head.append(size & 0x7F)
        size >>= 7
    return bytes(head) + zlib.compress(body, level)


def write_pack_file(pack_dir: Path, entries: list[bytes]) -> Path:
    """`entries` (pack_entry's) as one pack file under `pack_dir`, not yet indexed; its path. git's
    index-pack then names every object from its content (so a pack holds nothing else), and writes
    the index that makes the pack part of the store."""
    data = b"".join([b"PACK", (2).to_bytes(4, "big"), len(entries).to_bytes(4, "big"), *entries])
    data += sha1(data).digest()
    pack_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = pack_dir / f"pack-{data[-20:].hex()}.pack"
    write_file(path, data)
    return path


class Pack:
    """Objects gathered into pack files instead of a loose file each: a first snapshot that reads a
    thousand files wrote a thousand loose objects, each a file created and renamed (two seconds on a
    slow disk: issue 34). `written()` writes what is held and names every pack file made, for the
    caller to index (git index-pack) before anything names their objects."""

    def __init__(self, pack_dir: Path, level: int = 1, limit: int = PACK_BYTES) -> None:
        self.pack_dir = pack_dir
        self.level = level
        self.limit = limit
        self._entries: list[bytes] = []
        self._held = 0
        self._ids: set[bytes] = set()
        self._files: list[Path] = []

    def add(self, kind: bytes, body: bytes) -> bytes:
        """Hold an object of `kind` (blob, tree, commit); its 20-byte id."""
        oid = sha1(b"%s %d\0" % (kind, len(body)) + body).digest()
        if oid not in self._ids:
            self._ids.add(oid)
            entry = pack_entry(kind, body, self.level)
            self._entries.append(entry)
            self._held += len(entry)
            if self._held > self.limit:
                self._write()
        return oid

    def written(self) -> list[Path]:
        """Every pack file made (what is still held written now), in the order written."""
        self._write()
        return self._files

    def _write(self) -> None:
        if self._entries:
            self._files.append(write_pack_file(self.pack_dir, self._entries))
            self._entries, self._held = [], 0


def read_loose(objects: Path, oid: str) -> tuple[bytes, bytes] | None:
    """(kind, body) of a loose object of the store; None when it is not stored loose (packed, or missing)."""
    try:
        data = zlib.decompress((objects / oid[:2] / oid[2:]).read_bytes())
    except (OSError, zlib.error):
        return None
    header, _, body = data.partition(b"\0")
    kind, _, size = header.partition(b" ")
    return (kind, body) if size.isdigit() and int(size) == len(body) else None


def write_file(path: Path, data: bytes) -> None:
    """Replace a small file of the store (a ref, a cache) atomically: a temporary name, then a rename.
    Not fsync'd, as git does not sync the loose objects a ref names: a power cut may lose the newest
    snapshots, and the next one starts from what is there."""
    temp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(6)}")
    fd = _create(temp, 0o600, parents=True)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(temp, path)


class Reader:
    """Objects read from a running `git cat-file --batch`."""

    def __init__(self, proc) -> None:
        self._in = proc.stdin
        self._out = proc.stdout

    def blob(self, oid: str) -> bytes:
        self._in.write(oid.encode() + b"\n")
        self._in.flush()
        header = self._out.readline()
        parts = header.split()
        if len(parts) != 3 or parts[1] != b"blob":
            said = header.decode("ascii", "replace").strip().removeprefix(oid).strip()
            raise Missing(f"{oid} (git cat-file says: {said or 'nothing'})")
        size = int(parts[2])
        data = self._out.read(size + 1)
        if len(data) != size + 1:
            raise Missing(f"{oid} (git cat-file stopped after {len(data)} of {size} bytes)")
        return data[:-1]


@contextmanager
def reader(git: Sequence[str], env: dict[str, str], timeout: float, pass_fds: Sequence[int] = ()) -> Iterator[Reader]:
    """A Reader over `git cat-file --batch` (`git`: the command up to the subcommand; `pass_fds`: the
    store's lock, which the child holds too)."""
    with hostproc.streaming([*git, "cat-file", "--batch"], timeout=timeout, env=env, pass_fds=pass_fds) as proc:
        yield Reader(proc)


def _create(temp: Path, mode: int, parents: bool) -> int:
    """A new file `temp` of the store, open for writing; its directories made (0700) only when missing:
    the open is tried first, since a mkdir of a directory that exists costs a syscall that takes the
    parent's lock, per object (a thousand loose objects copied at a first snapshot: issue 34)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(temp, flags, mode)
    except FileNotFoundError:
        temp.parent.mkdir(parents=parents, exist_ok=True, mode=0o700)
        return os.open(temp, flags, mode)
