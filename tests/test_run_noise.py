"""What a run prints is worth reading: singular counts, no rate where start-up dominates, no
"rarest" line repeating "most frequent", and no warnings from the readers' libraries."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.helpers.images import rgb_jpeg
from tests.helpers.runs import RUNNER_ARGS

SEGPREP = [sys.executable, "-m", "beam_pipeline"]  # `segprep prepare`


def _two_classes(root: Path) -> None:
    (root / "images").mkdir()
    (root / "masks").mkdir()
    for seed in range(3):
        (root / "images" / f"{seed}.jpg").write_bytes(rgb_jpeg(12, 10, seed))
        ids = np.zeros((12, 10), np.uint8)
        ids[: 3 + seed] = 1
        Image.fromarray(ids).save(root / "masks" / f"{seed}.png")
    (root / "masks" / "readme.txt").write_text("a side file\n")
    (root / "images" / ".DS_Store").write_bytes(b"\0")


def test_a_tiny_two_class_run_prints_no_noise(tmp_path):
    _two_classes(tmp_path)
    argv = [
        "--image_dir",
        str(tmp_path / "images"),
        "--mask_dir",
        str(tmp_path / "masks"),
        "--output_dir",
        str(tmp_path / "out"),
        "--mask_type",
        "classes",
        "--num_classes",
        "2",
        "--ignore_files",
        "*.txt",
        *RUNNER_ARGS,
    ]
    done = subprocess.run([*SEGPREP, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "ignored 1 file matching --ignore_files" in out, out
    assert "ignored 1 hidden file (names" in out, out
    assert "most frequent: class 0" in out and "rarest" not in out, out
    written = next(line for line in out.splitlines() if "MB written in" in line)
    seconds = float(written.split(" written in ")[1].split(" s")[0])
    assert ("records/s" in written) == (seconds >= 5.0), written


def _quiet_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_grain_import_logs_no_jax_profiler_note():
    pytest.importorskip("grain")
    done = _quiet_python("import shard_reader.grain\nimport grain\nprint('imported')")
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr
    assert "jax profiler" not in done.stderr, done.stderr


def test_torch_transform_workers_warn_of_no_read_only_arrays(prepared):
    pytest.importorskip("torch")
    output, _ = prepared
    done = _quiet_python(
        f"""
        from shard_reader.torch import make_loader

        def flip(sample):
            sample["image"] = sample["image"].flip(-1)
            return sample

        loader = make_loader(
            {str(output)!r}, "train", 4, num_workers=2, image_size=(40, 30), transform=flip
        )
        print(sum(images.shape[0] for images, _ in loader))
        """
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) > 0
    assert "not writable" not in done.stderr, done.stderr
