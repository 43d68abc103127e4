"""Files the human attaches to a chat prompt: an image or a PDF named by its path in the text.

A path typed, or pasted by dragging a file onto the terminal (terminals paste it quoted, with
backslash escapes, or as a file:// URI), that names an existing PNG, JPEG, GIF, WebP or PDF file
is attached: an image is sent beside the prompt (for a model that takes images), a PDF as its
text, page by page, as read would show it. The prompt keeps its words; a line per attachment is
added to it, and the same lines are what the chat shows the human. A path that is not such a file
is left as it is: the model reads it as text, as before.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from abhed.files import images, pdf
from abhed.files.filetype import SNIFF_BYTES, sniff
from abhed.files.textfile import human_size
from abhed.tools.media import render_pdf

MAX_ATTACHMENTS = 4
PDF_BUDGET = 20_000  # characters of a PDF's text put into the prompt; read shows the rest


@dataclass
class Attached:
    prompt: str  # the text to send: the human's words, then a block per attachment
    images: list[dict[str, str]] = field(default_factory=list)  # {"url", "label"}, for Agent.run
    lines: list[str] = field(default_factory=list)  # one line per attachment, for the human


def attach(text: str, vision: images.ImageLimits | None) -> Attached:
    """The prompt with the files it names attached (see the module doc)."""
    found = Attached(prompt=text)
    blocks: list[str] = []
    for path in candidates(text)[:MAX_ATTACHMENTS]:
        block, line = _one(path, vision, found)
        found.lines.append(line)
        blocks.append(block)
    if blocks:
        found.prompt = text + "\n\n" + "\n".join(blocks)
    return found


def candidates(text: str) -> list[Path]:
    """Existing image or PDF files named in `text` by an absolute path, a ~ path or a file:// URI."""
    try:
        words = shlex.split(text)
    except ValueError:  # an unbalanced quote: the human's text, not a pasted path
        words = text.split()
    seen: list[Path] = []
    for word in words:
        for form in (word, word.rstrip(",.;:!?)>]"), word.lstrip("(<[").rstrip(",.;:!?)>]")):
            path = _as_path(form)
            if path is not None and path not in seen and _kind(path) is not None:
                seen.append(path)
                break
    return seen


def _as_path(word: str) -> Path | None:
    if word.startswith("file://"):
        word = unquote(urlparse(word).path)
    word = os.path.expanduser(word)
    return Path(word) if word.startswith("/") else None


def _kind(path: Path) -> str | None:
    """"image" or "pdf" for a regular file of those kinds, else None."""
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as handle:
            kind = sniff(handle.read(SNIFF_BYTES))
    except OSError:
        return None
    if kind.family == "pdf" or kind.name in images.FORMATS:
        return kind.family
    return None


def _one(path: Path, vision: images.ImageLimits | None, found: Attached) -> tuple[str, str]:
    """The block added to the prompt for `path`, and the line shown to the human."""
    kind = _kind(path)
    limit = pdf.MAX_FILE_BYTES if kind == "pdf" else images.MAX_FILE_BYTES
    try:
        size = path.stat().st_size
        if size > limit:
            note = f"[not attached: {path} is {human_size(size)}, over the {human_size(limit)} Abhed opens]"
            return note, note
        data = path.read_bytes()
    except OSError as exc:
        note = f"[not attached: {path}: {exc.strerror or exc}]"
        return note, note
    if kind == "pdf":
        return _pdf(path, data, vision, found)
    if vision is None:
        note = (f"[not attached: {path} is an image ({human_size(len(data))}) and this model takes text only; "
                "describe it in words]")
        return note, note
    if len(found.images) >= vision.max_images:
        note = f"[not attached: {path}: this model takes at most {vision.max_images} images a request]"
        return note, note
    try:
        prepared = images.prepare(data, vision, vision.max_bytes // vision.max_images)
    except images.ImageError as exc:
        note = f"[not attached: {path}: {exc}]"
        return note, note
    line = prepared.line(str(path)).replace("[image:", "[attached image:", 1)
    found.images.append({"url": prepared.url, "label": line})
    return line, line


def _pdf(path: Path, data: bytes, vision: images.ImageLimits | None, found: Attached) -> tuple[str, str]:
    left = vision.max_images - len(found.images) if vision is not None else 0
    room = images.ImageLimits(left, vision.max_pixels, vision.max_bytes) if vision is not None and left > 0 else None
    try:
        doc = pdf.read_pages(data, 1, 10_000, PDF_BUDGET, room)
    except pdf.PdfError as exc:
        note = f"[not attached: {path} is a PDF, but {exc}]"
        return note, note
    text, parts, shown = render_pdf(room, path, doc, PDF_BUDGET)
    found.images.extend(parts)
    pages = f"{shown} of {doc.total} page{'s' * (doc.total != 1)}"
    line = f"[attached PDF: {path}, {pages} as text" + (f", {len(parts)} page image(s)" if parts else "") + "]"
    return f"{line}\n{text}", line
