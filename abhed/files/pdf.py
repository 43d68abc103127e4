"""The text of a PDF, page by page (pypdf), parsed in a bounded child (common/isolate.py).

A page with no extractable text is usually a scan: its text is a picture. For a model that takes
images, such a page is offered as the images embedded in it (a scanned page is one embedded image,
the scan itself). Abhed does not rasterise pages: a PDF renderer (pdfium, poppler) is a large
native dependency, and for the pages that need it, the scans, the embedded image is the page.

Encrypted PDFs are opened when they need no password (an owner password only restricts printing
or copying; pypdf decrypts those with the empty user password); otherwise the error says so.
"""

from __future__ import annotations

import io
import logging
import warnings
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from abhed.common import isolate
from abhed.files import images

if TYPE_CHECKING:
    import pypdf

# pypdf's own ceilings on what one stream may inflate to (default 75 MB), lowered to what a page
# of text needs: a compression bomb stops there, inside the child's memory bound.
STREAM_LIMIT = 32 * 1024 * 1024
MAX_FILE_BYTES = 128 * 1024 * 1024  # the largest PDF opened at all (datasheets with photos run to tens of MB)


@dataclass
class Page:
    number: int
    text: str
    images: list[images.Prepared] = field(default_factory=list)
    skipped_images: list[str] = field(default_factory=list)  # why an embedded image was not sent


@dataclass
class Document:
    total: int
    pages: list[Page]


# What pypdf imports only inside the functions that need it (a stream's filters, a page's images,
# an inline image, RC4 where OpenSSL lacks it): the confined child can import nothing
# (common/confine.py), so these are loaded before the fork; and the codecs pypdf decodes with by
# name (CPython decodes utf-8, latin-1, ascii and utf-16 without a codec module). Both lists are
# checked against pypdf's source by tests/test_decoder_confinement.py.
LAZY_MODULES = ("pypdf.filters", "pypdf.generic._image_inline", "pypdf.generic._image_xobject",
                "pypdf._crypt_providers._fallback")
CODECS = ("ascii", "latin-1", "charmap", "utf-8", "utf-16", "utf-16-be", "utf-16-le")
# The Pillow plugin pypdf opens a page's JPX images with, besides those of files/images.py (whose
# MPO plugin brings TIFF, for CCITT and CMYK images: tests/decoder_corpus.py reads both kinds).
PAGE_IMAGE_MODULES = ("PIL.Jpeg2KImagePlugin",)


def load(vision: bool) -> None:
    """Import pypdf and what it imports lazily (and, for `vision`, Pillow with the plugins a page's
    images need) here, in Abhed, before the fork. Not at start-up: pypdf brings xml.dom."""
    import codecs
    import importlib

    for name in LAZY_MODULES + (PAGE_IMAGE_MODULES if vision else ()):  # pragma: no mutate (always: only slower for a model that takes text)
        importlib.import_module(name)
    for name in CODECS:
        codecs.lookup(name)
    if vision:  # pragma: no mutate (always: only slower for a model that takes text)
        images.pillow()


class PdfError(Exception):
    """The PDF cannot be read; the message says why, in words fit for the model."""


def read_pages(data: bytes, first: int, limit: int, budget: int, vision: images.ImageLimits | None,
               bounds: isolate.Bounds = isolate.Bounds()) -> Document:
    """Pages `first`.. (1-based) until `limit` pages or about `budget` characters of text; the
    images of textless pages when `vision` is given (at most vision.max_images)."""
    load(vision is not None)
    from pypdf.errors import FileNotDecryptedError, PyPdfError
    try:
        return isolate.run(_read, data, first, limit, budget, vision, bounds=bounds, returns=Document,
                           parts=(Page, images.Prepared))
    except isolate.Unconfined as exc:
        raise PdfError(images.unconfined(exc)) from None
    except isolate.Exceeded as exc:
        raise PdfError(f"reading it was stopped: {exc.what}. The file may be built to loop or to exhaust "
                       "whoever opens it") from None
    except PdfError:
        raise
    except FileNotDecryptedError:
        raise PdfError("it is encrypted with a password, so its text cannot be read") from None
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError,
            OSError, AssertionError) as exc:
        raise PdfError(f"pypdf could not parse it ({type(exc).__name__}: {str(exc)[:200]}); the file is damaged "
                       "or truncated") from None


def _read(data: bytes, first: int, limit: int, budget: int, vision: images.ImageLimits | None) -> Document:
    import pypdf  # noqa: F811 (imported by read_pages before the fork)
    from pypdf.errors import FileNotDecryptedError
    warnings.simplefilter("ignore")  # in the child: pypdf's and Pillow's complaints must not reach the terminal
    logging.getLogger("pypdf").setLevel(logging.CRITICAL)
    pypdf.overwrite_configuration(zlib_maximum_output_length=STREAM_LIMIT, lzw_maximum_output_length=STREAM_LIMIT,
                                  run_length_maximum_output_length=STREAM_LIMIT,
                                  maximum_declared_stream_length=STREAM_LIMIT)
    reader = pypdf.PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise FileNotDecryptedError("a user password is needed")
    total = len(reader.pages)
    pages: list[Page] = []
    used, sent = 0, 0
    for number in range(first, min(total, first + limit - 1) + 1):
        if pages and used >= budget:
            break
        page = reader.pages[number - 1]
        text = page.extract_text() or ""
        found = Page(number, text.strip("\n"))
        used += len(found.text) + 40
        if vision is not None and not found.text.strip():
            sent += _page_images(page, found, vision, vision.max_images - sent)
        pages.append(found)
    return Document(total, pages)


def _page_images(page: pypdf.PageObject, found: Page, vision: images.ImageLimits, room: int) -> int:
    """Attach the images embedded in `page`, up to `room` of them; how many were attached."""
    from pypdf.errors import PdfReadError, PyPdfError
    try:
        embedded = list(page.images)
    except (PyPdfError, ValueError, KeyError, TypeError, OSError, NotImplementedError) as exc:
        found.skipped_images.append(f"its images could not be extracted ({type(exc).__name__})")
        return 0
    for index, item in enumerate(embedded):
        if len(found.images) >= room:
            found.skipped_images.append(f"{len(embedded) - index} more image(s) not sent (at most "
                                        f"{vision.max_images} images per request)")
            break
        try:
            picture = item.image
            if picture is None:
                raise PdfReadError("no image data")
            found.images.append(images.prepared(picture, "PDF page image", None, vision.max_pixels,
                                                vision.max_bytes // vision.max_images))
        except (images.ImageError, PyPdfError, ValueError, KeyError, TypeError, OSError, NotImplementedError) as exc:
            found.skipped_images.append(f"image {index + 1} could not be decoded ({str(exc)[:120]})")
    return len(found.images)
