"""docs/architecture.md names every module of the three packages, and only modules that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("beam_pipeline", "transforms", "shard_reader")


def _tree_paths() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## The tree", 1)[1].split("```", 2)[1]
    stack: list[tuple[int, str]] = []
    paths = set()
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        name = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        prefix = "".join(folder for _, folder in stack)
        if name.endswith("/"):
            stack.append((indent, name))
            paths.add(prefix + name)
        else:
            paths.update(prefix + part.strip() for part in name.split(","))
    return paths


def test_every_module_is_named_and_every_name_exists():
    named = _tree_paths()
    modules = {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py"
    }
    assert not modules - named, (
        f"modules docs/architecture.md does not name: {sorted(modules - named)}"
    )
    missing = {path for path in named if not (ROOT / path).exists()}
    assert not missing, f"docs/architecture.md names what does not exist: {sorted(missing)}"
