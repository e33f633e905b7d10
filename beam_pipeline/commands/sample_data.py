"""A synthetic dataset in the portrait-segmentation layout, broken the way downloads are."""

from __future__ import annotations

import collections
import dataclasses
import io
from pathlib import Path

import numpy as np
import scipy.io
from PIL import Image

from beam_pipeline.launch.options import DEFAULT_BROKEN_FRACTION
from segcore.rejects import Reason

HEIGHT, WIDTH = 800, 600

# Kind of breakage -> the reject reason segprep must report for it.
BREAKAGES: dict[str, Reason] = {
    "truncated_jpeg": Reason.IMAGE_TRUNCATED,
    "zero_byte_image": Reason.IMAGE_EMPTY,
    "image_without_mask": Reason.MISSING_MASK,
    "mask_without_image": Reason.MISSING_IMAGE,
    "unreadable_mat": Reason.MASK_UNREADABLE,
    "size_mismatch": Reason.SIZE_MISMATCH,
}


@dataclasses.dataclass(frozen=True)
class SampleSummary:
    image_dir: Path
    mask_dir: Path
    count: int
    broken: dict[str, str]  # key -> breakage kind

    def expected_rejects(self) -> dict[str, Reason]:
        return {key: BREAKAGES[kind] for key, kind in self.broken.items()}

    def breakage_counts(self) -> dict[str, int]:
        counts = collections.Counter(self.broken.values())
        return {kind: counts.get(kind, 0) for kind in BREAKAGES}


def _smooth_noise(rng: np.random.Generator, height: int, width: int, cells: int) -> np.ndarray:
    """Low-frequency texture: coarse random grid upsampled bilinearly by Pillow."""
    coarse = rng.random((cells, max(2, cells * width // height)), dtype=np.float32)
    image = Image.fromarray((coarse * 255).astype(np.uint8)).resize((width, height), Image.BILINEAR)
    return np.asarray(image, dtype=np.float32) / 255.0


def portrait(
    rng: np.random.Generator, height: int = HEIGHT, width: int = WIDTH
) -> tuple[np.ndarray, np.ndarray]:
    """(RGB uint8 image, uint8 0/1 mask) of a head-and-shoulders figure on a textured background."""
    rows = np.arange(height, dtype=np.float32)[:, None]
    cols = np.arange(width, dtype=np.float32)[None, :]
    base = rng.uniform(40, 220, size=3).astype(np.float32)
    gradient = (rows / height)[..., None] * rng.uniform(-60, 60, size=3).astype(np.float32)
    texture = (_smooth_noise(rng, height, width, 12)[..., None] - 0.5) * 90
    stripes = 12 * np.sin(cols / rng.uniform(6, 20))[..., None]
    background = base + gradient + texture + stripes

    cx = width * rng.uniform(0.4, 0.6)
    head_y, head_ry, head_rx = height * rng.uniform(0.28, 0.36), height * 0.13, width * 0.16
    head = ((cols - cx) / head_rx) ** 2 + ((rows - head_y) / head_ry) ** 2 <= 1.0
    neck = (np.abs(cols - cx) < width * 0.06) & (rows > head_y) & (rows < head_y + head_ry * 1.6)
    shoulder_y = head_y + head_ry * 1.5
    body_rx, body_ry = width * 0.42, height * 1.05 - shoulder_y
    body = ((cols - cx) / body_rx) ** 2 + ((rows - height * 1.05) / body_ry) ** 2 <= 1.0
    mask = (head | neck | body).astype(np.uint8)

    skin = rng.uniform([150, 100, 80], [240, 190, 160]).astype(np.float32)
    cloth = rng.uniform(20, 200, size=3).astype(np.float32)
    shading = (_smooth_noise(rng, height, width, 6)[..., None] - 0.5) * 40
    person = np.where((head | neck)[..., None], skin, cloth) + shading
    image = np.where(mask[..., None].astype(bool), person, background)
    image += rng.standard_normal(size=image.shape, dtype=np.float32) * 4
    return np.clip(image, 0, 255).astype(np.uint8), mask


def jpeg_bytes(image: np.ndarray, quality: int = 90) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def mat_bytes(mask: np.ndarray, **variables: np.ndarray) -> bytes:
    """MATLAB v5 file (compressed elements) holding `mask` and any extra variables."""
    out = io.BytesIO()
    scipy.io.savemat(out, {"mask": mask, **variables}, format="5", do_compression=True)
    return out.getvalue()


def write_sample_data(
    directory: str | Path,
    count: int = 60,
    seed: int = 0,
    broken_fraction: float = DEFAULT_BROKEN_FRACTION,
    height: int = HEIGHT,
    width: int = WIDTH,
) -> SampleSummary:
    """`directory/images/00001.jpg` and `directory/masks/00001_mask.mat`, some broken."""
    if count < 1:
        raise ValueError("count must be at least 1")
    if not 0.0 <= broken_fraction <= 1.0:
        raise ValueError("broken_fraction must be between 0 and 1")
    root = Path(directory)
    image_dir, mask_dir = root / "images", root / "masks"
    image_dir.mkdir(parents=True, exist_ok=True)
    mask_dir.mkdir(parents=True, exist_ok=True)
    plan_rng = np.random.default_rng(seed)
    num_broken = min(count, round(count * broken_fraction))
    broken_indices = sorted(plan_rng.choice(count, size=num_broken, replace=False).tolist())
    kinds = list(BREAKAGES)
    broken = {f"{index + 1:05d}": kinds[n % len(kinds)] for n, index in enumerate(broken_indices)}
    for index in range(count):
        key = f"{index + 1:05d}"
        rng = np.random.default_rng([seed, index])
        image, mask = portrait(rng, height, width)
        image_data, mask_data = jpeg_bytes(image), mat_bytes(mask)
        kind = broken.get(key)
        if kind == "truncated_jpeg":
            image_data = image_data[: len(image_data) * 3 // 5]
        elif kind == "zero_byte_image":
            image_data = b""
        elif kind == "unreadable_mat":
            mask_data = mask_data[: len(mask_data) // 2]
        elif kind == "size_mismatch":
            mask_data = mat_bytes(mask[: height // 2, : width // 2])
        if kind != "mask_without_image":
            (image_dir / f"{key}.jpg").write_bytes(image_data)
        if kind != "image_without_mask":
            (mask_dir / f"{key}_mask.mat").write_bytes(mask_data)
    return SampleSummary(image_dir, mask_dir, count, broken)
