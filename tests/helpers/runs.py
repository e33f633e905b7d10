"""How the tests run a job: the named local runner and `prepare` flags for a sample dataset."""

from __future__ import annotations

# Named explicitly: Beam 2.77's DirectRunner first tries to download the Prism runner.
RUNNER_ARGS = ["--runner", "FnApiRunner"]


def job_args(dataset, output_dir, *extra: str) -> list[str]:
    """`prepare` flags for a sample dataset, on the named runner."""
    return [
        "--image_dir",
        str(dataset.image_dir),
        "--mask_dir",
        str(dataset.mask_dir),
        "--output_dir",
        str(output_dir),
        *extra,
        *RUNNER_ARGS,
    ]


def expected_rejects(dataset) -> dict:
    """key -> Reason of each entry a sample dataset (write_sample_data) broke on purpose."""
    return {key: dataset.breakages[kind] for key, kind in dataset.broken.items()}
