"""Drawing a contact sheet: the layout of entries (image | mask | overlay, caption), the
title and the legend of class colours. Pixels in, a PIL image out: no files read here."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from beam_pipeline.errors import printable

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
    """(left, top, right, bottom) of entry `index`'s tile: 0 image, 1 mask, 2 overlay."""
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
    """`text` escaped (printable) and shortened with an ellipsis until it fits in `width`
    pixels: the longest prefix that fits, found by halving (a caption of 300 class names,
    measured once a character shorter each time, took 25 s a tile).

    Every string drawn on a sheet passes here: keys, class names and the output's path come
    from the input, and a line break in them would make Pillow refuse to measure the text
    (and a caption has one line); escaped, they show as the terminal shows them."""
    text = printable(text)
    # Pillow refuses to measure a string of a million characters or more (a class name can
    # be that long); no caption shows more characters than its pixels of width, many times.
    kept = text[: 8 * width + 8]
    if kept == text and draw.textlength(text, font=font) <= width:
        return text
    text = kept
    fits, over = 0, len(text)  # text[:fits] + "..." fits (or fits is 0); text[:over] does not
    while over - fits > 1:
        middle = (fits + over) // 2
        if draw.textlength(text[:middle] + "...", font=font) <= width:
            fits = middle
        else:
            over = middle
    return text[:fits] + "..."


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
