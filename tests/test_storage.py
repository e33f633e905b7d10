import os

import pytest

from transforms import files


def test_missing_local_folder_has_no_files(tmp_path):
    assert files.list_dir(str(tmp_path / "nope")) == []
    assert files.has_files(str(tmp_path / "nope")) is False


def test_read_bytes_refuses_a_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(files.NotAFileError):
        files.read_own(str(fifo))  # returns at once: a FIFO is never opened blocking
