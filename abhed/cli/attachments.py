"""Files the human attaches to a chat prompt: an image or a PDF named by its path in the text.

A path typed, or pasted by dragging a file onto the terminal (terminals paste it quoted, with
backslash escapes, or as a file:// URI), that names an existing PNG, JPEG, GIF, WebP or PDF file
is attached: an image is sent beside the prompt (for a model that takes images), a PDF as its
text, page by page, as read would show it. The prompt keeps its words; a line per attachment is
added to it, and the same lines are what the chat shows the human. A path that is not such a file
is left as it is: the model reads it as text, as before.

A relative path (`shot.png`, `docs/spec.pdf`) is the human's: it is looked for where they started
the chat, then at the workspace's root. A file inside the workspace is opened beneath it with no
symlink followed (files/beneath.py): the model can write there, and a `shot.png` it made a symlink
to a file elsewhere is not a file the human meant to send. One outside is opened as named.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from abhed.files import beneath, images, pdf
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


def attach(text: str, vision: images.ImageLimits | None, cwd: Path | None = None,
           workspace: Path | None = None) -> Attached:
    """The prompt with the files it names attached (see the module doc). `cwd`, `workspace`: where
    a relative path is looked for, in that order (none: relative paths are not looked for)."""
    found = Attached(prompt=text)
    blocks: list[str] = []
    for path in candidates(text, cwd, workspace)[:MAX_ATTACHMENTS]:
        block, line = _one(path, vision, found, workspace)
        found.lines.append(line)
        blocks.append(block)
    if blocks:
        found.prompt = text + "\n\n" + "\n".join(blocks)
    return found


def candidates(text: str, cwd: Path | None = None, workspace: Path | None = None) -> list[Path]:
    """Existing image or PDF files named in `text` by an absolute path, a ~ path, a file:// URI or a
    path relative to `cwd` or `workspace`."""
    try:
        words = shlex.split(text)
    except ValueError:  # an unbalanced quote: the human's text, not a pasted path
        words = text.split()
    seen: list[Path] = []
    for word in words:
        for form in (word, word.rstrip(",.;:!?)>]"), word.lstrip("(<[").rstrip(",.;:!?)>]")):
            path = next((p for p in _as_paths(form, cwd, workspace) if _kind(p, workspace) is not None), None)
            if path is not None and path not in seen:
                seen.append(path)
                break
    return seen


def _as_paths(word: str, cwd: Path | None, workspace: Path | None) -> list[Path]:
    """Where `word` may name a file: itself when absolute, else below each of `cwd` and `workspace`
    (only a word with a file name's dot: not every word of a sentence is looked up)."""
    if word.startswith("file://"):
        word = unquote(urlparse(word).path)
    word = os.path.expanduser(word)
    if word.startswith("/"):
        return [Path(word)]
    if not word or "." not in Path(word).name:
        return []
    return [Path(os.path.normpath(base / word)) for base in (cwd, workspace) if base is not None]


def _open(path: Path, workspace: Path | None) -> int:
    """A descriptor of `path`: beneath the workspace without following symlinks when inside it."""
    if workspace is not None and path.is_relative_to(workspace):
        return beneath.open_beneath(workspace, path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO does not block
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)


def _read(path: Path, workspace: Path | None, limit: int) -> tuple[int, bytes]:
    """The file's size and (when at most `limit`) its bytes; OSError when it is not a regular file."""
    with beneath.opened(_open(path, workspace)) as fd:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return info.st_size, (beneath.read_fd(fd, limit) if info.st_size <= limit else b"")


def _kind(path: Path, workspace: Path | None = None) -> str | None:
    """"image" or "pdf" for a regular file of those kinds, else None."""
    try:
        with beneath.opened(_open(path, workspace)) as fd:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            kind = sniff(os.read(fd, SNIFF_BYTES))
    except OSError:
        return None
    if kind.family == "pdf" or kind.name in images.FORMATS:
        return kind.family
    return None


def _one(path: Path, vision: images.ImageLimits | None, found: Attached,
         workspace: Path | None = None) -> tuple[str, str]:
    """The block added to the prompt for `path`, and the line shown to the human."""
    kind = _kind(path, workspace)
    limit = pdf.MAX_FILE_BYTES if kind == "pdf" else images.MAX_FILE_BYTES
    try:
        size, data = _read(path, workspace, limit)
        if size > limit:
            note = f"[not attached: {path} is {human_size(size)}, over the {human_size(limit)} Abhed opens]"
            return note, note
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
