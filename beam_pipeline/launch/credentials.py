"""Google Cloud credentials for the launcher's gs:// access: an instant anonymous path to a
storage emulator, and a one-line error within seconds when real credentials are missing.

Nothing here contacts a Google service beyond google.auth's own credential search.
"""

from __future__ import annotations

from beam_pipeline.errors import UsageError
from beam_pipeline.runtime.beam_gcs import use_storage_emulator_if_set
from transforms import files

__all__ = ["check_credentials", "use_storage_emulator_if_set"]


def check_credentials(path: str) -> None:
    """gs:// needs Application Default Credentials and a Cloud Storage that answers: say
    which is missing in one line within seconds, instead of minutes of retries. With a
    storage emulator, no credentials are needed. `path`: the first gs:// path the run reads."""
    problem = None if use_storage_emulator_if_set() else files.missing_credentials()
    problem = problem or files.unreachable(path)
    if problem is not None:
        raise UsageError(problem)
