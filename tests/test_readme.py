"""The README's training snippet runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _snippet() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Training in ten lines") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_training_snippet_runs(prepared, tmp_path):
    output_dir, _ = prepared
    code = _snippet()
    assert 'data = "build/output"' in code
    script = tmp_path / "snippet.py"
    script.write_text(code.replace('"build/output"', repr(str(output_dir))))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "binary_io_u" in done.stdout or "loss" in done.stdout
