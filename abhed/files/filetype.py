"""What kind of file this is, from its first bytes: text the tools may show, or something they refuse.

Extensions lie and models guess; magic numbers don't. Only the head of the file is looked at, so
sniffing a 1 GB file costs one small read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SNIFF_BYTES = 8192


@dataclass(frozen=True)
class Kind:
    name: str  # e.g. "PNG image", "ELF executable", "text"
    family: str  # "text" | "image" | "pdf" | "binary" | "utf16"
    detail: str = ""  # dimensions, version: what the model can be told instead of the bytes


# (offset, magic, name, family): checked in order, first hit wins.
_MAGIC: tuple[tuple[int, bytes, str, str], ...] = (
    (0, b"\x89PNG\r\n\x1a\n", "PNG image", "image"),
    (0, b"\xff\xd8\xff", "JPEG image", "image"),
    (0, b"GIF87a", "GIF image", "image"),
    (0, b"GIF89a", "GIF image", "image"),
    (0, b"BM", "BMP image", "image"),
    (0, b"II*\x00", "TIFF image", "image"),
    (0, b"MM\x00*", "TIFF image", "image"),
    (0, b"\x00\x00\x01\x00", "ICO icon", "image"),
    (0, b"%PDF-", "PDF document", "pdf"),
    (0, b"\x7fELF", "ELF executable or library", "binary"),
    (0, b"\xcf\xfa\xed\xfe", "Mach-O binary", "binary"),
    (0, b"\xfe\xed\xfa\xcf", "Mach-O binary", "binary"),
    (0, b"\xca\xfe\xba\xbe", "Java class file or Mach-O universal binary", "binary"),
    (0, b"MZ", "Windows PE executable", "binary"),
    (0, b"\x00asm", "WebAssembly module", "binary"),
    (0, b"PK\x03\x04", "zip archive (also jar, docx, xlsx, wheel)", "binary"),
    (0, b"PK\x05\x06", "zip archive (empty)", "binary"),
    (0, b"\x1f\x8b", "gzip archive", "binary"),
    (0, b"BZh", "bzip2 archive", "binary"),
    (0, b"\xfd7zXZ\x00", "xz archive", "binary"),
    (0, b"\x28\xb5\x2f\xfd", "zstd archive", "binary"),
    (0, b"7z\xbc\xaf\x27\x1c", "7-Zip archive", "binary"),
    (0, b"Rar!\x1a\x07", "RAR archive", "binary"),
    (257, b"ustar", "tar archive", "binary"),
    (0, b"SQLite format 3\x00", "SQLite database", "binary"),
    (0, b"ID3", "MP3 audio", "binary"),
    (0, b"OggS", "Ogg media", "binary"),
    (0, b"fLaC", "FLAC audio", "binary"),
    (0, b"wOFF", "WOFF font", "binary"),
    (0, b"wOF2", "WOFF2 font", "binary"),
    (0, b"\x00\x01\x00\x00\x00", "TrueType font", "binary"),
    (0, b"OTTO", "OpenType font", "binary"),
)

TEXT = Kind("text", "text")


def sniff(head: bytes) -> Kind:
    """Classify a file by its first SNIFF_BYTES bytes."""
    if head.startswith(b"RIFF") and len(head) >= 12:
        sub = head[8:12]
        if sub == b"WEBP":
            return Kind("WebP image", "image")
        return Kind(f"RIFF media ({sub.decode('latin-1').strip()})", "binary")
    if head[4:8] == b"ftyp":
        return Kind("MP4/QuickTime media", "binary")
    for offset, magic, name, family in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return Kind(name, family, _detail(name, head))
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return Kind("UTF-16 text", "utf16")
    if b"\x00" in head:
        return Kind("binary data (contains NUL bytes)", "binary")
    return TEXT


def _detail(name: str, head: bytes) -> str:
    """Dimensions for images, version for PDFs: enough for the model to know what it has."""
    try:
        if name == "PNG image" and head[12:16] == b"IHDR":
            w, h = struct.unpack(">II", head[16:24])
            return f"{w}x{h} pixels"
        if name == "GIF image":
            w, h = struct.unpack("<HH", head[6:10])
            return f"{w}x{h} pixels"
        if name == "BMP image":
            w, h = struct.unpack("<ii", head[18:26])
            return f"{w}x{abs(h)} pixels"
        if name == "JPEG image":
            return _jpeg_size(head)
        if name == "PDF document":
            version = head[5:8].decode("ascii", "replace")
            return f"PDF version {version}"
    except struct.error:
        return ""
    return ""


def _jpeg_size(head: bytes) -> str:
    i = 2
    while i + 9 < len(head):
        if head[i] != 0xFF:
            return ""
        marker = head[i + 1]
        length = struct.unpack(">H", head[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", head[i + 5 : i + 9])
            return f"{w}x{h} pixels"
        i += 2 + length
    return ""
