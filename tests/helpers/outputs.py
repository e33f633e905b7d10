"""What a run published, compared file by file."""

from __future__ import annotations

from pathlib import Path


def published(out: Path) -> set[str]:
    """Every published file, by its path under `out` (segprep's own .segprep/ aside)."""
    return {
        str(path.relative_to(out))
        for path in out.rglob("*")
        if path.is_file() and ".segprep" not in path.relative_to(out).parts
    }


def final_names(out: Path) -> list[str]:
    """Names at the top of an output folder, segprep's own .segprep/ aside ([] if absent)."""
    return sorted(p.name for p in out.iterdir() if p.name != ".segprep") if out.exists() else []


def same_output(out: Path, reference: Path) -> None:
    """The same published files, byte for byte (metadata.json holds run ids and timings)."""
    assert published(out) == published(reference)
    for name in published(reference) - {"metadata.json"}:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
