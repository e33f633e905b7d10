"""Small segprep outputs written record by record, for reader tests that need odd shapes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from transforms.format.naming import METADATA_FILE, SPLITS, shard_name


def write_output(
    directory: Path,
    shards: list[list[tuple[int, int]]],
    *,
    mask_format: str = "png",
    split: str = "train",
    index: bool = True,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Shards of records of the given (height, width); key -> (image, 0/1 mask) written.

    Keys are k000, k001, ... in write order. With `index`, `segprep index` runs on it.
    """
    import tensorflow as tf

    from beam_pipeline.commands.index import index_output
    from beam_pipeline.commands.sample_data import jpeg_bytes, portrait
    from transforms.codecs.mask import encode_mask
    from transforms.format.dataset_info import (
        FORMAT_VERSION,
        DatasetInfo,
        RejectCounts,
        ShardInfo,
        SplitInfo,
    )
    from transforms.format.example import build_example
    from transforms.format.features import SCHEMA

    directory.mkdir(parents=True, exist_ok=True)
    written, entries, shapes = {}, [], set()
    for number, sizes in enumerate(shards):
        name = shard_name(split, number, len(shards))
        with tf.io.TFRecordWriter(str(directory / name)) as writer:
            for height, width in sizes:
                key = f"k{len(written):03d}"
                image, mask = portrait(np.random.default_rng(len(written)), height, width)
                written[key] = (image, mask)
                record = build_example(
                    key, jpeg_bytes(image), encode_mask(mask * 255, mask_format), height, width
                )
                writer.write(record)
        data = (directory / name).read_bytes()
        entries.append(ShardInfo(name, len(sizes), len(data), hashlib.sha256(data).hexdigest()))
        shapes.update(sizes)
    shape = next(iter(shapes)) if len(shapes) == 1 else None
    splits = {name: SplitInfo(name, 0, None, ()) for name in SPLITS}
    splits[split] = SplitInfo(split, len(written), shape, tuple(entries))
    info = DatasetInfo(
        format_version=FORMAT_VERSION,
        mask_format=mask_format,
        splits=splits,
        num_rejected=RejectCounts(0, {}, {}),
        features=SCHEMA,
        parameters={},
        versions={"segprep": "handmade"},  # what marks a metadata.json as segprep's
    )
    (directory / METADATA_FILE).write_bytes(info.to_bytes())
    (directory / "rejects.jsonl").write_bytes(b"")
    if index:
        index_output(str(directory))
    return written


def write_mixed_sizes(directory: Path) -> dict[str, np.ndarray]:
    """A hand-written output: PNG masks, records of two sizes (metadata image_shape null).

    Returns the source masks by key.
    """
    written = write_output(directory, [[(40, 32), (32, 40)], [(40, 32)]], index=False)
    return {key: mask for key, (_, mask) in written.items()}
