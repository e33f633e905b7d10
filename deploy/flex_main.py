"""Flex Template entry point: Dataflow's launcher runs this file (FLEX_TEMPLATE_PYTHON_PY_FILE).

The launcher passes every template parameter as --name=value together with the pipeline
options it chose (project, region, locations and --template_location, where segprep writes
the job for the launcher to submit). Two things differ from the CLI: segprep's on/off
switches arrive as --overwrite=true|false, repeatable flags as one ';'-separated value, and
the workers should run this very image, whose name the build baked into
SEGPREP_SDK_CONTAINER_IMAGE.
"""

from __future__ import annotations

import os
import sys

SWITCHES = ("--overwrite", "--dry_run", "--append", "--split_by_folder")
# Repeatable on the command line; one template parameter holds several values, ';'-separated.
REPEATED = ("--split_file", "--ignore_files", "--leakage_check")
TRUE = ("true", "1", "yes")


def to_cli_args(argv: list[str], image: str | None = None) -> list[str]:
    """The launcher's arguments as `segprep prepare` arguments."""
    args = []
    for arg in argv:
        name, has_value, value = arg.partition("=")
        if name in SWITCHES and has_value:
            if value.strip().lower() in TRUE:
                args.append(name)
            continue
        if name in REPEATED and has_value:
            args.extend(f"{name}={part}" for part in value.split(";") if part)
            continue
        args.append(arg)
    names = {arg.partition("=")[0] for arg in args}
    if "--runner" not in names:
        args += ["--runner", "DataflowRunner"]  # never the local default on the launcher VM
    images = {"--sdk_container_image", "--worker_harness_container_image", "--setup_file"}
    if image and not names & images:
        args += ["--sdk_container_image", image]
    return args


def main() -> int:
    from beam_pipeline.cli import main as segprep

    image = os.environ.get("SEGPREP_SDK_CONTAINER_IMAGE") or None
    return segprep(["prepare", *to_cli_args(sys.argv[1:], image)])


if __name__ == "__main__":
    sys.exit(main())
