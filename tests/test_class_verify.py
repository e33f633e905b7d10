"""`segprep verify` on class-id outputs: sound ones pass (8- and 16-bit); a mask value that is no
class id, an id changed into another, a mask of another bit depth and a tampered statistic are
each reported on their own line."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from beam_pipeline import cli
from beam_pipeline.commands.verify import verify_output
from tests.helpers.class_outputs import metadata, write_metadata
from tests.helpers.class_reader_outputs import (
    BIG_CLASSES,
    SAMPLE_CLASSES,
    png,
    rewrite_first_mask,
)


@pytest.fixture(scope="module")
def outputs(class_outputs):
    return class_outputs


@pytest.fixture(params=["8-bit", "16-bit"])
def copy(request, outputs, tmp_path):
    """A private copy of one output, safe to damage."""
    target = tmp_path / "out"
    shutil.copytree(outputs[request.param].directory, target)
    return target


def test_sound_class_outputs_pass(outputs, capsys):
    for output in outputs.values():
        assert verify_output(str(output.directory)) == []
        assert cli.main(["verify", str(output.directory)]) == 0
        line = capsys.readouterr().out.strip()
        assert line.startswith("OK ") and "class ids, class statistics" in line


def test_a_value_that_is_no_class_id_is_reported(copy):
    classes = metadata(copy)["classes"]
    n, ignore = classes["num_classes"], classes["ignore_index"]
    bad = SAMPLE_CLASSES if n == SAMPLE_CLASSES else BIG_CLASSES + 7

    def tamper(ids):
        ids = ids.copy()
        ids[5:8, 5:9] = bad  # 12 pixels, next to valid ids
        return png(ids)

    key = rewrite_first_mask(copy, tamper)
    problems = verify_output(str(copy))
    assert len(problems) == 1, problems
    assert (
        f"(key {key}): 12 mask pixels hold {{{bad}}}: neither class ids (0-{n - 1}) "
        in (problems[0])
    )
    assert problems[0].endswith(f"nor the ignore index {ignore}")


def test_an_id_changed_into_another_shows_in_the_statistics(copy):
    n = metadata(copy)["classes"]["num_classes"]

    def tamper(ids):
        present = [value for value in np.unique(ids).tolist() if value < n]
        assert len(present) > 1
        ids = ids.copy()
        ids[ids == present[-1]] = present[0]  # a valid id everywhere another one was
        return png(ids)

    rewrite_first_mask(copy, tamper)
    problems = verify_output(str(copy))
    assert len(problems) == 1, problems
    assert problems[0].startswith(
        "metadata.json: class statistics of split 'train' differ from its masks: pixels["
    )
    assert " in metadata.json, " in problems[0] and " counted" in problems[0]


def test_a_mask_of_another_bit_depth_is_reported(copy):
    depth = metadata(copy)["classes"]["png_bit_depth"]
    other = np.uint16 if depth == 8 else np.uint8
    key = rewrite_first_mask(copy, lambda ids: png((ids.astype(np.uint16) % 256).astype(other)))
    problems = verify_output(str(copy))
    assert problems == [
        problem
        for problem in problems
        if f"(key {key}): class mask is a {24 - depth}-bit PNG of colour type 0, metadata.json "
        f"says {depth}-bit grey (colour type 0)" in problem
    ]
    assert len(problems) == 1


@pytest.mark.parametrize(
    "field, change",
    [("pixels", 5), ("images", -1), ("image_pixels", 3), ("ignored_pixels", 1), ("num_images", 1)],
)
def test_a_tampered_statistic_is_reported(copy, field, change):
    info = metadata(copy)
    stats = info["classes"]["splits"]["train"]
    if isinstance(stats[field], list):
        present = int(np.flatnonzero(np.array(stats["pixels"]))[-1])
        said = stats[field][present] + change
        stats[field][present] = said
        named = f"{field}[{present}] {said} in metadata.json, {said - change} counted"
    else:
        said = stats[field] + change
        stats[field] = said
        named = f"{field} {said} in metadata.json, {said - change} counted"
    write_metadata(copy, info)
    assert verify_output(str(copy)) == [
        f"metadata.json: class statistics of split 'train' differ from its masks: {named}"
    ]


def test_missing_and_extra_statistics_are_reported(copy):
    info = metadata(copy)
    splits = info["classes"]["splits"]
    splits["test"] = splits.pop("validation")
    write_metadata(copy, info)
    problems = verify_output(str(copy))
    assert "metadata.json: classes has no statistics for split 'validation'" in problems
    assert "metadata.json: classes has statistics for split 'test', not a split" in problems


def test_an_inconsistent_classes_section_is_reported_not_trusted(copy):
    info = metadata(copy)
    depth = info["classes"]["png_bit_depth"]
    info["classes"]["png_bit_depth"] = 24 - depth
    write_metadata(copy, info)
    problems = verify_output(str(copy))
    assert problems[0].startswith(f"metadata.json classes: png_bit_depth {24 - depth}, but")
    assert problems[0].endswith(": class ids and statistics not checked")
    # The masks are not read at the wrong depth: no line per record follows.
    assert not any("mask pixels" in problem or "class mask" in problem for problem in problems)
