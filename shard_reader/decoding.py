"""Parse serialized records and decode image and mask, entirely in TensorFlow ops.

Decoding stops at uint8 on purpose: float32 pixels are four times the bytes, so they are
made once per batch (`convert`) instead of per record and then copied again by `batch`.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from segcore import features

Decoded = tuple[tf.Tensor, tf.Tensor, tf.Tensor | None]


# The whole record schema, for tools that check every feature (segprep verify, inspect).
FEATURE_SPEC = {
    features.IMAGE: tf.io.FixedLenFeature([], tf.string),
    features.MASK: tf.io.FixedLenFeature([], tf.string),
    features.KEY: tf.io.FixedLenFeature([], tf.string),
    features.HEIGHT: tf.io.FixedLenFeature([], tf.int64),
    features.WIDTH: tf.io.FixedLenFeature([], tf.int64),
}


def feature_spec(with_keys: bool) -> dict[str, tf.io.FixedLenFeature]:
    """Only the features the reader uses: height/width are implied by the decoded pixels."""
    names = [features.IMAGE, features.MASK] + ([features.KEY] if with_keys else [])
    return {name: FEATURE_SPEC[name] for name in names}


def make_decoder(
    mask_format: str, image_shape: tuple[int, int] | None, with_keys: bool = False
) -> Callable[[tf.Tensor], Decoded]:
    """serialized -> (image uint8 [H,W,3], mask uint8 [H,W,1] of 0 or 1, key or None).

    The mask is thresholded at 128 (the writer checked that JPEG masks survive exactly this)
    right after decoding, while it is in cache and a quarter of its float32 size. With a
    uniform `image_shape` the shapes are static and checked against the pixels, so a record
    that disagrees with metadata.json fails loudly instead of breaking a batch later.
    """
    if mask_format not in features.MASK_FORMATS:
        raise ValueError(f"unknown mask format {mask_format!r}")
    decode_mask = tf.io.decode_png if mask_format == "png" else tf.io.decode_jpeg
    spec = feature_spec(with_keys)

    def decode(serialized: tf.Tensor) -> Decoded:
        parsed = tf.io.parse_single_example(serialized, spec)
        image = tf.io.decode_jpeg(parsed[features.IMAGE], channels=3)
        mask = decode_mask(parsed[features.MASK], channels=1)
        if image_shape is not None:
            image = tf.ensure_shape(image, [*image_shape, 3])
            mask = tf.ensure_shape(mask, [*image_shape, 1])
        else:
            tf.debugging.assert_equal(
                tf.shape(image)[:2], tf.shape(mask)[:2], message="image and mask sizes differ"
            )
        mask = tf.cast(mask >= features.MASK_THRESHOLD, tf.uint8)
        return image, mask, parsed[features.KEY] if with_keys else None

    return decode


OUTPUT_DTYPES = (tf.float32, tf.uint8)


def convert(image: tf.Tensor, mask: tf.Tensor, dtype: tf.DType) -> tuple[tf.Tensor, tf.Tensor]:
    """Decoded uint8 image (0..255) and 0/1 mask -> `dtype`; one record or a whole batch."""
    if dtype == tf.uint8:
        return image, mask
    return tf.cast(image, dtype), tf.cast(mask, dtype)
