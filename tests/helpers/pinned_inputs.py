"""A small deterministic dataset covering each image and mask path the writer takes.

Used to pin the exact bytes of the shards: CPU work in the codecs may change how an entry
is computed, never what is stored. Images: plain RGB JPEGs (kept as they are), progressive
and 4:4:4 JPEGs, grey and CMYK JPEGs, PNG and RGBA PNG images (transcoded), an EXIF-rotated
JPEG whose mask is drawn on the rotated view (rotated and transcoded) and one whose mask has
the stored size (kept), plus broken ones. Masks come as .mat or as PNG files.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import scipy.io
from PIL import Image

from beam_pipeline.commands.sample_data import jpeg_bytes, palette_png, scene

HEIGHT, WIDTH = 96, 72
CLASSES = 5
_ORIENTATION_TAG = 0x0112


def _encode(image: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **params)
    return out.getvalue()


def _mat(mask: np.ndarray) -> bytes:
    out = io.BytesIO()
    scipy.io.savemat(out, {"mask": mask}, format="5", do_compression=True)
    return out.getvalue()


def _smooth_noise(rng: np.random.Generator, cells: int) -> np.ndarray:
    coarse = rng.random((cells, max(2, cells * WIDTH // HEIGHT)), dtype=np.float32)
    image = Image.fromarray((coarse * 255).astype(np.uint8)).resize((WIDTH, HEIGHT), Image.BILINEAR)
    return np.asarray(image, dtype=np.float32) / 255.0


def _portrait(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The pinned portraits: a fixed drawing of their own, so the pins hold whatever
    `segprep sample-data` draws."""
    rows = np.arange(HEIGHT, dtype=np.float32)[:, None]
    cols = np.arange(WIDTH, dtype=np.float32)[None, :]
    base = rng.uniform(40, 220, size=3).astype(np.float32)
    gradient = (rows / HEIGHT)[..., None] * rng.uniform(-60, 60, size=3).astype(np.float32)
    texture = (_smooth_noise(rng, 12)[..., None] - 0.5) * 90
    stripes = 12 * np.sin(cols / rng.uniform(6, 20))[..., None]
    background = base + gradient + texture + stripes
    cx = WIDTH * rng.uniform(0.4, 0.6)
    head_y, head_ry, head_rx = HEIGHT * rng.uniform(0.28, 0.36), HEIGHT * 0.13, WIDTH * 0.16
    head = ((cols - cx) / head_rx) ** 2 + ((rows - head_y) / head_ry) ** 2 <= 1.0
    neck = (np.abs(cols - cx) < WIDTH * 0.06) & (rows > head_y) & (rows < head_y + head_ry * 1.6)
    shoulder_y = head_y + head_ry * 1.5
    body_rx, body_ry = WIDTH * 0.42, HEIGHT * 1.05 - shoulder_y
    body = ((cols - cx) / body_rx) ** 2 + ((rows - HEIGHT * 1.05) / body_ry) ** 2 <= 1.0
    mask = (head | neck | body).astype(np.uint8)
    skin = rng.uniform([150, 100, 80], [240, 190, 160]).astype(np.float32)
    cloth = rng.uniform(20, 200, size=3).astype(np.float32)
    shading = (_smooth_noise(rng, 6)[..., None] - 0.5) * 40
    person = np.where((head | neck)[..., None], skin, cloth) + shading
    image = np.where(mask[..., None].astype(bool), person, background)
    image += rng.standard_normal(size=image.shape, dtype=np.float32) * 4
    return np.clip(image, 0, 255).astype(np.uint8), mask


def _rotated_jpeg(image: np.ndarray) -> bytes:
    """The image stored turned a quarter, with EXIF orientation 6 to turn it back."""
    stored = Image.fromarray(np.rot90(image, k=1).copy())
    exif = Image.Exif()
    exif[_ORIENTATION_TAG] = 6
    return _encode(stored, "JPEG", quality=90, exif=exif.tobytes())


def _images(rng_seed: int) -> dict[str, tuple[bytes, np.ndarray]]:
    """key -> (image file bytes, 0/1 mask of the displayed image); the key names the path."""
    entries = {}
    for number, kind in enumerate(
        (
            "rgb",
            "rgb2",
            "progressive",
            "full_chroma",
            "grey",
            "cmyk",
            "png",
            "rgba_png",
            "exif_rotated_mask",
            "exif_stored_mask",
            "truncated",
        )
    ):
        image, mask = _portrait(np.random.default_rng([rng_seed, number]))
        pil = Image.fromarray(image)
        if kind in ("rgb", "rgb2"):
            data = jpeg_bytes(image)
        elif kind == "progressive":
            data = _encode(pil, "JPEG", quality=85, progressive=True)
        elif kind == "full_chroma":
            data = _encode(pil, "JPEG", quality=92, subsampling=0)
        elif kind == "grey":
            data = _encode(pil.convert("L"), "JPEG", quality=90)
        elif kind == "cmyk":
            data = _encode(pil.convert("CMYK"), "JPEG", quality=90)
        elif kind == "png":
            data = _encode(pil, "PNG")
        elif kind == "rgba_png":
            rgba = pil.convert("RGBA")
            rgba.putalpha(Image.fromarray((mask * 155 + 100).astype(np.uint8)))
            data = _encode(rgba, "PNG")
        elif kind == "exif_rotated_mask":
            data = _rotated_jpeg(image)  # mask has the displayed (rotated) size
        elif kind == "exif_stored_mask":
            data = _rotated_jpeg(image)
            mask = np.rot90(mask, k=1).copy()  # mask drawn on the stored pixels
        else:
            data = jpeg_bytes(image)[:1500]
        suffix = ".png" if "png" in kind else ".jpg"
        entries[f"{number:02d}_{kind}{suffix}"] = (data, mask)
    return entries


def write_binary(root: Path, mask_files: str) -> Path:
    """`root/images`, `root/masks` with masks as .mat (mask_files="mat") or PNG ("png")."""
    image_dir, mask_dir = root / "images", root / "masks"
    image_dir.mkdir(parents=True)
    mask_dir.mkdir(parents=True)
    for name, (data, mask) in _images(11).items():
        key = name.rsplit(".", 1)[0]
        (image_dir / name).write_bytes(data)
        number = int(key[:2])
        if mask_files == "mat":
            # 0/1 uint8, bool and 0/255 variables: each way binarize reads a mask.
            variants = (mask, mask.astype(bool), mask * np.uint8(255))
            (mask_dir / f"{key}_mask.mat").write_bytes(_mat(variants[number % 3]))
        else:
            # 0/255 grey, 0/1 grey and grey-as-RGB PNGs.
            grey = Image.fromarray(mask * np.uint8(255))
            variants = (grey, Image.fromarray(mask), grey.convert("RGB"))
            (mask_dir / f"{key}_mask.png").write_bytes(_encode(variants[number % 3], "PNG"))
    return root


def write_classes(root: Path) -> Path:
    """JPEG images with palette, grey and .mat class-id masks (ids 0..4 and 255)."""
    image_dir, mask_dir = root / "images", root / "masks"
    image_dir.mkdir(parents=True)
    mask_dir.mkdir(parents=True)
    for number in range(9):
        image, ids = scene(np.random.default_rng([23, number]), CLASSES, HEIGHT, WIDTH)
        key = f"{number:02d}"
        (image_dir / f"{key}.jpg").write_bytes(jpeg_bytes(image))
        if number % 3 == 0:
            (mask_dir / f"{key}.png").write_bytes(palette_png(ids))
        elif number % 3 == 1:
            (mask_dir / f"{key}.png").write_bytes(_encode(Image.fromarray(ids), "PNG"))
        else:
            (mask_dir / f"{key}.mat").write_bytes(_mat(ids))
    return root
