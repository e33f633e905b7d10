"""`segprep inspect DIR`: a contact sheet PNG of image | mask | overlay, for a human look.

Shard mode renders what training will see: records go through the reader's own
`make_dataset` (same decoder, mask thresholded at 128), so a mask that looks right here is
right for the model. A class-id output (metadata.json has `classes`) shows the stored ids in
colour (the run's colormap, else Pascal VOC's palette) with a legend of the classes shown.
`--rejects` mode renders the original files named in rejects.jsonl, decoding whatever part
of them Pillow still can, so a person can judge a reject reason; an output without
metadata.json (a refused or unfinished run) shows its newest run's staged rejects, since
that is when they matter most. The sheet is written outside the dataset directory (a
published output), under a name no earlier sheet has: never over another one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import sys
import warnings
from collections.abc import Iterator, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFile, ImageFont

from beam_pipeline.errors import UsageError
from transforms.codecs.image import MAX_PIXELS
from transforms.format import features
from transforms.format.naming import METADATA_FILE, REJECTS_FILE, RUNS_DIR

# TensorFlow, the reader and the mask codec (scipy, h5py) are imported where used.

TILE_HEIGHT = 200
COLUMNS = 4  # entries (image | mask | overlay triples) per row of the sheet
MAX_COUNT = 64  # 16 rows: a PNG about 4,100 px tall; more is not viewable in one look
MARGIN = 12  # around the sheet
TILE_GAP = 4  # between the three tiles of one entry
CELL_GAP = 20  # between entries
TITLE_HEIGHT = 26
CAPTION_HEIGHT = 36  # two lines of text under each entry
BACKGROUND = (236, 236, 236)
UNAVAILABLE = (150, 150, 150)  # tile of a file that is missing or cannot be decoded at all
TINT = (255, 0, 200)  # overlay colour: magenta stands out on skin, sky and foliage alike
TINT_ALPHA = 0.5
OUTLINE = (255, 235, 0)  # mask boundary on the overlay: yellow shows where the tint is faint
TEXT = (20, 20, 20)
IGNORE_COLOUR = (224, 224, 192)  # the ignore index: Pascal VOC's boundary colour
CLASS_ALPHA = 0.5  # class colours over the image, on the overlay
LEGEND_ITEM_WIDTH = 170  # swatch and name of one class
LEGEND_ROW_HEIGHT = 18
LEGEND_SWATCH = 12
MAX_LEGEND_ITEMS = 48


@dataclasses.dataclass(frozen=True)
class Entry:
    """One row item: decoded pixels (None when unavailable) and two caption lines."""

    key: str
    image: np.ndarray | None  # uint8 [H, W, 3]
    mask: np.ndarray | None  # uint8 [H, W], 0..255 for display; [H, W, 3]: class colours
    caption: tuple[str, str]
    image_problem: str = "no image"  # grey-tile labels, when image or mask is None
    mask_problem: str = "no mask"


@dataclasses.dataclass(frozen=True)
class Sheet:
    image: Image.Image
    keys: list[str]
    tile_size: tuple[int, int]  # (width, height) of each tile
    legend: tuple[tuple[str, tuple[int, int, int]], ...] = ()  # (label, colour) shown

    def tile_box(self, index: int, column: int) -> tuple[int, int, int, int]:
        """(left, top, right, bottom) of entry `index`'s tile: 0 image, 1 mask, 2 overlay."""
        return _tile_box(index, column, self.tile_size)


def _cell_size(tile: tuple[int, int]) -> tuple[int, int]:
    return 3 * tile[0] + 2 * TILE_GAP, tile[1] + CAPTION_HEIGHT


def sheet_size(count: int, tile: tuple[int, int], legend_items: int = 0) -> tuple[int, int]:
    """(width, height) in pixels of a sheet of `count` entries with tiles of size `tile`, and
    a legend of `legend_items` classes below them."""
    columns = max(1, min(count, COLUMNS))
    rows = max(1, math.ceil(count / COLUMNS))
    cell_width, cell_height = _cell_size(tile)
    width = 2 * MARGIN + columns * cell_width + (columns - 1) * CELL_GAP
    height = TITLE_HEIGHT + 2 * MARGIN + rows * cell_height + (rows - 1) * CELL_GAP
    if legend_items:
        height += CELL_GAP + _legend_rows(legend_items, width) * LEGEND_ROW_HEIGHT
    return width, height


def _legend_columns(width: int) -> int:
    return max(1, (width - 2 * MARGIN) // LEGEND_ITEM_WIDTH)


def _legend_rows(items: int, width: int) -> int:
    return math.ceil(items / _legend_columns(width))


def _tile_box(index: int, column: int, tile: tuple[int, int]) -> tuple[int, int, int, int]:
    cell_width, cell_height = _cell_size(tile)
    row, cell = divmod(index, COLUMNS)
    left = MARGIN + cell * (cell_width + CELL_GAP) + column * (tile[0] + TILE_GAP)
    top = TITLE_HEIGHT + MARGIN + row * (cell_height + CELL_GAP)
    return left, top, left + tile[0], top + tile[1]


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):  # Pillow without FreeType: fixed bitmap font
        return ImageFont.load_default()


def _fit_text(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> str:
    """`text` shortened with an ellipsis until it fits in `width` pixels."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "...", font=font) > width:
        text = text[:-1]
    return text + "..."


def _tile_size(entries: Sequence[Entry]) -> tuple[int, int]:
    """TILE_HEIGHT tall; as wide as the widest entry scaled to that height (within 2:1)."""
    widths = []
    for entry in entries:
        pixels = entry.image if entry.image is not None else entry.mask
        if pixels is not None:
            height, width = pixels.shape[:2]
            widths.append(round(width * TILE_HEIGHT / height))
    width = max(widths) if widths else round(TILE_HEIGHT * 3 / 4)
    return min(max(width, TILE_HEIGHT // 4), 2 * TILE_HEIGHT), TILE_HEIGHT


def _scaled(
    pixels: Image.Image, box: tuple[int, int, int, int], *, mask: bool = False
) -> Image.Image:
    """`pixels` resized to fit `box` with its aspect ratio kept.

    Masks use NEAREST so the tile shows hard stored edges (and only real class colours),
    not a blur.
    """
    width, height = box[2] - box[0], box[3] - box[1]
    scale = min(width / pixels.width, height / pixels.height)
    size = (max(1, round(pixels.width * scale)), max(1, round(pixels.height * scale)))
    return pixels.resize(size, Image.NEAREST if mask else Image.BILINEAR)


def _overlay(image: Image.Image, mask: Image.Image) -> Image.Image:
    """The (scaled) image with the mask tinted in TINT and its outline drawn in OUTLINE.

    The mask is stretched to the image when their sizes differ (a size_mismatch reject).
    """
    weight = np.asarray(mask.resize(image.size, Image.NEAREST), np.float32) / 255.0
    alpha = (weight * TINT_ALPHA)[..., None]
    pixels = np.asarray(image.convert("RGB"), np.float32)
    tinted = pixels * (1 - alpha) + np.asarray(TINT, np.float32) * alpha
    foreground = weight >= 0.5
    padded = np.pad(foreground, 1, mode="edge")
    interior = (
        padded[:-2, 1:-1] & padded[2:, 1:-1] & padded[1:-1, :-2] & padded[1:-1, 2:] & foreground
    )
    tinted[foreground & ~interior] = OUTLINE
    return Image.fromarray(np.clip(tinted.round(), 0, 255).astype(np.uint8), "RGB")


def _grey_tile(sheet: Image.Image, box: tuple[int, int, int, int], label: str) -> None:
    draw = ImageDraw.Draw(sheet)
    draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=UNAVAILABLE)
    font = _font(13)
    text = _fit_text(draw, label, font, box[2] - box[0] - 8)
    centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
    draw.text(centre, text, fill=TEXT, font=font, anchor="mm")


def _paste(sheet: Image.Image, pixels: Image.Image, box: tuple[int, int, int, int]) -> None:
    """Paste already-scaled pixels centred in box."""
    left = box[0] + (box[2] - box[0] - pixels.width) // 2
    top = box[1] + (box[3] - box[1] - pixels.height) // 2
    sheet.paste(pixels.convert("RGB"), (left, top))


def render(
    entries: Sequence[Entry],
    title: str,
    legend: Sequence[tuple[str, tuple[int, int, int]]] = (),
) -> Sheet:
    """Lay entries out COLUMNS to a row, each as image | mask | overlay plus a caption, and
    the legend (label, colour) of class colours below them."""
    tile = _tile_size(entries)
    sheet = Image.new("RGB", sheet_size(len(entries), tile, len(legend)), BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    title_font, caption_font = _font(15), _font(13)
    draw.text(
        (MARGIN, MARGIN),
        _fit_text(draw, title, title_font, sheet.width - 2 * MARGIN),
        fill=TEXT,
        font=title_font,
    )
    cell_width = _cell_size(tile)[0]
    for index, entry in enumerate(entries):
        boxes = [_tile_box(index, column, tile) for column in range(3)]
        image = mask = None
        if entry.image is not None:
            image = _scaled(Image.fromarray(entry.image, "RGB"), boxes[0])
            _paste(sheet, image, boxes[0])
        else:
            _grey_tile(sheet, boxes[0], entry.image_problem)
        if entry.mask is not None:
            mode = "RGB" if entry.mask.ndim == 3 else "L"
            mask = _scaled(Image.fromarray(entry.mask, mode), boxes[1], mask=True)
            _paste(sheet, mask, boxes[1])
        else:
            _grey_tile(sheet, boxes[1], entry.mask_problem)
        if image is not None and mask is not None and mask.mode == "RGB":
            colours = mask.resize(image.size, Image.NEAREST)
            _paste(sheet, Image.blend(image.convert("RGB"), colours, CLASS_ALPHA), boxes[2])
        elif image is not None and mask is not None:
            _paste(sheet, _overlay(image, mask), boxes[2])
        else:
            _grey_tile(sheet, boxes[2], "no overlay")
        for line, text in enumerate(entry.caption):
            draw.text(
                (boxes[0][0], boxes[0][3] + 3 + line * 16),
                _fit_text(draw, text, caption_font, cell_width),
                fill=TEXT,
                font=caption_font,
            )
    _draw_legend(sheet, legend, caption_font)
    return Sheet(sheet, [entry.key for entry in entries], tile, tuple(legend))


def _draw_legend(sheet: Image.Image, legend, font) -> None:
    """Swatch and label of each class, in rows under the entries."""
    if not legend:
        return
    draw = ImageDraw.Draw(sheet)
    columns = _legend_columns(sheet.width)
    top = sheet.height - MARGIN - _legend_rows(len(legend), sheet.width) * LEGEND_ROW_HEIGHT
    for index, (label, colour) in enumerate(legend):
        row, column = divmod(index, columns)
        left = MARGIN + column * LEGEND_ITEM_WIDTH
        y = top + row * LEGEND_ROW_HEIGHT
        draw.rectangle(
            (left, y, left + LEGEND_SWATCH, y + LEGEND_SWATCH), fill=colour, outline=TEXT
        )
        text = _fit_text(draw, label, font, LEGEND_ITEM_WIDTH - LEGEND_SWATCH - 10)
        draw.text((left + LEGEND_SWATCH + 5, y - 1), text, fill=TEXT, font=font)


def _require_dir(directory: str) -> None:
    import tensorflow as tf

    if not tf.io.gfile.isdir(directory):
        raise UsageError(f"{directory} is not a directory: pass a `segprep prepare` output")


def _load_metadata(directory: str) -> dict:
    from shard_reader.metadata import IncompleteOutputError, load_metadata

    _require_dir(directory)
    try:
        return load_metadata(directory)
    except IncompleteOutputError as error:
        raise UsageError(str(error)) from None
    except ValueError as error:
        raise UsageError(f"metadata.json of {directory} is not valid JSON ({error})") from None


def _split_total(metadata: dict, directory: str, split: str) -> int:
    splits = metadata.get("splits", {})
    if split not in splits:
        raise UsageError(f"--split {split!r} not in {directory}; it has {sorted(splits)}")
    total = splits[split].get("num_examples", 0)
    if not total:
        raise UsageError(f"--split {split!r} of {directory} has no examples")
    return total


def shard_entries(
    directory: str, metadata: dict, split: str, count: int
) -> tuple[list[Entry], int]:
    """The first `count` examples of `split` exactly as the training reader yields them."""
    import tensorflow as tf

    from shard_reader.dataset import make_dataset

    total = _split_total(metadata, directory, split)
    dataset = make_dataset(directory, split, batch_size=1, training=False, with_keys=True)
    entries = []
    try:
        for image, mask, key in dataset.take(count):
            binary = mask.numpy()[0, ..., 0]  # the reader's {0, 1} after thresholding at 128
            pixels = image.numpy()[0].astype(np.uint8)
            caption = (
                key.numpy()[0].decode("utf-8", "replace"),
                f"{pixels.shape[0]}x{pixels.shape[1]} (HxW), foreground {binary.mean():.1%}",
            )
            display = (binary * 255).astype(np.uint8)
            entries.append(Entry(caption[0], pixels, display, caption))
    except tf.errors.OpError as error:
        raise UsageError(
            f"{directory} cannot be read ({type(error).__name__}): run `segprep verify {directory}`"
        ) from None
    return entries, total


def class_palette(classes: dict) -> np.ndarray:
    """[size, 3] uint8 colour of every stored value: the colormap's, else Pascal VOC's
    palette (distinct random colours past 256 ids); the ignore index in VOC's boundary
    colour."""
    from beam_pipeline.commands.sample_data import voc_palette

    count, ignore = classes["num_classes"], classes["ignore_index"]
    size = max(count, ignore + 1, 256)
    colours = np.random.default_rng(0).integers(0, 256, size=(size, 3)).astype(np.uint8)
    colours[:256] = np.asarray(voc_palette(), dtype=np.uint8).reshape(256, 3)
    if classes.get("colormap"):
        colours[:count] = np.asarray(classes["colormap"], dtype=np.uint8)
    colours[ignore] = IGNORE_COLOUR
    return colours


def class_entries(
    directory: str, metadata: dict, split: str, count: int
) -> tuple[list[Entry], int, list[tuple[str, tuple[int, int, int]]]]:
    """The first `count` records of `split` with their stored class ids in colour, the split's
    size, and the legend of the classes they show.

    Read straight from the shards (the reader's class-id path is not there yet): JPEG image,
    PNG class ids decoded by transforms, exactly as stored.
    """
    import tensorflow as tf

    from shard_reader.decoding import FEATURE_SPEC
    from transforms.codecs.class_mask import decode_class_mask

    total = _split_total(metadata, directory, split)
    classes = metadata["classes"]
    num_classes = classes["num_classes"]
    names = classes.get("names") or [f"class {index}" for index in range(num_classes)]
    colours = class_palette(classes)
    base = directory.rstrip("/")
    files = [f"{base}/{shard['file']}" for shard in metadata["splits"][split]["shards"]]
    entries, shown = [], set()
    try:
        for record in tf.data.TFRecordDataset(files).take(count):
            parsed = tf.io.parse_single_example(record, FEATURE_SPEC)
            key = parsed[features.KEY].numpy().decode("utf-8", "replace")
            pixels = tf.io.decode_jpeg(parsed[features.IMAGE], channels=3).numpy()
            ids = decode_class_mask(parsed[features.MASK].numpy())
            present = np.unique(ids).tolist()
            shown.update(present)
            labelled = [names[c] for c in present if c < num_classes]
            caption = (key, f"{len(labelled)} classes: {', '.join(labelled)}")
            entries.append(Entry(key, pixels, colours[ids], caption))
    except (tf.errors.OpError, ValueError) as error:
        raise UsageError(
            f"{directory} cannot be read ({type(error).__name__}): run `segprep verify {directory}`"
        ) from None
    legend = [(_legend_label(c, classes), tuple(colours[c].tolist())) for c in sorted(shown)]
    if len(legend) > MAX_LEGEND_ITEMS:
        more = len(legend) - MAX_LEGEND_ITEMS + 1
        legend = [*legend[: MAX_LEGEND_ITEMS - 1], (f"... {more} more", BACKGROUND)]
    return entries, total, legend


def _legend_label(value: int, classes: dict) -> str:
    if value >= classes["num_classes"]:
        return f"{value} (ignored)"
    names = classes.get("names")
    return f"{value} {names[value]}" if names else f"class {value}"


@contextlib.contextmanager
def truncated_images_allowed() -> Iterator[None]:
    """Let Pillow decode the readable part of a truncated file, only inside this block.

    The flag is process-global and the pipeline's validation relies on it being off, so it
    is restored however the block ends.
    """
    previous = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = True
    try:
        yield
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = previous


def _read(path: str | None, what: str) -> tuple[bytes | None, str]:
    """(bytes, "") or (None, why not) for a path from rejects.jsonl, which may be null."""
    import tensorflow as tf

    if not path:
        return None, f"no {what} file"
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            data = handle.read()
    except (tf.errors.OpError, OSError):
        return None, f"{what} file not readable"
    return (data, "") if data else (None, f"{what} file empty")


def _partial_image(path: str | None, target_height: int) -> tuple[np.ndarray | None, str]:
    """RGB pixels of whatever Pillow can decode (large JPEGs reduced while decoding)."""
    data, problem = _read(path, "image")
    if data is None:
        return None, problem
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            if image.format == "JPEG":
                image.draft("RGB", (1, target_height))  # DCT-domain downscale, JPEG only
            if image.width * image.height > MAX_PIXELS:
                return None, f"image too large ({image.width}x{image.height})"
            image.load()
            return np.asarray(image.convert("RGB")), ""
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError):
        return None, "image not decodable"


def _display_mask(path: str | None) -> tuple[np.ndarray | None, str]:
    """uint8 0..255 of a reject's mask file, whatever its values were (they may be why).

    A COCO entry's mask is the whole annotations file (possibly GBs): never read here.
    """
    from transforms.codecs.mask import load_mask

    if path and path.lower().endswith(".json"):
        return None, "COCO annotations"
    data, problem = _read(path, "mask")
    if data is None:
        return None, problem
    try:
        array = load_mask(data, os.path.basename(path))
    except Exception:  # RejectError, or anything a broken file makes a parser raise
        return None, "mask not decodable"
    array = np.clip(np.nan_to_num(np.asarray(array, dtype=np.float64)), 0, None)
    peak = array.max()
    # {0,1} and {0,255} masks both show as black/white; other values scale to 0..255.
    scale = 255.0 if 0 < peak <= 1 else 255.0 / peak if peak > 255 else 1.0
    return np.clip((array * scale).round(), 0, 255).astype(np.uint8), ""


def _staged_rejects(directory: str) -> str | None:
    """rejects.jsonl of the newest run staged under OUT/.segprep/runs/, if any."""
    import tensorflow as tf

    found = tf.io.gfile.glob(f"{directory.rstrip('/')}/{RUNS_DIR}/*/{REJECTS_FILE}")
    if not found:
        return None
    return max(found, key=lambda path: (tf.io.gfile.stat(path).mtime_nsec, path))


class NoRejects(Exception):
    """Good news, not an error: there is no sheet of rejects to draw."""


def rejects_source(directory: str) -> str:
    """The published rejects.jsonl of a finished output, else the newest run's staged one."""
    import tensorflow as tf

    _require_dir(directory)
    if tf.io.gfile.exists(f"{directory.rstrip('/')}/{METADATA_FILE}"):
        _load_metadata(directory)  # a broken metadata.json is worth one line, not a sheet
        return f"{directory.rstrip('/')}/{REJECTS_FILE}"
    staged = _staged_rejects(directory)
    if staged is None:
        raise UsageError(
            f"{directory} has neither {METADATA_FILE} nor a run's staged {REJECTS_FILE} "
            f"({RUNS_DIR}/*/{REJECTS_FILE}): not a segprep output, or no run got as far as "
            "its rejects"
        )
    return staged


def reject_entries(directory: str, count: int) -> tuple[list[Entry], int, str]:
    """The first `count` lines of rejects.jsonl, rendered from their original files.

    Also returns the total number of lines and the rejects.jsonl path they came from.
    """
    path = rejects_source(directory)
    data, problem = _read(path, REJECTS_FILE)
    if data is None and problem != f"{REJECTS_FILE} file empty":
        raise UsageError(f"{path}: {problem}; run `segprep verify {directory}`")
    lines = [line for line in (data or b"").decode("utf-8", "replace").splitlines() if line.strip()]
    if not lines:
        raise NoRejects(f"{directory} has no rejects: every entry was accepted ({path} lists none)")
    entries = []
    with truncated_images_allowed():
        for line in lines[:count]:
            try:
                reject = json.loads(line)
            except ValueError:
                reject = {"key": "?", "reason": "unparseable rejects.jsonl line", "detail": line}
            image, image_problem = _partial_image(reject.get("image"), TILE_HEIGHT)
            mask, mask_problem = _display_mask(reject.get("mask"))
            key = str(reject.get("key"))
            caption = (f"{key}: {reject.get('reason')}", str(reject.get("detail") or ""))
            entries.append(Entry(key, image, mask, caption, image_problem, mask_problem))
    return entries, len(lines), path


def default_sheet_path(directory: str, out: str | None, split: str, rejects: bool) -> str:
    """`--out` itself, or `<dataset>_inspect_<split|rejects>.png` under `--out` when it is a
    folder, else beside the dataset folder (in the current folder for a gs:// dataset: a
    sheet is for looking at, here)."""
    import tensorflow as tf

    if out is not None and not tf.io.gfile.isdir(out):
        return out
    remote = "://" in directory
    dataset = directory.rstrip("/") if remote else os.path.realpath(directory)
    name = f"{dataset.rsplit('/', 1)[-1]}_inspect_{'rejects' if rejects else split}.png"
    if out is not None:
        return f"{out.rstrip('/')}/{name}"
    return os.path.join(os.getcwd() if remote else os.path.dirname(dataset), name)


def _check_out(out: str, directory: str) -> str:
    """Absolute output path; refused inside the dataset directory or in a missing folder."""
    if "://" in out:
        dataset = directory.rstrip("/") + "/"
        if out.startswith(dataset):
            raise UsageError(f"--out {out} is inside the dataset directory: write it elsewhere")
        return out
    out = os.path.abspath(out)
    if "://" not in directory:
        dataset = os.path.realpath(directory)
        if os.path.commonpath([os.path.realpath(out), dataset]) == dataset:
            raise UsageError(
                f"--out {out} is inside the dataset directory {directory}, a published output: "
                "write the sheet elsewhere"
            )
    if not os.path.isdir(os.path.dirname(out)):
        raise UsageError(f"--out {out}: folder {os.path.dirname(out)} does not exist")
    return out


def _numbered(path: str, number: int) -> str:
    if number == 1:
        return path
    stem, suffix = os.path.splitext(path)
    return f"{stem}_{number}{suffix}"


def write_new(path: str, data: bytes) -> str:
    """Write `data` to `path`, or to `path` with _2, _3 ... when that name is taken.

    Local files are claimed with O_EXCL, so two runs at once never share a name; in a
    bucket the check and the write are two calls (the race there is left open).
    """
    import tensorflow as tf

    number = 0
    while True:
        number += 1
        candidate = _numbered(path, number)
        if "://" in candidate:
            if tf.io.gfile.exists(candidate):
                continue
            with tf.io.gfile.GFile(candidate, "wb") as handle:
                handle.write(data)
            return candidate
        try:
            with open(candidate, "xb") as handle:
                handle.write(data)
        except FileExistsError:
            continue
        return candidate


def build_sheet(directory: str, split: str, count: int, rejects: bool) -> Sheet:
    """The contact sheet for `directory`: shard examples of `split`, or rejects."""
    if count < 1:
        raise UsageError(f"--count must be at least 1, got {count}")
    if rejects:
        entries, total, source = reject_entries(directory, count)
        staged = source != f"{directory.rstrip('/')}/{REJECTS_FILE}"
        origin = f" (no {METADATA_FILE}: staged by run {source.split('/')[-2]})" if staged else ""
        title = (
            f"{directory} | rejects{origin}: {len(entries)} of {total}, from the original "
            "files (partly decoded; grey = unreadable) | image, mask, overlay"
        )
        return render(entries, title)
    metadata = _load_metadata(directory)
    if "classes" in metadata:
        entries, total, legend = class_entries(directory, metadata, split, count)
        colours = "the run's colormap" if metadata["classes"].get("colormap") else "VOC's palette"
        title = (
            f"{directory} | {split}: {len(entries)} of {total} examples, class ids as stored, "
            f"coloured by {colours} | image, classes, overlay"
        )
        return render(entries, title, legend)
    entries, total = shard_entries(directory, metadata, split, count)
    title = (
        f"{directory} | {split}: {len(entries)} of {total} examples as training reads "
        "them (mask thresholded at 128) | image, mask, overlay"
    )
    return render(entries, title)


def run_inspect(directory: str, split: str, count: int, out: str | None, rejects: bool) -> int:
    """CLI body: write the sheet PNG under a new name; the last line printed is its path."""
    _require_dir(directory)  # before --out's checks: a wrong dataset is the likelier mistake
    path = _check_out(default_sheet_path(directory, out, split, rejects), directory)
    if count > MAX_COUNT:
        height = sheet_size(MAX_COUNT, (TILE_HEIGHT, TILE_HEIGHT))[1]
        print(
            f"note: --count {count:,} capped at {MAX_COUNT}: {MAX_COUNT // COLUMNS} rows of "
            f"{COLUMNS} already make a PNG about {height:,} pixels tall",
            file=sys.stderr,
        )
        count = MAX_COUNT
    try:
        sheet = build_sheet(directory, split, count, rejects)
    except NoRejects as news:
        print(news)
        return 0
    buffer = io.BytesIO()
    sheet.image.save(buffer, format="PNG")
    print(write_new(path, buffer.getvalue()))
    return 0
