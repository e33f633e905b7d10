import io

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from tests.helpers.images import blob_mask, encode
from tests.helpers.mat_files import mat_bytes
from transforms.codecs.mask import (
    _largest_error,
    _thresholds_back,
    binarize,
    encode_mask,
    load_mask,
)
from transforms.format.features import MASK_THRESHOLD
from transforms.rejects import Reason, RejectError


def decode_mask_threshold(encoded: bytes) -> np.ndarray:
    """Boolean foreground of a stored mask, as a reader sees it."""
    return np.asarray(Image.open(io.BytesIO(encoded)).convert("L")) >= MASK_THRESHOLD


def test_mat_v5_mask_loads_as_2d():
    mask = blob_mask(30, 20)
    loaded = load_mask(mat_bytes(mask=mask), "k_mask.mat")
    np.testing.assert_array_equal(loaded, mask)


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
@pytest.mark.parametrize("seed", range(4))
def test_binary_mask_survives_encoding_exactly(fmt, seed):
    mask = blob_mask(60, 45, seed)
    for binary in (False, True):  # True: the record's path, which skips the JPEG's decode
        encoded = encode_mask(binarize(mask), fmt, binary=binary)
        np.testing.assert_array_equal(decode_mask_threshold(encoded), mask.astype(bool))


def test_binarize_accepts_0_1_and_0_255_and_bool():
    mask = blob_mask()
    expected = mask * 255
    for variant in (mask, mask * 255, mask.astype(bool), mask.astype(np.float64)):
        np.testing.assert_array_equal(binarize(variant), expected)


@pytest.mark.parametrize("shape", [(600, 800), (800, 600), (3, 257), (5, 512), (1, 700), (700, 1)])
def test_a_column_major_0_1_mask_scales_to_the_same_row_major_pixels(shape):
    """MATLAB's column-major masks are scaled in strips of columns: every pixel must match
    the plain scaling, strip edges and a last partial strip included, in row-major order."""
    values = (np.random.default_rng(sum(shape)).random(shape) < 0.4).astype(np.uint8)
    scaled = binarize(np.asfortranarray(values))
    assert scaled.flags.c_contiguous
    np.testing.assert_array_equal(scaled, values * np.uint8(255))


@pytest.mark.parametrize("values", [np.array([[0, 1], [2, 0]]), np.array([[0.0, 0.5], [1.0, 1.0]])])
def test_non_binary_mask_is_rejected_not_degraded(values):
    with pytest.raises(RejectError) as caught:
        binarize(values)
    assert caught.value.reason == Reason.MASK_VALUES


def test_nan_mask_is_rejected():
    with pytest.raises(RejectError) as caught:
        binarize(np.array([[0.0, np.nan], [1.0, 0.0]]))
    assert caught.value.reason == Reason.MASK_VALUES
    assert "NaN" in caught.value.detail


def test_3d_mask_is_rejected():
    with pytest.raises(RejectError) as caught:
        load_mask(mat_bytes(mask=np.zeros((4, 4, 3), dtype=np.uint8)), "k.mat")
    assert caught.value.reason == Reason.MASK_NOT_2D


def test_variable_choice():
    mask = blob_mask()
    # No `mask` variable but a single 2-D candidate: used.
    np.testing.assert_array_equal(
        load_mask(mat_bytes(seg=mask, name=np.array(["x"])), "k.mat"), mask
    )
    # Two candidates and no --mask_key: rejected, naming both.
    with pytest.raises(RejectError) as caught:
        load_mask(mat_bytes(a=mask, b=mask), "k.mat")
    assert caught.value.reason == Reason.MASK_VARIABLE and "'a'" in caught.value.detail
    # --mask_key picks one; a missing one is rejected.
    np.testing.assert_array_equal(load_mask(mat_bytes(a=mask, b=1 - mask), "k.mat", "b"), 1 - mask)
    with pytest.raises(RejectError) as missing:
        load_mask(mat_bytes(a=mask), "k.mat", "gt")
    assert missing.value.reason == Reason.MASK_VARIABLE


def test_png_masks_grey_and_palette():
    mask = blob_mask()
    np.testing.assert_array_equal(
        load_mask(encode(Image.fromarray(mask * 255), "PNG"), "k.png"), mask * 255
    )
    palette = Image.fromarray(mask, mode="L").convert("P")
    palette.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    assert set(np.unique(load_mask(encode(palette, "PNG"), "k_mask.png"))) <= {0, 1}


@pytest.mark.parametrize("data", [b"", b"this is a text file, not MATLAB\n" * 20])
def test_unreadable_mat_is_rejected(data):
    with pytest.raises(RejectError) as caught:
        load_mask(data, "k_mask.mat")
    assert caught.value.reason in (Reason.MASK_EMPTY, Reason.MASK_UNREADABLE)


def test_truncated_mat_is_rejected():
    data = mat_bytes(mask=blob_mask(80, 60))
    with pytest.raises(RejectError) as caught:
        load_mask(data[: len(data) // 2], "k.mat")
    assert caught.value.reason == Reason.MASK_UNREADABLE


def _first_quality_that_thresholds_back(mask: np.ndarray) -> bytes | None:
    """The JPEG encode_mask should store, found the plain way: threshold the mask and both
    decodes readers make (accurate, and the fast inverse DCT), compare."""
    for quality in (95, 100):
        encoded = encode(Image.fromarray(mask, mode="L"), "JPEG", quality=quality)
        fast = simplejpeg.decode_jpeg(encoded, colorspace="GRAY", fastdct=True)[..., 0]
        if np.array_equal(decode_mask_threshold(encoded), mask >= 128) and np.array_equal(
            fast >= 128, mask >= 128
        ):
            return encoded
    return None


def _grey_masks() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    square = {}
    # On 0: 127 and 128 fail both qualities (the fast inverse DCT), 200 passes at 95; 130
    # on 100 fails at quality 95 and passes at 100.
    for value, background in ((127, 0), (128, 0), (200, 0), (130, 100)):
        mask = np.full((40, 40), background, dtype=np.uint8)
        mask[10:30, 10:30] = value
        square[f"square of {value} on {background}"] = mask
    return {
        **square,
        "blob": blob_mask(60, 45) * np.uint8(255),
        "noise near 128": rng.integers(118, 138, size=(32, 32), dtype=np.uint8),  # fails both
        "uniform noise": rng.integers(0, 256, size=(32, 32), dtype=np.uint8),
    }


@pytest.mark.parametrize("name", sorted(_grey_masks()))
def test_jpeg_quality_choice_is_the_plain_thresholded_comparison(name):
    mask = _grey_masks()[name]
    expected = _first_quality_that_thresholds_back(mask)
    if expected is None:
        with pytest.raises(RejectError) as caught:
            encode_mask(mask, "jpeg")
        assert caught.value.reason == Reason.MASK_VALUES
    else:
        assert encode_mask(mask, "jpeg") == expected


def test_the_quality_choice_corpus_has_each_outcome():
    outcomes = set()
    for mask in _grey_masks().values():
        expected = _first_quality_that_thresholds_back(mask)
        q95 = encode(Image.fromarray(mask, mode="L"), "JPEG", quality=95)
        outcomes.add("reject" if expected is None else "95" if expected == q95 else "100")
    assert outcomes == {"95", "100", "reject"}


def test_binarize_rejects_every_value_between_0_and_255():
    for value in (1, 2, 127, 128, 254):
        mask = np.array([[0, 255], [value, 255]], dtype=np.uint8)
        with pytest.raises(RejectError) as caught:
            binarize(mask)
        assert caught.value.reason == Reason.MASK_VALUES
        assert str(value) in caught.value.detail
    np.testing.assert_array_equal(binarize(np.full((2, 2), 255, np.uint8)), np.full((2, 2), 255))


@pytest.mark.parametrize("where", [140, 300, -40])
def test_corrupt_compressed_mat_variable_is_unreadable(where):
    """A broken zlib stream inside a MAT v5 file is a reject, whichever inflater reads it."""
    data = bytearray(mat_bytes(mask=blob_mask(60, 45)))
    data[where : where + 24] = bytes(range(24))  # the zlib header or the deflate data
    with pytest.raises(RejectError) as caught:
        load_mask(bytes(data), "k_mask.mat")
    assert caught.value.reason == Reason.MASK_UNREADABLE


def _hard_binary_masks() -> dict[str, np.ndarray]:
    """0/255 masks with the most high-frequency energy a JPEG block can hold."""
    rng = np.random.default_rng(11)
    rows, cols = np.mgrid[:48, :64]
    return {
        "noise": rng.integers(0, 2, size=(48, 64), dtype=np.uint8) * np.uint8(255),
        "checkerboard": ((rows + cols) % 2 * 255).astype(np.uint8),
        "stripes": (cols % 2 * 255).astype(np.uint8),
        "lone pixels": ((rows % 8 == 3) & (cols % 8 == 4)).astype(np.uint8) * np.uint8(255),
        "blob": blob_mask(64, 48) * np.uint8(255),
    }


@pytest.mark.parametrize("quality", [100, 95, 90, 85, 50])
def test_the_jpeg_error_bound_holds_on_the_hardest_binary_masks(quality):
    """encode_mask skips the decode when the quantisation table bounds every pixel's error
    below 128: the bound must hold on masks built to make JPEG's errors largest."""
    for name, mask in _hard_binary_masks().items():
        encoded = encode(Image.fromarray(mask, mode="L"), "JPEG", quality=quality)
        with Image.open(io.BytesIO(encoded)) as decoded:
            bound = _largest_error(decoded)
            error = np.abs(np.asarray(decoded, dtype=np.int16) - mask).max()
        assert error <= bound, (name, int(error), bound)
        assert (bound < 128) == (quality >= 90), bound  # JPEG_QUALITIES' 95 needs no decode


def test_a_table_too_coarse_for_the_bound_is_checked_by_decoding():
    """At quality 10 the bound says nothing: the stored JPEG is decoded and compared, and
    a noise mask that no longer thresholds back is found out."""
    mask = _hard_binary_masks()["noise"]
    encoded = encode(Image.fromarray(mask, mode="L"), "JPEG", quality=10)
    assert _largest_error(Image.open(io.BytesIO(encoded))) >= 128
    assert not np.array_equal(decode_mask_threshold(encoded), mask >= 128)
    assert not _thresholds_back(encoded, mask, binary=True)


def test_a_mask_the_fast_inverse_dct_decodes_wrong_is_refused_as_jpeg():
    """Blocks of two diagonal white quadrants: Pillow's accurate decode is exact at quality
    95, but the fast integer inverse DCT (simplejpeg's fastdct, tf.io.decode_jpeg's default)
    flips half the pixels. Stored, every reader would see another mask; so it is a reject
    that names --mask_format png, and an ordinary mask still decodes clean both ways."""
    block = np.zeros((8, 8), np.uint8)
    block[:4, :4] = block[4:, 4:] = 255
    checkered = np.tile(block, (8, 8))
    with pytest.raises(RejectError) as caught:
        encode_mask(checkered, "jpeg", binary=True)
    assert caught.value.reason == Reason.MASK_VALUES and "png" in caught.value.detail
    blob = binarize(blob_mask(64, 48))
    encoded = encode_mask(blob, "jpeg", binary=True)
    fast = simplejpeg.decode_jpeg(encoded, colorspace="GRAY", fastdct=True)[..., 0]
    assert int(np.bitwise_xor(fast, blob).max()) < 64
