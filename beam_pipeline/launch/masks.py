"""The mask side of a run plan: mask type, class settings, stored format, annotation exports.

Every class-mask flag is checked here, once, into one frozen ClassMaskSettings that the shard
writers and the commit share. An annotation export is read here too, by the launcher alone,
through its tool (transforms/sources/tools.py); the job never opens it: with local image
folders each image record travels in its staged pair (runtime/local_listing.py); with Cloud
Storage ones `stage_images` writes the records as record files into the run's staging
folder, which the job reads in parallel (job/listing.py).
Every mistake is a one-line UsageError (exit 2) before anything is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from beam_pipeline.errors import UsageError, usage_error
from beam_pipeline.launch.options import DEFAULT_MASK_FORMAT
from transforms import files, spill
from transforms.format.features import DEFAULT_COCO_UNLABELED as DEFAULT_UNLABELED
from transforms.pairing import AnnotatedEntry, annotated_entry

if TYPE_CHECKING:
    from transforms.codecs.class_mask import ClassMaskSettings
    from transforms.sources.annotations import AnnotatedDataset, AnnotationTool

CLASS_FLAGS = (
    "num_classes",
    "ignore_index",
    "class_names",
    "colormap",
    "coco_annotations",
    "unlabeled_pixels",
    "annotations",
    "class_map",
)
FLAG_FILE_LIMIT = 16 << 20  # a class-name or colormap file: 65,536 names fit many times over
STAGED_IMAGES_PREFIX = "annotated_images"  # record files in the run's staging folder
STAGED_IMAGES_PER_FILE = 10_000  # image records per staged file: the job's unit of work


@dataclasses.dataclass(frozen=True)
class MaskPlan:
    """The mask side of a run, resolved once: what the writers, the commit and the launcher
    (staging the annotated images) need."""

    classes: ClassMaskSettings
    mask_format: str
    dataset: AnnotatedDataset | None = None  # launcher only: staged for the job, never pickled
    annotations: str | None = None  # the export, normalised (absolute or gs://)

    @property
    def source(self) -> str:
        """The mask source's name in transforms.sources.registry."""
        if self.dataset is not None:
            return "annotations"
        return "class_files" if self.classes.is_classes else "binary_files"

    @property
    def annotation_fill(self) -> int | None:
        """The value of pixels no annotation covers, for an annotated run."""
        if self.dataset is None:
            return None
        return self.dataset.fill_value(self.classes.ignore_index)

    def parameters(self, args: argparse.Namespace) -> dict[str, Any]:
        """The mask flags as resolved, for metadata.json's parameters."""
        classes = self.classes
        return {
            "mask_type": classes.mask_type,
            "num_classes": classes.num_classes,
            "ignore_index": classes.ignore_index if classes.is_classes else None,
            "class_names": args.class_names,
            "colormap": args.colormap,
            "class_map": args.class_map,
            "coco_annotations": self.annotations,
            "coco_unlabeled": None if self.dataset is None else self.dataset.unlabeled,
            "annotations": self.annotations,
            "annotation_format": None if self.dataset is None else self.dataset.tool,
        }

    def describe(self) -> dict[str, Any]:
        """For the dry run's plan."""
        described: dict[str, Any] = {
            "mask_type": self.classes.mask_type,
            "mask_format": self.mask_format,
        }
        if self.classes.is_classes:
            described["num_classes"] = self.classes.num_classes
            described["ignore_index"] = self.classes.ignore_index
        if self.dataset is not None:
            described["coco"] = {  # the dry run's name for it in every segprep so far
                "images": self.dataset.num_images,
                "annotations": self.dataset.num_annotations,
                "orphan_annotations": self.dataset.orphan_annotations,
            }
        return described


@dataclasses.dataclass(frozen=True)
class Annotations:
    """--annotations (or its COCO shorthand --coco_annotations), resolved once: the export's
    path as given and the tool that wrote it (given, or told from the content)."""

    path: str
    tool: str  # a name in transforms.sources.tools

    @property
    def flag(self) -> str:
        """How messages name it: COCO by its shorthand, as the flags' help does."""
        return "--coco_annotations" if self.tool == "coco" else "--annotations"

    @property
    def reader(self) -> AnnotationTool:
        from transforms.sources import tools

        return tools.get(self.tool)

    @property
    def normalized(self) -> str:
        """Absolute local path or gs:// path; a folder export's ends in '/'."""
        if self.reader.folder_of is not None:
            return files.normalize_dir(self.path)
        return normalize_file(self.path)


def resolve_annotations(args: argparse.Namespace) -> Annotations | None:
    """--annotations with its format, or --coco_annotations; None without either. A format
    that cannot be told is a one-line UsageError. The flags themselves stay as given."""
    from transforms.sources import tools

    path, tool = args.annotations, args.annotation_format
    if args.coco_annotations is not None:
        if path is not None:
            raise UsageError("give --annotations or --coco_annotations, not both")
        if tool not in (None, "coco"):
            raise UsageError("--coco_annotations is COCO: it takes no other --annotation_format")
        path, tool = args.coco_annotations, "coco"
    if path is None:
        if tool is not None or args.unlabeled_pixels is not None:
            flag = "--annotation_format" if tool else "--unlabeled_pixels"
            raise UsageError(f"{flag} needs --annotations or --coco_annotations")
        return None
    if tool is None:
        if not files.is_local(path):
            raise UsageError(f"--annotations {path}: give --annotation_format")
        if not os.path.exists(path):
            raise UsageError(f"--annotations {path}: no such file or folder")
        try:
            tool = tools.detect(path)
        except (ValueError, OSError) as error:
            raise UsageError(f"--annotations {error}") from None
    return Annotations(path, tool)


def check_mask_flags(args: argparse.Namespace) -> Annotations | None:
    """The checks that need no file: combinations of flags that cannot work; the resolved
    annotation export, if any."""
    given = [f"--{name}" for name in CLASS_FLAGS if getattr(args, name) is not None]
    if args.mask_type != "classes":
        if given:
            raise UsageError(f"{given[0]} needs --mask_type classes")
        return None
    annotations = resolve_annotations(args)
    if args.mask_format == "jpeg":
        raise UsageError(
            "--mask_format jpeg would change class ids at every edge: class masks are stored "
            f"as {DEFAULT_MASK_FORMAT['classes']} (the default with --mask_type classes)"
        )
    if annotations is not None:
        for flag in ("mask_dir", "mask_key", "colormap", "class_map"):
            if getattr(args, flag) is not None:
                raise UsageError(
                    f"--{flag} does not apply with {annotations.flag}, which gives the masks "
                    "and names the classes (its labels, or --class_names)"
                )
    elif args.class_map is not None and not _preset_or_file(args.class_map):
        from transforms.codecs.class_map import PRESETS

        raise UsageError(
            f"--class_map {args.class_map}: no such file, and not a preset "
            f"({', '.join(sorted(PRESETS))})"
        )
    elif (
        args.num_classes is None
        and args.class_names is None
        and args.colormap is None
        and not _names_its_classes(args.class_map)
    ):
        raise UsageError(
            "--mask_type classes needs the classes: --num_classes N, --class_names FILE, "
            "--colormap FILE, --coco_annotations FILE or a --class_map preset"
        )
    return annotations


def _preset_or_file(class_map: str) -> bool:
    from transforms.codecs.class_map import PRESETS

    return class_map in PRESETS or files.exists(class_map)


def _names_its_classes(class_map: str | None) -> bool:
    """A --class_map preset that carries its dataset's class names (oxford_pet_trimap)."""
    from transforms.codecs.class_map import PRESET_CLASS_NAMES

    return class_map in PRESET_CLASS_NAMES


def plan_masks(args: argparse.Namespace, export: Annotations | None = None) -> MaskPlan:
    """Read the class-name, colormap and annotation files, and resolve the class settings
    (after `check_mask_flags`, which resolved `export`)."""
    from transforms.codecs.class_map import PRESET_CLASS_NAMES
    from transforms.codecs.class_mask import class_mask_settings, parse_class_names, parse_colormap
    from transforms.codecs.class_names import PRESETS as NAME_PRESETS

    mask_format = args.mask_format or DEFAULT_MASK_FORMAT[args.mask_type]
    if args.mask_type != "classes":
        return MaskPlan(class_mask_settings(args.mask_type), mask_format)
    try:
        names = colormap = dataset = None
        if args.class_names in NAME_PRESETS:
            names = NAME_PRESETS[args.class_names]
        elif args.class_names is not None:
            source = f"--class_names {args.class_names}"
            names = parse_class_names(_read_flag_file(source, args.class_names), source)
        if args.colormap is not None:
            source = f"--colormap {args.colormap}"
            colormap = parse_colormap(_read_flag_file(source, args.colormap), source)
        preset_names = PRESET_CLASS_NAMES.get(args.class_map)
        if (
            names is None
            and colormap is None
            and preset_names is not None
            and args.num_classes in (None, len(preset_names))
        ):
            names = preset_names  # the dataset's own names for the preset's stored ids
        if export is not None:
            dataset = read_export(args, export, names)
            names = dataset.class_names
        classes = class_mask_settings(
            "classes",
            num_classes=args.num_classes,
            ignore_index=args.ignore_index,
            class_names=names,
            colormap=colormap,
            class_map=_class_map(args.class_map),
        )
    except ValueError as error:
        raise usage_error(error) from None
    return MaskPlan(classes, mask_format, dataset, export.normalized if export else None)


def read_export(
    args: argparse.Namespace, export: Annotations, names: tuple[str, ...] | None
) -> AnnotatedDataset:
    """The export, read by the launcher through its tool into staged images; from gs:// it
    is first copied to a temporary folder (removed once read). A local export must exist,
    as a folder or a regular file as its tool wants (a FIFO would block the read)."""
    from transforms.sources.annotations import ReadRequest

    tool, path = export.reader, export.normalized
    origin = f"{export.flag} {export.path}"
    image_dir = args.image_dir or args.data_dir or "."
    image_dir = os.path.abspath(image_dir) if files.is_local(image_dir) else image_dir
    request = ReadRequest(origin, image_dir, names, args.unlabeled_pixels or DEFAULT_UNLABELED)
    if files.is_local(path) and tool.folder_of is not None and not os.path.isdir(path):
        raise UsageError(f"{origin}: {tool.title} needs a folder")
    if files.is_local(path) and tool.folder_of is None:
        _check_regular(origin, path)
    try:
        with spill.temporary_folder("annotations") as folder:
            if tool.folder_of is not None:
                local, local_images = _local_folder(path, tool.folder_of, image_dir, folder, origin)
                return tool.read(local, dataclasses.replace(request, image_dir=local_images))
            return tool.read(_local_file(path, folder, origin), request)
    except OSError as error:
        raise UsageError(f"{origin}: {error.strerror or error}") from None


def _check_regular(source: str, path: str) -> None:
    """A one-line UsageError unless `path` is a regular file: a FIFO would block the read."""
    if not os.path.exists(path):
        raise UsageError(f"{source}: no such file")
    if not os.path.isfile(path):
        raise UsageError(f"{source}: not a regular file (FIFO, device, socket or folder)")


def _local_file(path: str, folder: str, origin: str) -> str:
    if files.is_local(path):
        return path
    local = os.path.join(folder, "export")
    try:
        files.download_file(path, local)
    except FileNotFoundError:
        raise UsageError(f"{origin}: no such file") from None
    return local


def _local_folder(
    path: str, suffix: str, image_dir: str, folder: str, origin: str
) -> tuple[str, str]:
    """(export folder, image folder) on local disk. From gs:// the export's files (those
    ending in `suffix`) are copied to `folder`/BUCKET/NAME, so a path relative to its file
    (labelme's imagePath) still resolves to the image's own path, which the gs:// image
    folder maps to alike."""
    if files.is_local(path):
        return path, image_dir
    found = [p for p in files.list_dir(path) if p.lower().endswith(suffix)]
    if not found:
        raise UsageError(f"{origin}: no {suffix} files")
    for remote in found:
        local = _mirrored(remote, folder)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        files.download_file(remote, local)
    images = _mirrored(image_dir, folder) if not files.is_local(image_dir) else image_dir
    return _mirrored(path, folder), images


def _mirrored(remote: str, folder: str) -> str:
    """gs://BUCKET/NAME as a path under `folder`; an object name that would leave it ('..')
    is refused, never written."""
    local = os.path.normpath(os.path.join(folder, remote.removeprefix("gs://")))
    if not local.startswith(os.path.join(folder, "")):
        raise UsageError(f"--annotations: object {remote} names a path outside its bucket")
    return local


def _class_map(given: str | None):
    """A preset by its name (transforms.codecs.class_map.PRESETS), else a JSON file."""
    from transforms.codecs.class_map import PRESETS, load_preset, parse_class_map

    if given is None:
        return None
    if given in PRESETS:
        return load_preset(given)
    source = f"--class_map {given}"
    return parse_class_map(_read_flag_file(source, given), given)


def normalize_file(path: str) -> str:
    """Absolute local path or gs:// path of a file flag."""
    return os.path.abspath(path) if files.is_local(path) else path


def _read_flag_file(source: str, path: str) -> bytes:
    try:
        return files.read_bounded(path, FLAG_FILE_LIMIT)
    except FileNotFoundError:
        raise UsageError(f"{source}: no such file") from None
    except OSError as error:
        reason = error.strerror or str(error).removeprefix(f"{path}: ")
        raise UsageError(f"{source}: {reason}") from None


def annotated_entries(
    dataset: AnnotatedDataset, annotations: str, image_dir: str
) -> Iterator[tuple[str, AnnotatedEntry]]:
    """Every image record of the file with its annotations, keyed for the pairing rule
    (transforms/pairing.py); streamed from the dataset's records."""
    for image_id, file_name, payload in dataset.staged():
        yield annotated_entry(annotations, image_dir, image_id, file_name, payload)


def staged_image_files(staging: str, dataset: AnnotatedDataset) -> tuple[str, ...]:
    """Where `stage_images` writes the image records: known before it runs, for the job graph."""
    count = max(1, -(-dataset.num_images // STAGED_IMAGES_PER_FILE))
    return tuple(
        files.join(staging, f"{STAGED_IMAGES_PREFIX}-{index:05d}.records") for index in range(count)
    )


def stage_images(dataset: AnnotatedDataset, staged: tuple[str, ...]) -> None:
    """Write the image records (transforms.sources.annotations.image_payload, as UTF-8) as record
    files, STAGED_IMAGES_PER_FILE records each, to the paths `staged_image_files` named.

    Streamed from the dataset's records: memory holds one record at a time. Files for a
    gs:// staging folder are finished locally, then uploaded whole.
    """
    from transforms.spill import RecordFiles

    with spill.temporary_folder("annotations") as folder:
        records = RecordFiles(os.path.join(folder, STAGED_IMAGES_PREFIX), STAGED_IMAGES_PER_FILE)
        for _, _, payload in dataset.staged():
            records.write(payload.encode("utf-8"))
        written = records.close()
        if len(written) != len(staged):
            raise RuntimeError(f"{len(written)} staged image files, {len(staged)} planned")
        for local, target in zip(written, staged, strict=True):
            if files.is_local(target):
                os.makedirs(os.path.dirname(target), exist_ok=True)  # a template run: no folder yet
                shutil.copyfile(local, target)
            else:
                files.upload_file(local, target)
