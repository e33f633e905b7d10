"""MATLAB mask files as bytes: v5 through scipy, v7.3 (HDF5) through h5py."""

from __future__ import annotations

import io

import h5py
import numpy as np
import scipy.io

MAT_V73_HEADER = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created by: segprep tests".ljust(128)


def mat_bytes(**variables) -> bytes:
    """A compressed MATLAB v5 file holding `variables`."""
    out = io.BytesIO()
    scipy.io.savemat(out, variables, do_compression=True)
    return out.getvalue()


def mat_v73_bytes(mask: np.ndarray) -> bytes:
    """MATLAB v7.3: HDF5 behind a 512-byte text header, arrays stored column-major."""
    out = io.BytesIO()
    with h5py.File(out, "w", userblock_size=512) as handle:
        handle.create_dataset("mask", data=mask.T)
    data = bytearray(out.getvalue())
    data[:128] = MAT_V73_HEADER
    return bytes(data)


def nested_struct_mat(depth: int) -> bytes:
    """A compressed MAT v5 file whose `mask` is a struct nested `depth` levels deep
    (mask.a.a.a... = 1.0), built element by element: scipy's writer recurses in Python."""
    import struct
    import zlib

    def element(kind: int, data: bytes) -> bytes:
        return struct.pack("<II", kind, len(data)) + data + b"\0" * (-len(data) % 8)

    def level(name: bytes, child: int) -> bytes:  # a 1x1 struct with one field `a`
        flags = element(6, struct.pack("<II", 2, 0)) + element(5, struct.pack("<ii", 1, 1))
        fields = struct.pack("<HHi", 5, 4, 8) + element(1, b"a".ljust(8, b"\0"))
        return flags + element(1, name) + fields + struct.pack("<II", 14, child)

    inner = element(6, struct.pack("<II", 6, 0)) + element(5, struct.pack("<ii", 1, 1))
    inner += element(1, b"") + element(9, struct.pack("<d", 1.0))
    sizes = [len(inner)]
    for _ in range(depth):
        sizes.append(len(level(b"", 0)) + sizes[-1])
    body = b"".join(level(b"", sizes[i]) for i in range(depth - 1, -1, -1)) + inner
    top = level(b"mask", sizes[depth])
    variable = struct.pack("<II", 14, len(top) + sizes[depth]) + top + body
    header = b"MATLAB 5.0 MAT-file, nested struct".ljust(116) + bytes(8) + b"\x00\x01IM"
    packed = zlib.compress(variable)
    return header + struct.pack("<II", 15, len(packed)) + packed
