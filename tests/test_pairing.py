from segcore.pairing import Pair, SourceFile, image_key, mask_key, resolve_pair
from segcore.rejects import Reason, Reject


def test_image_keys():
    assert image_key("00001.jpg") == "00001"
    assert image_key("a/00001.JPEG") == "a/00001"
    assert image_key("x y ü.png") == "x y ü"
    assert image_key("notes.txt") is None
    assert image_key(".DS_Store") is None
    assert image_key("._00001.jpg") is None


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
