"""Build the tf.train.Example of one entry."""

from __future__ import annotations

from segcore import features


def build_example(
    key: str, image_jpeg: bytes, mask_encoded: bytes, height: int, width: int
) -> bytes:
    """Serialised tf.train.Example with the schema of segcore.features."""
    import tensorflow as tf  # deferred: importing it costs seconds; the CLI must start fast

    def _bytes(value: bytes) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def _int(value: int) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                features.IMAGE: _bytes(image_jpeg),
                features.MASK: _bytes(mask_encoded),
                features.KEY: _bytes(key.encode("utf-8")),
                features.HEIGHT: _int(height),
                features.WIDTH: _int(width),
            }
        )
    )
    # Feature map entries in key order: the same entry gives the same bytes in any process
    # (protobuf's map order follows a per-process hash seed).
    return example.SerializeToString(deterministic=True)
