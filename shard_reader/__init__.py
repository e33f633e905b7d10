"""tf.data input pipeline over segprep shards. Never imports apache_beam.

Importing this package turns on TensorFlow's BFC allocator for CPU memory unless the
environment already chose (TF_CPU_ALLOCATOR_USE_BFC): a float32 batch of 800x600 images
is tens of MB, glibc maps a block that size afresh for every batch, and the page faults
cost more than decoding (benchmarks/reader.py: 2.3x the throughput with BFC). TensorFlow
reads the variable when it first allocates, so import shard_reader before running ops,
or set the variable yourself; BFC keeps the peak reserved for the life of the process.
"""

import os

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

from shard_reader.dataset import (  # noqa: E402 - after the allocator choice, on purpose
    DEFAULT_SHUFFLE_BUFFER,
    make_dataset,
    steps_per_epoch,
)
from shard_reader.metadata import (  # noqa: E402
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
