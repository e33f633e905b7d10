"""`segprep verify`: a clean output passes; each kind of damage is named, with exit code 1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from beam_pipeline import cli
from beam_pipeline.commands.verify import verify_output
from beam_pipeline.errors import UsageError
from tests.helpers.class_outputs import metadata as _metadata
from tests.helpers.class_outputs import write_metadata as _write_metadata
from transforms.format.naming import METADATA_FILE, REJECTS_FILE, shard_name


@pytest.fixture
def output_copy(prepared, tmp_path):
    """A private copy of the session's prepared output, safe to damage."""
    copy = tmp_path / "out"
    shutil.copytree(prepared[0], copy)
    return copy


def _first_train_shard(directory) -> dict:
    return _metadata(directory)["splits"]["train"]["shards"][0]


def flip_byte(directory) -> str:
    shard = directory / _first_train_shard(directory)["file"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    return "fails the tfrecord check"


def remove_shard(directory) -> str:
    name = _first_train_shard(directory)["file"]
    (directory / name).unlink()
    return f"{name}: missing"


def add_extra_shard(directory) -> str:
    name = shard_name("train", 0, 99)
    shutil.copy(directory / _first_train_shard(directory)["file"], directory / name)
    return f"{name}: extra shard"


def overstate_count(directory) -> str:
    metadata = _metadata(directory)
    split = metadata["splits"]["train"]
    shard = split["shards"][0]
    real = shard["num_examples"]
    shard["num_examples"] += 1
    split["num_examples"] += 1  # split total stays consistent: only the shard count is wrong
    _write_metadata(directory, metadata)
    return f"{shard['file']}: {real} records, metadata.json says {real + 1}"


def extra_reject_line(directory) -> str:
    rejects = directory / REJECTS_FILE
    lines = rejects.read_text().splitlines()
    rejects.write_text("\n".join([*lines, lines[0]]) + "\n")
    return f"{REJECTS_FILE}: {len(lines) + 1} lines"


def garble_key_table(directory) -> str:
    """Every check that reads the key table (the index check, and the duplicates check,
    whose groups name keys) reports the damage instead of failing on it."""
    name = _metadata(directory)["splits"]["train"]["key_table"]["file"]
    (directory / name).write_text('garbage\n{"x":\n')
    return f"{name}: line 1: not [key, shard, record]"


def list_as_file_name(directory) -> str:
    """A damaged metadata.json whose index entry names a list, not a file."""
    metadata = _metadata(directory)
    metadata["splits"]["train"]["shards"][0]["index"]["file"] = ["x"]
    _write_metadata(directory, metadata)
    return "index: file ['x'], expected"


DAMAGE = [
    flip_byte,
    remove_shard,
    add_extra_shard,
    overstate_count,
    extra_reject_line,
    garble_key_table,
    list_as_file_name,
]


def test_clean_output_passes(prepared, capsys):
    output_dir, result = prepared
    assert verify_output(str(output_dir)) == []

    assert cli.main(["verify", str(output_dir)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    examples = sum(split["num_examples"] for split in result.metadata["splits"].values())
    assert len(out) == 1 and out[0].startswith("OK ")
    assert f"{examples} examples" in out[0]


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda damage: damage.__name__)
def test_damage_is_reported(damage, output_copy, capsys):
    expected = damage(output_copy)

    problems = verify_output(str(output_copy))
    assert any(expected in problem for problem in problems), problems

    assert cli.main(["verify", str(output_copy)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[:-1] == problems  # one line per problem, then the FAILED line
    assert out[-1].startswith("FAILED ") and f"{len(problems)} problems" in out[-1]


def test_flipped_byte_also_fails_checksum(output_copy):
    flip_byte(output_copy)
    name = _first_train_shard(output_copy)["file"]
    problems = verify_output(str(output_copy))
    assert any(problem.startswith(f"{name}: sha256 ") for problem in problems), problems


def test_missing_metadata_is_a_usage_error(output_copy, capsys):
    (output_copy / METADATA_FILE).unlink()
    with pytest.raises(UsageError, match="metadata.json not found"):
        verify_output(str(output_copy))

    assert cli.main(["verify", str(output_copy)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert "metadata.json not found" in captured.err


def test_missing_directory_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["verify", str(tmp_path / "nowhere")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_console_exit_code(output_copy):
    """The real process exit status, not just main()'s return value."""
    script = Path(sys.executable).with_name("segprep")
    if not script.exists():
        pytest.skip("console script `segprep` not installed next to the interpreter")
    remove_shard(output_copy)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0"}
    completed = subprocess.run(
        [str(script), "verify", str(output_copy)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert completed.returncode == 1, completed.stderr
    assert ": missing" in completed.stdout
