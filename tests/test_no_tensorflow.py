"""`prepare`, `verify`, `index` and `inspect` run with TensorFlow impossible to import.

Each command runs as a real subprocess whose `tensorflow` module is None in sys.modules, so
any import of it anywhere on the path (segprep's or a library's) fails the command.
"""

from __future__ import annotations

import json
import subprocess
import sys

from PIL import Image

from tests.helpers.runs import job_args

NO_TENSORFLOW = (
    "import sys\n"
    "sys.modules['tensorflow'] = None  # any import of it now fails\n"
    "from beam_pipeline.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "assert 'tensorflow' not in [name.split('.')[0] for name in sys.modules if sys.modules[name]]\n"
    "sys.exit(code)\n"
)


def segprep_without_tensorflow(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", NO_TENSORFLOW, *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


def test_prepare_verify_index_inspect_need_no_tensorflow(sample_dataset, tmp_path):
    out = tmp_path / "out"
    done = segprep_without_tensorflow(
        "prepare", *job_args(sample_dataset, out, "--num_shards", "2")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    metadata = json.loads((out / "metadata.json").read_text())
    assert sum(split["num_examples"] for split in metadata["splits"].values()) > 0

    done = segprep_without_tensorflow("verify", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.startswith(f"OK {out}")

    # `segprep index` rebuilds the index and TFDS files in place, through the output protocol.
    done = segprep_without_tensorflow("index", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"indexed {out}")
    done = segprep_without_tensorflow("verify", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    sheet = tmp_path / "sheet.png"
    done = segprep_without_tensorflow("inspect", str(out), "--count", "3", "--out", str(sheet))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(sheet) and Image.open(sheet).format == "PNG"
    rejects = tmp_path / "rejects.png"
    done = segprep_without_tensorflow("inspect", str(out), "--rejects", "--out", str(rejects))
    assert done.returncode == 0, done.stderr[-3000:]
    assert Image.open(rejects).format == "PNG"
