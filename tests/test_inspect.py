"""`segprep inspect`: the sheet's layout, its mask tiles against the stored masks, rejects mode
(published or staged by a refused run), where the PNG goes and that it never replaces one."""

from __future__ import annotations

import concurrent.futures
import io
import json
import os
import shutil
import time

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageFile

from beam_pipeline import cli
from beam_pipeline.commands import inspect_sheet
from beam_pipeline.commands.inspect_sheet import build_sheet
from beam_pipeline.commands.inspect_sheet.drawing import _tile_box
from shard_reader.decoding import FEATURE_SPEC
from tests.helpers.runs import expected_rejects
from transforms.format import features
from transforms.format.naming import METADATA_FILE, REJECTS_FILE, run_dir
from transforms.rejects import Reason

SAMPLE_TILE = (150, 200)  # conftest's 160x120 (HxW) samples scaled to 200 px tall


def _expected_size(count: int, tile: tuple[int, int]) -> tuple[int, int]:
    m = inspect_sheet
    columns, rows = min(count, m.COLUMNS), -(-count // m.COLUMNS)
    cell_width, cell_height = 3 * tile[0] + 2 * m.TILE_GAP, tile[1] + m.CAPTION_HEIGHT
    return (
        2 * m.MARGIN + columns * cell_width + (columns - 1) * m.CELL_GAP,
        m.TITLE_HEIGHT + 2 * m.MARGIN + rows * cell_height + (rows - 1) * m.CELL_GAP,
    )


def _stored_masks(output_dir) -> dict[str, np.ndarray]:
    """key -> boolean foreground, decoded with Pillow (not the reader) and thresholded."""
    metadata = json.loads((output_dir / METADATA_FILE).read_text())
    masks = {}
    for split in metadata["splits"].values():
        for shard in split["shards"]:
            for record in tf.data.TFRecordDataset(str(output_dir / shard["file"])):
                parsed = tf.io.parse_single_example(record, FEATURE_SPEC)
                encoded = parsed[features.MASK].numpy()
                pixels = np.asarray(Image.open(io.BytesIO(encoded)).convert("L"))
                masks[parsed[features.KEY].numpy().decode()] = pixels >= features.MASK_THRESHOLD
    return masks


def test_sheet_layout_and_output(prepared, tmp_path, capsys):
    output_dir, _ = prepared
    out = tmp_path / "sheet.png"
    assert cli.main(["inspect", str(output_dir), "--count", "5", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)

    written = Image.open(out)
    assert written.format == "PNG"
    assert written.size == _expected_size(5, SAMPLE_TILE)  # 4 entries per row: 2 rows
    sheet = build_sheet(str(output_dir), "train", 5, rejects=False)
    assert sheet.tile_size == SAMPLE_TILE
    assert len(sheet.keys) == 5 == len(set(sheet.keys))
    assert np.array_equal(np.asarray(written.convert("RGB")), np.asarray(sheet.image))


def test_mask_tiles_show_the_stored_masks(prepared):
    output_dir, _ = prepared
    sheet = build_sheet(str(output_dir), "train", 6, rejects=False)
    stored = _stored_masks(output_dir)
    pixels = np.asarray(sheet.image)
    for index, key in enumerate(sheet.keys):
        expected = Image.fromarray(stored[key].astype(np.uint8) * 255).resize(
            SAMPLE_TILE, Image.NEAREST
        )
        expected = np.asarray(expected) >= 128
        left, top, right, bottom = _tile_box(index, 1, sheet.tile_size)
        tile = pixels[top:bottom, left:right]
        assert 0.05 < expected.mean() < 0.95, key  # both classes present, so the check can fail
        white = (tile >= 250).all(axis=2)
        black = (tile <= 5).all(axis=2)
        assert np.array_equal(white, expected), key
        assert np.array_equal(black, ~expected), key

        # Overlay: untouched image outside the mask, tinted inside it.
        image = _tile(pixels, _tile_box(index, 0, sheet.tile_size))
        overlay = _tile(pixels, _tile_box(index, 2, sheet.tile_size))
        assert np.array_equal(overlay[~expected], image[~expected]), key
        changed = (overlay != image).any(axis=2)
        assert changed[expected].mean() > 0.95, key


def _tile(pixels: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    left, top, right, bottom = box
    return pixels[top:bottom, left:right]


def test_count_larger_than_split(prepared):
    output_dir, result = prepared
    available = result.metadata["splits"]["validation"]["num_examples"]
    assert 0 < available < 16
    sheet = build_sheet(str(output_dir), "validation", 16, rejects=False)
    assert len(sheet.keys) == available
    assert sheet.image.size == _expected_size(available, SAMPLE_TILE)


def test_rejects_sheet(prepared, sample_dataset, tmp_path, capsys):
    output_dir, _ = prepared
    out = tmp_path / "rejects.png"
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
    code = cli.main(["inspect", str(output_dir), "--rejects", "--out", str(out)])
    assert code == 0 and out.exists()
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False  # restored after the partial decodes
    capsys.readouterr()

    sheet = build_sheet(str(output_dir), "train", 16, rejects=True)
    lines = (output_dir / REJECTS_FILE).read_text().splitlines()
    assert sheet.keys == [json.loads(line)["key"] for line in lines]
    assert set(sheet.keys) == set(expected_rejects(sample_dataset))
    pixels = np.asarray(sheet.image)
    by_reason = {reason: key for key, reason in expected_rejects(sample_dataset).items()}

    def image_tile(reason: Reason) -> np.ndarray:
        return _tile(pixels, _tile_box(sheet.keys.index(by_reason[reason]), 0, sheet.tile_size))

    grey = image_tile(Reason.MISSING_IMAGE)
    assert (grey[:20] == inspect_sheet.UNAVAILABLE).all()  # above the centred label
    assert (image_tile(Reason.IMAGE_EMPTY)[:20] == inspect_sheet.UNAVAILABLE).all()
    truncated = image_tile(Reason.IMAGE_TRUNCATED)
    assert truncated[:20].std() > 5  # the decodable top rows show real pixels


def test_out_inside_dataset_is_refused(prepared, capsys):
    output_dir, _ = prepared
    out = output_dir / "sheet.png"
    assert cli.main(["inspect", str(output_dir), "--out", str(out)]) == 2
    assert not out.exists()
    assert "inside the dataset directory" in capsys.readouterr().err


def test_a_shard_named_outside_the_output_is_refused_not_read(prepared, tmp_path, capsys):
    """metadata.json edited to name another output's shard (`../other/...`): report, index
    and verify refused it, inspect drew that output's records."""
    out = tmp_path / "out"
    shutil.copytree(prepared[0], out)
    shutil.copytree(prepared[0], tmp_path / "other")
    metadata = json.loads((out / METADATA_FILE).read_text())
    shard = metadata["splits"]["train"]["shards"][0]
    shard["file"] = "../other/" + shard["file"]
    (out / METADATA_FILE).write_text(json.dumps(metadata))
    sheet = tmp_path / "sheet.png"
    assert cli.main(["inspect", str(out), "--out", str(sheet)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "segprep verify" in err, err
    assert not sheet.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--split", "test"], "not in"),
        (["--count", "0"], "--count: must be at least 1"),
    ],
)
def test_usage_errors(prepared, tmp_path, capsys, args, message):
    output_dir, _ = prepared
    out = tmp_path / "x.png"
    assert cli.main(["inspect", str(output_dir), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()


def test_missing_directory(tmp_path, capsys):
    assert cli.main(["inspect", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.png")]) == 2
    assert "is not a directory" in capsys.readouterr().err


@pytest.fixture
def dataset_copy(prepared, tmp_path):
    """The prepared output copied into this test's folder: sheets land beside it."""
    output_dir, _ = prepared
    copy = tmp_path / "data" / "v1"
    shutil.copytree(output_dir, copy)
    return copy


def test_default_name_is_beside_the_dataset_and_never_overwritten(dataset_copy, capsys):
    first_path = dataset_copy.parent / "v1_inspect_train.png"
    assert inspect_sheet.run_inspect(str(dataset_copy), "train", 2, None, False) == 0
    assert capsys.readouterr().out.splitlines()[-1] == str(first_path)
    first = first_path.read_bytes()
    assert inspect_sheet.run_inspect(str(dataset_copy), "train", 3, None, False) == 0
    second_path = dataset_copy.parent / "v1_inspect_train_2.png"
    assert capsys.readouterr().out.splitlines()[-1] == str(second_path)
    assert first_path.read_bytes() == first  # untouched
    assert Image.open(second_path).size == _expected_size(3, SAMPLE_TILE)
    inspect_sheet.run_inspect(str(dataset_copy) + "/", "train", 1, None, True)  # trailing /
    assert capsys.readouterr().out.splitlines()[-1] == str(
        dataset_copy.parent / "v1_inspect_rejects.png"
    )


def test_out_folder_and_an_existing_out_file(dataset_copy, tmp_path, capsys):
    folder = tmp_path / "sheets"
    folder.mkdir()
    assert cli.main(["inspect", str(dataset_copy), "--rejects", "--out", str(folder)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == str(folder / "v1_inspect_rejects.png")
    taken = tmp_path / "mine.png"
    taken.write_bytes(b"someone's sheet")
    assert cli.main(["inspect", str(dataset_copy), "--count", "1", "--out", str(taken)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == str(tmp_path / "mine_2.png")
    assert taken.read_bytes() == b"someone's sheet"
    assert Image.open(tmp_path / "mine_2.png").format == "PNG"


def test_an_out_that_is_a_fifo_or_device_is_refused(dataset_copy, tmp_path, capsys):
    """`--out /dev/null` wrote a new file `/dev/null_2` beside the device (a FIFO: `fifo_2`);
    the page of `segprep report` is refused there in one line, and so is the sheet."""
    (tmp_path / "sheets").mkdir()
    fifo = tmp_path / "sheets" / "fifo.png"
    os.mkfifo(fifo)
    assert cli.main(["inspect", str(dataset_copy), "--count", "1", "--out", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert sorted(path.name for path in fifo.parent.iterdir()) == ["fifo.png"]


def test_sheets_written_at_once_get_distinct_names(tmp_path):
    target = str(tmp_path / "sheet.png")
    payloads = [f"sheet {i}".encode() for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        names = list(pool.map(lambda data: inspect_sheet.write_new(target, data), payloads))
    assert len(set(names)) == 8
    assert {open(name, "rb").read() for name in names} == set(payloads)


def _stage_run(output_dir, run_id: str, lines: list[str], age: float) -> None:
    """A run's staged rejects, as a refused run leaves them (transforms.format.naming.run_dir)."""
    staged = output_dir / run_dir(run_id) / REJECTS_FILE
    staged.parent.mkdir(parents=True)
    staged.write_text("".join(line + "\n" for line in lines))
    stamp = time.time() - age
    os.utime(staged, (stamp, stamp))


def _refused_output(prepared, tmp_path):
    """No metadata.json, no final names: two staged runs, the newer one's name sorts first."""
    output_dir, _ = prepared
    lines = (output_dir / REJECTS_FILE).read_text().splitlines()
    refused = tmp_path / "refused"
    refused.mkdir()
    _stage_run(refused, "20260102-run-b", lines[:2], age=100)
    _stage_run(refused, "20260101-run-a", lines, age=1)  # the newest
    return refused, lines


def test_rejects_of_a_refused_run_come_from_its_newest_staged_rejects(prepared, tmp_path, capsys):
    refused, lines = _refused_output(prepared, tmp_path)
    sheet = build_sheet(str(refused), "train", 16, rejects=True)
    assert sheet.keys == [json.loads(line)["key"] for line in lines]
    out = tmp_path / "refused.png"
    assert cli.main(["inspect", str(refused), "--rejects", "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == str(out)
    # Shard mode still needs a finished output.
    assert cli.main(["inspect", str(refused), "--out", str(tmp_path / "x.png")]) == 2
    assert "metadata.json" in capsys.readouterr().err


def test_published_rejects_win_over_stale_staged_ones(dataset_copy):
    _stage_run(dataset_copy, "old-run", ['{"key": "stale", "reason": "x"}'], age=0)
    sheet = build_sheet(str(dataset_copy), "train", 16, rejects=True)
    published = (dataset_copy / REJECTS_FILE).read_text().splitlines()
    assert sheet.keys == [json.loads(line)["key"] for line in published]


def test_rejects_of_a_folder_without_any_run(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["inspect", str(empty), "--rejects", "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "neither metadata.json nor a run's staged rejects.jsonl" in err[0]


def test_count_is_capped_with_a_note(tmp_path, capsys):
    """100 staged rejects (missing files: grey tiles) and --count 1000: 64 entries shown."""
    output = tmp_path / "refused"
    output.mkdir()
    lines = [json.dumps({"key": f"k{i:03d}", "reason": "missing_mask"}) for i in range(100)]
    _stage_run(output, "run", lines, age=0)
    out = tmp_path / "many.png"
    argv = ["inspect", str(output), "--rejects", "--count", "1000", "--out", str(out)]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    (note,) = captured.err.strip().splitlines()
    assert note.startswith("note: --count 1,000 capped at 64: 16 rows of 4")
    assert captured.out.splitlines()[-1] == str(out)
    assert inspect_sheet.MAX_COUNT == 64
    assert Image.open(out).size == _expected_size(64, SAMPLE_TILE)


def test_no_rejects_is_good_news_not_an_error(dataset_copy, capsys):
    (dataset_copy / REJECTS_FILE).write_bytes(b"")  # as a run with nothing rejected leaves it
    before = sorted(os.listdir(dataset_copy.parent))
    assert cli.main(["inspect", str(dataset_copy), "--rejects"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith(f"{dataset_copy} has no rejects: every entry was accepted")
    assert sorted(os.listdir(dataset_copy.parent)) == before  # no empty sheet written


def test_a_missing_rejects_file_is_no_good_news(dataset_copy, capsys):
    (dataset_copy / REJECTS_FILE).unlink()
    assert cli.main(["inspect", str(dataset_copy), "--rejects"]) == 2
    err = capsys.readouterr().err
    assert "rejects.jsonl file not readable" in err and "every entry was accepted" not in err


def test_a_long_caption_is_cut_by_halving_to_the_longest_prefix_that_fits():
    """A caption of 300 class names was shortened one character at a time, each measured
    whole: 25 s a tile, minutes a sheet. The cut is the same longest prefix that fits."""
    from PIL import Image, ImageDraw

    from beam_pipeline.commands.inspect_sheet.drawing import _fit_text, _font

    draw, font = ImageDraw.Draw(Image.new("RGB", (8, 8))), _font(12)
    measured = []

    class Counting:
        def textlength(self, text, font):
            measured.append(text)
            return draw.textlength(text, font=font)

    caption = "298 classes: " + ", ".join(f"class {i}" for i in range(300))
    cut = _fit_text(Counting(), caption, font, 200)
    assert cut.endswith("...") and draw.textlength(cut, font=font) <= 200
    longer = caption[: len(cut) - 3 + 1] + "..."
    assert draw.textlength(longer, font=font) > 200
    assert len(measured) <= 2 + len(caption).bit_length()


def test_a_caption_of_millions_of_characters_is_cut_not_refused():
    """A class name of 2,000,000 characters made Pillow refuse to measure the caption
    ("too many characters in string") and inspect fail."""
    from PIL import Image, ImageDraw

    from beam_pipeline.commands.inspect_sheet.drawing import _fit_text, _font

    draw, font = ImageDraw.Draw(Image.new("RGB", (8, 8))), _font(12)
    cut = _fit_text(draw, "x" * 2_000_000, font, 200)
    assert cut.endswith("...") and draw.textlength(cut, font=font) <= 200
    assert _fit_text(draw, "\u200b" * 2_000, font, 200).endswith("...")  # zero-width, cut


def test_text_from_the_input_is_drawn_escaped_never_refused():
    """A key, class name or path holding a line break (or another control character) made
    Pillow refuse to measure the caption, and `inspect` failed; every string drawn on the
    sheet (title, captions, grey-tile labels, legend) shows it escaped, as the terminal does."""
    from beam_pipeline.commands.inspect_sheet.drawing import Entry, render
    from beam_pipeline.errors import printable

    def sheet(escape):
        entry = Entry(
            key="a\nb",
            image=None,
            mask=None,
            caption=(escape("a\nb.jpg"), escape("class back\nground\r\x1b[2J")),
            image_problem=escape("cannot decode\na\nb.jpg"),
            mask_problem=escape("no mask\x00"),
        )
        legend = [(escape("0 back\nground"), (0, 0, 0)), (escape("1 \u202eevil"), (9, 9, 9))]
        return render([entry], escape("/data/o\x1b[2J\nx | train"), legend)

    drawn = sheet(lambda text: text)
    assert drawn.keys == ["a\nb"]  # the key itself, unescaped, for whoever reads the sheet
    assert drawn.image.tobytes() == sheet(printable).image.tobytes()


def test_a_long_dataset_name_gets_a_sheet_name_that_fits(prepared, tmp_path, capsys):
    """`<dataset>_inspect_train.png` beside a legal dataset name of 250 bytes was longer than
    a file name may be ("failed: OSError: File name too long"): the name is cut to fit, the
    second sheet's _2 included."""
    output_dir, _ = prepared
    dataset = tmp_path / "data" / ("o" * 250)
    shutil.copytree(output_dir, dataset)
    names = []
    for _ in range(2):
        assert inspect_sheet.run_inspect(str(dataset), "train", 1, None, False) == 0
        path = capsys.readouterr().out.splitlines()[-1]
        assert os.path.dirname(path) == str(dataset.parent) and os.path.isfile(path)
        names.append(os.path.basename(path))
    assert names[0].startswith("ooo") and names[0].endswith("_inspect_train.png")
    assert names[1] == names[0].replace(".png", "_2.png") and len(names[1]) <= 255


def test_a_reject_naming_a_gs_file_without_credentials_is_a_tile_not_a_failure(
    dataset_copy, tmp_path
):
    """rejects.jsonl naming a gs:// original (an input in a bucket, or an edit) in a local
    output, with no Google Cloud credentials: `inspect --rejects` ended "failed:
    DefaultCredentialsError", exit 1; that file is shown as not readable, as a missing one."""
    import subprocess

    from tests.helpers.gcs_server import NO_METADATA_SERVER
    from tests.helpers.process_tree import SEGPREP

    rejects = dataset_copy / REJECTS_FILE
    lines = [json.loads(line) for line in rejects.read_text().splitlines()]
    lines[0]["image"] = "gs://segprep-no-such-bucket/images/x.jpg"
    rejects.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")
    }
    env.update(
        HOME=str(tmp_path),
        CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),
        GCE_METADATA_HOST=NO_METADATA_SERVER,
        GCE_METADATA_IP=NO_METADATA_SERVER,
    )
    out = tmp_path / "sheet.png"
    done = subprocess.run(
        [*SEGPREP, "inspect", str(dataset_copy), "--rejects", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,  # a hang guard only
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert Image.open(out).format == "PNG"
