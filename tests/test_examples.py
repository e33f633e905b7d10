"""The examples as a newcomer runs them: no TensorFlow start-up lines, defaults in --help."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
QUIETING = ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")


def _run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {name: value for name, value in os.environ.items() if name not in QUIETING}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=300,
    )


def test_read_batch_prints_only_its_own_lines(prepared):
    """Run from a shell that set nothing: TensorFlow's C++ logs would come first on stderr."""
    completed = _run("read_batch.py", str(prepared[0]))
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    assert completed.stdout.startswith(f"read back a batch from {prepared[0]}:")


def test_train_help_shows_defaults_and_a_user_log_level_is_kept():
    completed = _run("train_segmentation.py", "--help", TF_ENABLE_ONEDNN_OPTS="1")
    assert completed.returncode == 0, completed.stderr
    help_text = " ".join(completed.stdout.split())
    for default in ("epochs (default: 3)", "batch size (default: 16)", "(default: 128)"):
        assert default in help_text
    assert "(default: 0.002)" in help_text and "(default: no cap" in help_text
    assert "(default: None)" not in help_text
    # The user's own setting wins: oneDNN on, and TensorFlow says so.
    assert "oneDNN custom operations are on" in completed.stderr
