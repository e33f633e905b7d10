"""Near-duplicate detection: precision and recall per change family, false groups, cost.

    python benchmarks/duplicates.py                                       # portraits table
    pip download --no-deps -d /tmp/wheels scikit-image scikit-learn matplotlib
    python benchmarks/duplicates.py --wheels /tmp/wheels                  # + photo tiles
    python benchmarks/duplicates.py --wheels /tmp/wheels --overhead 8000  # + run overhead

Portraits (the default table): benchmarks/duplicate_set.py builds --distinct portraits of
one composition and planted copies of the first --planted; every image is hashed as the job
does (fingerprint() of a DCT-scaled decode). For each threshold D and minimum signature
correlation S (S = 0: the band-search candidates alone) the table gives, per change family,
the recall (copies paired with their original) and precision (pairs found with a copy that
are with its own original or siblings), the pairs of distinct portraits confirmed, the share
of distinct portraits wrongly grouped (complete-linkage groups holding another portrait's
image) and the share `--duplicates drop` would lose entirely.

Photo tiles (--wheels; the candidate stage alone): the sample photos those three packages
ship, read straight out of their wheel files (a wheel is a zip; nothing is installed), cut
into non-overlapping CROPxCROP tiles: a few hundred distinct natural images. Each tile gets
one planted copy per change family: resize 0.5-0.9x, JPEG quality 30-95, crop of 1-5 % and
of 5-10 % per side, brightness +-20 %, contrast +-20 %, horizontal flip (parameters drawn
per tile from a fixed seed). For a range of thresholds D the table gives the recall of each
family (copy within D of its original), the false-positive pairs among the distinct tiles
(all pairs within D), the cost of hashing an image (bytes to hash, as the job does it), and
for the flip family the recall when the mirror image's hash is compared too.

--overhead N: `segprep prepare` on N distinct entries (800x600 JPEG tiles of the photos at
random scales and offsets, each with a mask), timed with --duplicates off and group,
interleaved, --repeats times; medians, and the fastest run of each (the least disturbed by
other load on a shared machine). Say next to the figures whether the machine was shared.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import duplicate_set  # noqa: E402
from transforms import duplicates as dups  # noqa: E402
from transforms.duplicates import hamming, perceptual_hash  # noqa: E402

PHOTO_DIRS = ("skimage/data/", "sklearn/datasets/images/", "mpl-data/sample_data/")
# Not distinct photos: a stereo twin, synthetic patterns, logos, tiny or text images.
SKIPPED = ("motorcycle_right", "chessboard", "phantom", "logo", "Minduka", "text", "page")
FAMILIES = (
    "resize",
    "jpeg",
    "crop<=5%",
    "crop5-10%",
    "brightness",
    "contrast",
    "flip",
)
THRESHOLDS = (4, 6, 8, 10, 12, 14)


def wheel_photos(folder: Path) -> list[tuple[str, Image.Image]]:
    photos = []
    for wheel in sorted(folder.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if not any(part in name for part in PHOTO_DIRS):
                    continue
                if not name.lower().endswith((".png", ".jpg", ".jpeg")):
                    continue
                if any(skip in name for skip in SKIPPED):
                    continue
                image = Image.open(io.BytesIO(archive.read(name))).convert("RGB")
                photos.append((name.rsplit("/", 1)[1], image))
    if not photos:
        raise SystemExit(
            f"no sample photos in {folder}: pip download --no-deps -d {folder} "
            "scikit-image scikit-learn matplotlib"
        )
    return photos


def tiles(photos, size: int) -> list[Image.Image]:
    """Non-overlapping size x size tiles of every photo."""
    out = []
    for _, photo in photos:
        width, height = photo.size
        for top in range(0, height - size + 1, size):
            for left in range(0, width - size + 1, size):
                out.append(photo.crop((left, top, left + size, top + size)))
    return out


def jpeg(image: Image.Image, quality: int = 92) -> bytes:
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def planted(image: Image.Image, family: str, rng: np.random.Generator) -> bytes:
    width, height = image.size
    if family == "resize":
        scale = rng.uniform(0.5, 0.9)
        return jpeg(image.resize((round(width * scale), round(height * scale)), Image.LANCZOS))
    if family == "jpeg":
        return jpeg(image, int(rng.integers(30, 96)))
    if family.startswith("crop"):
        low, high = (0.01, 0.05) if family == "crop<=5%" else (0.05, 0.10)
        cut = [rng.uniform(low, high) for _ in range(2)]
        # the cut is split at random between the two sides of each axis
        left_share, top_share = rng.uniform(0, 1, 2)
        dx, dy = cut[0] * width, cut[1] * height
        box = (
            round(dx * left_share),
            round(dy * top_share),
            round(width - dx * (1 - left_share)),
            round(height - dy * (1 - top_share)),
        )
        return jpeg(image.crop(box))
    if family == "brightness":
        return jpeg(ImageEnhance.Brightness(image).enhance(1 + rng.choice((-1, 1)) * 0.2))
    if family == "contrast":
        return jpeg(ImageEnhance.Contrast(image).enhance(1 + rng.choice((-1, 1)) * 0.2))
    if family == "flip":
        return jpeg(image.transpose(Image.Transpose.FLIP_LEFT_RIGHT))
    raise ValueError(family)


def quality_table(wheels: Path, size: int, seed: int) -> dict:
    photos = wheel_photos(wheels)
    distinct = tiles(photos, size)
    rng = np.random.default_rng(seed)
    originals = [jpeg(tile) for tile in distinct]
    started = time.process_time()
    hashes = [perceptual_hash(data) for data in originals]
    cost_ms = (time.process_time() - started) / len(originals) * 1e3
    distances = {family: [] for family in FAMILIES}
    mirrored = []
    for tile, original in zip(distinct, hashes, strict=True):
        for family in FAMILIES:
            copy = planted(tile, family, rng)
            distances[family].append(hamming(original, perceptual_hash(copy)))
            if family == "flip":
                flipped = hamming(original, perceptual_hash(copy, mirrored=True))
                mirrored.append(min(distances[family][-1], flipped))
    pair_distances = np.array(
        [hamming(a, b) for a, b in itertools.combinations(hashes, 2)], dtype=np.int64
    )
    # with the mirror hashed too, a pair also matches through one side's mirror image
    mirrors = [perceptual_hash(data, mirrored=True) for data in originals]
    mirror_distances = np.array(
        [
            min(hamming(hashes[i], hashes[j]), hamming(hashes[i], mirrors[j]))
            for i, j in itertools.combinations(range(len(hashes)), 2)
        ],
        dtype=np.int64,
    )
    # photo-size images: the cost the job pays per 800x600 JPEG (DCT-scaled decode)
    big = [jpeg(photo.resize((800, 600))) for _, photo in photos[:8]]
    started = time.process_time()
    for _ in range(5):
        for data in big:
            perceptual_hash(data)
    cost_800_ms = (time.process_time() - started) / (5 * len(big)) * 1e3
    rows = []
    for threshold in THRESHOLDS:
        row = {"D": threshold}
        for family in FAMILIES:
            row[family] = float(np.mean(np.array(distances[family]) <= threshold))
        row["flip+mirror"] = float(np.mean(np.array(mirrored) <= threshold))
        false = int(np.count_nonzero(pair_distances <= threshold))
        row["fp_pairs"] = false
        row["fp_pct"] = 100 * false / len(pair_distances)
        row["fp_mirror"] = int(np.count_nonzero(mirror_distances <= threshold))
        rows.append(row)
    return {
        "photos": len(photos),
        "distinct": len(distinct),
        "tile": size,
        "distinct_pairs": len(pair_distances),
        "hash_ms_tile": cost_ms,
        "hash_ms_800x600": cost_800_ms,
        "rows": rows,
        "median_distance": {f: float(np.median(d)) for f, d in distances.items()},
    }


# ---- verified near copies on portraits of one composition (benchmarks/duplicate_set.py) --

PORTRAIT_THRESHOLDS = (8, 10, 12, 14)
SIMILARITIES = (0.0, 0.8, 0.85, 0.9, 0.93, 0.95)  # 0.0: the candidate stage alone


def hash_file(key: str, data: bytes) -> dups.ImageHash:
    """As the job hashes an image: a DCT-scaled decode, the thumbnail, fingerprint()."""
    with Image.open(io.BytesIO(data)) as image:
        image.draft("RGB", (2 * dups.THUMB_SIDE, 2 * dups.THUMB_SIDE))
        return dups.fingerprint(key, data, dups.thumbnail(image))


def portrait_hashes(folder: Path) -> tuple[list[dups.ImageHash], dict[str, dict]]:
    truth = json.loads((folder / "truth.json").read_text())
    hashes = [
        hash_file(key, (folder / "images" / f"{key}.jpg").read_bytes()) for key in sorted(truth)
    ]
    return hashes, truth


def pair_matrices(hashes: list[dups.ImageHash]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair's Hamming distance, signature correlation, and whether the job's chroma
    check (dups.chroma_similarity, judged only within the largest threshold) passes."""
    phashes = np.array([h.phash for h in hashes], dtype=np.uint64)
    distance = np.bitwise_count(phashes[:, None] ^ phashes[None, :]).astype(np.int64)
    sigs = np.array([np.frombuffer(h.signature, np.int8) for h in hashes], dtype=np.float64)
    sigs /= np.maximum(np.linalg.norm(sigs, axis=1, keepdims=True), 1e-12)
    similar = sigs @ sigs.T
    chroma = np.ones(distance.shape, dtype=bool)
    for i, j in zip(*np.nonzero(np.triu(distance <= max(PORTRAIT_THRESHOLDS), 1)), strict=True):
        agree = dups.chroma_agrees(hashes[i].signature, hashes[j].signature, similar[i, j])
        chroma[i, j] = chroma[j, i] = agree
    return distance, similar, chroma


def _group_outcome(hashes, truth, found: np.ndarray) -> tuple[float, float]:
    """(share of distinct images grouped with another identity's image, share of distinct
    identities `drop` would lose entirely) under complete linkage of the `found` pairs."""
    rows, cols = np.nonzero(np.triu(found, 1))
    groups = dups.complete_groups((hashes[i], hashes[j]) for i, j in zip(rows, cols, strict=True))
    identities = {key: item["identity"] for key, item in truth.items()}
    distinct = [key for key, item in truth.items() if item["family"] == "distinct"]
    wrong, dropped = set(), set()
    for group in groups:
        keys = [member.key for member in group]
        if len({identities[key] for key in keys}) > 1:
            wrong |= {key for key in keys if key in distinct}
        dropped |= set(keys[1:])
    kept_identities = {identities[key] for key in truth if key not in dropped}
    lost = len({identities[key] for key in distinct} - kept_identities)
    return len(wrong) / len(distinct), lost / len(distinct)


def portrait_table(folder: Path) -> dict:
    hashes, truth = portrait_hashes(folder)
    distance, correlation, chroma = pair_matrices(hashes)
    keys = [h.key for h in hashes]
    identity = np.array([truth[key]["identity"] for key in keys])
    family = np.array([truth[key]["family"] for key in keys])
    same = identity[:, None] == identity[None, :]
    off_diagonal = ~np.eye(len(keys), dtype=bool)
    distinct = family == "distinct"
    rows = []
    for threshold in PORTRAIT_THRESHOLDS:
        for minimum in SIMILARITIES:
            found = (distance <= threshold) & (correlation >= minimum) & off_diagonal
            if minimum > 0:  # the job's check: the signature, then its chroma
                found &= chroma
            exact = np.array([[a.sha256 == b.sha256 for b in hashes] for a in hashes])
            found |= exact & off_diagonal
            row = {"D": threshold, "S": minimum}
            for name in duplicate_set.FAMILIES:
                copies = family == name
                originals = np.isin(identity, identity[copies]) & distinct
                true_pairs = found[np.ix_(copies, originals)] & same[np.ix_(copies, originals)]
                row[f"{name} recall"] = float(true_pairs.any(axis=1).mean())
                with_copy = found[copies]
                hits = int(with_copy.sum())
                right = int((with_copy & same[copies]).sum())
                row[f"{name} precision"] = right / hits if hits else 1.0
            distinct_pairs = found[np.ix_(distinct, distinct)]
            row["distinct pairs"] = int(np.triu(distinct_pairs, 1).sum())
            row["distinct in a pair %"] = 100 * float(distinct_pairs.any(axis=1).mean())
            wrong, lost = _group_outcome(hashes, truth, found)
            row["wrongly grouped %"], row["drop loses %"] = 100 * wrong, 100 * lost
            rows.append(row)
    return {
        "images": len(keys),
        "distinct": int(distinct.sum()),
        "distinct_pairs": int(distinct.sum() * (distinct.sum() - 1) // 2),
        "rows": rows,
    }


def print_portrait_table(result: dict) -> None:
    print(
        f"{result['distinct']} distinct portraits ({result['distinct_pairs']:,} pairs) and "
        f"{result['images'] - result['distinct']} planted copies; S = 0 is the band search "
        "alone, S > 0 adds the signature check"
    )
    families = duplicate_set.FAMILIES[1:]  # exact copies are always found (same bytes)
    header = ["D", "S", *families, "distinct pairs", "wrongly grouped %", "drop loses %"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in result["rows"]:
        cells = [str(row["D"]), f"{row['S']:g}"]
        cells += [f"{row[f'{f} recall']:.2f} / {row[f'{f} precision']:.2f}" for f in families]
        cells += [
            str(row["distinct pairs"]),
            f"{row['wrongly grouped %']:.1f}",
            f"{row['drop loses %']:.1f}",
        ]
        print("| " + " | ".join(cells) + " |")
    print("(family cells: recall / precision of the pairs found with a copy of that family)")


def print_table(result: dict) -> None:
    print(
        f"{result['distinct']} distinct {result['tile']}px tiles of {result['photos']} photos, "
        f"{result['distinct_pairs']:,} distinct pairs; hashing {result['hash_ms_tile']:.2f} ms "
        f"per tile, {result['hash_ms_800x600']:.2f} ms per 800x600 JPEG (CPU, one core)"
    )
    header = ["D", *FAMILIES, "flip+mirror", "FP pairs", "FP %", "FP pairs +mirror"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in result["rows"]:
        cells = [str(row["D"]), *(f"{row[f]:.2f}" for f in (*FAMILIES, "flip+mirror"))]
        cells += [f"{row['fp_pairs']}", f"{row['fp_pct']:.3f}", f"{row['fp_mirror']}"]
        print("| " + " | ".join(cells) + " |")
    medians = ", ".join(f"{f} {d:g}" for f, d in result["median_distance"].items())
    print(f"median distance to the original: {medians}")


def overhead_dataset(wheels: Path, n: int, folder: Path) -> Path:
    """N distinct 800x600 entries: photo regions at random scales, offsets and tints."""
    if (folder / "done").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    images, masks = folder / "images", folder / "masks"
    images.mkdir(parents=True)
    masks.mkdir()
    photos = [photo for _, photo in wheel_photos(wheels)]
    rng = np.random.default_rng(1)
    mask = Image.fromarray((np.indices((600, 800)).sum(0) % 97 < 40).astype(np.uint8) * 255)
    mask_bytes = io.BytesIO()
    mask.save(mask_bytes, format="PNG")
    for index in range(n):
        photo = photos[index % len(photos)]
        width, height = photo.size
        scale = rng.uniform(0.3, 0.7)
        w, h = int(width * scale), int(height * scale)
        left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
        tile = photo.crop((left, top, left + w, top + h)).resize((800, 600))
        tint = rng.uniform(0.6, 1.4, 3)
        tile = Image.fromarray(np.clip(np.asarray(tile) * tint, 0, 255).astype(np.uint8))
        if rng.random() < 0.5:
            tile = tile.transpose(Image.Transpose.FLIP_TOP_BOTTOM)
        (images / f"{index:06d}.jpg").write_bytes(jpeg(tile, 90))
        (masks / f"{index:06d}.png").write_bytes(mask_bytes.getvalue())
    (folder / "done").write_text("")
    return folder


def timed_run(data: Path, mode: str) -> tuple[float, dict]:
    out = Path(tempfile.mkdtemp(prefix="dups-bench-"))
    command = [
        str(Path(sys.executable).parent / "segprep"),
        "prepare",
        "--image_dir",
        str(data / "images"),
        "--mask_dir",
        str(data / "masks"),
        "--output_dir",
        str(out / "out"),
        "--duplicates",
        mode,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    info = json.loads((out / "out" / "metadata.json").read_text())
    shutil.rmtree(out)
    return wall, info.get("duplicates", {})


def overhead(wheels: Path, n: int, repeats: int) -> None:
    data = overhead_dataset(wheels, n, ROOT / "benchmarks" / ".cache" / f"dups-{n}")
    walls: dict[str, list[float]] = {"off": [], "group": []}
    section = {}
    for _ in range(repeats):
        for mode in walls:
            wall, found = timed_run(data, mode)
            walls[mode].append(wall)
            if mode == "group":
                section = found
    off, group = statistics.median(walls["off"]), statistics.median(walls["group"])
    print(
        f"overhead at {n:,} entries: off {off:.1f} s, group {group:.1f} s "
        f"(+{(group / off - 1) * 100:.1f} %), medians of {repeats}; runs: {walls}"
    )
    fastest_off, fastest_group = min(walls["off"]), min(walls["group"])
    print(
        f"fastest runs (least disturbed by other load): off {fastest_off:.1f} s, group "
        f"{fastest_group:.1f} s (+{(fastest_group / fastest_off - 1) * 100:.1f} %)"
    )
    print(f"groups found among the {n:,} entries: {section.get('groups')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheels", type=Path, default=Path("/tmp/wheels"))
    parser.add_argument("--tile", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overhead", type=int, default=0, metavar="N")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip_quality", action="store_true")
    parser.add_argument("--distinct", type=int, default=300, help="portraits in the set")
    parser.add_argument("--planted", type=int, default=60, help="portraits given copies")
    parser.add_argument("--photos", type=Path, help="real photos for portrait backgrounds")
    args = parser.parse_args()
    if not args.skip_quality:
        with tempfile.TemporaryDirectory(prefix="dups-portraits-") as folder:
            photos = duplicate_set.wheel_photos(args.photos)
            duplicate_set.build(Path(folder), args.distinct, args.planted, args.seed, photos)
            print_portrait_table(portrait_table(Path(folder)))
        if args.wheels.is_dir() and any(args.wheels.glob("*.whl")):
            print_table(quality_table(args.wheels, args.tile, args.seed))
    if args.overhead:
        overhead(args.wheels, args.overhead, args.repeats)


if __name__ == "__main__":
    main()
