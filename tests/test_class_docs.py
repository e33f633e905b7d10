"""docs/classes.md shows files and metadata as the code reads and writes them."""

from __future__ import annotations

import re
from pathlib import Path

from segcore.class_masks import class_mask_settings, parse_class_names, parse_colormap
from segcore.class_stats import ClassStats, classes_section

DOC = (Path(__file__).resolve().parent.parent / "docs" / "classes.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, re.S)


def test_the_example_files_parse():
    names = parse_class_names(_blocks("text")[0], "names.txt")
    assert names == ("background", "aeroplane", "bicycle")
    colormap = parse_colormap(_blocks("json")[0], "colormap.json")
    assert [name for name, _ in colormap] == ["sky", "building", "road", "car"]


def test_the_metadata_example_has_the_sections_keys():
    settings = class_mask_settings("classes", num_classes=21)
    section = classes_section(settings, {"train": ClassStats.empty(21)})
    example = _blocks("json")[1]
    for key in [*section, *section["splits"]["train"]]:
        assert f'"{key}"' in example, key
