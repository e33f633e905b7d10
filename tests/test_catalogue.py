"""The bad-input catalogue: every case through the real pipeline, with its decided outcome."""

from __future__ import annotations

import collections
import io
import json
from pathlib import Path

import numpy as np
import pytest
import scipy
import scipy.io
import tensorflow as tf
from PIL import Image

from beam_pipeline.cli import main
from beam_pipeline.launch import launcher
from tests.helpers.images import blob_mask, encode, rgb_array
from tests.helpers.mat_files import mat_v73_bytes
from tests.helpers.runs import RUNNER_ARGS
from transforms.codecs.image import MAX_PIXELS
from transforms.format import features

H, W = 24, 16
SCIPY_DATA = Path(scipy.io.__file__).parent / "matlab" / "tests" / "data"
ACCEPT = "accepted"


def _mat(fmt: str = "5", compress: bool = True, **variables) -> bytes:
    out = io.BytesIO()
    scipy.io.savemat(out, variables, format=fmt, do_compression=compress)
    return out.getvalue()


def _mat_v73(mask: np.ndarray, path: Path) -> None:
    path.write_bytes(mat_v73_bytes(mask))


def _jpeg(array: np.ndarray, **params) -> bytes:
    return encode(Image.fromarray(array), "JPEG", quality=92, **params)


def _exif_rotated_jpeg() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    return _jpeg(rgb_array(H, W, 3), exif=exif.tobytes())


def _twelve_bit_jpeg() -> bytes:
    data = bytearray(_jpeg(rgb_array(H, W)))
    sof = data.find(b"\xff\xc0")
    data[sof + 4] = 12  # sample precision: 12 bits, which baseline decoders refuse
    return bytes(data)


def _bomb_png() -> bytes:
    side = int(MAX_PIXELS**0.5) + 100
    return encode(Image.new("1", (side, side)), "PNG")


def _corrupt_stream(mat: bytes) -> bytes:
    """A compressed v5 .mat whose zlib stream is damaged halfway."""
    data = bytearray(mat)
    middle = 136 + (len(data) - 136) // 2
    data[middle : middle + 8] = b"\xff" * 8
    return bytes(data)


GOOD_IMAGE = _jpeg(rgb_array(H, W))
MASK = blob_mask(H, W)
GOOD_MAT = _mat(mask=MASK)
RGB = rgb_array(H, W, 5)

# key -> (image file name or None, image bytes, mask file name or None, mask bytes, outcome)
CASES: dict[str, tuple] = {
    # images
    "img_zero_bytes": (
        "img_zero_bytes.jpg",
        b"",
        "img_zero_bytes_mask.mat",
        GOOD_MAT,
        "image_empty",
    ),
    "img_random_bytes": (
        None,
        np.random.default_rng(1).bytes(3000),
        None,
        GOOD_MAT,
        "image_unreadable",
    ),
    "img_truncated_jpeg": (
        None,
        GOOD_IMAGE[: len(GOOD_IMAGE) // 2],
        None,
        GOOD_MAT,
        "image_truncated",
    ),
    "img_truncated_png": (
        None,
        encode(Image.fromarray(RGB), "PNG")[:600],
        None,
        GOOD_MAT,
        "image_truncated",
    ),
    "img_png_named_jpg": (None, encode(Image.fromarray(RGB), "PNG"), None, GOOD_MAT, ACCEPT),
    "img_cmyk_jpeg": (
        None,
        encode(Image.fromarray(RGB).convert("CMYK"), "JPEG"),
        None,
        GOOD_MAT,
        ACCEPT,
    ),
    "img_gray_jpeg": (
        None,
        encode(Image.fromarray(RGB).convert("L"), "JPEG"),
        None,
        GOOD_MAT,
        ACCEPT,
    ),
    "img_rgba_png": (
        "img_rgba_png.png",
        encode(Image.fromarray(RGB).convert("RGBA"), "PNG"),
        None,
        GOOD_MAT,
        ACCEPT,
    ),
    "img_palette_png": (
        "img_palette_png.png",
        encode(Image.fromarray(RGB).convert("P"), "PNG"),
        None,
        GOOD_MAT,
        ACCEPT,
    ),
    "img_16bit_png": (
        "img_16bit_png.png",
        encode(Image.fromarray(RGB[..., 0].astype(np.uint16) * 257), "PNG"),
        None,
        GOOD_MAT,
        ACCEPT,
    ),
    "img_exif_mask_as_stored": (None, _exif_rotated_jpeg(), None, GOOD_MAT, ACCEPT),
    "img_exif_mask_as_displayed": (
        None,
        _exif_rotated_jpeg(),
        None,
        _mat(mask=blob_mask(W, H)),
        ACCEPT,
    ),
    "img_decompression_bomb": (
        "img_decompression_bomb.png",
        _bomb_png(),
        None,
        GOOD_MAT,
        "image_too_large",
    ),
    "img_12bit_jpeg": (None, _twelve_bit_jpeg(), None, GOOD_MAT, "image_unreadable"),
    # masks
    "mask_mat_v4": (None, GOOD_IMAGE, None, _mat("4", False, mask=MASK.astype(np.float64)), ACCEPT),
    "mask_mat_v5": (None, GOOD_IMAGE, None, _mat("5", False, mask=MASK), ACCEPT),
    "mask_mat_v7_compressed": (None, GOOD_IMAGE, None, _mat("5", True, mask=MASK), ACCEPT),
    "mask_mat_v73_hdf5": (None, GOOD_IMAGE, None, "v7.3", ACCEPT),
    # A corrupt stream in a variable that is not the mask is never inflated: that file has
    # no `mask` and no 2-D candidate.
    "mask_corrupt_zlib_elsewhere": (
        None,
        GOOD_IMAGE,
        None,
        "scipy:corrupted_zlib_data.mat",
        "mask_variable",
    ),
    "mask_corrupt_zlib": (
        None,
        GOOD_IMAGE,
        None,
        _corrupt_stream(_mat(mask=MASK)),
        "mask_unreadable",
    ),
    "mask_bad_zlib_checksum": (
        None,
        GOOD_IMAGE,
        None,
        "scipy:corrupted_zlib_checksum.mat",
        "mask_unreadable",
    ),
    "mask_malformed_header": (None, GOOD_IMAGE, None, "scipy:malformed1.mat", "mask_unreadable"),
    "mask_truncated": (None, GOOD_IMAGE, None, GOOD_MAT[: len(GOOD_MAT) // 2], "mask_unreadable"),
    "mask_text_file": (None, GOOD_IMAGE, None, b"mask = [0 1; 1 0]\n" * 30, "mask_unreadable"),
    "mask_zero_bytes": (None, GOOD_IMAGE, None, b"", "mask_empty"),
    "mask_no_2d_variable": (None, GOOD_IMAGE, None, _mat(label=np.array([[3.0]])), "mask_variable"),
    "mask_two_2d_variables": (None, GOOD_IMAGE, None, _mat(a=MASK, b=MASK), "mask_variable"),
    "mask_single_other_variable": (None, GOOD_IMAGE, None, _mat(seg=MASK), ACCEPT),
    "mask_3d": (None, GOOD_IMAGE, None, _mat(mask=np.stack([MASK] * 3, axis=2)), "mask_not_2d"),
    "mask_nan": (None, GOOD_IMAGE, None, _mat(mask=np.where(MASK, np.nan, 0.0)), "mask_values"),
    "mask_inf": (None, GOOD_IMAGE, None, _mat(mask=np.where(MASK, np.inf, 0.0)), "mask_values"),
    "mask_soft_values": (
        None,
        GOOD_IMAGE,
        None,
        _mat(mask=(np.arange(H * W).reshape(H, W) % 256).astype(np.uint8)),
        "mask_values",
    ),
    "mask_values_0_2": (None, GOOD_IMAGE, None, _mat(mask=MASK * 2), "mask_values"),
    "mask_0_255": (None, GOOD_IMAGE, None, _mat(mask=MASK * 255), ACCEPT),
    "mask_size_mismatch": (None, GOOD_IMAGE, None, _mat(mask=blob_mask(H + 2, W)), "size_mismatch"),
    "mask_palette_png": (
        None,
        GOOD_IMAGE,
        "mask_palette_png_mask.png",
        encode(Image.fromarray(MASK, mode="L").convert("P"), "PNG"),
        ACCEPT,
    ),
    # pairing
    "pair_image_only": (None, GOOD_IMAGE, "", None, "missing_mask"),
    "pair_mask_only": ("", None, None, GOOD_MAT, "missing_image"),
    "pair_two_images": ("pair_two_images.jpg+png", GOOD_IMAGE, None, GOOD_MAT, "duplicate_key"),
    "pair spaces ü名": (None, GOOD_IMAGE, None, GOOD_MAT, ACCEPT),
    "nested/deeper/k1": (None, GOOD_IMAGE, None, GOOD_MAT, ACCEPT),
}


def _write_corpus(root: Path) -> tuple[Path, Path]:
    images, masks = root / "images", root / "masks"
    for key, (image_name, image, mask_name, mask, _) in CASES.items():
        (images / key).parent.mkdir(parents=True, exist_ok=True)
        (masks / key).parent.mkdir(parents=True, exist_ok=True)
        if image_name == "pair_two_images.jpg+png":
            (images / f"{key}.jpg").write_bytes(image)
            (images / f"{key}.png").write_bytes(image)
        elif image_name != "":
            (images / (image_name or f"{key}.jpg")).write_bytes(image)
        if mask_name == "":
            continue
        target = masks / (mask_name or f"{key}_mask.mat")
        if mask == "v7.3":
            _mat_v73(MASK, target)
        elif isinstance(mask, str) and mask.startswith("scipy:"):
            source = SCIPY_DATA / mask.removeprefix("scipy:")
            if source.exists():  # shipped inside the scipy wheel; never copied into the repo
                target.write_bytes(source.read_bytes())
        else:
            target.write_bytes(mask)
    (images / "Thumbs.db").write_bytes(b"\0" * 10)
    return images, masks


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalogue")
    images, masks = _write_corpus(root)
    out = root / "out"
    result = launcher.run(
        ["--image_dir", str(images), "--mask_dir", str(masks), "--output_dir", str(out)]
        + ["--train_size", "1", "--validation_size", "0", "--max_reject_fraction", "1"]
        + RUNNER_ARGS
    )
    rejects = {}
    for line in (out / "rejects.jsonl").read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        rejects[entry["key"]] = entry
    records = {}
    for shard in result.metadata["splits"]["train"]["shards"]:
        for raw in tf.data.TFRecordDataset(str(out / shard["file"])):
            example = tf.train.Example.FromString(raw.numpy())
            key = example.features.feature[features.KEY].bytes_list.value[0].decode()
            assert key not in records, f"{key} written twice"
            records[key] = example.features.feature
    return {
        "images": images,
        "masks": masks,
        "out": out,
        "result": result,
        "rejects": rejects,
        "records": records,
    }


def _scipy_file_missing(mask) -> bool:
    return (
        isinstance(mask, str)
        and mask.startswith("scipy:")
        and not (SCIPY_DATA / mask.removeprefix("scipy:")).exists()
    )


@pytest.mark.parametrize("key", sorted(CASES))
def test_case_outcome(catalogue, key):
    *_, mask, outcome = CASES[key]
    if _scipy_file_missing(mask):
        pytest.skip(f"{mask} is not shipped with this scipy")
    if outcome == ACCEPT:
        assert key in catalogue["records"], catalogue["rejects"].get(key)
        feature = catalogue["records"][key]
        image = Image.open(io.BytesIO(feature[features.IMAGE].bytes_list.value[0]))
        assert image.format == "JPEG" and image.mode == "RGB"
        height = feature[features.HEIGHT].int64_list.value[0]
        width = feature[features.WIDTH].int64_list.value[0]
        assert image.size == (width, height)
        mask_image = Image.open(io.BytesIO(feature[features.MASK].bytes_list.value[0]))
        assert mask_image.size == (width, height) and mask_image.mode == "L"
    else:
        assert key not in catalogue["records"]
        assert catalogue["rejects"][key]["reason"] == outcome
        assert catalogue["rejects"][key]["detail"]


def test_invariant_every_key_exactly_once(catalogue):
    expected = {key for key, case in CASES.items() if not _scipy_file_missing(case[3])}
    thumbs = str(catalogue["images"] / "Thumbs.db")
    expected.add(thumbs)  # an unrecognized file is reported under its full path, not dropped
    accepted, rejected = set(catalogue["records"]), set(catalogue["rejects"])
    assert not accepted & rejected
    assert accepted | rejected == expected
    metadata = catalogue["result"].metadata
    assert metadata["num_discovered"] == len(expected)
    assert metadata["num_rejected"]["total"] == len(rejected)
    assert all(entry["reason"] and entry["detail"] for entry in catalogue["rejects"].values())
    assert catalogue["rejects"][thumbs]["reason"] == "unrecognized_file"


def test_valid_rgb_jpeg_passes_through_and_png_named_jpg_is_transcoded(catalogue):
    stored = catalogue["records"]["mask_mat_v5"][features.IMAGE].bytes_list.value[0]
    assert stored == GOOD_IMAGE
    transcoded = catalogue["records"]["img_png_named_jpg"][features.IMAGE].bytes_list.value[0]
    assert transcoded[:2] == b"\xff\xd8"


def _stored_mask(feature) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(feature[features.MASK].bytes_list.value[0]))) >= 128


def test_v73_mask_is_transposed_back(catalogue):
    np.testing.assert_array_equal(
        _stored_mask(catalogue["records"]["mask_mat_v73_hdf5"]), MASK == 1
    )


def test_exif_rotation_follows_the_mask(catalogue):
    as_stored = catalogue["records"]["img_exif_mask_as_stored"]
    assert as_stored[features.HEIGHT].int64_list.value[0] == H
    assert as_stored[features.IMAGE].bytes_list.value[0] == _exif_rotated_jpeg()
    as_displayed = catalogue["records"]["img_exif_mask_as_displayed"]
    assert as_displayed[features.HEIGHT].int64_list.value[0] == W  # rotated to match the mask
    np.testing.assert_array_equal(_stored_mask(as_displayed), blob_mask(W, H) == 1)


def test_an_exif_orientation_kept_as_stored_is_counted_and_told(catalogue):
    """Square photos give no size evidence: the summary says how many kept their pixels."""
    from beam_pipeline.commands.summary import summary_lines

    info = catalogue["result"].info
    assert info.exif_orientation_ignored == 1  # as_stored; as_displayed was rotated
    summary = "\n".join(summary_lines(info))
    assert "note: 1 image carries an EXIF orientation kept as stored" in summary


def test_reject_limit_publishes_nothing(catalogue, tmp_path, capsys):
    out = tmp_path / "limited"
    code = main(
        ["prepare", "--image_dir", str(catalogue["images"]), "--mask_dir", str(catalogue["masks"])]
        + ["--output_dir", str(out), *RUNNER_ARGS]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "--max_reject_fraction 0.5" in err and "nothing was published" in err
    assert sorted(path.name for path in out.iterdir()) == [".segprep"]  # no final name at all
    (staged,) = (out / ".segprep" / "runs").glob("*/rejects.jsonl")  # kept for inspection
    assert str(staged) in err
    lines = staged.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(catalogue["rejects"])
    # The one line says why, without Beam's step names.
    reasons = collections.Counter(json.loads(line)["reason"] for line in lines)
    reasons.pop("not_in_split", None)
    top = max(reasons.values())
    assert any(f"mostly {r} {top} (e.g. " in err for r, n in reasons.items() if n == top)
    assert "while running" not in err and len(err.strip().splitlines()) == 1
    assert not list((out / ".segprep").rglob("*.tfrecord*"))
