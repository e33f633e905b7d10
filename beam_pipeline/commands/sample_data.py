"""Synthetic datasets in the real layouts, broken the way downloads are.

Binary: the portrait-segmentation layout (JPEG images, .mat 0/1 masks). With `classes`:
Pascal VOC's (JPEG images, palette PNG class-id masks, 255 on some object boundaries).
"""

from __future__ import annotations

import collections
import dataclasses
import io
from pathlib import Path

import numpy as np
import scipy.io
from PIL import Image

from beam_pipeline.errors import UsageError
from beam_pipeline.launch.options import DEFAULT_BROKEN_FRACTION
from transforms.codecs.class_mask import DEFAULT_IGNORE_INDEX
from transforms.rejects import Reason

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
# The same for a class-id set; the out-of-range id comes first, so even 3 broken entries
# (60 entries at 5 %) include one.
CLASS_BREAKAGES: dict[str, Reason] = {
    "out_of_range_class": Reason.MASK_VALUES,
    "truncated_jpeg": Reason.IMAGE_TRUNCATED,
    "zero_byte_image": Reason.IMAGE_EMPTY,
    "image_without_mask": Reason.MISSING_MASK,
    "mask_without_image": Reason.MISSING_IMAGE,
    "unreadable_png": Reason.MASK_UNREADABLE,
    "size_mismatch": Reason.SIZE_MISMATCH,
}
MAX_SAMPLE_CLASSES = 254  # 8-bit palette: ids 0..253, the out-of-range id, 255 = ignore


@dataclasses.dataclass(frozen=True)
class SampleSummary:
    image_dir: Path
    mask_dir: Path
    count: int
    broken: dict[str, str]  # key -> breakage kind
    classes: int | None = None  # None: binary portrait masks

    @property
    def breakages(self) -> dict[str, Reason]:
        return BREAKAGES if self.classes is None else CLASS_BREAKAGES

    def expected_rejects(self) -> dict[str, Reason]:
        return {key: self.breakages[kind] for key, kind in self.broken.items()}

    def breakage_counts(self) -> dict[str, int]:
        counts = collections.Counter(self.broken.values())
        return {kind: counts.get(kind, 0) for kind in self.breakages}


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


def voc_palette() -> list[int]:
    """Pascal VOC's 256-colour palette (flat r, g, b), index 255 = (224, 224, 192)."""
    palette = []
    for index in range(256):
        rgb = [0, 0, 0]
        for bit in range(8):
            for channel in range(3):
                rgb[channel] |= ((index >> (bit * 3 + channel)) & 1) << (7 - bit)
        palette.extend(rgb)
    return palette


def scene(
    rng: np.random.Generator, classes: int, height: int = HEIGHT, width: int = WIDTH
) -> tuple[np.ndarray, np.ndarray]:
    """(RGB uint8 image, uint8 class ids) of 3-6 overlapping objects on class 0 background.

    Each class has its own colour, so a model could learn the task; one or two objects
    get a one-pixel ignore (255) outline, as VOC marks its object boundaries.
    """
    rows = np.arange(height, dtype=np.float32)[:, None]
    cols = np.arange(width, dtype=np.float32)[None, :]
    ids = np.zeros((height, width), dtype=np.uint8)
    owner = np.full((height, width), -1, dtype=np.int8)  # which object a pixel shows
    for number in range(int(rng.integers(3, 7))):
        cy, cx = rng.uniform(0.1, 0.9) * height, rng.uniform(0.1, 0.9) * width
        ry, rx = rng.uniform(0.06, 0.25) * height, rng.uniform(0.06, 0.25) * width
        shape = number % 3
        if shape == 0:
            inside = ((rows - cy) / ry) ** 2 + ((cols - cx) / rx) ** 2 <= 1.0
        elif shape == 1:
            inside = (np.abs(rows - cy) <= ry) & (np.abs(cols - cx) <= rx)
        else:  # triangle pointing up
            inside = (rows <= cy + ry) & (np.abs(cols - cx) <= (rows - (cy - ry)) * rx / (2 * ry))
        ids[inside] = rng.integers(1, classes)
        owner[inside] = number
    image = _class_colours()[ids].astype(np.float32)
    image += (_smooth_noise(rng, height, width, 8)[..., None] - 0.5) * 50
    image += rng.standard_normal(size=image.shape, dtype=np.float32) * 4
    for number in (0, 1):  # the visible outline of the first two objects
        visible = owner == number
        ids[visible & ~_eroded(visible)] = DEFAULT_IGNORE_INDEX
    return np.clip(image, 0, 255).astype(np.uint8), ids


def _eroded(inside: np.ndarray) -> np.ndarray:
    """Pixels whose four neighbours are all inside too."""
    core = inside.copy()
    core[1:, :] &= inside[:-1, :]
    core[:-1, :] &= inside[1:, :]
    core[:, 1:] &= inside[:, :-1]
    core[:, :-1] &= inside[:, 1:]
    return core


def _class_colours() -> np.ndarray:
    """[256, 3] a fixed colour per class id (background grey-green)."""
    colours = np.random.default_rng(12345).uniform(30, 230, size=(256, 3))
    colours[0] = (90, 110, 80)
    return colours


def palette_png(ids: np.ndarray) -> bytes:
    """8-bit palette PNG of class ids with VOC's colours: the indices are the ids."""
    image = Image.fromarray(ids)
    image.putpalette(voc_palette())
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def write_sample_data(
    directory: str | Path,
    count: int = 60,
    seed: int = 0,
    broken_fraction: float = DEFAULT_BROKEN_FRACTION,
    height: int = HEIGHT,
    width: int = WIDTH,
    classes: int | None = None,
) -> SampleSummary:
    """`directory/images/00001.jpg` and `directory/masks/00001_mask.mat`, some broken.

    With `classes`, masks are `directory/masks/00001.png`: palette PNGs of class ids
    0..classes-1 and 255.
    """
    if count < 1:
        raise UsageError("--count must be at least 1")
    if not 0.0 <= broken_fraction <= 1.0:
        raise UsageError("--broken_fraction must be between 0 and 1")
    if classes is not None and not 2 <= classes <= MAX_SAMPLE_CLASSES:
        raise UsageError(f"--classes must be from 2 to {MAX_SAMPLE_CLASSES}")
    root = Path(directory)
    image_dir, mask_dir = root / "images", root / "masks"
    image_dir.mkdir(parents=True, exist_ok=True)
    mask_dir.mkdir(parents=True, exist_ok=True)
    plan_rng = np.random.default_rng(seed)
    num_broken = min(count, round(count * broken_fraction))
    broken_indices = sorted(plan_rng.choice(count, size=num_broken, replace=False).tolist())
    kinds = list(BREAKAGES if classes is None else CLASS_BREAKAGES)
    broken = {f"{index + 1:05d}": kinds[n % len(kinds)] for n, index in enumerate(broken_indices)}
    for index in range(count):
        key = f"{index + 1:05d}"
        rng = np.random.default_rng([seed, index])
        kind = broken.get(key)
        if classes is not None:
            image, ids = scene(rng, classes, height, width)
            _write_class_entry(image_dir, mask_dir, key, kind, image, ids, classes)
            continue
        image, mask = portrait(rng, height, width)
        image_data, mask_data = jpeg_bytes(image), mat_bytes(mask)
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
    return SampleSummary(image_dir, mask_dir, count, broken, classes)


def _write_class_entry(
    image_dir: Path,
    mask_dir: Path,
    key: str,
    kind: str | None,
    image: np.ndarray,
    ids: np.ndarray,
    classes: int,
) -> None:
    height, width = ids.shape
    if kind == "out_of_range_class":
        ids = ids.copy()
        ids[height // 3 : height // 3 + 4, width // 3 : width // 3 + 4] = classes  # first bad id
    elif kind == "size_mismatch":
        ids = ids[: height // 2, : width // 2]
    image_data, mask_data = jpeg_bytes(image), palette_png(ids)
    if kind == "truncated_jpeg":
        image_data = image_data[: len(image_data) * 3 // 5]
    elif kind == "zero_byte_image":
        image_data = b""
    elif kind == "unreadable_png":
        mask_data = mask_data[: len(mask_data) // 2]
    if kind != "mask_without_image":
        (image_dir / f"{key}.jpg").write_bytes(image_data)
    if kind != "image_without_mask":
        (mask_dir / f"{key}.png").write_bytes(mask_data)
