"""The shards of a fixed small input are byte-for-byte what the writer has always made.

CPU work in the codecs (how an image is validated, how a mask is decoded and encoded) may
change how an entry is computed, never what is stored: readers, caches and checksums rely on
the same inputs giving the same shards. The digests were taken from the writer before its
CPU work; the inputs are pinned too, so a library that encodes them differently is told
apart from a writer that stores something else.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.helpers import pinned_inputs
from tests.helpers.runs import RUNNER_ARGS

_MAT_HEADER = 128  # MATLAB v5's text header holds the time the file was written

CASES = {
    "jpeg_masks": (
        lambda root: pinned_inputs.write_binary(root, "mat"),
        [],
        "14701c3fd5600f711e9b2af2ece9058a",
        {
            "train-00000-of-00001.tfrecord": (
                "1c99425a7b2d043f5381c3c6b327d12ded6512c4e6bf4db4dc0d87ffd8608302"
            ),
            "validation-00000-of-00001.tfrecord": (
                "9e70828ac29d095304f47e5e9e262af752e5a93aced2871586d9e1cfda034ee5"
            ),
        },
        [["10_truncated", "image_truncated"]],
    ),
    "png_masks": (
        lambda root: pinned_inputs.write_binary(root, "png"),
        ["--mask_format", "png"],
        "485b1c41f79a60103d3a1e941f9b4d27",
        {
            "train-00000-of-00001.tfrecord": (
                "8a556fdf4fcc4355cd78db3753d484fdfc446f3e079b022271583a5d87a128fa"
            ),
            "validation-00000-of-00001.tfrecord": (
                "abbf9cdbf957ed3302fc38818aa04c869e5f34e206d77d1ae952c955e0f16940"
            ),
        },
        [["10_truncated", "image_truncated"]],
    ),
    "class_masks": (
        pinned_inputs.write_classes,
        ["--mask_type", "classes", "--num_classes", str(pinned_inputs.CLASSES)],
        "346a97f011f919a2173071a09139ab9b",
        {
            "train-00000-of-00002.tfrecord": (
                "acd87f9a1ad8c96466e7fa8f43543e583a6f209a5d76dd7a4bd9760965b80cab"
            ),
            "train-00001-of-00002.tfrecord": (
                "09853eef7c7f7f17f3046ea95c50d19600188822174a6d04be99723bed5cc05f"
            ),
        },
        [],
    ),
}


def inputs_digest(root: Path) -> str:
    """One digest of every input file's name and content (.mat files past their header)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(data[_MAT_HEADER:] if path.suffix == ".mat" else data)
    return digest.hexdigest()[:32]


@pytest.mark.parametrize("case", sorted(CASES))
def test_shards_are_byte_identical_to_the_pinned_ones(case, tmp_path):
    from beam_pipeline.launch import launcher

    make, flags, inputs_sha, shards_sha, rejects = CASES[case]
    data = make(tmp_path / "in")
    assert inputs_digest(data) == inputs_sha, (
        "the pinned inputs themselves changed (Pillow, libjpeg or scipy encode them "
        "differently): the shard digests below no longer say anything"
    )
    out = tmp_path / "out"
    launcher.run(
        [
            "--image_dir",
            str(data / "images"),
            "--mask_dir",
            str(data / "masks"),
            "--output_dir",
            str(out),
            "--num_shards",
            "2",
            *flags,
            *RUNNER_ARGS,
        ]
    )
    written = {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in out.glob("*.tfrecord")
    }
    assert written == shards_sha
    lines = (out / "rejects.jsonl").read_text().splitlines()
    assert [[json.loads(line)["key"], json.loads(line)["reason"]] for line in lines] == rejects
