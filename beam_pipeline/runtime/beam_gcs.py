"""Beam's own gs:// client, settled for a storage emulator: the launcher (launch/credentials.py)
and every worker process that reads gs:// through Beam's file system (job/listing.py) call
this, since Beam's credential cache is per process.
"""

from __future__ import annotations

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
            "beam_pipeline/runtime/beam_gcs.py"
        )
    with cache._credentials_lock:
        cache._credentials = None
        cache._credentials_init = True
    return True
