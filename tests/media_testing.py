"""Real images and PDFs made by the tests: Pillow writes the images (and the scanned-style PDF),
pypdf encrypts, and the text PDFs are written object by object, as small as a PDF can be."""

from __future__ import annotations

import io
import zlib

from PIL import Image
from pypdf import PdfWriter

FORMATS = {"PNG": "PNG image", "JPEG": "JPEG image", "GIF": "GIF image", "WEBP": "WebP image"}


def image(fmt: str, width: int, height: int, colour: tuple[int, int, int] = (200, 40, 40), **save) -> bytes:
    out = io.BytesIO()
    picture = Image.new("RGB", (width, height), colour)
    for x in range(0, width, max(1, width // 8)):  # some detail, so sizes differ by content
        picture.paste((x % 255, 90, 160), (x, 0, min(width, x + 2), height))
    picture.save(out, fmt, **save)
    return out.getvalue()


def decoded(url: str) -> Image.Image:
    import base64
    assert url.startswith("data:image/") and ";base64," in url
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1], validate=True)))


def pdf_of(objects: list[bytes]) -> bytes:
    """A PDF of these objects (numbered from 1; object 1 the catalog), with a correct xref table."""
    out, offsets = [b"%PDF-1.4\n"], []
    for number, body in enumerate(objects, 1):
        offsets.append(sum(len(part) for part in out))
        out.append(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = sum(len(part) for part in out)
    out.append(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    out += [f"{offset:010d} 00000 n \n".encode() for offset in offsets]
    out.append(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return b"".join(out)


def _stream(data: bytes, compress: bool = False) -> bytes:
    if compress:
        data = zlib.compress(data, 9)
        return b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"
    return b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def text_pdf(pages: list[str]) -> bytes:
    """One page per string, its lines in Helvetica."""
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, text in enumerate(pages):
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                       f"/Contents {5 + 2 * i} 0 R >>".encode())
        lines = ["BT /F1 12 Tf 72 720 Td 14 TL"]
        lines += [f"({line.replace(chr(92), chr(92) * 2).replace('(', '[').replace(')', ']')}) Tj T*"
                  for line in text.split("\n")]
        objects.append(_stream("\n".join(lines + ["ET"]).encode()))
    return pdf_of(objects)


def scanned_pdf(width: int = 1240, height: int = 1754) -> bytes:
    """A page that is only a picture, as a scanner makes it (Pillow writes the image as the page)."""
    out = io.BytesIO()
    Image.open(io.BytesIO(image("PNG", width, height, (250, 250, 245)))).save(out, "PDF")
    return out.getvalue()


def encrypted_pdf(user_password: str, pages: list[str]) -> bytes:
    writer = PdfWriter(clone_from=io.BytesIO(text_pdf(pages)))
    writer.encrypt(user_password=user_password, owner_password="owner-secret", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def cyclic_pdf() -> bytes:
    """A page tree that contains itself: a reader that walks it naively never ends."""
    return pdf_of([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
                   b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] >>"])


def time_bomb_pdf(operators: int = 1_000_000) -> bytes:
    """A few KB that inflate to a content stream of a million text operators: minutes of parsing."""
    content = b"BT /F1 1 Tf " + b"(a) Tj 1 0 Td\n" * operators + b"ET"
    return pdf_of([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                   b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] /Resources << /Font << /F1 5 0 R >> >> "
                   b"/Contents 4 0 R >>", _stream(content, compress=True),
                   b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"])


def png_bomb(side: int = 20_000) -> bytes:
    """A PNG of side x side one-bit pixels: tens of KB on disk, gigabytes once decoded as RGBA."""
    out = io.BytesIO()
    Image.new("1", (side, side)).save(out, "PNG")
    return out.getvalue()
