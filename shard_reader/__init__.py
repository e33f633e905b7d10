"""tf.data input pipeline over segprep shards. Never imports apache_beam."""

from shard_reader.dataset import DEFAULT_SHUFFLE_BUFFER, make_dataset, steps_per_epoch
from shard_reader.metadata import (
    IncompleteOutputError,
    MetadataError,
    SplitInfo,
    load_metadata,
    load_split,
)

__all__ = [
    "DEFAULT_SHUFFLE_BUFFER",
    "IncompleteOutputError",
    "MetadataError",
    "SplitInfo",
    "load_metadata",
    "load_split",
    "make_dataset",
    "steps_per_epoch",
]
