import io

import numpy as np
import pytest
from PIL import Image

from tests.helpers.images import encode, rgb_array, rgb_jpeg
from transforms.codecs.image import MAX_PIXELS, validate_image
from transforms.rejects import Reason, RejectError


def _decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)))


def test_rgb_jpeg_passes_through_untouched():
    data = rgb_jpeg(30, 20)
    image = validate_image(data)
    assert image.jpeg is data
    assert (image.height, image.width, image.transcoded) == (30, 20, False)


def test_png_is_transcoded_to_rgb_jpeg_close_to_source():
    pixels = np.full((20, 10, 3), (200, 40, 90), dtype=np.uint8)
    image = validate_image(encode(Image.fromarray(pixels), "PNG"))
    decoded = Image.open(io.BytesIO(image.jpeg))
    assert decoded.format == "JPEG" and decoded.mode == "RGB"
    assert image.transcoded and (image.height, image.width) == (20, 10)
    assert np.abs(np.asarray(decoded, dtype=int) - pixels).max() <= 3


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_non_rgb_jpeg_is_transcoded_to_rgb(mode):
    source = Image.fromarray(rgb_array(16, 16)).convert(mode)
    image = validate_image(encode(source, "JPEG"))
    assert image.transcoded
    assert Image.open(io.BytesIO(image.jpeg)).mode == "RGB"


def test_truncated_jpeg_is_rejected_as_truncated():
    data = rgb_jpeg(64, 64)
    with pytest.raises(RejectError) as caught:
        validate_image(data[: len(data) // 2])
    assert caught.value.reason == Reason.IMAGE_TRUNCATED


def test_empty_and_random_bytes_are_rejected():
    with pytest.raises(RejectError) as empty:
        validate_image(b"")
    assert empty.value.reason == Reason.IMAGE_EMPTY
    with pytest.raises(RejectError) as noise:
        validate_image(np.random.default_rng(1).bytes(2000))
    assert noise.value.reason == Reason.IMAGE_UNREADABLE


def test_decompression_bomb_header_is_rejected_without_decoding():
    side = int(MAX_PIXELS**0.5) + 100
    # A 1-bit PNG of this size compresses to almost nothing; its header claims > MAX_PIXELS.
    bomb = encode(Image.new("1", (side, side)), "PNG")
    assert len(bomb) < 200_000
    with pytest.raises(RejectError) as caught:
        validate_image(bomb)
    assert caught.value.reason == Reason.IMAGE_TOO_LARGE


def _smooth(height: int, width: int) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 255 // width, y * 255 // height, (x + y) * 127 // (x.max() + y.max())], -1)


def test_the_validation_decode_gives_the_thumbnail_only_when_asked():
    """The duplicate search's thumbnail comes from the same (DCT-scaled) decode as the check:
    close to the thumbnail of the full-size pixels, and the stored bytes do not change."""
    from transforms.duplicates import THUMB_SIDE, thumbnail

    data = encode(Image.fromarray(_smooth(600, 800).astype(np.uint8)), "JPEG", quality=95)
    assert validate_image(data).thumbnail is None
    image = validate_image(data, thumbnail=True)
    assert image.jpeg is data and not image.transcoded
    assert image.thumbnail.shape == (THUMB_SIDE, THUMB_SIDE, 3)
    assert image.thumbnail.dtype == np.uint8
    full = thumbnail(Image.open(io.BytesIO(data)))
    assert np.abs(image.thumbnail.astype(int) - full).mean() < 2


def test_a_transcoded_images_thumbnail_is_that_of_its_pixels():
    from transforms.duplicates import thumbnail

    png = encode(Image.fromarray(_smooth(90, 120).astype(np.uint8)), "PNG")
    image = validate_image(png, thumbnail=True)
    assert image.transcoded
    assert np.array_equal(image.thumbnail, thumbnail(Image.open(io.BytesIO(png))))


@pytest.mark.parametrize("kind", ["ICO", "PCX", "TGA", "PPM"])
def test_only_the_formats_segprep_reads_are_opened(kind):
    """Pillow is asked for JPEG, PNG, GIF, BMP, TIFF and WebP only, whatever the file is
    named: an ICO holding a huge PNG was decoded while opening, before the pixel limit
    could refuse it."""
    from transforms.codecs.mask import load_mask

    data = encode(Image.fromarray(rgb_array(16, 16)), kind)
    with pytest.raises(RejectError) as caught:
        validate_image(data)
    assert caught.value.reason == Reason.IMAGE_UNREADABLE
    assert "not an image segprep reads" in caught.value.detail
    with pytest.raises(RejectError) as caught:
        load_mask(data, "k_mask.png")
    assert caught.value.reason == Reason.MASK_UNREADABLE


@pytest.mark.parametrize("kind", ["GIF", "BMP", "TIFF", "WEBP"])
def test_the_other_formats_segprep_reads_are_transcoded(kind):
    image = validate_image(encode(Image.fromarray(rgb_array(16, 16)), kind))
    assert image.transcoded and (image.height, image.width) == (16, 16)


@pytest.mark.parametrize("mode", ["RGBA", "LA", "PA", "P"])
def test_transparency_is_composited_band_by_band_as_in_one_piece(mode):
    """on_background builds, 256 rows at a time, exactly what alpha_composite gives the
    whole image (the stored JPEG and the duplicate thumbnail depend on those pixels)."""
    from transforms.codecs.pixels import on_background

    rng = np.random.default_rng(5)
    if mode in ("PA", "P"):
        image = Image.fromarray(rng.integers(0, 16, (700, 90), np.uint8), "P")
        image.putpalette(rng.integers(0, 256, 768, np.uint8).tobytes())
        if mode == "PA":
            image = image.convert("PA")
            image.putalpha(Image.fromarray(rng.integers(0, 256, (700, 90), np.uint8)))
        else:
            image.info["transparency"] = 3
    else:
        bands = len(mode)
        image = Image.fromarray(rng.integers(0, 256, (700, 90, bands), np.uint8), mode)
    for colour in ((0, 0, 0), (255, 255, 255)):
        whole = Image.alpha_composite(
            Image.new("RGBA", image.size, (*colour, 255)), image.convert("RGBA")
        ).convert("RGB")
        assert np.array_equal(np.asarray(on_background(image, colour)), np.asarray(whole))
