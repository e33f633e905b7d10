import pytest

from transforms.pairing import (
    Layout,
    Pair,
    Role,
    SourceFile,
    annotated_entry,
    image_key,
    is_hidden,
    keyed_row,
    mask_key,
    pair_sorted,
    resolve_pair,
    unrecognized,
)
from transforms.rejects import Reason, Reject


def test_image_keys():
    assert image_key("00001.jpg") == "00001"
    assert image_key("a/00001.JPEG") == "a/00001"
    assert image_key("x y ü.png") == "x y ü"
    assert image_key("notes.txt") is None


def test_hidden_files_and_folders_are_never_data():
    for path in (".DS_Store", "._00001.jpg", ".git/x.jpg", "a/.cache/1.png"):
        assert is_hidden(path)
    for path in ("00001.jpg", "a/b.c/1.png", "x..jpg"):
        assert not is_hidden(path)


def test_one_folder_layout_tells_masks_by_their_suffix():
    layout = Layout("/d/", "/d/")
    assert layout.one_folder
    assert layout.classify("00001.jpg", None) == (Role.IMAGE, "00001")
    assert layout.classify("00001_mask.png", None) == (Role.MASK, "00001")
    assert layout.classify("00001_mask.mat", None) == (Role.MASK, "00001")
    assert layout.classify("00001.mat", None) == (Role.MASK, "00001")
    assert layout.classify("00001.png", None) == (Role.IMAGE, "00001")  # a PNG is an image here
    assert layout.classify("notes.txt", None) is None


def test_unrecognized_files_are_keyed_by_full_path_never_colliding_with_entries():
    files = [
        (Role.IMAGE, "00105", SourceFile("/d/i/00105.jpg", 5)),
        (Role.MASK, "00105", SourceFile("/d/m/00105.mat", 5)),
    ]
    rows = sorted(keyed_row(key, role, n, source) for n, (role, key, source) in enumerate(files))
    outcomes = list(pair_sorted(rows))
    assert [type(o) for o in outcomes] == [Pair] and outcomes[0].key == "00105"
    assert unrecognized("/d/i/00105", Role.IMAGE).key == "/d/i/00105"


def test_a_fifo_or_device_under_a_data_name_is_rejected_as_not_a_file():
    odd = resolve_pair("k", [SourceFile("/d/k.jpg", 0, regular=False)], [_file("k.mat")])
    assert odd.reason == Reason.NOT_A_FILE and "k.jpg" in odd.detail


def test_mask_keys_strip_the_longest_known_suffix():
    assert mask_key("00001_mask.mat") == "00001"
    assert mask_key("00001.mat") == "00001"
    assert mask_key("00001_mask.png") == "00001"
    assert mask_key("sub/00001.PNG") == "sub/00001"
    assert mask_key("00001.jpg") is None


def _file(name: str) -> SourceFile:
    return SourceFile(f"/d/{name}", 10)


def test_resolve_pair_outcomes():
    pair = resolve_pair("k", [_file("k.jpg")], [_file("k_mask.mat")])
    assert isinstance(pair, Pair) and pair.image.path == "/d/k.jpg"
    missing_mask = resolve_pair("k", [_file("k.jpg")], [])
    assert isinstance(missing_mask, Reject) and missing_mask.reason == Reason.MISSING_MASK
    missing_image = resolve_pair("k", [], [_file("k.mat")])
    assert missing_image.reason == Reason.MISSING_IMAGE and missing_image.mask == "/d/k.mat"
    twice = resolve_pair("k", [_file("k.png"), _file("k.jpg")], [_file("k.mat")])
    assert twice.reason == Reason.DUPLICATE_KEY
    assert "k.jpg, k.png" in twice.detail


# --- COCO image records as the mask side ----------------------------------------------------


def test_coco_records_are_keyed_like_images_and_odd_names_rejected():
    key, entry = annotated_entry("/a/coco.json", "/img/", 7, "sub/0001.JPG")
    assert key == "sub/0001" and entry.image_path == "/img/sub/0001.JPG"
    assert entry.size == 0 and entry.regular and "coco.json image 7" in entry.name
    key, odd_entry = annotated_entry("/a/coco.json", "/img/", 8, "clip.gif")
    assert key == "/a/coco.json#clip.gif"
    odd = resolve_pair(key, [], [odd_entry], "/a/coco.json")
    assert isinstance(odd, Reject) and odd.reason == Reason.UNRECOGNIZED_FILE
    assert odd.key == key and odd.mask == "/a/coco.json" and odd.image is None


def test_a_coco_record_pairs_only_with_the_file_it_names():
    _, entry = annotated_entry("/a/coco.json", "/img/", 7, "k.jpg")
    pair = resolve_pair("k", [SourceFile("/img/k.jpg", 5)], [entry], "/a/coco.json")
    assert isinstance(pair, Pair) and pair.mask is entry
    other = resolve_pair("k", [SourceFile("/img/k.png", 5)], [entry], "/a/coco.json")
    assert other.reason == Reason.MISSING_IMAGE
    assert "k.jpg" in other.detail and "folder has k.png" in other.detail
    alone = resolve_pair("k", [], [entry], "/a/coco.json")
    assert alone.reason == Reason.MISSING_IMAGE and alone.mask == "/a/coco.json"
    unlisted = resolve_pair("k", [SourceFile("/img/k.jpg", 5)], [], "/a/coco.json")
    assert unlisted.reason == Reason.MISSING_MASK and "coco.json" in unlisted.detail
    _, twin = annotated_entry("/a/coco.json", "/img/", 8, "k.png")
    both = resolve_pair("k", [SourceFile("/img/k.jpg", 5)], [entry, twin], "/a/coco.json")
    assert both.reason == Reason.DUPLICATE_KEY and "image 8 (k.png)" in both.detail


def test_coco_layout_lists_only_the_image_folder():
    layout = Layout("/img/", None, "/img/coco.json")
    assert layout.roots() == (("/img/", Role.IMAGE),) and not layout.one_folder
    assert layout.is_input_file("/img/coco.json") and not layout.is_input_file("/img/a.jpg")
    for mask_dir, annotations in ((None, None), ("/m/", "/c.json")):
        with pytest.raises(ValueError):
            Layout("/img/", mask_dir, annotations)


def test_unsupported_image_types_are_told_the_accepted_names():
    assert "(images are KEY.jpg|.jpeg|.png)" in unrecognized("/d/i/a.bmp", Role.IMAGE).detail
    assert "masks are KEY_mask.mat, KEY_mask.png" in unrecognized("/d/m/a.jpg", Role.MASK).detail
    one_folder = unrecognized("/d/a.webp", None).detail
    assert "images are KEY.jpg" in one_folder and "masks KEY_mask.mat" in one_folder
    orphan = resolve_pair("a", [], [SourceFile("/d/m/a.png", 10)])
    assert orphan.detail == "mask a.png has no image KEY.jpg|.jpeg|.png"
