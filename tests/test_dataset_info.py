"""transforms.format.dataset_info: the one metadata.json loader, its checks and its version rule."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

import shard_reader
from tests.helpers.gcs_server import gcs  # noqa: F401 - the fixture
from transforms.format import dataset_info
from transforms.format.dataset_info import (
    FORMAT_VERSION,
    DatasetInfo,
    IncompleteOutputError,
    MetadataError,
    VersionInfo,
)
from transforms.format.naming import METADATA_FILE
from transforms.limits import KEY_ROW_BYTES


@pytest.fixture(scope="module")
def raw(indexed) -> dict:
    return json.loads((indexed / METADATA_FILE).read_text())


def test_round_trip_keeps_every_field(raw, unindexed):
    assert DatasetInfo.from_json(raw).to_json() == raw
    old = json.loads((unindexed / METADATA_FILE).read_text())
    info = DatasetInfo.from_json(old)
    assert info.to_json() == old and not info.has_index


def test_appended_hashes_are_typed_and_written_back_only_when_there_are_some(raw):
    data = copy.deepcopy(raw)
    refs = [
        {"file": f"index/train.v{n}.hashes.jsonl", "bytes": n, "sha256": str(n)} for n in (2, 4)
    ]
    data["splits"]["train"]["appended_hashes"] = refs
    info = DatasetInfo.from_json(data)
    assert [ref.to_json() for ref in info.split("train").appended_hashes] == refs
    assert "appended_hashes" not in info.split("train").extra
    assert info.to_json() == data
    assert {ref["file"] for ref in refs} <= info.listed_files()
    assert "appended_hashes" not in DatasetInfo.from_json(raw).to_json()["splits"]["train"]


def test_typed_view(raw):
    info = DatasetInfo.from_json(raw)
    train = info.split("train")
    assert train.num_examples == sum(shard.num_examples for shard in train.shards) > 0
    assert train.num_shards == 2 and train.image_shape == (160, 120)
    assert train.key_table.file == "index/train.keys.jsonl"
    assert train.shards[0].index.file == f"index/{train.shards[0].file}.idx"
    assert info.num_discovered == 60 and info.num_rejected.total == sum(
        info.num_rejected.by_reason.values()
    )
    assert info.run.run_id and info.parameters["output_dir"] and "num_discovered" not in info.extra
    with pytest.raises(ValueError, match="unknown split 'test'"):
        info.split("test")


def _damaged(raw: dict, change) -> dict:
    data = copy.deepcopy(raw)
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format_version=FORMAT_VERSION + 1), "newer segprep"),
        (lambda d: d.pop("format_version"), "not a version number"),
        (lambda d: d.update(format_version="1"), "not a version number"),
        (lambda d: d.update(mask_format="gif"), "mask_format"),
        (lambda d: d.pop("splits"), "splits"),
        (lambda d: d["splits"]["train"]["shards"][0].update(file="../etc/passwd"), "shard name"),
        (
            lambda d: d["splits"]["train"]["shards"][0].update(
                file="validation-00000-of-00001.tfrecord"
            ),
            "shard name of split 'train'",
        ),
        (lambda d: d["splits"]["train"]["shards"][0].update(num_examples=-1), "not a count"),
        (lambda d: d["splits"]["train"]["shards"][0].update(num_examples=True), "not a count"),
        (lambda d: d["splits"]["train"].update(num_examples=1), "do not add up"),
        (lambda d: d["splits"]["train"].update(num_shards=7), "num_shards"),
        (lambda d: d["splits"]["train"].update(image_shape=[0, 5]), "image_shape"),
        (
            lambda d: d["splits"]["train"]["shards"][0]["index"].update(file="../../x.idx"),
            "expected 'index/train-00000-of-00002.tfrecord.idx'",
        ),
        (
            lambda d: d["splits"]["train"]["key_table"].update(file="/etc/passwd"),
            "expected 'index/train.keys.jsonl'",
        ),
        (
            # restamped: far under the absolute cap, far over what the split's records need
            lambda d: d["splits"]["train"]["key_table"].update(bytes=600 * 2**20),
            r"key table index/train.keys.jsonl \(\d+ records, .*is more than the",
        ),
        (lambda d: d.update(tfds_files=[{"file": "x.json", "bytes": 1, "sha256": "0"}]), "x.json"),
        (lambda d: d.update(tfds_files=7), "tfds_files is not a list"),
        (lambda d: d.update(tfds_files="dataset_info.json"), "tfds_files is not a list"),
        (lambda d: d["splits"].update({"Train!": d["splits"]["train"]}), "split name"),
        (lambda d: d["splits"]["train"]["shards"].append(7), "not an object"),
        (lambda d: d["splits"]["train"].update(appended_hashes={}), "not a list"),
        *(
            (
                lambda d, names=names: d["splits"]["train"].update(
                    appended_hashes=[{"file": n, "bytes": 0, "sha256": "0"} for n in names]
                ),
                "increasing versions",
            )
            for names in (
                ["index/train.hashes.jsonl"],  # version 1's is `hashes`
                ["index/validation.v2.hashes.jsonl"],  # another split's
                ["index/train.v3.hashes.jsonl", "index/train.v2.hashes.jsonl"],
                ["index/train.v2.hashes.jsonl", "index/train.v2.hashes.jsonl"],
                ["../train.v2.hashes.jsonl"],
            )
        ),
    ],
)
def test_bad_metadata_is_refused_with_a_reason(raw, change, message):
    with pytest.raises(MetadataError, match=message):
        DatasetInfo.from_json(_damaged(raw, change))


@pytest.mark.parametrize("version", [True, 1.0, "1"])
def test_a_version_number_is_an_integer(version):
    with pytest.raises(MetadataError, match=f"version {version!r}, expected 1"):
        VersionInfo.from_json({"version": version}, 1)


def test_not_an_object():
    with pytest.raises(MetadataError, match="not a JSON object"):
        DatasetInfo.from_json([1, 2])


def test_missing_path_says_it_does_not_exist(tmp_path):
    with pytest.raises(IncompleteOutputError, match="nope does not exist"):
        dataset_info.load(tmp_path / "nope")
    with pytest.raises(IncompleteOutputError, match="nope does not exist"):
        shard_reader.make_dataset(str(tmp_path / "nope"), "train", 2)
    with pytest.raises(IncompleteOutputError, match="no segprep run ever wrote into"):
        shard_reader.load_split(tmp_path, "train")  # an input folder, say
    (tmp_path / ".segprep").mkdir()  # a run began here
    with pytest.raises(IncompleteOutputError, match="failed or is still running"):
        shard_reader.load_split(tmp_path, "train")
    (tmp_path / "file").write_text("x")
    with pytest.raises(IncompleteOutputError, match="is not a directory"):
        shard_reader.load_split(tmp_path / "file", "train")


def test_invalid_json_is_a_metadata_error(tmp_path):
    (tmp_path / METADATA_FILE).write_text("{not json")
    with pytest.raises(MetadataError, match="not valid JSON"):
        shard_reader.load_metadata(tmp_path)


def test_reader_view_is_unchanged(indexed):
    info = shard_reader.load_split(indexed, "train")
    assert isinstance(info, shard_reader.SplitInfo)
    assert info.files[0] == f"{indexed}/train-00000-of-00002.tfrecord"
    assert sum(info.shard_sizes) == info.num_examples and len(info.files) == 2
    assert info.mask_format == "jpeg" and info.image_shape == (160, 120)


def test_metadata_needs_no_tensorflow_local_or_on_gcs(indexed, gcs):  # noqa: F811
    """Local and gs:// metadata both load with TensorFlow unimportable (gs:// against the
    emulator, which the subprocess finds through the inherited STORAGE_EMULATOR_HOST)."""
    gcs.upload_tree(indexed, "indexed")
    code = (
        "import sys\n"
        "sys.modules['tensorflow'] = None  # any import of it now fails\n"
        "from transforms.format import dataset_info\n"
        f"local = dataset_info.load({str(indexed)!r})\n"
        f"remote = dataset_info.load({gcs.url('indexed')!r})\n"
        "assert local.has_index and remote.to_json() == local.to_json()\n"
        "try:\n"
        f"    dataset_info.load({gcs.url('nothing-here')!r})\n"
        "except dataset_info.IncompleteOutputError as error:\n"
        "    assert 'does not exist' in str(error), error\n"
        "else:\n"
        "    raise AssertionError('a missing gs:// metadata.json loaded')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_key_tables_are_bounded_by_their_records_together(raw):
    """The split's records bound its key tables (one line each) before a reader reads one;
    the bound is that of the longest line a key can make, so no table segprep wrote is
    refused by it."""
    split = raw["splits"]["train"]
    cap = split["num_examples"] * KEY_ROW_BYTES
    assert split["key_table"]["bytes"] <= cap // 1000  # real keys are far shorter
    DatasetInfo.from_json(
        _damaged(raw, lambda d: d["splits"]["train"]["key_table"].update(bytes=cap))
    )
    with pytest.raises(MetadataError, match=f"bytes {cap + 1:,} is more than the {cap:,} allowed"):
        DatasetInfo.from_json(
            _damaged(raw, lambda d: d["splits"]["train"]["key_table"].update(bytes=cap + 1))
        )
