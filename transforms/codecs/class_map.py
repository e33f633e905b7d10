"""Id maps (--class_map): source mask ids to stored ids, applied as a mask is read, before the
range check. The classic silent bugs of public data are here: Cityscapes' 34 labelIds trained
as if they were its 19 trainIds, ADE20K's "other" (0) trained as a class.

A map is a JSON object {"source id": stored id, ...} with an optional "*" entry for every
unlisted id; without "*" an unlisted id is kept as it is. Presets are data, taken from the
datasets' own definitions.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping

import numpy as np

from transforms.json_shape import check_shape

OTHERS = "*"

# cityscapesScripts helpers/labels.py: labelId -> trainId for the 19 evaluated classes
# (road, sidewalk, building, wall, fence, pole, traffic light, traffic sign, vegetation,
# terrain, sky, person, rider, car, truck, bus, train, motorcycle, bicycle); every other id,
# license plate's -1 included, has trainId 255 (ignored).
_CITYSCAPES_TRAIN = (7, 8, 11, 12, 13, 17, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 31, 32, 33)
CITYSCAPES_TRAIN_NAMES = (
    "road",
    "sidewalk",
    "building",
    "wall",
    "fence",
    "pole",
    "traffic light",
    "traffic sign",
    "vegetation",
    "terrain",
    "sky",
    "person",
    "rider",
    "car",
    "truck",
    "bus",
    "train",
    "motorcycle",
    "bicycle",
)

PRESETS: dict[str, dict[str, int]] = {
    "cityscapes_trainids": {
        **{str(label): train for train, label in enumerate(_CITYSCAPES_TRAIN)},
        OTHERS: 255,
    },
    # MMSegmentation's reduce_zero_label: 0 ("other") -> 255, 1..150 -> 0..149; 255 stays.
    "ade20k_reduce_zero": {"0": 255, **{str(label): label - 1 for label in range(1, 151)}},
}

# A source id as the map's keys spell it: ASCII decimal digits, an optional minus (Cityscapes'
# license plate is -1), at most 10 digits. int() would also take "1_0", " 7" and non-ASCII
# digits ("٣"), none of which is an id a mask file holds.
_SOURCE_ID = re.compile(r"-?[0-9]{1,10}")

_LUT_LIMIT = 1 << 16  # masks of non-negative ids below this map through a lookup table


@dataclasses.dataclass(frozen=True)
class ClassMap:
    """Source id -> stored id; `others`: the stored id of every unlisted source id, or None
    to keep unlisted ids as they are."""

    pairs: tuple[tuple[int, int], ...]
    others: int | None = None
    source: str = ""  # the preset's name or the file, for metadata.json

    def to_json(self) -> dict:
        mapping = {str(key): value for key, value in self.pairs}
        if self.others is not None:
            mapping[OTHERS] = self.others
        return {"source": self.source, "map": mapping}

    def stored_ids(self) -> set[int]:
        ids = {value for _, value in self.pairs}
        return ids if self.others is None else ids | {self.others}

    def apply(self, array: np.ndarray) -> np.ndarray:
        """The mapped ids (int64); non-integer arrays pass untouched to the range check."""
        if array.dtype.kind not in "iub" or array.size == 0:
            return array
        array = array.astype(np.int64, copy=False)
        low, high = int(array.min()), int(array.max())
        if low >= 0 and high < _LUT_LIMIT:
            table = np.arange(high + 1, dtype=np.int64)
            if self.others is not None:
                table[:] = self.others
            for key, value in self.pairs:
                if 0 <= key <= high:
                    table[key] = value
            return table[array]
        values, inverse = np.unique(array, return_inverse=True)
        known = dict(self.pairs)
        fallback = self.others
        mapped = np.array(
            [known.get(int(v), int(v) if fallback is None else fallback) for v in values],
            dtype=np.int64,
        )
        return mapped[inverse].reshape(array.shape)


def parse_class_map(data: bytes | str, source: str) -> ClassMap:
    """A JSON object {"source id": stored id, "*": stored id}; ValueError naming `source`."""
    try:
        text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
    except UnicodeDecodeError as error:
        raise ValueError(f"{source}: not UTF-8 text (byte {error.start}: {error.reason})") from None
    check_shape([text.encode("utf-8", "surrogatepass")], source, 4)
    try:
        # Pairs, not a dict: a key given twice is an error, never the last one silently.
        items = json.loads(text, object_pairs_hook=lambda pairs: ("object", pairs))
    except json.JSONDecodeError as error:
        raise ValueError(f"{source}: not valid JSON ({error.msg}, line {error.lineno})") from None
    except ValueError:  # a number of thousands of digits: int() refuses it
        raise ValueError(f"{source}: a number with more digits than any id") from None
    if not (isinstance(items, tuple) and items[0] == "object"):
        raise ValueError(f'{source}: expected a JSON object {{"source id": stored id, ...}}')
    return class_map_from(items[1], source)


def class_map_from(mapping: Mapping[str, int] | list[tuple[str, int]], source: str) -> ClassMap:
    items = list(mapping.items()) if isinstance(mapping, Mapping) else list(mapping)
    if not items:
        raise ValueError(f"{source}: the map is empty")
    pairs, others = [], None
    for key, value in items:
        if type(value) is not int or value < 0:
            raise ValueError(f"{source}: {key!r} maps to {value!r}, not a stored id (0 or more)")
        if key == OTHERS:
            if others is not None:
                raise ValueError(f"{source}: {OTHERS!r} is given twice")
            others = value
            continue
        if not isinstance(key, str) or not _SOURCE_ID.fullmatch(key):
            shown = key if not isinstance(key, str) or len(key) <= 40 else key[:40] + "..."
            raise ValueError(f"{source}: key {shown!r} is not an integer id or {OTHERS!r}")
        pairs.append((int(key), value))
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{source}: a source id is given twice")
    return ClassMap(tuple(sorted(pairs)), others, source)


def load_preset(name: str) -> ClassMap:
    return class_map_from(PRESETS[name], name)
