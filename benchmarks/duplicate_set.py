"""The duplicate benchmark's images: distinct portraits of one composition, and planted copies.

    python benchmarks/duplicate_set.py OUT [--distinct 300] [--planted 60] [--seed 0]

writes OUT/images/<key>.jpg, OUT/masks/<key>.png and OUT/truth.json ({key: {"identity",
"family"}}: a planted copy names its original's key as identity and its change family;
a distinct image is its own identity, family "distinct"). Deterministic for a seed.

Distinct images are what makes a perceptual hash fail: one framing, a person in the middle.
Three sources, in turn: the seed's own sample portraits (commands/sample_data.py's
`portrait`), drawn figures (head, hair and shoulders, varied pose, size and colours, on
flat, graded, striped or textured backgrounds, colours often alike on purpose), and, where
installed wheels carry real photos (--photos DIR of .whl files or image folders: e.g.
scikit-image, scikit-learn, matplotlib sample photos), a figure drawn over a region of a
real photo. The shared venv ships no photos, so by default the set is the first two.

Planted copies, one per family for each of the first --planted distinct images: exact,
resize 0.5-0.9x, JPEG q50-90, crop <= 5 % and 5-10 % (random split between the sides),
brightness and contrast +-15 % (at least 5 %).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from beam_pipeline.commands.sample_data import portrait  # noqa: E402

WIDTH, HEIGHT = 192, 240
FAMILIES = ("exact", "resize", "jpeg", "crop<=5%", "crop5-10%", "brightness", "contrast")
# A few muted colours the drawn figures pick from, so many share a palette.
MUTED = np.array(
    [[128, 128, 128], [90, 90, 100], [200, 200, 195], [60, 70, 90], [150, 130, 110],
     [40, 40, 45], [170, 180, 190], [110, 120, 100]],
    dtype=np.float64,
)  # fmt: skip


def _colour(rng: np.random.Generator) -> np.ndarray:
    if rng.random() < 0.6:
        return MUTED[rng.integers(len(MUTED))] + rng.normal(0, 8, 3)
    return rng.uniform(20, 235, 3)


def _background(rng: np.random.Generator, photo: Image.Image | None) -> Image.Image:
    if photo is not None:
        scale = rng.uniform(1.0, 2.0)
        width, height = photo.size
        w, h = min(width, round(WIDTH * scale)), min(height, round(HEIGHT * scale))
        left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
        return photo.crop((left, top, left + w, top + h)).resize((WIDTH, HEIGHT))
    base, other = _colour(rng), _colour(rng)
    rows = np.linspace(0, 1, HEIGHT)[:, None, None]
    cols = np.linspace(0, 1, WIDTH)[None, :, None]
    kind = rng.integers(4)
    if kind == 0:  # flat
        pixels = np.broadcast_to(base, (HEIGHT, WIDTH, 3)).copy()
    elif kind == 1:  # graded, any direction
        angle = rng.uniform(0, np.pi)
        t = rows * np.cos(angle) + cols * np.sin(angle)
        pixels = base + (other - base) * t / max(1e-6, float(np.abs(t).max()))
    elif kind == 2:  # stripes
        period = rng.uniform(8, 40)
        pixels = base + (other - base) * (np.sin(cols * WIDTH / period) > 0)
    else:  # blobs of texture
        coarse = rng.random((6, 5))
        t = (
            np.asarray(
                Image.fromarray((coarse * 255).astype(np.uint8)).resize(
                    (WIDTH, HEIGHT), Image.BICUBIC
                ),
                np.float64,
            )[..., None]
            / 255
        )
        pixels = base + (other - base) * t
    pixels = np.broadcast_to(pixels, (HEIGHT, WIDTH, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def drawn_figure(rng: np.random.Generator, photo: Image.Image | None = None):
    """(RGB image, 0/1 mask): head, hair and shoulders in the middle, pose and colours drawn."""
    image = _background(rng, photo)
    mask = Image.new("L", (WIDTH, HEIGHT), 0)
    cx = WIDTH * rng.uniform(0.42, 0.58)
    scale = rng.uniform(0.85, 1.15)
    head_y = HEIGHT * rng.uniform(0.28, 0.4)
    rx, ry = WIDTH * 0.15 * scale, HEIGHT * 0.14 * scale
    tilt = rng.uniform(-0.12, 0.12) * HEIGHT  # one shoulder higher: a turned pose
    skin = rng.uniform([120, 80, 60], [245, 200, 170])
    cloth, hair = _colour(rng), _colour(rng) * rng.uniform(0.3, 1.0)
    draw, marks = ImageDraw.Draw(image), ImageDraw.Draw(mask)
    shoulder_y = head_y + ry * 1.6
    body = [
        (cx - WIDTH * 0.45 * scale, HEIGHT + 5),
        (cx - WIDTH * 0.36 * scale, shoulder_y + tilt / 2),
        (cx - rx * 0.4, shoulder_y - ry * 0.3),
        (cx + rx * 0.4, shoulder_y - ry * 0.3),
        (cx + WIDTH * 0.36 * scale, shoulder_y - tilt / 2),
        (cx + WIDTH * 0.45 * scale, HEIGHT + 5),
    ]
    hair_box = (cx - rx * 1.1, head_y - ry * 1.15, cx + rx * 1.1, head_y + ry * rng.uniform(0, 0.9))
    for drawer, fills in ((draw, (cloth, hair, skin)), (marks, (1, 1, 1))):
        body_fill, hair_fill, skin_fill = (
            tuple(int(v) for v in np.clip(f, 0, 255)) if isinstance(f, np.ndarray) else f
            for f in fills
        )
        drawer.polygon(body, fill=body_fill)
        drawer.ellipse(hair_box, fill=hair_fill)
        drawer.ellipse((cx - rx, head_y - ry * 0.7, cx + rx, head_y + ry), fill=skin_fill)
    image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.5)))
    noisy = np.asarray(image, np.float64) + rng.normal(0, rng.uniform(2, 8), (HEIGHT, WIDTH, 3))
    return np.clip(noisy, 0, 255).astype(np.uint8), np.asarray(mask, np.uint8)


def wheel_photos(folder: Path | None) -> list[Image.Image]:
    """Photos (at least 256 px a side) in the .whl files and image files under `folder`."""
    if folder is None:
        return []
    found = []
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as archive:
                names = [
                    n for n in sorted(archive.namelist()) if n.lower().endswith((".jpg", ".png"))
                ]
                found.extend(io.BytesIO(archive.read(n)) for n in names)
        elif path.suffix.lower() in (".jpg", ".jpeg", ".png"):
            found.append(io.BytesIO(path.read_bytes()))
    photos = []
    for data in found:
        try:
            image = Image.open(data).convert("RGB")
        except OSError:
            continue
        if min(image.size) >= 256:
            photos.append(image)
    return photos


def distinct_images(count: int, seed: int, photos: list[Image.Image]):
    """`count` (RGB, mask) portraits: the sources in turn, each from its own seed."""
    sources = 3 if photos else 2
    for index in range(count):
        rng = np.random.default_rng([seed, index])
        source = index % sources
        if source == 0:
            yield portrait(rng, HEIGHT, WIDTH)
        elif source == 1:
            yield drawn_figure(rng)
        else:
            yield drawn_figure(rng, photos[int(rng.integers(len(photos)))])


def jpeg(image: Image.Image, quality: int = 92) -> bytes:
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def planted_copy(image: Image.Image, family: str, rng: np.random.Generator) -> bytes:
    width, height = image.size
    if family == "exact":
        return jpeg(image)
    if family == "resize":
        scale = rng.uniform(0.5, 0.9)
        return jpeg(image.resize((round(width * scale), round(height * scale)), Image.LANCZOS))
    if family == "jpeg":
        return jpeg(image, int(rng.integers(50, 91)))
    if family.startswith("crop"):
        low, high = (0.01, 0.05) if family == "crop<=5%" else (0.05, 0.10)
        dx, dy = rng.uniform(low, high) * width, rng.uniform(low, high) * height
        left, top = rng.uniform(0, 1, 2)
        box = (
            round(dx * left),
            round(dy * top),
            round(width - dx * (1 - left)),
            round(height - dy * (1 - top)),
        )
        return jpeg(image.crop(box))
    factor = 1 + rng.choice([-1, 1]) * rng.uniform(0.05, 0.15)
    enhancer = ImageEnhance.Brightness if family == "brightness" else ImageEnhance.Contrast
    return jpeg(enhancer(image).enhance(factor))


def _fitted(mask: np.ndarray, image: bytes) -> np.ndarray:
    """The mask at the copy's size (resized, also for a crop: the benchmark scores images,
    and the job only needs the sizes to agree)."""
    with Image.open(io.BytesIO(image)) as opened:
        size = opened.size
    if size == (mask.shape[1], mask.shape[0]):
        return mask
    return np.asarray(Image.fromarray(mask).resize(size, Image.NEAREST))


def png(mask: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(mask * 255).save(out, format="PNG")
    return out.getvalue()


def build(out: Path, distinct: int, planted: int, seed: int = 0, photos=()) -> dict[str, dict]:
    """Write the set under `out`; the truth ({key: {"identity", "family"}})."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    truth: dict[str, dict] = {}
    for index, (pixels, mask) in enumerate(distinct_images(distinct, seed, list(photos))):
        key = f"p{index:04d}"
        image = Image.fromarray(pixels)
        original = jpeg(image)
        (out / "images" / f"{key}.jpg").write_bytes(original)
        (out / "masks" / f"{key}.png").write_bytes(png(mask))
        truth[key] = {"identity": key, "family": "distinct"}
        if index >= planted:
            continue
        rng = np.random.default_rng([seed, index, 1])
        for number, family in enumerate(FAMILIES):
            copy = f"{key}-c{number}"
            data = original if family == "exact" else planted_copy(image, family, rng)
            (out / "images" / f"{copy}.jpg").write_bytes(data)
            (out / "masks" / f"{copy}.png").write_bytes(png(_fitted(mask, data)))
            truth[copy] = {"identity": key, "family": family}
    (out / "truth.json").write_text(json.dumps(truth, indent=0, sort_keys=True))
    return truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--distinct", type=int, default=300)
    parser.add_argument("--planted", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--photos", type=Path, help="folder of .whl files or photos")
    args = parser.parse_args()
    truth = build(args.out, args.distinct, args.planted, args.seed, wheel_photos(args.photos))
    print(f"{len(truth)} images in {args.out}")


if __name__ == "__main__":
    main()
