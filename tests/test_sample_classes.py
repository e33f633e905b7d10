"""`segprep sample-data --classes N`: a VOC-like multi-class set, broken on purpose."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from beam_pipeline.cli import main
from beam_pipeline.commands.sample_data import CLASS_BREAKAGES, voc_palette, write_sample_data
from transforms.class_stats import mask_stats, sum_stats
from transforms.codecs.class_mask import ClassMaskSettings, load_class_mask
from transforms.codecs.image import validate_image
from transforms.rejects import Reason, RejectError

N = 7


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("classes")
    return write_sample_data(
        root, count=40, seed=3, broken_fraction=0.25, height=96, width=72, classes=N
    )


def _reason(call, *args) -> Reason | None:
    try:
        call(*args)
    except RejectError as error:
        return error.reason
    return None


def test_every_breakage_kind_is_there_and_gives_its_reason(sample):
    settings = ClassMaskSettings("classes", N)
    assert set(sample.broken.values()) == set(CLASS_BREAKAGES)
    for key, kind in sample.broken.items():
        image_path = sample.image_dir / f"{key}.jpg"
        mask_path = sample.mask_dir / f"{key}.png"
        expected = CLASS_BREAKAGES[kind]
        if expected == Reason.MISSING_MASK:
            assert image_path.exists() and not mask_path.exists()
            continue
        if expected == Reason.MISSING_IMAGE:
            assert mask_path.exists() and not image_path.exists()
            continue
        image_reason = _reason(validate_image, image_path.read_bytes())
        mask_reason = _reason(load_class_mask, mask_path.read_bytes(), mask_path.name, settings)
        if expected == Reason.SIZE_MISMATCH:
            image = validate_image(image_path.read_bytes())
            mask = load_class_mask(mask_path.read_bytes(), mask_path.name, settings)
            assert mask.shape != (image.height, image.width)
        else:
            assert expected in (image_reason, mask_reason), (key, kind)
    assert sample.breakages == CLASS_BREAKAGES
    assert sample.planted == () and sample.planted_lines() == []  # copies: portraits only


def test_the_out_of_range_id_is_named_in_the_reject(sample):
    key = next(k for k, kind in sample.broken.items() if kind == "out_of_range_class")
    data = (sample.mask_dir / f"{key}.png").read_bytes()
    with pytest.raises(RejectError) as caught:
        load_class_mask(data, "m.png", ClassMaskSettings("classes", N))
    assert caught.value.reason == Reason.MASK_VALUES and f"{{{N}}}" in caught.value.detail


def test_good_masks_are_voc_palette_pngs_with_objects_and_boundaries(sample):
    settings = ClassMaskSettings("classes", N)
    good = [f"{i + 1:05d}" for i in range(sample.count) if f"{i + 1:05d}" not in sample.broken]
    with_ignore = 0
    for key in good:
        data = (sample.mask_dir / f"{key}.png").read_bytes()
        raw = Image.open(io.BytesIO(data))
        assert raw.mode == "P" and raw.getpalette()[: 3 * 256] == voc_palette()
        ids = load_class_mask(data, "m.png", settings)
        image = validate_image((sample.image_dir / f"{key}.jpg").read_bytes())
        assert ids.shape == (image.height, image.width) == (96, 72)
        values = set(np.unique(ids).tolist())
        assert values <= set(range(N)) | {255}
        assert len(values - {0, 255}) >= 1  # objects on the background
        with_ignore += 255 in values
    assert with_ignore >= len(good) // 2


def test_statistics_of_the_sample_equal_a_direct_count(sample):
    settings = ClassMaskSettings("classes", N)
    masks = []
    for path in sorted(sample.mask_dir.iterdir()):
        try:
            masks.append(load_class_mask(path.read_bytes(), path.name, settings))
        except RejectError:
            continue
    total = sum_stats((mask_stats(m, N, 255) for m in masks), N)
    everything = np.concatenate([m.ravel() for m in masks])
    values, counts = np.unique(everything, return_counts=True)
    direct = dict(zip(values.tolist(), counts.tolist(), strict=True))
    assert list(total.pixels) == [direct.get(c, 0) for c in range(N)]
    assert total.ignored_pixels == direct.get(255, 0) > 0
    assert list(total.images) == [sum(int((m == c).any()) for m in masks) for c in range(N)]


def test_same_seed_same_files(tmp_path):
    first = write_sample_data(tmp_path / "a", count=6, seed=5, height=48, width=40, classes=4)
    second = write_sample_data(tmp_path / "b", count=6, seed=5, height=48, width=40, classes=4)
    for folder in ("images", "masks"):
        names = sorted(p.name for p in (tmp_path / "a" / folder).iterdir())
        assert names == sorted(p.name for p in (tmp_path / "b" / folder).iterdir())
        for name in names:
            a = (tmp_path / "a" / folder / name).read_bytes()
            assert a == (tmp_path / "b" / folder / name).read_bytes()
    assert first.broken == second.broken


def test_cli_writes_a_class_set(tmp_path, capsys):
    assert main(["sample-data", str(tmp_path / "s"), "--count", "8", "--classes", "5"]) == 0
    out = capsys.readouterr().out
    assert "wrote 8 entries" in out and "out_of_range_class" in out
    assert sorted(p.suffix for p in (tmp_path / "s" / "masks").iterdir()) == [".png"] * 8


@pytest.mark.parametrize("value", ["1", "255", "0"])
def test_cli_refuses_class_counts_a_palette_cannot_hold(tmp_path, capsys, value):
    assert main(["sample-data", str(tmp_path / "s"), "--classes", value]) == 2
    err = capsys.readouterr().err
    assert "--classes must be from 2 to 254" in err and len(err.strip().splitlines()) == 1
