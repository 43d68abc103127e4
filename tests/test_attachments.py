"""Chat attachments: a path typed or dropped onto the terminal (quoted, backslash-escaped, a file://
URI) naming an image or a PDF is attached; anything else stays text."""

from __future__ import annotations

import pytest

from abhed.cli.attachments import MAX_ATTACHMENTS, attach, candidates
from abhed.files.images import ImageLimits
from abhed.files.textfile import human_size
from media_testing import decoded, image, text_pdf

VISION = ImageLimits(max_images=2, max_pixels=100_000, max_bytes=4 * 1024 * 1024)


@pytest.fixture
def shot(tmp_path):
    path = tmp_path / "Screen Shot 1.png"
    path.write_bytes(image("PNG", 640, 400))
    return path


@pytest.mark.parametrize("form", ["'{p}'", '"{p}"', "{e}", "file://{u}", "{e},", "({e})"])
def test_every_form_a_terminal_pastes_a_dropped_file_in_is_recognised(shot, form):
    text = "why is this red? " + form.format(p=shot, e=str(shot).replace(" ", "\\ "),
                                             u=str(shot).replace(" ", "%20"))
    assert candidates(text) == [shot]


def test_an_image_is_attached_downscaled_with_a_line_for_the_human_and_the_model(shot):
    attached = attach(f"what is this? '{shot}'", VISION)
    [line] = attached.lines
    assert line.startswith(f"[attached image: {shot}, PNG 640x400, sent as ")
    assert attached.prompt == f"what is this? '{shot}'\n\n{line}"
    [picture] = attached.images
    assert picture["label"] == line and decoded(picture["url"]).width * decoded(picture["url"]).height <= 100_000


def test_a_text_only_model_gets_no_image_and_the_human_is_told(shot):
    attached = attach(f"see '{shot}'", None)
    assert attached.images == []
    size = human_size(shot.stat().st_size)
    assert attached.lines == [f"[not attached: {shot} is an image ({size}) and this model takes text only; describe "
                              "it in words]"]
    assert attached.prompt.endswith(attached.lines[0])


def test_a_pdf_is_attached_as_its_text(tmp_path):
    doc = tmp_path / "spec.pdf"
    doc.write_bytes(text_pdf(["Register map", "Timing diagram"]))
    attached = attach(f"summarise {doc}", None)
    assert attached.lines == [f"[attached PDF: {doc}, 2 of 2 pages as text]"]
    assert attached.prompt == (f"summarise {doc}\n\n[attached PDF: {doc}, 2 of 2 pages as text]\n[PDF: {doc}, 2 pages]\n"
                               "--- page 1 of 2 ---\nRegister map\n--- page 2 of 2 ---\nTiming diagram")


def test_what_cannot_be_attached_is_said_and_the_rest_stays_text(tmp_path, shot):
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\n1 0 obj\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("plain text")
    attached = attach(f"{broken} {notes} /no/such/file.png '{shot}'", VISION)
    assert attached.lines[0].startswith(f"[not attached: {broken} is a PDF, but pypdf could not parse it")
    assert attached.lines[1].startswith(f"[attached image: {shot}")
    assert len(attached.lines) == 2 and len(attached.images) == 1


def test_no_more_images_than_the_model_takes_and_no_more_than_four_attachments(tmp_path):
    paths = []
    for n in range(MAX_ATTACHMENTS + 1):
        paths.append(tmp_path / f"s{n}.png")
        paths[-1].write_bytes(image("PNG", 20 + n, 20))
    attached = attach(" ".join(str(p) for p in paths), VISION)
    assert len(attached.lines) == MAX_ATTACHMENTS and len(attached.images) == 2
    assert attached.lines[2] == f"[not attached: {paths[2]}: this model takes at most 2 images a request]"


def test_a_prompt_without_paths_is_unchanged():
    for text in ("fix the bug in /etc", "it's broken", "relative/path.png", ""):
        attached = attach(text, VISION)
        assert (attached.prompt, attached.images, attached.lines) == (text, [], [])


def test_a_file_too_large_to_open_is_named_not_read(tmp_path, monkeypatch):
    import abhed.files.images
    big = tmp_path / "huge.png"
    big.write_bytes(image("PNG", 10, 10) + b"\0" * 2048)
    monkeypatch.setattr(abhed.files.images, "MAX_FILE_BYTES", 1024)
    attached = attach(str(big), VISION)
    assert attached.lines == [f"[not attached: {big} is 2.1 KiB, over the 1.0 KiB Abhed opens]"]
    assert attached.images == []
