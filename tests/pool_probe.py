"""Runs inside a writer process; imports nothing itself, so it sees what the pool loaded."""

import os
import sys
import time


def whereabouts() -> tuple[int, bool, bool, bool]:
    """(pid, Beam loaded, TensorFlow loaded, the shard-writing code loaded)."""
    modules = sys.modules
    return (
        os.getpid(),
        "apache_beam" in modules,
        "tensorflow" in modules,
        "beam_pipeline.job.shard_work" in modules,
    )


def sleep_and_report(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()
