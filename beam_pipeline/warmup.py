"""Start importing TensorFlow in the background as soon as a worker gets its first work.

TensorFlow takes ~3 s to import and only the shard-writing stage needs it; a local worker
process otherwise sits idle through the listing and planning stages. Importing it on a
side thread overlaps the two. Later `import tensorflow` statements simply wait for it.
"""

from __future__ import annotations

import importlib
import threading

_started = threading.Event()


def start_tensorflow_import() -> None:
    if _started.is_set():
        return
    _started.set()
    threading.Thread(
        target=importlib.import_module, args=("tensorflow",), name="tf-warmup", daemon=True
    ).start()
