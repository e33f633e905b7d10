"""Trust, round 4 (issue 31) and the split-list and report points of issue 32: the gs://
shard cache, the report's file, deep JSON, split lists, class maps, numbers and leftovers.
Each case goes through the real reader or the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shard_reader import remote_cache
from shard_reader.source import RecordSource
from tests.helpers.gcs_server import gcs  # noqa: F401 - the fixture
from tests.helpers.handmade import write_output

ROOT = Path(__file__).resolve().parent.parent
SEGPREP = str(Path(sys.executable).parent / "segprep")  # the installed command line
SHARDS, PER_SHARD = 4, 3


# -- the gs:// shard cache -----------------------------------------------------------------


@pytest.fixture(scope="module")
def local_output(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local") / "out"
    write_output(out, [[(32, 24)] * PER_SHARD for _ in range(SHARDS)])
    return out


@pytest.fixture(scope="module")
def remote_output(gcs, local_output) -> str:  # noqa: F811
    gcs.upload_tree(local_output, "trust4")
    return gcs.url("trust4")


def largest_shard(local: Path) -> int:
    return max(path.stat().st_size for path in local.glob("train-*"))


def read_all(source: RecordSource) -> list[str]:
    return [source[index]["key"] for index in range(len(source))]


def plant(folder: Path, names: list[str]) -> dict[Path, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    planted = {}
    for name in names:
        data = f"the user's own {name}\n".encode() * 500
        (folder / name).write_bytes(data)
        planted[folder / name] = data
    return planted


def test_the_cache_evicts_only_files_it_wrote(remote_output, local_output, tmp_path):
    cache_dir = tmp_path / "cache"
    planted = plant(cache_dir / "partial", ["notes.txt", "a.b.c", "draft"])
    planted |= plant(cache_dir / "objects", ["photo.jpg", "data.bin", "README"])
    # Room for two shards only: reading four evicts, and every leftover partial is swept.
    limit = 2 * largest_shard(local_output)
    source = RecordSource(remote_output, "train", cache_dir=cache_dir, cache_limit_bytes=limit)
    assert len(read_all(source)) == SHARDS * PER_SHARD
    for path, data in planted.items():
        assert path.read_bytes() == data, f"{path.name} was touched"


def test_a_cache_folder_that_is_a_link_is_refused_and_its_target_kept(
    remote_output, local_output, tmp_path
):
    elsewhere = tmp_path / "elsewhere"
    planted = plant(elsewhere, ["one", "two", "three", "four"])
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / "objects").symlink_to(elsewhere)
    with pytest.raises(remote_cache.UnsafeCacheError, match="symbolic link") as refused:
        source = RecordSource(remote_output, "train", cache_dir=cache_dir, cache_limit_bytes=1)
        read_all(source)
    assert "\n" not in str(refused.value)
    assert sorted(path.name for path in elsewhere.iterdir()) == sorted(p.name for p in planted)
    for path, data in planted.items():
        assert path.read_bytes() == data


def test_a_link_planted_at_a_shards_name_is_not_followed(remote_output, tmp_path):
    cache_dir = tmp_path / "cache"
    source = RecordSource(remote_output, "train", cache_dir=cache_dir, cache_limit_bytes=10 << 20)
    shard = source.remote_shards()[0]
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"not a shard")
    os.utime(outside, (1_000_000, 1_000_000))
    (cache_dir / "objects" / shard.sha256).symlink_to(outside)
    with pytest.raises(remote_cache.UnsafeCacheError, match="symbolic link"):
        source[0]
    assert outside.stat().st_mtime == 1_000_000
    assert outside.read_bytes() == b"not a shard"
    assert (cache_dir / "objects" / shard.sha256).is_symlink()


@pytest.mark.parametrize("limit", [float("inf"), float("nan"), 1.5, "10", True, 0, -3])
def test_a_cache_limit_that_is_not_a_whole_number_is_one_line(remote_output, tmp_path, limit):
    with pytest.raises(ValueError, match="positive whole number of bytes") as refused:
        RecordSource(remote_output, "train", cache_dir=tmp_path, cache_limit_bytes=limit)
    assert "\n" not in str(refused.value)


def test_a_whole_float_limit_is_taken(remote_output, local_output, tmp_path):
    source = RecordSource(remote_output, "train", cache_dir=tmp_path, cache_limit_bytes=1e7)
    reference = RecordSource(local_output, "train")
    assert read_all(source) == read_all(reference)
    assert np.array_equal(source[0]["image"], reference[0]["image"])


# -- the report's file ---------------------------------------------------------------------


def report_cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SEGPREP, "report", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,  # a hang guard only
    )


def one_line_refusal(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
def test_report_out_that_is_not_a_regular_file_is_refused_and_kept(prepared, tmp_path, kind):
    node = tmp_path / "node"
    if kind == "fifo":
        os.mkfifo(node)
    elif kind == "link":
        (tmp_path / "target.txt").write_text("kept")
        node.symlink_to(tmp_path / "target.txt")
    else:
        node.mkdir()
    before = os.lstat(node)
    done = report_cli(str(prepared[0]), "--out", str(node))
    one_line_refusal(done, "--out", str(node))
    after = os.lstat(node)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["node", *(["target.txt"] if kind == "link" else [])]
    )


def test_report_out_to_a_character_device_is_refused(prepared, tmp_path):
    """A private node like /dev/null (never the system's own: a failing run would replace it)."""
    device = tmp_path / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a character device needs root")
    before = os.lstat(device)
    done = report_cli(str(prepared[0]), "--out", str(device))
    one_line_refusal(done, str(device), "not a regular file")
    after = os.lstat(device)
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino
    assert [path.name for path in tmp_path.iterdir()] == ["null"]


def test_report_out_under_a_missing_folder_is_one_line(prepared, tmp_path):
    done = report_cli(str(prepared[0]), "--out", str(tmp_path / "missing" / "page.html"))
    one_line_refusal(done, "does not exist")
    assert list(tmp_path.iterdir()) == []


def test_report_out_replaces_an_earlier_page_whole(prepared, tmp_path):
    page = tmp_path / "page.html"
    page.write_text("an earlier page")
    done = report_cli(str(prepared[0]), "--out", str(page))
    assert done.returncode == 0, done.stderr[-2000:]
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert [path.name for path in tmp_path.iterdir()] == ["page.html"]


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 32 KiB tmpfs: too small for a report page."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_report_on_a_full_disk_is_one_line_and_leaves_nothing(prepared, small_disk):
    done = report_cli(str(prepared[0]), "--out", str(small_disk / "page.html"))
    one_line_refusal(done, "cannot write the page", "No space left")
    assert list(small_disk.iterdir()) == []


def test_report_is_written_beside_the_output_not_in_the_working_folder(prepared, tmp_path):
    out = tmp_path / "data" / "run1"
    shutil.copytree(prepared[0], out)
    work = tmp_path / "work"
    work.mkdir()
    done = report_cli(str(Path("..") / "data" / "run1"), cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = tmp_path / "data" / "segprep-report-run1.html"
    assert done.stdout.strip() == str(expected)
    assert expected.is_file() and list(work.iterdir()) == []


def test_the_default_page_replaces_an_earlier_page_but_never_a_users_file(prepared, tmp_path):
    out = tmp_path / "data" / "run1"
    shutil.copytree(prepared[0], out)
    theirs = tmp_path / "data" / "segprep-report-run1.html"
    theirs.write_text("<p>the user's own notes</p>")
    first = report_cli(str(out))
    assert first.returncode == 0, first.stderr[-2000:]
    page = tmp_path / "data" / "segprep-report-run1_2.html"
    assert first.stdout.strip() == str(page)
    assert theirs.read_text() == "<p>the user's own notes</p>"
    again = report_cli(str(out))  # the earlier page is replaced, not numbered again
    assert again.stdout.strip() == str(page)
    assert sorted(path.name for path in theirs.parent.iterdir()) == [
        "run1",
        "segprep-report-run1.html",
        "segprep-report-run1_2.html",
    ]


def test_a_page_of_an_earlier_segprep_is_replaced_not_numbered(prepared, tmp_path):
    """Pages written before the generator tag are told by their content policy and title."""
    out = tmp_path / "data" / "run1"
    shutil.copytree(prepared[0], out)
    earlier = tmp_path / "data" / "segprep-report-run1.html"
    earlier.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-'
        "Policy\" content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">"
        f"<title>segprep report: {out}</title></head></html>"
    )
    done = report_cli(str(out))
    assert done.returncode == 0 and done.stdout.strip() == str(earlier)
    assert "segprep report" in earlier.read_text() and len(earlier.read_text()) > 2000


def test_the_report_page_is_bounded_in_classes(tmp_path):
    """65,535 classes: the page shows the top MAX_CLASS_ROWS per split and counts the rest."""
    from beam_pipeline import cli
    from beam_pipeline.commands.report.gather import MAX_CLASS_ROWS
    from tests.helpers.images import encode, rgb_jpeg
    from tests.helpers.runs import RUNNER_ARGS

    rng = np.random.default_rng(3)
    for sub in ("images", "masks"):
        (tmp_path / sub).mkdir()
    for index in range(6):
        (tmp_path / "images" / f"{index}.jpg").write_bytes(rgb_jpeg(32, 32, seed=index))
        ids = rng.integers(0, 65535, size=(32, 32)).astype(np.uint16)  # ~1000 ids per mask
        (tmp_path / "masks" / f"{index}.png").write_bytes(encode(Image.fromarray(ids), "PNG"))
    out = tmp_path / "out"
    argv = ["prepare", "--image_dir", str(tmp_path / "images"), "--mask_dir"]
    argv += [str(tmp_path / "masks"), "--output_dir", str(out), "--mask_type", "classes"]
    argv += ["--num_classes", "65535", "--ignore_index", "65535", *RUNNER_ARGS]
    assert cli.main(argv) == 0
    page = tmp_path / "page.html"
    done = report_cli(str(out), "--out", str(page))
    assert done.returncode == 0, done.stderr[-2000:]
    text = page.read_text()
    splits = json.loads((out / "metadata.json").read_text())["classes"]["splits"]
    assert text.count('class="class-row"') == MAX_CLASS_ROWS * len(splits)
    assert text.count('class="note classes-left-out"') == len(splits)
    assert f"{65535 - MAX_CLASS_ROWS:,} more classes" in text
    print(f"65,535 classes: a {page.stat().st_size / 2**20:.2f} MB page")
    assert page.stat().st_size < 8 << 20, page.stat().st_size


# -- deep JSON and large side files --------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000 + "\n"


def segprep(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SEGPREP, *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,  # a hang guard only
    )


@pytest.fixture
def output_copy(prepared, tmp_path) -> Path:
    return Path(shutil.copytree(prepared[0], tmp_path / "out"))


def no_internal_error(done: subprocess.CompletedProcess) -> None:
    text = done.stdout + done.stderr
    assert "RecursionError" not in text and "Traceback" not in text, text[-2000:]
    assert "segprep: failed:" not in done.stderr, done.stderr[-2000:]


NESTED = "nested deeper than 32 levels"


@pytest.mark.parametrize(
    ("side_file", "command", "codes", "said"),
    [
        (".segprep/manifest.json", ["verify"], (1,), NESTED),
        (".segprep/manifest.json", ["verify", "--repair"], (1, 2), NESTED),
        ("rejects.jsonl", ["verify"], (1,), "line 1: not a JSON object with key and reason"),
        ("rejects.jsonl", ["inspect", "--rejects"], (0,), "sheet.png"),  # an unparseable tile
        ("duplicates.jsonl", ["verify"], (1,), NESTED),
        ("duplicates.jsonl", ["inspect", "--duplicates"], (2,), NESTED),
    ],
)
def test_deep_json_in_a_side_file_is_a_reason_not_a_recursion_error(
    output_copy, tmp_path, side_file, command, codes, said
):
    (output_copy / side_file).write_text(DEEP)
    argv = [command[0], str(output_copy), *command[1:]]
    if command[0] == "inspect":
        argv += ["--out", str(tmp_path / "sheet.png")]
    done = segprep(*argv)
    no_internal_error(done)
    assert done.returncode in codes, done.stdout[-2000:] + done.stderr[-2000:]
    assert said in done.stdout + done.stderr


@pytest.mark.parametrize("kind", ["fifo", "deep"])
def test_an_append_over_an_unreadable_manifest_is_refused_before_the_job(
    prepared, sample_dataset, tmp_path, kind
):
    from tests.helpers.runs import job_args

    out = Path(shutil.copytree(prepared[0], tmp_path / "out"))
    manifest = out / ".segprep" / "manifest.json"
    manifest.unlink()
    if kind == "fifo":
        os.mkfifo(manifest)
    else:
        manifest.write_text(DEEP)
    runs_before = sorted(path.name for path in (out / ".segprep" / "runs").iterdir())
    done = segprep("prepare", *job_args(sample_dataset, out, "--append"))
    one_line_refusal(done, "--append", "manifest.json")
    assert sorted(path.name for path in (out / ".segprep" / "runs").iterdir()) == runs_before


# Started from a small process: Linux records, at exec, the high-water mark of the forked
# copy of the parent, so a command forked from a large pytest process reports pytest's peak.
PEAK_RSS = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as report:
    report.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_rss_mb(argv: list[str], folder: Path) -> tuple[subprocess.CompletedProcess, float]:
    """A command's result and its peak resident memory in MB (the kernel's ru_maxrss)."""
    report = folder / "peak_kb"
    done = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, str(report), SEGPREP, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,  # a hang guard only
    )
    return done, int(report.read_text()) / 1024


def grow_rejects(out: Path, megabytes: int) -> int:
    """rejects.jsonl grown to `megabytes` MB of well-formed lines; the lines written."""
    head, tail = '{"key": "k', '", "reason": "decode_error", "detail": "' + "x" * 170 + '"}\n'
    count = megabytes * (1 << 20) // len(f"{head}000000000{tail}")
    with open(out / "rejects.jsonl", "w") as handle:
        for start in range(0, count, 10_000):
            block = range(start, min(count, start + 10_000))
            handle.write("".join(f"{head}{number:09d}{tail}" for number in block))
    return count


@pytest.mark.parametrize("command", [["verify"], ["inspect", "--rejects"]])
def test_a_large_rejects_jsonl_is_streamed_in_flat_memory(output_copy, tmp_path, command):
    def run(folder: Path) -> tuple[subprocess.CompletedProcess, float]:
        folder.mkdir()
        argv = [command[0], str(output_copy), *command[1:]]
        if command[0] == "inspect":
            argv += ["--out", str(folder / "sheet.png"), "--count", "4"]
        return peak_rss_mb(argv, folder)

    small, small_peak = run(tmp_path / "small")
    lines = grow_rejects(output_copy, 100)
    large, large_peak = run(tmp_path / "large")
    no_internal_error(large)
    if command[0] == "verify":
        assert f"rejects.jsonl: {lines} lines" in large.stdout
    else:
        assert large.returncode == 0, large.stderr
    print(f"{command}: peak {small_peak:.0f} MB with 6 rejects, {large_peak:.0f} MB with 100 MB")
    # Reading the file whole holds it at least once (+57 MB measured); streamed, it is flat.
    assert large_peak < small_peak + 25, (small_peak, large_peak)


# -- split lists ---------------------------------------------------------------------------


def sample_keys(sample_dataset) -> list[str]:
    return sorted(path.stem for path in Path(sample_dataset.image_dir).iterdir())


def prepare_with_lists(sample_dataset, out: Path, *split_files: str):
    from tests.helpers.runs import job_args

    flags = [flag for given in split_files for flag in ("--split_file", given)]
    return segprep("prepare", *job_args(sample_dataset, out, *flags))


def stored_keys(out: Path) -> dict[str, set[str]]:
    import shard_reader
    from tests.helpers.tf_reading import read_keys

    metadata = json.loads((out / "metadata.json").read_text())
    return {
        split: set(read_keys(shard_reader.make_dataset(out, split, 4, with_keys=True)))
        for split, info in metadata["splits"].items()
        if info["num_examples"]
    }


def test_a_list_with_a_bom_and_extra_columns_names_its_keys(sample_dataset, tmp_path):
    keys = sample_keys(sample_dataset)
    train, validation = keys[:40], keys[40:]
    # Oxford-IIIT Pet's layout (`Abyssinian_1 1 1 1`), saved by an editor that adds a BOM.
    (tmp_path / "train.txt").write_bytes(
        b"\xef\xbb\xbf" + "".join(f"{key} 1 1 1\n" for key in train).encode()
    )
    (tmp_path / "val.txt").write_text("".join(f"{key}\t2\n" for key in validation))
    out = tmp_path / "out"
    done = prepare_with_lists(
        sample_dataset, out, f"train={tmp_path / 'train.txt'}", f"validation={tmp_path / 'val.txt'}"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    wrong = [r for r in rejects if r["reason"] == "not_in_split" or "--split_file" in r["detail"]]
    assert not wrong, wrong
    stored = stored_keys(out)
    rejected = {r["key"] for r in rejects}
    assert stored["train"] | (rejected & set(train)) == set(train)
    assert stored["validation"] | (rejected & set(validation)) == set(validation)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("", "lists no keys"),
        ("\n  \n", "lists no keys"),
        ("nope1\nnope2\n", "none of the 2 keys"),
        ("k" * 70_000 + "\n", "more than a key can be"),
    ],
)
def test_a_list_that_cannot_be_used_is_refused_before_the_job(
    sample_dataset, tmp_path, content, said
):
    listing = tmp_path / "train.txt"
    listing.write_text(content)
    out = tmp_path / "out"
    done = prepare_with_lists(sample_dataset, out, f"train={listing}")
    one_line_refusal(done, "--split_file train", str(listing), said)
    assert not out.exists() or not any(out.iterdir())


def test_a_long_split_name_is_a_usage_error(sample_dataset, tmp_path):
    listing = tmp_path / "train.txt"
    listing.write_text("\n".join(sample_keys(sample_dataset)))
    done = prepare_with_lists(sample_dataset, tmp_path / "out", f"{'a' * 300}={listing}")
    one_line_refusal(done, "--split_file", "1 to 32 lower-case letters")
    assert len(done.stderr) < 400


# -- leftovers -------------------------------------------------------------------------------


def await_folder(root: Path, pattern: str, child: subprocess.Popen) -> Path:
    """The first folder matching `pattern` under `root` that holds the owner marker, as soon
    as it appears (polled; the child's death ends the wait)."""
    import time

    from transforms.spill import OWNER_MARKER

    while child.poll() is None:
        found = [path for path in root.glob(pattern) if (path / OWNER_MARKER).is_file()]
        if found:
            return found[0]
        time.sleep(0.01)
    raise AssertionError(f"the run ended (exit {child.returncode}) before {pattern} appeared")


def test_a_killed_runs_listing_folder_is_swept_and_nothing_else(sample_dataset, tmp_path):
    from tests.helpers.runs import job_args

    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)}
    child = subprocess.Popen(
        [SEGPREP, "prepare", *job_args(sample_dataset, tmp_path / "killed")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        orphan = await_folder(temp, f"segprep-listing-{child.pid}-*", child)
    finally:
        child.kill()  # SIGKILL mid-listing; not reaped yet: a zombie that kill(pid, 0) finds
    # What is not provably this tool's: a folder of the same name without the marker, and a
    # link under a spill folder's name to a folder elsewhere.
    foreign = temp / "segprep-listing-999999-notmine1"
    foreign.mkdir()
    (foreign / "rows").write_text("the user's")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("kept")
    (temp / "segprep-listing-999998-linked12").symlink_to(precious)
    done = subprocess.run(
        [SEGPREP, "prepare", *job_args(sample_dataset, tmp_path / "next")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    child.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    assert not orphan.exists(), "the killed run's listing folder was left behind"
    assert (foreign / "rows").read_text() == "the user's"
    assert (precious / "keep.txt").read_text() == "kept"
    assert (temp / "segprep-listing-999998-linked12").is_symlink()
    left = sorted(path.name for path in temp.glob("segprep-*"))
    assert left == sorted([foreign.name, "segprep-listing-999998-linked12"])


@pytest.mark.parametrize("command", [["verify"], ["inspect", "--duplicates"]])
def test_an_oversized_duplicates_jsonl_is_one_line(output_copy, tmp_path, command):
    with open(output_copy / "duplicates.jsonl", "r+b") as handle:
        handle.truncate(480 << 20)  # sparse: 480 MB that cost no disk
    argv = [command[0], str(output_copy), *command[1:]]
    if command[0] == "inspect":
        argv += ["--out", str(tmp_path / "sheet.png")]
    done = segprep(*argv)
    no_internal_error(done)
    said = [line for line in (done.stdout + done.stderr).splitlines() if "duplicates.jsonl" in line]
    # verify looks for holes before it reads a side file whole; the others refuse the size
    named = ("allowed", "a hole") if command[0] == "verify" else ("allowed",)
    assert any(word in line for line in said for word in named), done.stdout + done.stderr
    assert done.returncode == (1 if command[0] == "verify" else 2)


def test_a_list_of_many_missing_keys_is_refused_before_the_job_in_flat_memory(
    sample_dataset, tmp_path
):
    from tests.helpers.runs import job_args

    keys = sample_keys(sample_dataset)
    few, many = tmp_path / "few.txt", tmp_path / "many.txt"
    few.write_text("".join(f"gone{number}\n" for number in range(100)))
    with open(many, "w") as handle:
        handle.write("".join(f"{key}\n" for key in keys))
        handle.write("".join(f"gone{number:06d}\n" for number in range(100_000)))

    def run(name: str, listing: Path):
        folder = tmp_path / name
        folder.mkdir()
        flags = ("--split_file", f"train={listing}")
        return peak_rss_mb(["prepare", *job_args(sample_dataset, folder / "out", *flags)], folder)

    refused_early, baseline = run("few", few)  # every key missing: refused before the job
    one_line_refusal(refused_early, "none of the 100 keys")
    done, peak = run("many", many)
    print(f"10^5 missing keys: peak {peak:.0f} MB; a list of 100 (no job): {baseline:.0f} MB")
    assert done.returncode == 1, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert "100,000 keys listed by --split_file" in line and "before the job" in line, line
    assert not (tmp_path / "many" / "out" / ".segprep" / "runs").exists()  # no job staged
    # A reject object per missing key in the job cost 3.3 KB each (+330 MB here).
    assert peak < baseline + 60, (baseline, peak)
