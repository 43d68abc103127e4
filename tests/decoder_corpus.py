"""Files that take each path of the image and PDF decoders: every image filter pypdf hands to
Pillow (Flate in each colour space, DCT, JPX, CCITT, LZW, run length, chained filters, an inline
image, a soft mask, an inverted /Decode), text in each kind of font encoding, encrypted PDFs, and
the four image formats in their variants. tests/test_decoder_confinement.py reads each confined
and in Abhed's own process: what the confined child could not do (a module it would import, a
syscall the filter refuses) shows as a difference."""

from __future__ import annotations

import io
import zlib

from PIL import Image, TiffImagePlugin
from pypdf import PdfWriter
from pypdf._codecs._codecs import LzwCodec

from media_testing import image, pdf_of, text_pdf

W, H = 48, 32
HELVETICA = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def _picture(mode: str) -> Image.Image:
    picture = Image.new("RGB", (W, H), (30, 120, 200))
    for x in range(0, W, 6):
        picture.paste((x * 5 % 255, 200, 40), (x, 0, x + 3, H))
    return picture.convert(mode)


def _encoded(mode: str, fmt: str, **save) -> bytes:
    out = io.BytesIO()
    _picture(mode).save(out, fmt, **save)
    return out.getvalue()


def _ccitt() -> bytes:
    """Group 4 data of a bilevel picture: the strip of a TIFF that libtiff wrote."""
    tiff = Image.open(io.BytesIO(_encoded("1", "TIFF", compression="group4")))
    assert isinstance(tiff, TiffImagePlugin.TiffImageFile)
    offset, count = tiff.tag_v2[273][0], tiff.tag_v2[279][0]  # StripOffsets, StripByteCounts
    return _encoded("1", "TIFF", compression="group4")[offset:offset + count]


def _image_pdf(dictionary: str, data: bytes, extra: list[bytes] = ()) -> bytes:
    """A page that only draws one image XObject (object 4); `extra` objects follow from 6."""
    content = f"q {W} 0 0 {H} 0 0 cm /Im0 Do Q".encode()
    return pdf_of([b"<< /Type /Catalog /Pages 2 0 R >>",
                   b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                   f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {W} {H}] /Resources << /XObject << /Im0 4 0 R >> >> "
                   "/Contents 5 0 R >>".encode(),
                   f"<< /Type /XObject /Subtype /Image /Width {W} /Height {H} {dictionary} /Length {len(data)} >>\n"
                   "stream\n".encode() + data + b"\nendstream",
                   b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream", *extra])


def _raw(mode: str) -> bytes:
    return _picture(mode).tobytes()


def _run_length(data: bytes) -> bytes:
    out = bytearray()
    for start in range(0, len(data), 128):
        chunk = data[start:start + 128]
        out += bytes([len(chunk) - 1]) + chunk
    return bytes(out + b"\x80")


def _inline_image_pdf() -> bytes:
    data = _raw("RGB")[: 4 * 4 * 3]
    content = b"q 48 0 0 32 0 0 cm BI /W 4 /H 4 /CS /RGB /BPC 8 ID " + data + b"\nEI Q"
    return pdf_of([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                   b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 48 32] /Contents 4 0 R >>",
                   b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream"])


def _font_pdf(font: bytes, text: bytes, extra: list[bytes] = (), name: bytes = b"/F1") -> bytes:
    content = b"BT " + name + b" 12 Tf 72 720 Td " + text + b" Tj ET"
    return pdf_of([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                   b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << " + name +
                   b" 4 0 R >> >> /Contents 5 0 R >>", font,
                   b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream", *extra])


def _to_unicode(pairs: dict[int, str]) -> bytes:
    """A ToUnicode CMap (UTF-16BE targets) for two-byte codes."""
    lines = [f"<{code:04X}> <{text.encode('utf-16-be').hex().upper()}>" for code, text in pairs.items()]
    body = ("/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Test def /CMapType 2 def "
            "1 begincodespacerange <0000> <FFFF> endcodespacerange "
            f"{len(lines)} beginbfchar\n" + "\n".join(lines) + "\nendbfchar endcmap CMapName currentdict /CMap "
            "defineresource pop end end").encode()
    return b"<< /Length %d >>\nstream\n" % len(body) + body + b"\nendstream"


def _encrypted(algorithm: str) -> bytes:
    writer = PdfWriter(clone_from=io.BytesIO(text_pdf(["encrypted, readable without a password"])))
    writer.encrypt(user_password="", owner_password="owner", algorithm=algorithm)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pdfs() -> dict[str, bytes]:
    rgb, gray = _raw("RGB"), _raw("L")
    palette = bytes(range(0, 256, 64)) * 3
    smask = b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray /BitsPerComponent 8 " \
            b"/Filter /FlateDecode /Length %d >>\nstream\n" % (W, H, len(zlib.compress(gray))) + zlib.compress(gray) + \
            b"\nendstream"
    hexed = zlib.compress(rgb).hex().encode() + b">"
    return {
        "text, standard font": text_pdf(["Register map", "Timing (ns)"]),
        "text, ToUnicode UTF-16": _font_pdf(b"<< /Type /Font /Subtype /Type0 /BaseFont /X /Encoding /Identity-H "
                                            b"/DescendantFonts [] /ToUnicode 6 0 R >>", b"<00010002>",
                                            [_to_unicode({1: "\u00e9", 2: "\u4e2d"})]),
        "text, WinAnsi": _font_pdf(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
                                   b"(caf\\351 \\200)"),
        "text, MacRoman": _font_pdf(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica "
                                    b"/Encoding /MacRomanEncoding >>",
                                    b"(caf\\216)"),
        "text, UTF-16 operands": _font_pdf(HELVETICA, b"(\\376\\377\\000A\\000b) Tj (\\377\\376c\\000d\\000)"),
        "text, a name that is not UTF-8": _font_pdf(HELVETICA, b"(named)", name=b"/F#E9"),
        "encrypted RC4-128": _encrypted("RC4-128"),
        "encrypted AES-128": _encrypted("AES-128"),
        "encrypted AES-256": _encrypted("AES-256"),
        "flate RGB": _image_pdf("/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /FlateDecode", zlib.compress(rgb)),
        "flate gray, inverted": _image_pdf("/ColorSpace /DeviceGray /BitsPerComponent 8 /Filter /FlateDecode "
                                           "/Decode [1 0]", zlib.compress(gray)),
        "flate CMYK": _image_pdf("/ColorSpace /DeviceCMYK /BitsPerComponent 8 /Filter /FlateDecode",
                                 zlib.compress(_raw("CMYK"))),
        "flate 1-bit": _image_pdf("/ColorSpace /DeviceGray /BitsPerComponent 1 /Filter /FlateDecode",
                                  zlib.compress(_raw("1"))),
        "flate indexed": _image_pdf(f"/ColorSpace [/Indexed /DeviceRGB 3 <{palette.hex()}>] /BitsPerComponent 8 "
                                    "/Filter /FlateDecode", zlib.compress(bytes(i % 4 for i in range(W * H)))),
        "flate RGB with soft mask": _image_pdf("/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /FlateDecode "
                                               "/SMask 6 0 R", zlib.compress(rgb), [smask]),
        "hex + flate": _image_pdf("/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter [/ASCIIHexDecode /FlateDecode]",
                                  hexed),
        "run length": _image_pdf("/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /RunLengthDecode",
                                 _run_length(rgb)),
        "LZW": _image_pdf("/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /LZWDecode", LzwCodec().encode(rgb)),
        "DCT": _image_pdf("/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /DCTDecode", _encoded("RGB", "JPEG")),
        "DCT CMYK": _image_pdf("/ColorSpace /DeviceCMYK /BitsPerComponent 8 /Filter /DCTDecode",
                               _encoded("CMYK", "JPEG")),
        "JPX": _image_pdf("/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /JPXDecode", _encoded("RGB", "JPEG2000")),
        "CCITT group 4": _image_pdf(f"/ColorSpace /DeviceGray /BitsPerComponent 1 /Filter /CCITTFaxDecode "
                                    f"/DecodeParms << /K -1 /Columns {W} /Rows {H} /BlackIs1 true >>", _ccitt()),
        "inline image": _inline_image_pdf(),
    }


def _mpo() -> bytes:
    out = io.BytesIO()
    _picture("RGB").save(out, "MPO", save_all=True, append_images=[_picture("RGB").rotate(180)])
    return out.getvalue()


def pictures() -> dict[str, bytes]:
    gif = io.BytesIO()
    frames = [_picture("P"), _picture("RGB").rotate(90).resize((W, H)).convert("P")]
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:], transparency=0)
    return {"PNG": image("PNG", 640, 480), "PNG, large": image("PNG", 2400, 1800),
            "PNG RGBA": _encoded("RGBA", "PNG"), "PNG palette": _encoded("P", "PNG"), "PNG gray": _encoded("L", "PNG"),
            "JPEG": image("JPEG", 640, 480), "JPEG, large (draft)": image("JPEG", 3000, 2000, quality=90),
            "JPEG CMYK": _encoded("CMYK", "JPEG"), "JPEG MPO (a camera's)": _mpo(),
            "JPEG progressive": _encoded("RGB", "JPEG", progressive=True),
            "GIF animated, transparent": gif.getvalue(), "WebP": image("WEBP", 640, 480),
            "WebP lossless": _encoded("RGBA", "WEBP", lossless=True)}
