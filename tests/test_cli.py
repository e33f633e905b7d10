"""The console script as a user meets it: summaries, and one-line errors with exit code 2."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from beam_pipeline.cli import main
from tests.helpers.runs import RUNNER_ARGS, job_args
from transforms.format import dataset_info


def _prepare_args(dataset, output_dir, *extra) -> list[str]:
    return ["prepare", *job_args(dataset, output_dir, *extra)]


def test_sample_data_reports_each_breakage(tmp_path, capsys):
    assert (
        main(["sample-data", str(tmp_path / "s"), "--count", "12", "--broken_fraction", "0.5"]) == 0
    )
    out = capsys.readouterr().out
    assert "wrote 12 entries" in out and "broken on purpose: 6" in out
    assert "planted 1 near copy (of " in out  # 2 % of 12, rounded up
    for kind in ("truncated_jpeg", "zero_byte_image", "unreadable_mat", "size_mismatch"):
        assert f"{kind}" in out
    assert len(list((tmp_path / "s" / "images").iterdir())) == 11  # one mask_without_image


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--train_size", "0.8", "--validation_size", "0.3"], "at most 1"),
        (["--train_size", "-0.1"], "between 0 and 1"),
        (["--num_shards", "0"], "--num_shards: must be at least 1"),
        (["--num_shards", "0.5"], "--num_shards: '0.5' is not an integer"),
        (["--num_shards", "1_0"], "--num_shards: '1_0' is not an integer"),
        (["--num_shards", "9" * 5000], "--num_shards: " + "9" * 40 + "... is too large"),
        (["--shard_size_mb", "abc"], "--shard_size_mb: 'abc' is not a number"),
        (["--shard_size_mb", "nan"], "--shard_size_mb: 'nan' is not a finite number"),
        (["--shard_size_mb", "inf"], "--shard_size_mb: 'inf' is not a finite number"),
        (["--max_reject_fraction", "1.5"], "--max_reject_fraction: must be a fraction"),
        (["--writer_processes", "-1"], "--writer_processes: must be 0 (auto) or more"),
        (["--mask_fromat", "png"], "unknown flag --mask_fromat: did you mean --mask_format?"),
        (["--num_shrads", "4"], "unknown flag --num_shrads: did you mean --num_shards?"),
        (["--runer", "DataflowRunner"], "unknown flag --runer: did you mean --runner?"),
        (["--train-size", "0.5"], "unknown flag --train-size: did you mean --train_size?"),
        (["--max-workers", "3"], "unknown flag --max-workers: did you mean --max_num_workers?"),
        (["--direct_num_workers", "two"], "--direct_num_workers: invalid int value"),
        (["--no_wait_until_finish"], "use --no_wait"),
        (["stray"], "unexpected argument 'stray'"),
        (["--direct_num_workers", "1000"], "--direct_num_workers must be from 0 to 256"),
        (["--num_shards", "9" * 20], "is too large (at most 18 digits)"),
        (
            ["--mask_type", "classes", "--class_map", "nosuchpreset"],
            "--class_map nosuchpreset: no such file, and not a preset (ade20k_reduce_zero",
        ),
    ],
)
def test_bad_flags_end_in_one_line_and_exit_2(sample_dataset, tmp_path, capsys, extra, message):
    code = main(_prepare_args(sample_dataset, tmp_path / "out", *extra))
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [
        ["verify", ""],
        ["index", " "],
        ["inspect", ""],
        ["report", ""],
        ["sample-data", ""],
        ["prepare", "--image_dir", "", "--mask_dir", "m", "--output_dir", "o"],
        ["prepare", "--data_dir", "d", "--output_dir", ""],
    ],
)
def test_an_empty_path_is_a_usage_error_not_the_current_folder_or_the_root(
    tmp_path, monkeypatch, capsys, command
):
    """An unset shell variable ("$OUT") must not make verify read / or prepare write into
    the current folder."""
    monkeypatch.chdir(tmp_path)
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "is empty: pass a folder or file" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


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
    assert "no image KEY.jpg|.jpeg|.png has a mask beside it" in err and "KEY_mask.mat" in err
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
    assert main(_prepare_args(sample_dataset, out, "--overwrite")) == 0  # written beside it
    assert (out / "my_notes.txt").read_text() == "not segprep's"
    (out / "train-00000-of-00003.tfrecord").write_text("another tool's shard")
    assert main(_prepare_args(sample_dataset, out, "--overwrite")) == 2  # would replace it
    assert "train-00000-of-00003.tfrecord, which segprep did not write" in capsys.readouterr().err
    assert (out / "train-00000-of-00003.tfrecord").read_text() == "another tool's shard"


def test_python_dash_m_runs_the_job(sample_dataset, tmp_path):
    args = _prepare_args(sample_dataset, tmp_path / "m")[1:]
    done = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "60 entries discovered" in done.stdout
    assert (tmp_path / "m" / "metadata.json").exists()


def test_python_dash_m_of_the_cli_module_runs_its_command(tmp_path):
    """`python -m beam_pipeline.cli COMMAND` ran nothing and exited 0: the module had no
    main guard, so a command typed that way seemed to succeed."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "beam_pipeline.cli",
            "sample-data",
            str(tmp_path / "d"),
            "--count",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "d" / "images").iterdir())) >= 2


@pytest.mark.parametrize("command", ["sample-data", "prepare", "verify", "index", "inspect"])
def test_help_lists_every_option_once_with_its_default(command, capsys):
    from beam_pipeline.cli import build_parser

    parser = build_parser()
    subparser = parser._subparsers._group_actions[0].choices[command]
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in out and "(default: False)" not in out
    for action in subparser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        if action.help == "==SUPPRESS==":  # a deprecated alias (tests/test_flag_names.py)
            continue
        flag = action.option_strings[-1]
        assert flag in out and action.help, action.dest
        no_default = any(action.default is no for no in (None, False))  # 0 is a default
        default = not no_default and not action.required
        assert (f"(default: {action.default})" in out) is default or "%" in action.help, flag
        assert action.help.count("default") <= 1, f"{flag} states its default twice"
    if command == "prepare":
        assert "Apache Beam pipeline option" in out and "--runner" in out


def test_bare_segprep_prints_the_help_and_exits_2(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "usage: segprep" in err and "prepare" in err and "sample-data" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sample-data", "x", "--broken_fraction", "2"], "--broken_fraction: must be a fraction"),
        (["sample-data", "x", "--count", "0"], "--count: must be at least 1"),
        (["verify"], "the following arguments are required: dir"),
        (
            ["prepare", "--image_dir", "i", "--mask_dir", "m", "--output_dir", "o"]
            + ["--writer_processes", "1000"],
            "--writer_processes: must be from 0 (auto) to 256, got 1000",
        ),
        (["nonsense"], "invalid choice: 'nonsense'"),
    ],
)
def test_every_subcommand_argument_error_is_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_version(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.startswith("segprep 0.1.0")


def test_gcs_without_credentials_fails_fast_naming_them(tmp_path):
    """No emulator, no ADC: one line naming the fix, exit 2, after one credential search
    (Beam alone retries it with back-off for minutes). The metadata server is a loopback
    stand-in that counts the searches: nothing leaves the machine."""
    from tests.helpers.gcs_server import metadata_server_watch
    from tests.helpers.process_tree import SEGPREP

    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")
    }
    with metadata_server_watch() as (address, connections):
        env.update(
            HOME=str(tmp_path),  # no gcloud application_default_credentials.json
            CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),
            GCE_METADATA_HOST=address,
            GCE_METADATA_IP=address,
            TF_CPP_MIN_LOG_LEVEL="3",
        )
        done = subprocess.run(
            [*SEGPREP, "prepare", "--image_dir", "gs://segprep-x/i", "--mask_dir"]
            + ["gs://segprep-x/m", "--output_dir", "gs://segprep-x/o", "--runner", "FnApiRunner"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,  # a hang guard only
        )
    assert done.returncode == 2, done.stderr
    assert "gcloud auth application-default login" in done.stderr
    assert "GOOGLE_APPLICATION_CREDENTIALS" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert len(connections) == 1, f"{len(connections)} metadata probes: credentials retried"


@pytest.mark.parametrize(
    "command",
    [
        ["prepare", "--image_dir", "gs://segprep-x/i", "--mask_dir", "gs://segprep-x/m"]
        + ["--output_dir", "gs://segprep-x/o"],
        ["verify", "gs://segprep-x/o"],
    ],
    ids=["prepare", "verify"],
)
def test_cloud_storage_that_does_not_answer_is_one_line(command, tmp_path):
    """A Cloud Storage endpoint that refuses connections is named in one line after one
    request: the client's own retries ran for two minutes and ended in a RetryError."""
    import socket

    from tests.helpers.process_tree import SEGPREP

    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        env = dict(os.environ, STORAGE_EMULATOR_HOST=endpoint, TF_CPP_MIN_LOG_LEVEL="3")
        done = subprocess.run(
            [*SEGPREP, *command],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,  # a hang guard only
        )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"Cloud Storage at {endpoint} (STORAGE_EMULATOR_HOST) cannot be reached" in lines[0]
    assert "RetryError" not in done.stderr


def test_a_reader_that_stops_early_does_not_fail_a_finished_run(sample_dataset, tmp_path):
    """`segprep prepare ... | head`: the dataset is written, so the exit code is 0 even though
    nobody reads the summary (`true` exits before it is printed)."""
    from tests.helpers.process_tree import SEGPREP

    out = tmp_path / "out"
    command = " ".join([*SEGPREP, *_prepare_args(sample_dataset, out)])
    done = subprocess.run(
        ["bash", "-c", f"{command} | true; echo exit=${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout.strip() == "exit=0", done.stderr
    assert "BrokenPipeError" not in done.stderr and "Traceback" not in done.stderr
    assert (out / "metadata.json").exists()


# How a shell hands segprep its standard streams (cron, daemons, `exec >&-`, a full disk).
STREAMS = {
    "stdout closed": ">&-",
    "stderr closed": "2>&-",
    "both closed": ">&- 2>&-",
    "stdout on a full device": ">/dev/full",
}


def _with_streams(argv: list[str], streams: str, err: Path) -> int:
    """Exit code of `segprep ARGV` with its streams as `streams` says (stderr into `err`
    unless closed)."""
    from tests.helpers.process_tree import SEGPREP

    command = shlex.join([*SEGPREP, *argv])
    redirect = streams if "2>" in streams else f"{streams} 2>{shlex.quote(str(err))}"
    done = subprocess.run(["bash", "-c", f"{command} {redirect}"], timeout=300)
    return done.returncode


@pytest.mark.parametrize("streams", sorted(STREAMS))
def test_closed_or_full_standard_streams_do_not_fail_a_published_run(
    sample_dataset, tmp_path, streams
):
    """Closed stdout: published, then exit 1 and a traceback; closed stderr: AttributeError,
    nothing published; stdout on /dev/full: published, then "failed: OSError". A closed
    stream is os.devnull; a result that cannot be written exits 3, saying so in one line."""
    out, err = tmp_path / "out", tmp_path / "err"
    code = _with_streams(_prepare_args(sample_dataset, out), STREAMS[streams], err)
    said = err.read_text() if err.exists() else ""
    if streams == "stdout on a full device":
        assert code == 3, said
        assert said == (
            "segprep: done, but its result could not be written to stdout "
            "(No space left on device)\n"
        )
    else:
        assert code == 0, said
        assert said == ""
    assert main(["verify", str(out)]) == 0


@pytest.mark.parametrize(
    "command",
    [
        ["verify"],
        ["index"],
        ["inspect", "--out", "{tmp}/sheet.png"],
        ["report", "--out", "{tmp}/page.html"],
        ["sample-data"],
    ],  # fmt: skip
    ids=lambda command: command[0],
)
@pytest.mark.parametrize("streams", sorted(STREAMS))
def test_every_command_copes_with_closed_or_full_standard_streams(
    prepared, tmp_path, command, streams
):
    name, *flags = command
    target = str(tmp_path / "new") if name == "sample-data" else str(prepared[0])
    argv = [name, target, *(flag.format(tmp=tmp_path) for flag in flags)]
    err = tmp_path / "err"
    code = _with_streams(argv, STREAMS[streams], err)
    said = err.read_text() if err.exists() else ""
    assert code == (3 if streams == "stdout on a full device" else 0), said
    assert "Traceback" not in said and len(said.splitlines()) <= 1


def _one_folder(sample_dataset, folder):
    """The sample data in the one-folder layout: KEY.jpg beside KEY_mask.mat."""
    import shutil

    folder.mkdir()
    for path in sample_dataset.image_dir.iterdir():
        shutil.copy(path, folder / path.name)
    for path in sample_dataset.mask_dir.iterdir():
        shutil.copy(path, folder / path.name)
    return folder


@pytest.mark.parametrize("style", ["data_dir", "same_folder_twice"])
def test_images_and_masks_in_one_folder(sample_dataset, prepared, tmp_path, capsys, style):
    folder = _one_folder(sample_dataset, tmp_path / "data")
    if style == "data_dir":
        inputs = ["--data_dir", str(folder)]
    else:
        inputs = ["--image_dir", str(folder), "--mask_dir", str(folder)]
    out = tmp_path / "out"
    code = main(["prepare", *inputs, "--output_dir", str(out), "--num_shards", "3"] + RUNNER_ARGS)
    assert code == 0, capsys.readouterr().err
    clean_dir, clean = prepared
    # The same entries, pairs and rejects as the two-folder layout: _mask files are never
    # taken for images.
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    clean_rejects = [
        json.loads(line) for line in (clean_dir / "rejects.jsonl").read_text().splitlines()
    ]
    assert [(r["key"], r["reason"]) for r in rejects] == [
        (r["key"], r["reason"]) for r in clean_rejects
    ]
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["splits"] == clean.metadata["splits"]


def test_swapped_folders_get_a_hint_before_the_job(sample_dataset, tmp_path, capsys):
    args = _prepare_args(sample_dataset, tmp_path / "out")
    image, mask = args.index("--image_dir") + 1, args.index("--mask_dir") + 1
    args[image], args[mask] = args[mask], args[image]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "the folders look swapped" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_line_break_in_the_output_path_is_printed_escaped_on_one_line(
    sample_dataset, tmp_path, capsys
):
    """ESC was escaped but a line break kept, so the summary's `report:` line, verify's OK
    line and report's page path each came out as two lines."""
    out = tmp_path / "o\x1b[2J\nx"
    shown = str(out).replace("\x1b", "\\x1b").replace("\n", "\\n")
    assert main(_prepare_args(sample_dataset, out)) == 0
    summary = capsys.readouterr().out.splitlines()
    assert summary[-2].startswith(f"  output: {shown}/  (")
    assert summary[-1] == f"  report: segprep report '{shown}'"
    assert not any(line.startswith("x") for line in summary)
    assert main(["verify", str(out)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"OK {shown}: ")
    assert main(["index", str(out)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert shown in line
    page = tmp_path / "page.html"
    assert main(["report", str(out), "--out", str(page)]) == 0
    assert capsys.readouterr().out.splitlines() == [str(page)]
    assert main(["report", str(out)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line == str(tmp_path / "segprep-report-o\\x1b[2J\\nx.html")


def test_summary_counts_one_shard_in_the_singular(prepared):
    from beam_pipeline.commands.summary import summary_lines

    info = dataset_info.load(prepared[0])
    assert {split.num_shards for split in info.splits.values()} >= {1}
    summary = "\n".join(summary_lines(info))
    assert "1 shard " in summary and "1 shards" not in summary
    assert f"{sum(s.num_shards for s in info.splits.values())} shards," in summary


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--image-dir", "I", "--mask_dir", "M", "--output_dir", "O"], "--image-dir: did you"),
        (["--image_dir", "I", "--mask-dir", "M", "--output_dir", "O"], "--mask-dir: did you"),
        (["--image_dir", "I", "--mask_dir", "M", "--output", "O"], "--output: did you mean"),
        (["--data-dir", "D", "--output_dir", "O"], "--data-dir: did you mean --data_dir?"),
    ],
)
def test_a_misspelt_required_flag_is_named_not_reported_missing(argv, message, capsys):
    assert main(["prepare", *argv]) == 2
    err = capsys.readouterr().err
    assert f"unknown flag {message}" in err and "required" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("inside", ["images", "masks", "images/sub/out", "link"])
def test_output_inside_an_input_folder_is_refused(sample_dataset, tmp_path, capsys, inside):
    """The next run would list the shards, metadata and index as unrecognised input files."""
    data = tmp_path / "data"
    shutil.copytree(Path(sample_dataset.image_dir).parent, data)
    (tmp_path / "link").symlink_to(data / "images")  # outside by name, inside in fact
    out = (tmp_path / "link" / "out") if inside == "link" else (data / inside / "out")
    before = sorted(p.relative_to(tmp_path) for p in data.rglob("*"))
    code = main(
        ["prepare", "--image_dir", str(data / "images"), "--mask_dir", str(data / "masks")]
        + ["--output_dir", str(out), *RUNNER_ARGS]
    )
    err = capsys.readouterr().err
    assert code == 2 and "lies inside --" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.relative_to(tmp_path) for p in data.rglob("*")) == before  # nothing written
    assert main(["prepare", "--data_dir", str(data), "--output_dir", str(data / "out")]) == 2
    assert "lies inside --data_dir" in capsys.readouterr().err


def test_summary_notes_a_split_left_empty(sample_dataset, prepared, tmp_path):
    """A validation split asked for but empty fails every reader later: say so at once."""
    from beam_pipeline.commands.summary import summary_lines
    from beam_pipeline.launch.plan import make_plan

    info = dataset_info.load(prepared[0])
    plan = make_plan(job_args(sample_dataset, tmp_path / "o", "--dry_run"))
    assert "got no examples" not in "\n".join(summary_lines(info, plan))
    empty = dataclasses.replace(info.splits["validation"], num_examples=0, shards=())
    info = dataclasses.replace(info, splits={**info.splits, "validation": empty})
    (note,) = [line for line in summary_lines(info, plan) if "no ex" in line]
    assert "validation got no examples: --validation_size 0.1 of" in note
    train_only = make_plan(
        job_args(sample_dataset, tmp_path / "o", "--validation_size", "0", "--dry_run")
    )
    assert "got no examples" not in "\n".join(summary_lines(info, train_only))


def test_data_dir_holding_two_folders_names_them(sample_dataset, tmp_path, capsys):
    root = Path(sample_dataset.image_dir).parent  # images/ and masks/ side by side
    code = main(["prepare", "--data_dir", str(root), "--output_dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"pass --image_dir {root}/images --mask_dir {root}/masks" in err
