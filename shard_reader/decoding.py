"""Parse a serialized record and decode image and mask, entirely in TensorFlow ops."""

from __future__ import annotations

import tensorflow as tf

from transforms import features

FEATURE_SPEC = {
    features.IMAGE: tf.io.FixedLenFeature([], tf.string),
    features.MASK: tf.io.FixedLenFeature([], tf.string),
    features.KEY: tf.io.FixedLenFeature([], tf.string),
    features.HEIGHT: tf.io.FixedLenFeature([], tf.int64),
    features.WIDTH: tf.io.FixedLenFeature([], tf.int64),
}


def make_decoder(mask_format: str, image_shape: tuple[int, int] | None):
    """serialized -> (image float32 [H,W,3] 0..255, mask float32 [H,W,1] in {0,1}, key)."""
    decode_mask = tf.io.decode_png if mask_format == "png" else tf.io.decode_jpeg

    def decode(serialized: tf.Tensor):
        parsed = tf.io.parse_single_example(serialized, FEATURE_SPEC)
        image = tf.io.decode_jpeg(parsed[features.IMAGE], channels=3)
        mask = decode_mask(parsed[features.MASK], channels=1)
        image = tf.cast(image, tf.float32)
        mask = tf.cast(mask >= features.MASK_THRESHOLD, tf.float32)
        if image_shape is not None:
            image = tf.ensure_shape(image, [*image_shape, 3])
            mask = tf.ensure_shape(mask, [*image_shape, 1])
        return image, mask, parsed[features.KEY]

    return decode
