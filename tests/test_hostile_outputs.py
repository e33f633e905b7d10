"""A FIFO or a link to /dev/zero in an output: verify, inspect and index say so in one line.

Nothing in an output directory is trusted to be a regular file: a FIFO would block a reader
forever and /dev/zero would fill its memory. Each command runs as a real process with a
timeout, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.helpers.process_tree import SEGPREP  # noqa: E402 - the console script
from transforms.format import dataset_info
from transforms.format.naming import METADATA_FILE


def _target(out, which: str) -> str:
    metadata = json.loads((out / METADATA_FILE).read_text())
    shard = metadata["splits"]["train"]["shards"][0]
    return {"metadata": METADATA_FILE, "shard": shard["file"], "index": shard["index"]["file"]}[
        which
    ]


def _plant(path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


def _run(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([*SEGPREP, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def _one_line_error(
    done: subprocess.CompletedProcess, name: str, reason: str = "not a regular file"
) -> None:
    text = done.stdout + done.stderr
    assert done.returncode in (1, 2), text
    assert "Traceback" not in text, text
    problems = [line for line in text.splitlines() if name in line]
    assert problems and all(reason in line for line in problems), text


@pytest.fixture
def output_copy(indexed, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(indexed, copy)
    return copy


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
@pytest.mark.parametrize("which", ["metadata", "shard"])
def test_verify_inspect_index_refuse_what_is_not_a_file(output_copy, tmp_path, which, kind):
    name = _target(output_copy, which)
    _plant(output_copy / name, kind)
    _one_line_error(_run("verify", str(output_copy), cwd=tmp_path), name)
    sheet = tmp_path / "sheet.png"
    done = _run("inspect", str(output_copy), "--out", str(sheet), cwd=tmp_path)
    _one_line_error(done, name)
    assert not sheet.exists()
    # index holds the output protocol, which refuses any entry that is not a plain file.
    done = _run("index", str(output_copy), cwd=tmp_path)
    _one_line_error(done, name, "is not a file segprep wrote")


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_verify_refuses_an_index_file_that_is_not_a_file(output_copy, tmp_path, kind):
    name = _target(output_copy, "index")
    _plant(output_copy / name, kind)
    _one_line_error(_run("verify", str(output_copy), cwd=tmp_path), name)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_reader_metadata_load_refuses_what_is_not_a_file(output_copy, kind):
    _plant(output_copy / METADATA_FILE, kind)
    with pytest.raises(dataset_info.MetadataError, match="not a regular file"):
        dataset_info.load(str(output_copy))


def test_a_lone_surrogate_escape_is_a_problem_of_its_file_never_a_crash(
    prepared, sample_dataset, tmp_path
):
    """A JSON \\ud800 escape is valid JSON, but the text it makes has no UTF-8 form: verify
    and report crashed printing it, and an append failed after its whole job had run."""
    from beam_pipeline.errors import printable
    from tests.helpers.runs import job_args

    out = tmp_path / "out"
    shutil.copytree(prepared[0], out)
    rejects = out / "rejects.jsonl"
    number = len(rejects.read_text().splitlines()) + 1
    with rejects.open("a") as handle:
        handle.write('{"key": "\\ud800zz", "reason": "\\udfffx", "detail": "\\ud800"}\n')
    said = f"rejects.jsonl line {number}: a \\ud800 escape, half a UTF-16 surrogate pair"

    done = _run("verify", str(out), cwd=tmp_path)
    assert done.returncode == 1 and not done.stderr, done.stderr
    assert any(line.startswith(said) for line in done.stdout.splitlines()), done.stdout
    page = tmp_path / "page.html"
    done = _run("report", str(out), "--out", str(page), cwd=tmp_path)
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert "\\ud800zz" in page.read_text()  # escaped, as verify prints it
    done = _run(
        "prepare", *job_args(sample_dataset, out, "--num_shards", "3", "--append"), cwd=tmp_path
    )
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert said in done.stderr and "nothing was appended" in done.stderr

    rejects.write_text("".join(rejects.read_text().splitlines(keepends=True)[:-1]))
    metadata = out / METADATA_FILE
    metadata.write_text(metadata.read_text().replace('"train"', '"tr\\udfffain"', 1))
    done = _run("verify", str(out), cwd=tmp_path)
    assert done.returncode == 1 and "metadata.json: " in done.stdout and "\\udfff" in done.stdout
    for command in (["report", str(out), "--out", str(page)], ["inspect", str(out)]):
        done = _run(*command, cwd=tmp_path)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert "metadata.json: a \\udfff escape" in done.stderr
    assert printable("k\ud800\udfff") == "k\\ud800\\udfff"  # any other line that holds one
