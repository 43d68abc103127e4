"""read of images and PDFs (spec §2: "Images/PDFs: return as structured content if the model supports
it, else describe and refuse"), with real files made by the tests (media_testing.py)."""

from __future__ import annotations

import pytest

from abhed.files.images import ImageLimits
from media_testing import (FORMATS, cyclic_pdf, decoded, encrypted_pdf, image, png_bomb, scanned_pdf, text_pdf,
                           time_bomb_pdf)


@pytest.fixture
def seeing(tools):
    """The tools of an agent whose model takes images (what Agent sets from the profile)."""
    tools.ctx.vision = ImageLimits(max_images=4, max_pixels=1024 * 1024, max_bytes=8 * 1024 * 1024)
    return tools


# -- images, for a model that takes them ----------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("size", [(64, 48), (1024, 1024), (3000, 2000)])
def test_an_image_is_sent_as_a_data_url_within_the_pixel_limit_with_a_line_naming_it(seeing, ws, fmt, size):
    path = ws / f"shot.{fmt.lower()}"
    path.write_bytes(image(fmt, *size))
    result = seeing("read", path=str(path))
    assert not result.is_error, result.content
    assert len(result.images) == 1
    sent = decoded(result.images[0]["url"])
    w, h = size
    assert sent.width * sent.height <= 1024 * 1024
    assert abs(sent.width / sent.height - w / h) < 0.01  # the aspect is kept
    kept = (w, h) == sent.size
    assert result.content == result.images[0]["label"]
    assert result.content.startswith(f"[image: {path}, {fmt} {w}x{h}, ")
    assert ("sent at full size" in result.content) == kept
    assert (f"sent as {sent.width}x{sent.height}" in result.content) == (not kept)
    assert result.metadata["reduced"] == (not kept) and result.metadata["image_original"] == [w, h]
    assert seeing.session.last_read(path) is not None  # it counts as read: write may now replace it


def test_an_image_that_fits_is_sent_byte_for_byte(seeing, ws):
    data = image("JPEG", 640, 480, quality=70)
    (ws / "photo.jpg").write_bytes(data)
    url = seeing("read", path=str(ws / "photo.jpg")).images[0]["url"]
    import base64
    assert url.startswith("data:image/jpeg;base64,") and base64.b64decode(url.split(",", 1)[1]) == data


def test_an_animated_gif_sends_its_first_frame_and_says_so(seeing, ws):
    from PIL import Image
    import io
    frames = [Image.new("RGB", (40, 30), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:])
    (ws / "anim.gif").write_bytes(out.getvalue())
    result = seeing("read", path=str(ws / "anim.gif"))
    assert "animated, 3 frames: the first is sent" in result.content
    assert decoded(result.images[0]["url"]).convert("RGB").getpixel((5, 5)) == (255, 0, 0)


def test_an_image_over_the_byte_budget_is_reduced_further_and_says_so(seeing, ws):
    import os
    from PIL import Image
    import io
    noise = Image.frombytes("RGB", (1000, 1000), os.urandom(3_000_000))  # incompressible
    out = io.BytesIO()
    noise.save(out, "PNG")
    (ws / "noise.png").write_bytes(out.getvalue())
    seeing.ctx.vision = ImageLimits(max_images=1, max_pixels=1024 * 1024, max_bytes=200_000)
    result = seeing("read", path=str(ws / "noise.png"))
    assert len(result.images[0]["url"]) <= 200_000
    assert "reduced further to fit the 200,000-byte limit of image data per request" in result.content


def test_other_image_kinds_are_refused_with_a_way_to_convert(seeing, ws):
    from PIL import Image
    Image.new("RGB", (30, 20)).save(ws / "old.bmp")
    err = seeing.err("read", path=str(ws / "old.bmp"))
    assert f"{ws / 'old.bmp'} is a BMP image, 30x20 pixels" in err
    assert "PNG, JPEG, GIF and WebP images only" in err and f"convert {ws / 'old.bmp'} /tmp/copy.png" in err


def test_a_damaged_image_gets_an_instruction_not_a_traceback(seeing, ws):
    data = image("PNG", 300, 300)
    (ws / "cut.png").write_bytes(data[: len(data) // 2])
    err = seeing.err("read", path=str(ws / "cut.png"))
    assert f"{ws / 'cut.png'} is a PNG image" in err and "cannot be shown" in err and "Nothing was sent" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("side,said", [(7000, "7000x7000 pixels (49 megapixels)"), (20_000, "more than 80 megapixels")])
def test_a_decompression_bomb_is_refused_before_its_pixels_are_decoded(seeing, ws, side, said):
    (ws / "bomb.png").write_bytes(png_bomb(side))
    err = seeing.err("read", path=str(ws / "bomb.png"))
    assert f"it is {said}, over the 40-megapixel limit Abhed decodes: a decompression bomb" in err
    assert seeing.session.last_read(ws / "bomb.png") is None


# -- images, for a text-only model --------------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_text_only_model_still_gets_the_description_and_refusal(tools, ws, fmt):
    (ws / "x.img").write_bytes(image(fmt, 320, 200))
    result = tools("read", path=str(ws / "x.img"))
    assert result.is_error and not result.images
    assert f"{ws / 'x.img'} is a {FORMATS[fmt]}" in result.content
    assert "This model endpoint takes text only, so Abhed cannot show the image" in result.content


# -- PDFs ---------------------------------------------------------------------------------------


def test_a_pdf_is_read_as_text_page_by_page(tools, ws):
    (ws / "spec.pdf").write_bytes(text_pdf(["Datasheet\nVcc 3.3 V", "Pinout\nPin 1 GND", "Timing"]))
    result = tools("read", path=str(ws / "spec.pdf"))
    assert result.content == (f"[PDF: {ws / 'spec.pdf'}, 3 pages]\n--- page 1 of 3 ---\nDatasheet\nVcc 3.3 V\n"
                              "--- page 2 of 3 ---\nPinout\nPin 1 GND\n--- page 3 of 3 ---\nTiming")
    assert result.metadata["total_pages"] == 3 and result.metadata["pages_shown"] == 3
    assert tools.session.last_read(ws / "spec.pdf") is not None


def test_offset_and_limit_count_pages_with_the_usual_truncation_note(tools, ws):
    (ws / "long.pdf").write_bytes(text_pdf([f"page text {n}" for n in range(1, 11)]))
    out = tools.ok("read", path=str(ws / "long.pdf"), offset=4, limit=2)
    assert out == (f"[PDF: {ws / 'long.pdf'}, 10 pages]\n--- page 4 of 10 ---\npage text 4\n--- page 5 of 10 ---\n"
                   "page text 5\n[truncated: showing pages 4-5 of 10. Use offset/limit to read more (for a PDF they "
                   "count pages).]")


def test_an_offset_past_the_last_page_says_how_many_pages_there_are(tools, ws):
    (ws / "two.pdf").write_bytes(text_pdf(["a", "b"]))
    err = tools.err("read", path=str(ws / "two.pdf"), offset=5)
    assert err == (f"offset 5 is past the end of {ws / 'two.pdf'}: it has 2 pages (for a PDF, offset and limit count "
                   "pages). Use an offset from 1 to 2, or omit offset to read from the start.")


def test_pages_stop_at_the_output_budget_with_the_truncation_note(make_tools, ws):
    tools = make_tools(max_output_chars=5000)
    (ws / "big.pdf").write_bytes(text_pdf(["\n".join(f"line {n} of page {p}" + " x" * 20 for n in range(40))
                                           for p in range(1, 8)]))
    out = tools.ok("read", path=str(ws / "big.pdf"))
    assert len(out) <= 5000
    assert out.endswith("of 7. Use offset/limit to read more (for a PDF they count pages).]")
    assert "[truncated: showing pages 1-" in out


def test_a_scanned_page_gets_a_note_for_a_text_only_model(tools, ws):
    (ws / "scan.pdf").write_bytes(scanned_pdf())
    result = tools("read", path=str(ws / "scan.pdf"))
    assert not result.is_error and not result.images
    assert ("[no extractable text on this page: it is probably scanned, or only drawings; this model takes text only, "
            "so its image cannot be shown. Ask the user what it says if it matters]") in result.content


def test_a_scanned_page_is_sent_as_its_image_to_a_model_that_sees(seeing, ws):
    (ws / "scan.pdf").write_bytes(scanned_pdf(1240, 1754))
    result = seeing("read", path=str(ws / "scan.pdf"))
    assert len(result.images) == 1
    sent = decoded(result.images[0]["url"])
    assert sent.width * sent.height <= 1024 * 1024
    assert "its 1 embedded image (the scan) sent below" in result.content
    assert f"[image: {ws / 'scan.pdf'} page 1, PDF page image 1240x1754, sent as {sent.width}x{sent.height}" \
        in result.content


def test_a_password_protected_pdf_gets_an_instruction(tools, ws):
    (ws / "locked.pdf").write_bytes(encrypted_pdf("s3cret", ["classified"]))
    err = tools.err("read", path=str(ws / "locked.pdf"))
    assert err.startswith(f"{ws / 'locked.pdf'} is a PDF, but it is encrypted with a password")
    assert "Ask the user for an unencrypted copy" in err and "qpdf --decrypt" in err and "classified" not in err


def test_a_pdf_encrypted_with_only_an_owner_password_is_read(tools, ws):
    (ws / "restricted.pdf").write_bytes(encrypted_pdf("", ["printing restricted, reading allowed"]))
    assert "printing restricted, reading allowed" in tools.ok("read", path=str(ws / "restricted.pdf"))


def test_a_pdf_whose_page_tree_loops_is_refused_as_damaged(tools, ws):
    (ws / "loop.pdf").write_bytes(cyclic_pdf())
    err = tools.err("read", path=str(ws / "loop.pdf"))
    assert f"{ws / 'loop.pdf'} is a PDF, but pypdf could not parse it" in err and "cyclic" in err
    assert f"pdftotext {ws / 'loop.pdf'} - | head -200" in err


def test_a_pdf_built_to_take_minutes_is_stopped_at_the_time_bound(make_tools, ws):
    tools = make_tools(parse_max_seconds=1)
    data = time_bomb_pdf()
    assert len(data) < 40_000
    (ws / "slow.pdf").write_bytes(data)
    err = tools.err("read", path=str(ws / "slow.pdf"))
    assert err.startswith(f"{ws / 'slow.pdf'} is a PDF, but reading it was stopped: it took more than 1 seconds")
    assert "built to loop or to exhaust whoever opens it" in err


def test_a_truncated_pdf_gets_an_instruction(tools, ws):
    data = text_pdf(["whole"])
    (ws / "cut.pdf").write_bytes(data[:60])
    err = tools.err("read", path=str(ws / "cut.pdf"))
    assert "is a PDF, but pypdf could not parse it" in err and "damaged or truncated" in err


def test_the_tool_description_says_offset_and_limit_are_pages_for_a_pdf():
    from abhed.tools import BY_NAME
    assert "for a PDF, offset and limit count pages, not lines" in BY_NAME["read"].description


def test_a_pdf_stream_that_inflates_to_gigabytes_is_cut_inside_the_bounds(make_tools, ws):
    import zlib
    from media_testing import pdf_of
    bomb = zlib.compress(b"\0" * (512 * 1024 * 1024), 9)  # 512 MiB of nothing in about 500 KB
    data = pdf_of([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                   b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] /Contents 4 0 R >>",
                   b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(bomb) + bomb + b"\nendstream"])
    (ws / "bomb.pdf").write_bytes(data)
    tools = make_tools(parse_max_memory=256 * 1024 * 1024)
    result = tools("read", path=str(ws / "bomb.pdf"))
    # pypdf stops inflating at pdf.STREAM_LIMIT (32 MiB), inside the child's memory bound: no text
    assert not result.is_error and "--- page 1 of 1 ---\n[no extractable text on this page" in result.content


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

MAGIC = [b"%PDF-1.7\n", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF89a", b"RIFF\x10\x00\x00\x00WEBP"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=st.sampled_from(MAGIC), body=st.binary(max_size=2000))
def test_garbage_behind_a_media_header_gets_an_instruction_never_a_traceback(seeing, ws, head, body):
    (ws / "fuzz.bin").write_bytes(head + body)
    result = seeing("read", path=str(ws / "fuzz.bin"))
    assert result.metadata.get("error_kind") != "internal", result.content
    assert "Traceback" not in result.content
    if result.is_error:
        assert str(ws / "fuzz.bin") in result.content
