"""Class-id outputs prepared through the real CLI, with the source ids each record must read as.

One 8-bit output from `segprep sample-data --classes` (VOC-like palette PNGs, 255 outlines,
breakage included) and one 16-bit output with more than 255 classes and records of two sizes.
The expected ids are read from the source files with Pillow, never from the shards.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from beam_pipeline import cli
from tests.helpers.class_outputs import metadata
from tests.helpers.images import encode, rgb_jpeg
from tests.helpers.runs import RUNNER_ARGS
from transforms.format.naming import METADATA_FILE

SAMPLE_CLASSES = 6
BIG_CLASSES = 300
BIG_IGNORE = 65535
BIG_SIZES = ((40, 32), (36, 44))  # (height, width) of the 16-bit set's records, alternating


@dataclasses.dataclass(frozen=True)
class ClassOutput:
    directory: Path
    expected: dict[str, np.ndarray]  # key -> source class ids [H, W] of every accepted key
    splits: dict[str, list[str]]  # split -> keys, in shard order

    def keys(self, split: str) -> list[str]:
        return self.splits[split]


def _prepare(image_dir: Path, mask_dir: Path, output_dir: Path, *flags: str) -> None:
    argv = [
        "prepare",
        "--image_dir",
        str(image_dir),
        "--mask_dir",
        str(mask_dir),
        "--output_dir",
        str(output_dir),
        "--mask_type",
        "classes",
        *flags,
        *RUNNER_ARGS,
    ]
    assert cli.main(argv) == 0


def _split_keys(output_dir: Path) -> dict[str, list[str]]:
    import tensorflow as tf

    from transforms.format import features

    splits = {}
    for split, info in metadata(output_dir)["splits"].items():
        keys = []
        for shard in info["shards"]:
            for raw in tf.data.TFRecordDataset(str(output_dir / shard["file"])):
                example = tf.train.Example.FromString(raw.numpy())
                keys.append(example.features.feature[features.KEY].bytes_list.value[0].decode())
        splits[split] = keys
    return splits


def _with_sources(output_dir: Path, mask_dir: Path) -> ClassOutput:
    splits = _split_keys(output_dir)
    expected = {
        key: np.asarray(Image.open(mask_dir / f"{key}.png"))
        for keys in splits.values()
        for key in keys
    }
    return ClassOutput(output_dir, expected, splits)


def sample_output(root: Path) -> ClassOutput:
    """`segprep sample-data --classes 6` (800x600, 5 % broken) prepared in 3 shards."""
    source = root / "sample"
    assert (
        cli.main(
            [
                "sample-data",
                str(source),
                "--classes",
                str(SAMPLE_CLASSES),
                "--count",
                "24",
                "--seed",
                "5",
            ]
        )
        == 0
    )
    output_dir = root / "out8"
    flags = ("--num_classes", str(SAMPLE_CLASSES), "--num_shards", "3")
    _prepare(source / "images", source / "masks", output_dir, *flags)
    output = _with_sources(output_dir, source / "masks")
    # Palette indices, the 255 outlines included: what every reader must return.
    assert all(ids.dtype == np.uint8 for ids in output.expected.values())
    assert any((ids == 255).any() for ids in output.expected.values())
    return output


def big_ids(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """16-bit ids: regions of ids above 255, a few below, an ignore border, a thin stripe."""
    ids = np.empty((height, width), np.uint16)
    ids[: height // 2] = rng.integers(256, BIG_CLASSES)
    ids[height // 2 :, : width // 2] = rng.integers(0, 256)
    ids[height // 2 :, width // 2 :] = BIG_CLASSES - 1
    ids[:, width // 3] = rng.integers(0, BIG_CLASSES)  # one pixel wide: area resizing smears it
    ids[0] = BIG_IGNORE
    return ids


def big_output(root: Path, count: int = 10) -> ClassOutput:
    """`count` entries of 16-bit grey PNG masks, ids up to 299, ignore 65535, two sizes."""
    source = root / "big"
    (source / "images").mkdir(parents=True)
    (source / "masks").mkdir()
    rng = np.random.default_rng(14)
    for index in range(count):
        height, width = BIG_SIZES[index % 2]
        key = f"{index:03d}"
        (source / "images" / f"{key}.jpg").write_bytes(rgb_jpeg(height, width, seed=index))
        mask = Image.fromarray(big_ids(rng, height, width))
        assert mask.mode == "I;16"
        (source / "masks" / f"{key}.png").write_bytes(encode(mask, "PNG"))
    output_dir = root / "out16"
    flags = ("--num_classes", str(BIG_CLASSES), "--ignore_index", str(BIG_IGNORE))
    split = ("--train_size", "0.6", "--validation_size", "0.4")  # both splits get records
    _prepare(source / "images", source / "masks", output_dir, *flags, *split, "--num_shards", "2")
    output = _with_sources(output_dir, source / "masks")
    assert metadata(output_dir)["classes"]["png_bit_depth"] == 16
    assert all(output.splits.values())
    assert metadata(output_dir)["splits"]["train"]["image_shape"] is None  # mixed sizes
    return output


def png(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, format="PNG")
    return out.getvalue()


def rewrite_first_mask(directory: Path, transform: Callable[[np.ndarray], bytes]) -> str:
    """Re-encode the first train record's mask with `transform(ids) -> PNG bytes`; its key.

    The shard's size and sha256 in metadata.json and the record index (`segprep index`)
    follow, so the mask is the only thing that differs from a sound output.
    """
    import tensorflow as tf

    from beam_pipeline.commands.index import index_output
    from transforms.format import features

    info = json.loads((directory / METADATA_FILE).read_text())
    shard = info["splits"]["train"]["shards"][0]
    path = directory / shard["file"]
    records = [raw.numpy() for raw in tf.data.TFRecordDataset(str(path))]
    example = tf.train.Example.FromString(records[0])
    mask = example.features.feature[features.MASK].bytes_list
    mask.value[0] = transform(np.asarray(Image.open(io.BytesIO(mask.value[0]))))
    records[0] = example.SerializeToString()
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    data = path.read_bytes()
    shard.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (directory / METADATA_FILE).write_text(json.dumps(info))
    index_output(str(directory))
    return example.features.feature[features.KEY].bytes_list.value[0].decode()
