"""Class-id outputs read back independently of the writer, and small COCO sets, for the tests.

Stored masks are decoded straight from the shards with Pillow; statistics are recounted with
plain numpy over the source masks; COCO masks are composed from pycocotools' own annToMask.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import tensorflow as tf
from PIL import Image

from tests.helpers.images import encode, rgb_jpeg
from transforms.format import features
from transforms.format.naming import METADATA_FILE, REJECTS_FILE


def metadata(output_dir: Path) -> dict:
    return json.loads((Path(output_dir) / METADATA_FILE).read_text())


def write_metadata(output_dir: Path, info: dict) -> None:
    (Path(output_dir) / METADATA_FILE).write_text(json.dumps(info, indent=2))


def rejects(output_dir: Path) -> dict[str, dict]:
    lines = (Path(output_dir) / REJECTS_FILE).read_text().splitlines()
    return {json.loads(line)["key"]: json.loads(line) for line in lines}


def stored_masks(output_dir: Path) -> dict[str, tuple[str, np.ndarray]]:
    """key -> (split, class ids) of every record, decoded from the PNG bytes with Pillow."""
    found = {}
    for split, info in metadata(output_dir)["splits"].items():
        for shard in info["shards"]:
            for raw in tf.data.TFRecordDataset(str(Path(output_dir) / shard["file"])):
                example = tf.train.Example.FromString(raw.numpy())
                feature = example.features.feature
                key = feature[features.KEY].bytes_list.value[0].decode()
                encoded = feature[features.MASK].bytes_list.value[0]
                image = Image.open(io.BytesIO(encoded))
                assert image.format == "PNG" and image.mode in ("L", "I;16"), key
                assert key not in found, f"{key} stored twice"
                found[key] = (split, np.asarray(image))
    return found


def direct_stats(masks: Iterable[np.ndarray], num_classes: int, ignore: int) -> dict:
    """The `classes.splits.<split>` dict, counted the plain way: a comparison per class."""
    pixels, images, image_pixels = [0] * num_classes, [0] * num_classes, [0] * num_classes
    ignored = count = 0
    for mask in masks:
        count += 1
        labelled = int((mask != ignore).sum())
        ignored += int((mask == ignore).sum())
        for c in range(num_classes):
            n = int((mask == c).sum())
            pixels[c] += n
            images[c] += n > 0
            image_pixels[c] += labelled if n else 0
    return {
        "pixels": pixels,
        "images": images,
        "image_pixels": image_pixels,
        "ignored_pixels": ignored,
        "num_images": count,
    }


def check_output(output_dir: Path, expected: Mapping[str, np.ndarray]) -> dict:
    """Every accepted key's stored mask equals its source ids, pixel for pixel, and each
    split's statistics equal a direct count over those source masks; the metadata."""
    info = metadata(output_dir)
    stored = stored_masks(output_dir)
    assert sorted(stored) == sorted(expected)
    for key, (_, ids) in stored.items():
        source = expected[key]
        assert ids.shape == source.shape, key
        np.testing.assert_array_equal(ids, source, err_msg=key)
    classes = info["classes"]
    for split, stats in classes["splits"].items():
        masks = [expected[key] for key, (where, _) in stored.items() if where == split]
        assert stats == direct_stats(masks, classes["num_classes"], classes["ignore_index"]), split
    return info


# --- COCO -------------------------------------------------------------------------------------

COCO_HEIGHT, COCO_WIDTH = 40, 50
# Category ids neither contiguous nor sorted in the file: class ids follow ascending coco ids.
COCO_CATEGORIES = [
    {"id": 9, "name": "kite", "supercategory": "sports"},
    {"id": 2, "name": "bicycle", "supercategory": "vehicle"},
    {"id": 5, "name": "airplane", "supercategory": "vehicle"},
]


def _box_rle(top: int, left: int, bottom: int, right: int) -> dict:
    from pycocotools import mask as mask_utils

    mask = np.zeros((COCO_HEIGHT, COCO_WIDTH), dtype=np.uint8, order="F")
    mask[top:bottom, left:right] = 1
    encoded = mask_utils.encode(mask)
    return {"size": encoded["size"], "counts": encoded["counts"].decode("ascii")}


def write_coco_set(image_dir: Path, annotations: Path) -> dict[str, str]:
    """A COCO file and its image folder with every kind of entry; key -> expected outcome
    ("ok" or a reject reason). Annotations cover polygons in two parts, compressed RLE,
    crowds, overlaps and an orphan; one image record names a .gif."""
    image_dir.mkdir(parents=True, exist_ok=True)
    images, outcome = [], {}
    for index in range(6):
        name = f"{index:04d}.jpg"
        (image_dir / name).write_bytes(rgb_jpeg(COCO_HEIGHT, COCO_WIDTH, seed=index))
        images.append({"id": 100 + index, "file_name": name, "height": 40, "width": 50})
        outcome[f"{index:04d}"] = "ok"
    sub = image_dir / "sub"
    sub.mkdir()
    (sub / "0006.png").write_bytes(encode(Image.new("RGB", (COCO_WIDTH, COCO_HEIGHT)), "PNG"))
    images.append({"id": 106, "file_name": "sub/0006.png", "height": 40, "width": 50})
    outcome["sub/0006"] = "ok"
    # The JSON says 40 tall; the file is 30 tall.
    (image_dir / "short.jpg").write_bytes(rgb_jpeg(30, COCO_WIDTH, seed=9))
    images.append({"id": 200, "file_name": "short.jpg", "height": 40, "width": 50})
    outcome["short"] = "size_mismatch"
    images.append({"id": 201, "file_name": "gone.jpg", "height": 40, "width": 50})
    outcome["gone"] = "missing_image"
    (image_dir / "extra.jpg").write_bytes(rgb_jpeg(COCO_HEIGHT, COCO_WIDTH, seed=3))
    outcome["extra"] = "missing_mask"
    (image_dir / "swap.png").write_bytes(encode(Image.new("RGB", (COCO_WIDTH, COCO_HEIGHT)), "PNG"))
    images.append({"id": 202, "file_name": "swap.jpg", "height": 40, "width": 50})
    outcome["swap"] = "missing_image"
    images.append({"id": 203, "file_name": "anim.gif", "height": 40, "width": 50})
    outcome[f"{os.path.abspath(annotations)}#anim.gif"] = "unrecognized_file"

    big = [4, 4, 45, 4, 45, 35, 4, 35]  # 41 x 31
    small = [10, 10, 20, 10, 20, 18, 10, 18]
    annotations_list = [
        # 0000: a small object drawn first in the file, a large one over it: largest first.
        {"image_id": 100, "category_id": 2, "segmentation": [small]},
        {"image_id": 100, "category_id": 9, "segmentation": [big]},
        # 0001: a polygon in two parts, and an RLE box overlapping it.
        {"image_id": 101, "category_id": 5, "segmentation": [small, [30, 5, 40, 5, 40, 15]]},
        {"image_id": 101, "category_id": 9, "segmentation": _box_rle(12, 15, 30, 35)},
        # 0002: a crowd with an individually annotated object inside it.
        {"image_id": 102, "category_id": 2, "iscrowd": 1, "segmentation": _box_rle(0, 0, 40, 25)},
        {"image_id": 102, "category_id": 5, "segmentation": [[2.5, 3.5, 12.25, 3.5, 12.25, 9.75]]},
        # 0003: fractional coordinates; 0004 and 0005 have no annotations at all.
        {"image_id": 103, "category_id": 5, "segmentation": [[0.4, 0.6, 49.6, 0.2, 25.3, 39.9]]},
        {"image_id": 106, "category_id": 9, "segmentation": [big]},
        {"image_id": 200, "category_id": 9, "segmentation": [big]},
        {"image_id": 999, "category_id": 9, "segmentation": [big]},  # orphan: no such image
    ]
    for number, annotation in enumerate(annotations_list):
        annotation.update(id=number + 1, area=1.0, bbox=[0, 0, 1, 1])
        annotation.setdefault("iscrowd", 0)
    annotations.parent.mkdir(parents=True, exist_ok=True)
    annotations.write_text(
        json.dumps(
            {"images": images, "annotations": annotations_list, "categories": COCO_CATEGORIES}
        )
    )
    return outcome


def expected_coco_masks(annotations: Path, *, background: bool, ignore: int = 255) -> dict:
    """key -> class ids, composed from pycocotools' COCO.annToMask: largest first by area
    (file order among equals), crowds as the ignore index."""
    from pycocotools.coco import COCO
    from pycocotools.mask import area

    coco = COCO(str(annotations))
    first = 1 if background else 0
    class_of = {cat: first + n for n, cat in enumerate(sorted(coco.getCatIds()))}
    masks = {}
    for image_id, image in coco.imgs.items():
        name = image["file_name"]
        if name in ("short.jpg", "gone.jpg", "swap.jpg", "anim.gif"):
            continue
        ids = np.full((image["height"], image["width"]), 0 if background else ignore, np.uint8)
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[image_id]))
        sizes = [int(area(coco.annToRLE(a))) for a in anns]
        for index in sorted(range(len(anns)), key=lambda i: -sizes[i]):
            value = ignore if anns[index]["iscrowd"] else class_of[anns[index]["category_id"]]
            ids[coco.annToMask(anns[index]) == 1] = value
        masks[name.rsplit(".", 1)[0]] = ids
    return masks
