"""The project's layering, read from the source: every import of every module of
beam_pipeline, transforms and shard_reader, at module level or inside a function (a deferred
import is still a dependency, and still closes a cycle when it runs).

Rules: no import cycle among project modules; transforms imports none of apache_beam,
tensorflow, beam_pipeline, shard_reader; shard_reader imports neither apache_beam nor
beam_pipeline; beam_pipeline.runtime and beam_pipeline.job never import beam_pipeline.launch.
Imports under `if TYPE_CHECKING:` count as well: a layer that needs another's types depends
on it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("beam_pipeline", "transforms", "shard_reader")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


SOURCES = _sources()


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """`from ..x import y` inside `module` -> the absolute name it refers to."""
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def imports_of(module: str) -> set[str]:
    """Every name `module` imports, absolute: `from a import b` gives a.b when that is a
    module of the project, else a. Strings handed to importlib.import_module count too,
    as the project modules they name."""
    path = SOURCES[module]
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    dynamic = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in SOURCES else base)
        elif isinstance(node, ast.Attribute) and node.attr == "import_module":
            dynamic = True
    if dynamic:
        found.update(
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in SOURCES
        )
    return found


GRAPH = {module: imports_of(module) for module in SOURCES}


def _project_target(name: str) -> str | None:
    """The project module an imported name lands in (a.b.C -> a.b), or None."""
    while name:
        if name in SOURCES:
            return name
        name = name.rpartition(".")[0]
    return None


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first, colouring nodes)."""
    edges = {
        module: sorted({t for t in map(_project_target, names) if t and t != module})
        for module, names in graph.items()
    }
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in edges[module]:
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(edges):
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_walk_sees_function_level_and_relative_imports():
    """The walker itself: a deferred import and a relative one are both found."""
    assert "beam_pipeline.job.pipeline" in GRAPH["beam_pipeline.launch.submission"]  # in a function
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}}
    assert _absolute("p.a", False, 1, "b") == "p.b"
    assert _absolute("p.sub", True, 2, None) == "p"
    assert find_cycle({name: set() for name in graph}) is None


def test_a_cycle_is_found_and_reported(monkeypatch):
    """find_cycle reports a cycle through a function-level import of project modules."""
    fake = {"beam_pipeline.runtime.storage", "beam_pipeline.job.commit", "beam_pipeline.cli"}
    monkeypatch.setitem(globals(), "SOURCES", {**SOURCES, **{name: Path() for name in fake}})
    graph = {
        "beam_pipeline.cli": {"beam_pipeline.job.commit"},
        "beam_pipeline.job.commit": {"beam_pipeline.runtime.storage.join"},
        "beam_pipeline.runtime.storage": {"beam_pipeline.job.commit", "os"},
    }
    assert find_cycle(graph) == [
        "beam_pipeline.job.commit",
        "beam_pipeline.runtime.storage",
        "beam_pipeline.job.commit",
    ]


def test_no_import_cycle_among_project_modules():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


FORBIDDEN = [
    ("transforms", ("apache_beam", "tensorflow", "beam_pipeline", "shard_reader")),
    ("shard_reader", ("apache_beam", "beam_pipeline")),
    ("beam_pipeline.runtime", ("beam_pipeline.launch",)),
    ("beam_pipeline.job", ("beam_pipeline.launch",)),
]


@pytest.mark.parametrize(("layer", "forbidden"), FORBIDDEN, ids=[rule[0] for rule in FORBIDDEN])
def test_layer_imports_nothing_forbidden(layer, forbidden):
    modules = [module for module in GRAPH if _in(module, layer)]
    assert modules, f"no modules found in {layer}"
    broken = sorted(
        f"{module} imports {name}"
        for module in modules
        for name in GRAPH[module]
        if any(_in(name, package) for package in forbidden)
    )
    assert not broken, "; ".join(broken)


def test_the_launcher_plans_and_builds_the_job_without_the_mask_readers_imports():
    """scipy.io and h5py (about 0.2 s) are the writers' to import: the launcher imports the
    job's graph, which reaches transforms.codecs.mask, but never loads a mask itself."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import beam_pipeline.cli, beam_pipeline.launch.launcher, beam_pipeline.job.pipeline\n"
        "import transforms.codecs.mask, transforms.record\n"
        "print(sorted(name for name in ('scipy.io', 'h5py') if name in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
