"""Class masks in the job: flag mistakes are one line before anything is written, COCO
annotations reach the workers without entering the job graph, gs:// COCO runs pair in the job,
and the binary path writes the bytes it wrote before class masks existed."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from PIL import Image

from beam_pipeline import cli
from beam_pipeline.job.pipeline import build_pipeline
from beam_pipeline.launch import launcher
from beam_pipeline.launch.plan import make_plan
from tests.helpers.class_outputs import check_output, expected_coco_masks, rejects, write_coco_set
from tests.helpers.gcs_server import gcs  # noqa: F401 - the fixture
from tests.helpers.images import encode, rgb_jpeg
from tests.helpers.runs import RUNNER_ARGS
from transforms.format.naming import REJECTS_FILE, SEGPREP_DIR
from transforms.spill import read_records

# pycocotools' own decode trips a numpy 2 deprecation (filtered in transforms.sources.rasterize;
# pytest shows every DeprecationWarning again).
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")

# sha256 of the `prepared` fixture's shards (conftest: 60 samples, seed 7, --num_shards 3),
# taken anew when sample-data began drawing distinct portraits with planted copies; the
# writer's own bytes since before class masks stay pinned on fixed inputs by
# tests/test_shard_bytes_pinned.py.
BINARY_SHARDS = {
    "train-00000-of-00002.tfrecord": (
        "cc6251ea713966f3484945855a469e974c086dbf01af1c101f3bb1081aaaddab"
    ),
    "train-00001-of-00002.tfrecord": (
        "dcbdf35856e2da7e452a6ed3d82c60c47741791011b84081e93422e326d43ecf"
    ),
    "validation-00000-of-00001.tfrecord": (
        "3ec46cca5565c0dc88248a83a1654f82a6ac30eb850ea2fa4c453f1ea0c82910"
    ),
}


def test_binary_shards_are_byte_identical_to_before(prepared):
    output_dir, result = prepared
    digests = {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(output_dir.glob("*.tfrecord"))
    }
    assert digests == BINARY_SHARDS
    metadata = result.metadata
    assert "classes" not in metadata
    assert metadata["features"]["mask"]["description"] == "single-channel mask, values 0 or 255"
    assert metadata["parameters"]["mask_type"] == "binary" and metadata["mask_format"] == "jpeg"


# --- usage errors -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two entries of 3-class grey PNG masks, a COCO file for the same images, flag files."""
    root = tmp_path_factory.mktemp("tiny")
    (root / "images").mkdir()
    (root / "masks").mkdir()
    for key in ("a", "b"):
        (root / "images" / f"{key}.jpg").write_bytes(rgb_jpeg(12, 10))
        ids = np.zeros((12, 10), np.uint8)
        ids[2:5, 3:8] = 2
        (root / "masks" / f"{key}.png").write_bytes(encode(Image.fromarray(ids), "PNG"))
    (root / "names.txt").write_text("sky\nroad\ncar\n")
    (root / "dupes.txt").write_text("sky\nroad\nsky\n")
    (root / "colormap.json").write_text('{"sky": [1, 2, 3], "road": [4, 5, 6], "tree": [7, 8, 9]}')
    (root / "broken.json").write_text('{"sky": [1, 2, 3],')
    (root / "notcoco.json").write_text('{"images": [], "categories": []}')
    (root / "elsewhere.json").write_text(
        json.dumps(
            {
                "images": [{"id": 1, "file_name": "zzz.jpg", "height": 12, "width": 10}],
                "annotations": [],
                "categories": [{"id": 1, "name": "thing"}],
            }
        )
    )
    return root


ERRORS = [
    (["--mask_type", "classes", "--num_classes", "3", "--mask_format", "jpeg"], "jpeg would"),
    (["--mask_type", "classes"], "needs the classes: --num_classes N"),
    (["--num_classes", "3"], "--num_classes needs --mask_type classes"),
    (["--ignore_index", "0"], "--ignore_index needs --mask_type classes"),
    (["--class_names", "{root}/names.txt"], "--class_names needs --mask_type classes"),
    (["--mask_type", "classes", "--num_classes", "300"], "--ignore_index 255 is a class id"),
    (["--mask_type", "classes", "--num_classes", "3", "--ignore_index", "2"], "is a class id"),
    (["--mask_type", "classes", "--num_classes", "1"], "--num_classes must be an integer from 2"),
    (["--mask_type", "classes", "--num_classes", "3", "--ignore_index", "-1"], "must be 0 or"),
    (["--mask_type", "classes", "--class_names", "{root}/none.txt"], "none.txt: no such file"),
    (["--mask_type", "classes", "--class_names", "{root}/dupes.txt"], "duplicate class names"),
    (["--mask_type", "classes", "--class_names", "{root}/images"], "images: not a regular file"),
    (["--mask_type", "classes", "--colormap", "{root}/broken.json"], "not valid JSON"),
    (
        ["--mask_type", "classes", "--class_names", "{root}/names.txt", "--num_classes", "4"],
        "3 class names for num_classes 4",
    ),
    (
        [
            "--mask_type",
            "classes",
            "--class_names",
            "{root}/names.txt",
            "--colormap",
            "{root}/colormap.json",
        ],
        "name different classes",
    ),
    (["--unlabeled_pixels", "ignore"], "--unlabeled_pixels needs --mask_type classes"),
    (
        ["--mask_type", "classes", "--num_classes", "3", "--unlabeled_pixels", "ignore"],
        "--unlabeled_pixels needs --annotations or --coco_annotations",
    ),
]
COCO_ERRORS = [
    (["--coco_annotations", "{root}/elsewhere.json"], "--coco_annotations needs --mask_type"),
    (["--mask_type", "classes", "--coco_annotations", "{root}/none.json"], "no such file"),
    (["--mask_type", "classes", "--coco_annotations", "{root}/broken.json"], "not valid JSON"),
    (["--mask_type", "classes", "--coco_annotations", "{root}/notcoco.json"], "no categories"),
    (
        ["--mask_type", "classes", "--coco_annotations", "{root}/elsewhere.json"],
        "is named by --coco_annotations",
    ),
    (
        [
            "--mask_type",
            "classes",
            "--coco_annotations",
            "{root}/elsewhere.json",
            "--mask_dir",
            "{root}/masks",
        ],
        "--mask_dir does not apply with --coco_annotations",
    ),
    (
        [
            "--mask_type",
            "classes",
            "--coco_annotations",
            "{root}/elsewhere.json",
            "--colormap",
            "{root}/colormap.json",
        ],
        "--colormap does not apply",
    ),
]


def _one_line_error(capsys, argv: list[str], root: Path) -> str:
    argv = [arg.replace("{root}", str(root)) for arg in argv]
    assert cli.main(["prepare", *argv, "--output_dir", str(root / "out"), *RUNNER_ARGS]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("segprep: error: "), err
    assert not (root / "out").exists(), "something was written"
    return err


@pytest.mark.parametrize(("flags", "words"), ERRORS)
def test_class_flag_mistakes_are_one_line_usage_errors(tiny, capsys, flags, words):
    dirs = ["--image_dir", str(tiny / "images"), "--mask_dir", str(tiny / "masks")]
    assert words in _one_line_error(capsys, [*dirs, *flags], tiny)


@pytest.mark.parametrize(("flags", "words"), COCO_ERRORS)
def test_coco_mistakes_are_one_line_usage_errors(tiny, capsys, flags, words):
    assert words in _one_line_error(capsys, ["--image_dir", str(tiny / "images"), *flags], tiny)


def test_class_names_and_colormap_may_agree(tiny, tmp_path):
    """The same classes named twice is no error; RGB masks need the colormap's colours."""
    result = launcher.run(
        [
            "--image_dir",
            str(tiny / "images"),
            "--mask_dir",
            str(tiny / "masks"),
            "--output_dir",
            str(tmp_path / "out"),
            "--mask_type",
            "classes",
            "--class_names",
            str(tiny / "names.txt"),
            "--num_classes",
            "3",
            *RUNNER_ARGS,
        ]
    )
    classes = result.metadata["classes"]
    assert classes["names"] == ["sky", "road", "car"]
    assert sum(stats["num_images"] for stats in classes["splits"].values()) == 2
    assert sum(stats["pixels"][2] for stats in classes["splits"].values()) == 2 * 15


# --- COCO ----------------------------------------------------------------------------------------


def _coco_args(images: Path, annotations: Path | str, out: Path | str, *extra: str) -> list[str]:
    return [
        "--image_dir",
        str(images),
        "--coco_annotations",
        str(annotations),
        "--output_dir",
        str(out),
        "--mask_type",
        "classes",
        *extra,
        *RUNNER_ARGS,
    ]


def _synthetic_coco(path: Path, images: Path, annotations: int, vertices: int) -> None:
    """50 images (placeholder files: planning never decodes) and `annotations` polygons."""
    images.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    records = []
    for index in range(50):
        (images / f"{index:05d}.jpg").write_bytes(b"\xff\xd8")
        records.append({"id": index, "file_name": f"{index:05d}.jpg", "height": 480, "width": 640})
    polygons = []
    for number in range(annotations):
        angles = np.sort(rng.uniform(0, 2 * np.pi, vertices))
        cx, cy, r = rng.uniform(60, 580), rng.uniform(60, 420), rng.uniform(5, 50)
        polygon = np.stack([cx + r * np.cos(angles), cy + r * np.sin(angles)], 1).round(2)
        polygons.append(
            {
                "id": number,
                "image_id": number % 50,
                "category_id": 1 + number % 3,
                "iscrowd": 0,
                "segmentation": [polygon.ravel().tolist()],
            }
        )
    categories = [{"id": c, "name": f"c{c}"} for c in (1, 2, 3)]
    path.write_text(
        json.dumps({"images": records, "annotations": polygons, "categories": categories})
    )


def _graph_bytes(argv: list[str]) -> int:
    plan = make_plan(argv)
    pipeline = beam.Pipeline(options=plan.pipeline_options())
    build_pipeline(pipeline, plan.job)
    return len(pipeline.to_runner_api().SerializeToString())


def test_annotations_never_enter_the_job_graph(tmp_path):
    """Two COCO files for the same 50 images, with 0 and 4,000 annotations (2.6 MB): the
    job graphs Beam would submit differ by a few bytes (the annotation count), not by MBs."""
    images = tmp_path / "images"
    _synthetic_coco(tmp_path / "none.json", images, 0, 40)
    _synthetic_coco(tmp_path / "many.json", images, 4000, 40)
    assert (tmp_path / "many.json").stat().st_size > 2_500_000
    empty = _graph_bytes(_coco_args(images, tmp_path / "none.json", tmp_path / "out"))
    full = _graph_bytes(_coco_args(images, tmp_path / "many.json", tmp_path / "out"))
    # The graphs differ by the counts written into the plan and the run ids' digits: far
    # below the 2.6 MB the annotations would add if they travelled in the graph.
    assert abs(full - empty) < 1000, (empty, full)


def test_a_dry_run_reads_the_annotations_and_stages_nothing(tmp_path, capsys):
    outcome = write_coco_set(tmp_path / "images", tmp_path / "coco.json")
    argv = _coco_args(tmp_path / "images", tmp_path / "coco.json", tmp_path / "out", "--dry_run")
    assert cli.main(["prepare", *argv]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["masks"]["coco"] == {"images": 11, "annotations": 10, "orphan_annotations": 1}
    listing = plan["listing"]
    assert listing["discovered"] == len(outcome) and listing["paired"] == 8
    assert not (tmp_path / "out").exists()


def test_a_refused_coco_run_keeps_only_its_rejects(tmp_path, capsys):
    """Over the reject limit: nothing published; the staged annotations go with the rest."""
    write_coco_set(tmp_path / "images", tmp_path / "coco.json")
    argv = _coco_args(tmp_path / "images", tmp_path / "coco.json", tmp_path / "out")
    assert cli.main(["prepare", *argv, "--max_reject_fraction", "0.1"]) == 1
    (run,) = (tmp_path / "out" / SEGPREP_DIR / "runs").iterdir()
    assert [path.name for path in run.iterdir()] == [REJECTS_FILE]
    assert not list((tmp_path / "out").glob("*.tfrecord"))


def test_annotations_file_inside_the_image_folder_is_no_entry(tmp_path):
    """--data_dir names the image folder; the JSON beside the images is an input, not a
    reject; unlabeled pixels as ignore give categories ids 0..K-1."""
    outcome = write_coco_set(tmp_path / "data", tmp_path / "data" / "instances.json")
    result = launcher.run(
        [
            "--data_dir",
            str(tmp_path / "data"),
            "--coco_annotations",
            str(tmp_path / "data" / "instances.json"),
            "--output_dir",
            str(tmp_path / "out"),
            "--mask_type",
            "classes",
            "--coco_unlabeled",
            "ignore",
            "--num_shards",
            "3",
            *RUNNER_ARGS,
        ]
    )
    expected = expected_coco_masks(tmp_path / "data" / "instances.json", background=False)
    info = check_output(tmp_path / "out", expected)
    assert info["classes"]["names"] == ["bicycle", "airplane", "kite"]
    assert info["parameters"]["coco_unlabeled"] == "ignore"
    got = {key: line["reason"] for key, line in rejects(tmp_path / "out").items()}
    assert got == {key: reason for key, reason in outcome.items() if reason != "ok"}
    assert result.metadata["num_discovered"] == len(outcome)


def test_coco_from_a_bucket_pairs_in_the_job(gcs, tmp_path):  # noqa: F811
    """Images and annotations on gs://: the job lists the images, reads the staged records
    from the bucket and pairs them itself (ListAndPair); same masks as the local run."""
    outcome = write_coco_set(tmp_path / "images", tmp_path / "coco.json")
    assert gcs.upload_tree(tmp_path / "images", "coco/images")
    gcs.put("coco/annotations.json", (tmp_path / "coco.json").read_bytes())
    result = launcher.run(
        _coco_args(gcs.url("coco/images"), gcs.url("coco/annotations.json"), gcs.url("coco/out"))
    )
    assert result.plan.listing is None  # listed by the job, not the launcher
    local = tmp_path / "downloaded"
    gcs.download_prefix("coco/out/", local)
    check_output(local, expected_coco_masks(tmp_path / "coco.json", background=True))
    got = {key: line["reason"] for key, line in rejects(local).items()}
    annotations = gcs.url("coco/annotations.json")
    expected = {key: reason for key, reason in outcome.items() if reason != "ok"}
    expected = {
        (f"{annotations}#anim.gif" if key.endswith("#anim.gif") else key): reason
        for key, reason in expected.items()
    }
    assert got == expected
    assert not [name for name in gcs.names("coco/out/") if "/runs/" in name]


def test_a_coco_template_carries_its_staged_records(gcs, tmp_path):  # noqa: F811
    """A Flex Template launch builds the job with --template_location and the service runs
    it once: the records are staged in that run's folder, which the job graph names."""
    write_coco_set(tmp_path / "images", tmp_path / "coco.json")
    assert gcs.upload_tree(tmp_path / "images", "tpl/images")
    result = launcher.run(
        [
            "--image_dir",
            gcs.url("tpl/images"),
            "--coco_annotations",
            str(tmp_path / "coco.json"),  # read by the launcher: may stay local
            "--output_dir",
            gcs.url("tpl/out"),
            "--mask_type",
            "classes",
            "--runner",
            "DataflowRunner",
            "--project",
            "segprep-demo",
            "--region",
            "europe-west1",
            "--temp_location",
            gcs.url("tpl/tmp"),
            "--sdk_container_image",
            "europe-west1-docker.pkg.dev/segprep-demo/segprep/segprep:0.1.0",
            "--template_location",
            str(tmp_path / "job.json"),
        ]
    )
    assert result.submission["mode"] == "template"
    (staged,) = result.plan.job.staged_images  # 5 image records: one record file
    assert staged.startswith(gcs.url(f"tpl/out/{SEGPREP_DIR}/runs/{result.plan.run_id}/"))
    data = gcs.read(staged.removeprefix(gcs.url()))
    records = list(read_records(io.BytesIO(data), staged, len(data), 1 << 20))
    assert sorted(json.loads(record)["file_name"] for record in records) == sorted(
        name for _, name, _ in result.plan.masks.dataset.staged()
    )
    assert gcs.names("tpl/out/") == [staged.removeprefix(gcs.url())]  # nothing else written
    pipeline = gcs.read(
        json.loads((tmp_path / "job.json").read_text())["environment"]["sdkPipelineOptions"][
            "options"
        ]["pipelineUrl"].removeprefix(gcs.url())
    )
    # The job reads the staged files (their paths ride, compressed, in the graph's Create).
    assert b"KeyAnnotatedImages" in pipeline and b"StagedImagesFiles" in pipeline


# --- launcher memory ----------------------------------------------------------------------------

_MEASURE = """
import re, sys
import apache_beam, tensorflow
from beam_pipeline.launch import masks, plan
from transforms.codecs import class_mask as class_masks

from transforms.sources import coco
def peak():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1)) * 1024

plan._beam_parser()
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # VmHWM := the current RSS: the imports' peak must not hide growth
before = peak()
made = plan.make_plan(sys.argv[2:])
masks.stage_images(made.masks.dataset, (sys.argv[1],))
print(peak() - before)
"""


def test_the_launcher_holds_compact_records_only(tmp_path):
    """Planning (COCO read, listing, pairing) and staging a 6.6 MB, 10,000-annotation file
    add less than twice the file's size to the launcher's peak memory (json.load alone adds
    about 6x; test_coco measures that)."""
    images, annotations = tmp_path / "images", tmp_path / "many.json"
    _synthetic_coco(annotations, images, 10_000, 40)
    size = annotations.stat().st_size
    argv = _coco_args(images, annotations, tmp_path / "out", "--dry_run")
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_MEASURE), str(tmp_path / "staged"), *argv],
        check=True,
        capture_output=True,
        text=True,
    )
    growth = int(run.stdout.strip().splitlines()[-1])
    data = (tmp_path / "staged").read_bytes()
    assert len(list(read_records(io.BytesIO(data), "staged", len(data), 1 << 20))) == 50
    assert growth < 2 * size, (growth, size)
