"""The Example codec: one record's fields to serialized tf.train.Example bytes and back.

Built on the protobuf schema of `example_schema` (wire-compatible with TensorFlow's
example.proto), so neither the writer nor the readers import TensorFlow, and the bytes are
those `tf.train.Example.SerializeToString(deterministic=True)` gives.
"""

from __future__ import annotations

from typing import Any

from transforms.format import example_schema, features


def build_example(
    key: str, image_jpeg: bytes, mask_encoded: bytes, height: int, width: int
) -> bytes:
    """Serialised tf.train.Example with the schema of transforms.format.features."""
    example = example_schema.Example()
    feature = example.features.feature
    feature[features.IMAGE].bytes_list.value.append(image_jpeg)
    feature[features.MASK].bytes_list.value.append(mask_encoded)
    feature[features.KEY].bytes_list.value.append(key.encode("utf-8"))
    feature[features.HEIGHT].int64_list.value.append(height)
    feature[features.WIDTH].int64_list.value.append(width)
    # Map entries in key order: the same entry gives the same bytes in any process.
    return example.SerializeToString(deterministic=True)


class ExampleError(ValueError):
    """Serialized bytes that are not an Example with segprep's five features."""


def parse_example(serialized: bytes) -> dict[str, Any]:
    """{image, mask: bytes; key: str; height, width: int}; ExampleError if a field is off."""
    try:
        feature = example_schema.Example.FromString(serialized).features.feature
        record = {
            features.IMAGE: _one(feature, features.IMAGE, "bytes_list"),
            features.MASK: _one(feature, features.MASK, "bytes_list"),
            features.KEY: _one(feature, features.KEY, "bytes_list").decode("utf-8"),
            features.HEIGHT: _one(feature, features.HEIGHT, "int64_list"),
            features.WIDTH: _one(feature, features.WIDTH, "int64_list"),
        }
    except ExampleError:
        raise
    except Exception as error:  # noqa: BLE001 - protobuf's DecodeError, UnicodeDecodeError
        raise ExampleError(f"not a segprep Example: {type(error).__name__}: {error}") from None
    return record


def _one(feature, name: str, kind: str):
    if name not in feature or feature[name].WhichOneof("kind") != kind:
        raise ExampleError(f"feature {name!r} missing or not a {kind}")
    values = getattr(feature[name], kind).value
    if len(values) != 1:
        raise ExampleError(f"feature {name!r} holds {len(values)} values, not 1")
    return values[0]
