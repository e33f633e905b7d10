"""The pairing rule, in one place: which files are images, which are masks, which key each
names, and what becomes of every file. The launcher's local listing and the Beam job's
remote listing both call it.

Words used across segprep: an *entry* is one key with every input file that names it; a
*pair* is an entry with exactly one image and one mask; a *record* is what a shard stores for
a pair. Every entry, and every file that names no entry, ends up exactly once in a shard or
in rejects.jsonl.

With an annotation export the mask side of an entry is the export's image record
(`AnnotatedEntry`), keyed like an image file by its `file_name`: it pairs with the image file
at exactly that path under the image folder.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import fnmatch
import itertools
import posixpath
from collections.abc import Iterable, Iterator

from transforms.rejects import Reason, Reject

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
# Checked in this order: `00001_mask.mat` gives key `00001`, not `00001_mask`.
MASK_SUFFIXES = ("_mask.mat", "_mask.png", ".mat", ".png")
# With images and masks in one folder, a mask must say so: `KEY.png` there is an image.
ONE_FOLDER_MASK_SUFFIXES = ("_mask.mat", "_mask.png", ".mat")


class Role(enum.StrEnum):
    IMAGE = "image"
    MASK = "mask"


@dataclasses.dataclass(frozen=True, order=True)
class SourceFile:
    path: str
    size: int
    regular: bool = True  # False: a FIFO, device, socket or directory under a data name


@dataclasses.dataclass(frozen=True, order=True)
class AnnotatedEntry:
    """The mask side of an annotated entry: one image record of the annotation export.

    Its annotations (`payload`, transforms.sources.annotations' staged JSON of the image) are
    attached inside the job, from the run's staged records, never carried in the job graph.
    """

    path: str  # the export; rejects.jsonl names it as the entry's mask
    image_id: int
    file_name: str
    image_path: str  # the one image file it names: image folder + file_name
    payload: str | None = dataclasses.field(default=None, compare=False, repr=False)
    # A record whose file_name names no image: (reason, detail) of its reject, made when its
    # key is resolved, so two records of one such key are one duplicate_key reject.
    problem: tuple[Reason, str] | None = dataclasses.field(default=None, compare=False)

    @property
    def size(self) -> int:
        """Bytes of its annotations, for shard sizing like a mask file's size."""
        return len(self.payload) if self.payload else 0

    @property
    def regular(self) -> bool:
        return True

    @property
    def name(self) -> str:
        return f"{basename(self.path)} image {self.image_id} ({self.file_name})"


@dataclasses.dataclass(frozen=True)
class Pair:
    key: str
    image: SourceFile
    mask: SourceFile | AnnotatedEntry


class PairBatch(list):
    """Pairs travelling together between the job's stages. Beam's default coder encodes a
    plain list item by item, pickling each pair on its own; a list of its own type is
    pickled as one object, in half the bytes and half the time (64 built pairs: 14.5 KB
    and 3.4 us a pair, against 28 KB and 7.6 us)."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where images and masks live: two folders, one folder holding both, or an image folder
    and an annotation export."""

    image_dir: str  # normalised: absolute or gs://, ending in '/'
    mask_dir: str | None  # None: masks come from `annotations`
    annotations: str | None = None  # an annotation export (absolute or gs://)
    # Naming conventions, as data: `aachen_1_leftImg8bit.png` has key `aachen_1` with
    # image_suffix `_leftImg8bit.png`. None: the default names (IMAGE_EXTENSIONS,
    # MASK_SUFFIXES).
    image_suffix: str | None = None
    mask_suffix: str | None = None
    # Globs (--ignore_files) on the path under a data folder: such files are counted, never
    # read, never entries.
    ignore_files: tuple[str, ...] = ()
    # --images_without_mask skip: an image with no mask is set apart as `unlabeled`, not rejected.
    skip_unlabeled: bool = False

    def __post_init__(self) -> None:
        if (self.mask_dir is None) == (self.annotations is None):
            raise ValueError("a layout has a mask folder or an annotation export")

    @property
    def one_folder(self) -> bool:
        return self.image_dir == self.mask_dir

    def roots(self) -> tuple[tuple[str, Role | None], ...]:
        """(folder, role of every file in it); None: the file name decides."""
        if self.one_folder:
            return ((self.image_dir, None),)
        if self.mask_dir is None:
            return ((self.image_dir, Role.IMAGE),)
        return ((self.image_dir, Role.IMAGE), (self.mask_dir, Role.MASK))

    def is_input_file(self, path: str) -> bool:
        """The annotations file itself, when it lies in the image folder: not an entry; with a
        folder of annotations (labelme's, maybe the image folder), every .json file in it."""
        if self.annotations is not None and self.annotations.endswith("/"):
            return path.startswith(self.annotations) and path.lower().endswith(".json")
        return path == self.annotations

    def is_side_file(self, relative_path: str, role: Role | None) -> bool:
        """Once --mask_suffix says what a mask is, every other file in a mask folder of its
        own is a side file (Cityscapes' gtFine/ holds `_gtFine_color.png`,
        `_gtFine_instanceIds.png` and `_gtFine_polygons.json` beside each labelIds mask):
        counted and named in the summary, never read, never a reject."""
        return (
            self.mask_suffix is not None
            and role is Role.MASK
            and not self.one_folder
            and _strip_suffix(relative_path, self.mask_suffixes) is None
        )

    def is_ignored(self, relative_path: str) -> bool:
        """A side file (--ignore_files): `*` crosses folders, so `*.txt` matches `a/b.txt`."""
        return any(fnmatch.fnmatchcase(relative_path, glob) for glob in self.ignore_files)

    @property
    def image_suffixes(self) -> tuple[str, ...]:
        return IMAGE_EXTENSIONS if self.image_suffix is None else (self.image_suffix,)

    @property
    def mask_suffixes(self) -> tuple[str, ...]:
        if self.mask_suffix is not None:
            return (self.mask_suffix,)
        return ONE_FOLDER_MASK_SUFFIXES if self.one_folder else MASK_SUFFIXES

    def classify(self, relative_path: str, role: Role | None) -> tuple[Role, str] | None:
        """(role, key) of a file by its path under its folder; None for any other name."""
        if role is None:
            key = _strip_suffix(relative_path, self.mask_suffixes)
            if key is not None:
                return Role.MASK, key
            role = Role.IMAGE
        suffixes = self.image_suffixes if role is Role.IMAGE else self.mask_suffixes
        key = _strip_suffix(relative_path, suffixes)
        return None if key is None else (role, key)


class SideFiles:
    """Side files of a mask folder (Layout.is_side_file): counted, by the ending they share
    (`*_gtFine_color.png`), keeping at most MAX_KINDS endings so memory stays flat."""

    MAX_KINDS = 16

    def __init__(self, mask_suffix: str | None) -> None:
        self.mask_suffix = mask_suffix or ""
        self.count = 0
        self.kinds: collections.Counter[str] = collections.Counter()

    def add(self, relative_path: str) -> None:
        self.count += 1
        kind = side_file_kind(relative_path, self.mask_suffix)
        known = kind in self.kinds or len(self.kinds) < self.MAX_KINDS
        self.kinds[kind if known else "other"] += 1

    def described(self) -> tuple[tuple[str, int], ...]:
        return tuple(sorted(self.kinds.items(), key=lambda item: (-item[1], item[0])))


def side_file_kind(relative_path: str, mask_suffix: str) -> str:
    """The ending a side file shares with its kind: from the longest start of the mask suffix
    found in its name (`_gtFine_` of `_gtFine_labelIds.png` gives `*_gtFine_color.png`), else
    its extension (`*.json`)."""
    name = basename(relative_path)
    for length in range(len(mask_suffix) - 1, 1, -1):
        at = name.rfind(mask_suffix[:length])
        if at > 0:
            return "*" + name[at:]
    extension = posixpath.splitext(name)[1]
    return f"*{extension}" if extension else name


def basename(path: str) -> str:
    """Last path component of a local or gs:// path."""
    return posixpath.basename(path.replace("\\", "/").rstrip("/"))


def is_hidden(relative_path: str) -> bool:
    """Hidden files and folders (.DS_Store, ._00001.jpg, .git/) are never data, in any folder."""
    return any(part.startswith(".") for part in relative_path.split("/"))


def image_key(relative_path: str) -> str | None:
    """`a/00001` for `a/00001.jpg` (any case of .jpg/.jpeg/.png), None for other files.

    Keys keep the sub-folder, so `a/1.jpg` and `b/1.jpg` are two entries, paired with
    `a/1_mask.mat` and `b/1_mask.mat`.
    """
    return _strip_suffix(relative_path, IMAGE_EXTENSIONS)


def mask_key(relative_path: str) -> str | None:
    """`00001` for `00001_mask.mat`, `00001.mat`, `00001_mask.png` or `00001.png`."""
    return _strip_suffix(relative_path, MASK_SUFFIXES)


def _strip_suffix(relative_path: str, suffixes: tuple[str, ...]) -> str | None:
    name = basename(relative_path)
    lowered = name.lower()
    for suffix in suffixes:
        if lowered.endswith(suffix.lower()) and len(name) > len(suffix):
            return relative_path[: -len(suffix)]
    return None


def file_reject(path: str, role: Role | None, reason: Reason, detail: str) -> Reject:
    """A reject for a file that names no entry, keyed by its full path.

    Entry keys are relative paths, which never start with '/' or hold '://', so a file's key
    can never collide with an entry's: `00105` beside `00105.jpg` stays two lines.
    """
    fields = {"image": path} if role is Role.IMAGE else {"mask": path}
    return Reject(path, reason, detail, **fields)


def unrecognized(path: str, role: Role | None, layout: Layout | None = None) -> Reject:
    """Says what the names should be: a .bmp image is a common surprise, not a mystery."""
    where = f"{role} folder" if role else "data folder"
    image_suffixes = IMAGE_EXTENSIONS if layout is None else layout.image_suffixes
    mask_suffixes = MASK_SUFFIXES if role else ONE_FOLDER_MASK_SUFFIXES
    if layout is not None and layout.mask_suffix is not None:
        mask_suffixes = layout.mask_suffixes
    images = "images are KEY" + "|".join(image_suffixes)
    masks = "masks KEY" + ", KEY".join(mask_suffixes)
    expected = {Role.IMAGE: images, Role.MASK: masks.replace("masks", "masks are", 1)}
    return file_reject(
        path,
        role,
        Reason.UNRECOGNIZED_FILE,
        f"{where} file with an unknown name or extension "
        f"({expected.get(role, f'{images}; {masks}')})",
    )


def annotated_entry(
    annotations: str, image_dir: str, image_id: int, file_name: str, payload: str | None = None
) -> tuple[str, AnnotatedEntry]:
    """(key, entry) of one image record of an export; its entry carries a reject's reason
    (`AnnotatedEntry.problem`) for a name that is no image.

    The key is the image key of `file_name`, so the record meets the image file it names.
    A name that gives no key is keyed `EXPORT#file_name` (`export_key`), never an entry's
    key, and is resolved with the other keys: two records of one such key (two CVAT images
    without a name) are one duplicate_key reject, as two images of one key.
    """
    record = f"image record {image_id} of {basename(annotations)}: file_name {file_name!r}"
    problem = None
    if file_name.startswith("/") or "://" in file_name:
        # an entry key is relative: this one could equal a listed file's (its full path)
        detail = f"{record} is absolute: give it relative to the image folder"
        problem = (Reason.BAD_FILE_NAME, detail)
    key = None if problem else image_key(file_name)
    if key is None:
        detail = f"{record} is not a .jpg, .jpeg or .png name"
        problem = problem or (Reason.UNRECOGNIZED_FILE, detail)
        entry = AnnotatedEntry(annotations, image_id, file_name, "", problem=problem)
        return export_key(annotations, file_name), entry
    return key, AnnotatedEntry(annotations, image_id, file_name, image_dir + file_name, payload)


def export_key(annotations: str, file_name: str) -> str:
    """The key of an export's record whose file_name names no image: `EXPORT#file_name`.

    Entry keys are relative paths (never starting with '/' or holding '://'); a listed
    file's reject key is its full path, which this is not for an export folder (labelme's,
    written without its slash: a file `#notes.txt` in it keeps its own key). A file named
    `EXPORT_NAME#file_name` beside an export file does have this key: its reject is
    resolved with the record's (`may_share_key`)."""
    return f"{annotations.rstrip('/')}#{file_name}"


# The role in a keyed row of a listed file's reject that `may_share_key`.
LISTED_REJECT = "reject"


def may_share_key(reject: Reject, annotations: str | None) -> bool:
    """Whether a listed file's reject (keyed by its full path) may have another's key: an
    export record's that names no image (the file is named `EXPORT_NAME#...` beside the
    export), or another listed file's when the key holds a backslash (a name that is not
    UTF-8 is keyed as shown, `n\\xe9.txt`, which is also a file's real name). Such a reject
    goes through the pairing as a keyed row (`keyed_reject`), so rejects of one key meet
    and become one reject instead of two of one key."""
    if "\\" in reject.key:
        return True
    return annotations is not None and reject.key.startswith(export_key(annotations, ""))


def resolve_pair(
    key: str,
    images: list[SourceFile],
    masks: list[SourceFile] | list[AnnotatedEntry],
    annotations: str | None = None,
    skip_unlabeled: bool = False,
    listed: list[Reject] | None = None,
) -> Pair | Reject:
    """Exactly one image and one mask, both regular files, make a pair; else a reject.

    With masks from the export `annotations`, an entry pairs only with the image file at
    the path its file_name gives. With `skip_unlabeled`, one regular image and no mask is
    an `unlabeled` entry (Reason.UNLABELED, set apart from the rejects at the commit).
    `listed`: the rejects of listed files keyed so (`may_share_key`).
    """
    if listed:
        return _with_listed(key, sorted(listed), [*images, *masks])
    images, masks = sorted(images), sorted(masks)
    image = images[0].path if images else None
    mask = masks[0].path if masks else None
    odd_names = [m for m in masks if isinstance(m, AnnotatedEntry) and m.problem is not None]
    if odd_names and len(masks) == 1:  # no listed file has its key: no image beside it
        reason, detail = odd_names[0].problem
        return Reject(key, reason, detail, None, mask)
    if len(images) > 1 or len(masks) > 1:
        many = images if len(images) > 1 else masks
        kind = "images" if len(images) > 1 else "masks"
        names = ", ".join(_name(f) for f in many)
        return Reject(
            key, Reason.DUPLICATE_KEY, f"{len(many)} {kind} for one key: {names}", image, mask
        )
    if not masks and skip_unlabeled and images[0].regular:
        detail = "image has no mask (--images_without_mask skip)"
        return Reject(key, Reason.UNLABELED, detail, image)
    if not masks:
        where = "no mask" if annotations is None else f"no image record in {basename(annotations)}"
        return Reject(key, Reason.MISSING_MASK, f"image {basename(image)} has {where}", image, None)
    if isinstance(masks[0], AnnotatedEntry) and masks[0].image_path != image:
        there = f"; the image folder has {basename(image)}" if images else ""
        return Reject(
            key,
            Reason.MISSING_IMAGE,
            f"{masks[0].name}: no such file in the image folder{there}",
            image,
            mask,
        )
    if not images:
        detail = f"mask {_name(masks[0])} has no image KEY" + "|".join(IMAGE_EXTENSIONS)
        return Reject(key, Reason.MISSING_IMAGE, detail, None, mask)
    odd = [f for f in (images[0], masks[0]) if not f.regular]
    if odd:
        names = ", ".join(basename(f.path) for f in odd)
        return Reject(
            key,
            Reason.NOT_A_FILE,
            f"{names}: not a regular file (a FIFO, device or folder, or a link to none)",
            image,
            mask,
        )
    return Pair(key, images[0], masks[0])


def _name(source: SourceFile | AnnotatedEntry) -> str:
    return source.name if isinstance(source, AnnotatedEntry) else basename(source.path)


def _with_listed(key: str, listed: list[Reject], others: list) -> Reject:
    """One reject for a key that listed files' rejects have (their full path): theirs if
    alone, else one duplicate_key naming every file and record of the key."""
    if len(listed) == 1 and not others:
        return listed[0]
    names = [_listed_name(r) for r in listed] + [_name(f) for f in others]
    image = next((r.image for r in listed if r.image), None)
    mask = next((f.path for f in others if isinstance(f, AnnotatedEntry)), None)
    kind = "files and records" if any(isinstance(f, AnnotatedEntry) for f in others) else "files"
    detail = f"{len(names)} {kind} for one key: {', '.join(names)}"
    return Reject(key, Reason.DUPLICATE_KEY, detail, image, mask or listed[0].mask)


def _listed_name(reject: Reject) -> str:
    """A listed file's name, by its real path: `basename` would split `n\\xe9.txt` at its
    backslash. A name shown escaped says so, as it reads like a real name of the key."""
    name = posixpath.basename(reject.image or reject.mask or reject.key)
    return f"{name} (not UTF-8)" if reject.reason is Reason.BAD_FILE_NAME else name


# A keyed row: ((key, role, sequence number), source). The sequence number settles ties, so
# sources are never compared and rows can go through an external sort (transforms/spill.py).
KeyedRow = tuple[tuple[str, str, int], "SourceFile | AnnotatedEntry | Reject"]


def keyed_row(key: str, role: Role, sequence: int, source: SourceFile | AnnotatedEntry) -> KeyedRow:
    return (key, role.value, sequence), source


def keyed_reject(sequence: int, reject: Reject) -> KeyedRow:
    """The row of a listed file's reject that `may_share_key`."""
    return (reject.key, LISTED_REJECT, sequence), reject


def pair_sorted(
    rows: Iterable[KeyedRow], annotations: str | None = None, skip_unlabeled: bool = False
) -> Iterator[Pair | Reject]:
    """Resolve each key of `rows` sorted by key, in one streaming pass: only one key's files
    are held at a time."""
    for key, group in itertools.groupby(rows, key=lambda row: row[0][0]):
        images: list = []
        masks: list = []
        listed: list = []
        for (_, role, _), source in group:
            {Role.IMAGE: images, Role.MASK: masks}.get(role, listed).append(source)
        yield resolve_pair(key, images, masks, annotations, skip_unlabeled, listed)


@dataclasses.dataclass(frozen=True)
class StagedEntries:
    """A listing's outcome on disk, for the job to read in parallel: record files of pickled
    pairs and of pickled rejects (transforms/spill.py), each record at most `record_limit`
    bytes."""

    pair_files: tuple[str, ...]
    reject_files: tuple[str, ...]
    record_limit: int
