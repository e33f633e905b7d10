"""Readers of segprep shards. Never imports apache_beam; imports TensorFlow only when asked.

`make_dataset` and `steps_per_epoch` (tf.data, shard_reader.dataset) load TensorFlow on first
use; `shard_reader.source.RecordSource` (random access), `shard_reader.torch`,
`shard_reader.grain`, `class_weights` and `load_classes` work without TensorFlow installed.

Importing this package turns on TensorFlow's BFC allocator for CPU memory unless the
environment already chose (TF_CPU_ALLOCATOR_USE_BFC): a float32 batch of 800x600 images
is tens of MB, glibc maps a block that size afresh for every batch, and the page faults
cost more than decoding (benchmarks/reader.py: 2.3x the throughput with BFC). TensorFlow
reads the variable when it first allocates, so import shard_reader before running ops,
or set the variable yourself; BFC keeps the peak reserved for the life of the process.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

# After the allocator choice, on purpose; the names metadata.__all__ lists.
from shard_reader import metadata  # noqa: E402
from shard_reader.metadata import *  # noqa: E402, F403

# Exported name -> the module that defines it, imported on first access (PEP 562).
_LAZY = {
    "DEFAULT_SHUFFLE_BUFFER": "shard_reader.dataset",
    "make_dataset": "shard_reader.dataset",
    "steps_per_epoch": "shard_reader.dataset",
    "RecordSource": "shard_reader.source",
}

__all__ = [*_LAZY, *metadata.__all__]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
