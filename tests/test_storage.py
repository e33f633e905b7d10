import pytest
from apache_beam.io.filesystem import BeamIOError
from google.api_core.exceptions import Forbidden, NotFound

from beam_pipeline.runtime import storage


def test_missing_local_folder_has_no_files(tmp_path):
    assert storage.list_dir(str(tmp_path / "nope")) == []
    assert storage.has_files(str(tmp_path / "nope")) is False


@pytest.mark.parametrize(
    "inner, missing",
    [
        (NotFound("no such bucket"), True),
        (BeamIOError("List operation failed", {"gs://b/x": NotFound("gone")}), True),
        (Forbidden("no permission"), False),  # must surface, not read as "empty"
        (BeamIOError("List operation failed", {"gs://b/x": ConnectionError()}), False),
    ],
)
def test_only_not_found_counts_as_nothing_there(inner, missing):
    error = BeamIOError("Match operation failed", {"gs://b/x/**": inner})
    assert storage._is_not_found(error) is missing
