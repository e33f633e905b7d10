"""segprep's own flags and the defaults of every subcommand, each defined once.

Every value is checked by its type here, as argparse reads it: a NaN, an infinity, a
negative count or a fraction above 1 is a usage error before anything runs. Beam's flags
are parsed and checked by Beam's own parser (launch/plan.py).

Kept free of Beam, TensorFlow and image-library imports so `segprep --help` answers at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import re
import sys
from typing import Any

from transforms.format import record_formats
from transforms.format.features import (
    COCO_UNLABELED,
    DEFAULT_COCO_UNLABELED,
    DEFAULT_IGNORE_INDEX,
    DEFAULT_MASK_TYPE,
    MASK_FORMATS,
    MASK_TYPES,
)
from transforms.sources import tools

DEFAULT_RUNNER = "FnApiRunner"  # in this process; see launch/plan.py
LOCAL_RUNNERS = ("FnApiRunner", "DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner")
UNLABELED_CHOICES = ("reject", "skip")
DEFAULT_TRAIN_SIZE = 0.9
DEFAULT_VALIDATION_SIZE = 0.1
DEFAULT_SHARD_SIZE_MB = 100.0
DEFAULT_THREADS_PER_SHARD = 0  # one per core, or one per writer process
DEFAULT_WRITER_PROCESSES = 0  # one per core
# --mask_format follows --mask_type: the blog's JPEG for binary masks; class ids need PNG,
# since JPEG would change them at every edge (refused for classes).
DEFAULT_MASK_FORMAT = {"binary": "jpeg", "classes": "png"}
# Half the dataset broken is almost always a wrong folder or flag, not a dirty download.
DEFAULT_MAX_REJECT_FRACTION = 0.5
DEFAULT_SAMPLE_COUNT = 60  # segprep sample-data
DEFAULT_BROKEN_FRACTION = 0.05
DEFAULT_INSPECT_COUNT = 16
DEFAULT_INSPECT_SPLIT = "train"
# Hamming distance of near-duplicate images (of 64 bits): benchmarks/duplicates.py measured
# recall >= 0.97 for resize, re-encoding, crops <= 5 %, brightness and contrast at 12, with
# 0.018 % false-positive pairs; at 10 crops fell to 0.94 (docs/duplicates.md).
DEFAULT_DUPLICATE_DISTANCE = 12
DUPLICATE_MODES = ("group", "drop", "off")
MAX_DUPLICATE_DISTANCE = 31

# The --dry_run estimate's own prices (launch/estimate.py): flag name -> the unit priced.
PRICE_FLAGS = {
    "price_vcpu_hour": "one vCPU for an hour",
    "price_gb_hour": "one GB of worker memory for an hour",
    "price_shuffle_gb": "one GB shuffled",
}

# An integer as a flag spells it: ASCII digits and an optional sign. int() would also take
# "1_0" and non-ASCII digits, and word a 5000-digit one with Python's own limit hint.
_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")


def _number(text: str, kind: type) -> float:
    shown = text if len(text) <= 40 else text[:40] + "..."
    if kind is int:
        if not _INTEGER.fullmatch(text.strip()):
            if re.fullmatch(r"[+-]?[0-9]+", text.strip()):
                raise argparse.ArgumentTypeError(f"{shown} is too large (at most 18 digits)")
            raise argparse.ArgumentTypeError(f"{shown!r} is not an integer")
        return int(text)
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown!r} is not a number") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _int_at_least(text: str, least: int, words: str) -> int:
    value = _number(text, int)
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {words}, got {text}")
    return value


def integer(text: str) -> int:
    """Any integer (a seed)."""
    return _number(text, int)


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "at least 1")


def count_or_auto(text: str) -> int:
    """0 (decided by the machine) or a positive count."""
    return _int_at_least(text, 0, "0 (auto) or more")


# More writer processes or reading threads than this is a typo, not a machine: each is a
# process or thread started, whatever the cores.
MAX_WORKERS = 256


def worker_count(text: str) -> int:
    """0 (one per core) or a count of writer processes or threads, at most MAX_WORKERS."""
    value = count_or_auto(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be from 0 (auto) to {MAX_WORKERS}, got {text}")
    return value


def location(text: str) -> str:
    """A folder or file, local or gs://, as given; an empty one (an unset shell variable) is
    refused rather than read as the current folder or the root."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: pass a folder or file")
    return text


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0, "0 or more")


def duplicate_distance(text: str) -> int:
    value = _int_at_least(text, 0, "0 or more")
    if value > MAX_DUPLICATE_DISTANCE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_DUPLICATE_DISTANCE}, got {text}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def fraction(text: str) -> float:
    value = _number(text, float)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {text}")
    return value


class DeprecatedAlias(argparse.Action):
    """An old flag name: stores into the new flag's dest and says, in one line, to use it."""

    def __init__(self, option_strings, dest, new: str, **kwargs) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(
            f"segprep: warning: {option_string} is deprecated, use {self.new} (same values)",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one: not on required flags or on switches."""

    def _get_help_string(self, action: argparse.Action) -> str:
        # Identity, not ==: a default of 0 (auto) is a default worth showing, and 0 == False.
        if action.required or any(action.default is no for no in (None, False, argparse.SUPPRESS)):
            return action.help or ""
        return super()._get_help_string(action)


@functools.cache
def _frozen_type(names: tuple[str, ...]) -> type:
    return dataclasses.make_dataclass("PrepareArgs", names, frozen=True)


def frozen_args(parsed: argparse.Namespace) -> Any:
    """The parsed flags as one frozen value, a field a flag: planning reads it and cannot
    change it, so no step depends on the order the others ran in."""
    values = vars(parsed)
    return _frozen_type(tuple(sorted(values)))(**values)


BEAM_FLAGS_NOTE = (
    "Any Apache Beam pipeline option is accepted as well and checked by Beam's own parser, "
    "e.g. --runner DataflowRunner --project P --region R --temp_location gs://B/tmp "
    "(see deploy/README.md); an unknown flag is an error naming the closest known one."
)


def add_prepare_arguments(parser: argparse.ArgumentParser) -> None:
    """Every prepare flag, in the order --help shows them."""
    _add_input_flags(parser)
    _add_mask_type_flags(parser)
    _add_public_dataset_flags(parser)
    _add_output_flags(parser)
    _add_writer_flags(parser)
    _add_reject_flags(parser)
    _add_duplicate_flags(parser)
    _add_run_flags(parser)
    _add_price_flags(parser)


def _add_input_flags(parser: argparse.ArgumentParser) -> None:
    inputs = parser.add_argument_group(
        "inputs (either --data_dir, or --image_dir and --mask_dir, or --image_dir and "
        "--coco_annotations)"
    )
    inputs.add_argument(
        "--image_dir", type=location, help="folder (local or gs://) of KEY.jpg|.jpeg|.png"
    )
    inputs.add_argument(
        "--mask_dir", type=location, help="folder of KEY_mask.mat, KEY.mat, KEY_mask.png or KEY.png"
    )
    inputs.add_argument(
        "--data_dir",
        type=location,
        help="one folder holding both: KEY.jpg|.jpeg|.png beside KEY_mask.mat|.png (or KEY.mat)",
    )
    inputs.add_argument(
        "--coco_annotations",
        type=location,
        metavar="FILE",
        help="COCO instances or stuff JSON (local or gs://), in place of --mask_dir: each "
        "image's annotations are rasterised into a class-id mask (needs --mask_type classes); "
        "its file_names are relative to --image_dir",
    )
    inputs.add_argument(
        "--annotations",
        type=location,
        metavar="PATH",
        help="an annotation tool's export in place of --mask_dir (docs/classes.md): "
        "a COCO JSON, a CVAT for images 1.1 XML, a Label Studio JSON export, or a folder of "
        "labelme JSON files (may be --image_dir itself); needs --mask_type classes",
    )
    inputs.add_argument(
        "--annotation_format",
        choices=tools.names(),
        help="the export's format; default: told from its content",
    )


def _add_mask_type_flags(parser: argparse.ArgumentParser) -> None:
    classes = parser.add_argument_group(
        "mask types (docs/classes.md): binary 0/1 masks, or class-id masks"
    )
    classes.add_argument(
        "--mask_type",
        choices=MASK_TYPES,
        default=DEFAULT_MASK_TYPE,
        help="binary: 0/1 or 0/255 masks stored as 0/255; classes: class ids 0..N-1 plus the "
        "ignore index, stored losslessly as PNG, with class statistics in metadata.json",
    )
    classes.add_argument(
        "--num_classes",
        type=positive_int,
        metavar="N",
        help="classes: ids 0..N-1; or taken from --class_names, --colormap or the COCO "
        "categories (any two given must agree)",
    )
    classes.add_argument(
        "--ignore_index",
        type=non_negative_int,
        help=f"classes: the mask value no loss counts (VOC boundaries), at least N; default "
        f"{DEFAULT_IGNORE_INDEX}",
    )
    classes.add_argument(
        "--class_names",
        type=location,
        metavar="FILE|PRESET",
        help="classes: names in class-id order, one per line or a JSON list; or a preset: voc "
        "(21), cityscapes (19 trainIds), ade20k (150), oxford_pet (2). The --class_map presets "
        "bring their dataset's names",
    )
    classes.add_argument(
        "--colormap",
        type=location,
        metavar="FILE",
        help="classes: JSON {name: [r, g, b], ...}, CVAT's labelmap.txt or a name,r,g,b CSV "
        "(CamVid's class_dict.csv), in class-id order; RGB masks are read through it and "
        "palette masks checked against it",
    )
    classes.add_argument(
        "--class_map",
        metavar="FILE|PRESET",
        help="classes: source id -> stored id, applied as each mask is read, before the range "
        'check: a JSON object {"7": 0, ..., "*": 255} (\'*\': every unlisted id), or a '
        "preset: cityscapes_trainids (34 labelIds -> 19 trainIds, 255 for the rest), "
        "ade20k_reduce_zero (0 -> 255, 1..150 -> 0..149), oxford_pet_trimap (1 pet -> 1, "
        "2 background -> 0, 3 border -> 255)",
    )
    classes.add_argument(
        "--unlabeled_pixels",
        choices=COCO_UNLABELED,
        help="COCO and --annotations: pixels no annotation covers are class 'background' "
        "(the categories or labels get ids after it) or the ignore index (COCO-Stuff; ids "
        f"from 0); default {DEFAULT_COCO_UNLABELED}",
    )
    for old in ("--coco_unlabeled", "--unlabeled"):
        classes.add_argument(
            old,
            dest="unlabeled_pixels",
            choices=COCO_UNLABELED,
            action=DeprecatedAlias,
            new="--unlabeled_pixels",
            help=argparse.SUPPRESS,
        )


def _add_public_dataset_flags(parser: argparse.ArgumentParser) -> None:
    public = parser.add_argument_group(
        "public datasets as they ship (docs/public-datasets.md): official splits, unlabeled "
        "images, side files, naming conventions"
    )
    public.add_argument(
        "--images_without_mask",
        choices=UNLABELED_CHOICES,
        default="reject",
        help="an image with no mask: a missing_mask reject, or skip: counted as unlabeled and "
        "listed in unlabeled.jsonl, not a reject (VOC ships 17,125 images for 2,913 masks)",
    )
    public.add_argument(
        "--unlabeled_images",
        dest="images_without_mask",
        choices=UNLABELED_CHOICES,
        action=DeprecatedAlias,
        new="--images_without_mask",
        help=argparse.SUPPRESS,
    )
    public.add_argument(
        "--ignore_files",
        action="append",
        metavar="GLOB",
        help="repeatable: side files to leave alone, matched against the path under a data "
        "folder ('*' crosses folders: '*.txt' matches a/readme.txt); counted, never read",
    )
    public.add_argument(
        "--split_file",
        type=location,
        action="append",
        metavar="SPLIT=PATH",
        help="repeatable: an official split list, one key per line (image extension "
        "optional), e.g. train=ImageSets/Segmentation/train.txt; keys in no list are "
        "not_in_split; replaces --train_size/--validation_size",
    )
    public.add_argument(
        "--split_by_folder",
        action="store_true",
        help="the first folder of each key names its split: train|training, val|validation, "
        "test; replaces --train_size/--validation_size",
    )
    public.add_argument(
        "--image_suffix",
        metavar="S",
        help="images are KEY+S, e.g. _leftImg8bit.png (Cityscapes); default KEY.jpg|.jpeg|.png",
    )
    public.add_argument(
        "--mask_suffix",
        metavar="S",
        help="masks are KEY+S, e.g. _gtFine_labelIds.png (Cityscapes); default as --mask_dir says",
    )


def _add_output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output_dir",
        type=location,
        required=True,
        help="where shards and metadata.json go (local or gs://)",
    )
    parser.add_argument(
        "--train_size",
        type=fraction,
        default=None,
        help=f"fraction of valid entries for train; default {DEFAULT_TRAIN_SIZE:g}",
    )
    parser.add_argument(
        "--validation_size",
        type=fraction,
        default=None,
        help=f"fraction of valid entries for validation; default {DEFAULT_VALIDATION_SIZE:g}",
    )
    sizing = parser.add_mutually_exclusive_group()
    sizing.add_argument("--num_shards", type=positive_int, help="total shards, spread over splits")
    sizing.add_argument(
        "--shard_size_mb",
        type=positive_float,
        help=f"target input MB per shard; {DEFAULT_SHARD_SIZE_MB:g} unless --num_shards is given",
    )
    parser.add_argument(
        "--mask_format",
        choices=MASK_FORMATS,
        help=f"how masks are stored; default {DEFAULT_MASK_FORMAT['binary']} for binary masks, "
        f"{DEFAULT_MASK_FORMAT['classes']} for classes (JPEG is refused for class ids)",
    )
    parser.add_argument(
        "--record_format",
        choices=record_formats.names(),
        default=record_formats.DEFAULT,
        help="shard file format: tfrecord (tf.data, every reader) or array_record (random "
        "access without an offset index: RecordSource, PyTorch, Grain, TFDS data sources)",
    )
    parser.add_argument(
        "--mask_key",
        help="variable name in .mat masks, or a struct's field path (SBD: GTcls.Segmentation); "
        "without it: 'mask', else the only 2-D variable",
    )
    parser.add_argument(
        "--max_image_side",
        type=positive_int,
        help="downscale images whose longer side exceeds N pixels (antialiased, JPEG re-encoded; "
        "masks nearest-neighbour, ids never interpolated); images within N are stored as they are",
    )


def _add_writer_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads_per_shard",
        type=worker_count,
        default=DEFAULT_THREADS_PER_SHARD,
        help="threads that read and decode the entries of one shard, 0 = one per core, or "
        "one per writer process; records are still written in key order",
    )
    parser.add_argument(
        "--writer_processes",
        type=worker_count,
        default=DEFAULT_WRITER_PROCESSES,
        help="local runs on local files: processes that write shards side by side, 0 = one "
        "per core, 1 = write in the runner's process (Dataflow parallelises by itself and "
        "ignores this)",
    )


def _add_reject_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max_reject_fraction",
        type=fraction,
        default=DEFAULT_MAX_REJECT_FRACTION,
        help="above this fraction of bad entries (unlabeled and not_in_split entries count "
        "in neither part) nothing is "
        "published and the job fails; the rejects stay in OUT/.segprep/runs/RUN/",
    )


def _add_duplicate_flags(parser: argparse.ArgumentParser) -> None:
    found = parser.add_argument_group("duplicates and leakage (docs/duplicates.md)")
    found.add_argument(
        "--duplicates",
        choices=DUPLICATE_MODES,
        default="group",
        help="exact and near-duplicate images: group keeps every group in one split, drop "
        "keeps each group's smallest key and rejects the rest (duplicate_image), off skips "
        "the search (and stores no image hashes)",
    )
    found.add_argument(
        "--duplicate_distance",
        type=duplicate_distance,
        default=DEFAULT_DUPLICATE_DISTANCE,
        metavar="D",
        help="near-duplicates: perceptual hashes (64 bits) at most D bits apart",
    )
    found.add_argument(
        "--leakage_check",
        type=location,
        action="append",
        metavar="OTHER_OUT",
        help="another segprep output (e.g. your test set), repeatable: entries that "
        "near-duplicate one of its images are rejected (leaks_into)",
    )


def _add_run_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier segprep output in --output_dir, or write beside files "
        "segprep did not write (which are never deleted)",
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help="add the keys --output_dir lacks as a new version of its finished output; no "
        "earlier file is touched (keys present with the same bytes are skipped, with other "
        "bytes rejected key_exists); the record-shaping flags must equal the output's",
    )
    parser.add_argument(
        "--no_wait",
        action="store_true",
        help="Dataflow: return once the job is submitted (prints its id and console URL) "
        "instead of following its counters until it ends",
    )
    parser.add_argument(
        "--dry_run",
        action="store_true",
        help="plan the run and print it as JSON (for Dataflow: the job Beam would submit, "
        "steps, packaging, project, region, locations); reads inputs, writes nothing",
    )


def _add_price_flags(parser: argparse.ArgumentParser) -> None:
    prices = parser.add_argument_group(
        "cost of a --dry_run estimate (docs/estimate.md): your own per-unit prices"
    )
    for name, unit in PRICE_FLAGS.items():
        prices.add_argument(
            f"--{name}", type=positive_float, metavar="PRICE", help=f"price of {unit}"
        )
