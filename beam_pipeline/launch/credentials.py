"""Google Cloud credentials for the launcher's gs:// access: an instant anonymous path to a
storage emulator, and a one-line error within seconds when real credentials are missing.

Nothing here contacts a Google service beyond google.auth's own credential search.
"""

from __future__ import annotations

from beam_pipeline.errors import UsageError
from beam_pipeline.runtime.beam_gcs import use_storage_emulator_if_set
from transforms import files

__all__ = ["check_credentials", "use_storage_emulator_if_set"]


def check_credentials() -> None:
    """gs:// needs Application Default Credentials: say so in one line within seconds, instead
    of Beam's minutes of retries. With a storage emulator, nothing is needed."""
    if use_storage_emulator_if_set():
        return
    problem = files.missing_credentials()
    if problem is not None:
        raise UsageError(problem)
