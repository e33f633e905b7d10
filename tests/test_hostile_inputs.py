"""Hostile and odd inputs through the real CLI: bombs, FIFOs, devices, odd names, permissions.

Every case ends as a reject with a reason (or a one-line error, exit 2), the run finishes,
the fresh output passes `segprep verify`, and the whole run's peak memory stays bounded.
Memory is the peak proportional set size of the run's whole process tree, sampled.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest
from PIL import Image

from beam_pipeline.cli import main
from tests.helpers.images import blob_mask, encode, rgb_jpeg
from tests.helpers.mat_files import mat_bytes, nested_struct_mat
from tests.helpers.process_tree import SEGPREP, run_measured

H, W = 24, 16
MASK = blob_mask(H, W)
PEAK_LIMIT_MB = 1024


def _hdf5_mask(path: Path, **datasets: tuple[tuple[int, int], np.ndarray | None]) -> None:
    """MATLAB v7.3: HDF5 behind a 512-byte header; a dataset without data is all fill value,
    so a 60000x60000 declaration costs a few KB on disk."""
    with h5py.File(path, "w", userblock_size=512) as handle:
        for name, (shape, data) in datasets.items():
            if data is None:
                handle.create_dataset(name, shape=shape, dtype="u1", chunks=(1000, 1000))
            else:
                handle.create_dataset(name, data=data.T)
    with open(path, "r+b") as handle:
        handle.write(
            b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created by: segprep tests".ljust(128)
        )


def _inflating_mat(declared: tuple[int, int], inflated_bytes: int) -> bytes:
    """A compressed MAT v5 file whose mask header declares `declared` while its zlib stream
    inflates to `inflated_bytes` of zeros: streamed, so the test never holds them."""
    small = mat_bytes(mask=np.zeros((2, 2), np.uint8))
    matrix = zlib.decompress(small[136:])
    # miMATRIX element: tag (8), array flags (16), dimensions tag (8) and sizes (8), the
    # name 'mask' as a small element (8); then the data: an miUINT8 tag and the bytes.
    header = bytearray(matrix[:48])
    header[32:40] = np.array(declared, "<i4").tobytes()
    header[4:8] = np.array([len(header) - 8 + 8 + inflated_bytes], "<u4").tobytes()
    data_tag = np.array([2, inflated_bytes], "<u4").tobytes()
    compressor = zlib.compressobj(1)
    stream = [compressor.compress(bytes(header) + data_tag)]
    zeros = bytes(1 << 20)
    for start in range(0, inflated_bytes, len(zeros)):
        stream.append(compressor.compress(zeros[: min(len(zeros), inflated_bytes - start)]))
    stream.append(compressor.flush())
    body = b"".join(stream)
    tag = np.array([15, len(body)], "<u4").tobytes()  # miCOMPRESSED
    return small[:128] + tag + body


def _scan_bomb(repeats: int) -> bytes:
    """A progressive JPEG whose last scan is repeated: libjpeg decodes each one over every
    block (30,000 repeats of a 2 MB file: minutes of CPU)."""
    image = Image.new("L", (2000, 2000))
    data = encode(image, "JPEG", progressive=True)
    last = data.rindex(b"\xff\xda")
    return data[:-2] + data[last:-2] * repeats + data[-2:]


def _write(folder: Path, name: str, data: bytes) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _zero_png(width: int, height: int) -> bytes:
    """An all-transparent RGBA PNG of width x height in a few hundred KB."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 6, 0, 0, 0])
    compressor = zlib.compressobj(9)
    row = bytes(1 + 4 * width)
    data = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    )


def _ico(png: bytes) -> bytes:
    """A one-entry ICO file whose image is `png` (it claims 16x16)."""
    entry = bytes([16, 16, 0, 0]) + (1).to_bytes(2, "little") + (32).to_bytes(2, "little")
    entry += len(png).to_bytes(4, "little") + (22).to_bytes(4, "little")
    return (0).to_bytes(2, "little") + (1).to_bytes(2, "little") * 2 + entry + png


def _icns(png: bytes) -> bytes:
    """An ICNS file whose one 128x128 slot ('ic07') holds `png`."""
    element = b"ic07" + (8 + len(png)).to_bytes(4, "big") + png
    return b"icns" + (8 + len(element)).to_bytes(4, "big") + element


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """One folder pair holding every hostile case, plus a few good entries."""
    root = tmp_path_factory.mktemp("hostile")
    images, masks = root / "images", root / "masks"
    images.mkdir()
    masks.mkdir()
    good_image, good_mask = rgb_jpeg(H, W), mat_bytes(mask=MASK)
    expected: dict[str, str] = {}

    def case(key: str, outcome: str, image: bytes | None = good_image, mask=good_mask) -> None:
        if image is not None:
            _write(images, f"{key}.jpg", image)
        if isinstance(mask, bytes):
            _write(masks, f"{key}_mask.mat", mask)
        expected[key] = outcome

    for key in ("good1", "good2", "good3"):
        case(key, "accepted")
    # Masks that declare more than they are.
    case("hdf5_bomb", "mask_too_large", mask=None)
    _hdf5_mask(masks / "hdf5_bomb_mask.mat", mask=((60000, 60000), None))
    case("hdf5_unused_bomb", "accepted", mask=None)
    _hdf5_mask(
        masks / "hdf5_unused_bomb_mask.mat", mask=((H, W), MASK), junk=((60000, 60000), None)
    )
    # HDF5 data kept elsewhere: another file's bytes (a secret) or a FIFO would become the
    # mask, so storage outside the file and links to other files are refused, never read.
    secret = root / "secret.txt"
    secret.write_bytes(b"SECRET=" + bytes(range(1, 128)) * 3)
    os.mkfifo(root / "waiting")

    def outside(name: str, build) -> None:
        case(name, "mask_unreadable", mask=None)
        _hdf5_mask(masks / f"{name}_mask.mat")
        with h5py.File(masks / f"{name}_mask.mat", "r+") as handle:
            build(handle)

    for name, target in (("hdf5_external_raw", secret), ("hdf5_external_fifo", root / "waiting")):
        outside(
            name,
            lambda handle, target=target: handle.create_dataset(
                "mask", shape=(W, H), dtype="u1", external=[(str(target), 0, H * W)]
            ),
        )
    outside(
        "hdf5_external_link",
        lambda handle: handle.__setitem__(
            "mask", h5py.ExternalLink(str(masks / "good1_mask.mat"), "/mask")
        ),
    )
    # Structs: their size is not declared (bounded all the same), and scipy reads nesting
    # recursively in C, so 200,000 levels in 500 KB killed the writer.
    boundaries = np.zeros((170, 1 << 20), np.uint8)  # past the 160 MB a mask struct may hold
    case("struct_bomb", "mask_too_large", mask=mat_bytes(mask={"Seg": MASK, "B": boundaries}))
    del boundaries
    case("struct_nested_deep", "mask_variable", mask=nested_struct_mat(200_000))
    case("jpeg_scan_bomb", "image_too_large", image=_scan_bomb(3000))
    case("zlib_30000", "mask_too_large", mask=_inflating_mat((30000, 30000), 900_000_000))
    case("zlib_lying_header", "mask_too_large", mask=_inflating_mat((H, W), 200_000_000))
    big = Image.new("1", (8000, 8000))
    case("png_mask_bomb", "mask_too_large", mask=None)
    _write(masks, "png_mask_bomb_mask.png", encode(big, "PNG"))
    case("empty_mat_mask", "mask_not_2d", mask=mat_bytes(mask=np.zeros((0, 0), np.uint8)))
    case("empty_hdf5_mask", "mask_not_2d", mask=None)
    _hdf5_mask(masks / "empty_hdf5_mask_mask.mat", mask=((H, 0), np.zeros((H, 0), np.uint8)))
    # Formats Pillow decodes while opening, before a size is known (ICO, ICNS: a 9400x9400
    # PNG inside held 350 MB), or that segprep does not take (PCX): never decoded.
    inner = _zero_png(9400, 9400)
    case("ico_bomb", "image_unreadable", image=_ico(inner))
    case("icns_bomb", "image_unreadable", image=_icns(inner))
    case("pcx_named_jpg", "image_unreadable", image=encode(Image.new("P", (W, H)), "PCX"))
    # Transparency near the pixel limit: composited a band at a time (one image held 1 GB).
    side = 6300
    case("rgba_near_limit", "accepted", image=_zero_png(side, side), mask=None)
    _write(masks, "rgba_near_limit_mask.mat", mat_bytes(mask=np.zeros((side, side), np.uint8)))
    # Files that are not what their names say.
    case("sparse_6gb", "image_too_large", image=None)
    with open(images / "sparse_6gb.jpg", "wb") as handle:
        handle.truncate(6 << 30)
    case("dev_zero", "not_a_file", image=None)
    (images / "dev_zero.jpg").symlink_to("/dev/zero")
    case("fifo_image", "not_a_file", image=None)
    os.mkfifo(images / "fifo_image.jpg")
    case("fifo_mask", "not_a_file", mask=None)
    os.mkfifo(masks / "fifo_mask_mask.mat")
    case("folder_named_jpg", "not_a_file", image=None)
    (images / "folder_link.d").mkdir()
    (images / "folder_named_jpg.jpg").symlink_to(images / "folder_link.d")
    # Names that once broke the accounting.
    for folder in (images, masks):
        _write(folder, ".DS_Store", b"\0\0\0\1Bud1")  # hidden: ignored in both folders
        _write(folder, ".hidden/ghost.jpg", good_image)
    case("00105", "accepted")
    _write(images, "00105", b"no extension")  # beside 00105.jpg: its own reject
    expected[str(images / "00105")] = "unrecognized_file"
    _write(images, "folder_link.d/inner.txt", b"x")
    expected[str(images / "folder_link.d" / "inner.txt")] = "unrecognized_file"
    latin1 = os.fsencode(str(images)) + b"/caf\xe9.jpg"
    with open(latin1, "wb") as handle:
        handle.write(good_image)
    expected[str(images) + "/caf\\xe9.jpg"] = "bad_file_name"
    case("unreadable", "read_error")
    os.chmod(images / "unreadable.jpg", 0)
    return images, masks, expected


def _run(images: Path, masks: Path, out: Path, *extra: str) -> tuple[int, str, int]:
    """(exit code, stderr, peak PSS in MB of the whole process tree) of `segprep prepare`
    without CAP_DAC_OVERRIDE, so a file without read permission is unreadable even to root."""
    drop = "-dac_override,-dac_read_search"
    done, peak = run_measured(
        ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", "--", *SEGPREP, "prepare"]
        + ["--image_dir", str(images), "--mask_dir", str(masks), "--output_dir", str(out)]
        + ["--runner", "FnApiRunner", "--max_reject_fraction", "1", *extra],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    return done.returncode, done.stderr, peak >> 20


def test_every_hostile_input_is_a_reject_with_its_reason_and_memory_stays_bounded(
    hostile, tmp_path
):
    images, masks, expected = hostile
    out = tmp_path / "out"
    code, err, peak_mb = _run(images, masks, out, "--writer_processes", "1")
    assert code == 0, err
    assert 0 < peak_mb < PEAK_LIMIT_MB, f"peak PSS {peak_mb} MB"
    rejects = {
        entry["key"]: entry
        for entry in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())
    }
    outcomes = {key: rejects[key]["reason"] if key in rejects else "accepted" for key in expected}
    assert outcomes == expected
    assert set(rejects) <= set(expected)  # nothing else, hidden files included
    assert all(entry["detail"] for entry in rejects.values())
    metadata = json.loads((out / "metadata.json").read_text())
    accepted = sum(split["num_examples"] for split in metadata["splits"].values())
    assert accepted == sum(outcome == "accepted" for outcome in expected.values())
    assert metadata["num_discovered"] == len(expected)
    assert main(["verify", str(out)]) == 0


def test_writer_processes_bound_memory_too(hostile, tmp_path):
    images, masks, _ = hostile
    code, err, peak_mb = _run(images, masks, tmp_path / "out", "--writer_processes", "2")
    assert code == 0, err
    assert 0 < peak_mb < PEAK_LIMIT_MB, f"peak PSS {peak_mb} MB"
    assert main(["verify", str(tmp_path / "out")]) == 0


KMSG = Path("/proc/kmsg")


def _kmsg_opens() -> bool:
    """/proc/kmsg opens as a regular file (root with CAP_SYSLOG, not masked by a container).
    Opening takes nothing from the kernel's log; reading would."""
    try:
        descriptor = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(descriptor).st_mode)
    finally:
        os.close(descriptor)


@pytest.mark.skipif(not _kmsg_opens(), reason="needs /proc/kmsg readable: root with CAP_SYSLOG")
def test_a_link_to_a_kernel_file_whose_read_waits_is_a_reject_not_a_hang(tmp_path):
    """/proc/kmsg is a "regular" file of 0 bytes whose read waits for the kernel's next log
    line: open_regular opened it non-blocking, checked it, then set it blocking, and the
    writer hung for ever on an empty log. The descriptor now stays non-blocking: an empty
    log is a read that would wait, an error (test_a_read_that_would_wait_is_an_error_not_a_wait),
    and a log with lines gives the one byte a file of 0 bytes is read for, which is no
    image or mask. Either way a reject, never a hang."""
    images, masks = tmp_path / "images", tmp_path / "masks"
    for key in ("ok", "kmsg", "kmsg_as_mask"):
        _write(images, f"{key}.jpg", rgb_jpeg(H, W))
        _write(masks, f"{key}_mask.mat", mat_bytes(mask=MASK))
    os.remove(images / "kmsg.jpg")
    (images / "kmsg.jpg").symlink_to(KMSG)  # a link to a regular file is read like the file
    os.remove(masks / "kmsg_as_mask_mask.mat")
    (masks / "kmsg_as_mask_mask.mat").symlink_to(KMSG)
    out = tmp_path / "out"
    done = subprocess.run(
        [*SEGPREP, "prepare", "--image_dir", str(images), "--mask_dir", str(masks)]
        + ["--output_dir", str(out), "--runner", "FnApiRunner", "--writer_processes", "1"]
        + ["--max_reject_fraction", "1"],
        capture_output=True,
        text=True,
        timeout=600,  # a guard against the hang, not a speed check
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert {entry["key"] for entry in rejects} == {"kmsg", "kmsg_as_mask"}, rejects
    assert main(["verify", str(out)]) == 0


def test_a_read_that_would_wait_is_an_error_not_a_wait():
    """open_regular's reader keeps its descriptor non-blocking (regular files ignore it):
    a read the kernel would make wait is a WouldBlockError, through read, readline and
    hashlib's reads alike, never a hang nor a silent end. No regular file whose read waits
    is reachable to every user, so its reader is given a pipe a live writer holds open
    and never writes to."""
    import hashlib
    import io

    from transforms import files

    read_end, write_end = os.pipe()
    try:
        os.set_blocking(read_end, False)
        handle = io.BufferedReader(files._NonBlockingFile(read_end, "waiting"))
        for read in (lambda: handle.read(10), handle.readline, handle.read):
            with pytest.raises(files.WouldBlockError, match="waiting: reading it would wait"):
                read()
        with pytest.raises(files.NotAFileError):  # a not_a_file reject where images are read
            hashlib.file_digest(handle, "sha256")
        handle.close()
    finally:
        os.close(write_end)


def test_an_unreadable_sub_folder_stops_the_run_before_it_starts(tmp_path):
    images, masks = tmp_path / "images", tmp_path / "masks"
    (images / "locked").mkdir(parents=True)
    masks.mkdir()
    _write(images, "1.jpg", rgb_jpeg(H, W))
    _write(masks, "1_mask.mat", mat_bytes(mask=MASK))
    os.chmod(images / "locked", 0)
    code, err, _ = _run(images, masks, tmp_path / "out")
    assert code == 2
    assert "cannot read the folder" in err and "locked" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_folder_nested_past_path_max_is_one_short_line_naming_it(tmp_path):
    """A mask folder 500 sub-folders deep (4.5 KB paths): nothing can open what lies there,
    so the run stops before it starts (exit 2) with one line that names the folder by the
    start and end of its path, instead of "failed: OSError" and a 4 KB line (exit 1)."""
    images, masks = tmp_path / "images", tmp_path / "masks"
    _write(images, "1.jpg", rgb_jpeg(H, W))
    _write(masks, "1_mask.mat", mat_bytes(mask=MASK))
    folder = os.open(masks, os.O_RDONLY)
    for _ in range(500):  # by descriptor: each path alone would be too long to make
        os.mkdir("dddddddd", dir_fd=folder)
        deeper = os.open("dddddddd", os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = deeper
    os.close(os.open("x_mask.mat", os.O_WRONLY | os.O_CREAT, dir_fd=folder))
    os.close(folder)
    code, err, _ = _run(images, masks, tmp_path / "out")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 400, err
    assert lines[0].startswith(f"segprep: error: --mask_dir: cannot read the folder {masks}/dd")
    assert "dddddddd/dddddddd: its path is" in lines[0] and "OSError" not in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("duplicates", ["group", "off"])
def test_keys_holding_unicode_line_separators_are_stored_and_verify(tmp_path, duplicates):
    """U+2028, U+2029 and U+0085 are line breaks to str.splitlines, not to JSON lines: keys
    holding them are stored, read back by the tables' readers, and may move with their group
    (the exact copy of good1 is named so that its key alone would put it in the other split)."""
    from transforms.splits import SplitFractions

    fractions = SplitFractions(0.5, 0.5)
    images, masks = tmp_path / "images", tmp_path / "masks"
    image, mask = rgb_jpeg(H, W), mat_bytes(mask=MASK)
    keys = ["good1", "line\u2028break", "para\u2029break", "next\u0085line"]
    keys.append(
        next(
            name
            for name in (f"good1\u2028copy{n}" for n in range(100))
            if fractions.split_of(name) != fractions.split_of("good1")
        )
    )
    for number, key in enumerate(keys):
        own = image if key.startswith("good1") else rgb_jpeg(H, W, seed=number)
        _write(images, f"{key}.jpg", own)
        _write(masks, f"{key}_mask.mat", mask)
    out = tmp_path / "out"
    split = ["--train_size", "0.5", "--validation_size", "0.5"]
    assert main(["prepare", "--image_dir", str(images), "--mask_dir", str(masks),
                 "--output_dir", str(out), "--duplicates", duplicates, *split,
                 "--runner", "FnApiRunner"]) == 0  # fmt: skip
    stored = {}
    for table in (out / "index").glob("*.keys.jsonl"):
        for line in table.read_bytes().splitlines():
            stored[json.loads(line)[0]] = table.name.split(".")[0]
    assert sorted(stored) == sorted(keys)
    if duplicates == "group":
        assert stored[keys[-1]] == stored["good1"]
    assert main(["verify", str(out)]) == 0


def test_control_characters_from_names_reach_the_terminal_escaped(tmp_path):
    """A key's escape sequences (clear screen, colours, carriage return) are printed as
    Python escapes in the summary and in verify's problems, never raw; the summary stays
    one line per row. Stored keys keep their bytes."""
    images, masks = tmp_path / "images", tmp_path / "masks"
    hostile = "\x1b[2J\x1b[31mRED\r"
    _write(images, "good.jpg", rgb_jpeg(H, W))
    _write(masks, "good_mask.mat", mat_bytes(mask=MASK))
    _write(images, f"{hostile}.jpg", b"\xff\xd8 not a whole JPEG")
    _write(masks, f"{hostile}_mask.mat", mat_bytes(mask=MASK))
    out = tmp_path / "out"
    done = subprocess.run(
        [*SEGPREP, "prepare", "--image_dir", str(images), "--mask_dir", str(masks),
         "--output_dir", str(out), "--runner", "FnApiRunner", "--max_reject_fraction", "1"],
        capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\r" not in done.stdout
    assert "e.g. \\x1b[2J\\x1b[31mRED\\r" in done.stdout
    rejected = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert [entry["key"] for entry in rejected] == [hostile]


def test_a_name_that_is_not_utf8_beside_a_file_named_like_its_escape_is_one_reject(tmp_path):
    """`n<0xE9>.txt` is rejected under its shown (escaped) path, which is the real path of a
    file named `n\\xe9.txt` beside it: two rejects of one key failed the run (AccountingError,
    nothing published). They are one duplicate_key naming both; either alone is its own."""
    images, masks = tmp_path / "images", tmp_path / "masks"
    _write(images, "good.jpg", rgb_jpeg(H, W))
    _write(masks, "good_mask.mat", mat_bytes(mask=MASK))
    for name in (b"n\xe9.txt", b"n\\xe9.txt", b"alone\\x41.txt", b"caf\xe9.jpg"):
        with open(os.fsencode(str(images)) + b"/" + name, "wb") as handle:
            handle.write(b"x")
    out = tmp_path / "out"
    assert main(["prepare", "--image_dir", str(images), "--mask_dir", str(masks),
                 "--output_dir", str(out), "--runner", "FnApiRunner",
                 "--max_reject_fraction", "1"]) == 0  # fmt: skip
    rejects = {
        entry["key"]: entry
        for entry in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())
    }
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        f"{images}/n\\xe9.txt": "duplicate_key",
        f"{images}/alone\\x41.txt": "unrecognized_file",
        f"{images}/caf\\xe9.jpg": "bad_file_name",
    }
    both = rejects[f"{images}/n\\xe9.txt"]["detail"]
    assert both == "2 files for one key: n\\xe9.txt (not UTF-8), n\\xe9.txt"
    assert main(["verify", str(out)]) == 0
