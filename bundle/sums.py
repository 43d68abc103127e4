"""SHA256SUMS in `sha256sum` format: one "<64 hex>  <relative path>" line per file, sorted by path.

The bundle's file list is closed: every regular file except SHA256SUMS and its signature must be
listed, and anything else (a symlink, a device, a path that climbs out) is refused, so that a file
slipped onto the stick is caught rather than installed or ignored.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath

SUMS = "SHA256SUMS"
SIGNATURE = "SHA256SUMS.minisig"
UNLISTED = frozenset({SUMS, SIGNATURE})
_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")
# Names install.sh can handle without quoting surprises: no newline, backslash, or leading dash.
_SAFE = re.compile(r"[A-Za-z0-9._+@=,~][A-Za-z0-9._+@=,~ -]*")


class SumsError(ValueError):
    """A bundle whose file list is wrong; the message names the file."""


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def check_name(rel: str) -> str:
    """`rel` if it is a safe relative path inside the bundle, else SumsError."""
    parts = PurePosixPath(rel).parts
    if not parts or rel.startswith("/") or any(p in (".", "..") or not _SAFE.fullmatch(p) for p in parts) \
            or "/".join(parts) != rel:
        raise SumsError(f"{rel!r}: not a plain relative path inside the bundle (no '..', no leading '/' or '-', "
                        f"no backslash or newline).")
    return rel


def bundle_files(root: Path) -> list[str]:
    """Every file under `root` as a sorted relative path, except SHA256SUMS and its signature."""
    found = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            raise SumsError(f"{rel}: not a regular file (a symlink or a device); a bundle holds only plain files.")
        if path.is_file() and rel not in UNLISTED:
            found.append(check_name(rel))
    return found


def dumps(root: Path, files: list[str]) -> str:
    return "".join(f"{sha256_file(root / rel)}  {rel}\n" for rel in sorted(files))


def loads(text: str) -> dict[str, str]:
    """{relative path: hex digest}, or SumsError naming the line that is wrong."""
    listed: dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), 1):
        if line == "" and number == text.count("\n") + 1:
            break
        match = _LINE.fullmatch(line)
        if not match:
            raise SumsError(f"{SUMS} line {number}: not '<sha256 in hex>  <file>'.")
        rel = check_name(match.group(2))
        if rel in listed:
            raise SumsError(f"{SUMS} line {number}: {rel} is listed twice.")
        if rel in UNLISTED:
            raise SumsError(f"{SUMS} line {number}: {rel} cannot list itself or its signature.")
        listed[rel] = match.group(1)
    return listed
