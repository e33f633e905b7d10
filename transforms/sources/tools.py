"""Every annotation tool by name: a new tool is one module plus one line here.

A tool module holds one `TOOL` (transforms/sources/annotations.py: AnnotationTool) named as
its key. --annotation_format's choices, the order detection tries the tools and the
launcher's reader come from here; a module is imported when its tool is asked for, so the
flags' help stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transforms.sources.annotations import AnnotationTool

# name (the --annotation_format value, stored as the run's annotation_format) -> its module
TOOLS: dict[str, str] = {}


def register(name: str, module: str) -> None:
    """List the tool `module` (importable, with a `TOOL` named `name`) under `name`."""
    if name in TOOLS and TOOLS[name] != module:
        raise ValueError(f"annotation tool {name!r} is already {TOOLS[name]}")
    TOOLS[name] = module


register("coco", "transforms.sources.coco")
register("cvat", "transforms.sources.cvat")
register("labelstudio", "transforms.sources.labelstudio")
register("labelme", "transforms.sources.labelme")


def names() -> tuple[str, ...]:
    return tuple(TOOLS)


def get(name: str) -> AnnotationTool:
    """The tool registered under `name`; ValueError naming the known ones otherwise."""
    if name not in TOOLS:
        raise ValueError(f"unknown annotation tool {name!r}; known: {', '.join(TOOLS)}")
    tool = importlib.import_module(TOOLS[name]).TOOL
    if tool.name != name:
        raise ValueError(f"{TOOLS[name]}.TOOL is named {tool.name!r}, registered as {name!r}")
    return tool


def detect(path: str) -> str:
    """The name of the one tool whose export `path` is, from its content alone (a folder, or
    a regular file's first 64 KB and top-level keys); ValueError when none or several match."""
    from transforms.sources.annotations import Head

    head = Head(path)
    tools = [get(name) for name in TOOLS]
    found = [tool for tool in tools if tool.detect(head)]
    if len(found) == 1:
        return found[0].name
    if found:
        both = " and ".join(tool.title for tool in found)
        raise ValueError(f"{path}: ambiguous: looks like {both}; give --annotation_format")
    missed = "; ".join(f"not {tool.title} ({tool.looks_for})" for tool in tools)
    raise ValueError(
        f"{path}: not an annotation format segprep knows: {missed}; give --annotation_format"
    )
