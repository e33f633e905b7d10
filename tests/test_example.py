"""The serialised Example: TensorFlow's schema, and the same bytes in every process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tensorflow as tf

from transforms.format import features
from transforms.format.example import build_example

REPO = Path(__file__).resolve().parents[1]
_SERIALISE = (
    "import sys; sys.path.insert(0, sys.argv[1]);"
    "from transforms.format.example import build_example;"
    "sys.stdout.buffer.write(build_example('k/01', b'jpeg' * 9, b'mask' * 5, 600, 800))"
)


def test_example_parses_with_the_declared_features():
    parsed = tf.train.Example.FromString(build_example("k/01", b"jpeg", b"mask", 600, 800))
    feature = parsed.features.feature
    assert feature[features.IMAGE].bytes_list.value == [b"jpeg"]
    assert feature[features.MASK].bytes_list.value == [b"mask"]
    assert feature[features.KEY].bytes_list.value == [b"k/01"]
    assert feature[features.HEIGHT].int64_list.value == [600]
    assert feature[features.WIDTH].int64_list.value == [800]


def test_same_entry_gives_the_same_bytes_in_every_process():
    """Protobuf orders map entries by a per-process hash seed unless told otherwise: shards
    written by different processes (or Dataflow workers) must still be byte-identical."""
    outputs = {
        subprocess.run(
            [sys.executable, "-c", _SERIALISE, str(REPO)], capture_output=True, check=True
        ).stdout
        for _ in range(4)
    }
    assert len(outputs) == 1
    assert outputs == {build_example("k/01", b"jpeg" * 9, b"mask" * 5, 600, 800)}
