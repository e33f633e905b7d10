"""Runs inside a writer process; imports nothing itself, so it sees what the pool loaded."""

import os
import sys
import time


def whereabouts() -> tuple[int, bool, bool]:
    return os.getpid(), "apache_beam" in sys.modules, "tensorflow" in sys.modules


def sleep_and_report(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()
