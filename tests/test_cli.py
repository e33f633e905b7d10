"""The console script as a user meets it: summaries, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from beam_pipeline.cli import main
from tests.conftest import job_args


def _prepare_args(dataset, output_dir, *extra) -> list[str]:
    return ["prepare", *job_args(dataset, output_dir, *extra)]


def test_sample_data_reports_each_breakage(tmp_path, capsys):
    assert (
        main(["sample-data", str(tmp_path / "s"), "--count", "12", "--broken_fraction", "0.5"]) == 0
    )
    out = capsys.readouterr().out
    assert "wrote 12 entries" in out and "broken on purpose: 6" in out
    for kind in ("truncated_jpeg", "zero_byte_image", "unreadable_mat", "size_mismatch"):
        assert f"{kind}" in out
    assert len(list((tmp_path / "s" / "images").iterdir())) == 11  # one mask_without_image


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--train_size", "0.8", "--validation_size", "0.3"], "at most 1"),
        (["--train_size", "-0.1"], "between 0 and 1"),
        (["--num_shards", "0"], "--num_shards must be at least 1"),
    ],
)
def test_bad_flags_end_in_one_line_and_exit_2(sample_dataset, tmp_path, capsys, extra, message):
    code = main(_prepare_args(sample_dataset, tmp_path / "out", *extra))
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_missing_input_folder_is_a_usage_error(sample_dataset, tmp_path, capsys):
    args = _prepare_args(sample_dataset, tmp_path / "out")
    args[args.index("--mask_dir") + 1] = str(tmp_path / "nope")
    assert main(args) == 2
    assert "--mask_dir" in capsys.readouterr().err


def test_wrong_mask_folder_is_a_usage_error(sample_dataset, tmp_path, capsys):
    args = _prepare_args(sample_dataset, tmp_path / "out")
    args[args.index("--mask_dir") + 1] = str(sample_dataset.image_dir)  # images twice
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no image in --image_dir has a mask" in err and "KEY_mask.mat" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_unknown_mask_variable_is_a_usage_error(sample_dataset, tmp_path, capsys):
    assert main(_prepare_args(sample_dataset, tmp_path / "out", "--mask_key", "gt")) == 2
    err = capsys.readouterr().err
    assert "--mask_key 'gt' is not a variable" in err and "--mask_key mask" in err
    assert "Traceback" not in err


def test_output_dir_is_never_mixed(sample_dataset, prepared, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_prepare_args(sample_dataset, out, "--num_shards", "9")) == 0
    assert main(_prepare_args(sample_dataset, out)) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(_prepare_args(sample_dataset, out, "--overwrite")) == 0
    assert "rejected" in capsys.readouterr().out
    assert not list(out.glob("*-of-00009.tfrecord"))  # nothing of the earlier 9-shard run
    metadata = json.loads((out / "metadata.json").read_text())
    listed = {s["file"] for split in metadata["splits"].values() for s in split["shards"]}
    assert {p.name for p in out.glob("*.tfrecord")} == listed
    (out / "my_notes.txt").write_text("not segprep's")
    assert main(_prepare_args(sample_dataset, out, "--overwrite")) == 2
    assert "did not write" in capsys.readouterr().err
    assert (out / "my_notes.txt").exists() and (out / "metadata.json").exists()


def test_python_dash_m_runs_the_job(sample_dataset, tmp_path):
    args = _prepare_args(sample_dataset, tmp_path / "m")[1:]
    done = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "60 entries discovered" in done.stdout
    assert (tmp_path / "m" / "metadata.json").exists()


@pytest.mark.parametrize("command", ["sample-data", "prepare", "verify", "index", "inspect"])
def test_help_lists_every_option_with_its_default(command, capsys):
    from beam_pipeline.cli import build_parser

    parser = build_parser()
    subparser = parser._subparsers._group_actions[0].choices[command]
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for action in subparser._actions:
        if action.option_strings and action.dest != "help":
            assert action.option_strings[-1] in out, action.dest
            assert action.help, action.dest
    assert out.count("(default:") >= sum(
        1 for a in subparser._actions if a.option_strings and a.dest != "help"
    )


def test_version(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.startswith("segprep 0.1.0")
