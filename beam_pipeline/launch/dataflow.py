"""Which runner a job names, and the checks that refuse a Dataflow job that would fail on the
workers, before anything is staged. Nothing here imports Beam or contacts a Google service:
the run plan calls these before Beam is loaded.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from beam_pipeline.errors import UsageError
from transforms.pairing import Layout

DATAFLOW_RUNNERS = frozenset({"dataflow", "dataflowrunner", "testdataflowrunner"})
# gs://BUCKET[/OBJECT]: bucket names are 3-63 lower-case letters, digits, '-', '_' or '.',
# starting and ending with a letter or digit.
_GCS_PATH = re.compile(r"^gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/.*)?$")


def runner_name(runner: Any) -> str:
    """The runner's class name, however it was given (name, dotted path, class or instance)."""
    if runner is None:
        return ""
    if isinstance(runner, str):
        return runner.rsplit(".", 1)[-1]
    return runner.__name__ if isinstance(runner, type) else type(runner).__name__


def is_dataflow(name: str) -> bool:
    """Beam accepts 'dataflow', 'DataflowRunner' and the test variant for the same service."""
    return name.lower() in DATAFLOW_RUNNERS


def _gcs_problem(flag: str, path: str | None, *, required: bool = True) -> str | None:
    if path is None:
        return f"{flag} gs://BUCKET/FOLDER is missing" if required else None
    if _GCS_PATH.match(path):
        return None
    if path.startswith("gs://"):
        return f"{flag} {path} has an invalid bucket name (3-63 of a-z 0-9 - _ ., no upper case)"
    if "://" in path:
        return f"{flag} {path} is not on Cloud Storage (use gs://BUCKET/FOLDER)"
    return f"{flag} {path} is a local path (use gs://BUCKET/FOLDER)"


def check_dataflow(layout: Layout, output_dir: str, beam: argparse.Namespace) -> None:
    """Refuse a Dataflow job that would fail on the workers, before anything is staged,
    listing every problem at once.

    Every data path must be on Cloud Storage, the job needs a project, a region and a
    temp_location, and the workers need segprep itself: a custom SDK container
    (--sdk_container_image, see deploy/) or a package built from --setup_file.
    """
    if layout.one_folder:
        folders = [("--data_dir", layout.image_dir)]
    elif layout.mask_dir is None:  # a COCO file is read by the launcher: it may be local
        folders = [("--image_dir", layout.image_dir)]
    else:
        folders = [("--image_dir", layout.image_dir), ("--mask_dir", layout.mask_dir)]
    problems = [_gcs_problem(flag, path) for flag, path in (*folders, ("--output_dir", output_dir))]
    problems += [
        f"{flag} is missing" for flag in ("--project", "--region") if not getattr(beam, flag[2:])
    ]
    problems.append(_gcs_problem("--temp_location", beam.temp_location))
    problems.append(_gcs_problem("--staging_location", beam.staging_location, required=False))
    image = beam.sdk_container_image or beam.worker_harness_container_image
    if beam.setup_file and not os.path.isfile(beam.setup_file):
        problems.append(f"--setup_file {beam.setup_file} does not exist")
    elif not (image or beam.setup_file or beam.extra_packages):
        problems.append(
            "the workers need segprep installed: --sdk_container_image IMAGE (built by "
            "deploy/build_image.sh, recommended) or --setup_file ./setup.py"
        )
    problems = [problem for problem in problems if problem]
    if problems:
        raise UsageError(f"DataflowRunner cannot run this job: {'; '.join(problems)}")
