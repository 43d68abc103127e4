"""read of what is not plain text: a PDF's text page by page, and images for a model that sees them.

The observation stays text first (rule 3: the same shape every time): a line per image saying
what was sent (path, format, original and sent size), the pages under `--- page N of M ---`
headers, and the usual notes. The images themselves travel beside the text (ToolResult.images,
data URLs) and the model adapter places them on the wire as the profile says.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from abhed.common import isolate
from abhed.files import images, pdf
from abhed.common.errors import ToolError
from abhed.files.filetype import Kind
from abhed.files.textfile import human_size
from abhed.tools.base import LINE_CHARS, ToolContext, ToolResult, cut_line, ok


def _whole(handle: BinaryIO, path: Path, st: os.stat_result, limit: int, what: str) -> bytes:
    if st.st_size > limit:
        raise ToolError(f"{path} is a {what} of {human_size(st.st_size)}, over the {human_size(limit)} Abhed opens. "
                        "Ask the user for a smaller copy, or work on it with bash.")
    handle.seek(0)
    return handle.read(limit + 1)[:limit]


def bounds(ctx: ToolContext) -> isolate.Bounds:
    files = ctx.settings.files
    return isolate.Bounds(seconds=files.parse_max_seconds, memory=files.parse_max_memory)


def image_part(prepared: images.Prepared, label: str) -> dict[str, str]:
    """An image as ToolResult.images (and the event log) holds it."""
    return {"url": prepared.url, "label": label}


def read_image(ctx: ToolContext, path: Path, handle: BinaryIO, st: os.stat_result, kind: Kind) -> ToolResult:
    vision = ctx.vision
    assert vision is not None
    if kind.name not in images.FORMATS:
        raise ToolError(f"{path} is a {kind.name}{', ' + kind.detail if kind.detail else ''}. Abhed shows the model "
                        "PNG, JPEG, GIF and WebP images only. Convert a copy with bash (e.g. `convert "
                        f"{path} /tmp/copy.png` where ImageMagick is installed), then read the copy.",
                        file_type=kind.name)
    data = _whole(handle, path, st, images.MAX_FILE_BYTES, kind.name)
    try:
        prepared = images.prepare(data, vision, bounds=bounds(ctx))
    except images.ImageError as exc:
        raise ToolError(f"{path} is a {kind.name}, {human_size(st.st_size)}, but it cannot be shown: {exc}. Nothing "
                        "was sent. If the user needs it seen, ask them for a smaller or re-saved copy.",
                        file_type=kind.name) from None
    ctx.session.remember(path, None, st.st_size, st.st_mtime_ns)
    line = prepared.line(str(path))
    result = ok(line, path=str(path), size=st.st_size, file_type=kind.name, image_original=list(prepared.original),
                image_sent=list(prepared.sent), reduced=prepared.reduced)
    result.images = [image_part(prepared, line)]
    return result


def read_pdf(ctx: ToolContext, path: Path, handle: BinaryIO, st: os.stat_result, offset: int, limit: int,
             budget: int) -> ToolResult:
    data = _whole(handle, path, st, pdf.MAX_FILE_BYTES, "PDF document")
    try:
        doc = pdf.read_pages(data, offset, limit, budget, ctx.vision, bounds(ctx))
    except pdf.PdfError as exc:
        raise ToolError(_pdf_advice(path, str(exc)), file_type="PDF document") from None
    if doc.total and offset > doc.total:
        raise ToolError(f"offset {offset} is past the end of {path}: it has {doc.total} pages (for a PDF, offset and "
                        f"limit count pages). Use an offset from 1 to {doc.total}, or omit offset to read from the "
                        "start.", total_pages=doc.total)
    ctx.session.remember(path, None, st.st_size, st.st_mtime_ns)
    text, parts, shown = render_pdf(ctx.vision, path, doc, budget)
    facts = {"path": str(path), "size": st.st_size, "file_type": "PDF document", "total_pages": doc.total}
    if not doc.pages:
        return ok(f"[PDF: {path}, {human_size(st.st_size)}, has no pages]", **facts, pages_shown=0)
    result = ok(text, **facts, first_page=doc.pages[0].number, last_page=doc.pages[shown - 1].number,
                pages_shown=shown)
    result.images = parts
    return result


def render_pdf(vision: images.ImageLimits | None, path: Path, doc: pdf.Document, budget: int
                ) -> tuple[str, list[dict[str, str]], int]:
    """The observation's text, the images shown with it, and how many pages it shows."""
    out = [f"[PDF: {path}, {doc.total} page{'s' * (doc.total != 1)}]"]
    parts: list[dict[str, str]] = []
    used = len(out[0])
    shown = 0
    cut_page = None
    for page in doc.pages:
        body = "\n".join(cut_line(line, LINE_CHARS) for line in page.text.split("\n")) if page.text.strip() else ""
        block = [f"--- page {page.number} of {doc.total} ---"]
        if body:
            block.append(body)
        else:
            block.append(_textless(vision, page))
        for prepared in page.images:
            line = prepared.line(f"{path} page {page.number}")
            block.append(line)
            parts.append(image_part(prepared, line))
        text = "\n".join(block)
        if used + len(text) > budget:
            if shown:
                break
            keep = max(0, budget - used - 200)
            text = text[:keep]
            cut_page = (page.number, keep, len(body))
        out.append(text)
        used += len(text) + 1
        shown += 1
    if cut_page:
        number, keep, whole = cut_page
        out.append(f"[page {number} is too long to show whole: cut after {keep} of its {whole} characters. Extract it "
                   f"with bash if needed, e.g. pdftotext -f {number} -l {number} {path} - | tail -c +{keep}]")
    first, last = doc.pages[0].number, doc.pages[shown - 1].number
    if first > 1 or last < doc.total:
        out.append(f"[truncated: showing pages {first}-{last} of {doc.total}. Use offset/limit to read more "
                   "(for a PDF they count pages).]")
    return "\n".join(out), parts, shown


def _textless(vision: images.ImageLimits | None, page: pdf.Page) -> str:
    note = "[no extractable text on this page: it is probably scanned, or only drawings"
    if page.images:
        note += f"; its {len(page.images)} embedded image{'s' * (len(page.images) != 1)} (the scan) sent below"
    elif vision is None:
        note += "; this model takes text only, so its image cannot be shown. Ask the user what it says if it matters"
    else:
        note += "; it has no embedded image Abhed could send"
    if page.skipped_images:
        note += " (" + "; ".join(page.skipped_images) + ")"
    return note + "]"


def _pdf_advice(path: Path, why: str) -> str:
    if "encrypted" in why:
        return (f"{path} is a PDF, but {why}. Abhed cannot decrypt it without the password and does not guess. Ask "
                "the user for an unencrypted copy (e.g. qpdf --decrypt --password=PASSWORD in.pdf out.pdf, run by "
                "someone who knows the password), then read that.")
    return (f"{path} is a PDF, but {why}. Ask the user for an intact copy; if `pdftotext` is installed, it may still "
            f"get text out of it: pdftotext {path} - | head -200.")
