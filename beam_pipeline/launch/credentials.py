"""Google Cloud credentials for the launcher's gs:// access: an instant anonymous path to a
storage emulator, and a one-line error within seconds when real credentials are missing.

Nothing here contacts a Google service beyond google.auth's own credential search.
"""

from __future__ import annotations

from beam_pipeline.errors import UsageError
from transforms import files
from transforms.files import emulator_host


def use_storage_emulator_if_set() -> bool:
    """With STORAGE_EMULATOR_HOST set, make Beam's gs:// client anonymous and instant.

    Beam 2.77 builds every GCS client in gcsio.create_storage_client(), which first asks
    auth.get_service_credentials(). Without Application Default Credentials that call retries
    google.auth.default() with exponential back-off (15-40 s) before it falls back to an
    anonymous client. An emulator needs no credentials, so we settle Beam's once-per-process
    credential cache as "no credentials": create_storage_client() then returns
    storage.Client.create_anonymous_client(), which google-cloud-storage points at the
    emulator. The Dataflow client takes the same cache, so a template build against the
    emulator stays anonymous too. Returns True when the emulator is in use.
    """
    if emulator_host() is None:
        return False
    from apache_beam.internal.gcp import auth

    cache = getattr(auth, "_Credentials", None)
    if cache is None or not hasattr(cache, "_credentials_init"):
        raise RuntimeError(
            "this Beam version keeps GCS credentials elsewhere: update "
            "beam_pipeline/launch/credentials.py"
        )
    with cache._credentials_lock:
        cache._credentials = None
        cache._credentials_init = True
    return True


def check_credentials() -> None:
    """gs:// needs Application Default Credentials: say so in one line within seconds, instead
    of Beam's minutes of retries. With a storage emulator, nothing is needed."""
    if use_storage_emulator_if_set():
        return
    problem = files.missing_credentials()
    if problem is not None:
        raise UsageError(problem)
