"""Small segprep outputs written record by record, for reader tests that need odd shapes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from transforms.format.naming import METADATA_FILE, shard_name


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
    from transforms.format.example import build_example
    from transforms.format.metadata import build_metadata, dumps

    directory.mkdir(parents=True, exist_ok=True)
    written, entries = {}, []
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
        entries.append(
            {
                "split": split,
                "file": name,
                "num_examples": len(sizes),
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "image_shapes": sorted(list(size) for size in set(sizes)),
            }
        )
    versions = {"segprep": "handmade"}  # what marks a metadata.json as segprep's
    metadata = build_metadata(
        entries, [], mask_format=mask_format, parameters={}, versions=versions
    )
    (directory / METADATA_FILE).write_bytes(dumps(metadata))
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
