"""Every mask source by name: adding a source is its module plus one line here (an annotation
tool is not a source of its own: transforms/sources/tools.py)."""

from __future__ import annotations

from transforms.sources.base import MaskSource
from transforms.sources.mask_files import BINARY_FILES, CLASS_FILES
from transforms.sources.rasterize import AnnotationSource

SOURCES: dict[str, MaskSource] = {
    source.name: source
    for source in (
        BINARY_FILES,
        CLASS_FILES,
        AnnotationSource(),  # every annotation tool's (transforms/sources/tools.py)
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
