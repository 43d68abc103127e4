"""Images for a model that takes them: decoded, downscaled to the model's limit, encoded as a data URL.

What the read tool (and a chat attachment) sends is never the file's bytes as they are: the image
is decoded by Pillow in a bounded child (common/isolate.py), checked against a pixel ceiling before any
pixel is decoded (a "decompression bomb" declares its size in its header), reduced to at most the
profile's pixel count, and re-encoded (PNG, or JPEG for photographs) so that it fits the bytes one
request may carry. Only PNG, JPEG, GIF and WebP are opened, by Pillow's decoders for exactly those
formats: nothing else in Pillow is reachable from a file in the workspace.
"""

from __future__ import annotations

import base64
import io
import warnings
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

from abhed.common import isolate

if TYPE_CHECKING:
    from PIL import Image

FORMATS = {"PNG image": "PNG", "JPEG image": "JPEG", "GIF image": "GIF", "WebP image": "WEBP"}
# The largest image decoded at all: 8000x5000. Pillow's own guard (MAX_IMAGE_PIXELS, about 89
# megapixels) warns at that size and refuses at twice it; a lower ceiling of ours keeps the decode
# within the child's memory bound (4 bytes a pixel) whatever Pillow's default becomes.
MAX_SOURCE_PIXELS = 40_000_000
MAX_FILE_BYTES = 64 * 1024 * 1024


def pillow() -> ModuleType:
    """PIL.Image with the four decoders, imported when first needed: no command pays for Pillow at
    start-up, and the parent imports it before it forks, so the confined child, which cannot
    import, finds them loaded; and finds no other (Image.preinit's BMP and PPM fail to import there)."""
    from PIL import GifImagePlugin, Image, JpegImagePlugin, PngImagePlugin, WebPImagePlugin  # noqa: F401, F811
    from PIL import MpoImagePlugin  # noqa: F401 (a camera's JPEG holding several pictures opens as MPO)
    Image.MAX_IMAGE_PIXELS = MAX_SOURCE_PIXELS
    return Image


@dataclass(frozen=True)
class ImageLimits:
    """What the model takes: images per request, pixels per image, bytes of image data per request."""

    max_images: int = 4
    max_pixels: int = 1024 * 1024
    max_bytes: int = 8 * 1024 * 1024  # of base64 text in one request, all images together


@dataclass(frozen=True)
class Prepared:
    """One image ready for the wire, and the facts the model is told about it."""

    url: str  # data:image/png;base64,...
    format: str  # of the file: PNG, JPEG, GIF, WEBP
    original: tuple[int, int]
    sent: tuple[int, int]
    sent_format: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def reduced(self) -> bool:
        return self.sent != self.original

    def line(self, path: str) -> str:
        """The text line that goes with the image."""
        w, h = self.original
        sw, sh = self.sent
        sent = f"sent as {sw}x{sh}" if self.reduced else "sent at full size"
        extra = "".join(f"; {note}" for note in self.notes)
        return (f"[image: {path}, {self.format} {w}x{h}, {sent} as {self.sent_format} ({len(self.url):,} bytes of "
                f"data){extra}]")


class ImageError(Exception):
    """The image cannot be shown; the message says why in words fit for the model."""


def prepare(data: bytes, limits: ImageLimits, max_bytes: int | None = None,
            bounds: isolate.Bounds = isolate.Bounds()) -> Prepared:
    """`data` (a PNG, JPEG, GIF or WebP file) as a data URL within `limits`, decoded in a child
    within `bounds`. `max_bytes` bounds this one image (default: the request's whole budget)."""
    if len(data) > MAX_FILE_BYTES:
        raise ImageError(f"it is {len(data):,} bytes, over the {MAX_FILE_BYTES:,}-byte limit for an image Abhed "
                         "decodes")
    pil = pillow()
    try:
        return isolate.run(_prepare, data, limits.max_pixels, max_bytes or limits.max_bytes, bounds=bounds,
                           returns=Prepared)
    except isolate.Unconfined as exc:
        raise ImageError(unconfined(exc)) from None
    except isolate.Exceeded as exc:
        raise ImageError(f"decoding it was stopped: {exc.what}. It may be built to exhaust whoever opens it")
    except pil.UnidentifiedImageError:
        raise ImageError("Pillow cannot decode it as a PNG, JPEG, GIF or WebP image: the file is damaged, or not "
                         "what its first bytes say") from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:  # Pillow's words for a broken file
        raise ImageError(f"it could not be decoded ({exc}); the file is damaged, truncated, or not what its "
                         "header says") from None


def unconfined(exc: isolate.Unconfined) -> str:
    """Why nothing was decoded: the decoder could not be confined on this host."""
    return (f"Abhed decodes images and PDFs only in a confined process, and this host refused the confinement "
            f"({exc.what}), so nothing was decoded")


def _too_large(pixels: str) -> ImageError:
    return ImageError(f"it is {pixels}, over the {MAX_SOURCE_PIXELS / 1e6:.0f}-megapixel limit Abhed decodes: a "
                      "decompression bomb, or an image far larger than a model can use")


def _prepare(data: bytes, max_pixels: int, max_bytes: int) -> Prepared:
    warnings.simplefilter("ignore")  # in the child: Pillow's warnings must not reach the user's terminal
    pil = pillow()
    try:
        opened = pil.open(io.BytesIO(data), formats=tuple(FORMATS.values()))
    except pil.DecompressionBombError:  # Pillow's own guard, at twice its limit: the header said so
        raise _too_large(f"more than {2 * MAX_SOURCE_PIXELS / 1e6:.0f} megapixels") from None
    with opened as image:
        return prepared(image, image.format or "?", data, max_pixels, max_bytes)


def prepared(image: Image.Image, source: str, data: bytes | None, max_pixels: int, max_bytes: int) -> Prepared:
    """An open image (from a file, or embedded in a PDF page) made ready for the wire. `data`: the
    file's bytes when they may be sent unchanged. Runs in a bounded child (common/isolate.py)."""
    lanczos = pillow().Resampling.LANCZOS
    original = image.size
    pixels = original[0] * original[1]
    if pixels > MAX_SOURCE_PIXELS:
        raise _too_large(f"{original[0]}x{original[1]} pixels ({pixels / 1e6:.0f} megapixels)")
    notes = []
    frames = getattr(image, "n_frames", 1)
    if frames > 1:
        notes.append(f"animated, {frames} frames: the first is sent")
    target = _fit(original, max_pixels)
    if source == "JPEG" and target != original:
        image.draft("RGB", target)  # decode at a reduced scale: less memory and time
    frame = image.convert("RGBA" if _has_alpha(image) else "RGB")
    if frame.size != target:
        frame = frame.resize(target, lanczos)
    photo = source == "JPEG"
    if data is not None and source in ("PNG", "JPEG") and target == original and _wire_size(data) <= max_bytes:
        encoded, fmt = data, source  # already fine as it is: no second encoding loss
    else:
        encoded, fmt = _encode(frame, photo)
    squeezed = False
    while _wire_size(encoded) > max_bytes and min(frame.size) > 16:
        if not photo and frame.mode == "RGB":
            photo = True  # a photograph kept as PNG: JPEG is far smaller
        else:
            frame = frame.resize((max(1, frame.width * 7 // 10), max(1, frame.height * 7 // 10)),
                                 lanczos)
            squeezed = True
        encoded, fmt = _encode(frame, photo)
    if _wire_size(encoded) > max_bytes:
        raise ImageError(f"even reduced to {frame.width}x{frame.height} it takes {_wire_size(encoded):,} bytes, over "
                         f"the {max_bytes:,} bytes of image data one request may carry")
    if squeezed:
        notes.append(f"reduced further to fit the {max_bytes:,}-byte limit of image data per request")
    url = f"data:image/{fmt.lower()};base64," + base64.b64encode(encoded).decode("ascii")
    return Prepared(url=url, format=source, original=original, sent=frame.size, sent_format=fmt, notes=tuple(notes))


def _wire_size(encoded: bytes) -> int:
    """Characters of the data URL for `encoded`: base64 and its prefix."""
    return (len(encoded) + 2) // 3 * 4 + 32


def _fit(size: tuple[int, int], max_pixels: int) -> tuple[int, int]:
    """`size` scaled down, keeping its aspect, to at most `max_pixels` pixels."""
    w, h = size
    if w * h <= max_pixels:
        return size
    scale = (max_pixels / (w * h)) ** 0.5
    nw, nh = max(1, int(w * scale)), max(1, int(h * scale))
    while nw * nh > max_pixels:  # rounding
        nw, nh = max(1, nw - 1), max(1, nh - 1)
    return nw, nh


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)


def _encode(frame: Image.Image, photo: bool) -> tuple[bytes, str]:
    out = io.BytesIO()
    if photo and frame.mode != "RGBA":
        frame.save(out, "JPEG", quality=85, optimize=True)
        return out.getvalue(), "JPEG"
    frame.save(out, "PNG")  # optimize=True would cost seconds for a few per cent
    return out.getvalue(), "PNG"
