"""--max_image_side through the real CLI: large images are downscaled (antialiased, JPEG
re-encoded), masks nearest-neighbour (no id ever interpolated), small JPEGs stay byte for
byte, the value is part of the record spec (an append must match it) and verify checks it."""

from __future__ import annotations

import io
import json
import subprocess

import numpy as np
import pytest
from PIL import Image

from tests.helpers.images import encode
from tests.helpers.process_tree import SEGPREP
from tests.helpers.runs import RUNNER_ARGS
from transforms.format.example import parse_example
from transforms.format.naming import METADATA_FILE
from transforms.format.tfrecord import read_frames
from transforms.record_spec import record_problems, stored_spec


def _segprep(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SEGPREP, *args], capture_output=True, text=True)


def _photo(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], -1)
    return np.clip(base + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8)


def _class_ids(height: int, width: int) -> np.ndarray:
    ids = np.zeros((height, width), np.uint8)
    ids[height // 4 : height // 2, width // 4 : width // 2] = 3
    ids[height // 2 :, width // 2 :] = 7
    ids[:4, :] = 255  # the ignore index along the top
    return ids


@pytest.fixture(scope="module")
def class_dataset(tmp_path_factory):
    """Three landscape/portrait images over 400 px and one small one, class-id PNG masks."""
    root = tmp_path_factory.mktemp("sides")
    images, masks = root / "images", root / "masks"
    images.mkdir()
    masks.mkdir()
    for key, (height, width) in {
        "big": (600, 800),
        "tall": (900, 300),
        "wide": (250, 1000),
    }.items():
        (images / f"{key}.jpg").write_bytes(
            encode(Image.fromarray(_photo(height, width, 1)), "JPEG")
        )
        (masks / f"{key}.png").write_bytes(
            encode(Image.fromarray(_class_ids(height, width)), "PNG")
        )
    small = encode(Image.fromarray(_photo(200, 300, 2)), "JPEG", quality=90)
    (images / "small.jpg").write_bytes(small)
    (masks / "small.png").write_bytes(encode(Image.fromarray(_class_ids(200, 300)), "PNG"))
    return root, small


def _prepare(root, out, *extra: str) -> subprocess.CompletedProcess:
    return _segprep(
        "prepare",
        "--image_dir", str(root / "images"),
        "--mask_dir", str(root / "masks"),
        "--output_dir", str(out),
        "--mask_type", "classes",
        "--num_classes", "8",
        "--train_size", "1.0",
        "--validation_size", "0.0",
        "--duplicates", "off",
        *extra,
        *RUNNER_ARGS,
    )  # fmt: skip


def _records(out) -> dict[str, dict]:
    records = {}
    for shard in sorted(out.glob("train-*.tfrecord")):
        with open(shard, "rb") as handle:
            frames = list(read_frames(handle, shard.name, shard.stat().st_size))
        for _, serialized in frames:
            parsed = parse_example(serialized)
            records[parsed["key"]] = parsed
    return records


@pytest.fixture(scope="module")
def downscaled(class_dataset, tmp_path_factory):
    root, _ = class_dataset
    out = tmp_path_factory.mktemp("downscaled") / "out"
    run = _prepare(root, out, "--max_image_side", "400")
    assert run.returncode == 0, run.stderr
    return out


def test_large_images_fit_the_side_and_keep_their_aspect(downscaled):
    records = _records(downscaled)
    sizes = {key: (int(r["height"]), int(r["width"])) for key, r in records.items()}
    assert sizes == {"big": (300, 400), "tall": (400, 133), "wide": (100, 400), "small": (200, 300)}
    for key, record in records.items():
        with Image.open(io.BytesIO(record["image"])) as image:
            assert image.format == "JPEG" and image.size == sizes[key][::-1]


def test_masks_are_nearest_neighbour_never_new_ids(downscaled):
    for record in _records(downscaled).values():
        with Image.open(io.BytesIO(record["mask"])) as mask:
            ids = np.asarray(mask)
        assert set(np.unique(ids)) <= {0, 3, 7, 255}
        height, width = ids.shape
        # The blocks keep their place: nearest-neighbour moves no region.
        assert ids[height * 3 // 8, width * 3 // 8] == 3 and ids[-1, -1] == 7


def test_a_jpeg_within_the_side_is_stored_byte_for_byte(downscaled, class_dataset):
    _, small = class_dataset
    assert _records(downscaled)["small"]["image"] == small


def test_the_side_is_in_the_stored_spec_and_verify_checks_it(downscaled):
    metadata = json.loads((downscaled / METADATA_FILE).read_text())
    assert metadata["record_spec"]["max_image_side"] == 400
    verified = _segprep("verify", str(downscaled))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    spec = stored_spec(metadata)
    assert record_problems(spec, 300, 400) == []
    assert record_problems(spec, 401, 300) == [
        "stored image is 401x300 (HxW), over max_image_side 400"
    ]


def test_an_append_must_keep_the_side(downscaled, class_dataset, tmp_path):
    root, _ = class_dataset
    other = _prepare(root, downscaled, "--append", "--max_image_side", "512")
    assert other.returncode == 2
    assert "max_image_side: output 400, this run 512" in other.stderr
    unset = _prepare(root, downscaled, "--append")
    assert unset.returncode == 2 and "max_image_side: output 400, this run null" in unset.stderr


def test_a_tiny_side_is_a_one_line_usage_error(class_dataset, tmp_path):
    root, _ = class_dataset
    run = _prepare(root, tmp_path / "out", "--max_image_side", "8")
    assert run.returncode == 2
    assert (
        run.stderr.strip()
        .splitlines()[-1]
        .endswith("--max_image_side must be an integer of at least 16")
    )
    assert not (tmp_path / "out").exists()
