"""`prepare --record_format array_record`: ArrayRecord shards, read by every reader that can.

One array_record output of the session's sample data, written through the console script,
is compared with the session's TFRecord output of the same inputs (`prepared`, 3 shards).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess

import numpy as np
import pytest

from beam_pipeline import cli
from shard_reader.source import RecordSource
from tests.helpers.process_tree import SEGPREP
from tests.helpers.runs import job_args
from transforms.format import dataset_info, record_formats
from transforms.format.dataset_info import DatasetInfo, MetadataError
from transforms.format.naming import INDEX_DIR, METADATA_FILE, TFDS_DATASET_INFO
from transforms.format.record_formats import CorruptRecordError


@pytest.fixture(scope="module")
def array_output(sample_dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("array_record") / "out"
    args = job_args(sample_dataset, out, "--num_shards", "3", "--record_format", "array_record")
    done = subprocess.run([*SEGPREP, "prepare", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def by_key(source: RecordSource) -> dict[str, dict]:
    return {item["key"]: item for item in (source[i] for i in range(len(source)))}


def test_shards_are_array_record_files_with_key_tables_and_no_offset_index(array_output, prepared):
    info = dataset_info.load(array_output)
    reference = dataset_info.load(prepared[0])
    assert info.record_format == "array_record" and reference.record_format == "tfrecord"
    names = [shard.file for split in info.splits.values() for shard in split.shards]
    assert names == [
        shard.file.replace(".tfrecord", ".array_record")
        for split in reference.splits.values()
        for shard in split.shards
    ]
    assert "train-00000-of-00002.array_record" in names
    assert all((array_output / name).is_file() for name in names)
    # ArrayRecord reads by record number itself: the key tables stay, the .idx files go.
    assert sorted(p.name for p in (array_output / INDEX_DIR).iterdir()) == [
        "train.keys.jsonl",
        "validation.keys.jsonl",
    ]
    assert info.has_index
    assert json.loads((array_output / METADATA_FILE).read_text())["record_format"] == "array_record"


def test_verify_passes_and_finds_a_damaged_chunk(array_output, tmp_path, capsys):
    assert cli.main(["verify", str(array_output)]) == 0
    assert capsys.readouterr().out.startswith("OK ")

    copy = tmp_path / "out"
    shutil.copytree(array_output, copy)
    shard = copy / "train-00000-of-00002.array_record"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside a record's chunk
    shard.write_bytes(bytes(data))
    assert cli.main(["verify", str(copy)]) == 1
    out = capsys.readouterr().out
    assert "train-00000-of-00002.array_record: sha256" in out
    assert "fails the array_record check" in out


def test_record_source_gives_the_tfrecord_outputs_records(array_output, prepared):
    for split in ("train", "validation"):
        ours, theirs = RecordSource(array_output, split), RecordSource(prepared[0], split)
        assert len(ours) == len(theirs)
        assert [ours[i]["key"] for i in range(len(ours))] == [
            theirs[i]["key"] for i in range(len(theirs))
        ]
        mine, reference = by_key(ours), by_key(theirs)
        for key, item in mine.items():
            assert np.array_equal(item["image"], reference[key]["image"]), key
            assert np.array_equal(item["mask"], reference[key]["mask"]), key
        key = ours[len(ours) - 1]["key"]
        assert ours.index_of(key) == len(ours) - 1
        assert ours.read_serialized(0) == theirs.read_serialized(0)  # the same Example bytes


def test_record_source_refuses_a_shard_that_changed(array_output, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(array_output, copy)
    with open(copy / "validation-00000-of-00001.array_record", "ab") as handle:
        handle.write(b"\0")
    source = RecordSource(copy, "validation")
    with pytest.raises(OSError, match="metadata.json says"):
        source[0]


def test_torch_loader_reads_every_record_once(array_output):
    pytest.importorskip("torch")
    from shard_reader.torch import make_loader

    expected = sorted(by_key(RecordSource(array_output, "train")))
    loader = make_loader(array_output, "train", 4, num_workers=1, with_keys=True)
    keys = []
    for images, masks, batch_keys in loader:
        assert images.shape[1:] == (3, 160, 120) and masks.shape[1:] == (1, 160, 120)
        keys.extend(batch_keys)
    assert sorted(keys) == expected


def test_grain_loader_reads_every_record_once(array_output):
    pytest.importorskip("grain")
    from shard_reader.grain import make_loader

    source = RecordSource(array_output, "train")
    reference = by_key(source)
    keys = []
    for batch in make_loader(array_output, "train", 4, seed=1):
        for row, key in enumerate(batch["key"].tolist()):
            assert np.array_equal(batch["image"][row], reference[key]["image"])
            keys.append(key)
    assert sorted(keys) == sorted(reference)


def test_tfds_reads_the_shards_as_a_data_source(array_output):
    tfds = pytest.importorskip("tensorflow_datasets")
    info = json.loads((array_output / TFDS_DATASET_INFO).read_text())
    assert info["fileFormat"] == "array_record"
    builder = tfds.builder_from_directory(str(array_output))
    source = builder.as_data_source(split="validation")
    reference = RecordSource(array_output, "validation")
    assert len(source) == len(reference)
    assert [source[i]["key"].decode() for i in range(len(source))] == [
        reference[i]["key"] for i in range(len(reference))
    ]
    for i in range(len(source)):
        # TFDS's data sources decode JPEG with Pillow, not TensorFlow's fast DCT: the same
        # picture to a few levels, and masks that threshold the same.
        difference = np.abs(source[i]["image"].astype(int) - reference[i]["image"])
        assert difference.max() <= 16 and difference.mean() < 2
        assert np.array_equal(source[i]["mask"] >= 128, reference[i]["mask"].astype(bool))


def test_make_dataset_refuses_in_one_line_naming_the_readers_that_can(array_output):
    from shard_reader import make_dataset

    with pytest.raises(ValueError) as raised:
        make_dataset(array_output, "train", 2)
    message = str(raised.value)
    assert len(message.splitlines()) == 1 and "array_record" in message
    for reader in ("RecordSource", "torch", "grain", "TFDS"):
        assert reader in message


def test_index_rebuilds_the_key_tables_alone(array_output, tmp_path, capsys):
    copy = tmp_path / "out"
    shutil.copytree(array_output, copy)
    before = (copy / INDEX_DIR / "train.keys.jsonl").read_bytes()
    assert cli.main(["index", str(copy)]) == 0
    assert (copy / INDEX_DIR / "train.keys.jsonl").read_bytes() == before
    assert not list((copy / INDEX_DIR).glob("*.idx"))
    assert dataset_info.load(copy).record_format == "array_record"
    capsys.readouterr()
    assert cli.main(["verify", str(copy)]) == 0


def test_inspect_draws_the_array_record_output_as_the_tfrecord_one(
    array_output, prepared, tmp_path
):
    from beam_pipeline.commands.inspect_sheet import shard_entries

    ours = shard_entries(
        str(array_output), dataset_info.read_metadata_json(array_output), "train", 3
    )
    theirs = shard_entries(
        str(prepared[0]), dataset_info.read_metadata_json(prepared[0]), "train", 3
    )
    assert ours[1] == theirs[1] and len(ours[0]) == 3
    for mine, reference in zip(ours[0], theirs[0], strict=True):
        assert mine.caption == reference.caption
        assert np.array_equal(mine.image, reference.image)
    assert cli.main(["inspect", str(array_output), "--out", str(tmp_path / "s.png")]) == 0
    assert (tmp_path / "s.png").stat().st_size > 0


def test_metadata_without_record_format_is_tfrecord(prepared):
    data = json.loads((prepared[0] / METADATA_FILE).read_text())
    data.pop("record_format")
    assert DatasetInfo.from_json(data).record_format == "tfrecord"
    data["record_format"] = "parquet"
    with pytest.raises(MetadataError, match="record_format 'parquet'"):
        DatasetInfo.from_json(data)


def test_an_array_record_shard_listing_an_offset_index_is_refused(array_output, prepared):
    data = json.loads((array_output / METADATA_FILE).read_text())
    shard = data["splits"]["train"]["shards"][0]
    shard["index"] = {"file": f"index/{shard['file']}.idx", "bytes": 0, "sha256": ""}
    with pytest.raises(MetadataError, match="offset index"):
        DatasetInfo.from_json(data)
    tfrecord = json.loads((prepared[0] / METADATA_FILE).read_text())
    tfrecord["record_format"] = "array_record"  # .tfrecord names under the wrong format
    with pytest.raises(
        MetadataError, match="not a shard name of split 'train' in record format array_record"
    ):
        DatasetInfo.from_json(tfrecord)


def test_an_unknown_record_format_is_one_line_and_exit_2(sample_dataset, tmp_path):
    args = job_args(sample_dataset, tmp_path / "out", "--record_format", "parquet")
    done = subprocess.run([*SEGPREP, "prepare", *args], capture_output=True, text=True)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--record_format: invalid choice: 'parquet'" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_shard_read_from_a_stream_is_read_as_from_its_file(array_output):
    """verify and index read remote shards through file objects: the adapter copies a stream
    without a local file to a temporary one, and refuses one cut short."""
    adapter = record_formats.get("array_record")
    name = "validation-00000-of-00001.array_record"
    data = (array_output / name).read_bytes()
    with open(array_output / name, "rb") as handle:
        from_file = list(adapter.read_records(handle, name, len(data)))
    assert list(adapter.read_records(io.BytesIO(data), name, len(data))) == from_file
    assert len(from_file) == dataset_info.load(array_output).split("validation").num_examples
    with pytest.raises(CorruptRecordError):
        list(adapter.read_records(io.BytesIO(data[: len(data) // 2]), name, len(data) // 2))


def test_overwriting_a_tfrecord_output_with_array_record_leaves_no_tfrecord_file(
    prepared, sample_dataset, tmp_path, capsys
):
    from beam_pipeline.launch import launcher

    copy = tmp_path / "out"
    shutil.copytree(prepared[0], copy)
    args = ["--num_shards", "3", "--record_format", "array_record", "--overwrite"]
    launcher.run(job_args(sample_dataset, copy, *args))
    names = {path.name for path in copy.rglob("*")}
    assert not [name for name in names if name.endswith((".tfrecord", ".idx"))], names
    assert len([name for name in names if name.endswith(".array_record")]) == 3
    assert cli.main(["verify", str(copy)]) == 0
