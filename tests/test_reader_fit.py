"""image_size as an int, and resize="fit" (aspect kept, padded) in every reader: RecordSource,
PyTorch, Grain and tf.data put the record on the same pixels and pad images with 0, class
ids with the ignore index and 0/1 masks with 0 (with `valid` marking the record)."""

from __future__ import annotations

import numpy as np
import pytest

from shard_reader.resizing import fit_geometry
from shard_reader.source import RecordSource
from tests.helpers.handmade import write_output

SIZE = 64


@pytest.fixture(scope="module")
def binary_mixed(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fit") / "out"
    write_output(directory, [[(40, 32), (32, 40)], [(48, 24), (30, 30)]])
    return directory


def inside(stored, size=(SIZE, SIZE)) -> np.ndarray:
    fit = fit_geometry(stored, size)
    where = np.zeros(size, bool)
    where[fit.top : fit.top + fit.height, fit.left : fit.left + fit.width] = True
    return where


def test_fit_geometry_keeps_the_aspect_ratio_and_centres():
    assert fit_geometry((40, 32), (64, 64)) == (64, 51, 0, 6)
    assert fit_geometry((36, 44), (64, 64)) == (52, 64, 6, 0)
    assert fit_geometry((375, 500), (256, 256)) == (192, 256, 32, 0)
    assert fit_geometry((10, 1000), (8, 8)) == (1, 8, 3, 0)  # never below one pixel


def test_record_source_fit_pads_class_ids_with_the_ignore_index(class_outputs):
    output = class_outputs["16-bit"].directory
    source = RecordSource(output, "train")
    ignore = source.classes.ignore_index
    for index in range(len(source)):
        stored = source[index]["image"].shape[:2]
        item = source.read_sized(index, SIZE, "fit")
        where = inside(stored)
        assert item["image"].shape == (SIZE, SIZE, 3) and item["mask"].shape == (SIZE, SIZE, 1)
        assert np.array_equal(item["valid"][..., 0].astype(bool), where)
        assert (item["mask"][~where] == ignore).all() and (item["image"][~where] == 0).all()
        ids = set(np.unique(item["mask"][where]).tolist())
        assert ids <= set(np.unique(source[index]["mask"]).tolist())  # nearest: stored ids only


def test_every_reader_fits_the_same_way(class_outputs):
    import tensorflow as tf

    import shard_reader
    from shard_reader.grain import make_loader as grain_loader
    from shard_reader.torch import make_loader as torch_loader

    output = class_outputs["16-bit"].directory
    source = RecordSource(output, "train")
    expected = {}
    for index in range(len(source)):
        item = source.read_sized(index, SIZE, "fit")
        expected[item["key"]] = item
    torch_batches = torch_loader(
        output, "train", 2, num_workers=0, image_size=SIZE, resize="fit", with_valid=True,
        with_keys=True, shuffle=False,
    )  # fmt: skip
    for images, masks, valid, keys in torch_batches:
        for row, key in enumerate(keys):
            assert np.array_equal(images[row].permute(1, 2, 0).numpy(), expected[key]["image"])
            assert np.array_equal(masks[row].permute(1, 2, 0).numpy(), expected[key]["mask"])
            assert np.array_equal(valid[row].permute(1, 2, 0).numpy(), expected[key]["valid"])
    grain_batches = grain_loader(
        output, "train", 2, image_size=SIZE, resize="fit", with_valid=True, shuffle=False
    )
    for batch in grain_batches:
        for row, key in enumerate(batch["key"]):
            assert np.array_equal(batch["mask"][row], expected[str(key)]["mask"])
            assert np.array_equal(batch["valid"][row], expected[str(key)]["valid"])
    dataset = shard_reader.make_dataset(
        str(output), "train", 2, training=False, dtype=tf.uint8, with_keys=True,
        image_size=SIZE, resize="fit",
    )  # fmt: skip
    seen = 0
    for images, masks, keys in dataset.as_numpy_iterator():
        for row, key in enumerate(keys):
            want = expected[key.decode()]
            assert np.array_equal(masks[row], want["mask"])  # nearest ids: to the pixel
            outside = want["valid"][..., 0] == 0
            assert (images[row][outside] == 0).all()
            seen += 1
    assert seen == len(source)


def test_binary_fit_pads_with_0_and_valid_marks_the_record(binary_mixed):
    import tensorflow as tf

    import shard_reader
    from shard_reader.torch import make_loader

    source = RecordSource(binary_mixed, "train")
    stored = {source[i]["key"]: source[i]["image"].shape[:2] for i in range(len(source))}
    loader = make_loader(
        binary_mixed, "train", 2, num_workers=2, image_size=SIZE, resize="fit",
        with_valid=True, with_keys=True,
    )  # fmt: skip
    for images, masks, valid, keys in loader:
        assert valid.shape == masks.shape == (len(keys), 1, SIZE, SIZE)
        for row, key in enumerate(keys):
            where = inside(stored[key])
            assert np.array_equal(valid[row, 0].numpy().astype(bool), where)
            assert (masks[row, 0].numpy()[~where] == 0).all()
            assert (images[row].numpy()[:, ~where] == 0).all()
    dataset = shard_reader.make_dataset(
        str(binary_mixed), "train", 4, training=False, dtype=tf.uint8, with_keys=True,
        image_size=SIZE, resize="fit",
    )  # fmt: skip
    for images, masks, keys in dataset.as_numpy_iterator():
        for row, key in enumerate(keys):
            where = inside(stored[key.decode()])
            assert (masks[row][~where] == 0).all() and (images[row][~where] == 0).all()
            assert masks[row][where].any()  # the record itself is there


def test_an_int_image_size_works_in_every_reader(binary_mixed):
    import tensorflow as tf

    import shard_reader
    from shard_reader.grain import make_loader as grain_loader
    from shard_reader.torch import make_loader as torch_loader

    images, masks = next(iter(torch_loader(binary_mixed, "train", 2, image_size=32)))
    assert images.shape == (2, 3, 32, 32)
    assert next(iter(grain_loader(binary_mixed, "train", 2, image_size=32)))["image"].shape == (
        2, 32, 32, 3,
    )  # fmt: skip
    dataset = shard_reader.make_dataset(
        str(binary_mixed), "train", 2, image_size=32, dtype=tf.uint8
    )
    assert next(iter(dataset))[0].shape == (2, 32, 32, 3)
    batch = RecordSource(binary_mixed, "train").read_batch([0, 1], image_size=32)
    assert batch["image"].shape == (2, 32, 32, 3)


def test_an_empty_split_says_which_and_why(tmp_path):
    from shard_reader.grain import make_loader as grain_loader
    from shard_reader.torch import make_loader as torch_loader

    write_output(tmp_path / "out", [])
    for make in (torch_loader, grain_loader):
        with pytest.raises(ValueError, match="split 'train' .* is empty: metadata.json lists no"):
            make(tmp_path / "out", "train", 2)
