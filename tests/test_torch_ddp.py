"""shard_reader.torch under torchrun: ranks from a real 2-process gloo group, and the
training examples (single process and 2 ranks) run with a falling, finite loss."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from shard_reader.source import RecordSource  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "tests" / "helpers" / "ddp_probe.py"
EXAMPLES = ROOT / "examples"


def torchrun(script: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node", "2", str(script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done


def test_ranks_come_from_the_process_group(indexed, tmp_path):
    out = tmp_path / "ranks.json"
    torchrun(PROBE, str(indexed), str(out))
    ranks = json.loads(out.read_text())
    assert [(answer["rank"], answer["world_size"]) for answer in ranks] == [(0, 2), (1, 2)]
    source = RecordSource(indexed, "train")
    everything = {source[i]["key"] for i in range(len(source))}
    first, second = ranks[0]["keys"], ranks[1]["keys"]
    assert len(first) == len(second) == len(everything) // 2  # equal parts
    assert not set(first) & set(second)  # disjoint: not the same records twice
    evaluation = ranks[0]["evaluation"] + ranks[1]["evaluation"]
    assert sorted(evaluation) == sorted(everything)  # uneven_ranks: each record once
    assert [answer["disagreeing"] for answer in ranks][0] is None  # rank 0 said rank=0
    assert "disagrees with torch.distributed" in ranks[1]["disagreeing"]
    cores = len(os.sched_getaffinity(0))
    for answer in ranks:
        assert answer["local_world_size"] == "2"
        assert answer["default_workers"] == max(1, cores // 2)


def losses(stdout: str) -> list[float]:
    return [float(line.split()[-1]) for line in stdout.splitlines() if line.startswith("step ")]


def falls(values: list[float]) -> bool:
    third = max(1, len(values) // 3)
    return sum(values[-third:]) / third < sum(values[:third]) / third


@pytest.mark.parametrize("output", ["binary", "classes"])
def test_train_torch_example_loss_is_finite_and_falls(indexed, class_outputs, output):
    data = indexed if output == "binary" else class_outputs["8-bit"].directory
    command = [sys.executable, str(EXAMPLES / "train_torch.py"), str(data), "--steps", "12"]
    command += ["--batch_size", "4", "--image_size", "64", "48"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    values = losses(done.stdout)
    assert len(values) == 12 and all(math.isfinite(value) for value in values)
    assert all(value >= 0 for value in values)  # BCE on class ids once gave negatives
    assert falls(values), values
    assert "resumed" in done.stdout


def test_ddp_example_trains_on_2_ranks_and_evaluates_every_record(indexed):
    done = torchrun(EXAMPLES / "train_torch_ddp.py", str(indexed), "--steps", "12",
                    "--image_size", "64", "48")  # fmt: skip
    values = losses(done.stdout)
    assert len(values) == 12 and all(math.isfinite(value) for value in values)
    assert falls(values), values
    evaluation = [line for line in done.stdout.splitlines() if line.startswith("eval ")]
    assert len(evaluation) == 1  # rank 0 alone prints
    records = int(evaluation[0].split()[2])
    assert records == len(RecordSource(indexed, "validation"))
    assert math.isfinite(float(evaluation[0].split()[4]))
