"""Runs inside a writer process; imports nothing itself, so it sees what the pool loaded."""

import os
import sys


def whereabouts() -> tuple[int, bool, bool]:
    return os.getpid(), "apache_beam" in sys.modules, "tensorflow" in sys.modules
