"""`--rejects`: the entries of rejects.jsonl, rendered from their original files.

Whatever part of a file Pillow still decodes is shown, so a person can judge a reject reason;
an output without metadata.json (a refused or unfinished run) shows its newest run's staged
rejects, since that is when they matter most. Every file is read bounded (transforms.files).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Iterator

import numpy as np
from PIL import Image, ImageFile

from beam_pipeline.commands.inspect_sheet.drawing import TILE_HEIGHT, Entry
from beam_pipeline.commands.inspect_sheet.output import load_metadata, require_dir
from beam_pipeline.errors import UsageError
from transforms import files, json_shape
from transforms.codecs.image import MAX_JPEG_SCANS, MAX_PIXELS, jpeg_scans
from transforms.format.features import PILLOW_FORMATS
from transforms.format.naming import METADATA_FILE, REJECTS_FILE, RUNS_DIR
from transforms.limits import DEFAULT_LIMITS, FILE_LIMITS


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


def _read(path: str | None, what: str, limit: int) -> tuple[bytes | None, str]:
    """(bytes, "") or (None, why not) for a path from rejects.jsonl, which may be null: read
    bounded, so a FIFO or a link to a device among the inputs is never read."""
    if not path:
        return None, f"no {what} file"
    try:
        data = files.read_bounded(path, limit)
    except files.TooLargeError:
        return None, f"{what} file too large"
    except (OSError, ValueError):
        return None, f"{what} file not readable"
    except Exception:  # noqa: BLE001 - gs:// without credentials (DefaultCredentialsError),
        # the client's own errors: one reject's original, never the whole sheet
        if not files.is_remote(path):
            raise
        return None, f"{what} file not readable"
    return (data, "") if data else (None, f"{what} file empty")


def partial_image(path: str | None, target_height: int) -> tuple[np.ndarray | None, str]:
    """RGB pixels of whatever Pillow can decode (large JPEGs reduced while decoding)."""
    data, problem = _read(path, "image", DEFAULT_LIMITS.image_bytes)
    if data is None:
        return None, problem
    if jpeg_scans(data) > MAX_JPEG_SCANS:
        return None, "image of too many JPEG scans (not decoded)"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=PILLOW_FORMATS)
            if image.format == "JPEG":
                image.draft("RGB", (1, target_height))  # DCT-domain downscale, JPEG only
            if image.width * image.height > MAX_PIXELS:
                return None, f"image too large ({image.width}x{image.height})"
            image.load()
            return np.asarray(image.convert("RGB")), ""
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError):
        return None, "image not decodable"


def display_mask(path: str | None) -> tuple[np.ndarray | None, str]:
    """uint8 0..255 of a reject's mask file, whatever its values were (they may be why).

    A COCO entry's mask is the whole annotations file (possibly GBs): never read here.
    """
    from transforms.codecs.mask import load_mask

    if path and path.lower().endswith(".json"):
        return None, "COCO annotations"
    data, problem = _read(path, "mask", DEFAULT_LIMITS.mask_bytes)
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
    found = files.glob(f"{directory.rstrip('/')}/{RUNS_DIR}/*/{REJECTS_FILE}")
    if not found:
        return None
    return max(found, key=lambda path: (files.stat(path).mtime_ns, path))


class NoRejects(Exception):
    """Good news, not an error: there is no sheet of rejects to draw."""


def rejects_source(directory: str) -> str:
    """The published rejects.jsonl of a finished output, else the newest run's staged one."""
    require_dir(directory)
    if files.exists(f"{directory.rstrip('/')}/{METADATA_FILE}"):
        load_metadata(directory)  # a broken metadata.json is worth one line, not a sheet
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
    try:
        first, total = _first_rejects(path, count)
    except (OSError, files.LineTooLongError) as error:
        raise UsageError(f"{path}: {_why_not(error)}; run `segprep verify {directory}`") from None
    if not total:
        raise NoRejects(f"{directory} has no rejects: every entry was accepted ({path} lists none)")
    entries = []
    with truncated_images_allowed():
        for line in first:
            try:
                reject = json_shape.loads(line, REJECTS_FILE)
                if not isinstance(reject, dict):
                    raise ValueError("not a JSON object")
            except ValueError:
                text = line.decode("utf-8", "replace")[:200]
                reject = {"key": "?", "reason": "unparseable rejects.jsonl line", "detail": text}
            image, image_problem = partial_image(reject.get("image"), TILE_HEIGHT)
            mask, mask_problem = display_mask(reject.get("mask"))
            key = str(reject.get("key"))
            caption = (f"{key}: {reject.get('reason')}", str(reject.get("detail") or ""))
            entries.append(Entry(key, image, mask, caption, image_problem, mask_problem))
    return entries, total, path


def _first_rejects(path: str, count: int) -> tuple[list[bytes], int]:
    """The first `count` non-empty lines of rejects.jsonl and how many there are, streamed:
    memory holds those lines, never the file."""
    first, total = [], 0
    with files.opened(path) as (handle, size):
        if size > FILE_LIMITS.rejects_bytes:
            raise files.TooLargeError(
                f"{size:,} bytes, more than the {FILE_LIMITS.rejects_bytes:,}"
            )
        for line in files.bounded_lines(handle, FILE_LIMITS.jsonl_line_bytes, REJECTS_FILE):
            if line.strip():
                total += 1
                if len(first) < count:
                    first.append(line)
    return first, total


def rejects_of(base: str, wanted: set[str], source: str) -> dict[str, dict]:
    """The rejects.jsonl lines of the `wanted` keys, streamed: memory holds those and one line,
    never the file. A line that is not a JSON object with a key is passed over (verify's
    rejects check names it); OSError or files.LineTooLongError (naming `source`) when the
    file cannot be read."""
    path = files.join(base, REJECTS_FILE)
    if not wanted or not files.exists(path):
        return {}
    found = {}
    with files.opened(path) as (handle, _):
        for line in files.bounded_lines(handle, FILE_LIMITS.jsonl_line_bytes, source):
            try:
                entry = json_shape.loads(line, source)
                key = entry["key"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(key, str) and key in wanted:
                found[key] = entry
    return found


def _why_not(error: Exception) -> str:
    if isinstance(error, files.TooLargeError):
        return f"{REJECTS_FILE} file too large ({error})"
    if isinstance(error, files.LineTooLongError):
        return str(error)
    return f"{REJECTS_FILE} file not readable"
