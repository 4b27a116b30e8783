"""An .npz archive's arrays of plain dtypes, each member read in one call; or only their shapes and dtypes.

np.load reads a compressed member in chunks of 256 KiB, each chunk a few Python calls. In a trial's worker the
data are read on a thread beside the worker's imports (gridbench.trial.steps.start_data_read), and every chunk
then waits for the GIL: on 2 cores, with a thread running Python beside it, mnist's read took 5.75-6.17 s
against 0.33-0.35 s read here (docs/results/around-training/npz-read-2core/data-read.txt). Here zipfile
inflates each member in one call, which zlib does without the GIL, and the array is a view of the inflated
bytes: the same values as np.load's.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Iterable

import numpy as np

HEADER_BYTES = 4096  # .npy's header is padded to a multiple of 64 bytes; numpy writes at most a few hundred


def read_arrays(path: Path | str, keys: Iterable[str]) -> dict[str, np.ndarray]:
    """The archive's arrays named `keys`, read-only; raises KeyError, ValueError or zipfile's errors if it cannot.

    Only arrays of plain dtypes: an array of objects (a pickle) is refused, as np.load(allow_pickle=False) does.
    """
    arrays = {}
    with zipfile.ZipFile(path) as archive:
        for key in keys:
            raw = archive.read(f"{key}.npy")  # inflated in one call; its CRC checked
            header = io.BytesIO(raw[:HEADER_BYTES])
            shape, fortran_order, dtype = _header(header, key)
            count = int(np.prod(shape, dtype=np.int64))
            flat = np.frombuffer(raw, dtype=dtype, count=count, offset=header.tell())
            arrays[key] = flat.reshape(shape[::-1]).T if fortran_order else flat.reshape(shape)
    return arrays


def array_headers(path: Path | str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Each array's shape and dtype, from the members' headers alone (nothing else is inflated or checked)."""
    with zipfile.ZipFile(path) as archive:
        headers = {}
        for name in archive.namelist():
            if name.endswith(".npy"):
                with archive.open(name) as member:
                    shape, _, dtype = _header(io.BytesIO(member.read(HEADER_BYTES)), name)
                headers[name.removesuffix(".npy")] = (shape, dtype)
        return headers


def _header(stream: io.BytesIO, key: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(stream)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran_order, dtype = read(stream)
    if dtype.hasobject:
        raise ValueError(f"{key} holds Python objects (a pickle), which are not read")
    return shape, fortran_order, dtype
