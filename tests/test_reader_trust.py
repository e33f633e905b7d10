"""Readers check what they trust: a tampered metadata.json, key table, cache directory or a
FIFO in a shard's place gives a one-line error through the real readers, never wrong
records, a RecursionError, a huge allocation or a hang."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import shard_reader
from shard_reader import dataset as reader_dataset
from shard_reader.source import RecordSource
from tests.helpers.handmade import write_output
from transforms.format.dataset_info import MetadataError
from transforms.format.naming import METADATA_FILE

# A guard against a hang, far above the few seconds each child takes; never a speed check.
HANG_GUARD_SECONDS = 300


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, Path]:
    """Two small indexed outputs whose records differ in size (so in pixels)."""
    root = tmp_path_factory.mktemp("trust")
    write_output(root / "a", [[(40, 32)] * 3, [(40, 32)] * 2])
    write_output(root / "b", [[(32, 40)] * 2, [(32, 40)] * 3])
    return {"a": root / "a", "b": root / "b"}


@pytest.fixture
def copy(outputs, tmp_path) -> Path:
    return Path(shutil.copytree(outputs["a"], tmp_path / "out"))


def edit_metadata(directory: Path, change) -> None:
    metadata = json.loads((directory / METADATA_FILE).read_text())
    change(metadata)
    (directory / METADATA_FILE).write_text(json.dumps(metadata))


def every_reader_refuses(directory: Path, match: str) -> None:
    """RecordSource, torch's loader, Grain's and make_dataset all raise MetadataError."""
    with pytest.raises(MetadataError, match=match):
        RecordSource(directory, "train")
    with pytest.raises(MetadataError, match=match):
        shard_reader.make_dataset(directory, "train", 2)
    with pytest.raises(MetadataError, match=match):
        shard_reader.steps_per_epoch(directory, "train", 2)
    for module in ("shard_reader.torch", "shard_reader.grain"):
        pytest.importorskip(module.split(".")[1])
        loader = importlib.import_module(module)
        with pytest.raises(MetadataError, match=match):
            loader.make_loader(directory, "train", 2)


def test_a_shard_listed_twice_is_refused(copy):
    def twice(metadata):
        split = metadata["splits"]["train"]
        split["shards"].append(split["shards"][0])
        split["num_shards"] += 1
        split["num_examples"] += split["shards"][0]["num_examples"]

    edit_metadata(copy, twice)
    every_reader_refuses(copy, "listed more than once")


def test_deeply_nested_metadata_is_a_metadata_error(copy):
    text = (copy / METADATA_FILE).read_text().rstrip().removesuffix("}")
    # Deeper than json.loads can recurse: without the check, a RecursionError.
    depth = 100_000
    (copy / METADATA_FILE).write_text(text + ', "deep": ' + "[" * depth + "]" * depth + "}")
    every_reader_refuses(copy, "nested deeper than 32 levels")


def test_moderate_nesting_in_extra_fields_is_refused_too(copy):
    """The cap applies anywhere in the file, not only where segprep writes."""
    edit_metadata(copy, lambda m: m.update(run=json.loads("[" * 40 + "]" * 40)))
    every_reader_refuses(copy, "nested deeper than 32 levels")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s: s.update(image_shape=[100_000, 100_000]), "100000x100000 is more than"),
        (lambda s: s.update(image_shape=[1, 10**30]), "is more than"),
        (lambda s: s["shards"][0].update(bytes=1 << 50), "bytes .* more than"),
        (lambda s: s["shards"][0]["index"].update(bytes=10**12), "index of 3 records: bytes"),
        (lambda s: s["key_table"].update(bytes=1 << 40), "key_table: bytes .* more than"),
    ],
)
def test_huge_numbers_are_refused_before_anything_is_sized_by_them(copy, change, match):
    edit_metadata(copy, lambda m: change(m["splits"]["train"]))
    every_reader_refuses(copy, match)


def test_more_records_than_a_shard_can_hold_are_refused(copy):
    def inflate(metadata):
        split = metadata["splits"]["train"]
        shard = split["shards"][0]
        split["num_examples"] += shard["bytes"] - shard["num_examples"]
        shard["num_examples"] = shard["bytes"]  # a frame is at least 16 bytes

    edit_metadata(copy, inflate)
    every_reader_refuses(copy, "cannot fit in")


HUGE_SHAPE_CHILD = """
import resource, sys
import torch  # imported before the cap: its own mappings are not what is measured
import shard_reader.torch
from transforms.format.dataset_info import MetadataError
with open("/proc/self/status") as status:
    size = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize:"))
# 1 GiB above what is mapped now: a 720 GB batch ring could never be allocated.
resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), resource.RLIM_INFINITY))
try:
    shard_reader.torch.make_loader(sys.argv[1], "train", 8, num_workers=2)
except MetadataError as error:
    print("MetadataError:", error)
"""


def test_a_huge_image_shape_is_refused_by_torch_without_allocating(copy):
    pytest.importorskip("torch")
    edit_metadata(copy, lambda m: m["splits"]["train"].update(image_shape=[100_000, 100_000]))
    child = subprocess.run(
        [sys.executable, "-c", HUGE_SHAPE_CHILD, str(copy)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_SECONDS,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.startswith("MetadataError:") and "100000x100000" in child.stdout


def key_table(directory: Path) -> Path:
    return (
        directory
        / json.loads((directory / METADATA_FILE).read_text())["splits"]["train"]["key_table"][
            "file"
        ]
    )


def restamp_key_table(directory: Path) -> None:
    """metadata.json made to agree with the key table's new bytes (a thorough tamperer)."""
    data = key_table(directory).read_bytes()
    edit_metadata(
        directory,
        lambda m: m["splits"]["train"]["key_table"].update(
            bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
        ),
    )


def test_key_lookup_answers_the_record_holding_the_key(copy):
    """The control for the tampering below: every key leads to its own record."""
    source = RecordSource(copy, "train")
    for index in range(len(source)):
        key = source[index]["key"]
        assert source.index_of(key) == index
    with pytest.raises(KeyError):
        source.index_of("nope")


@pytest.mark.parametrize(
    ("restamp", "match"),
    [(False, "sha256 differs"), (True, "not at the split's record")],
)
def test_swapped_key_table_lines_are_refused(copy, restamp, match):
    table = key_table(copy)
    lines = table.read_bytes().splitlines(keepends=True)
    lines[0], lines[3] = lines[3], lines[0]
    table.write_bytes(b"".join(lines))
    if restamp:
        restamp_key_table(copy)
    source = RecordSource(copy, "train")
    key = source[3]["key"]
    with pytest.raises(MetadataError, match=match):
        source.index_of(key)


def test_swapped_keys_with_their_places_kept_are_refused(copy):
    """Lines in order, keys exchanged, sha256 restamped: only reading the record tells."""
    table = key_table(copy)
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    rows[0][0], rows[3][0] = rows[3][0], rows[0][0]
    table.write_text("".join(json.dumps(row) + "\n" for row in rows))
    restamp_key_table(copy)
    source = RecordSource(copy, "train")
    with pytest.raises(MetadataError, match="which holds"):
        source.index_of(rows[0][0])
    assert source.index_of(rows[1][0]) == 1  # an untouched line still answers


def forge_key(directory: Path, key: str) -> Path:
    """Record 0 of the first shard with its key feature changed to `key` (same length), its
    CRCs recomputed: every size, count and offset still matches; the shard's path."""
    from transforms.format import example_schema
    from transforms.format.tfrecord import FRAME_OVERHEAD, frame

    metadata = json.loads((directory / METADATA_FILE).read_text())["splits"]["train"]
    path = directory / metadata["shards"][0]["file"]
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    example = example_schema.Example.FromString(data[12 : 12 + length])
    example.features.feature["key"].bytes_list.value[0] = key.encode()
    forged = example.SerializeToString()
    assert len(forged) == length
    path.write_bytes(frame(forged) + data[length + FRAME_OVERHEAD :])
    return path


@pytest.mark.parametrize("key", ["k009", "k003"])  # a key never stored; another record's
def test_a_record_whose_key_was_changed_is_named_by_verify(copy, key, capsys):
    """A record's key feature changed to another key of the same length, its CRCs
    recomputed: the readers check framing, CRCs and headers, not identity, and serve it
    (docs/bad-input.md says why they do not hold every key); verify names the shard's
    sha256, the key table's line and, for another record's key, the key stored twice."""
    from beam_pipeline.cli import main

    shard = forge_key(copy, key)
    assert RecordSource(copy, "train")[0]["key"] == key
    assert main(["verify", str(copy)]) == 1
    said = capsys.readouterr().out
    assert shard.name in said and "sha256" in said
    assert key in said


def fill_cache(data_dir: Path, root: Path) -> Path:
    """The cache directory a full pass over `data_dir` fills under `root` (16x16 pixels)."""
    dataset = shard_reader.make_dataset(
        data_dir, "train", 2, training=False, cache=str(root), image_size=(16, 16)
    )
    for _ in dataset:
        pass
    (directory,) = root.iterdir()
    assert (directory / "manifest.json").exists()
    return directory


def open_cache(data_dir: Path, root: Path):
    return shard_reader.make_dataset(
        data_dir, "train", 2, training=False, cache=str(root), image_size=(16, 16)
    )


@pytest.mark.parametrize("plant", ["other dataset", "no manifest", "own manifest, other files"])
def test_a_planted_cache_directory_is_refused_not_served(outputs, tmp_path, plant):
    mine = fill_cache(outputs["a"], tmp_path / "mine")
    other = fill_cache(outputs["b"], tmp_path / "other")
    reference = [batch for batch in open_cache(outputs["a"], tmp_path / "mine")]
    own_manifest = (mine / "manifest.json").read_bytes()
    # The other dataset's cache files, planted under the name this dataset's settings give.
    for name in os.listdir(other):
        if name.startswith("examples") or name == "manifest.json":
            shutil.copyfile(other / name, mine / name)
    if plant == "no manifest":
        (mine / "manifest.json").unlink()
    elif plant == "own manifest, other files":
        (mine / "manifest.json").write_bytes(own_manifest)
    # The planted files would yield other pixels: what must never come back.
    assert not all(
        np.array_equal(a[0], b[0])
        for a, b in zip(reference, open_cache(outputs["b"], tmp_path / "other"), strict=True)
    )
    match = {
        "other dataset": "another dataset",
        "no manifest": "no manifest.json",
        "own manifest, other files": "differs from its manifest",
    }[plant]
    with pytest.raises(reader_dataset.CacheMismatchError, match=match):
        open_cache(outputs["a"], tmp_path / "mine")
    assert (mine / "examples.index").exists(), "a refused cache is left as it was"


def test_a_sealed_cache_is_served_by_another_process(outputs, tmp_path):
    """The control: a cache with its manifest is read back, with the shards gone."""
    copy = Path(shutil.copytree(outputs["a"], tmp_path / "out"))
    fill_cache(copy, tmp_path / "cache")
    for shard in copy.glob("train-*"):
        shard.unlink()
    child = textwrap.dedent(
        """
        import sys, shard_reader
        dataset = shard_reader.make_dataset(
            sys.argv[1], "train", 2, training=False, cache=sys.argv[2], image_size=(16, 16))
        print(sum(int(images.shape[0]) for images, _ in dataset))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", child, str(copy), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_SECONDS,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["5"]


FIFO_CHILD = """
import sys
import shard_reader
from shard_reader.source import RecordSource
from transforms.files import NotAFileError
directory, what = sys.argv[1], sys.argv[2]
try:
    if what == "index":
        RecordSource(directory, "train")
    elif what == "shard":
        RecordSource(directory, "train")[0]
    elif what == "key table":
        source = RecordSource(directory, "train")
        source.index_of(source[0]["key"])
    else:
        for _ in shard_reader.make_dataset(directory, "train", 2, training=False):
            pass
except NotAFileError as error:
    print("NotAFileError:", error)
"""


@pytest.mark.parametrize("what", ["index", "shard", "key table", "make_dataset shard"])
def test_a_fifo_in_a_files_place_is_an_error_not_a_hang(copy, what):
    metadata = json.loads((copy / METADATA_FILE).read_text())["splits"]["train"]
    target = {
        "index": copy / metadata["shards"][0]["index"]["file"],
        "shard": copy / metadata["shards"][0]["file"],
        "key table": copy / metadata["key_table"]["file"],
        "make_dataset shard": copy / metadata["shards"][0]["file"],
    }[what]
    target.unlink()
    os.mkfifo(target)
    child = subprocess.run(
        [sys.executable, "-c", FIFO_CHILD, str(copy), what],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_SECONDS,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.startswith("NotAFileError:") and target.name in child.stdout


def test_make_dataset_refuses_a_shard_whose_size_is_not_the_listed_one(copy, outputs):
    """A record swapped for another output's whole, CRC-correct record keeps every count and
    CRC: tf.data read it (one key twice, one lost) where the other readers refuse the size."""
    import tensorflow as tf

    metadata = json.loads((copy / METADATA_FILE).read_text())["splits"]["train"]
    shard = copy / metadata["shards"][0]["file"]
    other = (
        outputs["b"]
        / json.loads((outputs["b"] / METADATA_FILE).read_text())["splits"]["train"]["shards"][0][
            "file"
        ]
    )
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
    stranger = next(iter(tf.data.TFRecordDataset(str(other)))).numpy()
    assert len(stranger) != len(records[-1])
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in [*records[:-1], stranger]:
            writer.write(record)
    with pytest.raises(MetadataError, match="bytes, metadata.json says"):
        shard_reader.make_dataset(copy, "train", 2)


def test_make_dataset_refuses_a_forged_frame_length_before_tf_data_allocates_it(copy):
    """TFRecordDataset allocates a frame's stated length: 2^40 with its CRC recomputed was a
    segfault; the frame headers are walked first (the other readers check the index)."""
    from transforms.format.tfrecord import CorruptRecordError, masked_crc

    metadata = json.loads((copy / METADATA_FILE).read_text())["splits"]["train"]
    with open(copy / metadata["shards"][0]["file"], "r+b") as shard:
        header = (1 << 40).to_bytes(8, "little")
        shard.write(header + masked_crc(header).to_bytes(4, "little"))
    with pytest.raises(CorruptRecordError, match="byte record at byte 0 runs past the end"):
        shard_reader.make_dataset(copy, "train", 2)


@pytest.mark.parametrize("end", ["file", "frame"])
def test_make_dataset_refuses_a_forged_frame_length_ending_at_a_frame_or_the_file(copy, end):
    """The first frame's length forged to end exactly at the file's end (or at the third
    frame's start), its header CRC recomputed: the header walk chained through it, and
    tf.data failed on its data CRC with a DataLossError naming no file."""
    from transforms.format.tfrecord import FRAME_OVERHEAD, CorruptRecordError, masked_crc

    metadata = json.loads((copy / METADATA_FILE).read_text())["splits"]["train"]
    path = copy / metadata["shards"][0]["file"]
    assert metadata["shards"][0]["num_examples"] == 3
    data = path.read_bytes()
    first = int.from_bytes(data[:8], "little") + FRAME_OVERHEAD
    second = int.from_bytes(data[first : first + 8], "little") + FRAME_OVERHEAD
    length = (len(data) if end == "file" else first + second) - FRAME_OVERHEAD
    header = length.to_bytes(8, "little")
    with open(path, "r+b") as shard:
        shard.write(header + masked_crc(header).to_bytes(4, "little"))
    with pytest.raises(CorruptRecordError) as raised:
        shard_reader.make_dataset(copy, "train", 2)
    said = str(raised.value)
    assert path.name in said and "\n" not in said
    assert f"frame headers give {1 if end == 'file' else 2} records, metadata.json says 3" in said


def forged_example(source: RecordSource, height: int, width: int, what: str) -> bytes:
    """Record 0 of `source` with its image's (or mask's) header claiming height x width."""
    from transforms.format import example_schema

    example = example_schema.Example.FromString(source.read_serialized(0))
    stored = example.features.feature[what].bytes_list.value
    data = bytearray(stored[0])
    if data.startswith(b"\x89PNG"):  # IHDR: width, height at 16 and 20
        data[16:24] = width.to_bytes(4, "big") + height.to_bytes(4, "big")
    else:  # SOF0: height, width at 5 and 7 past its marker
        sof = data.index(b"\xff\xc0")
        data[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    stored[0] = bytes(data)
    return example.SerializeToString()


@pytest.mark.parametrize("what", ["image", "mask"])
def test_a_forged_image_header_is_refused_before_decoding(copy, monkeypatch, what):
    """A record whose JPEG (or PNG mask) header claims 7000x7000 made RecordSource, inspect
    and report allocate its pixels (60000x60000: MemoryError); the header is checked first,
    against image_shape, else the pixel limit (inspect's decode_example)."""
    from shard_reader.source import CorruptRecordError, decode_example

    source = RecordSource(copy, "train")
    forged = forged_example(source, 7000, 7000, what)
    monkeypatch.setattr(source, "read_serialized", lambda index: forged)
    with pytest.raises(CorruptRecordError, match=r"7000x7000, expected \(40, 32\)"):
        source[0]
    if what == "image":
        with pytest.raises(CorruptRecordError, match="7000x7000, more than the 40,000,000"):
            decode_example(forged, "png")


def swap_image_and_mask(directory: Path) -> None:
    """Record 0 of the first shard with its image and mask bytes exchanged, its CRCs
    recomputed: the record and shard keep their sizes, so every count and offset matches."""
    from transforms.format import example_schema
    from transforms.format.tfrecord import FRAME_OVERHEAD, frame

    metadata = json.loads((directory / METADATA_FILE).read_text())["splits"]["train"]
    path = directory / metadata["shards"][0]["file"]
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    example = example_schema.Example.FromString(data[12 : 12 + length])
    image = example.features.feature["image"].bytes_list.value
    mask = example.features.feature["mask"].bytes_list.value
    image[0], mask[0] = mask[0], image[0]
    swapped = example.SerializeToString()
    assert len(swapped) == length
    path.write_bytes(frame(swapped) + data[length + FRAME_OVERHEAD :])


@pytest.mark.parametrize("mask_format", ["jpeg", "png"])
def test_an_image_and_mask_exchanged_in_a_record_are_refused(tmp_path, mask_format):
    """Decoders convert what they get to the channels asked for: a record whose image and
    mask were exchanged was served by every reader as a grey "photo" and a thresholded
    photo. Each checks the channel count its header (or the decoded pixels) states."""
    import tensorflow as tf

    from shard_reader.source import CorruptRecordError

    write_output(tmp_path / "out", [[(40, 32)] * 3, [(40, 32)] * 2], mask_format=mask_format)
    swap_image_and_mask(tmp_path / "out")
    stored = "1-channel 8-bit JPEG" if mask_format == "jpeg" else "1-channel 8-bit PNG"
    said = rf"train record 0 \(key k000\): a {stored}, expected a 3-channel 8-bit JPEG"
    with pytest.raises(CorruptRecordError, match=said):
        RecordSource(tmp_path / "out", "train")[0]
    for module in ("shard_reader.torch", "shard_reader.grain"):
        pytest.importorskip(module.split(".")[1])
        loader = importlib.import_module(module)
        options = {"num_workers": 0} if module.endswith("torch") else {}
        with pytest.raises(CorruptRecordError, match=said):
            list(loader.make_loader(tmp_path / "out", "train", 1, shuffle=False, **options))
    shard = json.loads((tmp_path / "out" / METADATA_FILE).read_text())["splits"]["train"]
    shard = shard["shards"][0]["file"]
    for size in (None, 16, (40, 32), 64):
        dataset = shard_reader.make_dataset(
            tmp_path / "out", "train", 1, training=False, image_size=size
        )
        # A PNG where the JPEG belongs failed extract_jpeg_shape's size check when resizing
        # with "Invalid JPEG data or crop window", naming neither record nor shard.
        found = (
            "image is.*a PNG.*expected a 3-channel JPEG"
            if mask_format == "png"
            else ("image has.*1.*channels, expected 3")
        )
        said = rf"record with key.*k000 in shard .*/out/{shard}.*: {found}"
        with pytest.raises(tf.errors.InvalidArgumentError, match=said):
            list(dataset)


def test_a_mask_of_another_form_than_metadata_says_is_refused(copy):
    """The mask's header must state the grey PNG (or JPEG) metadata.json gives."""
    from shard_reader.source import CorruptRecordError, decode_example

    serialized = RecordSource(copy, "train").read_serialized(0)
    with pytest.raises(CorruptRecordError, match="mask: a 1-channel 8-bit PNG, expected a 1-ch"):
        decode_example(serialized, "jpeg", "train record 0")


FIFO_LATER_CHILD = """
import glob, os, sys
import shard_reader
directory, when = sys.argv[1], sys.argv[2]
# Each pass a new iterator, as Keras makes one per epoch: repeat=True prefetches the next
# pass, which can check a shard before this script replaces it (docs/reader.md: the limit).
dataset = shard_reader.make_dataset(directory, "train", 2, training=False)
if when == "between epochs":
    for _ in dataset:
        pass
shard = sorted(glob.glob(os.path.join(directory, "train-*")))[1]
os.unlink(shard)
os.mkfifo(shard)
try:
    for _ in dataset:
        pass
except Exception as error:
    print(type(error).__name__, str(error).replace(os.linesep, " "))
"""


@pytest.mark.parametrize("when", ["between epochs", "before the first batch"])
def test_a_shard_turned_fifo_after_make_dataset_is_an_error_not_a_hang(copy, when):
    """tf.data opens every shard again on each pass, with a blocking open: a shard that
    became a FIFO after make_dataset's check blocked the pipeline for ever."""
    child = subprocess.run(
        [sys.executable, "-c", FIFO_LATER_CHILD, str(copy), when],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_SECONDS,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    said = child.stdout
    assert said.startswith("InvalidArgumentError") and "not a regular file" in said, said
    assert "train-00001-of-00002" in said, said


def test_a_damaged_record_read_by_torch_workers_is_one_line(tmp_path):
    """torch's DataLoader re-raises a worker's exception with the whole worker traceback as
    its message ("Caught CorruptRecordError in DataLoader worker process 0.\\nOriginal
    Traceback ...", 26 lines, the reason last): the default loader (workers) says the
    reason alone, as with num_workers=0."""
    torch_loader = pytest.importorskip("shard_reader.torch")
    from shard_reader.source import CorruptRecordError

    write_output(tmp_path / "out", [[(40, 32)] * 3, [(40, 32)] * 2])
    swap_image_and_mask(tmp_path / "out")
    said = r"^train record 0 \(key k000\): a 1-channel 8-bit PNG, expected a 3-channel"
    loader = torch_loader.make_loader(tmp_path / "out", "train", 1, shuffle=False, num_workers=2)
    with pytest.raises(CorruptRecordError, match=said) as raised:
        list(loader)
    assert "\n" not in str(raised.value)


def test_records_of_another_size_than_image_shape_are_named_by_make_dataset(copy):
    """metadata.json's image_shape edited (HxW exchanged): RecordSource names the record;
    make_dataset said only "Shape of tensor EnsureShape [40,32,3] is not compatible with
    expected shape [32,40,3]", naming neither record nor shard."""
    import tensorflow as tf

    edit_metadata(copy, lambda metadata: metadata["splits"]["train"].update(image_shape=[32, 40]))
    shard = json.loads((copy / METADATA_FILE).read_text())["splits"]["train"]["shards"][0]
    dataset = shard_reader.make_dataset(copy, "train", 1, training=False)
    said = (
        rf"record with key.*k000 in shard .*/{shard['file']}.*image is.*image_shape is \[32, 40\]"
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=said):
        list(dataset)
