"""Joint image/mask augmentation for the loader tests and benchmark: torchvision v2 when it is
installed, else a hand-written transform with the same semantics.

Both take and return the loader's "torch" sample form ({"image": [3,H,W] uint8, "mask":
[1,H,W] ids, ...}), draw from torch's global generator as v2 does, and do a random resized
crop to `size`, a horizontal flip (p=0.5) and a rotation within +-`degrees`: the image
bilinear with fill 0, masks by nearest neighbour with fill `mask_fill` (so every mask value
out is one the mask held, or the fill).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

SCALE = (0.3, 1.0)
RATIO = (3 / 4, 4 / 3)


def torchvision_or_skip():
    """torchvision, or a pytest skip saying why it does not import: not installed, or built
    for another torch (PyPI's CUDA 0.28.0 beside torch 2.13.0+cpu raises RuntimeError)."""
    import pytest

    try:
        import torchvision
    except ImportError:
        pytest.skip("torchvision is not installed")
    except RuntimeError as error:
        pytest.skip(f"torchvision does not load against this torch: {error}")
    return torchvision


def torchvision_augment(size: tuple[int, int], degrees: float = 30, mask_fill: int = 255):
    """The torchvision v2 pipeline (ImportError without torchvision)."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    return v2.Compose(
        [
            v2.RandomResizedCrop(size, scale=SCALE, ratio=RATIO, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.RandomRotation(degrees, fill={tv_tensors.Image: 0, tv_tensors.Mask: mask_fill}),
        ]
    )


def joint_augment(size: tuple[int, int], degrees: float = 30, mask_fill: int = 255):
    """torchvision v2's pipeline when installed, else HandmadeAugment (same semantics)."""
    try:
        return torchvision_augment(size, degrees, mask_fill)
    except (ImportError, RuntimeError):  # RuntimeError: a build for another torch
        return HandmadeAugment(size, degrees, mask_fill)


class HandmadeAugment:
    """RandomResizedCrop + RandomHorizontalFlip + RandomRotation, in plain torch ops."""

    def __init__(self, size: tuple[int, int], degrees: float = 30, mask_fill: int = 255):
        self.size, self.degrees, self.mask_fill = tuple(size), degrees, mask_fill

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        image = sample["image"]
        top, left, height, width = self._crop_box(image.shape[1], image.shape[2])
        image = image[:, top : top + height, left : left + width]
        image = F.interpolate(image[None].float(), self.size, mode="bilinear", antialias=True)[0]
        masks = {name: sample[name] for name in ("mask", "valid") if name in sample}
        masks = {
            name: F.interpolate(
                value[:, top : top + height, left : left + width][None].double(),
                self.size,
                mode="nearest-exact",
            )[0]
            for name, value in masks.items()
        }
        if torch.rand(1) < 0.5:
            image = image.flip(-1)
            masks = {name: value.flip(-1) for name, value in masks.items()}
        angle = float(torch.empty(1).uniform_(-self.degrees, self.degrees))
        image = self._rotate(image, angle, "bilinear", 0)
        fills = {"mask": self.mask_fill, "valid": 0}
        out = {**sample, "image": image.round().clamp(0, 255).to(torch.uint8)}
        for name, value in masks.items():
            rotated = self._rotate(value, angle, "nearest", fills[name])
            out[name] = rotated.to(sample[name].dtype)
        return out

    def _crop_box(self, height: int, width: int) -> tuple[int, int, int, int]:
        area = height * width
        log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
        for _ in range(10):
            target = area * float(torch.empty(1).uniform_(*SCALE))
            ratio = math.exp(float(torch.empty(1).uniform_(*log_ratio)))
            w = round(math.sqrt(target * ratio))
            h = round(math.sqrt(target / ratio))
            if 0 < w <= width and 0 < h <= height:
                top = int(torch.randint(0, height - h + 1, (1,)))
                left = int(torch.randint(0, width - w + 1, (1,)))
                return top, left, h, w
        return 0, 0, height, width

    @staticmethod
    def _rotate(pixels: torch.Tensor, angle: float, mode: str, fill: float) -> torch.Tensor:
        """Rotated about the centre; pixels from outside get `fill` (images: 0)."""
        theta = math.radians(angle)
        matrix = torch.tensor(
            [[math.cos(theta), -math.sin(theta), 0.0], [math.sin(theta), math.cos(theta), 0.0]],
            dtype=pixels.dtype,
        )[None]
        grid = F.affine_grid(matrix, [1, *pixels.shape], align_corners=False)
        if mode == "bilinear":  # images: zero padding is the fill
            return F.grid_sample(pixels[None], grid, mode=mode, align_corners=False)[0]
        # Shifted by one so that 0 marks "outside" after zero padding, then filled.
        shifted = F.grid_sample(pixels[None] + 1, grid, mode=mode, align_corners=False)[0]
        inside = F.grid_sample(
            torch.ones_like(pixels[None]), grid, mode="nearest", align_corners=False
        )[0]
        return torch.where(inside > 0, shifted - 1, torch.full_like(shifted, fill))
