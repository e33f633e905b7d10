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


def _outcome(check, data: bytes, depth: int) -> str:
    try:
        check(data, depth)
    except JsonShapeError as error:
        return str(error)
    return "ok"


def _hostile_json(rng: random.Random) -> bytes:
    """Text near every cap of the shape check: brackets around the depth, bare runs and
    escapes around a number's 100 characters, quotes unclosed, stray closers, bad UTF-8."""
    pieces = [bytes([byte]) for byte in b'[{]}",: \n\\'] + [b'\\"', b"\\\\", b"\xc3\xa9"]
    pieces += [b"x" * 98, b"1" * rng.choice([1, 50, 99, 100, 101])]
    if rng.random() < 0.1:
        pieces += [b"\xff", b"\xed\xa0\x80"]
    return b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 60)))


def test_the_whole_text_check_refuses_exactly_what_the_scan_refuses():
    from transforms.bounded_text import check_json_bytes

    rng = random.Random(7)
    texts = [_hostile_json(rng) for _ in range(3000)]
    texts += [b"[" * n + b"]" * n for n in (31, 32, 33)]
    texts += [b'{"k": "' + b"[" * 40 + b'"}', b'{"k": ' + b"9" * 100 + b"}"]
    texts += [b'{"k": ' + b"9" * 101 + b"}", b'{"k": "' + b"9" * 500 + b'"}']
    refused = 0
    for n, text in enumerate(texts):
        depth = 32 if n >= 3000 else (2, 4, 32)[n % 3]
        scanned = _outcome(lambda data, depth: check_shape([data], "s", depth), text, depth)
        refused += scanned != "ok"
        assert _outcome(lambda data, depth: check_json_bytes(data, "s", depth), text, depth) == (
            scanned
        ), text
    assert 300 < refused < len(texts) - 300  # both sides of every cap were tried


def test_an_ordinary_side_file_line_is_checked_without_the_per_byte_scan(monkeypatch):
    """A million rejects.jsonl lines must not each pay the scan's set-up (minutes)."""
    from transforms import bounded_text, json_shape

    def scan(*_):
        raise AssertionError("scanned")

    monkeypatch.setattr(bounded_text.JsonReader, "_scan", scan)
    line = json.dumps({"key": "k" * 200, "reason": "image_empty", "image": "/d/" + "i" * 300})
    assert json_shape.loads(line, "rejects.jsonl line 1")["reason"] == "image_empty"
    with pytest.raises(AssertionError, match="scanned"):  # what it cannot prove is scanned
        json_shape.loads('{"n": ' + "1" * 101 + "}", "rejects.jsonl line 1")


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
