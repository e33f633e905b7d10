"""`prepare --append` on a gs:// output, against a real GCS server: digest lookups by ranged
reads, earlier objects never rewritten (same generation, same bytes)."""

from __future__ import annotations

import json

from beam_pipeline.commands.sample_data import write_sample_data
from beam_pipeline.launch import launcher
from tests.helpers.gcs_server import gcs  # noqa: F401 - the fixture
from tests.helpers.runs import RUNNER_ARGS
from transforms.format.naming import METADATA_FILE

FIRST = 20


def _prepare(gcs, source: str, *extra: str):  # noqa: F811
    return launcher.run(
        [
            "--image_dir",
            gcs.url(f"{source}/images"),
            "--mask_dir",
            gcs.url(f"{source}/masks"),
            "--output_dir",
            gcs.url("grown"),
            "--num_shards",
            "2",
            *extra,
            *RUNNER_ARGS,
        ]
    )


def _objects(gcs) -> dict[str, tuple[int, str]]:  # noqa: F811
    """Every published object: (generation, md5)."""
    return {
        blob.name: (blob.generation, blob.md5_hash)
        for blob in gcs.client().list_blobs(gcs.bucket, prefix="grown/")
        if "/.segprep/" not in blob.name
    }


def test_append_to_a_bucket_adds_objects_and_rewrites_none(gcs, tmp_path):  # noqa: F811
    root = tmp_path / "raw"
    write_sample_data(root, count=30, seed=4, broken_fraction=0.0, height=40, width=32)
    assert gcs.upload_tree(root, "all")
    first = tmp_path / "first"
    for folder in ("images", "masks"):
        (first / folder).mkdir(parents=True)
        for path in sorted((root / folder).iterdir())[:FIRST]:
            (first / folder / path.name).write_bytes(path.read_bytes())
    assert gcs.upload_tree(first, "first")
    _prepare(gcs, "first")
    before = _objects(gcs)
    _prepare(gcs, "all", "--append")
    after = _objects(gcs)
    replaced = {f"grown/{name}" for name in (METADATA_FILE, "rejects.jsonl")}
    replaced |= {"grown/dataset_info.json", "grown/features.json"}
    for name, value in before.items():
        if name not in replaced:
            assert after[name] == value, name
    metadata = json.loads(gcs.read(f"grown/{METADATA_FILE}"))
    latest = metadata["dataset_versions"][-1]
    assert latest["version"] == 2 and latest["skipped_identical"] == FIRST
    assert sum(latest["added"].values()) == 30 - FIRST
    assert sum(split["num_examples"] for split in metadata["splits"].values()) == 30
