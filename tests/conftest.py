"""Shared fixtures: a small sample dataset and one prepared output, built once per session."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import pytest  # noqa: E402

from tests.helpers.runs import job_args  # noqa: E402


@pytest.fixture(scope="session")
def sample_dataset(tmp_path_factory):
    """60 entries at 160x120, one of each breakage kind (10% broken)."""
    from beam_pipeline.commands.sample_data import write_sample_data

    root = tmp_path_factory.mktemp("sample")
    return write_sample_data(root, count=60, seed=7, broken_fraction=0.1, height=160, width=120)


@pytest.fixture(scope="session")
def prepared(sample_dataset, tmp_path_factory):
    """(output_dir, PrepareResult) of one job run over `sample_dataset`, 3 shards."""
    from beam_pipeline.launch import launcher

    output_dir = tmp_path_factory.mktemp("prepared") / "out"
    result = launcher.run(job_args(sample_dataset, output_dir, "--num_shards", "3"))
    return output_dir, result


@pytest.fixture(scope="session")
def unindexed(prepared, tmp_path_factory):
    """A copy of the `prepared` output as segprep wrote it before the record index and the
    manifest existed: no index/, no TFDS files, no .segprep/, metadata without their refs
    (nor versions, which came later still)."""
    import json
    import shutil

    copy = tmp_path_factory.mktemp("unindexed") / "out"
    shutil.copytree(prepared[0], copy)
    for name in (".segprep", "index"):
        shutil.rmtree(copy / name)
    for name in ("dataset_info.json", "features.json"):
        (copy / name).unlink()
    metadata = json.loads((copy / "metadata.json").read_text())
    metadata.pop("tfds_files")
    metadata.pop("dataset_versions")
    for split in metadata["splits"].values():
        split.pop("key_table")
        for shard in split["shards"]:
            shard.pop("index")
    (copy / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    return copy


@pytest.fixture(scope="session")
def indexed(unindexed, tmp_path_factory):
    """A copy of the `unindexed` output with its record index and TFDS files (segprep index)."""
    import shutil

    from beam_pipeline.commands.index import index_output

    copy = tmp_path_factory.mktemp("indexed") / "out"
    shutil.copytree(unindexed, copy)
    index_output(str(copy))
    return copy


@pytest.fixture(scope="session")
def class_outputs(tmp_path_factory):
    """The 8-bit and 16-bit class-id outputs of tests/helpers/class_reader_outputs.py, built once:
    tests read them or copy them, never change them."""
    from tests.helpers.class_reader_outputs import big_output, sample_output

    root = tmp_path_factory.mktemp("class_outputs")
    return {"8-bit": sample_output(root), "16-bit": big_output(root)}
