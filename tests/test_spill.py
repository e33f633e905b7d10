"""The bounded-memory pieces of the launcher: external sort, record files, JSON shape."""

from __future__ import annotations

import io
import json
import random

import pytest

from transforms import spill
from transforms.format.tfrecord import CorruptRecordError
from transforms.json_shape import JsonShapeError, check_shape
from transforms.pairing import Pair, Role, SourceFile, keyed_row, pair_sorted


def test_external_sort_spills_merges_in_rounds_and_keeps_every_row(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "MERGE_FAN_IN", 3)  # 10+ runs: two merge rounds
    rows = [(random.Random(n).random(), n) for n in range(5000)]
    sort = spill.ExternalSort(str(tmp_path), "t", chunk_bytes=2000)
    for key in rows:
        sort.add(key, {"value": key[1]})
    assert len(list(tmp_path.iterdir())) > 9  # it did spill
    out = list(sort.sorted())
    assert [key for key, _ in out] == sorted(rows)
    assert all(value == {"value": key[1]} for key, value in out)


def test_record_files_roll_over_and_refuse_an_oversized_record(tmp_path):
    files = spill.RecordFiles(str(tmp_path / "r"), per_file=2)
    for n in range(5):
        files.write(b"x" * n)
    paths = files.close()
    assert len(paths) == 3 and files.records == 5
    read = []
    for path in paths:
        with open(path, "rb") as handle:
            read += spill.read_records(handle, path, len(open(path, "rb").read()), 10)
    assert read == [b"x" * n for n in range(5)]
    data = open(paths[2], "rb").read()
    with pytest.raises(CorruptRecordError, match="more than 3"):
        list(spill.read_records(io.BytesIO(data), "r", len(data), 3))


def test_streamed_pairing_pairs_each_key_and_rejects_the_rest():
    files = [
        (Role.IMAGE, "a", SourceFile("/i/a.jpg", 1)),
        (Role.MASK, "a", SourceFile("/m/a.png", 1)),
        (Role.IMAGE, "b", SourceFile("/i/b.jpg", 1)),
        (Role.IMAGE, "b", SourceFile("/i/b.png", 1)),
        (Role.MASK, "c", SourceFile("/m/c.png", 1)),
    ]
    rows = sorted(keyed_row(key, role, n, source) for n, (role, key, source) in enumerate(files))
    streamed = list(pair_sorted(rows))
    assert [o.key for o in streamed if isinstance(o, Pair)] == ["a"]
    assert [o.key for o in streamed if not isinstance(o, Pair)] == ["b", "c"]


def _chunks(data: bytes, size: int):
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 1000])
def test_json_shape_ignores_brackets_in_strings_across_chunk_edges(size):
    text = json.dumps({"a": ["[[[[", '\\"{{{{', {"b": "]]]]\\"}], "c": '"[['}).encode()
    check_shape(_chunks(text, size), "s", 3)
    with pytest.raises(JsonShapeError, match="s: nested deeper than 2 levels"):
        check_shape(_chunks(text, size), "s", 2)


def test_json_shape_names_the_first_bad_utf8_byte():
    with pytest.raises(JsonShapeError, match=r"s: not UTF-8 text \(byte 9"):
        check_shape(_chunks(b'["abc", "\xff"]', 4), "s", 4)


def test_a_killed_processs_temporary_folders_are_removed_by_the_next(tmp_path, monkeypatch):
    """SIGKILL leaves a process's spill folder behind; the next process to make one removes
    every folder of a process that is gone, and never a live process's."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile

    from transforms import spill

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    code = (
        "import os, sys, time; sys.path.insert(0, sys.argv[1]);"
        "from transforms import spill; folder = spill.temporary_folder('listing');"
        "open(os.path.join(folder.name, 'rows'), 'w').write('x'); print(folder.name, flush=True);"
        "sys.stdin.read()"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, os.getcwd()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    orphan = child.stdout.readline().strip()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdin.close()
    child.stdout.close()
    assert os.path.isdir(orphan)  # SIGKILL left it
    live = tmp_path / f"segprep-coco-{os.getpid()}-keep"
    live.mkdir()
    foreign = tmp_path / "segprep-notes"  # not a spill folder's name: never touched
    foreign.mkdir()
    with spill.temporary_folder("listing") as mine:
        assert os.path.isdir(mine)
    assert not os.path.exists(orphan)
    assert live.is_dir() and foreign.is_dir()
