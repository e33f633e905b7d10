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
