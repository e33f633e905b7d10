"""Class-id masks: every source reads exactly, every bad value is a reject naming it."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from beam_pipeline.errors import usage_error
from tests.helpers.images import blob_mask, encode, rgb_jpeg
from tests.helpers.mat_files import mat_bytes, mat_v73_bytes
from transforms.codecs.class_mask import (
    DEFAULT_IGNORE_INDEX,
    ClassMaskSettings,
    check_class_ids,
    class_mask_settings,
    encode_class_mask,
    load_class_mask,
    parse_class_names,
    parse_colormap,
)
from transforms.record_spec import RecordSpec
from transforms.rejects import Reason, RejectError
from transforms.settings_error import SettingError, as_flag

VOC = ClassMaskSettings("classes", 21)
COLOURS = ((0, 0, 0), (128, 0, 0), (0, 128, 0), (0, 0, 128), (128, 128, 0))
COLOUR_MAP = tuple((f"c{i}", colour) for i, colour in enumerate(COLOURS))
COLOURED = class_mask_settings("classes", colormap=COLOUR_MAP)


def _ids(height: int = 30, width: int = 20, top: int = 21, seed: int = 0, ignore: int = 255):
    """Random class ids below `top`, plus a few ignore pixels."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, top, size=(height, width))
    ids[rng.random((height, width)) < 0.05] = ignore
    return ids


def decode_class_mask(encoded: bytes) -> np.ndarray:
    """Stored class ids [H, W] (uint8 or uint16)."""
    image = Image.open(io.BytesIO(encoded), formats=("PNG",))
    assert image.mode in ("L", "I;16"), image.mode
    return np.asarray(image)


def _png(array: np.ndarray, **params) -> bytes:
    return encode(Image.fromarray(array), "PNG", **params)


def _palette_png(ids: np.ndarray, palette: list[int], **params) -> bytes:
    image = Image.fromarray(ids.astype(np.uint8))
    image.putpalette(palette)
    return encode(image, "PNG", **params)


def _raw_png(
    bit_depth: int, colour_type: int, rows: list[bytes], width: int, height: int = 0
) -> bytes:
    """A PNG with a bit depth Pillow cannot write (2/4-bit grey, 16-bit colour)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height or len(rows), bit_depth, colour_type, 0, 0, 0)
    pixels = zlib.compress(b"".join(b"\x00" + row for row in rows))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def _reason(data: bytes, filename: str, settings: ClassMaskSettings = VOC) -> RejectError:
    with pytest.raises(RejectError) as caught:
        load_class_mask(data, filename, settings)
    return caught.value


# --- every source round-trips exactly ----------------------------------------------------------

WIDE = ClassMaskSettings("classes", 60001, ignore_index=65535)
GREY_PALETTE = [v for i in range(256) for v in (255 - i, 255 - i, 255 - i)]  # colour != index


def _rgb(ids: np.ndarray) -> np.ndarray:
    return np.asarray(COLOURS, dtype=np.uint8)[ids]


SOURCES = {
    # name: (settings, class ids, file bytes, file name)
    "grey png 8-bit": (VOC, _ids(), lambda ids: _png(ids.astype(np.uint8)), "a.png"),
    "grey png 16-bit": (
        WIDE,
        _ids(top=60001, ignore=65535),
        lambda ids: _png(ids.astype(np.uint16)),
        "a.png",
    ),
    "palette png": (VOC, _ids(), lambda ids: _palette_png(ids, GREY_PALETTE), "a.png"),
    "palette png 4-bit": (
        ClassMaskSettings("classes", 16, ignore_index=255),
        _ids(top=16, ignore=0),
        lambda ids: _palette_png(ids, GREY_PALETTE, bits=4),
        "a.png",
    ),
    "bilevel png": (
        ClassMaskSettings("classes", 2),
        _ids(top=2, ignore=0),
        lambda ids: encode(Image.fromarray(ids.astype(bool)), "PNG"),
        "a.png",
    ),
    "grey png 2-bit": (
        ClassMaskSettings("classes", 4),
        np.array([[0, 1, 2, 3], [3, 2, 1, 0]]),
        lambda ids: _raw_png(2, 0, [bytes([0b00011011]), bytes([0b11100100])], 4),
        "a.png",
    ),
    "grey png 4-bit": (
        ClassMaskSettings("classes", 16),
        np.array([[0, 1, 14, 15]]),
        lambda ids: _raw_png(4, 0, [bytes([0x01, 0xEF])], 4),
        "a.png",
    ),
    "rgb png + colormap": (COLOURED, _ids(top=5, ignore=0), lambda ids: _png(_rgb(ids)), "a.png"),
    "rgba png + colormap": (
        COLOURED,
        _ids(top=5, ignore=0),
        lambda ids: _png(np.dstack([_rgb(ids), np.full(ids.shape, 255, np.uint8)])),
        "a.png",
    ),
    "grey rgb png": (VOC, _ids(), lambda ids: _png(np.dstack([ids.astype(np.uint8)] * 3)), "a.png"),
    "mat uint8": (VOC, _ids(), lambda ids: mat_bytes(mask=ids.astype(np.uint8)), "a_mask.mat"),
    "mat int32": (VOC, _ids(), lambda ids: mat_bytes(mask=ids.astype(np.int32)), "a.mat"),
    "mat double": (VOC, _ids(), lambda ids: mat_bytes(mask=ids.astype(np.float64)), "a.mat"),
    "mat uint16 > 255": (
        WIDE,
        _ids(top=60001, ignore=65535),
        lambda ids: mat_bytes(mask=ids.astype(np.uint16)),
        "a.mat",
    ),
    "mat logical": (
        ClassMaskSettings("classes", 2),
        _ids(top=2, ignore=0),
        lambda ids: mat_bytes(mask=ids.astype(bool)),
        "a.mat",
    ),
    "mat v7.3": (VOC, _ids(), lambda ids: mat_v73_bytes(ids.astype(np.int16)), "a.mat"),
}


@pytest.mark.parametrize("name", SOURCES)
def test_every_source_round_trips_exactly(name):
    settings, ids, make, filename = SOURCES[name]
    loaded = load_class_mask(make(ids), filename, settings)
    assert loaded.dtype == settings.dtype
    np.testing.assert_array_equal(loaded, ids)
    stored = encode_class_mask(loaded, settings)
    decoded = decode_class_mask(stored)
    assert decoded.dtype == settings.dtype
    np.testing.assert_array_equal(decoded, ids)


def test_palette_png_is_read_as_indices_not_colours():
    ids = _ids()
    data = _palette_png(ids, GREY_PALETTE)
    as_colours = np.asarray(Image.open(io.BytesIO(data)).convert("L"))
    assert not np.array_equal(as_colours, ids)  # the classic bug would give these
    np.testing.assert_array_equal(load_class_mask(data, "a.png", VOC), ids)


def test_16_bit_ids_are_never_clipped():
    ids = np.array([[0, 255, 256], [4095, 60000, 65535]])
    loaded = load_class_mask(_png(ids.astype(np.uint16)), "a.png", WIDE)
    np.testing.assert_array_equal(loaded, ids)
    stored = encode_class_mask(loaded, WIDE)
    assert Image.open(io.BytesIO(stored)).mode == "I;16"
    np.testing.assert_array_equal(decode_class_mask(stored), ids)


def test_stored_png_is_8_bit_grey_when_ids_fit():
    stored = encode_class_mask(
        load_class_mask(_palette_png(_ids(), GREY_PALETTE), "a.png", VOC), VOC
    )
    image = Image.open(io.BytesIO(stored))
    assert (image.format, image.mode) == ("PNG", "L")  # grey: tf.io.decode_png reads ids
    assert stored[24:26] == bytes([8, 0])  # IHDR: bit depth 8, colour type grey


def test_stored_png_decodes_with_tensorflow_as_the_ids():
    tf = pytest.importorskip("tensorflow")
    for settings, ids in ((VOC, _ids()), (WIDE, _ids(top=60001, ignore=65535))):
        stored = encode_class_mask(ids.astype(settings.dtype), settings)
        dtype = tf.uint8 if settings.bit_depth == 8 else tf.uint16
        decoded = tf.io.decode_png(stored, channels=1, dtype=dtype).numpy()[..., 0]
        np.testing.assert_array_equal(decoded, ids)


# --- bad values are rejects that list them -----------------------------------------------------


def test_out_of_range_ids_are_rejected_with_their_values():
    ids = _ids()
    ids[0, :3] = [21, 40, 254]
    error = _reason(_png(ids.astype(np.uint8)), "a.png")
    assert error.reason == Reason.MASK_VALUES
    assert "{21, 40, 254}" in error.detail and "num_classes 21" in error.detail


def test_the_ignore_index_is_not_out_of_range_but_its_neighbours_are():
    ids = _ids()
    ids[0, 0] = 255
    load_class_mask(_png(ids.astype(np.uint8)), "a.png", VOC)
    other = ClassMaskSettings("classes", 21, ignore_index=100)
    error = _reason(_png(ids.astype(np.uint8)), "a.png", other)
    assert "255" in error.detail and "ignore_index 100" in error.detail


def test_many_bad_values_are_listed_in_short():
    ids = np.arange(300, dtype=np.uint16).reshape(15, 20)
    error = _reason(_png(ids), "a.png")
    assert "(278 distinct)" in error.detail and "{21, 22," in error.detail


def test_16_bit_ids_above_num_classes_are_rejected_not_wrapped():
    ids = np.array([[0, 1], [2, 256 + 1]], dtype=np.uint16)  # 257 would be 1 if cut to 8 bits
    error = _reason(_png(ids), "a.png")
    assert error.reason == Reason.MASK_VALUES and "257" in error.detail


@pytest.mark.parametrize(
    "array, words",
    [
        (np.array([[0, -1], [3, -7]], dtype=np.int32), "negative class ids {-7, -1}"),
        (np.array([[0.0, 1.5], [2.0, 3.25]]), "non-integer class ids {1.5, 3.25}"),
        (np.array([[0.0, np.nan], [1.0, 2.0]]), "NaN"),
        (np.array([[0, 2**40]], dtype=np.int64), "1099511627776"),
    ],
)
def test_mat_values_that_are_no_class_ids_are_rejected(array, words):
    error = _reason(mat_bytes(mask=array), "a.mat")
    assert error.reason == Reason.MASK_VALUES and words in error.detail


def test_check_class_ids_refuses_other_shapes_and_types():
    for array, reason in (
        (np.zeros((2, 2, 2), np.uint8), Reason.MASK_NOT_2D),
        (np.zeros((0, 3), np.uint8), Reason.MASK_NOT_2D),
        (np.array([["a"]]), Reason.MASK_VALUES),
    ):
        with pytest.raises(RejectError) as caught:
            check_class_ids(array, VOC)
        assert caught.value.reason == reason


def test_unknown_colours_are_rejected_with_the_colours():
    rgb = _rgb(_ids(top=5, ignore=0))
    rgb[0, 0] = (1, 2, 3)
    rgb[1, 1] = (200, 100, 50)
    error = _reason(_png(rgb), "a.png", COLOURED)
    assert error.reason == Reason.MASK_VALUES
    assert "[1, 2, 3]" in error.detail and "[200, 100, 50]" in error.detail


def test_colour_mask_without_colormap_is_rejected():
    error = _reason(_png(_rgb(_ids(top=5, ignore=0))), "a.png")
    assert error.reason == Reason.MASK_NOT_2D and "--colormap" in error.detail


def test_transparent_colour_mask_is_rejected():
    rgba = np.dstack([_rgb(_ids(top=5, ignore=0)), np.full((30, 20), 255, np.uint8)])
    rgba[3, 3, 3] = 0
    assert "transparent" in _reason(_png(rgba), "a.png", COLOURED).detail


def test_16_bit_colour_png_is_rejected_not_truncated():
    row = struct.pack(">6H", 0, 0, 0, 0x8001, 0, 0)  # (32769, 0, 0) would be cut to (128, 0, 0)
    error = _reason(_raw_png(16, 2, [row], 2), "a.png", COLOURED)
    assert error.reason == Reason.MASK_VALUES and "16-bit colour" in error.detail


def test_reordered_palette_is_rejected_against_the_colormap():
    ids = _ids(top=5, ignore=0)
    palette = [v for colour in COLOURS for v in colour]
    load_class_mask(_palette_png(ids, palette), "a.png", COLOURED)  # indices agree: accepted
    swapped = COLOURS[1] + COLOURS[0] + tuple(v for c in COLOURS[2:] for v in c)
    error = _reason(_palette_png(ids, list(swapped)), "a.png", COLOURED)
    assert error.reason == Reason.MASK_VALUES and "palette index 0" in error.detail


def test_jpeg_label_maps_are_refused_whatever_their_name():
    for name in ("a.jpg", "a.png"):
        error = _reason(rgb_jpeg(), name)
        assert error.reason == Reason.MASK_VALUES and "JPEG" in error.detail


def test_unreadable_empty_and_bomb_masks_are_rejects():
    data = _png(_ids().astype(np.uint8))
    assert _reason(data[: len(data) // 2], "a.png").reason == Reason.MASK_UNREADABLE
    assert _reason(b"", "a.png").reason == Reason.MASK_EMPTY
    garbage = _reason(b"not a png", "a.png")
    assert garbage.reason == Reason.MASK_UNREADABLE and "0x" not in garbage.detail  # stable text
    bomb = _raw_png(8, 0, [bytes(20_000)], 20_000, height=20_000)
    error = _reason(bomb, "a.png")  # header says 400 Mpx: refused before any allocation
    assert error.reason == Reason.MASK_TOO_LARGE and "exceeds" in error.detail


def test_unsupported_image_modes_are_rejects():
    cmyk = encode(Image.new("CMYK", (4, 4)), "TIFF")
    assert _reason(cmyk, "a.tif").reason == Reason.MASK_NOT_2D


def test_mat_variable_rules_are_mask_codecs():
    ids = _ids().astype(np.uint8)
    error = _reason(mat_bytes(a=ids, b=ids), "a.mat")
    assert error.reason == Reason.MASK_VARIABLE
    np.testing.assert_array_equal(
        load_class_mask(mat_bytes(a=ids, b=ids * 0), "a.mat", VOC, "a"), ids
    )


def test_binary_settings_cannot_read_class_masks():
    with pytest.raises(ValueError):
        load_class_mask(_png(_ids().astype(np.uint8)), "a.png", ClassMaskSettings())


# --- storage -----------------------------------------------------------------------------------


def test_encode_refuses_unchecked_arrays():
    with pytest.raises(ValueError):
        encode_class_mask(_ids(), VOC)  # int64: not checked ids


# --- settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "num_classes, ignore_index, bit_depth",
    [(2, 255, 8), (21, 255, 8), (255, 255, 8), (256, 65535, 16), (21, 256, 16), (19, 19, 8)],
)
def test_bit_depth_follows_the_largest_stored_value(num_classes, ignore_index, bit_depth):
    settings = ClassMaskSettings("classes", num_classes, ignore_index)
    assert settings.bit_depth == bit_depth
    assert settings.dtype == (np.uint8 if bit_depth == 8 else np.uint16)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"num_classes": 300}, "--ignore_index 255 is a class id (num_classes 300)"),
        ({"num_classes": 21, "ignore_index": 3}, "pass --ignore_index 255"),
        ({"num_classes": 1}, "--num_classes must be an integer from 2"),
        ({"num_classes": 70000, "ignore_index": 65535}, "--num_classes must be"),
        ({"num_classes": 21, "ignore_index": 70000}, "--ignore_index must be"),
        ({"num_classes": True}, "--num_classes must be"),
        ({}, "needs --num_classes, --class_names or --colormap"),
        ({"num_classes": 3, "class_names": ["a", "b"]}, "2 class names for num_classes 3"),
        (
            {"class_names": ["a", "b"], "colormap": [("b", (0, 0, 0)), ("a", (1, 1, 1))]},
            "name different classes",
        ),
    ],
)
def test_bad_class_settings_are_one_line_errors(kwargs, words):
    """Worded as the command line words them (settings the core names become flags)."""
    with pytest.raises(ValueError) as caught:
        class_mask_settings("classes", **kwargs)
    text = usage_error(caught.value).args[0]
    assert words in text and "\n" not in text


def test_binary_takes_no_class_flags():
    assert class_mask_settings() == ClassMaskSettings()
    for kwargs in ({"num_classes": 3}, {"ignore_index": 255}, {"class_names": ["a", "b"]}):
        with pytest.raises(SettingError, match="mask_type classes") as caught:
            class_mask_settings("binary", **kwargs)
        assert "--mask_type classes" in caught.value.worded(as_flag)
    with pytest.raises(ValueError, match="mask type"):
        class_mask_settings("multiclass")


def test_class_count_comes_from_names_or_colormap():
    assert class_mask_settings("classes", class_names=["a", "b", "c"]).num_classes == 3
    settings = class_mask_settings("classes", colormap=COLOUR_MAP, ignore_index=200)
    assert (settings.num_classes, settings.ignore_index) == (5, 200)
    assert settings.class_names == ("c0", "c1", "c2", "c3", "c4")
    assert settings.colormap == COLOURS
    assert class_mask_settings("classes", num_classes=4).ignore_index == DEFAULT_IGNORE_INDEX


def test_class_names_files():
    assert parse_class_names("background\naeroplane\r\nbicycle\n\n", "n.txt") == (
        "background",
        "aeroplane",
        "bicycle",
    )
    assert parse_class_names(b'["sky", "road"]', "n.json") == ("sky", "road")
    for text, words in (
        ("a\n\nb\n", "class 1 has an empty name"),
        ("a\nb\na\n", "duplicate class names ['a']"),
        ("only\n", "at least 2 classes"),
        ('["a", 1]', "JSON list of class names"),
        ("[1, 2", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
    ):
        with pytest.raises(ValueError, match="n.txt") as caught:
            parse_class_names(text, "n.txt")
        assert words in str(caught.value)


def test_colormap_files():
    text = json.dumps({"sky": [128, 128, 128], "road": [128, 64, 128], "car": [64, 0, 128]})
    assert parse_colormap(text, "c.json") == (
        ("sky", (128, 128, 128)),
        ("road", (128, 64, 128)),
        ("car", (64, 0, 128)),
    )
    for text, words in (
        ('{"a": [0, 0, 0], "a": [1, 1, 1]}', "duplicate class names ['a']"),
        ('{"a": [0, 0, 0], "b": [0, 0, 0]}', "share colour [0, 0, 0]"),
        ('{"a": [0, 0, 256], "b": [0, 0, 0]}', "0-255 integers"),
        ('{"a": [0, 0, 1.0], "b": [0, 0, 0]}', "0-255 integers"),
        ('{"a": [0, 0, true], "b": [0, 0, 0]}', "0-255 integers"),
        ('{"a": [0, 0], "b": [0, 0, 0]}', "0-255 integers"),
        ("[[0, 0, 0], [1, 1, 1]]", "expected a JSON object"),
        ("{}", "expected a JSON object"),
        ('{"a": [0, 0, 0]', "not valid JSON"),
    ):
        with pytest.raises(ValueError, match="c.json") as caught:
            parse_colormap(text, "c.json")
        assert words in str(caught.value)


# --- the binary path is untouched ---------------------------------------------------------------

# sha256 of today's binary outputs, recorded before class masks existed: any change to the
# blog-compatible path (threshold, JPEG quality ladder, PNG settings, record schema) shows.
BINARY_DIGESTS = {
    "jpeg": "031b97ad42922ffe8fb5ba5541f8614ccb7628aef94dae9270f7a3f680a11f7b",
    "png": "7707cc51e19a3b770e44c62f08e0ab1c4adaa5169852335bdce875bf6921878a",
}
BINARY_RECORD_DIGESTS = {
    "jpeg": "66ab4b52adf7eef3169e99e07c791a9cca51a03dc17ae3e07f2d35cdaa13055c",
    "png": "fa2933460abd0b04ffe725d11f9a2e8848b1fa6cb29b3c85edbab9f66030b132",
}


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_binary_mask_bytes_are_unchanged(fmt):
    from transforms.codecs.mask import binarize, encode_mask
    from transforms.record import make_record

    mask = blob_mask(160, 120, seed=3)
    encoded = encode_mask(binarize(mask), fmt)
    assert hashlib.sha256(encoded).hexdigest() == BINARY_DIGESTS[fmt]
    record = make_record(
        "k", rgb_jpeg(160, 120), mat_bytes(mask=mask), "k_mask.mat", RecordSpec(mask_format=fmt)
    )
    assert hashlib.sha256(record.serialized).hexdigest() == BINARY_RECORD_DIGESTS[fmt]


def test_colour_masks_of_real_shapes_round_trip():
    """Long colour runs (looked up once per run) and single pixels alike."""
    from beam_pipeline.commands.sample_data import scene, voc_palette

    palette = voc_palette()
    colormap = [(f"c{i}", tuple(palette[3 * i : 3 * i + 3])) for i in range(21)]
    settings = class_mask_settings("classes", colormap=colormap)
    ids = scene(np.random.default_rng(4), 21, 120, 90)[1]
    ids[ids == 255] = 0
    ids[0, 0], ids[0, 1], ids[-1, -1] = 7, 3, 20  # runs of one pixel, at both ends
    rgb = np.asarray(palette, dtype=np.uint8).reshape(256, 3)[ids]
    np.testing.assert_array_equal(load_class_mask(_png(rgb), "a.png", settings), ids)
    rgb[-1, -1] = (1, 1, 1)
    assert "[1, 1, 1]" in _reason(_png(rgb), "a.png", settings).detail


# --- records ------------------------------------------------------------------------------------


def _rotated_jpeg(height: int = 24, width: int = 16) -> bytes:
    """Stored height x width, EXIF orientation 6: displayed width x height."""
    from tests.helpers.images import rgb_array

    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(Image.fromarray(rgb_array(height, width)), "JPEG", exif=exif.tobytes())


@pytest.mark.parametrize(("shape", "rotated"), [((24, 16), False), ((16, 24), True)])
def test_class_records_follow_the_exif_rotation_like_binary_ones(shape, rotated):
    from transforms.class_stats import mask_stats
    from transforms.record import make_class_record

    ids = _ids(*shape, top=5).astype(np.uint8)
    record = make_class_record("k", _rotated_jpeg(), _png(ids), "k.png", RecordSpec(VOC))
    assert (record.height, record.width) == shape and record.image_transcoded == rotated
    assert record.class_stats == mask_stats(ids, 21, 255) and record.class_stats.ignored_pixels
    other = _png(_ids(20, 16, top=5).astype(np.uint8))
    with pytest.raises(RejectError) as caught:
        make_class_record("k", _rotated_jpeg(), other, "k.png", RecordSpec(VOC))
    assert caught.value.reason == Reason.SIZE_MISMATCH and "mask is 20x16" in caught.value.detail


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")  # pycocotools
def test_coco_records_follow_the_exif_rotation_and_count_their_pixels():
    from transforms.sources.annotations import AnnotatedImage as CocoImage
    from transforms.sources.annotations import AnnotatedShape as CocoAnnotation
    from transforms.sources.rasterize import make_annotated_record as make_coco_record

    square = np.array([2.0, 2.0, 10.0, 2.0, 10.0, 8.0, 2.0, 8.0])
    annotation = CocoAnnotation(1, 3, False, (square,))
    settings = ClassMaskSettings("classes", 4)
    for height, width, rotated in ((24, 16, False), (16, 24, True)):
        image = CocoImage("k.jpg", 1, height, width, (annotation,))
        record = make_coco_record("k", _rotated_jpeg(), image, RecordSpec(settings), fill=0)
        assert (record.height, record.width, record.image_transcoded) == (height, width, rotated)
        stats = record.class_stats
        assert stats.pixels[3] > 0 and sum(stats.pixels) == height * width
        assert stats.ignored_pixels == 0 and stats.images == (1, 0, 0, 1)


def test_a_bad_image_is_its_reason_before_a_bad_mask():
    from transforms.record import make_class_record

    with pytest.raises(RejectError) as caught:
        make_class_record("k", b"not a jpeg", b"", "k.png", RecordSpec(VOC))
    assert caught.value.reason == Reason.IMAGE_UNREADABLE
