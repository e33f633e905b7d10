"""Every Python snippet of docs/frameworks.md runs as written, on an indexed output."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.augment import torchvision_or_skip

DOC = Path(__file__).resolve().parent.parent / "docs" / "frameworks.md"
# The gs:// snippets run against the storage emulator in tests/test_gcs_reader.py.
SNIPPETS = [
    snippet
    for snippet in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    if "gs://" not in snippet
]


def test_the_doc_has_a_snippet_per_framework():
    text = "\n".join(SNIPPETS)
    for needle in ("shard_reader.torch", "shard_reader.grain", "builder_from_directory"):
        assert needle in text
    assert all('"build/output"' in snippet for snippet in SNIPPETS)


# Augmentation libraries the snippets show but segprep does not depend on: a snippet that
# imports one runs where it is installed (tests/test_torch_transforms.py covers the same).
OPTIONAL = ("torchvision", "albumentations")


@pytest.mark.parametrize("number", range(len(SNIPPETS)))
def test_snippet_runs(indexed, tmp_path, number):
    for module in OPTIONAL:
        if re.search(rf"^(from|import) {module}\b", SNIPPETS[number], re.M):
            if module == "torchvision":
                torchvision_or_skip()  # also skips a build for another torch, saying so
            else:
                pytest.importorskip(module)
    code = SNIPPETS[number].replace('"build/output"', repr(str(indexed)))
    script = tmp_path / "snippet.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "every snippet prints what it read"
