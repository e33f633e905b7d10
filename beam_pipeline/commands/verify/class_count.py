"""Class-id statistics of one split, counted from the masks verify reads."""

from __future__ import annotations

import numpy as np

from transforms.class_stats import ClassStats
from transforms.format.dataset_info import ClassesInfo


class ClassCount:
    """Statistics of one split, counted from the masks verify reads (numpy accumulators)."""

    def __init__(self, classes: ClassesInfo) -> None:
        self.num_classes = classes.num_classes
        self.ignore_index = classes.ignore_index
        self.pixels = np.zeros(self.num_classes, np.int64)
        self.images = np.zeros(self.num_classes, np.int64)
        self.image_pixels = np.zeros(self.num_classes, np.int64)
        self.ignored = 0
        self.num_images = 0
        self.complete = True  # every record of the split was counted

    def add(self, counts: np.ndarray) -> None:
        """One mask, as the bincount of its values (only class ids and the ignore index)."""
        pixels = counts[: self.num_classes]
        ignored = int(counts[self.ignore_index]) if self.ignore_index < len(counts) else 0
        labelled = int(counts.sum()) - ignored
        present = pixels > 0
        self.pixels += pixels
        self.images += present
        self.image_pixels += present * labelled
        self.ignored += ignored
        self.num_images += 1

    def stats(self) -> ClassStats:
        return ClassStats(
            tuple(self.pixels.tolist()),
            tuple(self.images.tolist()),
            tuple(self.image_pixels.tolist()),
            self.ignored,
            self.num_images,
        )
