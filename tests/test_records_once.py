"""With the duplicate search on, each input file is read once per run: the shard writers
hash each image in its validation decode, and the search's changes rewrite shards from the
run's staged files (job/relocate.py), never from the inputs. Staged files (attempts, record
facts) are never published, whether the run ends well or not."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers.file_opens import watched_opens
from tests.helpers.process_tree import SEGPREP
from tests.helpers.runs import job_args

UNPAIRED = ("missing_image", "missing_mask")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """40 entries, one of each breakage kind among them."""
    from beam_pipeline.commands.sample_data import write_sample_data

    root = tmp_path_factory.mktemp("once")
    return write_sample_data(root, count=40, seed=5, broken_fraction=0.15, height=96, width=72)


def _prepare(dataset, output_dir, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SEGPREP, "prepare", *job_args(dataset, output_dir, *extra)],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _paired(metadata: dict) -> int:
    by_reason = metadata["num_rejected"]["by_reason"]
    return metadata["num_discovered"] - sum(by_reason.get(reason, 0) for reason in UNPAIRED)


def _files_under(folder) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def test_each_input_file_is_opened_once_with_duplicates_on(dataset, tmp_path):
    output_dir = tmp_path / "out"
    with watched_opens(dataset.image_dir) as images, watched_opens(dataset.mask_dir) as masks:
        done = _prepare(dataset, output_dir)
        opened = images.collect() + masks.collect()
    assert done.returncode == 0, done.stderr
    metadata = json.loads((output_dir / "metadata.json").read_text())
    assert metadata["duplicates"]["mode"] == "group"
    assert opened, "no open was seen: the watch saw nothing"
    assert {name for name, count in opened.items() if count > 1} == set()
    # Every paired entry's image was opened (the search and the shards both had it).
    assert sum(name.startswith(tuple("0123456789")) for name in opened) >= _paired(metadata)


@pytest.mark.parametrize(
    "extra",
    [[], ["--writer_processes", "1"], ["--duplicates", "off"]],
    ids=["group-pool", "group-in-runner", "off"],
)
def test_the_job_reads_each_pair_once_by_its_own_count(dataset, tmp_path, extra):
    from beam_pipeline.launch import launcher

    result = launcher.run(job_args(dataset, tmp_path / "out", *extra))
    assert result.counters["images_read"] == _paired(result.metadata)


def test_a_run_leaves_no_staged_file_and_publishes_only_its_files(dataset, tmp_path):
    output_dir = tmp_path / "out"
    done = _prepare(dataset, output_dir)
    assert done.returncode == 0, done.stderr
    files = _files_under(output_dir)
    assert not [name for name in files if name.endswith(".facts.jsonl") or ".attempt-" in name]
    assert not [name for name in files if name.startswith(".segprep/runs/")]


def test_a_failed_run_publishes_nothing_and_leaves_no_staged_file(dataset, tmp_path):
    output_dir = tmp_path / "out"
    done = _prepare(dataset, output_dir, "--max_reject_fraction", "0")
    assert done.returncode != 0
    assert "nothing was published" in done.stderr
    files = _files_under(output_dir)
    assert "metadata.json" not in files
    assert not [name for name in files if name.endswith((".facts.jsonl", ".tfrecord"))]
