"""COCO annotations: rasterised exactly as pycocotools' own annToMask composes them."""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

from transforms.codecs.class_mask import ClassMaskSettings, class_mask_settings
from transforms.rejects import Reason, RejectError
from transforms.sources.annotations import image_from_payload, image_payload
from transforms.sources.coco import read_coco
from transforms.sources.rasterize import draw_order, rasterize

# pycocotools' own decode trips a numpy 2 deprecation (filtered in transforms.sources.rasterize, but
# pytest
# shows every DeprecationWarning again).
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")

H, W = 40, 50


def _rle(mask: np.ndarray) -> dict:
    encoded = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": encoded["size"], "counts": encoded["counts"].decode("ascii")}


def _uncompressed_rle(mask: np.ndarray) -> dict:
    flat = mask.astype(np.uint8).ravel(order="F").tolist()
    counts, value, run = [], 0, 0
    for pixel in flat:
        if pixel == value:
            run += 1
        else:
            counts.append(run)
            value, run = pixel, 1
    counts.append(run)
    return {"size": list(mask.shape), "counts": counts}


def _box(top: int, left: int, bottom: int, right: int) -> np.ndarray:
    mask = np.zeros((H, W), dtype=bool)
    mask[top:bottom, left:right] = True
    return mask


def _annotations_file() -> dict:
    """Hand-made: polygons (one and two parts), compressed and uncompressed RLE, crowds,
    overlaps in both file orders, category ids neither contiguous nor sorted in the file."""
    annotations = [
        # image 1: a small triangle listed BEFORE the big polygon it lies on
        {"id": 10, "image_id": 1, "category_id": 7, "segmentation": [[20, 10, 30, 10, 25, 18]]},
        {
            "id": 11,
            "image_id": 1,
            "category_id": 3,
            "segmentation": [[2, 2, 45, 3, 44, 35, 3, 36]],
            "iscrowd": 0,
        },
        {  # two parts, one partly outside the image
            "id": 12,
            "image_id": 1,
            "category_id": 90,
            "segmentation": [[5, 30, 15, 30, 15, 39], [40.5, 30.2, 52, 30, 52, 41, 40, 41]],
        },
        {  # a crowd (uncompressed RLE, as COCO stores crowds) over part of the big polygon
            "id": 13,
            "image_id": 1,
            "category_id": 3,
            "segmentation": _uncompressed_rle(_box(20, 5, 28, 20)),
            "iscrowd": 1,
        },
        {  # compressed RLE, not a crowd
            "id": 14,
            "image_id": 1,
            "category_id": 7,
            "segmentation": _rle(_box(0, 30, 8, 48)),
            "iscrowd": 0,
        },
        # image 2: crowd listed first; a small object inside it; equal areas in file order
        {
            "id": 20,
            "image_id": 2,
            "category_id": 90,
            "segmentation": _rle(_box(0, 0, 30, 30)),
            "iscrowd": 1,
        },
        {"id": 21, "image_id": 2, "category_id": 3, "segmentation": _rle(_box(5, 5, 10, 10))},
        {"id": 22, "image_id": 2, "category_id": 7, "segmentation": _rle(_box(32, 0, 36, 10))},
        {"id": 23, "image_id": 2, "category_id": 3, "segmentation": _rle(_box(32, 0, 36, 10))},
    ]
    return {
        "info": {"description": "hand-made"},
        "images": [
            {"id": 1, "file_name": "a/000001.jpg", "height": H, "width": W},
            {"id": 2, "file_name": "000002.jpg", "height": H, "width": W, "license": 3},
            {"id": 3, "file_name": "000003.jpg", "height": H, "width": W},  # no annotations
        ],
        "annotations": annotations,
        "categories": [
            {"id": 90, "name": "toothbrush", "supercategory": "indoor"},
            {"id": 3, "name": "car", "supercategory": "vehicle"},
            {"id": 7, "name": "train", "supercategory": "vehicle"},
        ],
    }


def _write(tmp_path, data, name="instances.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def read_coco_file(path: str, **settings):
    """`read_coco` of a local file."""
    return read_coco(lambda: open(path, "rb"), path, **settings)


def _images(dataset) -> dict:
    """Every staged image by file_name, all in memory."""
    return {name: image_from_payload(payload) for _, name, payload in dataset.staged()}


def _settings(dataset, ignore_index: int | None = None) -> ClassMaskSettings:
    return class_mask_settings(
        "classes", class_names=dataset.class_names, ignore_index=ignore_index
    )


def _reference(path: str, image_id: int, class_of: dict, fill: int, ignore: int) -> np.ndarray:
    """pycocotools' own masks (COCO.annToMask), painted in the documented order."""
    with contextlib.redirect_stdout(io.StringIO()):
        api = COCO(path)
    annotations = api.loadAnns(api.getAnnIds(imgIds=[image_id], iscrowd=None))
    areas = [int(mask_utils.area(api.annToRLE(a))) for a in annotations]
    order = sorted(range(len(annotations)), key=lambda i: -areas[i])  # stable: file order
    info = api.imgs[image_id]
    mask = np.full((info["height"], info["width"]), fill, dtype=np.uint8)
    for index in order:
        annotation = annotations[index]
        value = ignore if annotation.get("iscrowd") else class_of[annotation["category_id"]]
        mask[api.annToMask(annotation) == 1] = value
    return mask


@pytest.mark.parametrize("unlabeled", ["background", "ignore"])
def test_rasterisation_equals_ann_to_mask_composition(tmp_path, unlabeled):
    path = _write(tmp_path, _annotations_file())
    dataset = read_coco_file(path, unlabeled=unlabeled)
    settings = _settings(dataset)
    fill = dataset.fill_value(settings.ignore_index)
    class_of = {c["coco_id"]: c["class_id"] for c in dataset.metadata()["categories"]}
    for image in _images(dataset).values():
        mask = rasterize(image, H, W, settings, fill)
        expected = _reference(path, image.image_id, class_of, fill, settings.ignore_index)
        np.testing.assert_array_equal(mask, expected)
        assert mask.dtype == np.uint8


def test_category_ids_map_to_contiguous_class_ids(tmp_path):
    dataset = read_coco_file(_write(tmp_path, _annotations_file()))
    assert [(c["coco_id"], c["class_id"], c["name"]) for c in dataset.metadata()["categories"]] == [
        (3, 1, "car"),
        (7, 2, "train"),
        (90, 3, "toothbrush"),
    ]
    assert dataset.class_names == ("background", "car", "train", "toothbrush")
    settings = _settings(dataset)
    assert (settings.num_classes, settings.ignore_index) == (4, 255)
    metadata = json.loads(json.dumps(dataset.metadata()))
    assert metadata["categories"][2] == {
        "coco_id": 90,
        "class_id": 3,
        "name": "toothbrush",
        "supercategory": "indoor",
    }
    assert (metadata["num_annotations"], metadata["orphan_annotations"]) == (9, 0)
    ignoring = read_coco_file(_write(tmp_path, _annotations_file()), unlabeled="ignore")
    assert ignoring.class_names == ("car", "train", "toothbrush")
    assert [c["class_id"] for c in ignoring.metadata()["categories"]] == [0, 1, 2]


def test_small_objects_are_drawn_over_large_ones_whatever_the_file_order(tmp_path):
    dataset = read_coco_file(_write(tmp_path, _annotations_file()))
    settings = _settings(dataset)
    mask = rasterize(_images(dataset)["a/000001.jpg"], H, W, settings, 0)
    assert mask[13, 25] == 2  # the triangle (train), listed before the big car polygon
    assert mask[24, 10] == 255  # the crowd over the big polygon is ignore
    assert mask[25, 30] == 1  # the big polygon elsewhere
    second = rasterize(_images(dataset)["000002.jpg"], H, W, settings, 0)
    assert second[7, 7] == 1  # a small car inside a large crowd keeps its class
    assert second[20, 20] == 255  # the rest of the crowd is ignore
    assert second[33, 5] == 1  # equal areas: file order, the later annotation on top
    empty = rasterize(_images(dataset)["000003.jpg"], H, W, settings, 0)
    assert not empty.any()


def test_draw_order_is_by_rasterised_area_then_file_order():
    rles = [_rle(_box(0, 0, 2, 2)), _rle(_box(0, 0, 5, 5)), _rle(_box(9, 9, 11, 11))]
    assert draw_order(rles) == [1, 0, 2]
    assert draw_order([]) == []


def test_an_image_of_256_annotations_is_drawn_largest_first(tmp_path):
    """pycocotools' area of a list of 256 or more RLEs fails under numpy 2 ("Python integer
    256 out of bounds for uint8"): a valid image was a mask_unreadable reject."""
    big = {"id": 0, "image_id": 1, "category_id": 1, "segmentation": _rle(_box(0, 0, 30, 40))}
    triangles = [
        {"id": 1 + i, "image_id": 1, "category_id": 2, "segmentation": [[1, 1, 3, 1, 2, 3]]}
        for i in range(259)
    ]
    data = {
        "images": [{"id": 1, "file_name": "a.jpg", "height": H, "width": W}],
        "annotations": [*triangles, big],  # the big one last: painted first all the same
        "categories": [{"id": 1, "name": "car"}, {"id": 2, "name": "cat"}],
    }
    dataset = read_coco_file(_write(tmp_path, data))
    mask = rasterize(_images(dataset)["a.jpg"], H, W, _settings(dataset), 0)
    assert (mask[:5, :5] == 2).any() and mask[20, 20] == 1 and mask[35, 45] == 0
    rles = [_rle(_box(0, 0, 1 + i % 7, 1 + i % 5)) for i in range(300)]
    areas = [(1 + i % 7) * (1 + i % 5) for i in range(300)]
    assert draw_order(rles) == sorted(range(300), key=lambda i: -areas[i])


def test_records_travel_by_pickle(tmp_path):
    dataset = read_coco_file(_write(tmp_path, _annotations_file()))
    image = _images(dataset)["a/000001.jpg"]
    settings = _settings(dataset)
    copy = pickle.loads(pickle.dumps(image))
    np.testing.assert_array_equal(
        rasterize(copy, H, W, settings, 0), rasterize(image, H, W, settings, 0)
    )


@pytest.mark.parametrize("name", ["a/000001.jpg", "000002.jpg", "000003.jpg"])
def test_records_travel_as_json_lines_unchanged(tmp_path, name):
    """The staged line parses back to a record that rasterises to the same mask: polygons
    (float64 through shortest repr), compressed and uncompressed RLE, crowds, no annotations."""
    dataset = read_coco_file(_write(tmp_path, _annotations_file()))
    image = _images(dataset)[name]
    line = image_payload(image)
    assert "\n" not in line and line.isascii()
    copy = image_from_payload(line)
    assert (copy.file_name, copy.image_id, copy.height, copy.width) == (
        name,
        *[getattr(image, field) for field in ("image_id", "height", "width")],
    )
    assert len(copy.annotations) == len(image.annotations)
    for theirs, ours in zip(copy.annotations, image.annotations, strict=True):
        for polygon, original in zip(theirs.polygons, ours.polygons, strict=True):
            assert polygon.dtype == np.float64 and np.array_equal(polygon, original)
    settings = _settings(dataset)
    np.testing.assert_array_equal(
        rasterize(copy, H, W, settings, 255), rasterize(image, H, W, settings, 255)
    )


def test_a_problem_travels_with_its_record(tmp_path):
    data = _annotations_file()
    data["annotations"].append({"id": 99, "image_id": 2, "category_id": 5, "segmentation": []})
    image = _images(read_coco_file(_write(tmp_path, data)))["000002.jpg"]
    with pytest.raises(RejectError, match="annotation 99"):
        rasterize(
            image_from_payload(image_payload(image)), H, W, ClassMaskSettings("classes", 4), 0
        )


@pytest.mark.parametrize("line", ["", "{}", "[1]", '{"file_name": "a.jpg"}', "not json"])
def test_a_line_it_did_not_write_is_a_value_error(line):
    with pytest.raises(ValueError, match="not a staged annotated image record"):
        image_from_payload(line)


def test_the_real_image_size_decides_and_must_agree(tmp_path):
    dataset = read_coco_file(_write(tmp_path, _annotations_file()))
    with pytest.raises(RejectError) as caught:
        rasterize(_images(dataset)["000002.jpg"], H + 1, W, _settings(dataset), 0)
    assert caught.value.reason == Reason.SIZE_MISMATCH


def test_sixteen_bit_class_ids(tmp_path):
    data = _annotations_file()
    data["categories"] += [{"id": 1000 + i, "name": f"extra{i}"} for i in range(300)]
    data["annotations"][0]["category_id"] = 1299
    dataset = read_coco_file(_write(tmp_path, data))
    settings = _settings(dataset, ignore_index=65535)
    mask = rasterize(_images(dataset)["a/000001.jpg"], H, W, settings, 0)
    assert mask.dtype == np.uint16 and mask[13, 25] == 303 and mask[24, 10] == 65535


# --- annotations that cannot be drawn make their image a reject --------------------------------


def _one_annotation(tmp_path, **annotation):
    data = _annotations_file()
    data["annotations"] = [{"id": 99, "image_id": 3, "category_id": 3, **annotation}]
    dataset = read_coco_file(_write(tmp_path, data))
    with pytest.raises(RejectError) as caught:
        rasterize(_images(dataset)["000003.jpg"], H, W, _settings(dataset), 0)
    return caught.value


@pytest.mark.parametrize(
    "annotation, words",
    [
        ({"category_id": 5, "segmentation": [[0, 0, 9, 0, 9, 9]]}, "category_id 5"),
        ({"segmentation": [[0, 0, 9, 0, 9]]}, "odd number"),
        ({"segmentation": [[0, 0, "9", 0, 9, 9]]}, "list of numbers"),
        ({"segmentation": [[0, 0, None, 0, 9, 9]]}, "list of numbers"),
        ({"segmentation": [[0, 0, [1], 0, 9, 9]]}, "list of numbers"),
        ({"segmentation": [[True, False, True, False, True, False]]}, "list of numbers"),
        ({"segmentation": "polygon"}, "list of polygons or an RLE"),
        ({"segmentation": {"size": [H, W], "counts": [1, -2]}}, "non-negative"),
        ({"segmentation": {"size": [H, W], "counts": [10**12, 5]}}, "a run of 2**32 pixels"),
        ({"segmentation": {"size": [H], "counts": "abc"}}, "[height, width]"),
        ({"segmentation": [[0, 0, 9, 0, 9, 9]], "iscrowd": 2}, "iscrowd"),
    ],
)
def test_malformed_annotations_reject_their_image(tmp_path, annotation, words):
    error = _one_annotation(tmp_path, **annotation)
    assert error.reason == Reason.MASK_UNREADABLE
    assert "annotation 99" in error.detail and words in error.detail


@pytest.mark.parametrize(
    "segmentation, words",
    [
        ([[0, 0, 1e12, 0, 1e12, 1e12]], "far outside"),  # crashes pycocotools unchecked
        ([[0, 0, 1e7, 0, 1e7, 1e7]], "far outside"),  # seconds and hundreds of MB unchecked
        ([[-60, 0, 9, 0, 9, 9]], "far outside"),
        ([[0, 0, W, 0] + [W, H, 0, H] * 400], "outlines longer"),  # a zigzag
        ({"size": [H, W], "counts": "01:00"}, "cover"),  # runs end early: garbage pixels
        ({"size": [H, W], "counts": "zz~~"}, "not a compressed COCO RLE"),  # not an RLE string
        ({"size": [H, W], "counts": [5, 10]}, "cover 15 pixels"),
        ({"size": [H + 1, W], "counts": [(H + 1) * W]}, "not the image's"),
    ],
)
def test_hostile_geometry_is_a_reject_not_a_crash(tmp_path, segmentation, words):
    error = _one_annotation(tmp_path, segmentation=segmentation)
    assert error.reason == Reason.MASK_UNREADABLE and words in error.detail


def test_empty_and_degenerate_segmentations_draw_nothing(tmp_path):
    data = _annotations_file()
    data["annotations"] = [
        {"id": 1, "image_id": 3, "category_id": 3, "segmentation": []},
        {"id": 2, "image_id": 3, "category_id": 3, "segmentation": [[0, 0, 9, 9]]},
        {
            "id": 3,
            "image_id": 3,
            "category_id": 7,
            "segmentation": [[0, 0, 9, 9], [0, 0, 9, 0, 9, 9]],
        },
    ]
    dataset = read_coco_file(_write(tmp_path, data))
    image = _images(dataset)["000003.jpg"]
    assert [a.annotation_id for a in image.annotations] == [3]
    assert len(image.annotations[0].polygons) == 1
    mask = rasterize(image, H, W, _settings(dataset), 0)
    assert set(np.unique(mask).tolist()) == {0, 2}


def test_orphan_annotations_are_counted(tmp_path):
    data = _annotations_file()
    data["annotations"] += [
        {"id": 500, "image_id": 77, "category_id": 3, "segmentation": []},
        {"id": 501, "category_id": 3, "segmentation": []},
        "not an annotation",
    ]
    dataset = read_coco_file(_write(tmp_path, data))
    assert dataset.orphan_annotations == 3
    assert dataset.num_annotations == 12
    assert dataset.metadata()["orphan_example_id"] == 500


# --- files that are not COCO are one-line errors -----------------------------------------------


def _mutated(change) -> dict:
    data = _annotations_file()
    change(data)
    return data


@pytest.mark.parametrize(
    "data, words",
    [
        ('{"images": [', "not valid JSON"),
        ('{"images": [{"id": 1180591620717411303424}]}', "integer overflow"),
        ("[1, 2, 3]", "no categories"),
        (_mutated(lambda d: d.pop("images")), "no images"),
        (_mutated(lambda d: d.update(categories=[])), "no categories"),
        (
            _mutated(lambda d: d["images"].append(dict(d["images"][0]))),
            "image id 1 is listed twice",
        ),
        (_mutated(lambda d: d["images"][0].pop("height")), "images[0] needs"),
        (_mutated(lambda d: d["images"][0].update(width=0)), "images[0] needs"),
        (_mutated(lambda d: d["images"][0].update(id="1")), "images[0] needs"),
        (_mutated(lambda d: d["categories"].append(d["categories"][0])), "id 90 is listed twice"),
        (
            _mutated(lambda d: d["categories"][1].pop("name")),
            "categories[1] needs",
        ),
        (
            _mutated(lambda d: d["categories"].append({"id": 1, "name": "car"})),
            "duplicate class names ['car']",
        ),
        (
            _mutated(lambda d: d["categories"].append({"id": 1, "name": "background"})),
            "unlabeled pixels as ignore",
        ),
    ],
)
def test_files_that_are_not_coco_are_value_errors(tmp_path, data, words):
    text = data if isinstance(data, str) else json.dumps(data)
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError) as caught:
        read_coco_file(str(path))
    message = str(caught.value)
    assert words in message and str(path) in message and "\n" not in message


def test_a_file_name_listed_twice_is_two_staged_images(tmp_path):
    """It was a ValueError for the whole file (exit 2); the two records now meet under one
    key at pairing, one duplicate_key reject, as two CVAT <image> of one name do."""
    data = _mutated(lambda d: d["images"].append({**d["images"][1], "id": 9}))
    staged = list(read_coco_file(_write(tmp_path, data)).staged())
    doubled = [(image_id, name) for image_id, name, _ in staged if name == "000002.jpg"]
    assert sorted(doubled) == [(2, "000002.jpg"), (9, "000002.jpg")]


def test_unknown_unlabeled_mode_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="unlabeled"):
        read_coco_file(_write(tmp_path, _annotations_file()), unlabeled="zero")


def test_read_coco_takes_any_opener(tmp_path):
    payload = json.dumps(_annotations_file()).encode()
    dataset = read_coco(lambda: io.BytesIO(payload), "memory")
    assert sorted(_images(dataset)) == ["000002.jpg", "000003.jpg", "a/000001.jpg"]


# --- memory -------------------------------------------------------------------------------------

_SYNTHETIC = """
import json, sys
import numpy as np
rng = np.random.default_rng(0)
images = [{"id": i, "file_name": f"{i:06d}.jpg", "height": 480, "width": 640} for i in range(1200)]
annotations = []
for n in range(12000):
    angles = np.sort(rng.uniform(0, 2 * np.pi, 30))
    cx, cy, r = rng.uniform(60, 580), rng.uniform(60, 420), rng.uniform(5, 50)
    polygon = np.stack([cx + r * np.cos(angles), cy + r * np.sin(angles)], 1).round(2)
    annotations.append({"id": n, "image_id": n % 1200, "category_id": 1 + n % 80,
                        "iscrowd": 0, "area": 1.0, "bbox": [0, 0, 1, 1],
                        "segmentation": [polygon.ravel().tolist()]})
categories = [{"id": c, "name": f"c{c}"} for c in range(1, 81)]
with open(sys.argv[1], "w") as f:
    json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
"""

# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child of a big pytest
# process would report pytest's peak.
_MEASURE = """
import json, re, sys
import ijson, numpy, pycocotools.mask
from transforms.sources import coco

def peak():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1)) * 1024

before = peak()
if sys.argv[2] == "read_coco":
    dataset = coco.read_coco(lambda: open(sys.argv[1], "rb"), sys.argv[1])
    assert dataset.num_annotations == 12000
else:
    with open(sys.argv[1], "rb") as f:
        tree = json.load(f)
print(peak() - before)
"""


def test_reading_streams_instead_of_loading_the_tree(tmp_path):
    """Peak memory grows by about the compact annotations, not by json.load's object tree."""
    path = tmp_path / "big.json"
    subprocess.run([sys.executable, "-c", textwrap.dedent(_SYNTHETIC), str(path)], check=True)
    size = path.stat().st_size

    def growth(mode: str) -> int:
        run = subprocess.run(
            [sys.executable, "-c", _MEASURE, str(path), mode],
            check=True,
            capture_output=True,
            text=True,
        )
        return int(run.stdout)

    streamed, loaded = growth("read_coco"), growth("json.load")
    # Measured on this file: the compact annotations grow the peak by ~1.9x its size (up to
    # 2.0x under load), json.load's tree by ~7.2x; 2.5x keeps the two far apart.
    assert streamed < 2.5 * size, (streamed, size)
    assert loaded > 2 * streamed, (loaded, streamed)  # the comparison can tell them apart
