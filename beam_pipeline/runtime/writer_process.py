"""Imported once by the writer pool's fork server, so every writer process starts warm.

The fork server only forks; when the job ends it has nothing to flush, so it leaves at
once instead of tearing its imports down.
"""

import atexit
import gc
import os
import signal

from beam_pipeline.runtime import heap

# multiprocessing's fork server shields itself from Ctrl-C only after its preload; during
# the record code's import a Ctrl-C (sent to the whole foreground group) would print a
# traceback. Leave quietly instead: the launcher reports the interruption.
signal.signal(signal.SIGINT, lambda *_: os._exit(130))


heap.keep_freed_heap()  # in the fork server: every writer it forks inherits the setting

import beam_pipeline.job.image_hashes  # noqa: E402, F401
import beam_pipeline.job.shard_work  # noqa: E402, F401

# What the fork server imported is shared, copy-on-write, with every writer; a writer's
# garbage collection would write to each of those objects' headers and so copy their
# pages. Frozen, the collector leaves them alone (they live as long as the process anyway).
gc.freeze()

atexit.register(os._exit, 0)
