"""Every mask source by name: adding a source is its module plus one line here."""

from __future__ import annotations

from transforms.sources.base import MaskSource
from transforms.sources.class_files import ClassMaskFiles
from transforms.sources.coco import CocoSource
from transforms.sources.cvat import CvatSource
from transforms.sources.labelme import LabelmeSource
from transforms.sources.labelstudio import LabelStudioSource
from transforms.sources.mask_files import BinaryMaskFiles

SOURCES: dict[str, MaskSource] = {
    source.name: source
    for source in (
        BinaryMaskFiles(),
        ClassMaskFiles(),
        CocoSource(),
        CvatSource(),
        LabelStudioSource(),
        LabelmeSource(),
    )
}


def get(name: str) -> MaskSource:
    """The source registered under `name`; ValueError naming the known ones otherwise."""
    try:
        return SOURCES[name]
    except KeyError:
        raise ValueError(
            f"unknown mask source {name!r}; known: {', '.join(sorted(SOURCES))}"
        ) from None
