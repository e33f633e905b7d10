"""Synthetic datasets in the real layouts, broken the way downloads are.

Binary: the portrait-segmentation layout (JPEG images, .mat 0/1 masks). With `classes`:
Pascal VOC's (JPEG images, palette PNG class-id masks, 255 on some object boundaries).
"""

from __future__ import annotations

import collections
import dataclasses
import io
import math
from pathlib import Path

import numpy as np
import scipy.io
from PIL import Image, ImageChops, ImageDraw, ImageEnhance

from beam_pipeline.errors import UsageError
from beam_pipeline.launch.options import DEFAULT_BROKEN_FRACTION
from transforms.codecs.class_mask import DEFAULT_IGNORE_INDEX
from transforms.duplicates import perceptual_hash
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


# Portraits: COPY_FRACTION of the entries are planted copies of an earlier entry, one kind
# after the other; every other portrait's perceptual hash is at least MIN_DISTINCT_DISTANCE
# bits from every earlier one's (above the default --duplicate_distance of 12), so a
# duplicate search that is right finds the planted copies and nothing else.
COPY_FRACTION = 0.02
COPY_KINDS = ("exact copy", "resized re-encode", "brightness shift")
MIN_DISTINCT_DISTANCE = 14
_MAX_DRAWS = 50
_COPY_STREAM = 1 << 31  # the plan's random stream, apart from every entry's [seed, index]


@dataclasses.dataclass(frozen=True)
class PlantedCopy:
    key: str
    original: str
    kind: str  # one of COPY_KINDS


@dataclasses.dataclass(frozen=True)
class SampleSummary:
    image_dir: Path
    mask_dir: Path
    count: int
    broken: dict[str, str]  # key -> breakage kind
    classes: int | None = None  # None: binary portrait masks
    planted: tuple[PlantedCopy, ...] = ()  # near copies of named originals, by copy key
    redrawn: int = 0  # portraits drawn again because they came out near an earlier one

    @property
    def breakages(self) -> dict[str, Reason]:
        return BREAKAGES if self.classes is None else CLASS_BREAKAGES

    def planted_lines(self, shown: int = 8) -> list[str]:
        """What was planted, for the command's output: the duplicate search should find it."""
        if self.classes is not None:
            return []
        if not self.planted:
            return ["planted 0 near copies: every image is distinct"]
        originals = ", ".join(copy.original for copy in self.planted[:shown])
        more = ", ..." if len(self.planted) > shown else ""
        copies = "copy" if len(self.planted) == 1 else "copies"
        lines = [f"planted {len(self.planted)} near {copies} (of {originals}{more}):"]
        lines += [f"  {c.key}: {c.kind} of {c.original}" for c in self.planted[:shown]]
        if len(self.planted) > shown:
            lines.append(f"  ... and {len(self.planted) - shown} more")
        return lines

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
    """(RGB uint8 image, uint8 0/1 mask) of a figure in the middle of a varied background.

    Backgrounds, figure shapes, colours, poses and positions are drawn independently, so
    no two portraits share their coarse layout (what a perceptual hash sees).
    """
    image, mask = _portrait_image(rng, height, width)
    return np.array(image), mask


def _portrait_image(rng: np.random.Generator, height: int, width: int):
    """portrait() as a Pillow image (what the JPEG encoder takes, with no copy).

    The picture is drawn at half size and enlarged, so its edges are soft as a lens makes
    them (a hard-edged drawing is not a photo: decoders and resizers differ most on it);
    the mask is drawn at full size, 0/1 with hard edges as annotations are. Pillow draws,
    numpy works at 1/8 size: a few milliseconds at 800x600."""
    small = (max(1, -(-width // 2)), max(1, -(-height // 2)))
    canvas = _background(rng, small[1], small[0])
    _scenery(rng, canvas, small[1], small[0])
    mask = _draw_figure(rng, canvas, height, width)
    canvas = canvas.resize((width, height), Image.Resampling.BILINEAR)
    canvas = ImageChops.add(canvas, _grain(rng, height, width), scale=1.0, offset=-_GRAIN_MID)
    return canvas, np.array(mask)  # writable, as callers may edit it


_GRAIN_MID = 128  # grain values are centred here; ImageChops.add takes it back off
_BACKGROUND_KINDS = ("gradient", "blocks", "waves", "clouds", "rings")


def _background(rng: np.random.Generator, height: int, width: int) -> Image.Image:
    """A coarse random pattern (one of five kinds) over a second, weaker one, as RGB."""
    rows, cols = max(4, height // 8), max(4, width // 8)
    y = np.linspace(0.0, 1.0, rows, dtype=np.float32)[:, None, None]
    x = np.linspace(0.0, 1.0, cols, dtype=np.float32)[None, :, None]
    colour_a, colour_b = _contrasting_colours(rng)
    kind = _BACKGROUND_KINDS[int(rng.integers(len(_BACKGROUND_KINDS)))]
    angle = rng.uniform(0, 2 * np.pi)
    along = np.cos(angle) * x + np.sin(angle) * y
    if kind == "gradient":
        weight = (along - along.min()) / max(1e-6, float(np.ptp(along)))
    elif kind == "waves":
        weight = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(1.0, 5.0) * along + rng.uniform(0, 7))
    elif kind == "rings":
        cy, cx = rng.uniform(-0.2, 1.2, size=2)
        radius = np.sqrt((y - cy) ** 2 + (x - cx) ** 2)
        weight = 0.5 + 0.5 * np.cos(2 * np.pi * rng.uniform(1.5, 5.0) * radius)
    elif kind == "clouds":
        cells = int(rng.integers(2, 7))
        weight = _coarse_field(rng, cells, rows, cols)[..., None]
    else:  # blocks: a random grid of two colours, hard edges
        grid = rng.random((int(rng.integers(2, 6)), int(rng.integers(2, 6)))) < 0.5
        image = Image.fromarray(grid.astype(np.uint8) * 255).resize((cols, rows), Image.NEAREST)
        weight = (np.asarray(image, dtype=np.float32) / 255.0)[..., None]
    pixels = colour_a + (colour_b - colour_a) * weight
    light = (_coarse_field(rng, int(rng.integers(3, 6)), rows, cols)[..., None] - 0.5) * 2
    tint = (_coarse_field(rng, int(rng.integers(2, 5)), rows, cols)[..., None] - 0.5) * 2
    pixels = pixels + light * rng.uniform(30, 80) + tint * rng.uniform(-60, 60, size=3)
    resample = Image.Resampling.NEAREST if kind == "blocks" else Image.Resampling.BILINEAR
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    return image.resize((width, height), resample)


def _contrasting_colours(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two colours at least 70 grey levels apart, so a pattern of them shows in grey too."""
    first = rng.uniform(20, 235)
    second = (first + rng.uniform(70, 185)) % 255
    chroma = rng.uniform(-60, 60, size=(2, 3))
    return (first + chroma[0]).astype(np.float32), (second + chroma[1]).astype(np.float32)


def _scenery(rng: np.random.Generator, canvas: Image.Image, height: int, width: int) -> None:
    """One to three things behind the figure: frames, windows, lamps, in random colours."""
    draw = ImageDraw.Draw(canvas)
    for _ in range(int(rng.integers(1, 4))):
        cy, cx = rng.uniform(0, height), rng.uniform(0, width)
        ry, rx = rng.uniform(0.05, 0.25) * height, rng.uniform(0.05, 0.25) * width
        box = (cx - rx, cy - ry, cx + rx, cy + ry)
        if rng.random() < 0.6:
            draw.rectangle(box, fill=_colour(rng), outline=_colour(rng), width=max(1, width // 60))
        else:
            draw.ellipse(box, fill=_colour(rng))


def _coarse_field(rng: np.random.Generator, cells: int, rows: int, cols: int) -> np.ndarray:
    """[rows, cols] smooth values in 0..1: a cells x cells random grid, upsampled."""
    grid = (rng.random((cells, cells)) * 255).astype(np.uint8)
    image = Image.fromarray(grid).resize((cols, rows), Image.Resampling.BICUBIC)
    return np.asarray(image, dtype=np.float32) / 255.0


@dataclasses.dataclass(frozen=True)
class _Pose:
    """Where the figure stands and how big it is, in pixels."""

    cx: float  # the head's centre
    head_y: float
    head_rx: float
    head_ry: float
    tilt: float  # the head's shift against the neck
    body_cx: float  # the body's centre (leaning against the head)
    shoulder_y: float
    half: float  # half the shoulder width
    scale: float


def _pose(rng: np.random.Generator, height: int, width: int) -> _Pose:
    scale = rng.uniform(0.6, 1.25)
    cx = width * rng.uniform(0.28, 0.72)
    head_y = height * rng.uniform(0.18, 0.45)
    head_rx = width * 0.14 * scale * rng.uniform(0.85, 1.15)
    head_ry = height * 0.11 * scale * rng.uniform(0.9, 1.15)
    return _Pose(
        cx=cx,
        head_y=head_y,
        head_rx=head_rx,
        head_ry=head_ry,
        tilt=head_rx * rng.uniform(-0.25, 0.25),
        body_cx=cx + width * rng.uniform(-0.12, 0.12),
        shoulder_y=head_y + head_ry * rng.uniform(1.3, 1.7),
        half=width * rng.uniform(0.26, 0.46) * scale,
        scale=scale,
    )


def _colour(rng: np.random.Generator, low=0, high=255) -> tuple[int, int, int]:
    """A random colour, a third less saturated than uniform channels: closer to what
    cameras record (and what their chroma subsampling expects)."""
    channels = rng.uniform(low, high, size=3)
    channels = channels.mean() + (channels - channels.mean()) * _SATURATION
    red, green, blue = (int(v) for v in channels)
    return red, green, blue


_SATURATION = 0.65


class _Figure:
    """Draws each shape twice: in its colour on the picture (scaled to the picture's size),
    and as 1 on the full-size mask, so the mask covers exactly the shapes the picture shows."""

    def __init__(self, picture: Image.Image, size: tuple[int, int]) -> None:
        self.mask = Image.new("L", size, 0)
        self._picture = ImageDraw.Draw(picture)
        self._mask = ImageDraw.Draw(self.mask)
        self._sx, self._sy = picture.width / size[0], picture.height / size[1]

    def shape(self, method: str, xy, *args, colour: tuple[int, int, int], **kwargs) -> None:
        scaled = {name: value * self._sx for name, value in kwargs.items()}
        if "width" in scaled:
            scaled["width"] = max(1, round(scaled["width"]))
        getattr(self._picture, method)(self._scaled(xy), *args, fill=colour, **scaled)
        getattr(self._mask, method)(xy, *args, fill=1, **kwargs)

    def _scaled(self, xy):
        """A box (x0, y0, x1, y1) or a list of (x, y) points, in picture pixels."""
        if isinstance(xy, list):
            return [(x * self._sx, y * self._sy) for x, y in xy]
        x0, y0, x1, y1 = xy
        return (x0 * self._sx, y0 * self._sy, x1 * self._sx, y1 * self._sy)


def _draw_figure(
    rng: np.random.Generator, canvas: Image.Image, height: int, width: int
) -> Image.Image:
    """Draw a head-and-body figure on `canvas` in random colours and pose; its mask (L, 0/1)."""
    pose = _pose(rng, height, width)
    skin, cloth = _colour(rng, (90, 60, 40), (250, 215, 190)), _colour(rng)
    figure = _Figure(canvas, (width, height))
    _body(rng, figure, pose, height, cloth)
    if rng.random() < 0.5:
        _raised_arm(rng, figure, pose, width, cloth)
    if rng.random() < 0.5:
        _collar(rng, figure, pose, _colour(rng))
    _neck_and_head(rng, figure, pose, skin)
    if rng.random() < 0.75:
        _hair_or_hat(rng, figure, pose, _colour(rng, 0, 200))
    return figure.mask


def _body(rng, figure: _Figure, pose: _Pose, height: int, colour) -> None:
    """Rounded shoulders, a jacket widening downwards, or square shoulders."""
    left, right, top = pose.body_cx - pose.half, pose.body_cx + pose.half, pose.shoulder_y
    shape = int(rng.integers(3))
    if shape == 0:
        figure.shape("ellipse", (left, top, right, top + 2.2 * (height - top)), colour=colour)
    elif shape == 1:
        flare = pose.half * rng.uniform(1.0, 1.5)
        inset = pose.half * 0.2
        corners = [(left + inset, top), (right - inset, top)]
        corners += [(pose.body_cx + flare, height), (pose.body_cx - flare, height)]
        figure.shape("polygon", corners, colour=colour)
    else:
        radius = max(2.0, pose.half / 3)
        box = (left, top, right, height + radius)
        figure.shape("rounded_rectangle", box, radius=radius, colour=colour)


def _raised_arm(rng, figure: _Figure, pose: _Pose, width: int, colour) -> None:
    side = 1 if rng.random() < 0.5 else -1
    start = (pose.body_cx + side * pose.half * 0.7, pose.shoulder_y + pose.head_ry)
    elbow = (
        pose.body_cx + side * pose.half * 1.05,
        pose.shoulder_y - pose.head_ry * rng.uniform(0.3, 1.5),
    )
    hand = (elbow[0] + side * pose.head_rx * 0.3, elbow[1] - pose.head_ry * rng.uniform(0.4, 1.2))
    thickness = max(2, int(width * 0.06 * pose.scale))
    figure.shape("line", [start, elbow, hand], width=thickness, colour=colour)


def _collar(rng, figure: _Figure, pose: _Pose, colour) -> None:
    """A V-neck or a tie in a second colour, below the neck."""
    depth = pose.head_ry * rng.uniform(0.8, 2.0)
    spread = pose.head_rx * rng.uniform(0.4, 0.9)
    top = pose.shoulder_y
    corners = [(pose.cx - spread, top), (pose.cx + spread, top), (pose.cx, top + depth)]
    figure.shape("polygon", corners, colour=colour)


def _neck_and_head(rng, figure: _Figure, pose: _Pose, colour) -> None:
    neck = pose.head_rx * rng.uniform(0.3, 0.5)
    box = (pose.cx - neck, pose.head_y, pose.cx + neck, pose.shoulder_y + pose.head_ry * 0.2)
    figure.shape("rectangle", box, colour=colour)
    x, rx, ry = pose.cx + pose.tilt, pose.head_rx, pose.head_ry
    figure.shape("ellipse", (x - rx, pose.head_y - ry, x + rx, pose.head_y + ry), colour=colour)


def _hair_or_hat(rng, figure: _Figure, pose: _Pose, colour) -> None:
    x, rx, ry = pose.cx + pose.tilt, pose.head_rx, pose.head_ry
    if rng.random() < 0.7:  # hair: the top half of a slightly larger ellipse
        box = (x - rx * 1.1, pose.head_y - ry * 1.15, x + rx * 1.1, pose.head_y + ry * 0.5)
        figure.shape("chord", box, 180, 360, colour=colour)
    else:  # a hat: brim and crown
        brim = pose.head_y - ry * 0.6
        figure.shape(
            "rectangle", (x - rx * 1.5, brim - ry * 0.15, x + rx * 1.5, brim), colour=colour
        )
        figure.shape(
            "rectangle", (x - rx * 0.9, brim - ry * 0.9, x + rx * 0.9, brim), colour=colour
        )


def _grain(rng: np.random.Generator, height: int, width: int) -> Image.Image:
    """Sensor-like grain: small random values around _GRAIN_MID, one per pixel (RGB).

    Random bytes mapped through a lookup table: faster than drawing bounded integers."""
    spread = int(rng.integers(2, 7))
    table = [_GRAIN_MID - spread + value % (2 * spread + 1) for value in range(256)]
    grey = Image.frombytes("L", (width, height), rng.bytes(height * width)).point(table)
    return Image.merge("RGB", (grey, grey, grey))


def jpeg_bytes(image: np.ndarray, quality: int = 90) -> bytes:
    return _encoded(Image.fromarray(image), quality)


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
    copy_fraction: float = COPY_FRACTION,
) -> SampleSummary:
    """`directory/images/00001.jpg` and `directory/masks/00001_mask.mat`, some broken, and
    `copy_fraction` of them planted copies (0: every portrait distinct, for benchmarks).

    With `classes`, masks are `directory/masks/00001.png`: palette PNGs of class ids
    0..classes-1 and 255.
    """
    if count < 1:
        raise UsageError("--count must be at least 1")
    if not 0.0 <= broken_fraction <= 1.0:
        raise UsageError("--broken_fraction must be between 0 and 1")
    if not 0.0 <= copy_fraction <= 0.5:
        raise ValueError(f"copy_fraction {copy_fraction} is not between 0 and 0.5")
    if classes is not None and not 2 <= classes <= MAX_SAMPLE_CLASSES:
        raise UsageError(f"--classes must be from 2 to {MAX_SAMPLE_CLASSES}")
    root = Path(directory)
    image_dir, mask_dir = root / "images", root / "masks"
    for parent in (root, *root.parents):
        if parent.exists() and not parent.is_dir():
            raise UsageError(f"{parent} is a file, not a folder: sample-data writes into folders")
    for folder in (image_dir, mask_dir):
        # Never a file of the user's replaced, a link followed or a FIFO opened: new or
        # empty real folders only.
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise UsageError(f"{folder} is not a folder: sample-data writes into new folders")
        if folder.is_dir() and any(folder.iterdir()):
            raise UsageError(
                f"{folder} already holds files: sample-data writes only into a new or empty "
                "folder (it never replaces files)"
            )
        folder.mkdir(parents=True, exist_ok=True)
    plan_rng = np.random.default_rng(seed)
    num_broken = min(count, round(count * broken_fraction))
    broken_indices = sorted(plan_rng.choice(count, size=num_broken, replace=False).tolist())
    kinds = list(BREAKAGES if classes is None else CLASS_BREAKAGES)
    broken = {f"{index + 1:05d}": kinds[n % len(kinds)] for n, index in enumerate(broken_indices)}
    if classes is not None:
        for index in range(count):
            key = f"{index + 1:05d}"
            image, ids = scene(np.random.default_rng([seed, index]), classes, height, width)
            _write_class_entry(image_dir, mask_dir, key, broken.get(key), image, ids, classes)
        return SampleSummary(image_dir, mask_dir, count, broken, classes)
    copies = _plan_copies(seed, count, broken, copy_fraction)
    hashes = _DistinctHashes(count)
    for index in range(count):
        key = f"{index + 1:05d}"
        if key in copies:
            image_data, mask_data = _copy_of(copies[key], image_dir, mask_dir, height, width)
        else:
            mask, image_data = _distinct_portrait(seed, index, hashes, height, width)
            if broken.get(key) == "size_mismatch":
                mask = mask[: height // 2, : width // 2]
            mask_data = mat_bytes(mask)
        image_path, mask_path = image_dir / f"{key}.jpg", mask_dir / f"{key}_mask.mat"
        _write_broken(image_path, mask_path, broken.get(key), image_data, mask_data)
    return SampleSummary(
        image_dir, mask_dir, count, broken, planted=tuple(copies.values()), redrawn=hashes.redrawn
    )


class _DistinctHashes:
    """The perceptual hashes of the portraits drawn so far, to redraw a near-duplicate."""

    def __init__(self, count: int) -> None:
        self._hashes = np.zeros(count, dtype=np.uint64)
        self._size = 0
        self.redrawn = 0

    def add_if_distinct(self, phash: int) -> bool:
        distances = np.bitwise_count(self._hashes[: self._size] ^ np.uint64(phash))
        if self._size and int(distances.min()) < MIN_DISTINCT_DISTANCE:
            self.redrawn += 1
            return False
        self._hashes[self._size] = phash
        self._size += 1
        return True


def _distinct_portrait(
    seed: int, index: int, hashes: _DistinctHashes, height: int, width: int
) -> tuple[np.ndarray, bytes]:
    """Entry `index`'s portrait: its mask and JPEG bytes; in the rare case its coarse layout lands
    near an earlier one's (perceptual hashes closer than MIN_DISTINCT_DISTANCE), the next
    draw of the entry's own random stream is taken instead (the same for the same seed)."""
    for attempt in range(_MAX_DRAWS):
        rng = np.random.default_rng([seed, index] if attempt == 0 else [seed, index, attempt])
        image, mask = _portrait_image(rng, height, width)
        image_data = _encoded(image, 90)
        if hashes.add_if_distinct(perceptual_hash(image_data)) or attempt == _MAX_DRAWS - 1:
            return mask, image_data
    raise AssertionError("unreachable")


def _plan_copies(
    seed: int, count: int, broken: dict[str, str], fraction: float
) -> dict[str, PlantedCopy]:
    """copy key -> PlantedCopy: `fraction` of the entries, rounded up, become a copy of an
    earlier intact entry, the kinds taken in turn (at most half the intact entries)."""
    good = [index for index in range(count) if f"{index + 1:05d}" not in broken]
    number = min(math.ceil(count * fraction), len(good) // 2)
    if number == 0:
        return {}
    rng = np.random.default_rng([seed, count, _COPY_STREAM])
    chosen = sorted(rng.choice(good[1:], size=number, replace=False).tolist())
    originals: set[int] = set()
    copies = {}
    for copy in chosen:
        free = [g for g in good if g < copy and g not in originals and g not in chosen]
        if not free:
            continue
        original = int(rng.choice(free))
        originals.add(original)
        kind = COPY_KINDS[len(copies) % len(COPY_KINDS)]
        copies[f"{copy + 1:05d}"] = PlantedCopy(f"{copy + 1:05d}", f"{original + 1:05d}", kind)
    return copies


def _copy_of(
    planted: PlantedCopy, image_dir: Path, mask_dir: Path, height: int, width: int
) -> tuple[bytes, bytes]:
    """The copy's image and mask bytes, made from its original's files as written."""
    original = (image_dir / f"{planted.original}.jpg").read_bytes()
    mask_data = (mask_dir / f"{planted.original}_mask.mat").read_bytes()
    if planted.kind == "exact copy":
        return original, mask_data
    with Image.open(io.BytesIO(original)) as opened:
        image = opened.convert("RGB")
    if planted.kind == "resized re-encode":
        small = (max(1, round(width * 0.6)), max(1, round(height * 0.6)))
        image = image.resize(small, Image.Resampling.BILINEAR).resize((width, height))
        return _encoded(image, 75), mask_data
    return _encoded(ImageEnhance.Brightness(image).enhance(1.1), 90), mask_data


def _encoded(image: Image.Image, quality: int) -> bytes:
    """jpeg_bytes() of a Pillow image, without the copy into and out of numpy."""
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()


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
    _write_broken(image_dir / f"{key}.jpg", mask_dir / f"{key}.png", kind, image_data, mask_data)


def _write_broken(
    image: Path, mask: Path, kind: str | None, image_data: bytes, mask_data: bytes
) -> None:
    """Write an entry's two files, broken the way `kind` says (None: intact)."""
    if kind == "truncated_jpeg":
        image_data = image_data[: len(image_data) * 3 // 5]
    elif kind == "zero_byte_image":
        image_data = b""
    elif kind in ("unreadable_mat", "unreadable_png"):
        mask_data = mask_data[: len(mask_data) // 2]
    if kind != "mask_without_image":
        image.write_bytes(image_data)
    if kind != "image_without_mask":
        mask.write_bytes(mask_data)
