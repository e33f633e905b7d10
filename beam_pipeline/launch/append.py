"""`prepare --append`: check that a run may add a version to the output, and plan it.

An append extends a finished segprep output that keeps versions and content digests, and
only with the parameters that shape its records (mask type and format, classes, ignore
index, record format, split fractions): records of one dataset must read the same way. Any
difference is a usage error (exit 2) naming each one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from typing import Any

from beam_pipeline.errors import UsageError
from beam_pipeline.job.settings import AppendSettings
from beam_pipeline.runtime import output_protocol, storage
from transforms.format import record_formats
from transforms.format.dataset_info import DatasetInfo, MetadataError
from transforms.format.naming import METADATA_FILE, SPLITS


def plan_append(
    args: argparse.Namespace,
    output_dir: str,
    output: output_protocol.OutputState | None,
    mask_plan: Any,
    fractions: Any,
) -> AppendSettings:
    if args.overwrite:
        raise UsageError("--append adds a version to an output; --overwrite replaces it: pick one")
    if output is not None and not output.finished:
        raise UsageError(
            f"--append needs a finished segprep output in --output_dir {output_dir}: there is "
            "none (run `segprep prepare` without --append first)"
        )
    path = storage.join(output_dir, METADATA_FILE)
    try:
        data = storage.read_bounded(path, 64 << 20)
        raw = json.loads(data)
        info = DatasetInfo.from_json(raw)
    except (OSError, ValueError, MetadataError) as error:
        raise UsageError(f"--append: cannot read {path}: {error}") from None
    tables = {split: [] for split in SPLITS}
    for version in info.dataset_versions:
        for split in SPLITS:
            if split in version.digest_tables:
                tables[split].append(version.digest_tables[split].file)
    if not info.dataset_versions or any(
        len(names) != len(info.dataset_versions) for names in tables.values()
    ):
        raise UsageError(
            f"--append: {output_dir} was prepared by a segprep that kept no versions and "
            "content digests: prepare it once more (without --append) to append to it"
        )
    differences = parameter_differences(raw, info, args, mask_plan, fractions)
    if differences:
        raise UsageError(
            f"--append: the parameters that shape records differ from {output_dir}'s: "
            + "; ".join(differences)
        )
    return AppendSettings(
        version=info.latest_version + 1,
        previous_sha256=hashlib.sha256(data).hexdigest(),
        digest_tables={split: tuple(names) for split, names in tables.items()},
    )


def parameter_differences(
    raw: dict[str, Any], info: DatasetInfo, args: argparse.Namespace, mask_plan: Any, fractions: Any
) -> list[str]:
    """'name: output X, this run Y' for each record-shaping parameter that differs."""
    used = raw.get("parameters") or {}
    classes = mask_plan.classes
    stored_classes = info.classes
    pairs = {
        "mask_type": (used.get("mask_type", "binary"), classes.mask_type),
        "mask_format": (info.mask_format, mask_plan.mask_format),
        "mask_key": (used.get("mask_key"), args.mask_key),
        "record_format": (
            raw.get("record_format", record_formats.DEFAULT),
            getattr(args, "record_format", None) or record_formats.DEFAULT,
        ),
        "train_size": (used.get("train_size"), fractions.train),
        "validation_size": (used.get("validation_size"), fractions.validation),
    }
    if classes.is_classes or stored_classes is not None:
        pairs.update(
            num_classes=(
                stored_classes.num_classes if stored_classes else None,
                classes.num_classes if classes.is_classes else None,
            ),
            ignore_index=(
                stored_classes.ignore_index if stored_classes else None,
                classes.ignore_index if classes.is_classes else None,
            ),
            class_names=(
                list(stored_classes.names) if stored_classes and stored_classes.names else None,
                list(classes.class_names) if classes.class_names else None,
            ),
            colormap=(
                [list(c) for c in stored_classes.colormap]
                if stored_classes and stored_classes.colormap
                else None,
                [list(c) for c in classes.colormap] if classes.colormap else None,
            ),
        )
    return [
        f"{name}: output {_show(old)}, this run {_show(new)}"
        for name, (old, new) in pairs.items()
        if old != new
    ]


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
