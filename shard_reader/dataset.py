"""make_dataset: the shards listed in metadata.json -> batches of (image, mask[, key]).

Layout of the pipeline, and why:

  segments of shards (sharding.plan_segments)  -> shuffled shard order per epoch
  parallel interleave of TFRecordDataset readers  (CRC-checked; counts checked vs metadata)
  without cache:
    [a part that fits the shuffle buffer: its serialized records kept after one pass]
    shuffle of *serialized* records               (~100 KB each: cheap to hold, per example)
    parallel map: parse, decode to uint8, threshold a binary mask (fused with batch by tf.data)
  with cache= (decoded pixels kept from the first epoch on):
    parallel map: parse, decode to uint8, threshold a binary mask
    cache of the decoded examples                 (this input pipeline's part only)
    shuffle of decoded examples                   (in memory: references into the cache)
  augment, per example, fresh every epoch
  batch, then one float32 conversion per batch    (float32 is 4x the bytes: make it once;
                                                   class ids stay integers)
  repeat (after batch: every epoch is one exact pass), prefetch
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable

import tensorflow as tf

from shard_reader import cache_dir, resizing, sharding
from shard_reader.cache_dir import CacheBusyError as CacheBusyError  # re-exported
from shard_reader.cache_dir import CacheMismatchError as CacheMismatchError  # re-exported
from shard_reader.decoding import OUTPUT_DTYPES, Size, convert, make_decoder
from shard_reader.metadata import SplitInfo, load_split
from transforms import files
from transforms.files import NotAFileError, open_regular
from transforms.format import record_formats
from transforms.format.dataset_info import MetadataError
from transforms.format.tfrecord import CorruptRecordError, check_lengths

AUTOTUNE = tf.data.AUTOTUNE
# Serialized records (an 800x600 record is ~100 KB, so ~100 MB): decoded pixels never wait here.
DEFAULT_SHUFFLE_BUFFER = 1024
# Shards read at once; reading is cheap next to decoding, this only mixes shards.
MAX_OPEN_SHARDS = 8

CACHE_MEMORY = "memory"
CACHE_AUTO = "auto"
# cache="memory" is refused when the decoded part would take more than this share of the
# memory the kernel reports as available: training itself needs the rest.
MEMORY_CACHE_FRACTION = 0.5
# Decoded examples read back from a cache file are new buffers, so the shuffle after a file
# cache holds at most this many bytes of them (an 800x600 example is 1.9 MB: ~270).
FILE_CACHE_SHUFFLE_BYTES = 512 * 2**20
# Shuffle buffer after a file cache when the split's size is unknown (mixed sizes).
FILE_CACHE_SHUFFLE_UNKNOWN_SIZE = 64
# A decoded example's image: 3 uint8 bytes per pixel; its mask adds its own dtype's size
# (1 for 0/1 masks and 8-bit class ids, 4 for int32 class ids).
IMAGE_BYTES_PER_PIXEL = 3

Augment = Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]
CacheSetting = str | os.PathLike | None

log = logging.getLogger(__name__)


class MemoryCacheError(ValueError):
    """cache="memory" was asked for a part too large for the host's available memory."""


def _pipeline(input_context: tf.distribute.InputContext | None) -> tuple[int, int]:
    if input_context is None:
        return 1, 0
    return input_context.num_input_pipelines, input_context.input_pipeline_id


def steps_per_epoch(
    data_dir: str,
    split: str,
    batch_size: int,
    input_context: tf.distribute.InputContext | None = None,
    *,
    drop_remainder: bool = False,
    version: int | None = None,
) -> int:
    """Training steps in one exact pass over the split, from metadata.json alone.

    Without `input_context`: batches of `batch_size` in the split. With it, `batch_size` is
    the per-replica size given to make_dataset and the count is of this pipeline's part:
    the parts differ by at most one record and the smallest one counts, so no pipeline runs
    out before the others; a step takes one batch per replica fed by the pipeline.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    info = load_split(data_dir, split, version)
    num_pipelines, _ = _pipeline(input_context)
    records = min(sharding.part_sizes(info.num_examples, num_pipelines))
    batches = records // batch_size if drop_remainder else -(-records // batch_size)
    replicas = 1
    if input_context is not None:
        replicas = max(1, input_context.num_replicas_in_sync // num_pipelines)
    # drop_remainder promises full batches; with several replicas, full steps too.
    steps = batches // replicas if drop_remainder else -(-batches // replicas)
    if steps == 0:
        raise ValueError(
            f"batch_size {batch_size} x {replicas} replica(s) with drop_remainder leaves no "
            f"full step of the {records} records per input pipeline of split {split!r}"
        )
    return steps


def make_dataset(
    data_dir: str,
    split: str,
    batch_size: int,
    *,
    training: bool = True,
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
    seed: int | None = None,
    repeat: bool = False,
    input_context: tf.distribute.InputContext | None = None,
    deterministic: bool | None = None,
    drop_remainder: bool = False,
    augment: Augment | None = None,
    with_keys: bool = False,
    dtype: tf.DType = tf.float32,
    cache: CacheSetting = None,
    image_size: int | Size | None = None,
    resize: str = resizing.STRETCH,
    version: int | None = None,
) -> tf.data.Dataset:
    """Batches of (image, mask) or (image, mask, key) from one split of a segprep output.

    image: float32 [B,H,W,3] in 0..255; mask: float32 [B,H,W,1], exactly 0 or 1; key: string
    [B]. For an output with class-id masks (metadata.json `classes`), mask is the stored
    class ids and ignore index, never thresholded, in uint8 (int32 when stored as 16-bit
    PNGs, ids above 255) whatever `dtype` is. H and W are static when metadata.json says
    every record of the split has one size, or when `image_size` gives it. Errors are never
    skipped: a corrupt shard or a count that disagrees with metadata.json raises
    (DataLossError, FailedPreconditionError) instead of silently shortening the epoch.

    training: shuffle per example each epoch (shard order and a buffer of `shuffle_buffer`
        serialized records); off, records come in shard order. When this pipeline's part
        fits in the buffer, its serialized records are kept after the first pass (the buffer
        held them all anyway), so later epochs start without re-reading the shards.
    seed: makes the shuffle reproducible; with it (or without training) the order is
        deterministic unless `deterministic=False` says otherwise.
    repeat: repeat after batching, so each epoch of `steps_per_epoch` batches is one exact
        pass (the last batch of a pass may be short unless `drop_remainder`). Without it,
        the dataset's cardinality is its batch count, from metadata.json.
    input_context: read only this input pipeline's part; the parts are disjoint, tile the
        split and differ by at most one record (see shard_reader.sharding).
    augment: `f(image, mask) -> (image, mask)` on one example (as above, in `dtype`), applied
        to both together so they stay aligned; runs in the parallel map, in TF ops only,
        afresh every epoch (also with a cache, which holds the pixels before it). It is
        the tf.data analogue of the PyTorch loader's per-sample `transform`.
    dtype: tf.uint8 yields image 0..255 and mask 0/1 as uint8: a quarter of the bytes, for
        models that cast on the accelerator (TensorFlow's uint8->float32 cast is a scalar
        loop: at 800x600 it costs about half as much CPU as decoding). Class ids keep their
        integer dtype either way.
    cache: None (decode every epoch), "memory", a local directory, or "auto". The first pass
        keeps this input pipeline's decoded examples (uint8 image, thresholded mask or class
        ids; before shuffle, augment and float conversion); later passes read them back and
        still reshuffle per example: from memory over the whole part, from a directory within
        a window of FILE_CACHE_SHUFFLE_BYTES of decoded examples over the order of the first
        pass. "memory" is refused (MemoryCacheError) when records x height x width x (3 +
        mask bytes: 1, or 4 for int32 class ids) exceeds MEMORY_CACHE_FRACTION of
        MemAvailable (/proc/meminfo); "auto" is "memory" when it fits and None otherwise.
        A directory holds one cache per split, part, image_size and metadata.json content,
        so a rewritten dataset gets a fresh one; its filler seals it with a manifest (the
        dataset's digest, each cache file's sha256), checked whenever it is opened: a cache
        copied, planted or changed under that name is refused (CacheMismatchError), never
        served (see shard_reader.cache_dir).
    image_size: an int (a square) or (height, width) of the images and masks returned.
        JPEGs are decoded at
        1/2, 1/4 or 1/8 scale when that still covers the target (libjpeg's scaled IDCT; the
        entropy decoding of every coefficient remains) and area-resized the rest of the way;
        binary masks are scaled the same way and thresholded at half, so they stay exactly
        0/1 and match the image; class-id masks are resized by nearest neighbour only, so
        every id returned is one the stored mask holds. Mixed-size splits pick the scale per
        record and then batch.
    resize: "stretch" (to exactly image_size) or "fit": the aspect ratio kept, the rest
        padded, images with 0, class ids with the ignore index (the loss skips it), 0/1
        masks with 0 (see shard_reader.resizing; the PyTorch and Grain loaders can also
        return a `valid` mask of the padding). The same pixels as theirs are padded.
    version: read exactly the records of this version of a dataset that grew (`segprep
        prepare --append`), in the order they had when it was the latest (same seed, same
        order); None: the latest version.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    dtype = tf.as_dtype(dtype)
    if dtype not in OUTPUT_DTYPES:
        raise ValueError(f"dtype must be one of {[d.name for d in OUTPUT_DTYPES]}, got {dtype}")
    image_size = resizing.image_size_arg(image_size)
    resize = resizing.resize_arg(resize, image_size)
    info = load_split(data_dir, split, version)
    if not record_formats.get(info.record_format).tf_data:
        raise ValueError(
            f"{data_dir} holds {info.record_format} shards, which tf.data cannot read: use "
            "shard_reader.RecordSource, shard_reader.torch, shard_reader.grain or TFDS "
            "(tfds.builder_from_directory(...).as_data_source())"
        )
    _check_regular(info)
    if info.image_shape is None and image_size is None and augment is None and batch_size > 1:
        raise ValueError(
            f"records of split {split!r} differ in size (metadata image_shape is null): "
            "pass image_size=, an augment= that resizes or crops to one size, or batch_size=1"
        )
    pipeline = _pipeline(input_context)
    part = sharding.part_sizes(info.num_examples, pipeline[0])[pipeline[1]]
    size = image_size or info.image_shape
    mask_bytes = 1 if info.classes is None else info.classes.mask_dtype.itemsize
    pixel_bytes = IMAGE_BYTES_PER_PIXEL + mask_bytes
    # A fitted cache holds other pixels than a stretched one of the same size.
    cache_size = (*size, resize) if image_size is not None and resize != resizing.STRETCH else size
    cache_plan = _plan_cache(
        cache, data_dir, split, pipeline, part, cache_size, with_keys, pixel_bytes, version
    )
    if deterministic is None:
        deterministic = not training or seed is not None
    records = _records(info, pipeline, training, seed, deterministic)
    decode = make_decoder(
        info.mask_format, info.image_shape, with_keys, image_size, info.classes, resize
    )
    class_ids = info.classes is not None
    shuffle_seed = None if seed is None else seed + 1
    if cache_plan is None:
        if training and shuffle_buffer > 1:
            if part <= shuffle_buffer:
                # The buffer takes in the whole part before its first output anyway: keeping
                # those serialized records costs no more memory, and spares every later
                # epoch re-reading the part before its first batch can start.
                records = records.cache()
            records = records.shuffle(
                min(shuffle_buffer, part), seed=shuffle_seed, reshuffle_each_iteration=True
            )
        examples = records
    else:
        examples = records.map(decode, AUTOTUNE, deterministic=deterministic)
        examples = examples.cache(cache_plan.filename)
        if cache_plan.directory is not None and cache_plan.directory.filling:
            examples = examples.concatenate(_sealer(cache_plan.directory, examples.element_spec))
        if training and shuffle_buffer > 1:
            buffer = cache_plan.shuffle_buffer(shuffle_buffer, part, size)
            examples = examples.shuffle(buffer, seed=shuffle_seed, reshuffle_each_iteration=True)
        decode = None  # decoded before the cache
    dataset = _batch(
        examples, decode, batch_size, drop_remainder, augment, dtype, deterministic, class_ids
    )
    if repeat:
        dataset = dataset.repeat()
    else:
        # The count is known from metadata.json: Keras then shows "3/3" and does not warn
        # that the input "ran out of data" at the end of evaluate() or validation.
        batches = part // batch_size if drop_remainder else -(-part // batch_size)
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    options = tf.data.Options()
    if input_context is not None:
        # Already sharded above: tf.distribute must not shard a second time.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.prefetch(AUTOTUNE).with_options(options)


def available_memory() -> tuple[int, str] | None:
    """(bytes, where the figure comes from) of memory the host can still give, if known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name == "MemAvailable":
                    return int(value.split()[0]) * 1024, "MemAvailable in /proc/meminfo"
    except (OSError, ValueError, IndexError):
        pass
    try:
        pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages, "available physical pages (sysconf SC_AVPHYS_PAGES)"


@dataclasses.dataclass(frozen=True)
class _CachePlan:
    pixel_bytes: int  # of one decoded example, image and mask
    directory: cache_dir.CacheDirectory | None = None  # None: in memory

    @property
    def filename(self) -> str:
        """tf.data's cache filename: "" keeps the cache in memory."""
        return "" if self.directory is None else self.directory.prefix

    def shuffle_buffer(self, requested: int, part: int, size: Size | None) -> int:
        """Examples the shuffle after the cache holds.

        In memory they are references to the cached tensors, so the whole part costs
        nothing and each epoch is a full reshuffle. From a file they are fresh copies, so
        the buffer is bounded in bytes.
        """
        if self.directory is None:
            return part
        if size is None:
            bound = FILE_CACHE_SHUFFLE_UNKNOWN_SIZE
        else:
            bound = max(2, FILE_CACHE_SHUFFLE_BYTES // (size[0] * size[1] * self.pixel_bytes))
        return max(1, min(requested, part, bound))


def _plan_cache(
    cache: CacheSetting,
    data_dir: str,
    split: str,
    pipeline: tuple[int, int],
    part: int,
    size: Size | None,
    with_keys: bool,
    pixel_bytes: int,
    version: int | None = None,
) -> _CachePlan | None:
    """Where this pipeline's decoded part goes, after checking it fits there."""
    if cache is None:
        return None
    if cache in (CACHE_MEMORY, CACHE_AUTO):
        refusal = _memory_refusal(split, part, size, pixel_bytes)
        if refusal is None:
            return _CachePlan(pixel_bytes)
        if cache == CACHE_AUTO:
            log.info("cache='auto' keeps no cache: %s", refusal)
            return None
        raise MemoryCacheError(
            f"{refusal}; pass image_size= for smaller pixels, cache=<local directory> to "
            "cache on disk, or cache=None"
        )
    path = os.fspath(cache) if isinstance(cache, str | os.PathLike) else None
    if not isinstance(path, str) or not path or files.is_remote(path):
        raise ValueError(
            f"cache must be None, 'memory', 'auto' or a local directory, got {cache!r}"
        )
    directory = cache_dir.open_directory(path, data_dir, split, pipeline, size, with_keys, version)
    return _CachePlan(pixel_bytes, directory)


def _memory_refusal(split: str, part: int, size: Size | None, pixel_bytes: int) -> str | None:
    """Why the decoded part must not be cached in memory, or None when it may."""
    if size is None:
        return (
            f"cannot size a memory cache for split {split!r}: its records differ in size "
            "(metadata image_shape is null) and no image_size= is given"
        )
    estimate = part * size[0] * size[1] * pixel_bytes
    available = available_memory()
    if available is None:
        return "cannot tell how much memory this host has available for a memory cache"
    free, source = available
    limit = int(free * MEMORY_CACHE_FRACTION)
    if estimate <= limit:
        return None
    gib = 2**30
    return (
        f"a memory cache of split {split!r} would hold {estimate / gib:.2f} GiB of decoded "
        f"pixels ({part} records x {size[0]}x{size[1]} x {pixel_bytes} bytes), more than "
        f"{MEMORY_CACHE_FRACTION:.0%} of the {free / gib:.2f} GiB {source} "
        f"({limit / gib:.2f} GiB)"
    )


def _check_regular(info: SplitInfo) -> None:
    """Refuse a local shard that is a FIFO, device or folder before tf.data opens it: its
    reader would block on a FIFO or read a device without end; and one whose size is not the
    one metadata.json lists (a record swapped for another shard's passes every CRC and
    count: the other readers check the size too), or whose frame lengths run past its end
    or frame another number of records than it lists (a length forged to end at the file's
    end passes the walk, and tf.data's DataLossError for its data CRC names no file).
    A missing shard is left to tf.data (NotFoundError when read; a filled cache does not
    need it)."""
    for path, size, records in zip(info.files, info.shard_bytes, info.shard_sizes, strict=True):
        if files.is_remote(path):
            return
        try:
            with open_regular(path) as handle:
                actual = os.fstat(handle.fileno()).st_size
                # tf.data allocates each length
                frames = check_lengths(handle.fileno(), actual, path)
        except FileNotFoundError:
            continue
        except NotAFileError as error:
            raise NotAFileError(f"{error}: a shard must be the file segprep wrote") from None
        if actual != size:
            raise MetadataError(
                f"{path}: {actual} bytes, metadata.json says {size} (changed file?)"
            )
        if frames != records:
            raise CorruptRecordError(
                f"{path}: its frame headers give {frames} records, metadata.json says "
                f"{records} (a frame length that is not the one written)"
            )


def _not_regular(path: bytes) -> bytes:
    """Why `path` must not be opened now ("" when it may): it is not a regular file."""
    try:
        with open_regular(path.decode()):
            return b""
    except NotAFileError as error:
        return f"{error}: a shard must be the file segprep wrote".encode()
    except OSError:
        return b""  # a missing shard is tf.data's NotFoundError, as at build time


def _still_regular(path: tf.Tensor, *segment: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """The segment, once its shard is checked again: tf.data opens each shard anew on every
    pass, with a blocking open, so a shard turned into a FIFO after make_dataset's check
    (between epochs, or before the first batch) would block the pipeline for ever. The
    check opens without blocking; one shard replaced between it and tf.data's open can
    still block (milliseconds apart)."""
    why = tf.numpy_function(_not_regular, [path], tf.string, stateful=True)
    check = tf.debugging.Assert(tf.equal(why, ""), [why])
    with tf.control_dependencies([check]):
        return (tf.identity(path), *segment)


def _sealer(directory: cache_dir.CacheDirectory, spec) -> tf.data.Dataset:
    """No elements: reached once the cache before it has been read to its end, when tf.data
    has finished the cache files; it then writes their manifest (cache_dir.seal)."""

    def seal() -> bool:
        cache_dir.seal(directory)
        return True

    def nothing(sealed):
        return tuple(tf.zeros([d or 0 for d in s.shape], s.dtype) for s in spec)

    done = tf.data.Dataset.range(1).map(lambda _: tf.py_function(seal, [], tf.bool))
    return done.filter(tf.logical_not).map(nothing)


def _records(
    info: SplitInfo,
    pipeline: tuple[int, int],
    training: bool,
    seed: int | None,
    deterministic: bool,
) -> tf.data.Dataset:
    """(serialized record, its shard's path) of this pipeline's segments, shards read in
    parallel."""
    segments = sharding.plan_segments(info.shard_sizes, *pipeline)
    table = tf.data.Dataset.from_tensor_slices(
        (
            [info.files[segment.shard] for segment in segments],
            tf.constant([segment.skip for segment in segments], tf.int64),
            # -1 reads to the end of the shard, so a shard longer than metadata says fails.
            tf.constant([-1 if s.to_end else s.take for s in segments], tf.int64),
            tf.constant([segment.take for segment in segments], tf.int64),
        )
    )
    if training:
        table = table.shuffle(len(segments), seed=seed, reshuffle_each_iteration=True)
    if not any(files.is_remote(path) for path in info.files):
        table = table.map(_still_regular)

    def read(path: tf.Tensor, skip: tf.Tensor, take: tf.Tensor, expected: tf.Tensor):
        # CRC of every record is checked by the reader: a corrupt shard raises DataLossError.
        records = tf.data.TFRecordDataset(path).skip(skip).take(take)
        records = records.apply(tf.data.experimental.assert_cardinality(expected))
        # Each record goes with its shard's path, which the decoder's refusals name.
        return records.map(lambda record: (record, path))

    return table.interleave(
        read,
        cycle_length=min(len(segments), MAX_OPEN_SHARDS),
        num_parallel_calls=AUTOTUNE,
        deterministic=deterministic,
    )


def _batch(
    examples: tf.data.Dataset,
    decode: Callable[[tf.Tensor], tuple[tf.Tensor, ...]] | None,
    batch_size: int,
    drop_remainder: bool,
    augment: Augment | None,
    dtype: tf.DType,
    deterministic: bool,
    class_ids: bool,
) -> tf.data.Dataset:
    """Serialized records (with `decode`) or decoded examples -> batches in `dtype`."""

    def per_example(*element):
        if decode is not None:
            element = decode(*element)
        if augment is None:
            return element
        image, mask, *key = element
        return (*augment(*convert(image, mask, dtype, class_ids)), *key)

    def finish(image, mask, *key):
        return (*convert(image, mask, dtype, class_ids), *key)

    if decode is not None or augment is not None:
        examples = examples.map(per_example, AUTOTUNE, deterministic=deterministic)
    dataset = examples.batch(batch_size, drop_remainder=drop_remainder)
    if augment is not None or dtype == tf.uint8:
        return dataset
    return dataset.map(finish, AUTOTUNE, deterministic=deterministic)
