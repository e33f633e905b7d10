"""Runs inside a writer process; imports nothing itself, so it sees what the pool loaded."""

import os
import sys
import time


def whereabouts() -> tuple[int, dict[str, bool]]:
    """This process's pid, and which of the modules that matter to a writer it has loaded."""
    modules = ("apache_beam", "tensorflow", "beam_pipeline.job.shard_work")
    return os.getpid(), {name: name in sys.modules for name in modules}


def sleep_and_report(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()
