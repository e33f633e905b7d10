"""TFRecord framing: length, masked CRC-32C of the length, payload, masked CRC-32C of it.

The CRC is google-crc32c's (the C library TensorFlow and Beam use too); only the framing
itself, a dozen lines, is written here, so writing and reading shards needs no TensorFlow.
A frame written here is byte for byte what `tf.io.TFRecordWriter` writes.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import google_crc32c

from transforms.files import open_regular

SUFFIX = ".tfrecord"
# Bytes the framing adds to each record: uint64 length, its masked CRC, the payload's CRC.
FRAME_OVERHEAD = 16
_CRC_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


class CorruptRecordError(OSError):
    """A record's bytes fail their format's checks (TFRecord: length and CRCs; ArrayRecord:
    chunk hashes, transforms/format/array_record.py raises it too), or do not decode."""


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C: the CRC rotated right by 15 bits plus a constant.

    TFRecord masks CRCs so that a CRC of data that itself holds CRCs stays well mixed.
    """
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def frame(payload: bytes) -> bytes:
    """One record as TFRecord stores it."""
    header = struct.pack("<Q", len(payload))
    return b"".join(
        (header, _FOOTER.pack(masked_crc(header)), payload, _FOOTER.pack(masked_crc(payload)))
    )


def unframe(framed: bytes, where: str) -> bytes:
    """The payload of exactly one frame, after checking its length and both CRCs."""
    if len(framed) < FRAME_OVERHEAD:
        raise CorruptRecordError(f"{where}: {len(framed)} bytes, shorter than a frame")
    length, length_crc = _HEADER.unpack_from(framed)
    if masked_crc(framed[:8]) != length_crc:
        raise CorruptRecordError(f"{where}: length CRC mismatch (corrupt shard)")
    if length + FRAME_OVERHEAD != len(framed):
        raise CorruptRecordError(
            f"{where}: the frame holds {length} bytes, the index says "
            f"{len(framed) - FRAME_OVERHEAD} (stale index)"
        )
    payload = framed[12 : 12 + length]
    (payload_crc,) = _FOOTER.unpack_from(framed, 12 + length)
    if masked_crc(payload) != payload_crc:
        raise CorruptRecordError(f"{where}: data CRC mismatch (corrupt shard)")
    return payload


def read_frames(
    handle: BinaryIO, where: str, size: int, max_length: int | None = None
) -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of every frame of a stream of `size` bytes, each CRC-checked.

    A length that runs past `size` (or `max_length`) is refused before anything is
    allocated for it.
    """
    offset = 0
    while offset < size:
        length = _length(handle.read(12), offset, size, where)
        if max_length is not None and length > max_length:
            raise CorruptRecordError(
                f"{where}: a {length}-byte record at byte {offset}, more than {max_length}"
            )
        payload = handle.read(length)
        footer = handle.read(4)
        if len(payload) != length or len(footer) != 4:
            raise CorruptRecordError(f"{where}: truncated record at byte {offset}")
        if masked_crc(payload) != _FOOTER.unpack(footer)[0]:
            raise CorruptRecordError(f"{where}: data CRC mismatch at byte {offset}")
        yield offset, payload
        offset += length + FRAME_OVERHEAD


def check_lengths(fd: int, size: int, where: str) -> int:
    """Walk the frame headers of a local shard of `size` bytes, 12 bytes read per record: a
    length whose CRC fails or that runs past the end is refused before a reader that trusts
    it reads the frame (TensorFlow's TFRecordDataset allocates the stated length). Returns
    the number of frames: a length forged to end exactly at the end of the file, or at a
    later frame's start, chains like a true one, and only the count the caller expects
    tells it from one."""
    offset = frames = 0
    while offset < size:
        offset += _length(os.pread(fd, 12, offset), offset, size, where) + FRAME_OVERHEAD
        frames += 1
    return frames


def _length(header: bytes, offset: int, size: int, where: str) -> int:
    """The payload length of the frame at `offset` whose 12-byte header is `header`, checked
    by its CRC and against the end of a file of `size` bytes."""
    if len(header) < 12:
        raise CorruptRecordError(f"{where}: truncated frame header at byte {offset}")
    length, length_crc = _HEADER.unpack(header)
    if masked_crc(header[:8]) != length_crc:
        raise CorruptRecordError(f"{where}: length CRC mismatch at byte {offset}")
    if offset + length + FRAME_OVERHEAD > size:
        raise CorruptRecordError(
            f"{where}: a {length}-byte record at byte {offset} runs past the end"
        )
    return length


# copy_file_range refused by the filesystem (some NFS, FUSE, 9p) or the kernel: read and write
_NO_KERNEL_COPY = (errno.EXDEV, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENOTSUP)


class Writer:
    """Appends framed records to a new local file; a context manager, like TFRecordWriter.

    copy_frames appends frames of another local TFRecord file byte for byte (a frame holds
    its own length and CRCs), copied in the kernel (copy_file_range), adjacent frames of one
    file in one call."""

    def __init__(self, path: str) -> None:
        self._handle = open(path, "xb")  # noqa: SIM115 - closed in close()
        self._run: list[int] | None = None  # [fd, start, end] of frames still to copy

    def write(self, payload: bytes) -> None:
        self._copy_run()
        self._handle.write(frame(payload))

    def copy_frames(self, source_fd: int, offset: int, length: int) -> None:
        run = self._run
        if run is not None and run[0] == source_fd and run[2] == offset:
            run[2] += length
            return
        self._copy_run()
        self._run = [source_fd, offset, offset + length]

    def _copy_run(self) -> None:
        if self._run is None:
            return
        source_fd, offset, end = self._run
        self._run = None
        self._handle.flush()
        target = self._handle.fileno()
        while offset < end:
            try:
                copied = os.copy_file_range(source_fd, target, end - offset, offset)
            except OSError as error:
                if error.errno not in _NO_KERNEL_COPY:
                    raise
                copied = os.write(target, os.pread(source_fd, min(end - offset, 8 << 20), offset))
            if copied == 0:
                raise CorruptRecordError(f"a frame to copy runs past its file's end at {offset}")
            offset += copied
        self._handle.seek(0, os.SEEK_END)

    def close(self) -> None:
        try:
            self._copy_run()
        finally:
            self._handle.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RandomReader:
    """Record number -> payload of one local shard: one pread of exactly the record's frame,
    located by the shard's record index (`frames`: (offset, framed length) per record), then
    its two CRC checks. pread keeps no file position, so threads share the descriptor."""

    def __init__(self, path: str, size: int, frames: Sequence[tuple[int, int]]) -> None:
        self._name = os.path.basename(path)
        self._frames = frames
        # A FIFO or device in a shard's place is refused, never blocked on or read.
        with open_regular(path) as handle:
            self._fd = os.dup(handle.fileno())  # not inheritable, as os.open's O_CLOEXEC
        actual = os.fstat(self._fd).st_size
        if actual != size:
            self.close()
            raise CorruptRecordError(
                f"{path}: {actual} bytes, metadata.json says {size} (changed file?)"
            )

    def read(self, record: int) -> bytes:
        offset, length = (int(value) for value in self._frames[record])
        framed = os.pread(self._fd, length, offset)
        where = f"{self._name} record {record}"
        if len(framed) != length:
            raise CorruptRecordError(f"{where}: file ends before the frame the index gives")
        return unframe(framed, where)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
