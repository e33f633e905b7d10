"""The README's snippets run as written: the commands of "Use", the reading snippet after
them, and the training snippet on a prepared output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def _training_snippet() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Training in ten lines") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_use_commands_and_the_reading_snippet_run_as_written(tmp_path):
    """In a folder of its own, with .venv/bin pointing at this environment's scripts."""
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    commands = [
        line.split("#")[0].strip()
        for block in _blocks("bash")
        for line in block.splitlines()
        if line.startswith(".venv/bin/segprep")
    ]
    assert [command.split()[1] for command in commands] == ["sample-data", "prepare", "inspect"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    for command in commands:
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600
        )
        assert done.returncode == 0, (command, done.stderr[-2000:])
    assert (tmp_path / "out" / "metadata.json").exists()
    assert (tmp_path / "out_inspect_train.png").exists()  # where the README says it goes
    reading = next(block for block in _blocks("python") if 'make_dataset("out"' in block)
    done = subprocess.run(
        [sys.executable, "-c", reading], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_training_snippet_runs(prepared, tmp_path):
    output_dir, _ = prepared
    code = _training_snippet()
    assert 'data = "build/output"' in code
    script = tmp_path / "snippet.py"
    script.write_text(code.replace('"build/output"', repr(str(output_dir))))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "binary_io_u" in done.stdout or "loss" in done.stdout
