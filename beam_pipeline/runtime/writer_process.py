"""Imported once by the writer pool's fork server, so every writer process starts warm.

The fork server only forks; when the job ends it has nothing to flush, so it leaves at
once instead of spending about a second tearing TensorFlow down.
"""

import atexit
import os

import tensorflow  # noqa: F401 - what every shard writer needs, loaded before forking

import beam_pipeline.job.shard_work  # noqa: F401

atexit.register(os._exit, 0)
