"""Per-sample transforms for the random-access loaders: the sample form and its random state.

A `transform` is called once per record, in the worker that decoded it, before batching:

    sample = transform(sample)

`sample` is a dict, in one of two forms (the loader's `sample_format`):

- "torch" (PyTorch's default): "image" tv_tensors.Image uint8 [3,H,W], "mask"
  tv_tensors.Mask [1,H,W] (0/1, or class ids), "key" str, and with resize="fit" plus
  with_valid "valid" tv_tensors.Mask uint8 [1,H,W]. torchvision v2 transforms take the
  dict as it is and move image and masks together (plain tensors when torchvision is not
  installed: tv_tensors are torch.Tensor subclasses, so code for either works).
- "numpy" (Grain's default; albumentations): "image" uint8 [H,W,3], "mask" [H,W,1],
  "key", "valid" [H,W,1], numpy arrays in HWC order.

The transform returns a dict in the same form with at least "image" and "mask" (and
"valid" if it was given); "key" is carried over when it is left out.

Random state: before each call the global generators that augmentation libraries draw from
(Python's `random`, NumPy's legacy `np.random`, and torch's when torch is loaded) are
seeded with `sample_seed(seed, epoch, record)`, and restored afterwards. So each record
gets its own draws, different from its neighbours' in the batch and in every epoch, and the
same draws whatever the worker count, and after a resume. A library with a generator of its
own (albumentations 2's Compose) reads the seed from `current_seed()` inside the transform.
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

TORCH_FORMAT = "torch"
NUMPY_FORMAT = "numpy"
SAMPLE_FORMATS = (TORCH_FORMAT, NUMPY_FORMAT)

Transform = Callable[[dict[str, Any]], dict[str, Any]]

_current: list[int] = []  # the seed of the sample being transformed, innermost last


def sample_seed(seed: int, epoch: int, record: int) -> int:
    """The 32-bit seed of record `record`'s transform in `epoch` of a loader seeded `seed`."""
    words = [int(value) % 2**64 for value in (seed, epoch, record)]
    return int(np.random.SeedSequence(words).generate_state(1)[0])


def current_seed() -> int:
    """Inside a transform: the seed of the sample it is transforming (see sample_seed)."""
    if not _current:
        raise RuntimeError("current_seed() is only defined inside a loader's transform")
    return _current[-1]


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Global generators seeded with `seed` inside, as they were outside."""
    torch = sys.modules.get("torch")
    # The CPU generator only: torch.manual_seed would also queue CUDA seeding, which
    # records a stack trace per call (about 1 ms) without a GPU.
    generator = torch.default_generator if torch is not None else None
    saved = (random.getstate(), np.random.get_state())
    torch_state = generator.get_state() if generator is not None else None
    random.seed(seed)
    np.random.seed(seed)
    if generator is not None:
        generator.manual_seed(seed)
    _current.append(seed)
    try:
        yield
    finally:
        _current.pop()
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        if generator is not None:
            generator.set_state(torch_state)


def check_format(sample_format: str) -> None:
    if sample_format not in SAMPLE_FORMATS:
        raise ValueError(f"sample_format must be one of {SAMPLE_FORMATS}, got {sample_format!r}")


def apply(transform: Transform, sample: dict[str, Any], seed: int) -> dict[str, Any]:
    """`transform(sample)` under `seed`, checked to be a dict with image and mask."""
    with seeded(seed):
        result = transform(sample)
    if not isinstance(result, dict) or "image" not in result or "mask" not in result:
        raise TypeError(
            f"transform must return a dict with 'image' and 'mask' (the sample's form), got "
            f"{type(result).__name__} for key {sample.get('key')!r}"
        )
    if "key" not in result:
        result = {**result, "key": sample["key"]}
    return result


class SampleReader:
    """A source's records as samples: read at `image_size`, "valid" kept only when asked for
    (then always there), in `sample_format`, then `transform`ed under the record's own seed
    (without a transform, as read). Subclasses give `to_torch(item)`, the "torch" form
    (shard_reader.torch.torch_form), so that only the loaders import torch."""

    def __init__(self, source, image_size, resize, with_valid, transform, sample_format, seed):
        self.source, self.image_size, self.resize = source, image_size, resize
        self.with_valid, self.transform = with_valid, transform
        self.sample_format, self.seed = sample_format, seed

    def sample(self, index: int, epoch: int) -> dict[str, Any]:
        item = self.source.read_sized(index, self.image_size, self.resize)
        if not self.with_valid:
            item.pop("valid", None)
        elif "valid" not in item:
            item["valid"] = np.ones_like(item["mask"], np.uint8)
        if self.sample_format == TORCH_FORMAT:
            item = self.to_torch(item)
        if self.transform is None:
            return item
        return apply(self.transform, item, sample_seed(self.seed, epoch, index))
