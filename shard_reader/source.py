"""RecordSource: random access to one split's records, with no TensorFlow and no Beam.

    source = RecordSource("build/output", "train")
    len(source)          # records in the split
    source[i]            # {"image": uint8 HxWx3, "mask": uint8 HxWx1 of 0/1, "key": str}

For an output with class-id masks (metadata.json `classes`), "mask" is the stored class ids
and ignore index as they are, uint8 from 8-bit PNGs and int32 from 16-bit ones
(`source.mask_dtype`), as make_dataset returns them.

Record i is read through the output's record format (transforms/format/record_formats.py;
metadata.json `record_format`). TFRecord shards: the record index gives its frame
(transforms/format/record_index.py; `segprep index DIR` builds it for an output that lacks
one), read with one pread and its two CRC-32C checks (google-crc32c); ArrayRecord shards:
the native reader's random access, no offset index needed. Then the tf.train.Example is
parsed by protobuf (transforms.format.example_schema), JPEG decoding by simplejpeg with
TensorFlow's default DCT, so pixels equal what `make_dataset` yields (and it measured
1.5-2x faster than Pillow here), PNG masks by Pillow.
Resizing (`image_size`) picks class ids by TensorFlow's nearest-neighbour rule, so they too
equal make_dataset's.

The source is picklable and fork-safe (shard readers are opened lazily, per process),
so PyTorch and Grain worker processes can each hold a copy.

A gs:// output is read through a bounded local cache of whole shards
(shard_reader/remote_cache.py: `cache_dir=`, `cache_limit_bytes=`): each shard is
downloaded once, checked against its sha256 in metadata.json, then read as a local one.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import io
import itertools
import operator
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import simplejpeg
from PIL import Image

from shard_reader import remote_cache, resizing
from transforms import files
from transforms.files import TooLargeError, read_bounded
from transforms.format import dataset_info, features, record_formats, record_index
from transforms.format import example_schema as tf_example
from transforms.format.dataset_info import INDEX_LINE_BYTES, ClassesInfo, MetadataError

# Re-exported: callers catch shard_reader.source.CorruptRecordError, whatever the format.
from transforms.format.tfrecord import CorruptRecordError, unframe  # noqa: F401


def usable_cores() -> int:
    """Cores this process may run on: the default number of decoding workers or threads."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class IndexMissingError(MetadataError):
    """The output has no record index (written before indexes existed)."""


@dataclasses.dataclass(frozen=True)
class _Shard:
    path: str
    size: int  # bytes, from metadata.json
    num_records: int
    frames: np.ndarray | None  # int64 [records, 2] (offset, length): formats with offset_index
    sha256: str = ""  # from metadata.json: what a gs:// shard's download must hash to


class RecordSource:
    """Random access to the records of one split of a segprep output (see module docstring).

    verify_index: check each index file's sha256 against metadata.json when opening
        (reads the index files once; they are ~20 bytes per record).
    cache_dir, cache_limit_bytes: for a gs:// output, where its shards are cached and how
        many bytes they may take there (defaults: ~/.cache/segprep/shards, and the smaller
        of 64 GiB and half the free space there; see shard_reader/remote_cache.py).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike,
        split: str,
        *,
        verify_index: bool = True,
        version: int | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_limit_bytes: int | None = None,
    ) -> None:
        self.cache: remote_cache.ShardCache | None = None
        if files.is_remote(data_dir):
            if not str(data_dir).startswith("gs://"):
                raise ValueError(f"{data_dir}: RecordSource reads local paths and gs:// only")
            remote_cache.require_credentials()
            self.cache = remote_cache.ShardCache.create(cache_dir, cache_limit_bytes)
        self.data_dir = str(data_dir)
        self.split = split
        metadata = dataset_info.load(data_dir, version)
        info = metadata.split(split)
        if not info.has_index:
            raise IndexMissingError(
                f"{data_dir} has no record index for split {split!r}: "
                f"run `segprep index {data_dir}` once to add it"
            )
        self.mask_format = metadata.mask_format
        self.image_shape = info.image_shape
        self.classes = metadata.classes  # None: binary masks, returned as 0/1
        self.record_format = metadata.record_format
        self._format = metadata.adapter
        self._shards = tuple(self._load_shard(shard, verify_index) for shard in info.shards)
        # The global index of each shard's first record, then the total.
        self._starts = [0, *itertools.accumulate(self.shard_sizes)]
        self._key_tables = info.key_tables
        self._keys: dict[str, int] | None = None
        self._readers: dict[int, record_formats.RandomReader] = {}
        # gs:// shards: shard -> [reader, pin descriptor, readers now reading]
        self._pinned: dict[int, list] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _load_shard(self, shard: dataset_info.ShardInfo, verify_index: bool) -> _Shard:
        shard_path = files.join(self.data_dir, shard.file)
        if not self._format.offset_index:
            return _Shard(shard_path, shard.bytes, shard.num_examples, None, shard.sha256)
        path = files.join(self.data_dir, shard.index.file)
        cap = shard.index.bytes if verify_index else shard.num_examples * INDEX_LINE_BYTES
        try:
            data = read_bounded(path, cap)
        except TooLargeError as error:
            raise MetadataError(f"{error} (stale index?)") from None
        if verify_index and hashlib.sha256(data).hexdigest() != shard.index.sha256:
            raise MetadataError(f"{path}: sha256 differs from metadata.json (stale index?)")
        try:
            frames = record_index.parse_index(data)
        except record_index.IndexFormatError as error:
            raise MetadataError(f"{path}: {error}") from None
        end = frames[-1][0] + frames[-1][1] if frames else 0
        if len(frames) != shard.num_examples or end != shard.bytes:
            raise MetadataError(
                f"{path}: {len(frames)} records ending at byte {end}, but metadata.json "
                f"says {shard.num_examples} records in {shard.bytes} bytes"
            )
        table = np.array(frames, dtype=np.int64).reshape(-1, 2)
        return _Shard(shard_path, shard.bytes, shard.num_examples, table, shard.sha256)

    def __len__(self) -> int:
        return self._starts[-1]

    def check_not_empty(self) -> None:
        """The loaders' check: ValueError when metadata.json lists no record of the split."""
        if len(self) == 0:
            raise ValueError(
                f"split {self.split!r} of {self.data_dir} is empty: metadata.json lists no "
                "records for it (no input was assigned to it, or every one was rejected: see "
                "rejects.jsonl)"
            )

    @property
    def mask_dtype(self) -> np.dtype:
        """uint8 (0/1 masks, 8-bit class ids), or int32 (16-bit class ids)."""
        return np.dtype(np.uint8) if self.classes is None else self.classes.mask_dtype

    def locate(self, index: int) -> tuple[int, int]:
        """(shard number, record number in that shard) of record `index` of the split: an
        integer (numpy's too) as a sequence takes it; a float or a string was cut or parsed
        (`source[1.5]` served record 1, `source["0"]` record 0)."""
        try:
            given = operator.index(index)
        except TypeError:
            raise TypeError(
                f"record index {index!r} is not an integer ({type(index).__name__})"
            ) from None
        index = given + len(self) if given < 0 else given
        if not 0 <= index < len(self):
            raise IndexError(f"record {given} outside {-len(self)}..{len(self) - 1}")
        shard = bisect.bisect_right(self._starts, index) - 1
        return shard, index - self._starts[shard]

    def read_serialized(self, index: int) -> bytes:
        """The serialized tf.train.Example of record `index`, checked as its format allows
        (TFRecord: both CRCs; ArrayRecord: the chunk hash)."""
        shard_number, record = self.locate(index)
        if self.cache is not None:
            return self._read_cached(shard_number, record)
        return self._reader(shard_number).read(record)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self._decode(index)

    def _decode(self, index: int, out: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
        serialized = self.read_serialized(index)
        where = f"{self.split} record {index}"
        shape = self.image_shape
        return decode_example(serialized, self.mask_format, where, out, self.classes, shape)

    def read_into(self, index: int, image: np.ndarray, mask: np.ndarray) -> str:
        """Decode record `index` into `image` (HxWx3) and `mask` (HxWx1); its key.

        For batch buffers: the pixels land where they are needed, with no copy. The record
        must have the buffers' height and width (CorruptRecordError otherwise).
        """
        return self._decode(index, (image, mask))["key"]

    def read_batch(
        self,
        indices: Sequence[int],
        *,
        image_size: int | tuple[int, int] | None = None,
        out: tuple[np.ndarray, np.ndarray] | None = None,
        resize: str = resizing.STRETCH,
        valid: bool = False,
    ) -> dict[str, Any]:
        """{"image": uint8 [B,H,W,3], "mask": [B,H,W,1], "key": [B]} of `indices`.

        Each record is decoded straight into its row (no stacking copy): into `out` (images,
        masks) when given, such as shared memory, else into new arrays. image_size (an int
        or (height, width)) resizes every record to that size, by `resize` ("stretch" or
        "fit": see shard_reader.resizing); without it the split's records must share one
        size (metadata image_shape), or the batch hold a single record. The masks are 0/1
        uint8, or class ids in `mask_dtype`. With `valid`, "valid" is added: uint8
        [B,H,W,1], 0 on the padding of resize="fit", else 1.
        """
        image_size = resizing.image_size_arg(image_size)
        resize = resizing.resize_arg(resize, image_size)
        shape = image_size or self.image_shape
        if shape is None:
            if len(indices) != 1:
                raise ValueError(f"records of split {self.split!r} differ in size: one per batch")
            item = self[indices[0]]
            batch = {"image": item["image"][None], "mask": item["mask"][None], "key": [item["key"]]}
            if valid:
                batch["valid"] = np.ones_like(item["mask"], np.uint8)[None]
            return batch
        if out is None:
            out = (
                np.empty((len(indices), *shape, 3), np.uint8),
                np.empty((len(indices), *shape, 1), self.mask_dtype),
            )
        images, masks = out
        valids = np.ones((len(indices), *shape, 1), np.uint8) if valid else None
        keys = []
        for row, index in enumerate(indices):
            if image_size is None:
                keys.append(self.read_into(index, images[row], masks[row]))
            else:
                item = self.read_sized(index, image_size, resize)
                images[row], masks[row] = item["image"], item["mask"]
                if valids is not None and "valid" in item:
                    valids[row] = item["valid"]
                keys.append(item["key"])
        batch = {"image": images, "mask": masks, "key": keys}
        if valids is not None:
            batch["valid"] = valids
        return batch

    def read_sized(
        self,
        index: int,
        image_size: int | tuple[int, int] | None,
        resize: str = resizing.STRETCH,
    ) -> dict[str, Any]:
        """Record `index` at `image_size` (as read_batch); with resize="fit" it also has
        "valid", uint8 HxWx1: 1 on the record's pixels, 0 on the padding."""
        image_size = resizing.image_size_arg(image_size)
        item = self[index]
        if image_size is None:
            return item
        if resizing.resize_arg(resize, image_size) == resizing.STRETCH:
            return resize_example(item, image_size, self.classes is not None)
        return fit_example(item, image_size, self.classes)

    def index_of(self, key: str) -> int:
        """The split's record index holding `key` (from the key table, read on first use).

        The table is checked against its sha256 in metadata.json and its line i must place
        record i, and the record found must hold `key`: a table edited or swapped for
        another one answers nothing (MetadataError), never another record.
        """
        if self._keys is None:
            self._keys = self._read_key_table()
        try:
            index = self._keys[key]
        except KeyError:
            raise KeyError(f"key {key!r} is not in split {self.split!r}") from None
        found = record_key(self.read_serialized(index), f"{self.split} record {index}")
        if found != key:
            raise MetadataError(
                f"the key table places key {key!r} at record {index}, which holds "
                f"{found!r} (key table does not match the shards)"
            )
        return index

    def _read_key_table(self) -> dict[str, int]:
        """The split's key tables (one per version read), concatenated: line i, record i."""
        if not self._key_tables:  # a split with no shards has no table
            return {}
        rows = []
        for ref in self._key_tables:
            path = files.join(self.data_dir, ref.file)
            try:
                data = read_bounded(path, ref.bytes)
            except TooLargeError as error:
                raise MetadataError(f"{error}: metadata.json says {ref.bytes:,}") from None
            if hashlib.sha256(data).hexdigest() != ref.sha256:
                raise MetadataError(
                    f"{path}: sha256 differs from metadata.json (tampered or stale)"
                )
            try:
                rows += record_index.parse_key_table(data)
            except (record_index.IndexFormatError, UnicodeDecodeError, RecursionError) as error:
                raise MetadataError(f"{path}: {error}") from None
        path = "the key tables"
        if len(rows) != len(self):
            raise MetadataError(f"{path}: {len(rows)} keys for {len(self)} records")
        keys = {}
        for index, row in enumerate(rows):
            if row.shard >= len(self._shards) or self._starts[row.shard] + row.record != index:
                raise MetadataError(
                    f"{path}: line {index + 1} places {row.key!r} at shard {row.shard} record "
                    f"{row.record}, not at the split's record {index} (rows out of order)"
                )
            if keys.setdefault(row.key, index) != index:
                raise MetadataError(f"{path}: key {row.key!r} is listed twice")
        return keys

    def _reader(self, shard_number: int) -> record_formats.RandomReader:
        if self._pid != os.getpid():  # a forked child: open its own readers
            self._readers, self._pid, self._lock = {}, os.getpid(), threading.Lock()
        reader = self._readers.get(shard_number)
        if reader is None:
            with self._lock:
                reader = self._readers.get(shard_number)
                if reader is None:
                    shard = self._shards[shard_number]
                    reader = self._format.random_reader(
                        shard.path, shard.size, shard.num_records, shard.frames
                    )
                    self._readers[shard_number] = reader
        return reader

    @property
    def shard_sizes(self) -> list[int]:
        """Records per shard, in shard order."""
        return [shard.num_records for shard in self._shards]

    def shard_of(self, indices: np.ndarray) -> np.ndarray:
        """The shard number of each of the split's record numbers `indices`."""
        return np.searchsorted(self._starts, np.asarray(indices), side="right") - 1

    def remote_shards(self) -> list[remote_cache.RemoteShard]:
        """Each shard's gs:// address, sha256 and size, in shard order (for prefetching)."""
        return [remote_cache.RemoteShard(s.path, s.sha256, s.size) for s in self._shards]

    def _read_cached(self, shard_number: int, record: int) -> bytes:
        # A cached shard is pinned (a shared lock, remote_cache) and its reader open only
        # while some thread reads it: a reader holds at most one shard per thread, so
        # eviction can always make room for the next one.
        if self._pid != os.getpid():  # a forked child: its copies of the parent's pins go
            self._drop_pins()
            self._readers, self._pid, self._lock = {}, os.getpid(), threading.Lock()
        with self._lock:
            entry = self._pinned.get(shard_number)
            if entry is not None:
                entry[2] += 1
            else:  # unpin the shards no thread is reading
                for number, (reader, pin, users) in list(self._pinned.items()):
                    if users == 0:
                        reader.close()
                        os.close(pin)
                        del self._pinned[number]
        if entry is None:
            shard = self._shards[shard_number]
            remote = remote_cache.RemoteShard(shard.path, shard.sha256, shard.size)
            pin = self.cache.open(remote)
            try:
                reader = self._format.random_reader(
                    self.cache.object_path(remote), shard.size, shard.num_records, shard.frames
                )
            except BaseException:
                os.close(pin)
                raise
            with self._lock:
                entry = self._pinned.setdefault(shard_number, [reader, pin, 0])
                if entry[1] != pin:  # another thread opened it meanwhile
                    reader.close()
                    os.close(pin)
                entry[2] += 1
        try:
            return entry[0].read(record)
        finally:
            with self._lock:
                entry[2] -= 1

    def _drop_pins(self) -> None:
        for reader, pin, _ in self._pinned.values():
            reader.close()
            os.close(pin)
        self._pinned = {}

    def close(self) -> None:
        """Close this process's shard readers (reopened on the next read)."""
        if self._pid == os.getpid():
            for reader in self._readers.values():
                reader.close()
            self._drop_pins()
        self._readers, self._pinned = {}, {}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to report to
            pass

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_readers={}, _pinned={}, _lock=None, _keys=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pid, self._lock = os.getpid(), threading.Lock()

    def __repr__(self) -> str:
        return f"RecordSource({self.data_dir!r}, {self.split!r}, {len(self)} records)"


def record_key(serialized: bytes, where: str = "record") -> str:
    """The key of one serialized record, its pixels left undecoded."""
    try:
        feature = tf_example.Example.FromString(serialized).features.feature
        return feature[features.KEY].bytes_list.value[0].decode("utf-8")
    except (ValueError, IndexError, UnicodeDecodeError) as error:
        raise CorruptRecordError(f"{where}: not a segprep example: {error}") from None


def decode_example(
    serialized: bytes,
    mask_format: str,
    where: str = "record",
    out: tuple[np.ndarray, np.ndarray] | None = None,
    classes: ClassesInfo | None = None,
    shape: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """{"image": uint8 HxWx3, "mask": HxWx1, "key": str} of one record.

    The mask is uint8 0/1, or with `classes` the stored class ids in `classes.mask_dtype`.
    With `out` (image, mask) arrays, the pixels are decoded into them (same height and
    width as the record, else CorruptRecordError) and returned as those arrays. The image
    must have `shape` (metadata image_shape) when given; the sizes are checked in the
    headers before anything is decoded (`header_size`).
    """
    try:
        feature = tf_example.Example.FromString(serialized).features.feature
        image_bytes = feature[features.IMAGE].bytes_list.value[0]
        mask_bytes = feature[features.MASK].bytes_list.value[0]
        key = feature[features.KEY].bytes_list.value[0].decode("utf-8")
    except (ValueError, IndexError, UnicodeDecodeError) as error:
        raise CorruptRecordError(f"{where}: not a segprep example: {error}") from None
    where = f"{where} (key {key})"
    try:
        size = header_size(
            image_bytes, where, shape if out is None else out[0].shape[:2], IMAGE_FORM
        )
        header_size(mask_bytes, f"{where} mask", size, mask_form(mask_format, classes))
        # fastdct: TensorFlow's default DCT (INTEGER_FAST), so pixels match tf.data's.
        if out is None:
            image = simplejpeg.decode_jpeg(image_bytes, colorspace="RGB", fastdct=True)
        else:
            image = simplejpeg.decode_jpeg(
                image_bytes, colorspace="RGB", fastdct=True, buffer=out[0]
            )
        if classes is not None:
            gray = _class_ids(mask_bytes, classes)
        elif mask_format == "jpeg":
            gray = simplejpeg.decode_jpeg(mask_bytes, colorspace="GRAY", fastdct=True)
        else:
            gray = np.asarray(Image.open(io.BytesIO(mask_bytes), formats=("PNG",)).convert("L"))
            gray = gray[..., None]
    except CorruptRecordError:
        raise
    except (ValueError, OSError) as error:
        raise CorruptRecordError(f"{where}: image or mask does not decode: {error}") from None
    if image.shape[:2] != gray.shape[:2]:
        raise CorruptRecordError(
            f"{where}: image {image.shape[:2]} and mask {gray.shape[:2]} differ"
        )
    if classes is not None:
        if out is None:
            mask = gray
        else:
            mask = out[1]
            mask[...] = gray
    elif out is None:
        mask = (gray >= features.MASK_THRESHOLD).view(np.uint8)
    else:
        mask = out[1]
        np.greater_equal(gray, features.MASK_THRESHOLD, out=mask.view(np.bool_))
    return {"image": image, "mask": mask, "key": key}


@dataclasses.dataclass(frozen=True)
class Form:
    """What a stored picture's header states besides its size. The decoders convert
    whatever they are given to the channels asked for (a grey mask to a "photo", a photo to
    a grey "mask"), so an image and mask exchanged in a record would otherwise decode."""

    format: str  # "JPEG" or "PNG"
    channels: int
    bits: int = 8

    def __str__(self) -> str:
        return f"{self.channels}-channel {self.bits}-bit {self.format}"


IMAGE_FORM = Form("JPEG", 3)
# PNG colour type -> channels (a palette decodes to RGB).
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
# simplejpeg's colour space of a JPEG -> channels.
_JPEG_CHANNELS = {"Gray": 1, "YCbCr": 3, "RGB": 3, "CMYK": 4, "YCCK": 4}


def mask_form(mask_format: str, classes: ClassesInfo | None = None) -> Form:
    """A mask's form by metadata.json: grey, in its mask format (class ids: PNG of its depth)."""
    if classes is not None:
        return Form("PNG", 1, classes.png_bit_depth)
    return Form(mask_format.upper(), 1)


def header_size(
    data: bytes, where: str, expected: Sequence[int] | None, form: Form | None = None
) -> tuple[int, int]:
    """(height, width) in a JPEG's or PNG's header, `expected` when given, else at most the
    pixels segprep writes: a forged header is refused before its pixels are allocated. With
    `form`, the header must also state that format, channel count and bit depth."""
    if data.startswith(features.PNG_SIGNATURE) and data[12:16] == b"IHDR" and len(data) >= 26:
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        found = Form("PNG", _PNG_CHANNELS.get(data[25], 0), data[24])
    else:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        found = Form("JPEG", _JPEG_CHANNELS.get(colorspace, 0))
    if form is not None and found != form:
        raise CorruptRecordError(f"{where}: a {found}, expected a {form}")
    if expected is not None and (height, width) != tuple(expected):
        raise CorruptRecordError(f"{where}: {height}x{width}, expected {tuple(expected)}")
    if height * width > dataset_info.LIMITS.image_pixels:
        raise CorruptRecordError(
            f"{where}: {height}x{width}, more than the {dataset_info.LIMITS.image_pixels:,} "
            "pixels segprep writes"
        )
    return height, width


def _class_ids(data: bytes, classes: ClassesInfo) -> np.ndarray:
    """Stored ids [h,w,1] in `classes.mask_dtype`, from a grey PNG of the bit depth that
    metadata.json gives (anything else would be read as other values: refused)."""
    image = Image.open(io.BytesIO(data), formats=("PNG",))
    mode = "L" if classes.png_bit_depth == 8 else "I;16"
    if image.format != "PNG" or image.mode != mode:
        raise CorruptRecordError(
            f"class mask is {image.format} {image.mode}, not the {classes.png_bit_depth}-bit "
            "grey PNG metadata.json says"
        )
    return np.array(image, dtype=classes.mask_dtype)[..., None]  # a copy: writable


def nearest_rows(stored: int, target: int) -> np.ndarray:
    """Source row (or column) of each of `target` output rows: tf.image.resize's nearest
    neighbour with half-pixel centres, floor((i + 0.5) * stored / target), computed in float32
    as its kernel does, so the ids picked are make_dataset's, to the pixel."""
    scale = np.float32(stored) / np.float32(target)
    centres = np.arange(target, dtype=np.float32) + np.float32(0.5)
    return np.minimum(np.floor(centres * scale).astype(np.int64), stored - 1)


def resize_example(
    item: dict[str, Any], size: tuple[int, int], class_ids: bool = False
) -> dict[str, Any]:
    """`item` at (height, width): the image bilinear, the mask nearest, so every value is
    one the stored mask holds; class ids by make_dataset's rule (`nearest_rows`)."""
    if item["image"].shape[:2] == tuple(size):
        return item
    height, width = size
    image = np.asarray(Image.fromarray(item["image"]).resize((width, height), Image.BILINEAR))
    if class_ids:
        rows = nearest_rows(item["mask"].shape[0], height)
        columns = nearest_rows(item["mask"].shape[1], width)
        return {**item, "image": image, "mask": item["mask"][rows][:, columns]}
    mask = Image.fromarray(item["mask"][..., 0]).resize((width, height), Image.NEAREST)
    return {**item, "image": image, "mask": np.asarray(mask)[..., None]}


def fit_example(
    item: dict[str, Any], size: tuple[int, int], classes: ClassesInfo | None = None
) -> dict[str, Any]:
    """`item` scaled into (height, width) with its aspect ratio kept and padded (see
    shard_reader.resizing): image with 0, class ids with the ignore index, a 0/1 mask with
    0; "valid" marks the record's pixels."""
    fit = resizing.fit_geometry(item["image"].shape[:2], size)
    scaled = resize_example(item, (fit.height, fit.width), classes is not None)
    pad = 0 if classes is None else classes.ignore_index
    return {
        **scaled,
        "image": resizing.pad_into(scaled["image"], fit, size, 0),
        "mask": resizing.pad_into(scaled["mask"], fit, size, pad),
        "valid": resizing.pad_into(np.ones((fit.height, fit.width, 1), np.uint8), fit, size, 0),
    }
