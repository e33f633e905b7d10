import os

import pytest

from beam_pipeline.runtime import storage


def test_missing_local_folder_has_no_files(tmp_path):
    assert storage.list_dir(str(tmp_path / "nope")) == []
    assert storage.has_files(str(tmp_path / "nope")) is False


def test_read_bytes_refuses_a_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(storage.NotAFileError):
        storage.read_bytes(str(fifo))  # returns at once: a FIFO is never opened blocking
