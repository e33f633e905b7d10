"""Every `segprep` command of README.md, docs/*.md and deploy/README.md runs in a test against
a miniature of the layout it names: here, or in the test that owns its page; a command that
cannot run as written (a flag excerpt, a bucket of the reader's) is an exception with its
reason. A new command in the docs fails the first test until one of the three holds."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from beam_pipeline import cli
from beam_pipeline.commands.sample_data import write_sample_data
from tests.helpers.runs import RUNNER_ARGS

REPO = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))]
PAGES.append("deploy/README.md")

# Pages whose commands their own test runs, each on its page's miniatures.
RUN_BY_THEIR_PAGE_TEST = {
    "README.md": ["tests/test_readme.py"],
    "docs/classes.md": ["tests/test_class_docs.py"],
    "docs/public-datasets.md": ["tests/test_public_layouts.py", "tests/test_dataset_recipes.py"],
    "deploy/README.md": ["tests/test_dataflow_deploy.py"],  # with --dry_run, on loopback GCS
}
EXCEPTIONS = {
    "segprep prepare ... --duplicates drop": "a flag excerpt of the command above it",
    "segprep prepare ... --duplicates off": "a flag excerpt of the command above it",
    "segprep prepare ... --duplicate_distance 8": "a flag excerpt of the command above it",
    "segprep prepare ... --leakage_check TEST_OUT": "a flag excerpt of the command above it",
    ".venv/bin/segprep report gs://bucket/out --out report.html": (
        "the reader's bucket; the same command on a local output runs here"
    ),
}
# Run here, in this order, from one folder: page -> commands.
RUN_HERE = {
    "docs/frameworks.md": [
        ".venv/bin/segprep index build/output",
        ".venv/bin/segprep verify build/output",
        ".venv/bin/segprep prepare --data_dir data/ --output_dir build/output "
        "--record_format array_record",
    ],
    "docs/duplicates.md": ["segprep prepare --image_dir I --mask_dir M --output_dir OUT"],
    "docs/report.md": [".venv/bin/segprep report out/"],
    "docs/versions.md": [
        "segprep prepare --image_dir batch2/images --mask_dir batch2/masks --output_dir OUT "
        "--append"
    ],
}


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) of every shell line that runs segprep, continuations joined and
    trailing comments dropped."""
    found = []
    for page in PAGES:
        text = (REPO / page).read_text(encoding="utf-8")
        for language, block in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
            if language not in ("bash", "sh", ""):
                continue
            for line in block.replace("\\\n", " ").splitlines():
                if re.match(r"\s*(\S*/)?segprep\s", line):
                    found.append((page, " ".join(shlex.split(line, comments=True))))
    return found


def test_every_documented_command_is_run_or_excused():
    commands = documented_commands()
    assert len(commands) > 20
    here = {command for listed in RUN_HERE.values() for command in listed}
    unhandled = [
        (page, command)
        for page, command in commands
        if page not in RUN_BY_THEIR_PAGE_TEST and command not in here | EXCEPTIONS.keys()
    ]
    assert not unhandled, f"documented, but run by no test: {unhandled}"
    for page, tests in RUN_BY_THEIR_PAGE_TEST.items():  # each owner really reads its page
        name = Path(page).name if page != "deploy/README.md" else "README.md"
        assert any(name in (REPO / test).read_text() for test in tests), (page, tests)
    documented = {command for _, command in commands}
    stale = (here | EXCEPTIONS.keys()) - documented
    assert not stale, f"listed here, no longer documented: {stale}"


def _run(command: str) -> int:
    argv = shlex.split(command)[1:]
    if argv[0] == "prepare":
        argv += RUNNER_ARGS
    return cli.main(argv)


def _flat(root: Path, name: str, count: int, seed: int) -> Path:
    """Sample entries in one folder (KEY.jpg beside KEY_mask.mat), for --data_dir."""
    made = write_sample_data(root / f"{name}-raw", count=count, seed=seed, broken_fraction=0.0,
                             height=48, width=40)  # fmt: skip
    flat = root / name
    flat.mkdir()
    for folder in (made.image_dir, made.mask_dir):
        for path in Path(folder).iterdir():
            path.rename(flat / path.name)
    return flat


def test_the_other_pages_commands_run_on_their_miniatures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # frameworks.md: an output as `make run` leaves it, then index and verify; then the
    # ArrayRecord command writes the same folder afresh.
    _flat(tmp_path, "data", 12, 1)
    assert cli.main(["prepare", "--data_dir", "data/", "--output_dir", "build/output",
                     *RUNNER_ARGS]) == 0  # fmt: skip
    index, verify, array_record = RUN_HERE["docs/frameworks.md"]
    assert _run(index) == 0 and _run(verify) == 0
    shutil.rmtree(tmp_path / "build")
    assert _run(array_record) == 0
    assert list((tmp_path / "build/output").glob("train-*.array_record"))

    # duplicates.md's placeholders I, M, OUT as folders of those names.
    write_sample_data(tmp_path / "dup", count=10, seed=2, broken_fraction=0.0, height=48, width=40)
    (tmp_path / "dup/images").rename(tmp_path / "I")
    (tmp_path / "dup/masks").rename(tmp_path / "M")
    (command,) = RUN_HERE["docs/duplicates.md"]
    assert _run(command) == 0 and (tmp_path / "OUT/duplicates.jsonl").exists()

    # report.md: a finished output at out/.
    shutil.copytree(tmp_path / "OUT", tmp_path / "out")
    (command,) = RUN_HERE["docs/report.md"]
    assert _run(command) == 0

    # versions.md: OUT (written above from batch 1) gains batch2 as version 2.
    write_sample_data(tmp_path / "batch2", count=6, seed=3, broken_fraction=0.0, height=48,
                      width=40)  # fmt: skip
    for path in [*(tmp_path / "batch2").glob("*/*")]:
        path.rename(path.with_name(f"batch2-{path.name}"))  # keys batch 1 does not have
    (command,) = RUN_HERE["docs/versions.md"]
    assert _run(command) == 0
    versions = json.loads((tmp_path / "OUT/metadata.json").read_text())["dataset_versions"]
    assert len(versions) == 2


@pytest.mark.parametrize(("command", "reason"), sorted(EXCEPTIONS.items()))
def test_exceptions_have_reasons(command, reason):
    assert reason and "segprep" in command
