"""Duplicates and leakage (docs/duplicates.md): through the real CLI, and the hash and band
search underneath."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import itertools
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageEnhance

from tests.helpers.outputs import published
from tests.helpers.process_tree import SEGPREP
from tests.helpers.runs import RUNNER_ARGS
from transforms import duplicates as dups
from transforms.codecs.pixels import eight_bit
from transforms.format import record_index
from transforms.format.dataset_info import DatasetInfo
from transforms.splits import SplitFractions

FRACTIONS = SplitFractions(0.5, 0.5)  # half and half: a copy straddles by key one time in two
DEFAULT_D = 12


def _segprep(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([*SEGPREP, *args], capture_output=True, text=True, env=os.environ)
    if check:
        assert done.returncode == 0, done.stderr[-2000:]
    return done


def _prepare(data: Path, out: Path, *extra: str, check: bool = True):
    return _segprep(
        "prepare",
        "--image_dir",
        str(data / "images"),
        "--mask_dir",
        str(data / "masks"),
        "--output_dir",
        str(out),
        "--train_size",
        "0.5",
        "--validation_size",
        "0.5",
        "--num_shards",
        "4",
        *extra,
        *RUNNER_ARGS,
        check=check,
    )


def _smooth_photo(seed: int, size: int = 256) -> Image.Image:
    """A photo-like image: overlapping coloured shapes with sensor noise, distinct per seed."""
    rng = np.random.default_rng(seed)
    image = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(0, 256, 3)))
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        left, top = (int(v) for v in rng.integers(-40, size, 2))
        width, height = (int(v) for v in rng.integers(30, 140, 2))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape((left, top, left + width, top + height), fill=colour)
    noisy = np.asarray(image, np.float64) + rng.normal(0, 8, (size, size, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def _jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def _mask(size: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    mask = (rng.random((size, size)) < 0.3).astype(np.uint8) * 255
    out = io.BytesIO()
    Image.fromarray(mask).save(out, format="PNG")
    return out.getvalue()


def _straddling_name(original: str, tag: str) -> str:
    """A copy's name that today's rule (the key's own hash) puts in the other split."""
    for n in itertools.count():
        name = f"{original}-{tag}{n}"
        if FRACTIONS.split_of(name) != FRACTIONS.split_of(original):
            return name
    raise AssertionError  # pragma: no cover - count() never ends


def _write(data: Path, key: str, image: bytes, mask: bytes) -> None:
    (data / "images" / f"{key}.jpg").write_bytes(image)
    (data / "masks" / f"{key}.png").write_bytes(mask)


def _distinct_dataset(data: Path, count: int = 16, first_seed: int = 0) -> dict[str, Image.Image]:
    (data / "images").mkdir(parents=True)
    (data / "masks").mkdir(parents=True)
    photos = {}
    for seed in range(first_seed, first_seed + count):
        key = f"photo{seed:03d}"
        photos[key] = _smooth_photo(seed)
        _write(data, key, _jpeg(photos[key]), _mask(256, seed))
    return photos


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """16 distinct photos, plus: an exact copy, a resized re-encoded copy, a brighter copy
    (its own mask), and an exact copy with a different mask; every copy named so that its
    key alone would put it in the other split. Returns (data, {original: [copies]})."""
    data = tmp_path_factory.mktemp("planted") / "data"
    photos = _distinct_dataset(data)
    keys = sorted(photos)
    copies: dict[str, list[str]] = {}

    def plant(original: str, tag: str, image: bytes, mask: bytes) -> None:
        name = _straddling_name(original, tag)
        _write(data, name, image, mask)
        copies.setdefault(original, []).append(name)

    same_mask = (data / "masks" / f"{keys[0]}.png").read_bytes()
    plant(keys[0], "exact", (data / "images" / f"{keys[0]}.jpg").read_bytes(), same_mask)
    small = photos[keys[1]].resize((180, 180), Image.LANCZOS)
    plant(keys[1], "small", _jpeg(small.resize((256, 256)), 45), _mask(256, 1))
    brighter = ImageEnhance.Brightness(photos[keys[2]]).enhance(1.2)
    plant(keys[2], "bright", _jpeg(brighter), _mask(256, 2))
    plant(keys[3], "relabel", (data / "images" / f"{keys[3]}.jpg").read_bytes(), _mask(256, 99))
    return data, copies


def _key_tables(out: Path) -> dict[str, str]:
    """key -> split of every record."""
    found = {}
    for split in ("train", "validation"):
        table = out / "index" / f"{split}.keys.jsonl"
        for row in record_index.parse_key_table(table.read_bytes()):
            found[row.key] = split
    return found


def _groups(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "duplicates.jsonl").read_text().splitlines()]


def _rejects(out: Path) -> dict[str, dict]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {json.loads(line)["key"]: json.loads(line) for line in lines}


@pytest.fixture(scope="module")
def grouped(planted, tmp_path_factory):
    data, _ = planted
    out = tmp_path_factory.mktemp("grouped") / "out"
    done = _prepare(data, out)
    return out, done.stdout


def test_group_keeps_every_planted_copy_in_its_originals_split(planted, grouped):
    _, copies = planted
    out, _ = grouped
    split_of = _key_tables(out)
    groups = {tuple(group["keys"]): group for group in _groups(out)}
    for original, names in copies.items():
        members = tuple(sorted([original, *names]))
        assert members in groups, f"{members} not found as a group: {list(groups)}"
        anchor = FRACTIONS.split_of(members[0])
        assert {split_of[key] for key in members} == {anchor}
        assert groups[members]["split"] == anchor
    info = json.loads((out / "metadata.json").read_text())["duplicates"]
    assert info["mode"] == "group" and info["threshold"] == DEFAULT_D
    assert info["cross_split_groups"] == 0
    assert info["cross_split_groups_by_key_alone"] >= len(copies)


def test_duplicates_file_has_the_published_form(planted, grouped):
    _, copies = planted
    out, stdout = grouped
    by_keys = {tuple(group["keys"]): group for group in _groups(out)}
    for group in by_keys.values():
        assert list(group) == ["keys", "split", "kind", "max_distance", "conflicting_masks"]
    keys = sorted(copies)
    exact = by_keys[tuple(sorted([keys[0], *copies[keys[0]]]))]
    assert (exact["kind"], exact["max_distance"], exact["conflicting_masks"]) == ("exact", 0, False)
    near = by_keys[tuple(sorted([keys[1], *copies[keys[1]]]))]
    assert near["kind"] == "near" and 0 <= near["max_distance"] <= DEFAULT_D
    relabelled = by_keys[tuple(sorted([keys[3], *copies[keys[3]]]))]
    assert relabelled["kind"] == "exact" and relabelled["conflicting_masks"] is True
    assert "duplicates: " in stdout and "with conflicting masks" in stdout


def test_hashes_are_stored_listed_and_verified(grouped):
    out, _ = grouped
    info = json.loads((out / "metadata.json").read_text())
    for split, entry in info["splits"].items():
        ref = entry["hashes"]
        data = (out / ref["file"]).read_bytes()
        assert ref["file"] == f"index/{split}.hashes.jsonl"
        assert (len(data), hashlib.sha256(data).hexdigest()) == (ref["bytes"], ref["sha256"])
        keys = [row.key for row in dups.parse_hash_rows(data)]
        table = record_index.parse_key_table((out / entry["key_table"]["file"]).read_bytes())
        assert keys == [row.key for row in table]
    manifest = json.loads((out / ".segprep" / "manifest.json").read_text())
    assert {"duplicates.jsonl", "index/train.hashes.jsonl"} <= set(manifest["files"])
    assert _segprep("verify", str(out)).stdout.startswith("OK ")


def test_verify_finds_a_group_across_splits_and_an_unknown_key(grouped, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(grouped[0], out)
    split_of = _key_tables(out)
    train, other = [key for key, split in split_of.items() if split == "train"][:2]
    validation = next(key for key, split in split_of.items() if split == "validation")
    lines = [
        {"keys": sorted([train, validation]), "split": "train", "kind": "near"},
        {"keys": ["no-such-key", train], "split": "train", "kind": "near"},
        {"keys": sorted([train, other]), "split": "train", "kind": "near", "max_distance": 20},
    ]
    data = "".join(
        json.dumps({"max_distance": 1, **line, "conflicting_masks": False}) + "\n" for line in lines
    ).encode()
    (out / "duplicates.jsonl").write_bytes(data)
    metadata = json.loads((out / "metadata.json").read_text())
    metadata["duplicates"]["file"].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    metadata["duplicates"]["groups"] = 3
    (out / "metadata.json").write_text(json.dumps(metadata))
    (out / "index" / "validation.hashes.jsonl").write_bytes(b"")  # size differs from listed
    done = _segprep("verify", str(out), check=False)
    assert done.returncode == 1
    assert "1 group whose records are not all in the split it names: line 1" in done.stdout
    assert "1 key in neither a shard nor rejects.jsonl: line 2 (no-such-key)" in done.stdout
    assert "index/validation.hashes.jsonl: size or sha256 differs" in done.stdout
    assert "1 group wider than the threshold (12): line 3 (20)" in done.stdout


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_distance", "5", "max_distance 5 is not a distance"),
        ("max_distance", True, "max_distance True is not a distance"),
        ("max_distance", 65, "max_distance 65 is not a distance"),
        ("conflicting_masks", 0, "conflicting_masks is not true or false"),
    ],
)
def test_a_groups_distance_and_mask_flag_have_their_types(field, value, message):
    line = {"keys": ["a", "b"], "split": "train", "kind": "near", "max_distance": 3}
    line = {**line, "conflicting_masks": False, field: value}
    assert dups.parse_groups(
        (json.dumps({**line, field: 3 if field == "max_distance" else False}) + "\n").encode()
    )
    with pytest.raises(ValueError, match=f"line 1: {message}"):
        dups.parse_groups((json.dumps(line) + "\n").encode())


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[1, 2]", "not a JSON object"),
        ('"text"', "not a JSON object"),
        ('{"keys": ["a", "b"], "max_distance": 0}', "no kind field"),
        ('{"kind": "near"}', "no keys field"),
    ],
)
def test_a_group_line_of_another_shape_is_named_in_words(line, message):
    """`inspect --duplicates`, report and verify said "line 1: 'kind'" (a KeyError's text)
    or "list indices must be integers or slices, not str" for such lines."""
    with pytest.raises(ValueError, match=f"^line 1: {message}$"):
        dups.parse_groups((line + "\n").encode())


def test_drop_rejects_all_but_the_smallest_key_naming_it(planted, tmp_path):
    data, copies = planted
    out = tmp_path / "out"
    _prepare(data, out, "--duplicates", "drop")
    split_of = _key_tables(out)
    rejects = _rejects(out)
    for original, names in copies.items():
        kept, *dropped = sorted([original, *names])
        assert kept in split_of
        for key in dropped:
            assert rejects[key]["reason"] == "duplicate_image"
            assert f"of {kept} (kept)" in rejects[key]["detail"]
    info = json.loads((out / "metadata.json").read_text())
    assert info["duplicates"]["dropped"] == sum(len(names) for names in copies.values())
    assert _segprep("verify", str(out)).stdout.startswith("OK ")


def test_leakage_check_rejects_copies_of_another_outputs_images(tmp_path):
    test_set = tmp_path / "test-data"
    photos = _distinct_dataset(test_set, count=6, first_seed=100)
    test_out = tmp_path / "test-out"
    _prepare(test_set, test_out)
    data = tmp_path / "data"
    _distinct_dataset(data, count=10)
    leaked = {}
    for n, (key, photo) in enumerate(sorted(photos.items())[:3]):
        name = f"scraped{n}"
        copy = photo.resize((200, 200), Image.LANCZOS) if n else photo
        _write(data, name, _jpeg(copy, 60), _mask(200 if n else 256, n))
        leaked[name] = key
    out = tmp_path / "out"
    done = _prepare(data, out, "--leakage_check", str(test_out))
    rejects = _rejects(out)
    for name, original in leaked.items():
        assert rejects[name]["reason"] == "leaks_into"
        assert f"of {original} in {test_out}/" in rejects[name]["detail"]
    assert not set(_key_tables(out)) & set(leaked)
    assert sum(r["reason"] == "leaks_into" for r in rejects.values()) == len(leaked)
    assert "leakage: 3 entries" in done.stdout


def test_leakage_check_of_the_output_itself_is_refused_through_a_link(planted, tmp_path):
    """--leakage_check OUT is refused; a link to OUT was taken as another output, and every
    image leaked into its own stored copy."""
    data, _ = planted
    out = tmp_path / "out"
    _prepare(data, out)
    (tmp_path / "link").symlink_to(out)
    done = _prepare(
        data, out, "--overwrite", "--leakage_check", str(tmp_path / "link"), check=False
    )
    assert done.returncode == 2 and "is the --output_dir" in done.stderr, done.stderr


def test_leakage_check_needs_hashes_and_the_search(tmp_path):
    data = tmp_path / "data"
    _distinct_dataset(data, count=4)
    plain = tmp_path / "plain"
    _prepare(data, plain, "--duplicates", "off")
    done = _prepare(data, tmp_path / "out", "--leakage_check", str(plain), check=False)
    assert done.returncode == 2
    assert "has no image hashes" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = _prepare(
        data, tmp_path / "out", "--leakage_check", str(plain), "--duplicates", "off", check=False
    )
    assert done.returncode == 2 and "--duplicates off" in done.stderr


def test_without_duplicates_every_mode_writes_the_same_shards(tmp_path):
    data = tmp_path / "data"
    _distinct_dataset(data, count=20)
    outputs = {}
    for mode in ("off", "group", "drop"):
        outputs[mode] = tmp_path / mode
        _prepare(data, outputs[mode], "--duplicates", mode)
    off = published(outputs["off"])
    assert "duplicates.jsonl" not in off and not any("hashes" in name for name in off)
    assert json.loads((outputs["off"] / "metadata.json").read_text())["duplicates"] == {
        "mode": "off"
    }
    for mode in ("group", "drop"):
        assert (outputs[mode] / "duplicates.jsonl").read_bytes() == b""
        extra = {"duplicates.jsonl", "index/train.hashes.jsonl", "index/validation.hashes.jsonl"}
        assert published(outputs[mode]) == off | extra
        for name in off - {"metadata.json"}:
            assert (outputs[mode] / name).read_bytes() == (outputs["off"] / name).read_bytes()


# ---- the hash and the band search --------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        lambda im: im.resize((150, 150), Image.LANCZOS),
        lambda im: im,  # re-encoded at quality 35 below
        lambda im: im.crop((6, 4, 250, 247)),  # ~5 % off each axis, split between sides
        lambda im: ImageEnhance.Brightness(im).enhance(0.8),
        lambda im: ImageEnhance.Contrast(im).enhance(1.2),
    ],
    ids=["resize", "jpeg", "crop", "brightness", "contrast"],
)
def test_hash_survives_the_usual_changes(change):
    for seed in range(8):
        photo = _smooth_photo(seed)
        original = dups.perceptual_hash(_jpeg(photo))
        changed = dups.perceptual_hash(_jpeg(change(photo), 35))
        assert dups.hamming(original, changed) <= DEFAULT_D, seed


def test_distinct_images_hash_far_apart():
    hashes = [dups.perceptual_hash(_jpeg(_smooth_photo(seed))) for seed in range(12)]
    close = [(a, b) for a, b in itertools.combinations(range(12), 2)]
    assert all(dups.hamming(hashes[a], hashes[b]) > DEFAULT_D for a, b in close)


def test_perceptual_hash_is_the_jobs_hash():
    """sample-data and the benchmarks plant and check copies with perceptual_hash: it must
    give the bits the job's writers give the same bytes (codecs/image's decode and draft)."""
    from transforms.codecs.image import validate_image

    photos = [_smooth_photo(seed, 800) for seed in range(6)]
    encoded = [_jpeg(photo, 80) for photo in photos]
    encoded.append(_jpeg(photos[0].convert("L")))
    png = io.BytesIO()
    photos[1].convert("RGBA").save(png, format="PNG")
    encoded.append(png.getvalue())
    cmyk = io.BytesIO()
    photos[2].convert("CMYK").save(cmyk, format="JPEG")
    encoded.append(cmyk.getvalue())
    for number, data in enumerate(encoded):
        job = dups.fingerprint("k", data, validate_image(data, thumbnail=True).thumbnail)
        assert dups.perceptual_hash(data) == job.phash, number


def test_unreadable_bytes_are_unhashable():
    with pytest.raises(dups.UnhashableImage):
        dups.perceptual_hash(b"not an image")


@pytest.mark.parametrize("distance", [0, 3, 8, 12, 20])
def test_bands_cover_the_bits_and_find_every_close_pair_once(distance):
    edges = dups.band_edges(distance)
    assert len(edges) == distance + 1
    assert sum(width for _, width in edges) == 64
    covered = sorted(bit for shift, width in edges for bit in range(shift, shift + width))
    assert covered == list(range(64))
    rng = np.random.default_rng(distance)
    hashes = [int(value) for value in rng.integers(0, 2**63, size=40, dtype=np.int64)]
    # Plant pairs at exactly the distance (the pigeonhole's edge) and just beyond it.
    for base in list(hashes[:10]):
        for flips in (distance, distance + 1):
            bits = rng.choice(64, size=flips, replace=False)
            hashes.append(base ^ sum(1 << int(bit) for bit in bits))
    images = [dups.Tagged("", dups.ImageHash(f"k{n:03d}", "", h)) for n, h in enumerate(hashes)]
    buckets: dict[tuple[int, int], list] = {}
    for image in images:
        for band, value in enumerate(dups.bands(image.image.phash, distance)):
            buckets.setdefault((band, value), []).append(image)
    found = [
        tuple(sorted((a.image.key, b.image.key)))
        for (band, _), members in buckets.items()
        for a, b, _ in dups.bucket_pairs(band, members, distance)
    ]
    expected = {
        (a.image.key, b.image.key)
        for a, b in itertools.combinations(images, 2)
        if dups.hamming(a.image.phash, b.image.phash) <= distance
    }
    assert len(found) == len(set(found)), "a pair was reported twice"
    assert set(found) == expected
    assert len(expected) >= 10


def test_bucket_pairs_other_outputs_only_against_this_run():
    ours = dups.Tagged("", dups.ImageHash("a", "", 0))
    theirs = [dups.Tagged("gs://b/test/", dups.ImageHash(k, "", 1)) for k in ("x", "y")]
    found = list(dups.bucket_pairs(0, [theirs[0], ours, theirs[1]], 3))
    assert sorted((a.image.key, b.image.key) for a, b, _ in found) == [("a", "x"), ("a", "y")]


def test_groups_are_complete_linkage_not_chains():
    """A~B and B~C with A and C not verified: A and B group, C is left alone (no chain)."""

    def h(key, phash=0):
        return dups.ImageHash(key, key, phash)

    pairs = [(h("c"), h("b")), (h("b"), h("a")), (h("x"), h("y")), (h("y"), h("z"))]
    pairs += [(h("x"), h("z")), (h("d"), h("c"))]
    groups = dups.complete_groups(pairs)
    assert [[m.key for m in group] for group in groups] == [["a", "b"], ["c", "d"], ["x", "y", "z"]]
    chain = dups.linked_groups([(h("a"), h("b")), (h("b"), h("c"))])  # c is in no group
    assert [[m.key for m in linked.images] for linked in chain] == [["a", "b", "c"]]
    assert [[m.key for m in group] for group in chain[0].groups] == [["a", "b"]]
    line = dups.describe_group([h("a", 0), h("b", 7)], "train")
    assert (line.kind, line.max_distance, line.conflicting_masks) == ("near", 3, False)


def test_a_copy_that_misses_the_original_does_not_take_its_copies_away():
    """A crop with the smallest key pairs with the original's re-encodes but not with the
    original: grown around the best-connected image, closest first, the group is the
    original with its copies, and the crop is left out (key order put the crop first and
    split the original off from its own copies)."""
    original, crop = 0, (1 << 12) - 1  # 12 bits apart: not paired

    def h(key, phash, sha=None):
        return dups.ImageHash(key, sha or key, phash)

    copies = [h("b-resize", 0b1), h("c-jpeg", 0b10), h("d-bright", 0b100)]
    pairs = [(h("p", original, "same"), h("p-exact", original, "same"))]
    for copy in copies:
        pairs += [(h("p", original, "same"), copy), (h("a-crop", crop), copy)]
    pairs += [(one, other) for one, other in itertools.combinations(copies, 2)]
    groups = [[m.key for m in group] for group in dups.complete_groups(pairs)]
    assert groups == [["b-resize", "c-jpeg", "d-bright", "p", "p-exact"]]


def test_an_original_stays_with_its_copies_when_a_copy_has_more_neighbours():
    """The contrast copy (smallest key) pairs with the original, its re-encode, its resize
    and a brightness copy that is too far from the original to pair with it: grown from
    the contrast copy, the closest first, the group took the re-encode and the brightness
    copy and left the original apart from its own copies (held-out portraits). The group
    that comes out largest is kept: the original, its exact copy and three copies."""

    def h(key, phash, sha=None):
        return dups.ImageHash(key, sha or key, phash)

    original, exact = h("p", 0, "same"), h("p-exact", 0, "same")
    contrast, jpeg, bright, resize = (
        h("a-contrast", 0b1111),
        h("b-jpeg", 0b1110),
        h("c-bright", 0b11111),
        h("d-resize", 0b11),
    )
    verified_pairs = [
        (original, exact),
        *((original, copy) for copy in (contrast, jpeg, resize)),
        *itertools.combinations((contrast, jpeg, resize), 2),
        (contrast, bright),
        (jpeg, bright),
    ]
    groups = [[m.key for m in group] for group in dups.complete_groups(verified_pairs)]
    assert groups == [["a-contrast", "b-jpeg", "d-resize", "p", "p-exact"]]


def test_signature_confirms_copies_and_parts_distinct_images():
    photo = _smooth_photo(3)
    darker = ImageEnhance.Brightness(photo).enhance(0.85)
    flatter = ImageEnhance.Contrast(photo).enhance(1.15)

    def signature(image):
        return dups._colour_signatures(dups.thumbnail(image)[None])[0]

    original = signature(photo)
    assert len(original) == 192
    for copy in (darker, flatter, photo.resize((150, 150)).resize((256, 256))):
        assert dups.similarity(original, signature(copy)) >= 0.95
    assert dups.similarity(original, signature(_smooth_photo(4))) < 0.95


def _person(hair, skin, shirt, backdrop=(188, 190, 186)) -> Image.Image:
    """A head-and-shoulders figure in front of a studio backdrop."""
    image = Image.new("RGB", (240, 320), backdrop)
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle((50, 190, 190, 330), 30, fill=shirt)
    draw.rectangle((108, 150, 132, 200), fill=skin)
    draw.ellipse((85, 80, 155, 165), fill=skin)
    draw.chord((80, 70, 160, 140), 180, 360, fill=hair)
    return image


def _job_hash(image: Image.Image, key: str) -> dups.ImageHash:
    data = _jpeg(image)
    with Image.open(io.BytesIO(data)) as opened:
        opened.draft("RGB", (2 * dups.THUMB_SIDE, 2 * dups.THUMB_SIDE))
        return dups.fingerprint(key, data, dups.thumbnail(opened))


def _lit_signature(light: np.ndarray, colour: np.ndarray) -> bytes:
    """A signature of 64 cells: `light` the same in each cell's three channels, `colour`
    (64 x 3) less its mean per cell, so it is all chroma."""
    cells = light[:, None] + colour - colour.mean(axis=1, keepdims=True)
    return np.clip(np.round(cells), -127, 127).astype(np.int8).tobytes()


def test_the_chroma_minimum_is_relaxed_only_for_signatures_that_nearly_match():
    """JPEG keeps a small image's light and subsamples its colour, so a re-encoded copy's
    signature still correlates at 0.985-0.999 while its chroma may fall to 0.88-0.93; two
    people in dark clothes before one backdrop correlate at 0.95-0.975, chroma 0.89-0.925.
    The same chroma agreement confirms the first pair and parts the second."""
    rng = np.random.default_rng(7)
    light, colour = rng.normal(0, 1, 64), rng.normal(0, 1, (64, 3))
    other = 0.9 * colour + np.sqrt(1 - 0.9**2) * rng.normal(0, 1, (64, 3))

    def pair(light_scale: float, colour_scale: float):
        a = dups.ImageHash(
            "a", "1" * 64, 0, None, _lit_signature(light * light_scale, colour * colour_scale)
        )
        b = dups.ImageHash(
            "b", "2" * 64, 0, None, _lit_signature(light * light_scale, other * colour_scale)
        )
        return a, b, dups.similarity(a.signature, b.signature)

    copy_a, copy_b, close = pair(40.0, 6.0)  # mostly light: a re-encoded copy
    people_a, people_b, far = pair(25.0, 14.0)  # colour counts: two people
    for a, b in ((copy_a, copy_b), (people_a, people_b)):
        chroma = dups.chroma_similarity(a.signature, b.signature)
        assert dups.CLOSE_MIN_CHROMA_SIMILARITY <= chroma < dups.MIN_CHROMA_SIMILARITY, chroma
    assert close >= dups.CLOSE_SIMILARITY and 0.95 <= far < dups.CLOSE_SIMILARITY, (close, far)
    assert dups.verified(copy_a, copy_b, 0.95)
    assert not dups.verified(people_a, people_b, 0.95)


def test_two_people_before_one_backdrop_are_told_apart_by_their_colours():
    """Same silhouette, same backdrop, the same brightness cell by cell: the signatures
    correlate above the minimum, but hair, skin and shirt differ in colour, so the chroma
    check parts them; brightness, contrast, resized and cropped copies still pass it, and
    grey images are judged on their signatures alone."""
    red_hair = _person((150, 60, 30), (230, 180, 150), (40, 70, 45))
    grey_hair = _person((55, 90, 100), (205, 188, 180), (60, 55, 62))
    one, other = _job_hash(red_hair, "one"), _job_hash(grey_hair, "other")
    assert dups.hamming(one.phash, other.phash) <= 12
    assert dups.similarity(one.signature, other.signature) >= 0.95
    assert dups.chroma_similarity(one.signature, other.signature) < dups.MIN_CHROMA_SIMILARITY
    assert not dups.verified(one, other, 0.95)
    copies = [
        ImageEnhance.Brightness(red_hair).enhance(0.85),
        ImageEnhance.Contrast(red_hair).enhance(1.15),
        red_hair.resize((160, 213)),
        red_hair.crop((4, 3, 238, 318)),
    ]
    for number, copy in enumerate(copies):
        assert dups.verified(one, _job_hash(copy, f"copy{number}"), 0.95)
    grey = _job_hash(red_hair.convert("L"), "grey")
    darker_grey = _job_hash(ImageEnhance.Brightness(red_hair.convert("L")).enhance(0.9), "g2")
    assert dups.chroma_similarity(grey.signature, darker_grey.signature) is None
    assert dups.verified(grey, darker_grey, 0.95)


def test_a_16_bit_image_is_scaled_to_8_bits_a_band_at_a_time():
    """The whole 16-bit image in float64 arithmetic held about 30 bytes a pixel at once (a
    6300x6300 PNG of 85 KB took a writer past 1 GB); now the pixels as decoded, the 8-bit
    result and one band of rows."""
    import tracemalloc

    side = 3000
    image = Image.fromarray(np.full((side, side), 40_000, dtype=np.uint16))
    tracemalloc.start()
    try:
        scaled = eight_bit(image)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert scaled.mode == "L" and scaled.getpixel((0, 0)) == round(40_000 / 257)
    # measured: about 5 bytes a pixel (the uint16 copy, the result, one band's floats);
    # the image at once in float64 was about 30
    assert peak < 8 * side * side


def test_flat_images_of_different_brightness_are_not_copies():
    """A flat image's signature is all zeros and its hash rounding noise: a dark, a mid and
    a light grey frame fell within the distance and correlated at 1.0, so drop kept one."""
    flats = [
        _job_hash(Image.new("RGB", (64, 48), (level,) * 3), f"grey{level}")
        for level in (15, 120, 240)
    ]
    for one, other in itertools.combinations(flats, 2):
        assert not dups.verified(one, other, 0.95)
    same_bytes = dataclasses.replace(flats[0], key="copy")
    assert dups.verified(flats[0], same_bytes, 0.95)


def test_hash_rows_keep_the_signature_and_old_rows_still_load():
    signature = bytes([1, 255, 0]) * 64
    image = dups.ImageHash("k", "ab" * 32, 5, None, signature)
    (back,) = dups.parse_hash_rows(dups.hash_rows_bytes([image]))
    assert (back.key, back.phash, back.signature) == ("k", 5, signature)
    # A signature of another length would meet this run's in a numpy product: refused.
    short = dups.hash_rows_bytes([dups.ImageHash("k", "ab" * 32, 5, None, bytes([1, 255, 0]))])
    with pytest.raises(ValueError, match="sig holds 3 bytes, not 192"):
        dups.parse_hash_rows(short)
    row = b'{"key": "k", "sha256": "' + b"ab" * 32 + b'", "phash": "0000000000000005"}'
    (old,) = dups.parse_hash_rows(row)
    assert old.signature == b""
    other = dups.ImageHash("j", "cd", 5, None, bytes([9, 9, 9]) * 64)
    assert dups.verified(old, other, 0.95)  # no signature: the distance alone decides
    unlike = dups.ImageHash("j", "cd", 5, None, bytes([0, 1, 0]) * 64)
    assert not dups.verified(image, unlike, 0.95)


def test_inspect_draws_the_groups(grouped, tmp_path):
    out, _ = grouped
    sheet = tmp_path / "groups.png"
    done = _segprep("inspect", str(out), "--duplicates", "--out", str(sheet))
    assert done.stdout.strip().splitlines()[-1] == str(sheet)
    with Image.open(sheet) as image:
        assert image.width > 0 and image.height > 0
    groups = len(_groups(out))
    rows = (min(groups * 2, 16) + 3) // 4  # four entries to a row, whole groups first
    assert image.height > rows * 100
    both = _segprep("inspect", str(out), "--duplicates", "--rejects", check=False)
    assert both.returncode == 2 and "not both" in both.stderr


def test_a_groups_largest_distance_is_over_every_pair():
    """Vectorised over blocks of rows, it equals the pairwise maximum."""
    import itertools
    import random

    from transforms.duplicates import _largest_distance, hamming

    rng = random.Random(5)
    for size in (1, 2, 3, 40, 700):
        hashes = [rng.getrandbits(64) for _ in range(size)]
        brute = max((hamming(a, b) for a, b in itertools.combinations(hashes, 2)), default=0)
        assert _largest_distance(np.array(hashes, dtype=np.uint64), rows=64) == brute


# ---- portraits of one composition (benchmarks/duplicate_set.py) ---------------------------

PORTRAITS = 48  # distinct portraits; the first PLANTED get one copy per change family
PLANTED = 4
FOUND_FAMILIES = ("exact", "resize", "jpeg", "crop<=5%", "brightness", "contrast")


def _official(data: Path, out: Path, lists: dict[str, list[str]], *extra: str, check=True):
    """prepare with --split_file SPLIT=list for each of `lists`."""
    flags = []
    for split, keys in lists.items():
        listed = data / f"{split}.txt"
        listed.write_text("".join(f"{key}\n" for key in keys))
        flags += ["--split_file", f"{split}={listed}"]
    return _segprep(
        "prepare",
        "--image_dir",
        str(data / "images"),
        "--mask_dir",
        str(data / "masks"),
        "--output_dir",
        str(out),
        "--num_shards",
        "2",
        *flags,
        *extra,
        *RUNNER_ARGS,
        check=check,
    )


@pytest.fixture(scope="module")
def portraits(tmp_path_factory):
    """(data, truth): PORTRAITS distinct portraits and 7 planted copies of each of the first
    PLANTED (truth: key -> {"identity", "family"})."""
    from benchmarks import duplicate_set

    data = tmp_path_factory.mktemp("portraits") / "data"
    return data, duplicate_set.build(data, PORTRAITS, PLANTED, seed=7)


@pytest.fixture(scope="module")
def portraits_grouped(portraits, tmp_path_factory):
    data, _ = portraits
    out = tmp_path_factory.mktemp("portraits-grouped") / "out"
    done = _prepare(data, out)
    return out, done.stdout


def test_distinct_portraits_are_left_ungrouped_and_planted_copies_grouped(
    portraits, portraits_grouped
):
    _, truth = portraits
    out, stdout = portraits_grouped
    groups = _groups(out)
    for group in groups:  # no group holds two different portraits
        assert len({truth[key]["identity"] for key in group["keys"]}) == 1, group
    grouped = {key for group in groups for key in group["keys"]}
    group_of = {key: tuple(group["keys"]) for group in groups for key in group["keys"]}
    copies = [key for key, item in truth.items() if item["family"] in FOUND_FAMILIES]
    with_original = [k for k in copies if truth[k]["identity"] in group_of.get(k, ())]
    assert len(with_original) >= len(copies) - 1  # recall >= 0.95 on these families
    grouped_alone = [k for k, v in truth.items() if v["family"] == "distinct" and k in grouped]
    assert set(grouped_alone) == {f"p{i:04d}" for i in range(PLANTED)}
    split_of = _key_tables(out)
    for group in groups:
        assert {split_of[key] for key in group["keys"]} == {group["split"]}
    # The summary counts every entry that left its key's split, not the net size change.
    parameters = json.loads((out / "metadata.json").read_text())["parameters"]
    rule = SplitFractions(parameters["train_size"], parameters["validation_size"])
    moved = sum(split != rule.split_of(key) for key, split in split_of.items())
    assert moved > 0
    assert f"grouping moved {moved:,} {'entry' if moved == 1 else 'entries'} between splits: " in (
        stdout
    )


def test_no_group_is_wider_than_the_threshold(portraits_grouped):
    out, _ = portraits_grouped
    hashes = {}
    for split in ("train", "validation"):
        data = (out / "index" / f"{split}.hashes.jsonl").read_bytes()
        for row in dups.parse_hash_rows(data):
            assert len(row.signature) == 192
            hashes[row.key] = row
    for group in _groups(out):
        widest = max(
            dups.hamming(hashes[a].phash, hashes[b].phash)
            for a, b in itertools.combinations(group["keys"], 2)
        )
        assert widest == group["max_distance"] <= DEFAULT_D


def _voc_lists(truth: dict) -> dict[str, list[str]]:
    """Originals with copies listed in validation, their copies in train; the rest
    alternate. (A benchmark's validation list that holds near copies of train images.)"""
    train, validation = [], []
    for index, key in enumerate(sorted(truth)):
        item = truth[key]
        if item["family"] == "distinct":
            (validation if key < f"p{PLANTED:04d}" or index % 2 else train).append(key)
        else:
            train.append(key)
    return {"train": train, "validation": validation}


def test_split_file_lists_are_kept_exactly_and_crossing_groups_reported(portraits, tmp_path):
    data, truth = portraits
    lists = _voc_lists(truth)
    out = tmp_path / "out"
    done = _official(data, out, lists)
    split_of = _key_tables(out)
    for split, keys in lists.items():
        assert sorted(k for k, s in split_of.items() if s == split) == sorted(keys)
    crossing = [g for g in _groups(out) if g["split"] == ["train", "validation"]]
    assert len(crossing) == PLANTED
    info = json.loads((out / "metadata.json").read_text())["duplicates"]
    assert info["cross_split_groups"] == PLANTED and info["official_splits"] is True
    train_copies = sum(1 for g in crossing for k in g["keys"] if split_of[k] == "train")
    assert info["cross_split_train_keys"] == train_copies >= PLANTED * len(FOUND_FAMILIES)
    warning = (
        f"{PLANTED} groups cross your splits: validation holds near copies of "
        f"{train_copies} train images (duplicates.jsonl)"
    )
    assert warning in done.stdout
    assert _segprep("verify", str(out)).stdout.startswith("OK ")


def test_drop_under_official_splits_removes_only_train_copies(portraits, tmp_path):
    data, truth = portraits
    lists = _voc_lists(truth)
    out = tmp_path / "out"
    _official(data, out, lists, "--duplicates", "drop")
    split_of = _key_tables(out)
    assert sorted(k for k, s in split_of.items() if s == "validation") == sorted(
        lists["validation"]
    )
    rejects = _rejects(out)
    assert rejects, "the planted train copies were not dropped"
    for key, reject in rejects.items():
        assert key in lists["train"] and reject["reason"] == "duplicate_image"
        kept = reject["detail"].split(" of ")[1].split(" ")[0]
        assert truth[kept]["identity"] == truth[key]["identity"]
    for_validation = [r for r in rejects.values() if "(kept, validation)" in r["detail"]]
    assert len(for_validation) >= PLANTED * len(FOUND_FAMILIES) - 1
    assert _segprep("verify", str(out)).stdout.startswith("OK ")


def test_an_appended_near_copy_joins_its_originals_split(portraits, tmp_path):
    data, truth = portraits
    first = tmp_path / "first"
    originals = sorted(k for k, v in truth.items() if v["family"] == "distinct")
    (first / "images").mkdir(parents=True)
    (first / "masks").mkdir()
    for key in originals:
        for kind, suffix in (("images", "jpg"), ("masks", "png")):
            shutil.copy(data / kind / f"{key}.{suffix}", first / kind / f"{key}.{suffix}")
    out = tmp_path / "out"
    _prepare(first, out)
    stored = _key_tables(out)
    copy = next(k for k, v in truth.items() if v["family"] == "resize")  # a resized copy of p0000
    original = truth[copy]["identity"]
    # named so that its key alone would put it in the other split
    name = _straddling_name(original, "appended")
    shutil.copy(data / "images" / f"{copy}.jpg", first / "images" / f"{name}.jpg")
    shutil.copy(data / "masks" / f"{copy}.png", first / "masks" / f"{name}.png")
    done = _prepare(first, out, "--append")
    split_of = {  # every version's key tables (an append's are index/<split>.v2.keys.jsonl)
        row.key: table.name.split(".")[0]
        for table in (out / "index").glob("*.keys.jsonl")
        for row in record_index.parse_key_table(table.read_bytes())
    }
    assert split_of[name] == stored[original] != FRACTIONS.split_of(name)
    assert "this append: 1 new entry is a near copy of images already in the output" in done.stdout


def test_an_append_that_does_not_search_says_so(portraits, tmp_path):
    """--duplicates off on an append to a grouped output: the earlier groups stay listed,
    and the summary and metadata say that this append's entries were compared with nothing
    (it printed the earlier append's findings as if they were its own)."""
    data, truth = portraits
    first = tmp_path / "first"
    (first / "images").mkdir(parents=True)
    (first / "masks").mkdir()
    for key in sorted(k for k, v in truth.items() if v["family"] in ("distinct", "exact")):
        for kind, suffix in (("images", "jpg"), ("masks", "png")):
            shutil.copy(data / kind / f"{key}.{suffix}", first / kind / f"{key}.{suffix}")
    out = tmp_path / "out"
    _prepare(first, out)
    groups = _groups(out)
    copy = next(k for k, v in truth.items() if v["family"] == "resize")
    shutil.copy(data / "images" / f"{copy}.jpg", first / "images" / "late.jpg")
    shutil.copy(data / "masks" / f"{copy}.png", first / "masks" / "late.png")
    done = _prepare(first, out, "--append", "--duplicates", "off")
    section = json.loads((out / "metadata.json").read_text())["duplicates"]
    assert section["mode"] == "group" and section["latest_append"] == {"mode": "off"}
    assert "this append did not search for duplicates (--duplicates off)" in done.stdout
    assert _groups(out) == groups and groups


def test_an_appends_groups_are_those_of_a_prepare_of_the_union(
    portraits, portraits_grouped, tmp_path
):
    """Half of the entries prepared, then all of them appended: duplicates.jsonl and the
    group counts are those of one prepare of them all (portraits_grouped), stored images
    and new ones in the same groups, every key in the same split."""
    data, truth = portraits
    union, _ = portraits_grouped
    first = tmp_path / "first"
    _copy_entries(data, first, sorted(truth)[::2])
    out = tmp_path / "out"
    _prepare(first, out)
    done = _prepare(data, out, "--append")
    assert (out / "duplicates.jsonl").read_bytes() == (union / "duplicates.jsonl").read_bytes()
    stored, alone = (
        json.loads((o / "metadata.json").read_text())["duplicates"] for o in (out, union)
    )
    for count in ("groups", "keys_in_groups", "exact_groups", "conflicting_mask_groups"):
        assert stored[count] == alone[count] == stored["latest_append"][count], count
    assert stored["in_output_matches"] == stored["latest_append"]["in_output_matches"] > 0
    assert _split_of_every_version(out) == _split_of_every_version(union)
    assert (
        f"duplicates: {alone['groups']} groups of {alone['keys_in_groups']} entries" in done.stdout
    )
    assert _segprep("verify", str(out)).stdout.startswith("OK ")


def test_an_append_in_drop_mode_keeps_the_stored_image_and_verifies(portraits, tmp_path):
    """drop, then an append of every entry with drop: no group keeps two records, a stored
    image is never dropped (its new copies are), and verify reads the whole-dataset groups."""
    data, truth = portraits
    first = tmp_path / "first"
    _copy_entries(data, first, sorted(truth)[1::2])
    out = tmp_path / "out"
    _prepare(first, out, "--duplicates", "drop")
    stored = set(_key_tables(out))
    _prepare(data, out, "--append", "--duplicates", "drop")
    split_of, rejects = _split_of_every_version(out), _rejects(out)
    assert stored <= set(split_of)
    joined = 0
    for group in _groups(out):
        kept = [key for key in group["keys"] if key in split_of]
        assert len(kept) == 1, group
        joined += kept[0] in stored and len(group["keys"]) > 1
        for key in group["keys"]:
            assert key in split_of or rejects[key]["reason"] == "duplicate_image"
    assert joined > 0  # a stored image kept while its new copies went
    assert _segprep("verify", str(out)).stdout.startswith("OK ")
    # Appended again: the dropped copies are judged again, and counted once, as in rejects.jsonl
    _prepare(data, out, "--append", "--duplicates", "drop")
    dropped = sum(row["reason"] == "duplicate_image" for row in _rejects(out).values())
    section = json.loads((out / "metadata.json").read_text())["duplicates"]
    assert section["dropped"] == dropped > 0


def test_verify_names_a_drop_group_with_two_records_in_any_version():
    from beam_pipeline.commands.verify.duplicates import _kept_too_many

    split_of = {"a": "train", "b": "train", "c": "validation"}
    assert not _kept_too_many(["a", "x"], "train", split_of, set())
    assert _kept_too_many(["a", "b"], "train", split_of, set())  # two records
    assert _kept_too_many(["x", "a"], "train", split_of, set())  # not the smallest key
    # an append keeps the stored image, whatever its key, and drops its new copies
    assert not _kept_too_many(["x", "b"], "train", split_of, {"b"})
    assert not _kept_too_many(["a", "b"], "train", split_of, {"a", "b"})  # an earlier group run's
    assert _kept_too_many(["a", "b"], "train", split_of, {"b"})  # a is new, beside stored b
    assert _kept_too_many(["a", "b"], "train", split_of, {"a"})
    official = ["train", "validation"]
    assert _kept_too_many(["a", "c"], official, split_of, set())  # train beside validation
    assert not _kept_too_many(["a", "c"], official, split_of, {"a"})  # a was stored before
    assert not _kept_too_many(["a", "c"], official, split_of, {"a", "c"})
    assert _kept_too_many(["b", "c"], official, split_of, {"c"})  # b is new, beside c


def test_bucket_pairs_pairs_stored_images_with_each_other_never_with_another_output():
    """An append's search compares the images the output stores with each other too (its
    groups are the dataset's), but not with another output's (a leak is this run's)."""
    stored = [dups.Tagged(dups.existing_source("train"), dups.ImageHash(k, "", 0)) for k in "st"]
    theirs = dups.Tagged("gs://b/test/", dups.ImageHash("x", "", 1))
    found = list(dups.bucket_pairs(0, [*stored, theirs], 3))
    assert [(a.image.key, b.image.key) for a, b, _ in found] == [("s", "t")]


def test_stored_exact_copies_stand_as_one_apart_from_this_runs():
    same = "ab" * 32
    ours = [dups.Tagged("", dups.ImageHash(k, same, 5)) for k in ("b", "a")]
    stored = [dups.Tagged(dups.existing_source(s), dups.ImageHash(k, same, 5)) for s, k in
              (("train", "d"), ("validation", "c"))]  # fmt: skip
    standing, copies = dups.collapse_copies([*ours, *stored])
    assert sorted((t.source, t.image.key) for t in standing) == [
        ("", "a"), (dups.existing_source("validation"), "c")
    ]  # fmt: skip
    assert [t.image.key for t in copies["a"]] == ["a", "b"]
    assert [t.image.key for t in copies[(dups.STORED, "c")]] == ["c", "d"]


def test_a_stored_member_without_a_mask_digest_is_no_mask_conflict():
    """Tables written before mask digests were stored: their members are not compared."""
    same = "ab" * 32
    new = dups.ImageHash("n", same, 0, "m1")
    old = dups.ImageHash("o", same, 0, None)
    assert not dups.describe_group([new, old], "train", {"o": "train"}).conflicting_masks
    assert dups.describe_group([new, old], "train", {}).conflicting_masks
    other = dups.ImageHash("p", same, 0, "m2")
    assert dups.describe_group(
        [new, old, other], "train", {"o": "train", "p": "train"}
    ).conflicting_masks


def test_hash_rows_keep_the_mask_digest():
    row = dups.ImageHash("k", "ab" * 32, 7, "cd" * 32, b"s" * 192).row()
    assert dups.ImageHash.from_row(row).mask == "cd" * 32
    assert dups.ImageHash.from_row({**row, "mask": None}).mask is None
    with pytest.raises(ValueError, match="mask"):
        dups.ImageHash.from_row({**row, "mask": 5})


@pytest.mark.parametrize(
    "phash", ["-000000000000001", "+00000000000007f", "0000_0000_000007", " 00000000000007f"]
)
def test_a_stored_phash_is_16_hex_digits_and_nothing_int_would_also_take(phash):
    """int(x, 16) takes a sign, "_" and spaces: a forged row's phash of -1 would reach numpy's
    uint64 in the band search and crash the run instead of refusing the table."""
    row = dups.ImageHash("k", "ab" * 32, 7).row()
    assert dups.ImageHash.from_row(row).phash == 7
    with pytest.raises(ValueError, match="16 hex digits"):
        dups.ImageHash.from_row({**row, "phash": phash})


@pytest.mark.parametrize("field", ["sha256", "mask"])
@pytest.mark.parametrize("value", ["zz" * 32, "ab" * 31, "ab" * 32 + "a", 5])
def test_a_stored_digest_is_64_hex_digits(field, value):
    """The search takes a stored digest's first bytes with bytes.fromhex: a row whose digest
    is not hex is refused as a row, not met as a ValueError deep in the band search."""
    row = dups.ImageHash("k", "ab" * 32, 7, "cd" * 32).row()
    with pytest.raises(ValueError, match="sha256|64 hex"):
        dups.ImageHash.from_row({**row, field: value})


def test_exact_copies_stand_as_one_and_keep_every_pair():
    """Byte-identical images are compared once (their smallest key stands for them): the
    search reports each copy once, paired with that key, and the groups are the same as
    with every pair reported; a leak candidate of the standing key is one of every copy."""
    from beam_pipeline.job import image_hashes

    def tagged(key, sha, phash, source=""):
        return dups.Tagged(source, dups.ImageHash(key, sha, phash, None, b""))

    same, other = "ab" * 32, "cd" * 32
    copies = [tagged(f"c{n}", same, 0b1011) for n in (3, 1, 2, 0)]
    near = tagged("n0", other, 0b1010)  # one bit from the copies
    theirs = tagged("x0", "", 0b1011, source="gs://b/other/")
    everything = (*copies, near, theirs)
    probes = [image_hashes.as_probe(t) for t in everything]
    compared = image_hashes.compare_buckets([(0, probes)], 3)
    exact = [value for tag, value in compared if tag == "pairs"]  # the same bytes: no check
    candidates = [value for tag, value in compared if tag == "candidates"]
    assert len(exact) + len(candidates) == len(compared)
    whole = {
        image_hashes.identity(image_hashes.as_tuple(t)): image_hashes.as_tuple(t)
        for t in everything
    }
    found = [
        image_hashes.verify(
            c, whole[image_hashes.identity(c[0])], whole[image_hashes.identity(c[1])], 0.95
        )
        for c in candidates
    ]
    pairs = exact + [value for tag, value in found if tag == "pairs"]
    leaks = [value for tag, value in found if tag == "leaks"]
    keys = sorted(tuple(sorted((a[1], b[1]))) for a, b in pairs)
    assert keys == [("c0", "c1"), ("c0", "c2"), ("c0", "c3"), ("c0", "n0")]
    assert sorted(tuple(sorted((a[1], b[1]))) for a, b in exact) == keys[:3]
    assert sorted(key for key, _ in leaks) == ["c0", "c1", "c2", "c3", "n0"]
    collapsed = dups.complete_groups(
        (image_hashes.from_member(a).image, image_hashes.from_member(b).image) for a, b in pairs
    )
    every = [(a.image, b.image) for a, b in itertools.combinations((*copies, near), 2)]
    assert [[m.key for m in g] for g in collapsed] == [["c0", "c1", "c2", "c3", "n0"]]
    assert [[m.key for m in g] for g in collapsed] == [
        [m.key for m in g] for g in dups.complete_groups(every)
    ]
    # A second band's bucket of the same images reports nothing again.
    assert image_hashes.compare_buckets([(1, probes)], 3) == []


# ---- appends store their hashes (index/<split>.vN.hashes.jsonl) --------------------------


def _copy_entries(data: Path, into: Path, keys) -> None:
    (into / "images").mkdir(parents=True, exist_ok=True)
    (into / "masks").mkdir(parents=True, exist_ok=True)
    for key in keys:
        for kind, suffix in (("images", "jpg"), ("masks", "png")):
            shutil.copy(data / kind / f"{key}.{suffix}", into / kind / f"{key}.{suffix}")


def _table_rows(out: Path, suffix: str) -> dict[str, list[str]]:
    """file name -> keys in order, of every index/*<suffix> table."""
    keyed = suffix.endswith(".keys.jsonl")
    parse = record_index.parse_key_table if keyed else dups.parse_hash_rows
    return {
        table.name: [row.key for row in parse(table.read_bytes())]
        for table in sorted((out / "index").glob(f"*{suffix}"))
    }


def _split_of_every_version(out: Path) -> dict[str, str]:
    """key -> split, over every version's key tables."""
    tables = _table_rows(out, ".keys.jsonl")
    return {key: name.split(".")[0] for name, keys in tables.items() for key in keys}


@pytest.fixture(scope="module")
def appended(tmp_path_factory):
    """(out, first hash tables' bytes): 6 distinct photos prepared, then all 12 appended
    (photo010 is the one whose key gives train: both splits get appended records)."""
    root = tmp_path_factory.mktemp("appended")
    photos = _distinct_dataset(root / "all", count=12)
    _copy_entries(root / "all", root / "first", sorted(photos)[:6])
    out = root / "out"
    _prepare(root / "first", out)
    before = {p.name: p.read_bytes() for p in (out / "index").glob("*.hashes.jsonl")}
    _prepare(root / "all", out, "--append")
    return out, before


def test_an_appends_hashes_are_stored_one_row_per_record(appended):
    out, before = appended
    info = json.loads((out / "metadata.json").read_text())
    keys, hashes = _table_rows(out, ".keys.jsonl"), _table_rows(out, ".hashes.jsonl")
    for name, split in info["splits"].items():
        assert split["hashes"]["file"] == f"index/{name}.hashes.jsonl"  # version 1's, as it was
        appended_refs = [ref["file"] for ref in split.get("appended_hashes", [])]
        assert appended_refs == [f"index/{name}.v2.hashes.jsonl"]  # beside its key table
        for ref in appended_refs:
            table = ref.removeprefix("index/")
            assert hashes[table] == keys[table.replace(".hashes.", ".keys.")]
    stored = sorted(key for rows in keys.values() for key in rows)
    assert sorted(key for rows in hashes.values() for key in rows) == stored
    assert len(stored) == 12 and all(
        hashes[f"{s}.v2.hashes.jsonl"] for s in ("train", "validation")
    )
    assert before == {name: (out / "index" / name).read_bytes() for name in before}
    first = DatasetInfo.from_json(info).at_version(1)  # pinned: version 1's tables only
    assert all(not split.appended_hashes for split in first.splits.values())
    assert _segprep("verify", str(out)).stdout.startswith("OK ")


def test_verify_and_append_catch_a_tampered_appended_hash_table(appended, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(appended[0], out)
    table = next(t for t in (out / "index").glob("*.v2.hashes.jsonl") if t.stat().st_size)
    data = bytearray(table.read_bytes())
    data[data.index(b'"phash"') + 10] ^= 1  # same size, another sha256
    table.write_bytes(bytes(data))
    done = _segprep("verify", str(out), check=False)
    assert done.returncode != 0
    assert f"index/{table.name}: size or sha256 differs from metadata.json" in done.stdout
    data_dir = tmp_path / "data"
    _distinct_dataset(data_dir, count=2, first_seed=50)
    done = _prepare(data_dir, out, "--append", check=False)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
    assert f"index/{table.name}" in done.stderr and "segprep verify" in done.stderr


def test_leakage_check_sees_an_appended_images_near_copy(appended, tmp_path):
    test_out, _ = appended
    added = _table_rows(test_out, ".v2.keys.jsonl")
    original = sorted(key for rows in added.values() for key in rows)[-1]  # photo011
    data = tmp_path / "data"
    _distinct_dataset(data, count=6, first_seed=200)
    copy = _smooth_photo(int(original.removeprefix("photo"))).resize((200, 200), Image.LANCZOS)
    _write(data, "scraped", _jpeg(copy, 60), _mask(200, 1))
    out = tmp_path / "out"
    _prepare(data, out, "--leakage_check", str(test_out))
    rejects = _rejects(out)
    assert rejects["scraped"]["reason"] == "leaks_into"
    assert f"of {original} in {test_out}/" in rejects["scraped"]["detail"]


def test_a_second_appends_near_copy_joins_the_first_appends_image(tmp_path):
    photos = _distinct_dataset(tmp_path / "all", count=10)
    keys = sorted(photos)
    _copy_entries(tmp_path / "all", tmp_path / "first", keys[:6])
    out = tmp_path / "out"
    _prepare(tmp_path / "first", out)
    _prepare(tmp_path / "all", out, "--append")
    original = keys[-1]  # added by the first append
    stored = _split_of_every_version(out)
    name = _straddling_name(original, "again")
    copy = photos[original].resize((200, 200), Image.LANCZOS)
    _write(tmp_path / "all", name, _jpeg(copy, 60), _mask(200, 3))
    done = _prepare(tmp_path / "all", out, "--append")
    split_of = _split_of_every_version(out)
    assert split_of[name] == stored[original] != FRACTIONS.split_of(name)
    assert "this append: 1 new entry is a near copy of images already in the output" in done.stdout
    hashed = sorted(k for rows in _table_rows(out, ".hashes.jsonl").values() for k in rows)
    assert hashed == sorted(split_of)
    assert _segprep("verify", str(out)).stdout.startswith("OK ")


def test_an_append_over_an_output_without_hashes_stores_its_own(tmp_path):
    photos = _distinct_dataset(tmp_path / "all", count=8)
    _copy_entries(tmp_path / "all", tmp_path / "first", sorted(photos)[:5])
    out = tmp_path / "out"
    _prepare(tmp_path / "first", out, "--duplicates", "off")
    _prepare(tmp_path / "all", out, "--append")
    keys, hashes = _table_rows(out, ".keys.jsonl"), _table_rows(out, ".hashes.jsonl")
    assert hashes and all(".v2." in name for name in hashes)
    for name, rows in hashes.items():
        assert rows == keys[name.replace(".hashes.", ".keys.")]
    assert _segprep("verify", str(out)).stdout.startswith("OK ")
    # Version 1's images have no hashes: a leakage check against it would miss them.
    done = _prepare(
        tmp_path / "first", tmp_path / "other", "--leakage_check", str(out), check=False
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "split 'validation': some of its images have no image hashes" in done.stderr


def test_keys_the_fractions_leave_out_are_never_read_nor_grouped(tmp_path):
    """A key outside --train_size + --validation_size is rejected `not_in_split` before its
    files are read (as with --duplicates off), so it joins no group: its exact copy among
    the stored entries stays where its own key puts it, and no group names the left-out key."""
    fractions = SplitFractions(0.4, 0.4)
    data = tmp_path / "data"
    photos = _distinct_dataset(data, count=8)
    original = next(key for key in sorted(photos) if fractions.split_of(key) is not None)
    left_out = next(
        name
        for name in (f"{original}-copy{n}" for n in range(200))
        if fractions.split_of(name) is None
    )
    image = (data / "images" / f"{original}.jpg").read_bytes()
    mask = (data / "masks" / f"{original}.png").read_bytes()
    _write(data, left_out, image, mask)
    out = tmp_path / "out"
    _segprep("prepare", "--image_dir", str(data / "images"), "--mask_dir", str(data / "masks"),
             "--output_dir", str(out), "--train_size", "0.4", "--validation_size", "0.4",
             *RUNNER_ARGS)  # fmt: skip
    assert _rejects(out)[left_out]["reason"] == "not_in_split"
    assert _key_tables(out)[original] == fractions.split_of(original)
    assert all(left_out not in group["keys"] for group in _groups(out))
    _segprep("verify", str(out))


def test_hashes_made_in_a_batch_are_each_images_own(tmp_path):
    """The writers hash a few hundred thumbnails per call (dups.fingerprints); every image
    gets exactly the bits that hashing it alone gives it: photos, random pixels, flat
    and posterised thumbnails, in batches of one and of many."""
    photos = _distinct_dataset(tmp_path / "data", count=6)
    rng = np.random.default_rng(3)
    thumbs = [dups.thumbnail(photo) for photo in photos.values()]
    thumbs += [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(400)]
    thumbs += [np.full((32, 32, 3), value, dtype=np.uint8) for value in (0, 128, 255)]
    thumbs += [(thumb // 85 * 85).astype(np.uint8) for thumb in thumbs[:50]]
    images = [dups.Unhashed(f"k{n}", "ab" * 32, thumb) for n, thumb in enumerate(thumbs)]
    batched = dups.fingerprints(images)
    assert [dups.fingerprints([image])[0] for image in images[:20]] == batched[:20]
    for thumb, hashes in zip(thumbs, batched, strict=True):
        grey = np.asarray(Image.fromarray(thumb).convert("L"), dtype=np.float64)
        assert hashes.phash == dups._phashes(grey[None])[0]
        assert hashes.signature == dups._colour_signatures(thumb[None])[0]


def test_band_buckets_gathered_per_band_are_each_images_bands():
    """The launcher gathers a chunk's probes bucket by bucket (numpy, one band at a time):
    every bucket holds exactly the probes whose band value it is, in the chunk's order, as
    dups.bands gives them image by image; for edge hashes (0, all ones, few bits) too."""
    import random

    from beam_pipeline.job import duplicates as job_duplicates
    from beam_pipeline.job import image_hashes

    chooser = random.Random(7)
    for size in (0, 1, 2, 64, 300):
        chunk = [
            dups.ImageHash(
                f"k{i}",
                f"{chooser.getrandbits(256):064x}",
                chooser.choice([0, (1 << 64) - 1, chooser.getrandbits(64), chooser.getrandbits(6)]),
            )
            for i in range(size)
        ]
        for distance in (0, 3, 12, dups.MAX_DISTANCE):
            expected: dict = {}
            for hashes in chunk:
                probe = image_hashes.as_probe(dups.Tagged("", hashes))
                for band, value in enumerate(dups.bands(hashes.phash, distance)):
                    expected.setdefault((band, value), []).append(probe)
            gathered: dict = {}
            job_duplicates._gather_bands(chunk, gathered, distance)
            assert gathered == expected, (size, distance)


def test_bucket_comparison_skips_only_probes_no_pair_can_hold(monkeypatch):
    """compare_buckets compares only the probes within the distance of another probe of
    their bucket: what it finds (exact copies, candidates, leaks, stored pairs, their order)
    is what the whole buckets give, and far probes are left out."""
    from beam_pipeline.job import image_hashes

    rng = np.random.default_rng(7)
    distance = 6
    hashes = [int(value) for value in rng.integers(0, 2**63, size=300, dtype=np.int64)]
    images = [dups.Tagged("", dups.ImageHash(f"k{n:03d}", f"{n:032x}" * 2, h)) for n, h in
              enumerate(hashes)]  # fmt: skip
    for n, base in enumerate(hashes[:30]):  # near copies, exact copies, leaks, stored ones
        bits = rng.choice(64, size=int(rng.integers(0, distance + 2)), replace=False)
        near = base ^ sum(1 << int(bit) for bit in bits)
        images.append(dups.Tagged("", dups.ImageHash(f"n{n:03d}", f"{n + 1000:032x}" * 2, near)))
        images.append(dups.Tagged("", dups.ImageHash(f"c{n:03d}", f"{n:032x}" * 2, base)))
        source = dups.existing_source("train") if n % 2 else "gs://b/test/"
        images.append(dups.Tagged(source, dups.ImageHash(f"o{n:03d}", f"{n:032x}" * 2, near)))
    for n, base in enumerate(hashes[30:40], start=30):  # same bytes, far hashes: still paired
        far = base ^ ((1 << 54) - 1)  # only band 0 (the top 10 bits) stays shared
        images.append(dups.Tagged("", dups.ImageHash(f"s{n:03d}", f"{n:032x}" * 2, far)))
    buckets: dict[tuple[int, int], list] = {}
    for image in images:
        for band, value in enumerate(dups.bands(image.image.phash, distance)):
            buckets.setdefault((band, value), []).append(image_hashes.as_probe(image))
    chunk = [(band, probes) for (band, _), probes in sorted(buckets.items())]
    found = image_hashes.compare_buckets(chunk, distance)
    kept = sum(len(dups.within_distance_of_another(probes, distance)) for _, probes in chunk)
    monkeypatch.setattr(dups, "within_distance_of_another", lambda probes, _: list(probes))
    whole = image_hashes.compare_buckets(chunk, distance)
    assert found == whole
    kinds = {kind for kind, _ in found}
    assert kinds == {"pairs", "candidates"} and len(found) >= 60
    assert kept < sum(len(probes) for _, probes in chunk) / 2


def test_sixteen_bit_grey_images_are_hashed_by_their_pixels_not_as_white(tmp_path):
    """16-bit grey PNGs: Pillow's convert() clips every value above 255, so each of them
    hashed as one white image and distinct ones were grouped (drop rejected them). Scaled as
    the record stores them, distinct ones stay apart and an 8-bit copy is still found."""
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    (data / "masks").mkdir()

    def png(pixels: np.ndarray) -> bytes:
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format="PNG")
        return out.getvalue()

    for seed in range(6):
        grey = np.asarray(_smooth_photo(seed).convert("L"), dtype=np.uint16)
        (data / "images" / f"deep{seed}.png").write_bytes(png(grey * 257))
        (data / "masks" / f"deep{seed}.png").write_bytes(_mask(256, seed))
    shallow = np.asarray(_smooth_photo(0).convert("L"))
    (data / "images" / "shallow0.png").write_bytes(png(shallow))
    (data / "masks" / "shallow0.png").write_bytes(_mask(256, 0))
    assert Image.open(data / "images" / "deep0.png").mode.startswith("I")
    out = tmp_path / "out"
    _prepare(data, out, "--duplicates", "drop")
    assert [group["keys"] for group in _groups(out)] == [["deep0", "shallow0"]]
    assert set(_rejects(out)) == {"shallow0"}


def test_the_append_line_keeps_drops_among_new_images_when_none_copies_a_stored_one():
    from beam_pipeline.commands.summary import _append_line

    line = _append_line({"mode": "drop", "in_output_matches": 0, "dropped": 3, "groups": 2})
    assert "no new entry is a near copy of an image already in the output" in line
    assert "3 new entries dropped as duplicate_image" in line
    one = _append_line({"mode": "drop", "in_output_matches": 0, "dropped": 1, "groups": 1})
    assert "1 new entry dropped as duplicate_image" in one, one


# ---- buckets of one hash: work near-linear in the bucket ---------------------------------


def _sha(number: int) -> str:
    return hashlib.sha256(str(number).encode()).hexdigest()


def _signature(seed: int) -> bytes:
    return np.random.default_rng(seed).integers(-127, 128, 192, dtype=np.int8).tobytes()


def test_images_of_one_hash_and_signature_stand_as_one_and_still_group_completely():
    """Distinct bytes of one perceptual hash and one colour signature (a photo re-saved,
    a pixel apart): each pairs with exactly what the others pair with and verifies with
    every other, so they stand as one like identical bytes. The bucket reports n - 1
    unverified pairs, not n(n - 1)/2 candidates to verify, and the group is the one every
    pair gives (complete linkage)."""
    from beam_pipeline.job import image_hashes

    n, sig = 400, _signature(1)
    images = [dups.ImageHash(f"k{i:04d}", _sha(i), 0x5A5A, None, sig) for i in range(n)]
    other = dups.ImageHash("z", "f" * 64, 0x5A5A ^ 0b111, None, _signature(2))  # not verified
    probes = [image_hashes.as_probe(dups.Tagged("", image)) for image in (*images, other)]
    found = image_hashes.compare_buckets([(0, probes)], 12)
    pairs = [value for tag, value in found if tag == "pairs"]
    candidates = [value for tag, value in found if tag == "candidates"]
    assert len(pairs) == n - 1 and len(candidates) == 1  # was 0 pairs, n(n + 1)/2 candidates
    grouped = dups.complete_groups(
        (image_hashes.from_member(a).image, image_hashes.from_member(b).image) for a, b in pairs
    )
    every = [(a, b) for a, b in itertools.combinations(images, 2) if dups.verified(a, b, 0.95)]
    assert len(every) == n * (n - 1) // 2
    assert [_keys(g) for g in grouped] == [_keys(g) for g in dups.complete_groups(every)]
    assert [len(g) for g in grouped] == [n]


def _keys(group):
    return [member.key for member in group]


def test_a_flat_or_unsigned_image_is_not_one_look_with_another():
    """Flat images verify only by identical bytes, and images without a signature by the
    distance alone: neither stands for another of its hash."""
    flat = [dups.ImageHash(k, k * 64, 7, None, bytes(192)) for k in "ab"]
    unsigned = [dups.ImageHash(k, k * 64, 7) for k in "cd"]
    assert dups.look(flat[0]) is None and dups.look(unsigned[0]) is None
    standing, copies = dups.collapse_copies([dups.Tagged("", i) for i in flat + unsigned])
    assert len(standing) == 4 and copies == {}


def test_another_outputs_bucket_is_compared_only_against_this_runs_images(monkeypatch):
    """--leakage_check against a table of many rows near one hash (a restamped padding, or
    thousands of near-blank frames): another output's hashes are never compared with each
    other, and its rows of one look stand as one (the leak names the smallest key, the
    closest among equals). The hashes compared grow with this run's images times the
    bucket, not with the bucket squared."""
    from beam_pipeline.job import image_hashes

    compared = []
    counted = np.bitwise_count
    monkeypatch.setattr(np, "bitwise_count", lambda x: compared.append(x.size) or counted(x))
    rng = np.random.default_rng(3)
    n, base = 3000, 0x0123_4567_89AB_CDEF
    flips = [rng.choice(64, size=3, replace=False) for _ in range(n)]
    theirs = [  # distinct re-encodes: distinct hashes within 3 bits, distinct signatures
        dups.ImageHash(f"o{i:05d}", "", base ^ sum(1 << int(b) for b in bits), None, _signature(i))
        for i, bits in enumerate(flips)
    ]
    padded = [dups.ImageHash(f"p{i:05d}", "", base, None, _signature(9)) for i in range(n)]
    ours = [dups.ImageHash(f"k{i}", _sha(i), base, None, _signature(9)) for i in range(3)]
    members = [dups.Tagged("", image) for image in ours]
    members += [dups.Tagged("/other/", image) for image in theirs + padded]
    probes = [image_hashes.as_probe(member) for member in members]
    found = image_hashes.compare_buckets([(0, probes)], 12)
    candidates = [value for tag, value in found if tag == "candidates"]
    # each of ours against each distinct row and the padding's smallest key (ours stand as
    # one: one look), fanned out to its copies
    assert len(candidates) == 3 * (n + 1)
    assert {c[1][1] for c in candidates} - {t.key for t in theirs} == {"p00000"}
    assert sum(compared) <= 10 * len(members)  # was 2 * len(members) ** 2


def test_the_hash_row_bound_is_the_longest_row_a_key_can_make():
    """limits.HASH_ROW_BYTES, which bounds a split's hash tables by its records, is the row
    of a key of PATH_MAX control characters (6 bytes each as JSON) with every field."""
    from transforms.limits import DEFAULT_METADATA_LIMITS, HASH_ROW_BYTES

    key = "\x01" * DEFAULT_METADATA_LIMITS.key_bytes
    row = dups.ImageHash(key, "f" * 64, (1 << 64) - 1, "e" * 64, bytes(range(192)))
    assert len(dups.hash_rows_bytes([row])) == HASH_ROW_BYTES
